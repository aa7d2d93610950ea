"""The local API, version 1: what changed since a cursor (for the engine's commons layer).

    GET /v1/changes?after=SEQ&limit=&type=

Every record carries a change number (``records.change``, :mod:`openmemory_node.store`):
the next one is given at every arrival and every status change, so the records above a
cursor are exactly what a reader has not seen yet, a lesson that became ``common``,
``faded`` or ``revoked`` without a new record of its own included (an attestation, a
revocation, a trust-list change recomputing statuses). The answer lists them in change
order, each as ``GET /v1/records/{id}`` shows it plus ``change`` and, for a lesson and an
attestation, ``commons``: the summary of the lesson's group (for an attestation, of the
lesson it names, when that lesson is here)::

    {"changes": [...], "next_after": SEQ, "last": SEQ, "more": bool}

``next_after`` is the cursor to pass next (the ``after`` given when nothing changed);
``last`` is the highest change number on this node (a cursor above it comes from another
store: start again from 0); ``more`` says a full page was returned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .api import MAX_LIST, record_view
from .httpserver import HttpError, HttpServer, Request

if TYPE_CHECKING:
    from .commons import Commons
    from .interface import NodeInterface

DEFAULT_LIMIT = 500
TYPES = ("lesson", "attestation", "revocation", "vouch")


def lesson_summary(machine: "Commons", lid: str) -> dict[str, Any] | None:
    """A lesson's group as the engine needs it: status, head, authors, counted confirmers."""
    lesson = machine.lessons.get(lid)
    if lesson is None:
        return None
    group = machine.groups[lesson.key]
    tally = group.replay.tally if group.replay else None
    votes = machine._votes(group)
    return {
        "lesson": lid,
        "status": machine.status(lid),
        "group": group.head,
        "members": len(group.members),
        "authors": sorted({machine.lessons[m].signer.hex() for m in group.members}),
        "confirmers": tally.confirmers if tally else 0,
        "threshold": machine.config.threshold,
        "policy": machine.policy.name,
        "votes": len(votes),
        "counted": len(votes) - len(group.refused),
        # R10: each part's counted confirmers (a claim is common once each part has N)
        "parts": {p.part: p.confirmers for p in tally._each()} if tally else {},
    }


def install_changes(api: HttpServer, daemon: "NodeInterface") -> None:
    @api.route("GET", "/v1/changes")
    async def changes(req: Request) -> tuple[int, Any]:
        after = req.int_query("after", 0, 0)
        limit = req.int_query("limit", DEFAULT_LIMIT, 1, MAX_LIST)
        type_ = req.query.get("type")
        if type_ is not None and type_ not in TYPES:
            raise HttpError(400, "bad-request", f"type is one of {', '.join(TYPES)}")
        rows = daemon.store.changes(after, limit, type_)
        machine = daemon.commons.machine if daemon.commons is not None else None
        out = []
        for change, row in rows:
            view = record_view(row)
            view["change"] = change
            if machine is not None and row.type in ("lesson", "attestation"):
                lid = row.id if row.type == "lesson" else (view.get("record") or {}).get("lesson_id")
                if isinstance(lid, str):
                    view["commons"] = lesson_summary(machine, lid)
            out.append(view)
        return 200, {"changes": out, "next_after": rows[-1][0] if rows else after,
                     "last": daemon.store.last_change(), "more": len(rows) == limit}
