"""The local API's HTTP server: authentication, loopback Host, limits, errors, keep-alive."""

from __future__ import annotations

import http.client
import json

import trio

from openmemory_node.httpserver import HttpError, HttpServer

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
    api.request_timeout = 0.5
    host, port = await nursery.start(api.serve, "127.0.0.1", 0)
    garbage = await trio.open_tcp_stream("127.0.0.1", port)
    await garbage.send_all(b"\x00\x01 NOT HTTP\r\n\r\n")
    reply = await garbage.receive_some(4096)
    assert b"400" in reply.split(b"\r\n")[0]
    slow = await trio.open_tcp_stream("127.0.0.1", port)
    await slow.send_all(b"GET /v1/echo/a HTTP/1.1\r\n")  # and never finishes
    with trio.fail_after(3):
        assert await slow.receive_some(4096) == b""  # closed after request_timeout
    status, _ = await trio.to_thread.run_sync(request, port, "GET", "/v1/echo/b")
    assert status == 200
