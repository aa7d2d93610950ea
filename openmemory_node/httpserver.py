"""A small HTTP/1.1 JSON server on trio and h11, for the node's local API.

Routes are ``(method, path pattern)`` pairs with ``{name}`` placeholders, added with
:meth:`HttpServer.route`. Every request must carry ``Authorization: Bearer <token>`` (the
token file is mode 0600, so only the local user can read it) and a loopback ``Host``
header (so that a web page cannot reach the API through DNS rebinding). Errors are JSON:
``{"error": {"code": ..., "message": ...}}``.

Why our own server rather than a general one (hypercorn, say; ``benchmarks/api.py`` measures
both): the API's threat is another local user, who can connect but has no token, holding
connections open to lock the owner out. So the limits are applied in this order, each with
its reason (README, "Configuration" and "Local API", lists the settings):

* **Header deadline**: a request head must be complete ``header_timeout`` seconds after the
  connection opened (or after the previous response, for a kept-alive connection): a client
  that trickles its headers is closed.
* **Connections**: at most ``max_connections``. A connection over the limit does not wait and
  is not refused while some connection is still waiting for its request head: the one that
  has waited longest is closed instead. A token holder's client sends its head at once, so
  a crowd of connections that never finish their headers can delay it by nothing; they only
  evict each other.
* **Authentication before anything else**: the Host and the token are checked on the head,
  before the body is read; a request without them gets 401 (or 403) and its connection is
  closed, so only token holders keep connections alive.
* **Per connection**: a head of at most 16 KiB, a body of at most ``max_body`` bytes that
  must arrive within ``request_timeout``, at most ``max_requests_per_connection`` requests.
* **Handlers**: at most ``max_concurrent_requests`` run at once (token holders only); the
  others wait for a slot within their ``request_timeout``.

Bodies are read strictly (:meth:`Request.json`): JSON only, at most ``MAX_JSON_DEPTH`` deep,
no ``NaN``/``Infinity``, no number beyond a double, no integer beyond 2^63, no duplicate
keys; anything else is 400 with what was wrong. :class:`Body` reads fields with their types
and ranges, so a handler never sees a value it did not expect (nor clamps one silently).
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable
from urllib.parse import parse_qs, unquote, urlsplit

import h11
import trio

from .log import event

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
MAX_HEAD_BYTES = 16 * 1024
MAX_JSON_DEPTH = 32
MAX_INT_DIGITS = 19  # |n| < 2^63


class HttpError(Exception):
    def __init__(self, status: int, code: str, message: str, **extra: Any):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra  # more fields of the error object (e.g. "candidates")


def bad_request(message: str, code: str = "bad-request", **extra: Any) -> HttpError:
    return HttpError(400, code, message, **extra)


# -- strict JSON ------------------------------------------------------------------------------

def _depth(body: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text (strings skipped)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    return deepest
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _no_constant(name: str) -> Any:
    raise bad_request(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise bad_request(f"the number {text[:40]} is out of range")
    return value


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise bad_request(f"the integer {text[:40]}... is out of range (more than {MAX_INT_DIGITS} digits)")
    return int(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise bad_request(f"the key {key[:40]!r} appears twice in one object")
        out[key] = value
    return out


def parse_json(body: bytes) -> Any:
    """JSON as the API accepts it, or :class:`HttpError` 400 saying what is wrong."""
    if _depth(body) > MAX_JSON_DEPTH:
        raise bad_request(f"the body nests arrays or objects more than {MAX_JSON_DEPTH} deep", "bad-json")
    try:
        return json.loads(body, parse_constant=_no_constant, parse_float=_float, parse_int=_int,
                          object_pairs_hook=_object)
    except HttpError as exc:
        exc.code = "bad-json"
        raise
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise bad_request(f"the body is not JSON: {exc}", "bad-json") from None


_TYPE_NAMES = {str: "a string", bool: "true or false", int: "an integer", float: "a number",
               list: "an array", dict: "an object"}


class Body:
    """The fields of a JSON object body, read with their types and ranges.

    Unknown fields are refused up front; each accessor returns the default when the field is
    absent (or ``null``), and raises 400 naming the field, what it must be and what it was."""

    def __init__(self, obj: Any, allowed: set[str] | frozenset[str]):
        if not isinstance(obj, dict):
            raise bad_request("the body must be a JSON object")
        unknown = set(obj) - set(allowed)
        if unknown:
            raise bad_request(f"unknown fields: {', '.join(sorted(unknown))} "
                              f"(known: {', '.join(sorted(allowed))})")
        self.obj = obj

    def __contains__(self, name: str) -> bool:
        return self.obj.get(name) is not None

    def _get(self, name: str, required: bool) -> Any:
        value = self.obj.get(name)
        if value is None and required:
            raise bad_request(f"{name} is required")
        return value

    def _wrong(self, name: str, what: str, value: Any) -> HttpError:
        shown = json.dumps(value)[:60] if not isinstance(value, (dict, list)) else type(value).__name__
        return bad_request(f"{name} must be {what}, not {shown}")

    def string(self, name: str, default: str | None = None, *, required: bool = False,
            max_bytes: int | None = None) -> Any:
        value = self._get(name, required)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._wrong(name, "a string", value)
        if max_bytes is not None and len(value.encode("utf-8", "surrogatepass")) > max_bytes:
            raise bad_request(f"{name} is longer than {max_bytes} bytes")
        return value

    def choice(self, name: str, choices: tuple[str, ...] | list[str], default: str | None = None, *,
               required: bool = False) -> Any:
        value = self.string(name, default, required=required)
        if value is not None and value not in choices:
            raise self._wrong(name, "one of " + ", ".join(choices), value)
        return value

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self._get(name, False)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._wrong(name, "true or false", value)
        return value

    def number(self, name: str, default: float | None = None, *, low: float, high: float,
               required: bool = False) -> Any:
        value = self._get(name, required)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong(name, f"a number from {low:g} to {high:g}", value)
        if not low <= value <= high:
            raise bad_request(f"{name} must be from {low:g} to {high:g}, not {value:g} (never clamped)")
        return value

    def integer(self, name: str, default: int | None = None, *, low: int, high: int,
            required: bool = False) -> Any:
        value = self._get(name, required)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(name, f"an integer from {low} to {high}", value)
        if not low <= value <= high:
            raise bad_request(f"{name} must be from {low} to {high}, not {value} (never clamped)")
        return value

    def array(self, name: str, *, of: type = str, max_items: int, required: bool = False) -> Any:
        value = self._get(name, required)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._wrong(name, f"an array of at most {max_items} items", value)
        if len(value) > max_items:
            raise bad_request(f"{name} has {len(value)} items; at most {max_items}")
        for item in value:
            if isinstance(item, bool) and of is not bool or not isinstance(item, of):
                raise bad_request(f"every item of {name} must be {_TYPE_NAMES.get(of, of.__name__)}")
        return value

    def object(self, name: str, allowed: set[str], *, required: bool = False) -> "Body | None":
        value = self._get(name, required)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._wrong(name, "an object", value)
        try:
            return Body(value, allowed)
        except HttpError as exc:
            raise bad_request(f"{name}: {exc.message}") from None


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
        return parse_json(self.body)

    def json_object(self) -> dict[str, Any]:
        obj = self.json()
        if not isinstance(obj, dict):
            raise HttpError(400, "bad-request", "the body must be a JSON object")
        return obj

    def fields(self, allowed: set[str], *, optional_body: bool = False) -> Body:
        """The body as :class:`Body` (an empty body is ``{}`` when ``optional_body``)."""
        if optional_body and not self.body.strip():
            return Body({}, allowed)
        return Body(self.json(), allowed)

    def int_query(self, name: str, default: int | None, low: int = 0, high: int = 10**9) -> int | None:
        raw = self.query.get(name)
        if raw is None:
            return default
        try:
            value = int(raw) if len(raw) <= MAX_INT_DIGITS + 1 else None
        except ValueError:
            value = None
        if value is None:
            raise HttpError(400, "bad-request", f"?{name}= must be an integer") from None
        if not low <= value <= high:
            raise HttpError(400, "bad-request", f"?{name}= must be between {low} and {high}")
        return value


Handler = Callable[[Request], Awaitable[tuple[int, Any]]]


class _Connection:
    __slots__ = ("stream", "scope", "waiting_since", "requests")

    def __init__(self, stream: trio.SocketStream):
        self.stream = stream
        self.scope: trio.CancelScope | None = None
        self.waiting_since: float | None = trio.current_time()  # waiting for a request head
        self.requests = 0


class HttpServer:
    def __init__(self, token: str, *, max_body: int = 256 * 1024, request_timeout: float = 30.0,
                 header_timeout: float = 10.0, keep_alive_timeout: float = 10.0,
                 max_connections: int = 128, max_requests_per_connection: int = 100,
                 max_concurrent_requests: int = 16):
        self.token = token
        self.max_body = max_body
        self.request_timeout = request_timeout
        self.header_timeout = header_timeout
        self.keep_alive_timeout = keep_alive_timeout
        self.max_connections = max_connections
        self.max_requests_per_connection = max_requests_per_connection
        self._handlers = trio.Semaphore(max_concurrent_requests)
        self._connections: dict[_Connection, None] = {}  # insertion-ordered
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.requests = 0
        self.counts: Counter[str] = Counter()  # connections, evicted, refused, header-timeout, ...

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

    def stats(self) -> dict[str, Any]:
        waiting = sum(1 for c in self._connections if c.waiting_since is not None)
        return {"requests": self.requests, "open": len(self._connections), "waiting_for_head": waiting,
                **{k: v for k, v in sorted(self.counts.items())}}

    async def serve(self, host: str, port: int, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(port, host=host, backlog=256)
        task_status.started(listeners[0].socket.getsockname()[:2])
        await trio.serve_listeners(self._connection, listeners)

    # -- connections ----------------------------------------------------------------------
    def _make_room(self, new: _Connection) -> bool:
        """Over the limit: close the connection that has waited longest for its request head
        (never ``new``). False if every other connection is busy with a request."""
        oldest: _Connection | None = None
        for conn in self._connections:
            if conn is new or conn.waiting_since is None or conn.scope is None:
                continue
            if oldest is None or conn.waiting_since < oldest.waiting_since:  # type: ignore[operator]
                oldest = conn
        if oldest is None:
            return False
        oldest.waiting_since = None
        oldest.scope.cancel()  # type: ignore[union-attr]
        # Off the books now, not when its task next runs to close it: on a busy machine
        # several evicted connections may wait for that, and they must not be counted open
        # (nor chosen again) meanwhile.
        del self._connections[oldest]
        self.counts["evicted"] += 1
        return True

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = _Connection(stream)
        self._connections[conn] = None
        self.counts["connections"] += 1
        try:
            if len(self._connections) > self.max_connections and not self._make_room(conn):
                self.counts["refused"] += 1
                return
            with trio.CancelScope() as conn.scope:
                await self._serve_connection(conn)
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass
        except Exception:
            log.exception("API connection failed")
        finally:
            self._connections.pop(conn, None)  # (already gone if it was evicted)
            with trio.move_on_after(1) as scope:
                scope.shield = True
                await stream.aclose()

    async def _serve_connection(self, conn: _Connection) -> None:
        h11conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        stream = conn.stream
        while True:
            conn.waiting_since = trio.current_time()
            deadline = self.header_timeout if conn.requests == 0 else self.keep_alive_timeout
            with trio.move_on_after(deadline) as scope:
                head = await self._read_head(h11conn, stream)
            conn.waiting_since = None
            if scope.cancelled_caught:
                self.counts["header-timeout" if conn.requests == 0 else "idle-closed"] += 1
                return
            if head is None:
                return
            if isinstance(head, HttpError):
                await self._send(h11conn, stream, head.status, _error_body(head), close=True)
                return
            conn.requests += 1
            self.requests += 1
            refusal = self._refusal(head)
            if refusal is not None:  # no token: answered at once, body unread, connection closed
                self.counts[f"refused-{refusal.status}"] += 1
                await self._send(h11conn, stream, refusal.status, _error_body(refusal), close=True)
                return
            # The body, and a handler slot, within request_timeout; the handler itself takes
            # what it takes (a sync session, a dial: each has its own limits).
            request: Request | HttpError | None = None
            with trio.move_on_after(self.request_timeout) as scope:
                request = await self._read_body(h11conn, stream, head)
                if isinstance(request, Request):
                    await self._handlers.acquire()
            if scope.cancelled_caught:
                self.counts["request-timeout"] += 1
                error = HttpError(408, "timeout", f"the request took more than {self.request_timeout:g} s")
                await self._send(h11conn, stream, 408, _error_body(error), close=True)
                return
            if isinstance(request, HttpError):
                await self._send(h11conn, stream, request.status, _error_body(request), close=True)
                return
            if request is None:
                return
            try:
                status, body = await self._dispatch(request)
            finally:
                self._handlers.release()
            last = conn.requests >= self.max_requests_per_connection
            await self._send(h11conn, stream, status, body, close=last)
            if last or h11conn.our_state is h11.MUST_CLOSE or h11conn.their_state is h11.MUST_CLOSE:
                return
            try:
                h11conn.start_next_cycle()
            except h11.LocalProtocolError:
                return

    async def _next_event(self, h11conn: h11.Connection, stream: trio.SocketStream) -> Any:
        while True:
            ev = h11conn.next_event()
            if ev is not h11.NEED_DATA:
                return ev
            data = await stream.receive_some(65536)
            h11conn.receive_data(data)
            if not data and h11conn.their_state is h11.IDLE:
                return h11.ConnectionClosed()

    async def _read_head(self, h11conn: h11.Connection, stream: trio.SocketStream) -> h11.Request | HttpError | None:
        try:
            ev = await self._next_event(h11conn, stream)
        except h11.RemoteProtocolError as exc:
            return HttpError(exc.error_status_hint or 400, "bad-http", str(exc))
        if isinstance(ev, h11.Request):
            return ev
        return None  # closed

    async def _read_body(self, h11conn: h11.Connection, stream: trio.SocketStream,
                         head: h11.Request) -> Request | HttpError | None:
        length = dict(head.headers).get(b"content-length")
        if length is not None and int(length) > self.max_body:
            return HttpError(413, "too-large", f"the body exceeds {self.max_body} bytes")
        body = bytearray()
        while True:
            try:
                ev = await self._next_event(h11conn, stream)
            except h11.RemoteProtocolError as exc:
                return HttpError(400, "bad-http", str(exc))
            if isinstance(ev, h11.Data):
                body.extend(ev.data)
                if len(body) > self.max_body:
                    return HttpError(413, "too-large", f"the body exceeds {self.max_body} bytes")
            elif isinstance(ev, h11.EndOfMessage):
                return _request(head, bytes(body))
            else:
                return None

    def _refusal(self, head: h11.Request) -> HttpError | None:
        """403 for a Host that is not loopback, 401 without the token; None: go on."""
        headers = {k.lower(): v for k, v in head.headers}
        host = headers.get(b"host", b"").decode("latin-1")
        hostname = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
        if hostname not in LOOPBACK_HOSTS:
            return HttpError(403, "forbidden-host", "the API answers loopback Host names only")
        given = headers.get(b"authorization", b"")
        if not given.startswith(b"Bearer ") or not hmac.compare_digest(
            given[7:].strip(), self.token.encode()
        ):
            return HttpError(401, "unauthorised", "send Authorization: Bearer <the api.token file>")
        return None

    async def _dispatch(self, request: Request) -> tuple[int, Any]:
        try:
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

    async def _send(self, h11conn: h11.Connection, stream: trio.SocketStream, status: int, body: Any,
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
            data = h11conn.send(h11.Response(status_code=status, headers=headers))
            data += h11conn.send(h11.Data(data=payload))
            data += h11conn.send(h11.EndOfMessage())
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
    return {"error": {"code": exc.code, "message": exc.message, **exc.extra}}
