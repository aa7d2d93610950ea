"""``/openmemory/sync/1.0.0``: anti-entropy between two peers, so that what gossip dropped, or
what a node missed while it was offline, reaches it anyway.

The initiator opens a stream and, for each record type in priority order (revocations, then
vouches, lessons, attestations), reconciles its id set with the responder's
(:mod:`openmemory_node.reconcile`: range fingerprints over sorted ids), then pulls the records
it lacks, validates each through the ingest pipeline (``via="sync"``, solicited: no rate
limits, every other check) and stores it, before it goes on to the next type. So a node that
was offline for days gets the revocations first, and a lesson arriving after its revocation
is revoked on arrival. Each node pulls only what it asked for; nothing is pushed.

The initiator keeps up to ``WANTS_AHEAD`` WANTs in flight and stores the records of up to
``WANTS_PER_COMMIT`` WANTs in one store transaction (:meth:`Ingest.accept_batch`), with the
outcomes of one WANT at a time; the pure checks of a WANT's records (and their signatures, on
the verifier thread) start as soon as its answers are read (:meth:`Ingest.check_ahead`). The
server writes the answers to a WANT at once (one query for its records), and both read frames
through a buffer (:class:`openmemory_node.streams.FrameReader`).

Frames are unsigned-varint length-prefixed (as fetch's), each starting with a kind byte:

    client -> server   0x01 RECONCILE  type(1 byte) message      (reconcile.py's format)
                       0x02 WANT       varint n (1..64), n ids (34 bytes each)
                       0x07 RECONCILE_DOMAIN  type(1 byte) n(1 byte) domain(n ASCII bytes) message:
                                       the same, over the ids of that type in that domain
                                       (lessons and attestations: openmemory_node/follow.py)
    server -> client   0x01 RECONCILE  type message              (the answer)
                       0x07 RECONCILE_DOMAIN  type n domain message   (the answer)
                       0x03 RECORD     record bytes              one frame per id wanted,
                       0x04 NOT_FOUND                            in order
                       0x05 BUSY       (then the server closes: over its limits, not an error)
                       0x06 ERROR      (then the server closes: the client broke the protocol)

Type codes: 0 revocation, 1 vouch, 2 lesson, 3 attestation. The client ends the session by
closing its side. A client that follows every domain reconciles each type whole (0x01); one
that follows some reconciles revocations and vouches whole and lessons and attestations per
followed domain (0x07), so that it is never offered what it does not follow.

Limits and penalties (PROTOCOL.md, "Sync"): a message at most ``max_receive_bytes``; a frame
within ``frame_timeout``; ``max_rounds`` reconciliation rounds per type; at most
``max_records`` records pulled or served per session; the whole session within
``session_timeout``; ``max_inbound_sessions`` served at once, ``session_rate`` sessions per
second per peer. A malformed message costs the sender ``invalid_penalty``; so does a record
announced and then not delivered, or not the record asked for (a lie); a session over its
rate costs ``rate_penalty``.
"""

from __future__ import annotations

import logging
import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from openmemory_protocol.domains import DOMAINS

from .config import SyncSection
from .follow import DOMAIN_TYPES, DomainIndex, Following
from .ingest import Ingest
from .log import event
from .policy import FETCH_MISMATCH, Action, RateLimiter, Verdict
from .reconcile import ID_BYTES, IdSet, Params, Reconciler, SyncError, decode_varint, encode_varint
from .streams import FrameError, FrameReader, close_quietly, frame
from .sync_plan import MAX_WANT, REFUSED_TTL, after_answer, scopes as plan_scopes, wanted as plan_wanted

log = logging.getLogger(__name__)

PROTOCOL_ID = "/openmemory/sync/1.0.0"
TYPE_ORDER = ("revocation", "vouch", "lesson", "attestation")  # the order of a session
TYPE_CODES = {t: i for i, t in enumerate(TYPE_ORDER)}
RECONCILE, WANT, RECORD, NOT_FOUND, BUSY, ERROR, RECONCILE_DOMAIN = 1, 2, 3, 4, 5, 6, 7
_RECORD_KIND = bytes([RECORD])
_NOT_FOUND_FRAME = frame(bytes([NOT_FOUND]))
#: WANT frames a client keeps in flight (pipelined: the server answers them in order).
WANTS_AHEAD = 4
#: The answers to this many WANTs are stored in one transaction (``Ingest.accept_batch``).
WANTS_PER_COMMIT = 4

# Penalty codes (PROTOCOL.md, "Sync").
SYNC_BAD_MESSAGE = "sync-bad-message"
SYNC_LIE = "sync-lie"
SYNC_RATE = "sync-rate-limited"
SYNC_ROUNDS = "sync-too-many-rounds"

REFUSED_MAX = 10_000
#: A dropped record is still served this long (a session that saw it announced may want it:
#: answering NOT_FOUND would read as a lie), at most this many of them.
EVICTED_KEPT_MAX = 4096
#: A peer that does not speak the protocol (a js-libp2p node, say) is not asked again for this
#: long, however often it reconnects.
UNSUPPORTED_RETRY = 3600.0


class SyncAbort(Exception):
    """The session ends early (the reason is in the message)."""


class SyncIndex:
    """The node's record ids, one sorted :class:`IdSet` per type, and per (type, domain) for
    lessons and attestations (:mod:`openmemory_node.follow`), kept current by the ingest's
    on-accept hook."""

    def __init__(self, domains: DomainIndex | None = None) -> None:
        self.sets: dict[str, IdSet] = {t: IdSet() for t in TYPE_ORDER}
        self.domains = domains if domains is not None else DomainIndex()
        self.domain_sets: dict[tuple[str, str], IdSet] = {(t, d): IdSet() for t in DOMAIN_TYPES for d in DOMAINS}

    @classmethod
    def from_store(cls, store: Any, domains: DomainIndex | None = None) -> "SyncIndex":
        index = cls(domains if domains is not None else DomainIndex.from_store(store))
        grouped: dict[str, list[bytes]] = {t: [] for t in TYPE_ORDER}
        by_domain: dict[tuple[str, str], list[bytes]] = {k: [] for k in index.domain_sets}
        for idb, type_ in store.ids_by_type():
            if type_ in grouped:
                grouped[type_].append(idb)
            if type_ in DOMAIN_TYPES:
                for d in index.domains.of_id(type_, idb) or ():
                    by_domain[(type_, d)].append(idb)
        index.sets = {t: IdSet(ids) for t, ids in grouped.items()}
        index.domain_sets = {k: IdSet(ids) for k, ids in by_domain.items()}
        return index

    def on_accept(self, record: Any, via: str, peer: str | None) -> None:
        type_ = record.record_type
        self.sets[type_].add(record.id_bytes)
        if type_ not in DOMAIN_TYPES:
            return
        gained = self.domains.add(record)  # (attestations held of a lesson just arrived)
        domains = self.domains.of_record(record) or ()
        for d in domains:
            self.domain_sets[(type_, d)].add(record.id_bytes)
            for attestation in gained:
                self.domain_sets[("attestation", d)].add(attestation)

    def on_evict(self, rows: list[tuple[str, bytes, str, bytes]]) -> None:
        for _, idb, type_, _ in rows:
            self.sets[type_].discard(idb)
            if type_ in DOMAIN_TYPES:
                for d in DOMAINS:
                    self.domain_sets[(type_, d)].discard(idb)
                self.domains.discard(idb)

    def __len__(self) -> int:
        return sum(len(s) for s in self.sets.values())


@dataclass
class SessionReport:
    peer: str
    started: float
    ended: float = 0.0
    outcome: str = "running"  # done, partial, busy, failed, unsupported, aborted
    detail: str = ""
    rounds: dict[str, int] = field(default_factory=dict)
    need: dict[str, int] = field(default_factory=dict)
    received: int = 0  # records accepted into the store
    duplicates: int = 0
    refused: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    reconcile_bytes: int = 0  # the reconciliation messages, both ways

    def as_dict(self) -> dict[str, Any]:
        return {
            "peer": self.peer, "started": self.started, "ended": self.ended,
            "seconds": round(self.ended - self.started, 3) if self.ended else None,
            "outcome": self.outcome, "detail": self.detail, "rounds": self.rounds, "need": self.need,
            "received": self.received, "duplicates": self.duplicates, "refused": self.refused,
            "bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
            "reconcile_bytes": self.reconcile_bytes,
        }


class _Counted:
    """A stream wrapper that counts bytes both ways for the session report."""

    def __init__(self, stream: Any, report: SessionReport):
        self.stream = stream
        self.report = report

    async def read(self, n: int | None = None) -> bytes:
        data = await self.stream.read(n)
        self.report.bytes_received += len(data)
        return data

    async def write(self, data: bytes) -> None:
        await self.stream.write(data)
        self.report.bytes_sent += len(data)


class Sync:
    protocol_id = PROTOCOL_ID

    def __init__(
        self, host: Any, ingest: Ingest, settings: SyncSection, clock: Callable[[], float],
        *, connected: Callable[[], list[str]], rng: random.Random | None = None,
        following: Following | None = None, domains: DomainIndex | None = None,
    ):
        self.host = host
        self.ingest = ingest
        self.settings = settings
        self.clock = clock
        self.connected = connected
        self.rng = rng or random.Random()
        self.following = following or Following()
        self.index = SyncIndex.from_store(ingest.store, domains)
        ingest.on_accept_hooks.append(self.index.on_accept)
        ingest.on_evict_hooks.append(self._on_evict)
        self._evicted: OrderedDict[bytes, tuple[float, bytes]] = OrderedDict()  # idb -> (when, data)
        self.params = Params(max_message_bytes=settings.max_message_bytes,
                             max_ranges=max(64, settings.max_receive_bytes // 16),
                             max_receive_bytes=settings.max_receive_bytes)
        # A frame holds a message and two bytes before it (kind, type code): the message
        # limit is max_receive_bytes (PROTOCOL.md, "Sync"), checked when it is decoded.
        self.max_frame = settings.max_receive_bytes + 2
        self._inbound = trio.Semaphore(settings.max_inbound_sessions)
        self._outbound = trio.Semaphore(settings.max_outbound_sessions)
        self._rate = RateLimiter(settings.session_rate, settings.session_burst,
                                 ingest.policy.limits.max_tracked_keys)
        self._next: dict[str, float] = {}  # peer -> when its next session is due
        self._unsupported: dict[str, float] = {}  # peer -> when it refused the protocol
        self._running: set[str] = set()
        self._refused: OrderedDict[bytes, float] = OrderedDict()
        self.last: dict[str, SessionReport] = {}
        self.stats = {"initiated": 0, "completed": 0, "failed": 0, "served": 0, "refused_sessions": 0,
                      "received": 0, "bytes_sent": 0, "bytes_received": 0, "served_records": 0}
        self._wake = trio.Event()

    # -- scheduling ---------------------------------------------------------------------------
    def peer_connected(self, peer: str) -> None:
        """A session with a peer shortly after it connects (either direction)."""
        self._next[peer] = min(self._next.get(peer, float("inf")),
                               self.clock() + self.settings.connect_delay)
        self._wake.set()

    def sync_soon(self) -> None:
        """A session with every connected peer shortly (the followed domains changed)."""
        due = self.clock() + self.settings.connect_delay
        for peer in self.connected():
            self._next[peer] = min(self._next.get(peer, float("inf")), due)
        self._wake.set()

    def peer_disconnected(self, peer: str) -> None:
        self._next.pop(peer, None)

    def _jittered(self) -> float:
        return self.settings.interval * self.rng.uniform(0.9, 1.1)

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                now = self.clock()
                for peer in self.connected():
                    due = self._next.setdefault(peer, now + self._jittered())
                    if due <= now and peer not in self._running and not self._refuses_sync(peer, now):
                        self._next[peer] = now + self._jittered()
                        self._running.add(peer)
                        nursery.start_soon(self._scheduled, peer)
                self._wake = trio.Event()
                with trio.move_on_after(0.25):
                    await self._wake.wait()

    def _refuses_sync(self, peer: str, now: float) -> bool:
        noted = self._unsupported.get(peer)
        if noted is None:
            return False
        if now - noted >= UNSUPPORTED_RETRY:
            del self._unsupported[peer]
            return False
        return True

    async def _scheduled(self, peer: str) -> None:
        try:
            async with self._outbound:
                report = await self.session(peer)
            if report.outcome == "partial":  # more to pull (max_records): go on soon
                self._next[peer] = self.clock() + self.settings.connect_delay
        finally:
            self._running.discard(peer)

    # -- client -------------------------------------------------------------------------------
    async def session(self, peer: str) -> SessionReport:
        """Reconcile every record type with ``peer`` and pull what we lack."""
        report = SessionReport(peer, self.clock())
        self.stats["initiated"] += 1
        s = self.settings
        stream = None
        try:
            with trio.fail_after(s.session_timeout):
                try:
                    raw = await self.host.new_stream(ID.from_base58(peer), [TProtocol(PROTOCOL_ID)])
                except Exception as exc:
                    if not protocol_refused(exc):
                        report.outcome, report.detail = "failed", f"{type(exc).__name__}: {exc}"[:200]
                        return report
                    report.outcome, report.detail = "unsupported", f"the peer does not speak {PROTOCOL_ID}"
                    if peer not in self._unsupported:
                        event(log, logging.INFO, "peer does not speak sync; not asked again for an hour",
                              peer=peer, protocol=PROTOCOL_ID)
                    self._unsupported[peer] = self.clock()
                    return report
                counted = _Counted(raw, report)
                stream = FrameReader(counted, self.max_frame)
                budget = s.max_records
                for type_, domain in plan_scopes(TYPE_ORDER, DOMAIN_TYPES, self.following.domains):
                    got = await self._session_type(stream, peer, type_, budget, report, domain)
                    budget -= got
                    if budget <= 0:
                        report.outcome = "partial"
                        report.detail = f"pulled max_records={s.max_records}; the rest next session"
                        break
                else:
                    report.outcome = "done"
        except trio.TooSlowError:
            report.outcome, report.detail = "partial", f"session_timeout {s.session_timeout:g} s"
        except SyncAbort as exc:
            report.outcome, report.detail = "aborted", str(exc)
        except FrameError as exc:
            report.outcome, report.detail = "failed", str(exc)
        finally:
            if stream is not None:
                await close_quietly(raw)
            report.ended = self.clock()
            self.last[peer] = report
            self.stats["completed" if report.outcome == "done" else "failed"] += 1
            self.stats["received"] += report.received
            self.stats["bytes_sent"] += report.bytes_sent
            self.stats["bytes_received"] += report.bytes_received
            level = logging.INFO if report.received or report.outcome not in ("done", "unsupported") \
                else logging.DEBUG
            event(log, level, "sync session", peer=peer, outcome=report.outcome,
                  received=report.received, need=sum(report.need.values()),
                  bytes=report.bytes_sent + report.bytes_received, detail=report.detail[:120])
        return report

    async def _session_type(self, stream: FrameReader, peer: str, type_: str, budget: int,
                            report: SessionReport, domain: str | None = None) -> int:
        """Reconcile one type (``domain`` None) or one type's ids in one domain, then pull."""
        s = self.settings
        code = TYPE_CODES[type_]
        if domain is None:
            ids, header, scope = self.index.sets[type_], bytes([RECONCILE, code]), type_
        else:
            ids, scope = self.index.domain_sets[(type_, domain)], f"{type_}/{domain}"
            header = bytes([RECONCILE_DOMAIN, code, len(domain)]) + domain.encode("ascii")
        reconciler = Reconciler(ids, self.params, max_need=budget)
        message: bytes | None = reconciler.initiate()
        while message is not None:
            if reconciler.rounds > s.max_rounds:
                self._charge(peer, SYNC_ROUNDS, f"{scope} not reconciled in {s.max_rounds} rounds",
                             self.ingest.policy.limits.rate_penalty)
                raise SyncAbort(f"{scope}: more than {s.max_rounds} rounds")
            payload = header + message
            await _write(stream.stream, frame(payload))
            answer = await self._read(stream, peer)
            if answer[:len(header)] != header:
                self._bad(peer, f"expected a {'RECONCILE' if domain is None else 'RECONCILE_DOMAIN'} answer "
                                f"for {scope}, got kind {answer[0]}")
            report.reconcile_bytes += len(payload) + len(answer)
            try:
                message = reconciler.reply(answer[len(header):])
            except SyncError as exc:
                self._bad(peer, f"{scope}: {exc}")
        report.rounds[scope] = reconciler.rounds
        now = self.clock()
        wanted = plan_wanted(reconciler.need, self._refused, now)
        report.need[type_] = len(wanted)
        # WANTs of MAX_WANT ids, up to WANTS_AHEAD of them in flight: the server answers the
        # next while this side validates and stores the last (a server answers its frames in
        # order, so this needs nothing of it: PROTOCOL.md, "Sync").
        # The answers to up to WANTS_PER_COMMIT WANTs are stored in one transaction (a commit
        # costs per page written, and a bigger one writes each index page once for more
        # records); what that reads ahead changes no outcome (_store_answers).
        batches = [wanted[start:start + MAX_WANT] for start in range(0, len(wanted), MAX_WANT)]
        sent = 0
        while sent < min(WANTS_AHEAD, len(batches)):
            await self._want(stream, batches[sent])
            sent += 1
        # read, not stored yet: (ids wanted, answers, _check_ahead's records, ids and checks)
        pending: list[tuple] = []
        for batch in batches:
            answers: list[bytes | None] = []
            for _ in batch:
                try:
                    data = await stream.read(s.frame_timeout)
                except BaseException:
                    # (one WANT at a time, the WANTs read before it would have been stored)
                    self._store_answers(peer, pending, type_, report)
                    raise
                answers.append(data)
                if _broken_frame(data):  # (no checks: the WANT ends the session unlooked at)
                    self._store_answers(peer, pending + [(batch, answers, ([], [], []))], type_, report)  # (raises)
            if sent < len(batches):
                try:
                    await self._want(stream, batches[sent])
                except BaseException:
                    self._store_answers(peer, pending, type_, report)
                    raise
                sent += 1
            # The pure checks of the records start now (their signatures on the verifier
            # thread), while the next WANTs' answers are read; nothing is counted nor stored.
            pending.append((batch, answers, self._check_ahead(batch, answers)))
            if len(pending) == WANTS_PER_COMMIT:
                batches_read, pending = pending, []
                self._store_answers(peer, batches_read, type_, report)
        if pending:
            self._store_answers(peer, pending, type_, report)
        return len(wanted)

    async def _want(self, stream: FrameReader, batch: list[bytes]) -> None:
        await _write(stream.stream, frame(bytes([WANT]) + encode_varint(len(batch)) + b"".join(batch)))

    def _check_ahead(self, batch: list[bytes], answers: list[bytes | None]) -> tuple[list[bytes], list[bytes], list]:
        """A WANT's answers read whole: the records that are the ones asked for, up to the
        first that is not (its id checked against its bytes), their ids, and their pure checks
        (:meth:`Ingest.check_ahead`), for :meth:`_store_answers`."""
        from . import wire

        good: list[bytes] = []
        ids: list[bytes] = []
        for idb, answer in zip(batch, answers):
            if answer[0] != RECORD or wire.record_id(answer[1:]) != idb:  # type: ignore[index]
                break
            good.append(answer[1:])  # type: ignore[index]
            ids.append(idb)
        return good, ids, self.ingest.check_ahead(good, ids)

    def _store_answers(self, peer: str, pending: list[tuple], type_: str, report: SessionReport) -> None:
        """The answers to some WANTs, in order, in one store transaction: what a WANT's
        answers taken one WANT at a time would give. A broken frame (the stream closed, an
        empty frame, BUSY, ERROR) in a WANT's answers ends the session before any record of
        that WANT is stored (each WANT's answers were read whole before they were looked
        at); a wrong answer (NOT_FOUND, another record, another kind) after the records of
        its WANT before it; an invalid record ends it at that record."""
        from . import wire

        if not pending:
            return
        good: list[bytes] = []
        ids: list[bytes] = []  # (each checked to be the id of its record's bytes)
        checked: list = []  # their checks, made ahead
        broken: bytes | None = None  # a broken frame, or
        problem: tuple[int, bytes] | None = None  # the first wrong answer: (its kind, the id wanted)
        for batch, answers, (good_here, ids_here, checks) in pending:
            broken = next((answer for answer in answers if _broken_frame(answer)), b"ok")
            if broken != b"ok":
                break
            # (the records asked for, up to the first that is not, as _check_ahead found them)
            good += good_here
            ids += ids_here
            checked += checks
            if len(good_here) < len(batch):
                problem = (answers[len(good_here)][0], batch[len(good_here)])  # type: ignore[index]
                break
        try:
            outcomes = self.ingest.accept_batch(good, peer=peer, via="sync", expect_type=type_, solicited=True,
                                                stop_on_reject=True, ids=ids, checked=checked)
        finally:
            for _batch, _answers, (_good, _ids, checks) in pending:  # (the checks of what was not stored: dropped)
                self.ingest.drop_checks(checks)
        for data, outcome in zip(good, outcomes):
            answer = after_answer(outcome.verdict)  # (sync_plan: the pure decision)
            if answer.counted == "received":
                report.received += 1
            elif answer.counted == "duplicate":
                report.duplicates += 1
            else:
                report.refused += 1
            if answer.remember:
                self._refused[wire.record_id(data)] = self.clock()
                while len(self._refused) > REFUSED_MAX:
                    self._refused.popitem(last=False)
            if answer.ends_session:
                raise SyncAbort(f"the peer sent an invalid record ({outcome.verdict.code})")
        if broken != b"ok":
            self._check_frame(peer, broken)  # (raises)
        if problem is None:
            return
        kind, idb = problem
        if kind == NOT_FOUND:
            self._lie(peer, f"announced {idb.hex()} then answered NOT_FOUND")
        if kind != RECORD:
            self._bad(peer, f"expected RECORD or NOT_FOUND, got kind {kind}")
        self.ingest.charge(peer, self.ingest.policy.bad_input(
            FETCH_MISMATCH, "answered a sync WANT with another record"))
        raise SyncAbort("a record that is not the one asked for")

    def _on_evict(self, rows: list[tuple[str, bytes, str, bytes]]) -> None:
        """Records the store dropped: no longer announced, not pulled again for an hour, and
        still served for ``session_timeout`` to sessions that saw them announced."""
        self.index.on_evict(rows)
        now = self.clock()
        for _, idb, _, data in rows:
            self._refused[idb] = now
            self._evicted[idb] = (now, data)
        while len(self._refused) > REFUSED_MAX:
            self._refused.popitem(last=False)
        while len(self._evicted) > EVICTED_KEPT_MAX:
            self._evicted.popitem(last=False)

    def _served_data(self, idb: bytes) -> bytes | None:
        data = self.ingest.store.data_by_idb(idb)
        if data is not None:
            return data
        kept = self._evicted.get(idb)
        if kept is not None and self.clock() - kept[0] <= self.settings.session_timeout:
            return kept[1]
        return None

    async def _read(self, stream: FrameReader, peer: str) -> bytes:
        return self._check_frame(peer, await stream.read(self.settings.frame_timeout))

    def _check_frame(self, peer: str, data: bytes | None) -> bytes:
        """A frame read, or the end of the session (SyncAbort) for a broken one."""
        if data is None:
            raise SyncAbort("the peer closed the stream")
        if not data:
            self._bad(peer, "an empty frame")
        if data[0] == BUSY:
            raise SyncAbort("the peer is busy")
        if data[0] == ERROR:
            raise SyncAbort("the peer says we broke the protocol")
        return data

    def _charge(self, peer: str, code: str, detail: str, penalty: float) -> None:
        self.ingest.charge(peer, Verdict(Action.REJECT, code, detail, penalty))

    def _bad(self, peer: str, detail: str) -> None:
        self.ingest.charge(peer, self.ingest.policy.bad_input(SYNC_BAD_MESSAGE, detail))
        raise SyncAbort(detail)

    def _lie(self, peer: str, detail: str) -> None:
        self.ingest.charge(peer, self.ingest.policy.bad_input(SYNC_LIE, detail))
        raise SyncAbort(detail)

    # -- server ------------------------------------------------------------------------------
    async def handle(self, raw: Any, peer: str) -> None:
        policy = self.ingest.policy
        now = self.clock()
        if policy.ledger.is_graylisted(peer, now) or peer in policy.blocked:
            await close_quietly(raw, reset=True)
            return
        report = SessionReport(peer, now)
        stream = _Counted(raw, report)
        if not self._rate.take(peer, now):
            self._charge(peer, SYNC_RATE, "sync sessions faster than the limit",
                         policy.limits.rate_penalty)
            self.stats["refused_sessions"] += 1
            await _try_write(stream, frame(bytes([BUSY])))
            await close_quietly(raw)
            return
        try:
            self._inbound.acquire_nowait()
        except trio.WouldBlock:
            self.stats["refused_sessions"] += 1
            await _try_write(stream, frame(bytes([BUSY])))
            await close_quietly(raw)
            return
        self.stats["served"] += 1
        try:
            with trio.move_on_after(self.settings.session_timeout):
                await self._serve(stream, peer)
        except (FrameError, SyncAbort) as exc:
            event(log, logging.DEBUG, "sync stream ended", peer=peer, reason=str(exc))
        finally:
            self._inbound.release()
            await close_quietly(raw)

    async def _serve(self, stream: _Counted, peer: str) -> None:
        s = self.settings
        rounds: dict[Any, int] = {}  # per type, or per (type, domain)
        served = 0
        reader = FrameReader(stream, self.max_frame)
        while True:
            try:
                data = await reader.read(s.frame_timeout)
            except FrameError as exc:
                if "exceeds maximum" in str(exc):
                    await self._refuse(stream, peer, f"a frame over {self.max_frame} bytes")
                raise
            if data is None:
                return
            kind = data[0] if data else -1
            if kind in (RECONCILE, RECONCILE_DOMAIN):
                scope = _reconcile_scope(data)
                if scope is None:
                    await self._refuse(stream, peer, "a RECONCILE frame of no known type or domain")
                    return
                type_, domain, header = scope
                key = type_ if domain is None else (type_, domain)
                rounds[key] = rounds.get(key, 0) + 1
                if rounds[key] > s.max_rounds:
                    self._charge(peer, SYNC_ROUNDS, f"{type_}: more than {s.max_rounds} rounds",
                                 self.ingest.policy.limits.rate_penalty)
                    await _try_write(stream, frame(bytes([BUSY])))
                    return
                ids = self.index.sets[type_] if domain is None else self.index.domain_sets[(type_, domain)]
                try:
                    answer = Reconciler(ids, self.params).respond(data[len(header):])
                except SyncError as exc:
                    await self._refuse(stream, peer, f"{type_}: {exc}")
                    return
                await _write(stream, frame(header + answer))
            elif kind == WANT:
                try:
                    count, pos = decode_varint(data, 1, limit=MAX_WANT)
                except SyncError as exc:
                    await self._refuse(stream, peer, f"WANT: {exc}")
                    return
                if count < 1 or len(data) != pos + count * ID_BYTES:
                    await self._refuse(stream, peer, "WANT: a count that does not match its ids")
                    return
                if served + count > s.max_records:
                    await _try_write(stream, frame(bytes([BUSY])))
                    return
                answers = []  # one frame per id, in order, sent in one write
                wanted = [data[pos + k * ID_BYTES:pos + (k + 1) * ID_BYTES] for k in range(count)]
                stored = self.ingest.store.data_by_idbs(wanted)  # (one query for the WANT)
                for idb in wanted:
                    record = stored.get(idb)
                    if record is None:
                        record = self._served_data(idb)
                    answers.append(_NOT_FOUND_FRAME if record is None else frame(_RECORD_KIND + record))
                await _write(stream, b"".join(answers))
                served += count
                self.stats["served_records"] += count
            else:
                await self._refuse(stream, peer, f"an unknown frame kind {kind}")
                return

    async def _refuse(self, stream: _Counted, peer: str, detail: str) -> None:
        self.ingest.charge(peer, self.ingest.policy.bad_input(SYNC_BAD_MESSAGE, detail))
        await _try_write(stream, frame(bytes([ERROR])))

    # -- views -------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        return {
            **self.stats,
            "ids": {t: len(s) for t, s in self.index.sets.items()},
            "following": self.following.status()["following"],
            "interval": self.settings.interval,
            "running": sorted(self._running),
            "unsupported": sorted(self._unsupported),
            "last": {peer: r.as_dict() for peer, r in sorted(self.last.items())},
        }


def protocol_refused(exc: BaseException) -> bool:
    """Whether opening a stream failed because the peer does not speak the protocol (rather
    than because the connection broke): py-libp2p's StreamFailure from multistream-select."""
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "ProtocolNotSupportedError" or "not supported" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _reconcile_scope(data: bytes) -> tuple[str, str | None, bytes] | None:
    """A RECONCILE or RECONCILE_DOMAIN frame's (type, domain or None, header), or None when
    its type or domain is not one this protocol knows."""
    if len(data) < 2 or data[1] >= len(TYPE_ORDER):
        return None
    type_ = TYPE_ORDER[data[1]]
    if data[0] == RECONCILE:
        return type_, None, data[:2]
    if len(data) < 3 or type_ not in DOMAIN_TYPES:
        return None
    end = 3 + data[2]
    domain = data[3:end].decode("ascii", "replace")
    if len(data) < end or domain not in DOMAINS:
        return None
    return type_, domain, data[:end]


def _broken_frame(data: bytes | None) -> bool:
    """A frame that ends a session where an answer to a WANT was due (:meth:`Sync._check_frame`)."""
    return not data or data[0] == BUSY or data[0] == ERROR


async def _write(stream: Any, data: bytes) -> None:
    try:
        await stream.write(data)
    except Exception as exc:
        raise FrameError(f"write failed: {type(exc).__name__}") from None


async def _try_write(stream: Any, data: bytes) -> None:
    try:
        await _write(stream, data)
    except FrameError:
        pass

