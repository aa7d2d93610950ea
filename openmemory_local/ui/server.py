"""The server of ``openmemory ui``: Starlette on uvicorn, on 127.0.0.1 only.

:func:`build_app` makes the ASGI application over one data folder; :func:`serve` binds a
loopback socket (a free port, or ``--port``), prints the link with its token, opens
the browser when there is one, and serves until Ctrl-C.

Structure (what a later view adds, and where):

- ``NAV``: the sections of the page, in the header; a view appends its entry.
- ``routes()``: one :class:`~starlette.routing.Route` per page or action; the handlers are
  methods of :class:`Page` (those of publishing, received lessons and the node in
  :class:`.commons_pages.CommonsPages`), each a few lines: read the data (:mod:`.data`, run on
  the store thread by :meth:`Page.store_call`; :mod:`.nodeview` on a worker thread), render a
  template (``templates/``), or call the engine's own function for an action (never a second
  implementation) and redirect.
- :class:`GuardMiddleware` wraps everything: :mod:`.guard`'s checks, the CSRF check of
  every state-changing request, and the security headers of every response.

The store (one SQLite connection) is used from one thread only, a single worker the
handlers hand their reads and writes to; the event loop never blocks on SQLite or on
matplotlib.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from openmemory_local import __version__
from openmemory_local.core.clock import resolve_now
from openmemory_local.render.commons_part import NOTICE
from openmemory_local.core.config import Config
from openmemory_local.ui import data
from openmemory_local.ui.commons_pages import CommonsPages
from openmemory_local.ui.guard import SAFE_METHODS, Guard, Session
from openmemory_local.ui.markup import report_html

__all__ = ["build_app", "serve", "NAV", "GuardMiddleware", "Page"]

HERE = Path(__file__).parent

#: The page's sections: (label, path, key).
NAV = [
    ("Lessons", "/", "lessons"),
    ("Morning reports", "/reports", "reports"),
    ("Publishing", "/publishing", "publishing"),
    ("Commons node", "/node", "node"),
    ("Search", "/search", "search"),
]

MAX_BODY = 64 * 1024  # bytes of a form post
SEARCH_K = 10
MAX_K = 50
MAX_QUERY = 2000

_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                                 b"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


def _when(stamp: Any) -> str:
    if not stamp:
        return ""
    if isinstance(stamp, datetime):
        stamp = stamp.isoformat()
    return str(stamp)[:16].replace("T", " ") + " UTC"


def _clip(text: Any, n: int = 300) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= n else text[: n - 1] + "\u2026"


def _epoch(seconds: Any) -> str:
    """Unix seconds (the node's times) as the page shows times."""
    if seconds is None or seconds == "":
        return ""
    try:
        return _when(datetime.fromtimestamp(float(seconds), tz=timezone.utc))
    except (TypeError, ValueError, OverflowError, OSError):
        return str(seconds)


def _commons_line(rec: dict) -> str:
    from openmemory_local.commons.publish import commons_line

    return commons_line(rec)


class _StoreThread:
    """The store, opened lazily and used from one worker thread only."""

    def __init__(self, config: Config):
        self.config = config
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="openmemory-ui-store")
        self._store = None

    def _get(self):
        if self._store is None:
            from openmemory_local.storage.store import Store

            if not self.config.db_path.is_file():
                return None  # never created here: `openmemory run` makes it
            self._store = Store.open(self.config, create=False)
        return self._store

    async def call(self, fn: Callable, *args, **kwargs):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, lambda: fn(self._get(), *args, **kwargs))

    def close(self) -> None:
        def shut():
            if self._store is not None:
                self._store.close()
                self._store = None

        with contextlib.suppress(RuntimeError):
            self.executor.submit(shut).result(timeout=10)
        self.executor.shutdown(wait=False)


class Page(CommonsPages):
    """The handlers: each reads through the store thread and renders a template (those of
    publishing, received lessons and the node are in :class:`.commons_pages.CommonsPages`)."""

    def __init__(self, config: Config, guard: Guard, now_option: str | None = None):
        self.config = config
        self.guard = guard
        self.now_option = now_option
        self.store = _StoreThread(config)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        env = self.templates.env
        env.filters["when"] = _when
        env.filters["clip"] = _clip
        env.filters["report_html"] = report_html
        env.filters["short"] = lambda rid: str(rid or "")[:16]
        env.filters["epoch"] = _epoch
        env.globals["notice"] = NOTICE
        env.globals["commons_line"] = _commons_line
        env.globals["version"] = __version__
        self._plots: dict[tuple, bytes] = {}

    def now(self) -> datetime:
        return resolve_now(self.now_option)

    async def store_call(self, fn: Callable, *args, **kwargs):
        return await self.store.call(fn, *args, **kwargs)

    # --- rendering ----------------------------------------------------------------------

    async def render(self, request: Request, template: str, section: str, status: int = 200, summary: bool = True,
                     **context) -> Response:
        session: Session = request.scope["state"]["session"]
        if summary:
            summary = await self.store_call(lambda store: data.summary(store) if store is not None else None)
        flash, session.flash[:] = list(session.flash), []
        context.update(nav=NAV, section=section, csrf=session.csrf, summary=summary, flash=flash,
                       home=str(self.config.home), query=context.get("query", ""))
        return self.templates.TemplateResponse(request, template, context, status_code=status)

    async def unusable(self, request: Request, exc: Exception) -> Response:
        """The store cannot be used (not a database, written by a newer openmemory): say so."""
        return await self.render(request, "error.html", "", status=503, summary=False,
                                 title="The store cannot be used", message=str(exc))

    async def missing(self, request: Request, what: str) -> Response:
        return await self.render(request, "error.html", "", status=404, title="Not found", message=what)

    async def no_store(self, request: Request, section: str) -> Response:
        return await self.render(request, "empty.html", section, db=str(self.config.db_path))

    # --- lessons ------------------------------------------------------------------------

    async def lessons(self, request: Request) -> Response:
        include = "all" if request.query_params.get("show") == "all" else "current"
        layers = await self.store_call(lambda s: data.lesson_layers(s, include=include) if s is not None else None)
        if layers is None:
            return await self.no_store(request, "lessons")
        return await self.render(request, "lessons.html", "lessons", layers=layers, layer_titles=dict(data.LAYERS),
                                 include=include)

    async def lesson(self, request: Request) -> Response:
        from openmemory_local.commons.publish import commons_views

        lesson_id = request.path_params["lesson_id"]

        def read(store):
            lesson = data.lesson_page(store, lesson_id) if store is not None else None
            if lesson is not None:  # its records on the commons, as the node reports them (if it was published)
                views = commons_views(store, {lesson_id})
                lesson["commons"] = dict(views["lessons"].get(lesson_id) or {"records": []},
                                         unavailable=views["unavailable"])
            return lesson

        lesson = await self.store_call(read)
        if lesson is None:
            return await self.missing(request, f"There is no lesson #{lesson_id}.")
        return await self.render(request, "lesson.html", "lessons", lesson=lesson, config=self.config)

    async def strength_svg(self, request: Request) -> Response:
        lesson_id = request.path_params["lesson_id"]

        def draw(store):
            if store is None:
                return None
            points = data.strength_history(store, lesson_id)
            if not points:
                return None
            key = (lesson_id, tuple(points))
            if key not in self._plots:
                from openmemory_local.eval.plots import strength_plot

                if len(self._plots) > 256:
                    self._plots.clear()
                self._plots[key] = strength_plot(points, render_min=self.config.render_min_strength,
                                                 archive_below=self.config.archive_below,
                                                 ceiling=self.config.lesson_max_strength)
            return self._plots[key]

        svg = await self.store_call(draw)
        if svg is None:
            return Response("no strength history", status_code=404, media_type="text/plain")
        return Response(svg, media_type="image/svg+xml")

    async def veto(self, request: Request) -> Response:
        from openmemory_local.sleep.lessons import LessonNotFound
        from openmemory_local.render.refresh import set_veto

        lesson_id = request.path_params["lesson_id"]
        vetoed = request.url.path.endswith("/veto")
        now = self.now()
        try:
            outcome = await self.store_call(lambda s: set_veto(s, lesson_id, now, vetoed=vetoed) if s else None)
        except LessonNotFound as exc:
            return await self.missing(request, str(exc))
        if outcome is None:
            return await self.no_store(request, "lessons")
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse(outcome)
        request.scope["state"]["session"].flash.append(outcome["message"])
        return RedirectResponse(f"/lessons/{lesson_id}", status_code=303)

    # --- episodes -----------------------------------------------------------------------

    async def episode(self, request: Request) -> Response:
        episode_id = request.path_params["episode_id"]
        episode = await self.store_call(lambda s: data.episode_page(s, episode_id) if s is not None else None)
        if episode is None:
            return await self.missing(request, f"There is no episode #{episode_id}.")
        return await self.render(request, "episode.html", "lessons", episode=episode)

    # --- reports ------------------------------------------------------------------------

    async def reports(self, request: Request) -> Response:
        report_id = request.path_params.get("report_id")

        def read(store):
            if store is None:
                return None
            return data.reports(store), data.report(store, report_id)

        found = await self.store_call(read)
        if found is None:
            return await self.no_store(request, "reports")
        listing, shown = found
        if report_id is not None and shown is None:
            return await self.missing(request, f"There is no morning report #{report_id}.")
        return await self.render(request, "reports.html", "reports", reports=listing, report=shown)

    # --- search -------------------------------------------------------------------------

    async def search(self, request: Request) -> Response:
        from openmemory_local.recall.query import EmptyQuery

        query = (request.query_params.get("q") or "").strip()[:MAX_QUERY]
        kind = request.query_params.get("kind") or None
        try:
            k = max(1, min(MAX_K, int(request.query_params.get("k") or SEARCH_K)))
        except ValueError:
            k = SEARCH_K
        results, problem = None, None
        if query:
            now = self.now()
            try:
                results = await self.store_call(
                    lambda s: data.search(s, query, k, now, kinds=[kind] if kind else None) if s is not None
                    else {"episodes": [], "lessons": [], "commons": []})
            except EmptyQuery as exc:
                problem = str(exc)
        return await self.render(request, "search.html", "search", query=query, kind=kind or "", k=k,
                                 results=results, problem=problem)

    async def open_result(self, request: Request) -> Response:
        form = request.scope["state"]["form"]
        try:
            episode_id = int(form.get("episode", ""))
        except ValueError:
            return await self.missing(request, "No such search result.")
        now = self.now()
        await self.store_call(lambda s: data.open_result(s, episode_id, now) if s is not None else False)
        return RedirectResponse(f"/episodes/{episode_id}", status_code=303)

    def routes(self) -> list:
        return [
            Route("/", self.lessons),
            Route("/lessons/{lesson_id:int}", self.lesson),
            Route("/lessons/{lesson_id:int}/strength.svg", self.strength_svg),
            Route("/lessons/{lesson_id:int}/veto", self.veto, methods=["POST"]),
            Route("/lessons/{lesson_id:int}/unveto", self.veto, methods=["POST"]),
            Route("/episodes/{episode_id:int}", self.episode),
            Route("/reports", self.reports),
            Route("/reports/{report_id:int}", self.reports),
            Route("/search", self.search),
            Route("/search/open", self.open_result, methods=["POST"]),
            *self.commons_routes(),
            Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
        ]


# --- the door -------------------------------------------------------------------------------------


def _refusal(reason: str) -> bytes:
    from markupsafe import escape

    return (f"<!doctype html><meta charset=utf-8><title>Refused</title><h1>403: refused</h1>"
            f"<p>{escape(reason)}</p>").encode()


class GuardMiddleware:
    """ASGI middleware: every HTTP request through :class:`~.guard.Guard`, every response with
    the security headers; a state-changing request must carry the CSRF token (its body, at
    most ``MAX_BODY`` bytes, is read here and handed on unchanged)."""

    def __init__(self, app, guard: Guard):
        self.app = app
        self.guard = guard

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            return await self.app(scope, receive, send)
        if scope["type"] != "http":  # no websockets here
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        client = scope.get("client")
        verdict = self.guard.check(scope["method"], scope["path"], scope.get("query_string", b"").decode("latin-1"),
                                   headers, client[0] if client else None)

        async def send_secure(message):
            if message["type"] == "http.response.start":
                message = dict(message, headers=list(message.get("headers", [])) + _HEADERS)
            await send(message)

        if verdict.action == "refuse":
            return await _plain(send_secure, 403, _refusal(verdict.reason))
        if verdict.action == "exchange":
            extra = [(b"set-cookie", verdict.cookie.encode())] if verdict.cookie else []
            return await _plain(send_secure, 303, b"", [(b"location", verdict.location.encode()), *extra])
        scope.setdefault("state", {})["session"] = verdict.session
        if scope["method"] not in SAFE_METHODS:
            body = b""
            more = True
            while more:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                body += message.get("body", b"")
                more = message.get("more_body", False)
                if len(body) > MAX_BODY:
                    return await _plain(send_secure, 413, b"request too large")
            if not self.guard.check_csrf(verdict.session, headers.get("x-csrf-token"), body,
                                         headers.get("content-type", "")):
                return await _plain(send_secure, 403, _refusal("this request lacks the page's CSRF token"))
            from urllib.parse import parse_qsl

            form = {}
            if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
                form = dict(parse_qsl(body.decode("latin-1"), keep_blank_values=True))
            scope["state"]["form"] = form
            replayed = False

            async def receive_body():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            return await self.app(scope, receive_body, send_secure)
        return await self.app(scope, receive, send_secure)


async def _plain(send, status: int, body: bytes, headers: list | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/html; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *(headers or [])]})
    await send({"type": "http.response.body", "body": body})


def build_app(config: Config, guard: Guard, now_option: str | None = None, on_start: Callable | None = None):
    """The ASGI application over ``config``'s data folder, behind ``guard``."""
    page = Page(config, guard, now_option)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if on_start is not None:
            on_start()
        try:
            yield
        finally:
            page.store.close()

    from openmemory_local.storage.store import StoreError

    app = Starlette(routes=page.routes(), lifespan=lifespan, exception_handlers={StoreError: page.unusable})
    app.state.page = page
    return GuardMiddleware(app, guard)


# --- serving ----------------------------------------------------------------------------------------


class PortInUse(OSError):
    pass


def loopback_socket(port: int = 0) -> socket.socket:
    """A listening TCP socket on 127.0.0.1 (``port`` 0: a free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError as exc:
        sock.close()
        raise PortInUse(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None
    sock.listen(64)
    sock.setblocking(False)
    return sock


def has_browser() -> bool:
    """Whether a browser can be opened: a graphical session (or macOS, Windows), or ``$BROWSER``."""
    if os.environ.get("BROWSER"):
        return True
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def open_browser(url: str, out=None) -> Path | None:
    """Open ``url`` in the browser through a private redirect file (mode 0600, as Jupyter
    does), so that the token never appears in a process list. Returns the file, or None."""
    import webbrowser

    fd, name = tempfile.mkstemp(prefix="openmemory-ui-", suffix=".html")
    from markupsafe import escape

    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={escape(url)}">'
                     f'<title>Open Memory</title><p><a href="{escape(url)}">Open Memory</a></p>\n')
    try:
        opened = webbrowser.open(Path(name).as_uri(), new=2)
    except Exception as exc:  # any browser failure: the printed link still works
        opened = False
        print(f"could not open a browser ({exc}); open the link above yourself", file=out or sys.stderr)
    if not opened:
        os.unlink(name)
        return None
    return Path(name)


def serve(config: Config, *, port: int = 0, browser: bool = True, now_option: str | None = None,
          as_json: bool = False, out=None) -> int:
    """Serve the page until interrupted; returns the exit code."""
    import json

    import uvicorn

    out = out or sys.stdout
    sock = loopback_socket(port)
    port = sock.getsockname()[1]
    guard = Guard(port)
    link = guard.url(guard.new_token())
    opened: list[Path] = []
    want_browser = browser and has_browser()

    def on_start():
        if want_browser:
            def go():
                path = open_browser(guard.url(guard.new_token()))
                if path is not None:
                    opened.append(path)

            threading.Thread(target=go, name="openmemory-ui-browser", daemon=True).start()

    app = build_app(config, guard, now_option, on_start=on_start)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, server_header=False,
                                           proxy_headers=False, lifespan="on", timeout_graceful_shutdown=5))
    if as_json:
        print(json.dumps({"url": link, "port": port, "home": str(config.home)}), file=out, flush=True)
    else:
        print(f"Open Memory's page for {config.home}, on this machine only (127.0.0.1:{port}):\n\n    {link}\n\n"
              "The link signs in any tab or browser of this machine that opens it, until Ctrl-C stops the page.",
              file=out, flush=True)
        if browser and not want_browser:
            print("(no browser to open here: open the link yourself)", file=out, flush=True)
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for path in opened:
            with contextlib.suppress(OSError):
                path.unlink()
    return 0
