"""The local API's HTTP server: authentication, loopback Host, limits, errors, keep-alive."""

from __future__ import annotations

import http.client
import json

import trio

import pytest

from openmemory_node.httpserver import Body, HttpError, HttpServer

TOKEN = "s3cret-token"


def make_server() -> HttpServer:
    api = HttpServer(TOKEN, max_body=1024)

    @api.route("GET", "/v1/echo/{name}")
    async def echo(req):
        return 200, {"name": req.params["name"], "q": req.query}

    @api.route("POST", "/v1/echo/{name}")
    async def post(req):
        return 201, {"got": req.json_object()}

    @api.route("GET", "/v1/boom")
    async def boom(req):
        raise RuntimeError("kaput")

    @api.route("GET", "/v1/teapot")
    async def teapot(req):
        raise HttpError(418, "teapot", "short and stout")

    return api


def request(port, method, path, body=None, headers=None, conn=None):
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    hdrs = {"Authorization": f"Bearer {TOKEN}"}
    hdrs.update(headers or {})
    conn.request(method, path, body=body, headers=hdrs)
    resp = conn.getresponse()
    data = json.loads(resp.read() or b"null")
    if own:
        conn.close()
    return resp.status, data


async def test_requests_authentication_host_and_errors(nursery):
    api = make_server()
    host, port = await nursery.start(api.serve, "127.0.0.1", 0)

    def run():
        out = {}
        out["ok"] = request(port, "GET", "/v1/echo/a%20b?x=1")
        out["no_token"] = request(port, "GET", "/v1/echo/a", headers={"Authorization": ""})
        out["bad_token"] = request(port, "GET", "/v1/echo/a", headers={"Authorization": "Bearer nope"})
        out["rebinding"] = request(port, "GET", "/v1/echo/a", headers={"Host": "evil.example:80"})
        out["localhost"] = request(port, "GET", "/v1/echo/a", headers={"Host": f"localhost:{port}"})
        out["missing"] = request(port, "GET", "/v1/nothing")
        out["method"] = request(port, "DELETE", "/v1/echo/a")
        out["post"] = request(port, "POST", "/v1/echo/a", body=b'{"k": 1}')
        out["bad_json"] = request(port, "POST", "/v1/echo/a", body=b"{nope")
        out["not_object"] = request(port, "POST", "/v1/echo/a", body=b"[1]")
        out["too_big"] = request(port, "POST", "/v1/echo/a", body=b"x" * 5000)
        out["boom"] = request(port, "GET", "/v1/boom")
        out["teapot"] = request(port, "GET", "/v1/teapot")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        out["keepalive"] = [request(port, "GET", f"/v1/echo/{i}", conn=conn) for i in range(3)]
        conn.close()
        out["after"] = request(port, "GET", "/v1/echo/z")
        return out

    out = await trio.to_thread.run_sync(run)
    assert out["ok"] == (200, {"name": "a b", "q": {"x": "1"}})
    assert out["no_token"][0] == 401 and out["no_token"][1]["error"]["code"] == "unauthorised"
    assert out["bad_token"][0] == 401
    assert out["rebinding"][0] == 403 and out["rebinding"][1]["error"]["code"] == "forbidden-host"
    assert out["localhost"][0] == 200
    assert out["missing"][0] == 404
    assert out["method"][0] == 405 and "GET" in out["method"][1]["error"]["message"]
    assert out["post"] == (201, {"got": {"k": 1}})
    assert out["bad_json"][0] == 400 and out["bad_json"][1]["error"]["code"] == "bad-json"
    assert out["not_object"][0] == 400
    assert out["too_big"][0] == 413
    assert out["boom"][0] == 500 and "kaput" in out["boom"][1]["error"]["message"]
    assert out["teapot"] == (418, {"error": {"code": "teapot", "message": "short and stout"}})
    assert [s for s, _ in out["keepalive"]] == [200, 200, 200]
    assert out["after"][0] == 200  # a handler error did not take the server down


async def test_garbage_and_slow_clients_do_not_hurt_the_server(nursery):
    api = make_server()
    api.header_timeout = 0.5
    host, port = await nursery.start(api.serve, "127.0.0.1", 0)
    garbage = await trio.open_tcp_stream("127.0.0.1", port)
    await garbage.send_all(b"\x00\x01 NOT HTTP\r\n\r\n")
    reply = await garbage.receive_some(4096)
    assert b"400" in reply.split(b"\r\n")[0]
    slow = await trio.open_tcp_stream("127.0.0.1", port)
    await slow.send_all(b"GET /v1/echo/a HTTP/1.1\r\n")  # and never finishes
    with trio.fail_after(10):
        assert await slow.receive_some(4096) == b""  # closed after header_timeout
    status, _ = await trio.to_thread.run_sync(request, port, "GET", "/v1/echo/b")
    assert status == 200
    assert api.stats()["header-timeout"] == 1


async def held_heads(port: int, count: int) -> list[trio.SocketStream]:
    """Connections that start a request head and never finish it (no token either)."""
    streams = []
    for _ in range(count):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /v1/echo/x HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        streams.append(stream)
    return streams


async def test_connections_that_never_finish_their_heads_cannot_lock_the_owner_out(nursery):
    api = make_server()
    api.max_connections = 8
    api.header_timeout = 60  # the holders are not timed out during the test: only evicted
    host, port = await nursery.start(api.serve, "127.0.0.1", 0)
    peak = 0

    async def watch() -> None:  # an evicted connection is off the books at once
        nonlocal peak
        while True:
            peak = max(peak, api.stats()["open"])
            await trio.sleep(0)

    nursery.start_soon(watch)
    holders = await held_heads(port, 20)  # more than the limit
    with trio.fail_after(20):
        while api.stats()["connections"] < 20:
            await trio.sleep(0.01)
    assert api.stats()["open"] == 8 and peak <= 8
    for i in range(5):  # the owner gets in every time (the first one closed the oldest holder)
        status, body = await trio.to_thread.run_sync(request, port, "GET", f"/v1/echo/owner{i}")
        assert (status, body["name"]) == (200, f"owner{i}")
    stats = api.stats()
    assert stats["evicted"] == 20 - 8 + 1 and stats["open"] <= 8
    # Evicted ones were closed; the newest holders are still waiting.
    closed = 0
    for stream in holders:
        with trio.move_on_after(0.2):
            closed += await stream.receive_some(100) == b""
    assert closed >= 12
    for stream in holders:
        await stream.aclose()


async def test_a_request_being_served_is_never_evicted_and_unauthorised_ones_are_closed(nursery):
    api = make_server()
    api.max_connections = 2
    release = trio.Event()

    @api.route("GET", "/v1/slow")
    async def slow(req):
        await release.wait()
        return 200, {"done": True}

    host, port = await nursery.start(api.serve, "127.0.0.1", 0)
    results = []

    async def in_thread(*args):
        results.append(await trio.to_thread.run_sync(request, port, *args))

    async with trio.open_nursery() as inner:
        inner.start_soon(in_thread, "GET", "/v1/slow")
        inner.start_soon(in_thread, "GET", "/v1/slow")
        with trio.fail_after(10):
            while api.stats()["open"] < 2 or api.stats()["waiting_for_head"]:
                await trio.sleep(0.01)
        extra = await trio.open_tcp_stream("127.0.0.1", port)  # both busy: nothing to evict
        with trio.fail_after(10):
            assert await extra.receive_some(100) == b""
        assert api.stats()["refused"] == 1 and api.stats().get("evicted", 0) == 0
        release.set()
    assert [s for s, _ in results] == [200, 200]
    # A request without the token: 401 at once, its body never read, the connection closed.
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"POST /v1/echo/a HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n")
    reply = b""
    with trio.fail_after(10):
        while chunk := await stream.receive_some(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 401") and b"connection: close" in reply.lower()


async def test_per_connection_limits_a_slow_body_and_the_request_count(nursery):
    api = make_server()
    api.request_timeout = 0.5
    api.max_requests_per_connection = 3
    host, port = await nursery.start(api.serve, "127.0.0.1", 0)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(f"POST /v1/echo/a HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
                          "Content-Length: 50\r\n\r\n{\"k\"".encode())  # and the rest never comes
    with trio.fail_after(10):
        reply = await stream.receive_some(4096)
    assert reply.startswith(b"HTTP/1.1 408")

    def keepalive():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        out = []
        for i in range(3):
            conn.request("GET", f"/v1/echo/{i}", headers={"Authorization": f"Bearer {TOKEN}"})
            resp = conn.getresponse()
            resp.read()
            out.append((resp.status, resp.getheader("connection")))
        conn.close()
        return out

    assert await trio.to_thread.run_sync(keepalive) == [(200, None), (200, None), (200, "close")]


MALFORMED = {
    "deep": (b"[" * 100 + b"]" * 100, "deep"),
    "deep-object": (b'{"a":' * 40 + b"1" + b"}" * 40, "deep"),
    "nan": (b'{"k": NaN}', "NaN is not a JSON number"),
    "infinity": (b'{"k": -Infinity}', "-Infinity is not a JSON number"),
    "big-float": (b'{"k": 1e400}', "out of range"),
    "big-int": (b'{"k": ' + b"9" * 5000 + b"}", "out of range"),
    "duplicate": (b'{"k": 1, "k": 2}', "appears twice"),
    "not-utf8": (b'{"k": "\xff"}', "not JSON"),
    "truncated": (b'{"k": [1, 2', "not JSON"),
}


async def test_every_malformed_body_is_a_400_that_says_what_is_wrong(nursery):
    api = make_server()
    api.max_body = 64 * 1024
    host, port = await nursery.start(api.serve, "127.0.0.1", 0)

    def run():
        return {name: request(port, "POST", "/v1/echo/a", body=body) for name, (body, _) in MALFORMED.items()}

    out = await trio.to_thread.run_sync(run)
    for name, (_, words) in MALFORMED.items():
        status, body = out[name]
        assert status == 400 and body["error"]["code"] == "bad-json", name
        assert words in body["error"]["message"], (name, body)
    status, _ = await trio.to_thread.run_sync(request, port, "GET", "/v1/echo/still-up")
    assert status == 200


def test_body_fields_are_typed_and_ranged_never_clamped():
    body = Body({"s": "x", "n": 1500, "f": 0.5, "b": True, "l": ["a"], "o": {"k": 1}},
                {"s", "n", "f", "b", "l", "o", "absent"})
    assert body.string("s") == "x" and body.string("absent", "d") == "d"
    assert body.integer("n", low=0, high=2000) == 1500 and body.number("f", low=0, high=1) == 0.5
    assert body.boolean("b") is True and body.array("l", max_items=2) == ["a"]
    assert body.object("o", {"k"}).integer("k", low=0, high=1) == 1
    refusals = [
        lambda: Body({"x": 1}, {"s"}),  # unknown field
        lambda: Body([1], {"s"}),  # not an object
        lambda: body.number("n", low=0, high=1000),  # out of range: refused, not clamped
        lambda: body.integer("f", low=0, high=1),  # not an integer
        lambda: body.integer("b", low=0, high=1),  # a bool is not a number
        lambda: body.string("n"),
        lambda: body.boolean("s"),
        lambda: body.array("s", max_items=3),
        lambda: body.array("l", max_items=0),
        lambda: body.array("l", of=int, max_items=3),
        lambda: body.object("o", {"j"}),
        lambda: body.string("absent", required=True),
        lambda: body.choice("s", ("y", "z")),
    ]
    for refuse in refusals:
        with pytest.raises(HttpError) as info:
            refuse()
        assert info.value.status == 400 and info.value.message
    with pytest.raises(HttpError) as info:
        body.number("n", low=0, high=1000)
    assert "from 0 to 1000, not 1500" in info.value.message
