#!/usr/bin/env python3
"""The node's local API server against a well-kept general one, on loopback.

    python benchmarks/api.py [--requests 400] [--json]

Two servers, each in its own process, serving the same two endpoints behind the same checks
(a loopback Host, ``Authorization: Bearer <token>``): ``GET /v1/echo`` answers a small JSON
object, ``POST /v1/echo`` parses a 2 KB JSON body and answers its size.

* ``own``: ``openmemory_node.httpserver.HttpServer`` (trio + h11), as the daemon runs it.
* ``hypercorn``: Starlette on hypercorn's trio worker (``keep_alive_timeout`` 10 s,
  ``read_timeout`` 10 s, its other settings the defaults), the checks as a middleware.

Measured, from a client in this process (``http.client``, as the CLI and the engine use it):

* request latency p50/p99: a new connection per request (what the CLI and the engine do),
  the same over one kept-alive connection, and a POST;
* the lock-out: a second process holds connections that never finish their request heads
  (and reopens any the server closes), 64 of them and then 1,100; meanwhile the owner sends
  ``--attack-requests`` requests, each with a 5 s timeout: how many are answered, and how
  fast. Both servers run with a soft limit of 1,024 open files, a desktop's default.

The run needs ``hypercorn`` (``pip install 'hypercorn[trio]'``; Starlette comes with the
``mcp`` package). The machine is shared and busy: figures are indicative; compare the two
servers of the same run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "benchmark-token"

OWN = r"""
import sys, trio
from openmemory_node.httpserver import HttpServer
api = HttpServer(sys.argv[1])

@api.route("GET", "/v1/echo")
async def get(req):
    return 200, {"ok": True}

@api.route("POST", "/v1/echo")
async def post(req):
    return 200, {"size": len(req.json_object()["text"])}

async def main():
    port = int(sys.argv[2])
    async with trio.open_nursery() as n:
        await n.start(api.serve, "127.0.0.1", port)
        print("ready", flush=True)
trio.run(main)
"""

HYPERCORN = r"""
import sys, hmac, trio
from hypercorn.config import Config
from hypercorn.trio import serve
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
TOKEN = sys.argv[1].encode()

async def get(request):
    return JSONResponse({"ok": True})

async def post(request):
    body = await request.json()
    return JSONResponse({"size": len(body["text"])})

app = Starlette(routes=[Route("/v1/echo", get, methods=["GET"]), Route("/v1/echo", post, methods=["POST"])])

class Checks:
    def __init__(self, app):
        self.app = app
    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            host = headers.get(b"host", b"").split(b":")[0]
            given = headers.get(b"authorization", b"")
            if host not in (b"127.0.0.1", b"localhost"):
                return await JSONResponse({"error": "forbidden-host"}, 403)(scope, receive, send)
            if not given.startswith(b"Bearer ") or not hmac.compare_digest(given[7:], TOKEN):
                return await JSONResponse({"error": "unauthorised"}, 401)(scope, receive, send)
        await self.app(scope, receive, send)

config = Config()
config.bind = [f"127.0.0.1:{sys.argv[2]}"]
config.keep_alive_timeout = 10.0
config.read_timeout = 10
config.accesslog = None
config.errorlog = None

async def main():
    async with trio.open_nursery() as n:
        n.start_soon(serve, Checks(app), config)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", int(sys.argv[2])), timeout=0.2).close()
                break
            except OSError:
                await trio.sleep(0.05)
        print("ready", flush=True)
import socket
trio.run(main)
"""

HOLDER = r"""
import selectors, socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
sel = selectors.DefaultSelector()  # epoll: more than 1,024 descriptors
def hold():
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.sendall(b"GET /v1/echo HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow")
        sel.register(s, selectors.EVENT_READ)
        return s
    except OSError:
        return None
held = sum(hold() is not None for _ in range(count))
print(f"held {held}", flush=True)
sel.register(sys.stdin, selectors.EVENT_READ)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    for key, _ in sel.select(0.5):
        if key.fileobj is sys.stdin:
            sys.exit(0)
        s = key.fileobj
        try:
            closed = not s.recv(4096)
        except OSError:
            closed = True
        if closed:
            sel.unregister(s)
            s.close()
            hold()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def desktop_file_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def start(code: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", code, TOKEN, str(port)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, preexec_fn=desktop_file_limit,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = proc.stdout.readline().strip()
    if line != "ready":
        raise RuntimeError(f"server did not start: {line!r}")
    return proc, port


HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
BODY = json.dumps({"text": "x" * 2000}).encode()


def one(port: int, method: str = "GET", conn: http.client.HTTPConnection | None = None,
        timeout: float = 10.0) -> float:
    own = conn is None
    started = time.perf_counter()
    conn = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, "/v1/echo", body=BODY if method == "POST" else None, headers=HEADERS)
    response = conn.getresponse()
    response.read()
    if own:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}")
    return time.perf_counter() - started


def percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {"p50_ms": round(1000 * statistics.median(values), 2),
            "p99_ms": round(1000 * values[min(len(values) - 1, int(0.99 * len(values)))], 2)}


def under_attack(port: int, held: int, requests: int) -> dict:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(port), str(held)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    got = holder.stdout.readline().strip()
    answered, latencies, errors = 0, [], {}
    try:
        for _ in range(requests):
            try:
                latencies.append(one(port, timeout=5.0))
                answered += 1
            except Exception as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            time.sleep(0.05)
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    out = {"holder": got, "answered": answered, "of": requests, "errors": errors}
    if latencies:
        out.update(percentiles(latencies))
    return out


def measure(name: str, code: str, args: argparse.Namespace) -> dict:
    proc, port = start(code)
    try:
        for _ in range(20):  # warm-up
            one(port)
        fresh = [one(port) for _ in range(args.requests)]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        kept = [one(port, conn=conn) for _ in range(args.requests)]
        conn.close()
        posts = [one(port, "POST") for _ in range(args.requests)]
        result = {"server": name, "new_connection": percentiles(fresh), "keep_alive": percentiles(kept),
                  "post_2kb": percentiles(posts)}
        for held in (64, 1100):
            result[f"held_{held}"] = under_attack(port, held, args.attack_requests)
            print(f"  {name}: {held} held: {result[f'held_{held}']}", file=sys.stderr)
        alive = proc.poll() is None
        result["alive_after"] = alive
        return result
    finally:
        proc.kill()
        proc.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--attack-requests", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [measure("own", OWN, args), measure("hypercorn", HYPERCORN, args)]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'server':<10} {'new conn p50/p99 ms':>20} {'keep-alive p50/p99':>19} {'POST 2KB p50/p99':>17} "
          f"{'64 held: answered, p50 ms':>26} {'1100 held: answered, p50 ms':>28}")
    for r in results:
        cells = []
        for held in (64, 1100):
            h = r[f"held_{held}"]
            cells.append(f"{h['answered']}/{h['of']}, {h.get('p50_ms', '-')}")
        print(f"{r['server']:<10} {r['new_connection']['p50_ms']:>11}/{r['new_connection']['p99_ms']:<8} "
              f"{r['keep_alive']['p50_ms']:>10}/{r['keep_alive']['p99_ms']:<8} "
              f"{r['post_2kb']['p50_ms']:>8}/{r['post_2kb']['p99_ms']:<8} {cells[0]:>26} {cells[1]:>28}")
    own, hyper = results
    print(f"ratio own/hypercorn, new connection p50: "
          f"{own['new_connection']['p50_ms'] / hyper['new_connection']['p50_ms']:.2f}; "
          f"keep-alive p50: {own['keep_alive']['p50_ms'] / hyper['keep_alive']['p50_ms']:.2f}")


if __name__ == "__main__":
    main()
