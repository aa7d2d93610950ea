"""The page in a real browser: Debian's Chromium, driven by Playwright, against a real
``openmemory ui`` process on a store made from the real spotter transcripts.

One browser and one server for the module. Screenshots of the main views are saved (the run
prints where).
"""

from __future__ import annotations

import html
import http.client
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .conftest import shoot

NO_UPSTREAM = "has no upstream branch"


def _push_lesson(world) -> dict:
    lessons = world.lessons()
    found = [l for l in lessons if "`git push`" in l["text"] and NO_UPSTREAM in l["text"]]
    assert len(found) == 1, [l["text"] for l in lessons]
    return found[0]


def _request(served, method: str, path: str, headers: dict | None = None, body: str | None = None):
    """A raw HTTP request to the page (any Host or Origin we like): (status, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        headers = {"Host": f"127.0.0.1:{served.port}", **(headers or {})}
        if body is not None:
            headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
            headers["Content-Length"] = str(len(body.encode()))
        for key, value in headers.items():
            conn.putheader(key, value)
        conn.endheaders(body.encode() if body is not None else None)
        response = conn.getresponse()
        return response.status, html.unescape(response.read().decode("utf-8", "replace"))
    finally:
        conn.close()


def _session(signed_in, served) -> tuple[str, str]:
    """The signed-in context's cookie header and CSRF token."""
    cookie = next(c for c in signed_in.cookies() if c["name"] == f"openmemory-ui-{served.port}")
    page = signed_in.new_page()
    try:
        page.goto(served.base + "/search")
        csrf = page.locator('meta[name="csrf-token"]').get_attribute("content")
    finally:
        page.close()
    return f"{cookie['name']}={cookie['value']}", csrf


def test_without_the_token_the_page_is_refused(browser, served, signed_in):
    context = browser.new_context()
    try:
        page = context.new_page()
        response = page.goto(served.base + "/")
        assert response.status == 403 and "the page's token" in page.content()
        assert page.goto(served.base + "/lessons/1").status == 403
        response = page.goto(served.base + "/?token=not-the-token")
        assert response.status == 403 and "not this page's" in page.content()
        shoot(page, "refused")
    finally:
        context.close()


def test_the_session_survives_a_second_tab_and_a_second_browser(browser, served, signed_in):
    """The printed link, already used by `signed_in`: a second tab of that browser, and a
    second browser (a context with no cookie), both get the page."""
    tab = signed_in.new_page()
    try:
        assert tab.goto(served.url).status == 200 and tab.url == served.base + "/"
        assert tab.goto(served.base + "/reports").status == 200
    finally:
        tab.close()
    context = browser.new_context()
    try:
        page = context.new_page()
        assert page.goto(served.url).status == 200 and page.url == served.base + "/"
        second = context.new_page()
        assert second.goto(served.base + "/").status == 200  # its own second tab, no token
        # typed as localhost, where this browser has no cookie: sent to 127.0.0.1, signed in there
        assert second.goto(f"http://localhost:{served.port}/reports").status == 200
        assert second.url == served.base + "/reports"
    finally:
        context.close()


def test_a_lesson_its_evidence_down_to_the_transcript_line_and_a_veto(signed_in, served, world):
    lesson = _push_lesson(world)
    name = lesson["file_name"]
    assert len(world.memory_files(name)) == 5  # rendered into the five worktrees of the family
    page = signed_in.new_page()
    page.goto(served.base + "/")
    # the lessons, by project; the no-upstream lesson among them
    family = page.locator("section.project", has_text="spotter-worktrees/*")
    row = family.locator("article.lesson", has_text=NO_UPSTREAM).filter(has_text="`git push`")
    assert row.count() == 1
    assert row.get_attribute("data-lesson") == str(lesson["id"])
    assert page.locator("#layer-commons").count() == 1  # the commons layer has its place
    shoot(page, "lessons")
    row.locator("a.id").click()
    page.wait_for_url(f"{served.base}/lessons/{lesson['id']}")
    assert NO_UPSTREAM in page.locator("#lesson-text").inner_text()
    assert page.locator("#record").inner_text().startswith(f"{lesson['record']['confirmed']} confirmed")
    assert "confirmed" in page.locator("#predictions").inner_text()
    # the strength plot: an SVG drawn from the lesson's events, loaded by the browser
    plot = page.locator("#strength img.plot")
    plot.scroll_into_view_if_needed()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=plot.element_handle())
    svg = page.request.get(served.base + plot.get_attribute("src"))
    assert svg.status == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert "<svg" in svg.text() and "prediction confirmed" in svg.text() and "strengthened" in svg.text()
    # the episodes it was learned from: three sessions, each a failed `git push`
    members = page.locator("#evidence tr.member")
    assert members.count() == 3
    assert all(NO_UPSTREAM in members.nth(i).inner_text() for i in range(3))
    shoot(page, "lesson-with-evidence")
    # one click further: the transcript line the first episode points to, read from the archive
    first = members.nth(0).locator("a.episode-link")
    episode_id = int(first.inner_text().lstrip("#"))
    first.click()
    page.wait_for_url(f"{served.base}/episodes/{episode_id}")
    target = page.locator("#target-line")
    assert NO_UPSTREAM in target.inner_text() and "[error]" in target.inner_text()
    shown = json.loads(page.locator("#raw-line").inner_text())
    cli = json.loads(world.cli("show", str(episode_id), "--raw", "--json").stdout)
    assert shown == json.loads(cli["raw"])  # exactly the line `openmemory show --raw` reads
    assert shown["sessionId"] == cli["session_id"] and target.inner_text().startswith(str(cli["source_line"]))
    shoot(page, "episode-transcript-line")
    # back to the lesson, and veto it: its file leaves every memory folder at once
    page.locator(".crumbs a", has_text=f"lesson #{lesson['id']}").click()
    page.wait_for_url(f"{served.base}/lessons/{lesson['id']}")
    page.locator("#veto").click()
    page.wait_for_url(f"{served.base}/lessons/{lesson['id']}")
    flash = page.locator(".flash").inner_text()
    assert flash == f"Lesson {lesson['id']} vetoed: never rendered again; its file was removed from 5 memory folders."
    assert world.memory_files(name) == []
    assert all(name not in p.read_text() for p in world.memory_files("MEMORY.md"))
    assert page.locator("h1 .badge.veto").count() == 1 and page.locator("#no-files").count() == 1
    assert [l["id"] for l in world.lessons() if l["vetoed"]] == [lesson["id"]]  # the store holds the veto
    shoot(page, "lesson-vetoed")
    page.goto(served.base + "/")
    assert "vetoed" in page.locator(f"#lesson-{lesson['id']}").inner_text()
    # unveto: written again
    page.goto(f"{served.base}/lessons/{lesson['id']}")
    page.locator("#unveto").click()
    page.wait_for_url(f"{served.base}/lessons/{lesson['id']}")
    assert page.locator(".flash").inner_text() == (f"Lesson {lesson['id']} unvetoed: written again into "
                                                   "5 memory folders.")
    assert len(world.memory_files(name)) == 5
    # the CLI's veto is the same code path: the same words, the same effect
    out = world.cli("veto", str(lesson["id"]), "--now", "2026-02-13T08:30:00Z").stdout.strip()
    assert out == flash and world.memory_files(name) == []
    assert world.cli("unveto", str(lesson["id"])).stdout.startswith(f"Lesson {lesson['id']} unvetoed")
    assert len(world.memory_files(name)) == 5
    page.close()


def test_search_is_the_engines_recall_and_opening_a_result_touches_it(signed_in, served, world):
    lesson = _push_lesson(world)
    page = signed_in.new_page()
    page.goto(served.base + "/reports")
    page.keyboard.press("/")  # the header's search box
    page.keyboard.type("git push fails: the current branch has no upstream branch")
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(re.escape(served.base) + r"/search\?q=.*"))
    results = page.locator("li.result")
    assert results.count() >= 3
    top = [int(results.nth(i).get_attribute("data-episode")) for i in range(3)]
    wanted = {e["id"] for e in lesson["episodes"]}
    assert set(top) == wanted  # the three failed pushes first, as `openmemory recall` ranks them
    recalled = json.loads(world.cli("recall", "git push fails: the current branch has no upstream branch", "-k", "3",
                                    "--no-touch", "--json", "--now", "2026-02-13T08:00:00Z").stdout)
    assert [r["episode"]["id"] for r in recalled["results"]] == top
    assert results.nth(0).locator("a.badge", has_text=f"lesson #{lesson['id']}").count() == 1
    before = world.episode(top[0])["touches"]
    page.reload()  # looking again touches nothing
    assert world.episode(top[0])["touches"] == before
    shoot(page, "search")
    results.nth(0).locator("button").click()  # opening a result is using it: touched, as recall touches
    page.wait_for_url(f"{served.base}/episodes/{top[0]}")
    assert world.episode(top[0])["touches"] == before + 1
    page.close()


def test_the_morning_reports(signed_in, served, world):
    lesson = _push_lesson(world)
    page = signed_in.new_page()
    page.goto(served.base + "/")
    page.locator("header.top nav a", has_text="Morning reports").click()
    page.wait_for_url(served.base + "/reports")
    latest = json.loads(world.cli("report", "--json").stdout)
    report = page.locator(f"#report-{latest['id']}")
    assert "Open Memory: morning report" in report.inner_text()
    assert page.locator("table.reports tbody tr").count() == latest["id"]
    # the report that says the no-upstream lesson was learned, with a link to it
    first = world.report_of("learned", lesson["id"])
    page.locator("table.reports").get_by_role("link", name=f"#{first}", exact=True).click()
    page.wait_for_url(f"{served.base}/reports/{first}")
    learned = page.locator(f"#report-{first} h3", has_text="Learned").locator("xpath=following-sibling::ul[1]")
    assert learned.locator(f"a[href='/lessons/{lesson['id']}']").count() == 1
    shoot(page, "morning-report")
    page.close()


def test_foreign_hosts_origins_and_posts_without_the_csrf_token_are_refused(signed_in, served, world):
    lesson = _push_lesson(world)
    cookie, csrf = _session(signed_in, served)
    veto = f"/lessons/{lesson['id']}/veto"
    good = {"Cookie": cookie, "Origin": served.base}
    assert _request(served, "GET", "/", {"Cookie": cookie})[0] == 200  # the session works...
    # ...but not under another name (DNS rebinding), nor from another site
    status, body = _request(served, "GET", "/", {"Cookie": cookie, "Host": f"evil.example:{served.port}"})
    assert status == 403 and "is not this page's" in body
    assert _request(served, "GET", "/", {"Cookie": cookie, "Host": "127.0.0.1:1"})[0] == 403
    status, body = _request(served, "GET", "/", {"Cookie": cookie, "Origin": "http://evil.example"})
    assert status == 403 and "cross-site" in body
    # a POST needs the CSRF token, our Origin, and the session
    assert _request(served, "POST", veto, good, "")[0] == 403
    assert _request(served, "POST", veto, good, "csrf=wrong")[0] == 403
    assert _request(served, "POST", veto, {"Cookie": cookie}, f"csrf={csrf}")[0] == 403  # no Origin
    assert _request(served, "POST", veto, {"Cookie": cookie, "Origin": "http://127.0.0.1:1"}, f"csrf={csrf}")[0] == 403
    assert _request(served, "POST", veto, {"Origin": served.base}, f"csrf={csrf}")[0] == 403  # no session
    assert not _push_lesson(world)["vetoed"] and len(world.memory_files(lesson["file_name"])) == 5
    # the same check, with the token, in the header a script would send: accepted
    status, body = _request(served, "POST", veto, {**good, "X-CSRF-Token": csrf, "Accept": "application/json"}, "")
    assert status == 200 and json.loads(body)["vetoed"] is True and world.memory_files(lesson["file_name"]) == []
    status, body = _request(served, "POST", f"/lessons/{lesson['id']}/unveto",
                            {**good, "Accept": "application/json"}, f"csrf={csrf}")
    assert status == 200 and json.loads(body)["unvetoed"] is True


def test_a_page_of_another_origin_cannot_veto(signed_in, served, world):
    """A real cross-origin attack: a page on another port of 127.0.0.1 (the same site, so the
    browser sends the session cookie) posts a veto form to the page. The Origin check refuses it."""
    lesson = _push_lesson(world)
    attack = (f'<!doctype html><form id="f" method="post" action="{served.base}/lessons/{lesson["id"]}/veto">'
              '<input name="csrf" value="guessed"></form><script>document.getElementById("f").submit()</script>')

    class Attacker(BaseHTTPRequestHandler):
        def do_GET(self):
            body = attack.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    evil = ThreadingHTTPServer(("127.0.0.1", 0), Attacker)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    page = signed_in.new_page()
    try:
        with page.expect_response(lambda r: r.url.endswith("/veto")) as answer:
            page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
        assert answer.value.status == 403
    finally:
        page.close()
        evil.shutdown()
        evil.server_close()
    assert not _push_lesson(world)["vetoed"] and len(world.memory_files(lesson["file_name"])) == 5


@pytest.mark.parametrize("argv, message", [
    (["--port", "70000"], "--port must be from 0 to 65535"),
    (["--now", "yesterday"], "yesterday"),
])
def test_bad_arguments_are_usage_errors(world, argv, message):
    done = world.cli("ui", "--no-browser", *argv, check=False)
    assert done.returncode == 2 and message in done.stderr


def test_a_port_in_use_is_a_usage_error(world, served):
    done = world.cli("ui", "--no-browser", "--port", str(served.port), check=False)
    assert done.returncode == 2 and f"127.0.0.1:{served.port}" in done.stderr
