"""A small HTTP/1.1 JSON server on trio and h11, for the node's local API.

Routes are ``(method, path pattern)`` pairs with ``{name}`` placeholders, added with
:meth:`HttpServer.route`. Every request must carry ``Authorization: Bearer <token>`` (the
token file is mode 0600, so only the local user can read it) and a loopback ``Host``
header (so that a web page cannot reach the API through DNS rebinding). Limits: request
head 16 KiB, body ``max_body`` bytes, ``request_timeout`` seconds per request,
``max_connections`` at once. Errors are JSON: ``{"error": {"code": ..., "message": ...}}``.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs, unquote, urlsplit

import h11
import trio

from .log import event

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}


class HttpError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    params: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        if not self.body:
            raise HttpError(400, "bad-request", "a JSON body is required")
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise HttpError(400, "bad-json", f"the body is not JSON: {exc}") from None

    def json_object(self) -> dict[str, Any]:
        obj = self.json()
        if not isinstance(obj, dict):
            raise HttpError(400, "bad-request", "the body must be a JSON object")
        return obj

    def int_query(self, name: str, default: int | None, low: int = 0, high: int = 10**9) -> int | None:
        raw = self.query.get(name)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise HttpError(400, "bad-request", f"?{name}= must be an integer") from None
        if not low <= value <= high:
            raise HttpError(400, "bad-request", f"?{name}= must be between {low} and {high}")
        return value


Handler = Callable[[Request], Awaitable[tuple[int, Any]]]


class HttpServer:
    def __init__(self, token: str, *, max_body: int = 256 * 1024, request_timeout: float = 30.0,
                 max_connections: int = 64):
        self.token = token
        self.max_body = max_body
        self.request_timeout = request_timeout
        self._slots = trio.Semaphore(max_connections)
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.requests = 0

    def route(self, method: str, pattern: str) -> Callable[[Handler], Handler]:
        regex = re.compile(
            "^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "$"
        )

        def register(handler: Handler) -> Handler:
            self._routes.append((method.upper(), regex, handler))
            return handler

        return register

    def routes(self) -> list[tuple[str, str]]:
        return [(m, r.pattern) for m, r, _ in self._routes]

    async def serve(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host)
        task_status.started(listeners[0].socket.getsockname()[:2])
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await stream.aclose()
            return
        try:
            await self._serve_connection(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass
        except Exception:
            log.exception("API connection failed")
        finally:
            self._slots.release()
            with trio.move_on_after(1):
                await stream.aclose()

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=16 * 1024)
        while True:
            with trio.move_on_after(self.request_timeout) as scope:
                request = await self._read_request(conn, stream)
            if scope.cancelled_caught or request is None:
                return
            if isinstance(request, HttpError):
                await self._send(conn, stream, request.status, _error_body(request), close=True)
                return
            status, body = await self._dispatch(request)
            await self._send(conn, stream, status, body)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _read_request(self, conn: h11.Connection, stream: trio.SocketStream) -> Request | HttpError | None:
        head: h11.Request | None = None
        body = bytearray()
        while True:
            try:
                ev = conn.next_event()
            except h11.RemoteProtocolError as exc:
                return HttpError(400, "bad-http", str(exc))
            if ev is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                conn.receive_data(data)
                if not data and conn.their_state is h11.IDLE:
                    return None
                continue
            if isinstance(ev, h11.Request):
                head = ev
            elif isinstance(ev, h11.Data):
                body.extend(ev.data)
                if len(body) > self.max_body:
                    return HttpError(413, "too-large", f"the body exceeds {self.max_body} bytes")
            elif isinstance(ev, h11.EndOfMessage):
                assert head is not None
                return _request(head, bytes(body))
            elif isinstance(ev, h11.ConnectionClosed):
                return None

    async def _dispatch(self, request: Request) -> tuple[int, Any]:
        self.requests += 1
        try:
            self._authorise(request)
            allowed = []
            for method, regex, handler in self._routes:
                match = regex.match(request.path)
                if not match:
                    continue
                if method != request.method:
                    allowed.append(method)
                    continue
                request.params = {k: unquote(v) for k, v in match.groupdict().items()}
                return await handler(request)
            if allowed:
                raise HttpError(405, "method-not-allowed", f"use {', '.join(sorted(set(allowed)))}")
            raise HttpError(404, "no-such-endpoint", f"no endpoint {request.method} {request.path}")
        except HttpError as exc:
            return exc.status, _error_body(exc)
        except Exception as exc:
            log.exception("API handler failed")
            return 500, _error_body(HttpError(500, "internal", f"{type(exc).__name__}: {exc}"))

    def _authorise(self, request: Request) -> None:
        host = request.headers.get("host", "")
        hostname = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        if hostname not in LOOPBACK_HOSTS:
            raise HttpError(403, "forbidden-host", "the API answers loopback Host names only")
        given = request.headers.get("authorization", "")
        if not given.startswith("Bearer ") or not hmac.compare_digest(
            given[7:].strip().encode(), self.token.encode()
        ):
            raise HttpError(401, "unauthorised", "send Authorization: Bearer <the api.token file>")

    async def _send(self, conn: h11.Connection, stream: trio.SocketStream, status: int, body: Any,
                    close: bool = False) -> None:
        payload = (json.dumps(body, indent=None, default=str) + "\n").encode()
        headers = [
            ("content-type", "application/json"),
            ("content-length", str(len(payload))),
            ("cache-control", "no-store"),
        ]
        if close:
            headers.append(("connection", "close"))
        try:
            data = conn.send(h11.Response(status_code=status, headers=headers))
            data += conn.send(h11.Data(data=payload))
            data += conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return
        await stream.send_all(data)
        event(log, logging.DEBUG, "api", status=status)


def _request(head: h11.Request, body: bytes) -> Request:
    target = head.target.decode("latin-1")
    parts = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers}
    return Request(head.method.decode("ascii").upper(), parts.path, query, headers, body)


def _error_body(exc: HttpError) -> dict[str, Any]:
    return {"error": {"code": exc.code, "message": exc.message}}
