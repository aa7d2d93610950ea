"""Record status: the seam where the commons state machine plugs in.

Part 1 of the node gives every record the status it has on arrival: a lesson is a
``candidate``, every other record is ``recorded``. The commons state machine (candidate,
common, faded, revoked) replaces :class:`ArrivalStatus` with its own :class:`StatusRules`:
a pure object that, given a newly accepted record, a read-only view of the store and the
time, says which records change status. The node applies what it returns in one
transaction right after storing the record, and before forwarding it.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol

CANDIDATE = "candidate"
RECORDED = "recorded"


class StoreView(Protocol):
    def get(self, id: str) -> Any: ...
    def list(self, **filters: Any) -> list[Any]: ...


class StatusRules(Protocol):
    def initial(self, record: Any) -> str:
        """The status a record is stored with."""

    def after_accept(self, record: Any, store: StoreView, now: float) -> Iterable[tuple[str, str]]:
        """(id, status) changes caused by accepting ``record`` (which is already stored)."""


class ArrivalStatus:
    """Part 1: status on arrival, never changed afterwards."""

    def initial(self, record: Any) -> str:
        return CANDIDATE if record.record_type == "lesson" else RECORDED

    def after_accept(self, record: Any, store: StoreView, now: float) -> Iterable[tuple[str, str]]:
        return ()
