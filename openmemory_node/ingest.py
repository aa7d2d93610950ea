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
through the same steps in one store transaction, the accept hooks run once it is committed.

The store keeps at most ``max_without_standing`` records from keys without standing (not
this node's, not trusted or vouched, not a revoker): past it, the oldest inert ones (nothing
names them, nothing counted for them; never a revocation) are dropped, and the
``on_evict_hooks`` are told (sync stops announcing them).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from . import wire
from .log import event
from .policy import DUPLICATE, WRONG_TOPIC, Action, NodePolicy, Verdict, evictions
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
        expect_type: str | None = None, solicited: bool = False,
    ) -> Outcome:
        """Validate ``data`` received from ``peer`` (None: this node) and store it if new.

        ``originated`` says whether ``peer`` is also the message's origin (it published it
        rather than relayed it); it matters only for the rate limit per peer.
        ``expect_type`` is the record type the channel carries (a gossip topic is typed).
        ``solicited`` records (answers to our own fetch or sync requests) skip the rate
        limits: we chose to ask for them; size, validation and the graylist still apply.
        """
        now = self.clock()
        if peer is not None:
            early = self.policy.admit_message(len(data), peer, originated, now, solicited)
            if early is not None:
                return self._refuse(early, peer, None)
        idb = wire.record_id(data)
        if self.store.has_idb(idb):  # byte-identical to a stored, hence valid, record
            self.store.count_duplicate(idb)
            self.stats["duplicate"] += 1
            return Outcome(DUPLICATE, None)
        try:
            record = wire.decode(data)
            record.__dict__["id_bytes"] = idb  # (the id of these bytes, hashed above: not again)
            # The fresh-key budget is checked on the decoded signer, before the costly checks
            # (the observation rule, the signature): a flood past it costs no more than this.
            if peer is not None and not solicited and self.is_fresh(record.signer):
                verdict = self.policy.admit_fresh_key(peer, originated, now)
                if not verdict.accepted:
                    return self._refuse(verdict, peer, None)
            wire.verify(record, now=int(now), max_skew=self.policy.limits.max_clock_skew)
        except wire.WireError as exc:
            return self._refuse(self.policy.wire_rejected(exc.code, str(exc)), peer, None)
        if expect_type is not None and record.record_type != expect_type:
            return self._refuse(self.policy.bad_input(
                WRONG_TOPIC, f"a {record.record_type} on the {expect_type} topic"), peer, record)
        if peer is not None and not solicited:
            verdict = self.policy.admit_author(record.signer, now)
            if not verdict.accepted:
                return self._refuse(verdict, peer, record)
        return self.store_new(record, data, via=via, peer=peer)

    def accept_batch(
        self, batch: list[bytes], *, peer: str | None, via: str = "sync", expect_type: str | None = None,
        solicited: bool = False, stop_on_reject: bool = False,
    ) -> list[Outcome]:
        """:meth:`accept` for each record of ``batch``, in order, in one store transaction: one
        commit for the lot (a sync answer of up to 64 records), and the ``on_accept_hooks`` run
        once it is committed (so nothing is forwarded or announced before it is stored). Every
        check is the same as for one record; refusals are counted one by one. With
        ``stop_on_reject``, the batch ends at the first invalid record (its outcome is the
        last). If the store fails within the batch, nothing of it is stored, the statuses are
        recomputed from the store and the error is raised."""
        outcomes: list[Outcome] = []
        accepted: list[Any] = []
        self._deferred = accepted
        try:
            with self.store.transaction():
                for data in batch:
                    outcome = self.accept(data, peer=peer, via=via, expect_type=expect_type, solicited=solicited)
                    outcomes.append(outcome)
                    if stop_on_reject and outcome.verdict.action is Action.REJECT:
                        break
        except BaseException:
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
        if accepted:
            event(log, logging.INFO, "records accepted", count=len(accepted), via=via, peer=peer or "local")
        for record in accepted:
            self._run_accept_hooks(record, via, peer)
        return outcomes

    # -- standing (PROTOCOL.md, "Admission of new authors") ---------------------------------
    def standing_keys(self) -> frozenset[bytes]:
        keys = getattr(self.status_rules, "standing_keys", None)
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
        if self._without is not None and keys is self._standing_seen:
            self._without += 1
        bound = self.policy.limits.max_without_standing
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
