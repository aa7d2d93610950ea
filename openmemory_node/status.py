"""Record status: the seam where the commons state machine plugs in.

A :class:`StatusRules` object, given a newly accepted record, a read-only view of the store
and the time, says which records change status. The node applies what it returns in one
transaction right after storing the record, and before forwarding it.

* :class:`ArrivalStatus` (part 1): the status on arrival, never changed: a lesson is a
  ``candidate``, every other record is ``recorded``.
* :class:`CommonsStatus` (part 2, the daemon's default): the commons state machine
  (:mod:`openmemory_node.commons`) over every record in the store, with the node's
  configuration (``[commons]``) and its run-time settings (trusted keys, revokers, local
  revocations, in the store). It is rebuilt from the store at start and whenever those
  settings change, so the stored statuses always match the current configuration.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterable, Protocol

from . import commons, wire
from .log import event

if TYPE_CHECKING:
    from .config import CommonsSection
    from .store import Store

log = logging.getLogger(__name__)

CANDIDATE = "candidate"
RECORDED = "recorded"
#: Every status a stored record can have (the commons' and ArrivalStatus's).
ALL_STATUSES = tuple(sorted({s for statuses in commons.STATUSES.values() for s in statuses} | {RECORDED}))


class StoreView(Protocol):
    def get(self, id: str) -> Any: ...
    def list(self, **filters: Any) -> list[Any]: ...


class StatusRules(Protocol):
    def initial(self, record: Any) -> str:
        """The status a record is stored with."""

    def after_accept(self, record: Any, store: StoreView, now: float) -> Iterable[tuple[str, str]]:
        """(id, status) changes caused by accepting ``record`` (which is already stored)."""

    # Optional (the store's bound on records without standing; PROTOCOL.md, "Admission of
    # new authors"): standing_keys() -> frozenset[bytes], inert(id) -> bool, forget(id).
    # Rules without them: nobody has standing and nothing is ever dropped.


class ArrivalStatus:
    """Part 1: status on arrival, never changed afterwards."""

    def initial(self, record: Any) -> str:
        return CANDIDATE if record.record_type == "lesson" else RECORDED

    def after_accept(self, record: Any, store: StoreView, now: float) -> Iterable[tuple[str, str]]:
        return ()


class CommonsStatus:
    """Part 2: the commons state machine over the node's store."""

    def __init__(self, section: "CommonsSection", store: "Store", own_key: bytes | None = None):
        self.section = section
        self.store = store
        self.own_key = own_key
        self.machine = commons.Commons(self.effective_config())

    def effective_config(self) -> commons.CommonsConfig:
        """config.toml's [commons] plus the run-time tables of the store."""
        from .identity import parse_public_key

        def keys(listed: list[str], role: str) -> frozenset[bytes]:
            out = {parse_public_key(k) for k in listed}
            out |= {bytes.fromhex(row["key"]) for row in self.store.commons_keys(role)}
            return frozenset(out)

        s = self.section
        trust = keys(s.trust, "trust")
        if s.trust_self and self.own_key is not None:
            trust |= {self.own_key}
        return commons.CommonsConfig(
            policy=s.policy, threshold=s.threshold, fade_window=s.fade_window,
            trust=trust, revokers=keys(s.revokers, "revoker"),
            local_revocations=frozenset(self.store.local_revocations()),
            team=keys(getattr(s, "team", []), "team"), blocked=keys(getattr(s, "blocked", []), "blocked"),
        )

    def initial(self, record: Any) -> str:
        return commons.initial_status(record)

    def after_accept(self, record: Any, store: StoreView, now: float) -> Iterable[tuple[str, str]]:
        return list(self.machine.add(record).items())

    # -- standing and forgetting (the store's bound; PROTOCOL.md "Admission of new authors") --
    def standing_keys(self) -> frozenset[bytes]:
        """Keys with standing here: this node's, the trusted (listed or vouched) and the
        revokers. (A key with a counted vote has its records kept by :meth:`inert`.)"""
        machine = self.machine
        cached = getattr(self, "_standing", None)
        if cached is None or cached[0] is not machine.trusted or cached[1] is not machine:
            keys = (set(machine.trusted) | set(machine.config.revokers) | set(machine.config.team)) \
                - set(machine.config.blocked)
            if self.own_key is not None:
                keys.add(self.own_key)
            cached = (machine.trusted, machine, frozenset(keys))
            self._standing = cached
        return cached[2]

    def blocked_keys(self) -> frozenset[bytes]:
        """Authors the operator blocked: their records are dropped at receipt (R11)."""
        return self.machine.config.blocked

    def inert(self, rid: str) -> bool:
        return self.machine.inert(rid)

    def forget(self, rid: str) -> None:
        self.machine.forget(rid)

    def load(self) -> commons.Commons:
        """Build the machine from the stored records without writing anything (read-only
        views such as ``show`` with no daemon running)."""
        self.machine, _ = self._build()
        return self.machine

    def rebuild(self) -> int:
        """Recompute every status from the stored records and the current settings; write
        the differences. Returns how many stored statuses changed."""
        machine, stored = self._build()
        self.machine = machine
        changes = [(rid, s) for rid, s in machine.statuses().items() if stored.get(rid) != s]
        if changes:
            self.store.set_status(changes)
        return len(changes)

    def _build(self) -> tuple[commons.Commons, dict[str, str]]:
        machine = commons.Commons(self.effective_config())
        stored: dict[str, str] = {}
        for rid, type_, data, status in self.store.scan():
            try:
                record = wire.decode(data)
            except wire.WireError as exc:  # stored records were valid; say so if one is not
                event(log, logging.ERROR, "stored record does not decode", id=rid, error=str(exc))
                continue
            machine.add(record)
            stored[rid] = status
        return machine, stored
