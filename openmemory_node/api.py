"""The local API, version 1: what the engine and the CLI ask of the node.

    GET  /v1/node                 identity, addresses, version, uptime
    GET  /v1/status               counts: records, peers, gossip, refusals by code
    GET  /v1/peers                connected and known peers, with score and graylist state
    GET  /v1/records              ?type= &kind= &status= &author= &limit= &before=
    GET  /v1/records/{id}         one record with its status and arrival
    POST /v1/lessons              {text, kind, strength?, provenance?, derived_from?}: sign, store, publish
    POST /v1/records              {cbor: hex}: a record signed elsewhere: validate, store, publish
    POST /v1/fetch                {id, peer?}: ask peers (or one, by peer id or multiaddr) for a record

Part 2's endpoints (attest, revoke, trust, vouch, sync, peers) are in
:mod:`openmemory_node.api_commons`.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import trio

from . import __version__, wire
from .host import dial, peer_info
from .httpserver import HttpError, HttpServer, Request
from .policy import Action
from .store import StoredRecord

if TYPE_CHECKING:
    from .daemon import Daemon

MAX_LIST = 1000


def record_view(row: StoredRecord) -> dict[str, Any]:
    """A stored record for people and tools: its meta data and its JSON form."""
    view = row.meta()
    try:
        view["record"] = wire.to_json(wire.decode(row.data))
    except wire.WireError as exc:  # cannot happen for a stored record; say so if it does
        view["record"] = None
        view["error"] = str(exc)
    return view


def _record_id(value: Any, name: str = "id") -> bytes:
    try:
        return wire.parse_id(value, name)
    except wire.WireError as exc:
        raise HttpError(400, "bad-id", exc.message) from None


def _ingest_response(daemon: "Daemon", outcome: Any, data: bytes) -> tuple[int, Any]:
    verdict = outcome.verdict
    if verdict.action is Action.DUPLICATE:
        row = daemon.store.get_by_idb(wire.record_id(data))
        return 200, {"published": False, "duplicate": True, **(record_view(row) if row else {})}
    if verdict.action is not Action.ACCEPT:
        raise HttpError(422, verdict.code, verdict.detail or verdict.code)
    record = outcome.record
    daemon.gossip.publish(record.id, record.record_type, data)
    row = daemon.store.get(record.id)
    assert row is not None
    return 201, {"published": "queued", "duplicate": False, **record_view(row)}


def _commons_summary(daemon: "Daemon") -> dict[str, Any] | None:
    if daemon.commons is None:
        return None
    machine = daemon.commons.machine
    cfg = machine.config
    return {"policy": cfg.policy, "threshold": cfg.threshold, "fade_window": cfg.fade_window,
            "trust_list": len(cfg.trust), "trusted": len(machine.trusted),
            "revokers": len(cfg.revokers), "local_revocations": len(cfg.local_revocations)}


def install_v1(api: HttpServer, daemon: "Daemon") -> None:
    @api.route("GET", "/v1/node")
    async def node(req: Request) -> tuple[int, Any]:
        now = daemon.clock()
        return 200, {
            "peer_id": daemon.peer_id,
            "public_key": daemon.identity.public_key.hex(),
            "addrs": daemon.listen_addrs(),
            "api": f"{daemon.api_address[0]}:{daemon.api_address[1]}" if daemon.api_address else None,
            "home": str(daemon.home),
            "version": __version__,
            "started": daemon.started_at,
            "uptime": round(now - daemon.started_at, 3),
        }

    @api.route("GET", "/v1/status")
    async def status(req: Request) -> tuple[int, Any]:
        daemon.store.flush()
        connected = daemon.host.get_connected_peers()
        stats = dict(daemon.ingest.stats)
        return 200, {
            "peer_id": daemon.peer_id,
            "uptime": round(daemon.clock() - daemon.started_at, 3),
            "records": daemon.store.counts(),
            "peers": {
                "connected": len(connected),
                "known": len(daemon.plan.peers),
                "graylisted": sorted(daemon._graylisted_ids()),
            },
            "gossip": {
                "published": daemon.gossip.published,
                "outbox": daemon.gossip.outbox_size,
                "delivered": daemon.gossip.delivered,
                "dropped": daemon.gossip.router.dropped,
                "mesh": {t: len(daemon.gossip.live_mesh(t)) for t in daemon.gossip.router.mesh},
            },
            "ingest": {
                "accepted": stats.get("accept", 0),
                "duplicates": stats.get("duplicate", 0),
                "refused": {k: v for k, v in sorted(stats.items()) if ":" in k},
            },
            "rejections": daemon.store.rejections(),
            "fetch": {"served": daemon.fetch.served},
            "commons": _commons_summary(daemon),
            "sync": {k: v for k, v in daemon.sync.status().items() if k != "last"},
            "reconnect": {"dials": daemon.reconnector.dials,
                          "failures": daemon.reconnector.dial_failures},
        }

    @api.route("GET", "/v1/peers")
    async def peers(req: Request) -> tuple[int, Any]:
        from libp2p.peer.id import ID

        now = daemon.clock()
        connected = {p.to_base58(): p for p in daemon.host.get_connected_peers()}
        known = {p["peer_id"]: p for p in daemon.store.known_peers()}
        ids = sorted(set(connected) | set(known) | set(daemon.plan.peers))
        out = []
        for peer in ids:
            pid = connected.get(peer) or ID.from_base58(peer)
            plan = daemon.plan.peers.get(peer)
            row = known.get(peer, {})
            ledger = daemon.policy.ledger.stats(peer, now)
            out.append({
                "peer_id": peer,
                "connected": peer in connected,
                "addrs": (plan.addrs if plan else row.get("addrs", [])),
                "source": row.get("source"),
                "score": round(daemon.gossip.score(pid), 3),
                "penalty": ledger["penalty"],
                "graylisted": ledger["graylisted"],
                "refused": {"rejected": ledger["rejected"], "ignored": ledger["ignored"]},
                "mesh": daemon.gossip.mesh_topics(pid),
                "last_connected": row.get("last_connected"),
                "last_disconnected": row.get("last_disconnected"),
                "dial_failures": plan.failures if plan else 0,
            })
        return 200, {"peers": out}

    @api.route("GET", "/v1/records")
    async def records(req: Request) -> tuple[int, Any]:
        rows = daemon.store.list(
            type=req.query.get("type"), kind=req.query.get("kind"),
            status=req.query.get("status"), author=req.query.get("author"),
            limit=req.int_query("limit", 100, 1, MAX_LIST),
            before_seq=req.int_query("before", None, 0),
        )
        return 200, {"records": [record_view(r) for r in rows],
                     "next_before": rows[-1].seq if rows else None}

    @api.route("GET", "/v1/records/{id}")
    async def get_record(req: Request) -> tuple[int, Any]:
        idb = _record_id(req.params["id"])
        row = daemon.store.get_by_idb(idb)
        if row is None:
            raise HttpError(404, "not-found", f"no record {idb.hex()} here (POST /v1/fetch asks peers)")
        return 200, record_view(row)

    @api.route("POST", "/v1/lessons")
    async def publish_lesson(req: Request) -> tuple[int, Any]:
        body = req.json_object()
        unknown = set(body) - {"text", "kind", "strength", "provenance", "derived_from"}
        if unknown:
            raise HttpError(400, "bad-request", f"unknown fields: {', '.join(sorted(unknown))}")
        text = body.get("text")
        kind = body.get("kind")
        if not isinstance(text, str) or not isinstance(kind, str):
            raise HttpError(400, "bad-request", "text and kind are required strings")
        strength = body.get("strength", 1.0)
        provenance = body.get("provenance")
        if provenance is None:
            # No source episodes given (a lesson typed by a person): commit to the text.
            provenance = hashlib.sha256(b"openmemory/manual/v1\x00" + text.encode()).hexdigest()
        try:
            lesson = wire.new_lesson(
                daemon.identity.signing_key, text=text, kind=kind,
                strength=wire.strength_milli(strength), provenance=provenance,
                derived_from=body.get("derived_from") or (), created=int(daemon.clock()),
            )
        except wire.WireError as exc:
            raise HttpError(422, exc.code, exc.message) from None
        data = wire.encode(lesson)
        outcome = daemon.ingest.accept(data, peer=None, via="local")
        return _ingest_response(daemon, outcome, data)

    @api.route("POST", "/v1/records")
    async def publish_record(req: Request) -> tuple[int, Any]:
        body = req.json_object()
        raw = body.get("cbor")
        if not isinstance(raw, str):
            raise HttpError(400, "bad-request", "cbor (the record's bytes in hex) is required")
        try:
            data = bytes.fromhex(raw)
        except ValueError:
            raise HttpError(400, "bad-request", "cbor is not hexadecimal") from None
        outcome = daemon.ingest.accept(data, peer=None, via="api")
        return _ingest_response(daemon, outcome, data)

    @api.route("POST", "/v1/fetch")
    async def fetch(req: Request) -> tuple[int, Any]:
        body = req.json_object()
        idb = _record_id(body.get("id"))
        row = daemon.store.get_by_idb(idb)
        if row is not None:
            return 200, {**record_view(row), "fetched": {"from": "store", "tried": []}}
        peers = [p.to_base58() for p in daemon.host.get_connected_peers()]
        if body.get("peer"):
            peer = body["peer"]
            if not isinstance(peer, str):
                raise HttpError(400, "bad-request", "peer is a peer id or a multiaddr")
            if "/p2p/" in peer:  # a full address: dial it first
                try:
                    info = peer_info(peer)
                    with trio.fail_after(daemon.config.reconnect.dial_timeout):
                        await dial(daemon.host, info)
                except (ValueError, trio.TooSlowError, Exception) as exc:
                    raise HttpError(502, "unreachable", f"cannot connect to {peer}: {exc}") from None
                peer = info.peer_id.to_base58()
            peers = [peer]
        tried = []
        for peer in peers:
            try:
                results = await daemon.fetch.fetch(peer, [idb])
            except Exception as exc:
                tried.append({"peer": peer, "status": f"error: {exc}"})
                continue
            result = results[0]
            tried.append({"peer": peer, "status": result.status})
            if result.status == "found":
                row = daemon.store.get_by_idb(idb)
                if row is not None:
                    return 200, {**record_view(row), "fetched": {"from": peer, "tried": tried}}
        raise HttpError(404, "not-found", f"no peer had {idb.hex()}: {tried}")
