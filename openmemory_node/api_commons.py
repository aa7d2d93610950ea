"""The local API, version 1, part 2: the commons (attest, revoke, trust, vouch), sync, peers.

    POST   /v1/attest                {id, failure?, fix?, exposed?, met_before?, evidence?}: sign a
                                     version 2 attestation, store, publish; or {id, verdict, ...}:
                                     version 1 for a version 1 lesson, else mapped to the parts
    POST   /v1/revoke                {id, reason_code?, reason?, local?}: sign and publish, or
                                     (local) revoke here only
    DELETE /v1/revoke/{id}           lift a local revocation
    GET    /v1/revocations/local     the local revocations
    GET    /v1/commons/{id}          a record with its commons status explained and its chain
    GET    /v1/trust                 trusted keys (config.toml and run-time), and the vouched
    POST   /v1/trust                 {key, note?}; DELETE /v1/trust/{key}
    GET    /v1/revokers              likewise for the revokers list
    POST   /v1/revokers              {key, note?}; DELETE /v1/revokers/{key}
    POST   /v1/vouch                 {key}: sign a vouch for a key, store, publish
    GET    /v1/sync                  sync counters and the last session with each peer
    POST   /v1/sync                  {peer?}: a sync session now, with one peer or every one
    POST   /v1/peers                 {addr}: a peer to keep connected (dialled now)
    POST   /v1/peers/{peer}/block    cut a peer off; DELETE the same path lifts it
"""

from __future__ import annotations

from typing import Any

import trio

from . import wire
from .api import ingest_response, record_view, resolve_id
from .commons import CONFIRMED, FAILED, Commons
from .host import peer_info
from .httpserver import HttpError, HttpServer, Request, bad_request
from .identity import parse_public_key, peer_id_of
from .interface import NodeInterface
from .reconnect import transport_addr
from .store import Store

DEFAULT_EVIDENCE_WINDOW = 14 * 86400
ROLES = {"trust": "trust", "revokers": "revoker", "team": "team", "blocked": "blocked"}


def _key(value: Any) -> bytes:
    try:
        return parse_public_key(value)
    except ValueError as exc:
        raise HttpError(400, "bad-key", str(exc)) from None


def _commons(daemon: NodeInterface) -> Any:
    if daemon.commons is None:
        raise HttpError(409, "no-commons", "this node runs without the commons state machine")
    return daemon.commons


def commons_view(machine: Commons, store: Store, rid: str) -> dict[str, Any]:
    """A record, why it has its status, and its provenance chain with each record's text."""
    row = store.get(rid)
    view = record_view(row) if row is not None else {"id": rid, "status": "absent"}
    if rid in machine:
        view["commons"] = machine.explain(rid)
    view["chain"] = _with_texts(store, machine.chain(rid))
    return view


def _with_texts(store: Store, node: dict[str, Any]) -> dict[str, Any]:
    row = store.get(node["id"])
    if row is not None:
        node["type"] = row.type
        try:
            record = wire.decode(row.data)
            node["text"] = getattr(record, "text", None)
        except wire.WireError:
            node["text"] = None
    for name in ("parents", "children"):
        for child in node.get(name, ()):
            _with_texts(store, child)
    return node


def install_commons(api: HttpServer, daemon: NodeInterface) -> None:
    def sign_and_ingest(record: Any) -> tuple[int, Any]:
        data = wire.encode(record)
        outcome = daemon.ingest.accept(data, peer=None, via="local")
        return ingest_response(daemon, outcome, data)

    def now() -> int:
        return int(daemon.clock())

    # -- attest ------------------------------------------------------------------------------
    @api.route("POST", "/v1/attest")
    async def attest(req: Request) -> tuple[int, Any]:
        body = req.fields({"id", "verdict", "failure", "fix", "exposed", "met_before", "evidence"})
        idb = resolve_id(daemon.store, body.string("id", required=True))
        by_parts = "failure" in body or "fix" in body or "exposed" in body
        if by_parts and "verdict" in body:
            raise bad_request("give either verdict (version 1) or failure and fix (version 2), not both")
        if by_parts:
            failure = body.choice("failure", wire.PART_VERDICTS, "untested")
            fix = body.choice("fix", wire.PART_VERDICTS, "untested")
            exposed = body.boolean("exposed", False)
        else:
            verdict = body.choice("verdict", (CONFIRMED, FAILED), required=True)
        met_before = body.boolean("met_before", False)
        row = daemon.store.get_by_idb(idb)
        if row is None:
            raise HttpError(404, "not-found", f"no lesson {idb.hex()} here (fetch it first)")
        if row.type != "lesson":
            raise HttpError(422, "not-a-lesson", f"{idb.hex()} is a {row.type}; attest lessons")
        version = wire.decode(row.data).version
        if version == 1 and by_parts:
            raise HttpError(422, "lesson-version", f"{idb.hex()} is a version 1 lesson, which has no parts: "
                            "attest it with verdict (confirmed or failed)")
        if version != 1 and not by_parts:
            # a version 2 lesson gets a version 2 attestation: the verdict is about its failure
            failure, fix, exposed = verdict, "untested", False
        confirms = (verdict == CONFIRMED) if version == 1 else CONFIRMED in (failure, fix)
        given = body.object("evidence", {"sessions", "matched", "window"})
        if given is None:
            evidence = {"sessions": 1, "matched": 1 if confirms else 0, "window": DEFAULT_EVIDENCE_WINDOW}
        else:
            sessions = given.integer("sessions", required=True, low=0, high=wire.MAX_EVIDENCE_COUNT)
            evidence = {
                "sessions": sessions,
                "matched": given.integer("matched", required=True, low=1 if confirms else 0, high=sessions),
                "window": given.integer("window", required=True, low=1, high=wire.MAX_EVIDENCE_WINDOW),
            }
        try:
            if version == 1:
                record = wire.new_attestation(daemon.identity.signing_key, lesson_id=idb, verdict=verdict,
                                              met_before=met_before, evidence=evidence, created=now())
            else:
                record = wire.new_attestation(daemon.identity.signing_key, lesson_id=idb, failure=failure, fix=fix,
                                              exposed=exposed, met_before=met_before, evidence=evidence,
                                              created=now())
        except wire.WireError as exc:
            raise HttpError(422, exc.code, exc.message) from None
        status, view = sign_and_ingest(record)
        view["lesson"] = _commons(daemon).machine.explain(idb.hex())
        return status, view

    # -- revoke ------------------------------------------------------------------------------
    @api.route("POST", "/v1/revoke")
    async def revoke(req: Request) -> tuple[int, Any]:
        body = req.fields({"id", "reason_code", "reason", "local"})
        idb = resolve_id(daemon.store, body.string("id", required=True))
        reason = body.string("reason", "", max_bytes=wire.MAX_REASON_BYTES)
        code = body.choice("reason_code", wire.REASON_CODES, "incorrect")
        rid = idb.hex()
        if body.boolean("local", False):
            rules = _commons(daemon)
            added = daemon.store.add_local_revocation(rid, reason)
            changed = rules.rebuild()
            return (201 if added else 200), {
                "local": True, "id": rid, "added": added, "changed": changed,
                "status": rules.machine.status(rid) or "absent (revoked if it arrives)",
            }
        try:
            record = wire.new_revocation(daemon.identity.signing_key, target=idb, reason_code=code,
                                         reason=reason, created=now())
        except wire.WireError as exc:
            raise HttpError(422, exc.code, exc.message) from None
        status, view = sign_and_ingest(record)
        machine = _commons(daemon).machine
        view["effect"] = machine.explain(record.id)
        view["target_status"] = machine.status(rid) or "absent"
        return status, view

    @api.route("DELETE", "/v1/revoke/{id}")
    async def unrevoke(req: Request) -> tuple[int, Any]:
        rid = resolve_id(daemon.store, req.params["id"], extra=daemon.store.local_revocations()).hex()
        if not daemon.store.remove_local_revocation(rid):
            raise HttpError(404, "not-found", f"no local revocation of {rid} (a published revocation is final)")
        changed = _commons(daemon).rebuild()
        return 200, {"id": rid, "lifted": True, "changed": changed,
                     "status": _commons(daemon).machine.status(rid) or "absent"}

    @api.route("GET", "/v1/revocations/local")
    async def local_revocations(req: Request) -> tuple[int, Any]:
        machine = _commons(daemon).machine
        return 200, {"local_revocations": [
            {"id": rid, **info, "status": machine.status(rid) or "absent"}
            for rid, info in daemon.store.local_revocations().items()]}

    # -- status and chain -------------------------------------------------------------------
    @api.route("GET", "/v1/commons/{id}")
    async def commons(req: Request) -> tuple[int, Any]:
        rid = resolve_id(daemon.store, req.params["id"]).hex()
        view = commons_view(_commons(daemon).machine, daemon.store, rid)
        if view.get("status") == "absent" and not view["chain"]["children"]:
            raise HttpError(404, "not-found", f"no record {rid} here (POST /v1/fetch asks peers)")
        return 200, view

    # -- trust and revokers -----------------------------------------------------------------
    def key_list(name: str) -> dict[str, Any]:
        role = ROLES[name]
        configured = getattr(daemon.config.commons, name)
        rows = [{"key": parse_public_key(k).hex(), "source": "config", "note": ""} for k in configured]
        rows += [{"key": r["key"], "source": "store", "note": r["note"], "added": r["added"]}
                 for r in daemon.store.commons_keys(role)]
        if name == "trust" and daemon.config.commons.trust_self:
            rows.insert(0, {"key": daemon.identity.public_key.hex(), "source": "self", "note": ""})
        for row in rows:
            row["peer_id"] = peer_id_of(bytes.fromhex(row["key"]))
        out: dict[str, Any] = {name: rows}
        if name == "trust":
            machine = _commons(daemon).machine
            listed = {r["key"] for r in rows}
            out["vouched"] = sorted({k.hex() for k in machine.trusted - machine.config.team} - listed)  # (team: its own list)
            out["policy"] = machine.policy.name
        return out

    def install_key_list(name: str) -> None:
        role = ROLES[name]

        @api.route("GET", f"/v1/{name}")
        async def listing(req: Request) -> tuple[int, Any]:
            return 200, key_list(name)

        @api.route("POST", f"/v1/{name}")
        async def add(req: Request) -> tuple[int, Any]:
            body = req.fields({"key", "note"})
            key = _key(body.string("key", required=True))
            note = body.string("note", "", max_bytes=200)
            added = daemon.store.add_commons_key(key.hex(), role, note[:200])
            changed = _commons(daemon).rebuild() if added else 0
            return (201 if added else 200), {"key": key.hex(), "added": added, "changed": changed,
                                             **key_list(name)}

        @api.route("DELETE", f"/v1/{name}/{{key}}")
        async def remove(req: Request) -> tuple[int, Any]:
            key = _key(req.params["key"])
            if name == "trust" and daemon.config.commons.trust_self and key == daemon.identity.public_key:
                raise HttpError(409, "in-config", "this node's own key: set [commons] trust_self = false")
            if key.hex() in {parse_public_key(k).hex() for k in getattr(daemon.config.commons, name)}:
                raise HttpError(409, "in-config", f"{key.hex()} is listed in config.toml [commons] {name}: "
                                "remove it there and restart")
            if not daemon.store.remove_commons_key(key.hex(), role):
                raise HttpError(404, "not-found", f"{key.hex()} is not in the {name} list")
            changed = _commons(daemon).rebuild()
            return 200, {"key": key.hex(), "removed": True, "changed": changed, **key_list(name)}

    install_key_list("trust")
    install_key_list("revokers")
    install_key_list("team")  # the owner's team: lessons shown before verification, votes counted
    install_key_list("blocked")  # authors blocked: records dropped at receipt, lessons revoked here

    @api.route("POST", "/v1/vouch")
    async def vouch(req: Request) -> tuple[int, Any]:
        body = req.fields({"key"})
        key = _key(body.string("key", required=True))
        try:
            record = wire.new_vouch(daemon.identity.signing_key, subject=key, created=now())
        except wire.WireError as exc:
            raise HttpError(422, exc.code, exc.message) from None
        return sign_and_ingest(record)

    # -- sync --------------------------------------------------------------------------------
    @api.route("GET", "/v1/sync")
    async def sync_status(req: Request) -> tuple[int, Any]:
        return 200, daemon.sync.status()

    @api.route("POST", "/v1/sync")
    async def sync_now(req: Request) -> tuple[int, Any]:
        body = req.fields({"peer"}, optional_body=True)
        connected = daemon.connected_ids()
        peers = connected
        peer = body.string("peer")
        if peer:
            if peer not in connected:
                raise HttpError(404, "not-connected", f"{peer[:80]} is not connected")
            peers = [peer]
        reports: list[Any] = []

        async def one(peer: str) -> None:
            reports.append((await daemon.sync.session(peer)).as_dict())

        async with trio.open_nursery() as nursery:
            for peer in peers:
                nursery.start_soon(one, peer)
        return 200, {"sessions": sorted(reports, key=lambda r: r["peer"])}

    # -- domains -----------------------------------------------------------------------------
    @api.route("GET", "/v1/domains")
    async def domains_status(req: Request) -> tuple[int, Any]:
        return 200, {**daemon.following.status(), "topics": sorted(daemon.gossip.topics())}

    @api.route("PUT", "/v1/domains")
    async def follow_domains(req: Request) -> tuple[int, Any]:
        """The engine's domains (those its projects touch): the node follows them, its
        ``[domains] follow`` and ``general``. Replaces the last report."""
        from openmemory_protocol.domains import DOMAINS

        body = req.fields({"domains"})
        names = body.array("domains", max_items=len(DOMAINS), required=True)
        unknown = sorted(set(names) - set(DOMAINS))
        if unknown:
            raise HttpError(400, "bad-domain", f"unknown domain(s) {', '.join(repr(n)[:40] for n in unknown[:5])} "
                                               f"(known: {', '.join(DOMAINS)})")
        result = await daemon.follow_domains(names)
        return 200, {**result, "topics": sorted(daemon.gossip.topics())}

    # -- peers -------------------------------------------------------------------------------
    @api.route("POST", "/v1/peers")
    async def add_peer(req: Request) -> tuple[int, Any]:
        body = req.fields({"addr"})
        addr = body.string("addr", required=True, max_bytes=1024)
        try:
            info = peer_info(addr)
        except ValueError as exc:
            raise HttpError(400, "bad-addr", str(exc)) from None
        peer = info.peer_id.to_base58()
        if peer == daemon.peer_id:
            raise HttpError(400, "bad-addr", "that is this node")
        addrs = [transport_addr(str(a)) for a in info.addrs]
        daemon.plan.add(peer, addrs)
        daemon.store.remember_peer(peer, addrs, "manual")
        error = None
        try:
            await daemon.dial(info)
        except Exception as exc:  # kept: the reconnect loop goes on trying
            error = f"{type(exc).__name__}: {exc}"[:200]
        return 200, {"peer_id": peer, "addrs": addrs, "connected": peer in daemon.connected_ids(),
                     "error": error}

    def peer_param(req: Request) -> str:
        from libp2p.peer.id import ID

        peer = req.params["peer"]
        try:
            ID.from_base58(peer)
        except Exception:
            raise HttpError(400, "bad-peer", f"{peer[:80]!r} is not a peer id") from None
        if peer == daemon.peer_id:
            raise HttpError(400, "bad-peer", "that is this node")
        return peer

    @api.route("POST", "/v1/peers/{peer}/block")
    async def block(req: Request) -> tuple[int, Any]:
        peer = peer_param(req)
        added = daemon.store.block_peer(peer)
        daemon.block(peer)
        return (201 if added else 200), {"peer_id": peer, "blocked": True}

    @api.route("DELETE", "/v1/peers/{peer}/block")
    async def unblock(req: Request) -> tuple[int, Any]:
        peer = peer_param(req)
        if not daemon.store.unblock_peer(peer):
            raise HttpError(404, "not-found", f"{peer} is not blocked")
        daemon.unblock(peer)
        return 200, {"peer_id": peer, "blocked": False}
