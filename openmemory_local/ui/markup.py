"""The morning report's Markdown as HTML: the small subset :mod:`openmemory_local.render.report` writes.

Headings (``#``, ``##``), list items (``- ``, indented ones nested once), paragraphs and
inline code; ``lesson N`` and ``episode #N`` become links to their pages. Everything is
escaped first: the text comes from transcripts, so nothing in it can become markup.
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

__all__ = ["report_html"]

_CODE = re.compile(r"`([^`]+)`")
_LESSON = re.compile(r"\blesson (\d+)\b")
_EPISODE = re.compile(r"\bepisode #(\d+)\b")


def _inline(text: str) -> str:
    out = []
    pos = 0
    for match in _CODE.finditer(text):
        out.append(_links(str(escape(text[pos:match.start()]))))
        out.append(f"<code>{escape(match.group(1))}</code>")
        pos = match.end()
    out.append(_links(str(escape(text[pos:]))))
    return "".join(out)


def _links(html: str) -> str:
    html = _LESSON.sub(lambda m: f'<a href="/lessons/{m.group(1)}">lesson {m.group(1)}</a>', html)
    return _EPISODE.sub(lambda m: f'<a href="/episodes/{m.group(1)}">episode #{m.group(1)}</a>', html)


def report_html(markdown: str) -> Markup:
    """``markdown`` (a morning report) as safe HTML."""
    html: list[str] = []
    depth = 0  # open <ul> levels
    paragraph: list[str] = []

    def close_paragraph() -> None:
        if paragraph:
            html.append("<p>" + _inline(" ".join(paragraph)) + "</p>")
            paragraph.clear()

    def close_lists(to: int = 0) -> None:
        nonlocal depth
        while depth > to:
            html.append("</li></ul>")
            depth -= 1

    for raw in markdown.splitlines():
        line = raw.rstrip()
        stripped = line.lstrip()
        if not stripped:
            close_paragraph()
            continue
        if stripped.startswith("#"):
            close_paragraph()
            close_lists()
            level = len(stripped) - len(stripped.lstrip("#"))
            tag = "h2" if level <= 1 else "h3"
            html.append(f"<{tag}>{_inline(stripped.lstrip('#').strip())}</{tag}>")
            continue
        if stripped.startswith("- "):
            close_paragraph()
            level = 2 if len(line) - len(stripped) >= 2 else 1
            if level > depth:
                while depth < level:
                    html.append("<ul><li>")
                    depth += 1
            else:
                close_lists(level)
                html.append("</li><li>")
            html.append(_inline(stripped[2:]))
            continue
        close_lists()
        paragraph.append(stripped)
    close_paragraph()
    close_lists()
    return Markup("".join(html))
