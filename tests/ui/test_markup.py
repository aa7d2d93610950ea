"""The morning report as HTML: escaped first, links to lessons and episodes."""

from __future__ import annotations

from openmemory_local.ui.markup import report_html


def test_report_markdown_becomes_safe_html():
    markdown = ("# Open Memory: morning report\n\nMade today: 1 learned.\n\n## Learned\n\n"
                "- lesson 7 (3 sessions): `git push` failed: \"<script>alert(1)</script>\"\n"
                "  - and a nested line\n- lesson 12 met by episode #57 (`a & b`)\n\nThe end.\n")
    html = str(report_html(markdown))
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert html.startswith("<h2>Open Memory: morning report</h2><p>Made today: 1 learned.</p><h3>Learned</h3><ul><li>")
    assert '<a href="/lessons/7">lesson 7</a>' in html and '<a href="/episodes/57">episode #57</a>' in html
    assert "<code>git push</code>" in html and "<code>a &amp; b</code>" in html
    assert "<ul><li>and a nested line</li></ul></li><li>" in html
    assert html.endswith("</li></ul><p>The end.</p>")
    assert html.count("<ul>") == html.count("</ul>") == 2
