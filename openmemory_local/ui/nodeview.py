"""What the page shows of the commons node, asked through its local API only
(:mod:`openmemory_local.commons.node_link`: the engine never imports ``openmemory_node``).

Each function takes a :class:`~openmemory_local.commons.node_link.NodeLink` and returns plain data;
it raises :class:`~openmemory_local.commons.node_link.NodeUnavailable` when no node answers (the
page then says so, and how to start one) and :class:`~openmemory_local.commons.node_link.NodeError`
when the node refuses. The actions (revoke locally, lift it, trust or stop trusting a key,
add or remove a revoker) are the node's own endpoints, called with the bodies
``openmemory-node revoke --local``, ``revoke --undo``, ``trust add|remove`` and ``revokers
add|remove`` send; their one-line outcomes are the sentences those commands print.
"""

from __future__ import annotations

from typing import Any

__all__ = ["overview", "lesson_on_node", "REFUSALS", "STATUS_ORDER", "revoke_local", "lift_local", "change_key",
           "start_hint"]

#: Why the node did not count a vote (its policy's short codes), for people.
REFUSALS = {
    "untrusted": "its key is not in this node's trust list, nor vouched for by a key in it",
    "author": "it is an author of the lesson",
    "met-before": "its agent had met the surprise before it received the lesson",
    "corroboration": "an author of the same observation, who met it itself",
}
#: The order statuses are listed in, per record type.
STATUS_ORDER = {
    "lesson": ("common", "candidate", "faded", "revoked"),
    "attestation": ("counted", "not-counted", "pending", "revoked"),
    "revocation": ("effective", "no-effect", "pending"),
    "vouch": ("effective", "no-effect", "revoked"),
}
_RECENT = 50


def start_hint(node_home) -> str:
    """How to start a node on ``node_home`` (made first, if it was never made)."""
    from pathlib import Path

    start = f"openmemory-node start --home {node_home}"
    if (Path(node_home) / "config.toml").is_file():
        return start
    return f"openmemory-node init --home {node_home} && {start}"


def _by_status(counts: dict) -> list[dict]:
    out = []
    types = list(STATUS_ORDER)
    for rtype in sorted(counts, key=lambda t: (types.index(t) if t in types else len(types), t)):
        statuses = counts[rtype] or {}
        order = STATUS_ORDER.get(rtype, ())
        shown = [(s, statuses[s]) for s in order if s in statuses]
        shown += sorted((s, n) for s, n in statuses.items() if s not in order)
        out.append({"type": rtype, "statuses": shown, "total": sum(n for _, n in shown)})
    return out


def overview(link) -> dict:
    """The node view: who it is, its peers, its records by status, the revocations it holds
    (signed ones, with their effect here, and local ones), its trust and revokers lists."""
    info = link.node()
    status = link.status()
    peers = sorted(link.peers().get("peers") or [], key=lambda p: (not p.get("connected"), p.get("peer_id") or ""))
    trust = link.keys("trust")
    revokers = link.keys("revokers")
    team, blocked = _optional_list(link, "team"), _optional_list(link, "blocked")
    local = link.local_revocations().get("local_revocations") or []
    revocations = []
    for rec in link.records(type="revocation", limit=_RECENT).get("records") or []:
        body = rec.get("record") or {}
        revocations.append({"id": rec.get("id"), "status": rec.get("status"), "target": body.get("target"),
                            "reason_code": body.get("reason_code"), "reason": body.get("reason"),
                            "signer": body.get("signer"), "created": rec.get("created"), "via": rec.get("via")})
    lessons = [{"id": r.get("id"), "status": r.get("status"), "kind": r.get("kind"), "created": r.get("created"),
                "text": (r.get("record") or {}).get("text"), "author": r.get("author")}
               for r in link.records(type="lesson", limit=_RECENT).get("records") or []]
    self_key = info.get("public_key")
    return {"node": info, "address": link.address, "home": str(link.home), "status": status,
            "records": _by_status(status.get("records") or {}), "peers": peers,
            "trust": trust.get("trust") or [], "vouched": trust.get("vouched") or [], "policy": trust.get("policy"),
            "revokers": revokers.get("revokers") or [], "local_revocations": local, "revocations": revocations,
            "team": team, "blocked": blocked,
            "lessons": lessons, "commons": status.get("commons") or {}, "self_key": self_key}


def lesson_on_node(link, record_id: str) -> dict:
    """A lesson as the node explains it (``GET /v1/commons/{id}``): status, group and its
    history, the policy and threshold, the tally, every vote (counted, or not and why, with
    whether the voter's key is trusted here), revocations, and the provenance chain."""
    view = link.commons(record_id)
    commons = view.get("commons") or {}
    trust = link.keys("trust")
    trusted = {row["key"] for row in trust.get("trust") or []} | set(trust.get("vouched") or [])
    votes = commons.get("votes") or {}
    shown = []
    for vote in votes.get("shown") or []:
        reason = vote.get("reason")
        shown.append(dict(vote, trusted=vote.get("signer") in trusted,
                          why=REFUSALS.get(reason, reason) if reason else None))
    return {"record": view, "status": view.get("status"), "commons": commons, "chain": view.get("chain") or {},
            "votes": shown, "votes_total": votes.get("total", 0), "votes_counted": votes.get("counted", 0),
            "refused": votes.get("refused") or {}, "tally": commons.get("tally") or {},
            "group": commons.get("group") or {}, "revocations": commons.get("revocations") or [],
            "local_revocation": bool(commons.get("local_revocation")),
            "revoked_because": commons.get("revoked_because"), "policy": commons.get("policy"),
            "threshold": commons.get("threshold")}


# --- actions: the node CLI's requests, and what it prints ---------------------------------------


def revoke_local(link, record_id: str, reason: str = "") -> str:
    """``openmemory-node revoke ID --local --reason T``."""
    data: Any = link.revoke_local(record_id, reason)
    return f"{data['id']}  revoked here only (never published); now {data['status']}, {data['changed']} statuses " \
           "changed"


def lift_local(link, record_id: str) -> str:
    """``openmemory-node revoke ID --undo``."""
    data: Any = link.lift_local_revocation(record_id)
    return f"{data['id']}  local revocation lifted; now {data['status']}"


def _optional_list(link, name: str) -> list:
    """The node's team or blocked list (an older node without it: empty)."""
    from openmemory_local.commons.node_link import NodeError

    try:
        return link.keys(name).get(name) or []
    except NodeError:
        return []


def change_key(link, name: str, action: str, key: str, note: str = "") -> str:
    """``openmemory-node trust|revokers|team|blocked add KEY [--note T]`` or ``remove KEY``."""
    if action == "add":
        data: Any = link.add_key(name, key, note)
        done = "added" if data.get("added") else "already listed"
    elif action == "remove":
        data = link.remove_key(name, key)
        done = "removed"
    else:
        raise ValueError(f"unknown action {action!r} (add or remove)")
    return f"{data['key']}  {done}; {data['changed']} statuses changed"
