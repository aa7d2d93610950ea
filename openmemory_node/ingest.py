"""The one path by which a record enters the node, whoever brings it.

Gossip (the topic validator), fetch responses, the local API and, later, sync all call
:meth:`Ingest.accept` with the exact bytes they received. In order: the cheap policy checks
(graylist, rate per peer, size), the duplicate check (the id is the hash of the bytes, so
it needs no decoding), the wire format's decoding (encoding, version, type, schema), the
fresh-key budget of the sending peer (a record from a key never seen here: checked before the
costly steps), the rest of the validation (clock skew, the observation rule, the signature),
the record's topic, the rate per author, then the record is stored and
committed, and its status rules applied. Only then does the caller forward it. Every refusal
is counted by code and charged to the sending peer's ledger according to
:mod:`openmemory_node.policy`. :meth:`Ingest.accept_batch` takes many records (a sync answer)
through the same steps in one store transaction, the accept hooks run once it is committed. A
solicited batch has the pure checks of its records (id, decoding, clock skew, observation rule)
done ahead (by the caller, :meth:`Ingest.check_ahead`, or here) and their signatures verified on
a second thread, a chunk at a time (``wire.verify_signatures``: libsodium runs without the GIL),
while this one goes on; a chunk that thread has not started when its turn comes is checked
here instead. Each result is taken at the step where a record alone would compute it, so the
outcomes, the counts and the charges are the same, in the same order.

The store keeps at most ``max_without_standing`` records from keys without standing (not
this node's, not trusted or vouched, not a revoker): past it, the oldest inert ones (nothing
names them, nothing counted for them; never a revocation) are dropped, and the
``on_evict_hooks`` are told (sync stops announcing them).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from . import wire
from .log import event
from .policy import DUPLICATE, UNFOLLOWED_DOMAIN, WRONG_TOPIC, Action, NodePolicy, Verdict, evictions
from .sync_plan import ends_session
from .status import ArrivalStatus, StatusRules
from .store import Store

log = logging.getLogger(__name__)

LOG_EVERY = 10.0
_ACCEPTED = Verdict(Action.ACCEPT, "ok")


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    record: Any = None  # the decoded record when the bytes were valid

    @property
    def accepted(self) -> bool:
        return self.verdict.action is Action.ACCEPT


#: A solicited batch of at least this many records has its records checked ahead, their
#: signatures on the verifier thread (:meth:`Ingest._check_ahead`), in chunks of VERIFY_CHUNK.
PARALLEL_MIN = 4
VERIFY_CHUNK = 8
#: A chunk the verifier thread has not started when its first record's turn comes is checked
#: on the ingest's thread instead of waited for (False: always waited for; tests).
CHECK_UNSTARTED_HERE = True


class _Chunk:
    """Some records' signatures, handed to the verifier thread: their (record, message) pairs,
    the future of their check there, and its results once known."""

    __slots__ = ("items", "future", "results")

    def __init__(self, items: list[tuple[Any, bytes]]):
        self.items = items
        self.future: Future | None = None
        self.results: list[Exception | None] | None = None

    def errors(self) -> list[Exception | None]:
        """Each signature's check: the verifier thread's, or, when that thread has not started
        on this chunk yet (it is behind, or has no core), made here rather than waited for:
        the same function over the same pairs, so the same results."""
        if self.results is None:
            future = self.future
            if CHECK_UNSTARTED_HERE and future is not None and future.cancel():  # (it never runs there now)
                self.results = _signature_errors(self.items)
            elif future is not None:
                self.results = future.result()
            else:  # pragma: no cover - a chunk is given to its records once submitted
                raise RuntimeError("a chunk of signatures that was never submitted")
        return self.results


class _Checked:
    """One record of a batch checked ahead: its id, its decoded record or the error of its
    decoding or of its checks before the signature, and its signature's check (its chunk's
    on the verifier thread and its place in it, or None: to be checked here)."""

    __slots__ = ("now", "idb", "record", "message", "error", "chunk", "index")

    def __init__(self, now: float, idb: bytes):
        self.now = now
        self.idb = idb
        self.record: Any = None
        self.message: bytes | None = None
        self.error: BaseException | None = None
        self.chunk: _Chunk | None = None
        self.index = 0

    def result(self) -> Any:
        """The record, verified; raises what :func:`wire.decode` then :func:`wire.verify`
        would have raised on it."""
        if self.error is None and self.message is not None:
            if self.chunk is None:  # no verifier thread: check it here
                try:
                    wire.verify_signature(self.record, self.message)
                except wire.WireError as exc:
                    self.error = exc
            else:
                self.error = self.chunk.errors()[self.index]
            self.message = None
        if self.error is not None:
            raise self.error
        return self.record


def _signature_errors(items: list[tuple[Any, bytes]]) -> list[Exception | None]:
    """Verifier thread: each record's signature check, None or what it raised (raised on the
    ingest's thread, at that record's step)."""
    return wire.verify_signatures(items)


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _verifier() -> ThreadPoolExecutor:
    """The process's verifier thread (made on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="om-verify")
        return _pool


def _forget_pool() -> None:
    global _pool
    _pool = None  # a forked child has no verifier thread: it makes its own


os.register_at_fork(after_in_child=_forget_pool)


def _submit(pool: ThreadPoolExecutor, chunk: list[_Checked]) -> None:
    checks = _Chunk([(c.record, c.message) for c in chunk])
    try:
        checks.future = pool.submit(_signature_errors, checks.items)
    except RuntimeError:  # no thread to be had (the interpreter is shutting down): here, then
        return
    for index, item in enumerate(chunk):
        item.chunk, item.index = checks, index


def _cancel(checked: list[_Checked]) -> None:
    """Drop the signature checks a batch no longer needs (past its end or its first refusal)."""
    last = None
    for item in checked:
        if item.chunk is not last and item.chunk is not None and item.chunk.future is not None:
            item.chunk.future.cancel()
            last = item.chunk


class Ingest:
    def __init__(
        self,
        store: Store,
        policy: NodePolicy,
        *,
        clock: Callable[[], float] = time.time,
        status_rules: StatusRules | None = None,
        on_graylist: Callable[[str], None] | None = None,
        on_accept: Callable[[Any, str, str | None], None] | None = None,
    ):
        self.store = store
        self.policy = policy
        self.clock = clock
        self.status_rules = status_rules or ArrivalStatus()
        self.on_graylist = on_graylist
        self.on_accept_hooks: list[Callable[[Any, str, str | None], None]] = []
        #: A record's domains (None: none or unknown) and whether this node follows such a
        #: record (:mod:`openmemory_node.follow`); unset, every record is for this node.
        self.record_domains: Callable[[Any], tuple[str, ...] | None] | None = None
        self.follows: Callable[[tuple[str, ...] | None], bool] | None = None
        #: Called with [(id, id bytes, type, data)] when records without standing are dropped.
        self.on_evict_hooks: list[Callable[[list[tuple[str, bytes, str, bytes]]], None]] = []
        self._without: int | None = None  # records without standing in the store (lazy)
        self._standing_seen: frozenset[bytes] | None = None
        self._deferred: list[Any] | None = None  # records accepted in the open batch
        if on_accept:
            self.on_accept_hooks.append(on_accept)
        self.stats: Counter[str] = Counter()  # "accept", "duplicate", "reject:<code>", ...
        # Refusals are logged at WARNING at most once per (peer, code) per LOG_EVERY seconds;
        # the rest at DEBUG (a flood must not become a flood of log lines).
        self._last_warned: dict[tuple[str | None, str], tuple[float, int]] = {}

    def accept(
        self, data: bytes, *, peer: str | None, originated: bool = False, via: str = "gossip",
        expect_type: str | None = None, solicited: bool = False, topic_domains: frozenset[str] | None = None,
    ) -> Outcome:
        """Validate ``data`` received from ``peer`` (None: this node) and store it if new.

        ``originated`` says whether ``peer`` is also the message's origin (it published it
        rather than relayed it); it matters only for the rate limit per peer.
        ``expect_type`` is the record type the channel carries (a gossip topic is typed).
        ``solicited`` records (answers to our own fetch or sync requests) skip the rate
        limits: we chose to ask for them; size, validation and the graylist still apply.
        ``topic_domains``: the domains of the gossip topics the message came on (each must be
        one of the record's domains: ``wrong-topic``). A record from a peer, by gossip or sync,
        of no domain this node follows (:attr:`follows`) is ignored (``unfollowed-domain``).
        """
        return self._accept(data, peer, originated, via, expect_type, solicited, None, topic_domains)

    def _accept(
        self, data: bytes, peer: str | None, originated: bool, via: str, expect_type: str | None,
        solicited: bool, checked: "_Checked | None", topic_domains: frozenset[str] | None = None,
    ) -> Outcome:
        """:meth:`accept`; ``checked``: the pure checks of ``data`` done ahead (a solicited
        batch, :meth:`_check_ahead`), whose results are taken here at the same step."""
        now = self.clock() if checked is None else checked.now
        if peer is not None:
            early = self.policy.admit_message(len(data), peer, originated, now, solicited)
            if early is not None:
                return self._refuse(early, peer, None)
        idb = wire.record_id(data) if checked is None else checked.idb
        if self.store.has_idb(idb):  # byte-identical to a stored, hence valid, record
            self.store.count_duplicate(idb)
            self.stats["duplicate"] += 1
            return Outcome(DUPLICATE, None)
        try:
            if checked is not None:  # (the costly checks were made ahead: the budget is charged after them)
                record = checked.result()
                if peer is not None and self.is_fresh(record.signer):
                    verdict = self.policy.admit_fresh_key(peer, True, now)
                    if not verdict.accepted:
                        return self._refuse(verdict, peer, None)
            else:
                record = wire.decode(data)
                record.__dict__["id_bytes"] = idb  # (the id of these bytes, hashed above: not again)
                # One admission for every way in (PROTOCOL.md, "Admission of new authors"): the
                # fresh-key budget of the peer that brought the record, by gossip, sync or fetch
                # alike (a peer that serves a flood of fresh keys is charged as their origin).
                # Checked on the decoded signer, before the costly checks (the observation rule,
                # the signature): a flood past it costs no more than this.
                if peer is not None and self.is_fresh(record.signer):
                    verdict = self.policy.admit_fresh_key(peer, originated or solicited, now)
                    if not verdict.accepted:
                        return self._refuse(verdict, peer, None)
                wire.verify(record, now=int(now), max_skew=self.policy.limits.max_clock_skew)
        except wire.WireError as exc:
            return self._refuse(self.policy.wire_rejected(exc.code, str(exc)), peer, None)
        if expect_type is not None and record.record_type != expect_type:
            return self._refuse(self.policy.bad_input(
                WRONG_TOPIC, f"a {record.record_type} on the {expect_type} topic"), peer, record)
        if peer is not None and self.record_domains is not None and via in ("gossip", "sync"):
            domains = self.record_domains(record)
            # (a lesson's domains are its claim's, the same everywhere; an attestation's are its
            # lesson's, which its author may not have held: only a lesson's topic is checked)
            if (topic_domains and record.record_type == "lesson" and domains is not None
                    and not topic_domains <= set(domains)):
                return self._refuse(self.policy.bad_input(
                    WRONG_TOPIC, f"a {record.record_type} of {'+'.join(domains)} on the topic of "
                    f"{'+'.join(sorted(topic_domains))}"), peer, record)
            if self.follows is not None and not self.follows(domains):
                return self._refuse(Verdict(Action.IGNORE, UNFOLLOWED_DOMAIN,
                                            f"a {record.record_type} of {'+'.join(domains or ())}, "
                                            "a domain this node does not follow"), peer, record)
        if peer is not None and record.signer in self.blocked_keys():
            return self._refuse(self.policy.blocked_author(), peer, record)
        if peer is not None and not solicited:
            verdict = self.policy.admit_author(record.signer, now)
            if not verdict.accepted:
                return self._refuse(verdict, peer, record)
        return self.store_new(record, data, via=via, peer=peer)

    def accept_batch(
        self, batch: list[bytes], *, peer: str | None, via: str = "sync", expect_type: str | None = None,
        solicited: bool = False, stop_on_reject: bool = False, ids: list[bytes] | None = None,
        checked: "list[_Checked] | None" = None,
    ) -> list[Outcome]:
        """:meth:`accept` for each record of ``batch``, in order, in one store transaction: one
        commit for the lot (the answers to up to 4 sync WANTs: 256 records), and the
        ``on_accept_hooks`` run once it is committed (so nothing is forwarded or announced
        before it is stored). Every
        check is the same as for one record; refusals are counted one by one. With
        ``stop_on_reject``, the batch ends at the first invalid record (its outcome is the
        last). If the store fails within the batch, nothing of it is stored, the statuses are
        recomputed from the store and the error is raised. ``ids``: the id of each record of
        ``batch`` (:func:`wire.record_id` of its bytes), when the caller has them already.
        ``checked``: a solicited batch's pure checks, made ahead by :meth:`check_ahead` (a
        sync session makes them as each WANT's answers arrive, so that the verifier thread
        works while the rest are read)."""
        if checked is not None and (not solicited or len(checked) != len(batch)):
            raise ValueError("checks made ahead are for a solicited batch, one per record")
        outcomes: list[Outcome] = []
        accepted: list[Any] = []
        self._deferred = accepted
        ahead: list[_Checked] | None = None
        try:
            if checked is not None:
                ahead = checked
            elif solicited and len(batch) >= PARALLEL_MIN:
                ahead = self._check_ahead(batch, ids)
            with self.store.transaction():
                if ahead is not None:  # the duplicate checks, in one query (Store.look_up)
                    self.store.look_up(item.idb for item in ahead)
                for i, data in enumerate(batch):
                    outcome = self._accept(data, peer, False, via, expect_type, solicited,
                                           ahead[i] if ahead is not None else None)
                    outcomes.append(outcome)
                    if stop_on_reject and ends_session(outcome.verdict):
                        break
        except BaseException:
            if ahead is not None:
                _cancel(ahead)
            self._deferred = None
            self._without = None
            rebuild = getattr(self.status_rules, "rebuild", None)
            if rebuild is not None:  # it saw records that the rollback took back
                try:
                    rebuild()
                except Exception:  # the store is failing: the original error is the one to raise
                    log.exception("statuses not recomputed after a failed batch")
            raise
        self._deferred = None
        if ahead is not None:
            _cancel(ahead)
        if accepted:
            event(log, logging.INFO, "records accepted", count=len(accepted), via=via, peer=peer or "local")
        for record in accepted:
            self._run_accept_hooks(record, via, peer)
        return outcomes

    def check_ahead(self, batch: list[bytes], ids: list[bytes] | None = None) -> "list[_Checked]":
        """The pure checks of records of a solicited batch to come, for
        :meth:`accept_batch`'s ``checked`` (their signatures start on the verifier thread now);
        nothing is counted nor stored. :meth:`drop_checks` cancels what is not used."""
        return self._check_ahead(batch, ids)

    @staticmethod
    def drop_checks(checked: "list[_Checked]") -> None:
        """The signature checks of :meth:`check_ahead` that will not be used: not made."""
        _cancel(checked)

    def _check_ahead(self, batch: list[bytes], ids: list[bytes] | None = None) -> "list[_Checked]":
        """The pure checks of a solicited batch, before any record of it is looked at in
        order: each record's id, decoding, clock skew and observation rule here, and its
        signature on the verifier thread (libsodium releases the GIL), chunk by chunk, while
        this thread goes on. Nothing is counted nor stored here: :meth:`_accept` takes each
        result at the step where :meth:`accept` would compute it, so the outcomes, the
        counts and their order are those of the records taken one by one."""
        max_skew = self.policy.limits.max_clock_skew
        pool = _verifier()
        out: list[_Checked] = []
        chunk: list[_Checked] = []
        for i, data in enumerate(batch):
            now = self.clock()
            item = _Checked(now, wire.record_id(data) if ids is None else ids[i])
            out.append(item)
            try:
                record = wire.decode(data)
                record.__dict__["id_bytes"] = item.idb
                item.record = record
                item.message = wire.verify_unsigned(record, now=int(now), max_skew=max_skew)
            except wire.WireError as exc:
                item.error = exc
                continue
            chunk.append(item)
            if len(chunk) == VERIFY_CHUNK:
                _submit(pool, chunk)
                chunk = []
        if chunk:
            _submit(pool, chunk)
        return out

    # -- standing (PROTOCOL.md, "Admission of new authors") ---------------------------------
    def standing_keys(self) -> frozenset[bytes]:
        keys = getattr(self.status_rules, "standing_keys", None)
        return keys() if keys is not None else frozenset()

    def blocked_keys(self) -> frozenset[bytes]:
        keys = getattr(self.status_rules, "blocked_keys", None)
        return keys() if keys is not None else frozenset()

    def is_fresh(self, signer: bytes) -> bool:
        """A key never seen here: no standing, and no record of it in the store."""
        return signer not in self.standing_keys() and not self.store.has_author(signer.hex())

    def without_standing(self) -> int:
        """How many stored records are from keys without standing (recounted when those
        keys change)."""
        keys = self.standing_keys()
        if self._without is None or keys is not self._standing_seen:
            self._without = self.store.count_without(k.hex() for k in keys)
            self._standing_seen = keys
        return self._without

    def _bound(self, record: Any) -> None:
        """Keep the store within ``max_without_standing`` after storing ``record``."""
        keys = self.standing_keys()
        if record.signer in keys:
            return
        bound = self.policy.limits.max_without_standing
        if self._without is not None and keys is self._standing_seen:
            self._without += 1
            excess = self._without - bound  # (what without_standing() would count)
        else:
            excess = self.without_standing() - bound
        inert = getattr(self.status_rules, "inert", None)
        if excess <= 0 or inert is None:
            return
        excess += max(1, bound // 100)  # a little more, so that the scan runs once per 1 %
        rows = {}

        def candidates():
            for row in self.store.oldest_without(k.hex() for k in keys):
                rows[row[0]] = row
                yield row[0]

        ids = evictions(candidates(), excess, inert, keep=record.id)
        if not ids:
            return
        self.store.delete(ids)
        for rid in ids:
            self.status_rules.forget(rid)  # type: ignore[attr-defined]
        self._without = (self._without or 0) - len(ids)
        self.stats["evicted"] += len(ids)
        event(log, logging.DEBUG, "records without standing dropped", count=len(ids),
              bound=self.policy.limits.max_without_standing)
        dropped = [rows[i] for i in ids]
        for hook in self.on_evict_hooks:
            try:
                hook(dropped)
            except Exception:
                log.exception("on_evict hook failed")

    def store_new(self, record: Any, data: bytes, *, via: str, peer: str | None) -> Outcome:
        """Store an already validated record and apply its status rules."""
        now = self.clock()
        status = self.status_rules.initial(record)
        added = self.store.add(
            id=record.id, idb=record.id_bytes, type=record.record_type,
            kind=getattr(record, "kind", None), author=record.signer.hex(),
            created=record.created, data=data, via=via, from_peer=peer,
            status=status, arrived=now,
        )
        if not added:  # lost a race with another path: it is a duplicate after all
            self.store.count_duplicate(record.id_bytes)
            self.stats["duplicate"] += 1
            return Outcome(DUPLICATE, record)
        # (the record's own status, when it is the one just stored, needs no update)
        changes = [c for c in self.status_rules.after_accept(record, self.store, now)
                   if c[0] != record.id or c[1] != status]
        if changes:
            self.store.set_status(changes)
        self.stats["accept"] += 1
        self._bound(record)
        if self._deferred is not None:  # in a batch: the hooks run once it is committed
            self._deferred.append(record)
            if log.isEnabledFor(logging.DEBUG):
                event(log, logging.DEBUG, "record accepted", id=record.id, type=record.record_type,
                      via=via, peer=peer or "local")
            return Outcome(_ACCEPTED, record)
        event(log, logging.INFO, "record accepted", id=record.id, type=record.record_type,
              via=via, peer=peer or "local")
        self._run_accept_hooks(record, via, peer)
        return Outcome(_ACCEPTED, record)

    def _run_accept_hooks(self, record: Any, via: str, peer: str | None) -> None:
        for hook in self.on_accept_hooks:
            try:
                hook(record, via, peer)
            except Exception:  # a hook must never undo an accepted record
                log.exception("on_accept hook failed")

    def _refuse(self, verdict: Verdict, peer: str | None, record: Any) -> Outcome:
        self.stats[f"{verdict.action.value}:{verdict.code}"] += 1
        self.store.count_rejection(verdict.code, peer, verdict.detail)
        self._log_refusal(verdict, peer)
        if self.policy.account(peer, verdict, self.clock()) and peer is not None:
            event(log, logging.WARNING, "peer graylisted", peer=peer,
                  penalty=round(self.policy.ledger.penalty(peer, self.clock()), 1))
            if self.on_graylist:
                self.on_graylist(peer)
        return Outcome(verdict, record)

    def _log_refusal(self, verdict: Verdict, peer: str | None) -> None:
        message = f"record {verdict.action.value}ed"
        if verdict.action is not Action.REJECT:
            event(log, logging.DEBUG, message, code=verdict.code, peer=peer or "local",
                  detail=verdict.detail[:160])
            return
        now = self.clock()
        key = (peer, verdict.code)
        last, suppressed = self._last_warned.get(key, (-LOG_EVERY, 0))
        if now - last < LOG_EVERY:
            self._last_warned[key] = (last, suppressed + 1)
            event(log, logging.DEBUG, message, code=verdict.code, peer=peer or "local",
                  detail=verdict.detail[:160])
            return
        if len(self._last_warned) > 10_000:
            self._last_warned.clear()
        self._last_warned[key] = (now, 0)
        extra = {"suppressed_since_last": suppressed} if suppressed else {}
        event(log, logging.WARNING, message, code=verdict.code, peer=peer or "local",
              detail=verdict.detail[:160], **extra)

    def charge(self, peer: str, verdict: Verdict) -> None:
        """Charge a verdict reached outside :meth:`accept` (e.g. a fetch protocol abuse)."""
        self._refuse(verdict, peer, None)
