"""The local API, version 1: what the engine and the CLI ask of the node.

    GET  /v1/node                 identity, addresses, version, uptime
    GET  /v1/status               counts: records, peers, gossip, refusals by code
    GET  /v1/peers                connected and known peers, with score and graylist state
    GET  /v1/records              ?type= &kind= &status= &author= &limit= &before=
    GET  /v1/records/{id}         one record with its status and arrival
    POST /v1/lessons              {claim | text, kind, strength?, provenance?, derived_from?, created?}: sign,
                                  store, publish (``created`` fixed by the caller makes a retry the same
                                  record). A lesson of kind error is a claim (a version 2 record): its
                                  parts (``claim``) or the sentence that renders them (``text``, parsed)
    POST /v1/records              {cbor: hex}: a record signed elsewhere: validate, store, publish
    POST /v1/fetch                {id, peer?}: ask peers (or one, by peer id or multiaddr) for a record

Part 2's endpoints (attest, revoke, trust, vouch, sync, peers) are in
:mod:`openmemory_node.api_commons`. Both are written against
:class:`openmemory_node.interface.NodeInterface`, which the daemon implements.

Wherever a record id is expected (a path or a body field), an unambiguous prefix of at least
``MIN_ID_PREFIX`` hex digits of the id of a record held here is accepted too; an ambiguous one
is refused (400 ``ambiguous-id``, with the ``candidates``), one that matches nothing is 404.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from openmemory_protocol import claims

from . import __version__, wire
from .host import peer_info
from .httpserver import HttpError, HttpServer, Request, bad_request
from .interface import NodeInterface
from .policy import Action
from .status import ALL_STATUSES
from .store import StoredRecord

MAX_LIST = 1000
MIN_ID_PREFIX = 8  # hex digits: "1220" (every id's multihash header) and four more
MAX_CANDIDATES = 10
_HEX = re.compile(r"[0-9a-fA-F]+")


def record_view(row: StoredRecord) -> dict[str, Any]:
    """A stored record for people and tools: its meta data and its JSON form."""
    view = row.meta()
    try:
        view["record"] = wire.to_json(wire.decode(row.data))
    except wire.WireError as exc:  # cannot happen for a stored record; say so if it does
        view["record"] = None
        view["error"] = str(exc)
    return view


def resolve_id(store: Any, value: Any, name: str = "id", extra: Any = ()) -> bytes:
    """A record id from its text form or an unambiguous prefix of a held record's id (or of
    one of ``extra``, ids known otherwise, e.g. local revocations)."""
    if not isinstance(value, str):
        raise bad_request(f"{name} must be a record id (68 hex digits) or a prefix of one", "bad-id")
    text = value.strip().lower()
    if len(text) == 2 * wire.ID_BYTES:
        try:
            return wire.parse_id(text, name)
        except wire.WireError as exc:
            raise HttpError(400, "bad-id", exc.message) from None
    if len(text) < MIN_ID_PREFIX or len(text) > 2 * wire.ID_BYTES or not _HEX.fullmatch(text):
        raise bad_request(f"{name} {value[:80]!r} is neither a record id (68 hex digits) nor a prefix of "
                          f"at least {MIN_ID_PREFIX} hex digits", "bad-id")
    found = store.ids_with_prefix(text, MAX_CANDIDATES + 1)
    found = sorted(set(found) | {i for i in extra if i.startswith(text)})
    if not found:
        hint = "" if text.startswith("1220") else " (every id starts with 1220)"
        raise HttpError(404, "not-found", f"no record here has an id starting {text}{hint}")
    if len(found) > 1:
        shown = found[:MAX_CANDIDATES]
        raise bad_request(f"{name} {text} is ambiguous: {len(found)}{'+' if len(found) > MAX_CANDIDATES else ''} "
                          f"records start with it; give more digits", "ambiguous-id", candidates=shown)
    return bytes.fromhex(found[0])


#: What a claim's sentence looks like (claims.render), for a text that is not one.
CLAIM_FORMS = (
    '`PROGRAM` failed: "FAILURE LINE".',
    '`PROGRAM` failed: "FAILURE LINE"; `FIX COMMAND` succeeded.',
    '`PROGRAM` on `PATH` failed: "FAILURE LINE"; `OTHER COMMAND` succeeded on the same target.',
    '`PROGRAM` failed: "FAILURE LINE"; the same call succeeded after `COMMAND`.',
    '`PROGRAM` failed: "FAILURE LINE"; the same call succeeded after an edit of `PATH`.',
    '`PROGRAM` failed: "FAILURE LINE"; the same call succeeded when tried again.',
)


def claim_from_text(text: str, kind: str) -> claims.Claim:
    """The claim a lesson text renders (claims.parse), or 422 ``claim`` saying the expected form."""
    claim = claims.parse(text, kind)
    if claim is None:
        raise HttpError(
            422, "claim",
            f"the text is not the rendering of a claim: a lesson of kind {kind} is published as a claim, "
            f"and its text must be exactly one of these forms (backticks and double quotes included, "
            f"one space after each colon and semicolon): {' | '.join(CLAIM_FORMS)}; or give its parts as "
            f"claim {{situation, path?, failure, fix?, fix_how?}}",
            expected=list(CLAIM_FORMS))
    return claim


def claim_from_body(parts: Any) -> claims.Claim:
    """The claim of a body's ``claim`` object, or 422 ``schema`` naming what is wrong with it."""
    if not isinstance(parts, dict):
        raise bad_request("claim must be an object of the claim's parts (situation, path?, failure, fix?, "
                          "fix_how?)")
    try:
        return wire.claim_of(parts)
    except wire.WireError as exc:
        raise HttpError(422, exc.code, exc.message) from None


def ingest_response(node: NodeInterface, outcome: Any, data: bytes) -> tuple[int, Any]:
    verdict = outcome.verdict
    if verdict.action is Action.DUPLICATE:
        row = node.store.get_by_idb(wire.record_id(data))
        return 200, {"published": False, "duplicate": True, **(record_view(row) if row else {})}
    if verdict.action is not Action.ACCEPT:
        raise HttpError(422, verdict.code, verdict.detail or verdict.code)
    record = outcome.record
    node.gossip.publish(record.id, record.record_type, data)
    row = node.store.get(record.id)
    assert row is not None
    return 201, {"published": "queued", "duplicate": False, **record_view(row)}


def _commons_summary(node: NodeInterface) -> dict[str, Any] | None:
    if node.commons is None:
        return None
    machine = node.commons.machine
    cfg = machine.config
    return {"policy": cfg.policy, "threshold": cfg.threshold, "fade_window": cfg.fade_window,
            "trust_list": len(cfg.trust), "trusted": len(machine.trusted),
            "revokers": len(cfg.revokers), "local_revocations": len(cfg.local_revocations)}


def _admission(node: NodeInterface) -> dict[str, Any]:
    lim = node.policy.limits
    return {"fresh_key_budget": {"rate": lim.fresh_key_rate, "burst": lim.fresh_key_burst},
            "without_standing": {"stored": node.ingest.without_standing(), "bound": lim.max_without_standing},
            "evicted": node.ingest.stats.get("evicted", 0)}


def install_v1(api: HttpServer, daemon: NodeInterface) -> None:
    @api.route("GET", "/v1/node")
    async def node_info(req: Request) -> tuple[int, Any]:
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
        connected = daemon.connected_ids()
        stats = dict(daemon.ingest.stats)
        return 200, {
            "peer_id": daemon.peer_id,
            "uptime": round(daemon.clock() - daemon.started_at, 3),
            "records": daemon.store.counts(),
            "kinds": daemon.store.kinds(),
            "peers": {
                "connected": len(connected),
                "known": len(daemon.plan.peers),
                "graylisted": sorted(daemon.graylisted_ids()),
            },
            "gossip": {
                "published": daemon.gossip.published,
                "outbox": daemon.gossip.outbox_size,
                "delivered": daemon.gossip.delivered,
                "dropped": daemon.gossip.router.dropped,
                "mesh": {t: len(daemon.gossip.live_mesh(t)) for t in daemon.gossip.router.mesh},
                "inbound": daemon.gossip.inbound_accounting(),
            },
            "ingest": {
                "accepted": stats.get("accept", 0),
                "duplicates": stats.get("duplicate", 0),
                "refused": {k: v for k, v in sorted(stats.items()) if ":" in k},
            },
            "rejections": daemon.store.rejections(),
            "admission": _admission(daemon),
            "fetch": {"served": daemon.fetch.served, "refused_streams": daemon.fetch.refused_streams},
            "api": daemon.api.stats(),
            "commons": _commons_summary(daemon),
            "sync": {k: v for k, v in daemon.sync.status().items() if k != "last"},
            "reconnect": {"dials": daemon.reconnector.dials,
                          "failures": daemon.reconnector.dial_failures},
        }

    @api.route("GET", "/v1/peers")
    async def peers(req: Request) -> tuple[int, Any]:
        from libp2p.peer.id import ID

        now = daemon.clock()
        connected = set(daemon.connected_ids())
        known = {p["peer_id"]: p for p in daemon.store.known_peers()}
        ids = sorted(connected | set(known) | set(daemon.plan.peers))
        out = []
        for peer in ids:
            pid = ID.from_base58(peer)
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

    def query_choice(req: Request, name: str, choices: tuple[str, ...]) -> str | None:
        value = req.query.get(name)
        if value is not None and value not in choices:
            raise bad_request(f"?{name}= must be one of {', '.join(choices)}, not {value[:40]!r}")
        return value

    @api.route("GET", "/v1/records")
    async def records(req: Request) -> tuple[int, Any]:
        kind = req.query.get("kind")
        if kind is not None and not re.fullmatch(wire.KIND_PATTERN, kind):
            raise bad_request(f"?kind= {kind[:40]!r} is not a kind ({wire.KIND_PATTERN})")
        author = req.query.get("author")
        if author is not None and not re.fullmatch(r"[0-9a-f]{64}", author):
            raise bad_request("?author= is a public key: 64 lower-case hex digits")
        rows = daemon.store.list(
            type=query_choice(req, "type", wire.RECORD_TYPES), kind=kind,
            status=query_choice(req, "status", ALL_STATUSES), author=author,
            limit=req.int_query("limit", 100, 1, MAX_LIST),
            before_seq=req.int_query("before", None, 0),
        )
        return 200, {"records": [record_view(r) for r in rows],
                     "next_before": rows[-1].seq if rows else None}

    @api.route("GET", "/v1/records/{id}")
    async def get_record(req: Request) -> tuple[int, Any]:
        idb = resolve_id(daemon.store, req.params["id"])
        row = daemon.store.get_by_idb(idb)
        if row is None:
            raise HttpError(404, "not-found", f"no record {idb.hex()} here (POST /v1/fetch asks peers)")
        return 200, record_view(row)

    @api.route("POST", "/v1/lessons")
    async def publish_lesson(req: Request) -> tuple[int, Any]:
        body = req.fields({"text", "claim", "kind", "strength", "provenance", "derived_from", "created"})
        kind = body.string("kind", required=True)
        text = body.string("text", required="claim" not in body)
        strength = body.number("strength", 1.0, low=0, high=wire.MAX_STRENGTH / 1000)
        provenance = body.string("provenance")
        if provenance is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", provenance):
            raise bad_request("provenance must be 64 hex digits (a SHA-256)")
        # A caller that fixes every field (created included) gets byte-identical records on a
        # retry (Ed25519 is deterministic): a retry after a crash is a duplicate (200), not a
        # second record. A time ahead of the clock is refused by validation (clock-skew).
        created = body.integer("created", int(daemon.clock()), low=wire.MIN_CREATED, high=wire.MAX_CREATED)
        parents = [resolve_id(daemon.store, p, "derived_from")
                   for p in body.array("derived_from", max_items=wire.MAX_DERIVED_FROM)]
        claim = None
        if "claim" in body:
            if kind not in wire.CLAIM_KINDS:
                raise HttpError(422, "schema", f"a claim's kind is {' or '.join(wire.CLAIM_KINDS)}, not {kind[:40]!r}")
            claim = claim_from_body(body.obj["claim"])
        elif kind in wire.CLAIM_KINDS:
            # A lesson of a claim kind is a version 2 record: published by its sentence, parsed
            claim = claim_from_text(text, kind)
        if provenance is None:
            # No source episodes given (a lesson typed by a person): commit to the text (a claim's
            # rendering; new_lesson refuses a claim that is not one, and a text that is not its rendering).
            shown = text
            if claim is not None and claims.claim_violation(claim) is None:
                shown = claims.render(claim)
            provenance = hashlib.sha256(b"openmemory/manual/v1\x00" + (shown or "").encode("utf-8", "replace")).hexdigest()
        try:
            lesson = wire.new_lesson(
                daemon.identity.signing_key, text=text, kind=kind, claim=claim,
                strength=wire.strength_milli(strength), provenance=provenance,
                derived_from=sorted(set(parents)), created=created,
            )
        except wire.WireError as exc:
            raise HttpError(422, exc.code, exc.message) from None
        data = wire.encode(lesson)
        outcome = daemon.ingest.accept(data, peer=None, via="local")
        return ingest_response(daemon, outcome, data)

    @api.route("POST", "/v1/records")
    async def publish_record(req: Request) -> tuple[int, Any]:
        body = req.fields({"cbor"})
        raw = body.string("cbor", required=True, max_bytes=4 * wire.MAX_RECORD_BYTES)
        try:
            data = bytes.fromhex(raw)
        except ValueError:
            raise bad_request("cbor is not hexadecimal") from None
        outcome = daemon.ingest.accept(data, peer=None, via="api")
        return ingest_response(daemon, outcome, data)

    @api.route("POST", "/v1/fetch")
    async def fetch(req: Request) -> tuple[int, Any]:
        body = req.fields({"id", "peer"})
        idb = resolve_id(daemon.store, body.string("id", required=True))
        row = daemon.store.get_by_idb(idb)
        if row is not None:
            return 200, {**record_view(row), "fetched": {"from": "store", "tried": []}}
        peers = daemon.connected_ids()
        peer = body.string("peer")
        if peer:
            if "/p2p/" in peer:  # a full address: dial it first
                try:
                    info = peer_info(peer)
                except ValueError as exc:
                    raise bad_request(str(exc), "bad-addr") from None
                try:
                    await daemon.dial(info)
                except Exception as exc:
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
