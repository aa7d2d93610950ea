"""The page's door (openmemory_local.ui.guard): pure checks over requests."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from openmemory_local.ui.guard import Guard

PORT = 40123
HOST = {"host": f"127.0.0.1:{PORT}"}
ORIGIN = f"http://127.0.0.1:{PORT}"


def signed_in(guard: Guard) -> tuple[dict, object]:
    token = guard.new_token()
    verdict = guard.check("GET", "/", f"token={token}", HOST, "127.0.0.1")
    assert verdict.action == "exchange" and verdict.location == "/"
    assert "HttpOnly" in verdict.cookie and "SameSite=Lax" in verdict.cookie and "Path=/" in verdict.cookie
    cookie = verdict.cookie.split(";", 1)[0]
    return {**HOST, "cookie": f"other=1; {cookie}"}, verdict.session


def test_the_printed_link_signs_in_every_tab_that_opens_it():
    guard = Guard(PORT)
    url = urlsplit(guard.url(guard.new_token(), "/search"))
    assert (url.hostname, url.port, url.path) == ("127.0.0.1", PORT, "/search")
    token = url.query.split("=", 1)[1]
    first = guard.check("GET", "/search", f"q=git+push&token={token}", HOST, "127.0.0.1")
    assert first.action == "exchange" and first.location == "/search?q=git+push"  # the token leaves the URL
    cookie = {**HOST, "cookie": first.cookie.split(";", 1)[0]}
    assert guard.check("GET", "/", "", cookie, "127.0.0.1").action == "ok"
    # a second tab of the same browser: the same session, the token dropped from the URL
    same = guard.check("GET", "/", f"token={token}", cookie, "127.0.0.1")
    assert same.action == "exchange" and same.cookie == "" and same.session is first.session
    # a tab without the cookie (another window, another browser): the link still signs it in, its own session
    again = guard.check("GET", "/", f"token={token}", HOST, "127.0.0.1")
    assert again.action == "exchange" and again.cookie and again.session is not first.session
    assert guard.check("GET", "/", "", {**HOST, "cookie": again.cookie.split(";", 1)[0]}, "127.0.0.1").action == "ok"
    assert guard.check("GET", "/", "", cookie, "127.0.0.1").action == "ok"  # the first one still works
    # a tab typed as localhost, where the browser has no cookie: sent to 127.0.0.1, where it has one
    local = {"host": f"localhost:{PORT}"}
    moved = guard.check("GET", "/lessons/3", "q=1", local, "127.0.0.1")
    assert moved.action == "exchange" and moved.location == f"http://127.0.0.1:{PORT}/lessons/3?q=1"
    assert moved.cookie == ""
    assert guard.check("POST", "/veto/3", "", {**local, "origin": f"http://localhost:{PORT}"},
                       "127.0.0.1").action == "refuse"  # never a change without a session
    # a token that is not this page's is refused
    other = guard.check("GET", "/", "token=not-this-one", HOST, "127.0.0.1")
    assert other.action == "refuse" and "not this page's" in other.reason
    # a token is good for a GET only, never spent by a POST
    other = guard.new_token()
    assert guard.check("POST", "/", f"token={other}", {**HOST, "origin": ORIGIN}, "127.0.0.1").action == "refuse"
    assert guard.check("GET", "/", f"token={other}", HOST, "127.0.0.1").action == "exchange"


@pytest.mark.parametrize("headers, client, why", [
    ({}, "127.0.0.1", "the page's token"),
    ({"cookie": f"openmemory-ui-{PORT}=forged"}, "127.0.0.1", "the page's token"),
    ({"cookie": "openmemory-ui-1=x"}, "127.0.0.1", "the page's token"),
])
def test_no_session_no_page(headers, client, why):
    verdict = Guard(PORT).check("GET", "/", "", {**HOST, **headers}, client)
    assert verdict.action == "refuse" and why in verdict.reason


def test_hosts_origins_and_peers():
    guard = Guard(PORT)
    headers, _ = signed_in(guard)

    def ok(h, client="127.0.0.1", method="GET"):
        return guard.check(method, "/", "", h, client).action == "ok"

    assert ok(headers) and ok({**headers, "host": f"localhost:{PORT}"})
    assert ok(headers, "127.0.0.9") and ok(headers, "::1")
    for host in ("evil.example", f"evil.example:{PORT}", f"127.0.0.1:{PORT + 1}", "127.0.0.1", ""):
        verdict = guard.check("GET", "/", "", {**headers, "host": host}, "127.0.0.1")
        assert verdict.action == "refuse" and "not this page's" in verdict.reason
    for origin in ("http://evil.example", "null", f"http://127.0.0.1:{PORT + 1}", f"https://127.0.0.1:{PORT}"):
        verdict = guard.check("GET", "/", "", {**headers, "origin": origin}, "127.0.0.1")
        assert verdict.action == "refuse" and "cross-site" in verdict.reason
    assert ok({**headers, "origin": ORIGIN})
    for client in ("10.0.0.2", "192.168.1.4", None, "not an address"):
        assert guard.check("GET", "/", "", headers, client).reason == "this page is served to this machine only"
    # what changes something must come from the page itself
    assert not ok(headers, method="POST")
    assert ok({**headers, "origin": ORIGIN}, method="POST")


def test_the_csrf_token():
    guard = Guard(PORT)
    _, session = signed_in(guard)
    _, other = signed_in(guard)
    form = "application/x-www-form-urlencoded"
    assert guard.check_csrf(session, session.csrf, b"", "")
    assert guard.check_csrf(session, None, f"episode=3&csrf={session.csrf}".encode(), form + "; charset=utf-8")
    assert not guard.check_csrf(session, None, b"", form)
    assert not guard.check_csrf(session, None, b"csrf=", form)
    assert not guard.check_csrf(session, other.csrf, b"", "")  # another session's token
    assert not guard.check_csrf(session, None, f"csrf={session.csrf}".encode(), "multipart/form-data; boundary=x")
    assert not guard.check_csrf(session, "wrong", f"csrf={session.csrf}".encode(), form)  # the header decides
