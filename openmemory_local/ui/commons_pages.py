"""The page's commons views and actions: publishing, a received lesson, the node.

:class:`CommonsPages` is a part of :class:`~openmemory_local.ui.server.Page` (its handlers
use the page's store thread, templates and clock). Every action calls the engine's own
function, the one the CLI command calls, never a second implementation:

==========================================  ================================================
the page                                    the command (and its function)
==========================================  ================================================
opt in (after the preview)                  ``openmemory publish enable`` (``publish.enable``),
                                            the preview ``publish --dry-run`` (``dry_run``)
opt out (with the offer to revoke)          ``openmemory publish disable [--revoke]`` (``disable``)
publish now                                 ``openmemory publish`` (``publish.publish``)
revoke a published lesson                   ``openmemory revoke`` (``publish.revoke``)
veto / unveto a received lesson             ``openmemory veto|unveto RECORD_ID``
                                            (``commons.set_commons_veto``)
revoke locally / lift it on the node        ``openmemory-node revoke ID --local`` / ``--undo``
trust / revokers: add, remove               ``openmemory-node trust|revokers add|remove KEY``
==========================================  ================================================

The node's actions go through :mod:`openmemory_local.commons.node_link` (the endpoints and bodies
the node's CLI sends; :mod:`.nodeview`); after one, the engine pulls what changed and
re-renders the memory folders holding a file that may no longer be there
(:func:`openmemory_local.render.refresh.refresh_folders`, what the SessionStart hook does), so a
lesson revoked here leaves them at once. Without a node running, the views say so and how
to start one; nothing fails.
"""

from __future__ import annotations

import asyncio
import re
from typing import Callable

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from openmemory_local.ui import data, nodeview

__all__ = ["CommonsPages", "RECORD_ID"]

#: A record id in a path or a form: hex, 8 digits at least (a prefix), 68 at most.
RECORD_ID = re.compile(r"[0-9a-f]{8,68}")
_KEY = re.compile(r"[0-9A-Za-z]{16,80}")
MAX_REASON = 500
MAX_NOTE = 200


def _safe_next(value: str | None, default: str) -> str:
    """A path on this page to go back to (never another site: no scheme, no ``//``)."""
    if value and value.startswith("/") and not value.startswith("//") and "\\" not in value and len(value) < 300:
        return value
    return default


class CommonsPages:
    """Handlers of the publishing, commons and node views (mixed into ``Page``)."""

    # --- helpers ------------------------------------------------------------------------------

    def node_home(self) -> str:
        from openmemory_local.core.config import default_node_home

        return str(self.config.node_home or default_node_home())

    async def node_call(self, fn: Callable):
        """``fn(link)`` on a worker thread: ``(result, None)``, or ``(None, problem)`` when no
        node answers (``problem["unavailable"]``) or it refused."""
        from openmemory_local.commons.node_link import NodeError, NodeUnavailable, open_link

        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, lambda: fn(open_link(self.config))), None
        except NodeUnavailable as exc:
            return None, {"unavailable": True, "message": str(exc)}
        except NodeError as exc:
            return None, {"unavailable": False, "message": str(exc), "status": exc.status}

    @staticmethod
    def _form(request: Request) -> dict:
        return request.scope["state"].get("form") or {}

    @staticmethod
    def _flash(request: Request, *messages: str) -> None:
        request.scope["state"]["session"].flash.extend(m for m in messages if m)

    def _back(self, request: Request, default: str) -> Response:
        return RedirectResponse(_safe_next(self._form(request).get("next"), default), status_code=303)

    # --- publishing ---------------------------------------------------------------------------

    async def publishing(self, request: Request) -> Response:
        from openmemory_local.commons.publish import REVOKE_CODES, commons_views

        def read(store):
            if store is None:
                return None
            views = commons_views(store)
            on_node = {rec["record_id"]: rec["node"] for lesson in views["lessons"].values()
                       for rec in lesson["records"]}
            return data.publishing(store, on_node), views["unavailable"]

        found = await self.store_call(read)
        if found is None:
            return await self.no_store(request, "publishing")
        view, problem = found
        return await self.render(request, "publishing.html", "publishing", view=view, node_problem=problem,
                                 codes=REVOKE_CODES, node_home=self.node_home())

    async def opt_in_preview(self, request: Request) -> Response:
        from openmemory_local.commons.publish import dry_run, resolve_families

        fam = request.query_params.get("family", "")
        now = self.now()

        def read(store):
            if store is None:
                return None
            if not data.family_known(store, fam):
                return False
            return dry_run(store, now, families=resolve_families(store, fam))

        preview = await self.store_call(read)
        if preview is None:
            return await self.no_store(request, "publishing")
        if preview is False:
            return await self.missing(request, f"No project family {fam!r} is known to this memory.")
        return await self.render(request, "publish_preview.html", "publishing", family=fam, preview=preview)

    async def opt_in(self, request: Request) -> Response:
        from openmemory_local.commons.publish import enable, enable_messages

        fam = self._form(request).get("family", "")
        now = self.now()

        def act(store):
            if store is None or not data.family_known(store, fam):
                return None
            return enable_messages(enable(store, fam, now), store.config.publish_min_strength)

        messages = await self.store_call(act)
        if messages is None:
            return await self.missing(request, f"No project family {fam!r} is known to this memory.")
        self._flash(request, *messages)
        return RedirectResponse("/publishing", status_code=303)

    async def opt_out_preview(self, request: Request) -> Response:
        fam = request.query_params.get("family", "")

        def read(store):
            if store is None or not data.family_known(store, fam):
                return None
            return next(f for f in data.publishing(store)["families"] if f["family"] == fam)

        family = await self.store_call(read)
        if family is None:
            return await self.missing(request, f"No project family {fam!r} is known to this memory.")
        return await self.render(request, "publish_optout.html", "publishing", family=family)

    async def opt_out(self, request: Request) -> Response:
        from openmemory_local.commons.node_link import NodeError, NodeUnavailable
        from openmemory_local.commons.publish import PublishError, disable, disable_messages

        form = self._form(request)
        fam, revoke = form.get("family", ""), form.get("revoke") == "1"
        now = self.now()

        def act(store):
            if store is None or not data.family_known(store, fam):
                return None
            try:
                return disable_messages(disable(store, fam, now, revoke_published=revoke), fam)
            except NodeUnavailable as exc:  # opted out; the revocations wait for a node (as the CLI says)
                return [f"{fam}: opted out, but nothing was revoked: {exc}"]
            except (NodeError, PublishError) as exc:
                return [f"{fam}: opted out, but the revocation failed: {exc}"]

        messages = await self.store_call(act)
        if messages is None:
            return await self.missing(request, f"No project family {fam!r} is known to this memory.")
        self._flash(request, *messages)
        return RedirectResponse("/publishing", status_code=303)

    async def publish_now(self, request: Request) -> Response:
        from openmemory_local.commons.publish import publish, publish_messages

        now = self.now()
        messages = await self.store_call(lambda s: publish_messages(publish(s, now), detail=True) if s else None)
        self._flash(request, *(messages or ["No project is opted in: nothing is published."]))
        return RedirectResponse("/publishing", status_code=303)

    async def revoke_published(self, request: Request) -> Response:
        from openmemory_local.commons.node_link import NodeError, NodeUnavailable
        from openmemory_local.commons.publish import PublishError, revoke, revoke_messages

        form = self._form(request)
        code, reason = form.get("code") or "withdrawn", (form.get("reason") or "").strip()[:MAX_REASON]
        now = self.now()
        try:
            lesson_id = int(form.get("lesson", ""))
        except ValueError:
            return await self.missing(request, "No such published lesson.")

        def act(store):
            if store is None:
                return None
            try:
                return revoke_messages(revoke(store, lesson_id, now, code=code, reason=reason), code)
            except PublishError as exc:
                return [f"Not revoked: {exc}"]
            except NodeUnavailable as exc:
                return [f"Nothing was revoked: {exc}"]
            except NodeError as exc:
                return [f"The commons node refused: {exc}"]

        self._flash(request, *(await self.store_call(act) or []))
        return self._back(request, "/publishing")

    # --- a received lesson --------------------------------------------------------------------

    async def commons_lesson(self, request: Request) -> Response:
        record_id = request.path_params["record_id"].lower()
        if not RECORD_ID.fullmatch(record_id):
            return await self.missing(request, f"{record_id[:80]!r} is not a record id.")

        def read(store):
            if store is None:
                return None
            row = data.commons_page(store, record_id)
            return (row, data.commons_ids(store), data.local_chain(store, row["record_id"])) if row else None

        found = await self.store_call(read)
        if found is None:
            return await self.missing(request, f"This memory holds no received lesson {record_id}.")
        lesson, held, local = found
        on_node, problem = await self.node_call(lambda link: nodeview.lesson_on_node(link, lesson["record_id"]))
        chain = on_node["chain"] if on_node and on_node.get("chain") else local
        graph = self._graph(chain, held)
        return await self.render(request, "commons_lesson.html", "lessons", lesson=lesson, node=on_node,
                                 node_problem=problem, graph=graph, chain_from="node" if on_node else "store",
                                 node_home=self.node_home())

    @staticmethod
    def _graph(chain: dict, held: set[str]) -> str:
        from markupsafe import Markup

        from openmemory_local.eval.plots import provenance_svg

        svg = provenance_svg(chain, href=lambda n: f"/commons/{n['id']}" if n["id"] in held else None,
                             title=f"provenance chain of {str(chain.get('id'))[:16]}")
        return Markup(svg.decode())  # built by provenance_svg, every text in it escaped

    async def provenance_image(self, request: Request) -> Response:
        record_id = request.path_params["record_id"].lower()
        if not RECORD_ID.fullmatch(record_id):
            return Response("not a record id", status_code=404, media_type="text/plain")
        found = await self.store_call(
            lambda s: (data.commons_page(s, record_id), data.commons_ids(s)) if s is not None else (None, None))
        lesson, held = found
        if lesson is None:
            return Response("no such received lesson", status_code=404, media_type="text/plain")
        on_node, _ = await self.node_call(lambda link: link.commons(lesson["record_id"]))
        chain = (on_node or {}).get("chain") or await self.store_call(
            lambda s: data.local_chain(s, lesson["record_id"]))
        return Response(str(self._graph(chain, held)), media_type="image/svg+xml")

    async def commons_veto(self, request: Request) -> Response:
        from openmemory_local.commons.receive import CommonsNotFound
        from openmemory_local.render.refresh import set_commons_veto

        record_id = request.path_params["record_id"].lower()
        vetoed = request.url.path.endswith("/veto")
        now = self.now()
        if not RECORD_ID.fullmatch(record_id):
            return await self.missing(request, f"{record_id[:80]!r} is not a record id.")
        try:
            outcome = await self.store_call(
                lambda s: set_commons_veto(s, record_id, now, vetoed=vetoed) if s is not None else None)
        except CommonsNotFound as exc:
            return await self.missing(request, str(exc))
        if outcome is None:
            return await self.no_store(request, "lessons")
        self._flash(request, outcome["message"])
        return RedirectResponse(f"/commons/{outcome['commons']}", status_code=303)

    # --- the node -----------------------------------------------------------------------------

    async def node(self, request: Request) -> Response:
        view, problem = await self.node_call(nodeview.overview)
        held = await self.store_call(lambda s: data.commons_ids(s) if s is not None else set())
        return await self.render(request, "node.html", "node", view=view, problem=problem, held=held,
                                 node_home=self.node_home(), start=nodeview.start_hint(self.node_home()))

    async def _node_action(self, request: Request, fn: Callable, default: str = "/node") -> Response:
        """Run a node action (``fn(link)`` -> the sentence the node's CLI prints), then let the
        engine pull what changed and take out of the memory folders what may no longer be there."""
        message, problem = await self.node_call(fn)
        if problem is not None:
            self._flash(request, ("The commons node is not running: nothing was done. " if problem["unavailable"]
                                  else "The commons node refused: ") + problem["message"])
            return self._back(request, default)
        self._flash(request, message)
        now = self.now()

        def refresh(store):
            from openmemory_local.render.refresh import refresh_folders
            from openmemory_local.commons.node_link import open_link

            if store is None:
                return None
            return refresh_folders(store, now, link=open_link(self.config))

        from openmemory_local.commons.node_link import NodeError, NodeUnavailable

        try:
            done = await self.store_call(refresh)
        except (NodeUnavailable, NodeError) as exc:  # done on the node; the next run or session start catches up
            done = {"pull": f"not pulled ({exc})", "removed": []}
        if done:
            removed = len(done.get("removed") or [])
            self._flash(request, f"This memory pulled from the node: {done.get('pull')}"
                        + (f"; {removed} file{'s' if removed != 1 else ''} left the memory folders." if removed
                           else "."))
        return self._back(request, default)

    async def node_revoke_local(self, request: Request) -> Response:
        form = self._form(request)
        record_id = (form.get("id") or "").strip().lower()
        reason = (form.get("reason") or "").strip()[:MAX_REASON]
        if not RECORD_ID.fullmatch(record_id):
            self._flash(request, f"{record_id[:80]!r} is not a record id: nothing was revoked.")
            return self._back(request, "/node")
        return await self._node_action(request, lambda link: nodeview.revoke_local(link, record_id, reason))

    async def node_lift_local(self, request: Request) -> Response:
        record_id = (self._form(request).get("id") or "").strip().lower()
        if not RECORD_ID.fullmatch(record_id):
            self._flash(request, f"{record_id[:80]!r} is not a record id.")
            return self._back(request, "/node")
        return await self._node_action(request, lambda link: nodeview.lift_local(link, record_id))

    async def node_keys(self, request: Request) -> Response:
        from openmemory_local.commons.node_link import KEY_LISTS

        form = self._form(request)
        name, action = form.get("list", ""), form.get("action", "")
        key, note = (form.get("key") or "").strip(), (form.get("note") or "").strip()[:MAX_NOTE]
        if name not in KEY_LISTS or action not in ("add", "remove"):
            return await self.missing(request, "No such list or action.")
        if not _KEY.fullmatch(key):
            self._flash(request, f"{key[:80]!r} is not a key: 64 hex digits, or a peer id (12D3KooW...).")
            return self._back(request, "/node")
        return await self._node_action(request, lambda link: nodeview.change_key(link, name, action, key, note))

    def commons_routes(self) -> list:
        return [
            Route("/publishing", self.publishing),
            Route("/publishing/opt-in", self.opt_in_preview, methods=["GET"]),
            Route("/publishing/opt-in", self.opt_in, methods=["POST"]),
            Route("/publishing/opt-out", self.opt_out_preview, methods=["GET"]),
            Route("/publishing/opt-out", self.opt_out, methods=["POST"]),
            Route("/publishing/publish", self.publish_now, methods=["POST"]),
            Route("/publishing/revoke", self.revoke_published, methods=["POST"]),
            Route("/commons/{record_id:str}", self.commons_lesson),
            Route("/commons/{record_id:str}/provenance.svg", self.provenance_image),
            Route("/commons/{record_id:str}/veto", self.commons_veto, methods=["POST"]),
            Route("/commons/{record_id:str}/unveto", self.commons_veto, methods=["POST"]),
            Route("/node", self.node),
            Route("/node/revoke-local", self.node_revoke_local, methods=["POST"]),
            Route("/node/lift-local", self.node_lift_local, methods=["POST"]),
            Route("/node/keys", self.node_keys, methods=["POST"]),
        ]
