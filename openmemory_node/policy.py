"""Node policy: what a node accepts from whom, and how it punishes what it refuses.

Sans-I/O: plain objects over data and an injected clock (every method that depends on time
takes ``now``, float seconds). The gossip validator, the fetch protocol and the local API
call it; nothing here touches the network, SQLite or the system clock.

Everything that affects admission lives here:

* **Size.** A message larger than ``max_record_bytes`` is refused before it is decoded.
* **Graylist gate.** A peer whose penalty reached ``graylist_penalty`` is ignored entirely
  until its penalty decays below ``ungraylist_penalty`` (hysteresis).
* **Rate per peer** (token bucket on the forwarding peer, checked on every message before
  decoding): an excess is REJECTed (penalised) when the peer originated the message itself,
  and IGNOREd (dropped, not penalised) when it only relays others' messages, so that an
  attacker cannot get an honest relay graylisted by flooding through it.
* **Rate per author key** (token bucket on the record's signer, consumed by new records
  only): an excess is IGNOREd. A node paces its own publishing with the same bucket, so
  what an honest node publishes is accepted everywhere.
* **Wire validation outcome** (see :data:`WIRE_ERROR_ACTIONS`): a record that is malformed,
  oversized, badly signed, or instructs instead of observing is REJECTed; a record whose
  creation time is too far in the future or whose version is unknown is IGNOREd (a clock or
  software difference is not misbehaviour).
* **Duplicates** (a record already stored) are counted, not stored again, never penalised.
* **Fresh keys** (PROTOCOL.md, "Admission of new authors"): a record signed by a key this
  node has never seen (no record of it stored, no standing) costs one token of the
  forwarding peer's fresh-key bucket (``fresh_key_rate``/``fresh_key_burst``). Past it, the
  record is REJECTed (penalised) when the peer originated it and IGNOREd when it relays it,
  as for the rate per peer. The store keeps at most ``max_without_standing`` records from
  keys without standing (:func:`evictions` picks what goes).

A REJECT adds its penalty to the sending peer's ledger entry; penalties decay exponentially
(half-life ``penalty_half_life``). The ledger outlives connections, so a peer cannot wash
its record by reconnecting. GossipSub sees the ledger as its application-specific score
(P6, weight 1): ``score = -penalty``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Hashable, Iterable

from .wire.limits import MAX_RECORD_BYTES

__all__ = [
    "Action",
    "Verdict",
    "Limits",
    "TokenBucket",
    "RateLimiter",
    "PeerLedger",
    "NodePolicy",
    "WIRE_ERROR_ACTIONS",
    "evictions",
]


class Action(str, Enum):
    ACCEPT = "accept"  # valid and new: store, then forward
    DUPLICATE = "duplicate"  # valid, already stored: count, do not forward
    IGNORE = "ignore"  # dropped, not forwarded, sender not penalised
    REJECT = "reject"  # dropped, not forwarded, sender penalised


@dataclass(frozen=True)
class Verdict:
    action: Action
    code: str  # "ok", "duplicate", a wire error code, or a policy code below
    detail: str = ""
    penalty: float = 0.0

    @property
    def accepted(self) -> bool:
        return self.action is Action.ACCEPT


ACCEPTED = Verdict(Action.ACCEPT, "ok")
DUPLICATE = Verdict(Action.DUPLICATE, "duplicate")

# Policy codes (the wire format's codes come from openmemory_node.wire.ERROR_CODES).
GRAYLISTED = "graylisted"
PEER_RATE = "rate-limited-peer"
AUTHOR_RATE = "rate-limited-author"
TOO_LARGE = "size"  # the wire format's code for the same fault
WRONG_TOPIC = "wrong-topic"  # a record on another type's topic, or another domain's, or several types'
UNFOLLOWED_DOMAIN = "unfollowed-domain"  # a lesson or attestation of no domain this node follows (ignored)
FETCH_MISMATCH = "id"  # a fetch answered with another record (the wire format's code)
FETCH_BAD_REQUEST = "fetch-bad-request"
FETCH_RATE = "fetch-rate-limited"
FETCH_STREAMS = "fetch-too-many-streams"  # more fetch streams at once than the per-peer cap
BLOCKED = "blocked"  # the operator blocked the peer (openmemory-node peers block)
FRESH_KEY = "fresh-key-budget"  # past the peer's budget of records from never-seen keys
BLOCKED_KEY = "blocked-key"  # signed by an author the operator blocked (openmemory-node blocked add)

#: How a wire validation error (openmemory_node.wire.ERROR_CODES) is treated. Codes not
#: listed (size, encoding, type, schema, id, observation, signature) are REJECTed.
WIRE_ERROR_ACTIONS: dict[str, Action] = {
    "clock-skew": Action.IGNORE,  # created too far ahead: maybe our clock, maybe theirs
    "version": Action.IGNORE,  # a version we do not know: a newer peer, not a bad one
    # A version 2 lesson whose claim is malformed or whose text is not its rendering (claim), or
    # whose parts hold a command that never arrives from strangers (unsafe): refused with the
    # invalid penalty, like a bad signature (every implementation renders and checks the same).
    "claim": Action.REJECT,
    "unsafe": Action.REJECT,
}


@dataclass(frozen=True)
class Limits:
    """Every admission limit of a node, all configurable (``[limits]``, ``[scoring]``)."""

    max_record_bytes: int = MAX_RECORD_BYTES  # the wire format's limit; a node may lower it
    max_clock_skew: int = 300
    peer_rate: float = 50.0  # messages per second per forwarding peer
    peer_burst: float = 500.0
    author_rate: float = 1.0  # new records per second per author key
    author_burst: float = 60.0
    fetch_rate: float = 20.0  # fetch requests per second per peer
    fetch_burst: float = 100.0
    # Admission of new authors: records from never-seen keys, per forwarding peer, and how
    # many records from keys without standing the store keeps (PROTOCOL.md).
    fresh_key_rate: float = 0.5
    fresh_key_burst: float = 30.0
    max_without_standing: int = 10_000
    # Scoring: penalty points, a score is minus the penalty.
    invalid_penalty: float = 10.0
    rate_penalty: float = 1.0
    graylist_penalty: float = 100.0
    ungraylist_penalty: float = 50.0
    penalty_half_life: float = 600.0
    max_tracked_keys: int = 10_000  # per rate limiter and for the ledger (LRU)


@dataclass
class TokenBucket:
    """``rate`` tokens per second up to ``burst``; starts full."""

    rate: float
    burst: float
    tokens: float = field(default=-1.0)
    stamp: float = field(default=-math.inf)

    def __post_init__(self) -> None:
        if self.tokens < 0:
            self.tokens = self.burst

    def _refill(self, now: float) -> None:
        if self.stamp == -math.inf:
            self.stamp = now
            return
        elapsed = max(0.0, now - self.stamp)
        self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
        self.stamp = now

    def take(self, now: float, cost: float = 1.0) -> bool:
        self._refill(now)
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False

    def wait_time(self, now: float, cost: float = 1.0) -> float:
        """Seconds until ``take(cost)`` would succeed (0 if it would now)."""
        self._refill(now)
        if self.tokens >= cost:
            return 0.0
        if self.rate <= 0:
            return math.inf
        return (cost - self.tokens) / self.rate


class RateLimiter:
    """One token bucket per key, at most ``max_keys`` of them (least recently used go)."""

    def __init__(self, rate: float, burst: float, max_keys: int = 10_000):
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._buckets: OrderedDict[Hashable, TokenBucket] = OrderedDict()

    def bucket(self, key: Hashable) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self.rate, self.burst)
            self._buckets[key] = bucket
            while len(self._buckets) > self.max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket

    def take(self, key: Hashable, now: float, cost: float = 1.0) -> bool:
        return self.bucket(key).take(now, cost)

    def wait_time(self, key: Hashable, now: float, cost: float = 1.0) -> float:
        return self.bucket(key).wait_time(now, cost)

    def __len__(self) -> int:
        return len(self._buckets)


@dataclass
class _Entry:
    penalty: float = 0.0
    stamp: float = 0.0
    graylisted: bool = False
    rejected: int = 0  # REJECT verdicts, lifetime of the entry
    ignored: int = 0


class PeerLedger:
    """Decaying penalty per peer, with a graylist flag that has hysteresis."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()

    def _decayed(self, entry: _Entry, now: float) -> None:
        dt = now - entry.stamp
        if dt > 0 and entry.penalty > 0:
            entry.penalty *= 0.5 ** (dt / self.limits.penalty_half_life)
        entry.stamp = max(entry.stamp, now)
        if entry.graylisted and entry.penalty < self.limits.ungraylist_penalty:
            entry.graylisted = False

    def _entry(self, peer: Hashable, now: float, create: bool) -> _Entry | None:
        entry = self._entries.get(peer)
        if entry is None:
            if not create:
                return None
            entry = _Entry(stamp=now)
            self._entries[peer] = entry
            while len(self._entries) > self.limits.max_tracked_keys:
                self._evict_one()
        else:
            self._entries.move_to_end(peer)
        self._decayed(entry, now)
        return entry

    def _evict_one(self) -> None:
        # Forget the least recently seen peer that is not graylisted, if any.
        for key, entry in self._entries.items():
            if not entry.graylisted:
                del self._entries[key]
                return
        self._entries.popitem(last=False)

    def record(self, peer: Hashable, verdict: Verdict, now: float) -> bool:
        """Account one verdict about ``peer``. Returns True if it just became graylisted."""
        if verdict.action not in (Action.REJECT, Action.IGNORE):
            return False
        entry = self._entry(peer, now, create=True)
        assert entry is not None
        if verdict.action is Action.IGNORE:
            entry.ignored += 1
            return False
        entry.rejected += 1
        entry.penalty += verdict.penalty
        if not entry.graylisted and entry.penalty >= self.limits.graylist_penalty:
            entry.graylisted = True
            return True
        return False

    def penalty(self, peer: Hashable, now: float) -> float:
        entry = self._entry(peer, now, create=False)
        return entry.penalty if entry else 0.0

    def score(self, peer: Hashable, now: float) -> float:
        return -self.penalty(peer, now)

    def is_graylisted(self, peer: Hashable, now: float) -> bool:
        entry = self._entry(peer, now, create=False)
        return bool(entry and entry.graylisted)

    def graylisted(self, now: float) -> list[Hashable]:
        out = []
        for peer in list(self._entries):
            entry = self._entries[peer]
            self._decayed(entry, now)
            if entry.graylisted:
                out.append(peer)
        return out

    def stats(self, peer: Hashable, now: float) -> dict:
        entry = self._entry(peer, now, create=False)
        if entry is None:
            return {"penalty": 0.0, "score": 0.0, "graylisted": False, "rejected": 0, "ignored": 0}
        return {
            "penalty": round(entry.penalty, 3),
            "score": round(-entry.penalty, 3),
            "graylisted": entry.graylisted,
            "rejected": entry.rejected,
            "ignored": entry.ignored,
        }

    def prune(self, now: float, below: float = 0.5) -> int:
        """Forget peers whose penalty decayed below ``below`` and who are not graylisted."""
        gone = 0
        for peer in list(self._entries):
            entry = self._entries[peer]
            self._decayed(entry, now)
            if not entry.graylisted and entry.penalty < below:
                del self._entries[peer]
                gone += 1
        return gone

    def __len__(self) -> int:
        return len(self._entries)


def evictions(candidates: Iterable[str], excess: int, inert: Callable[[str], bool],
              keep: Hashable = None) -> list[str]:
    """Which records without standing to drop when the store holds ``excess`` too many:
    ``candidates`` are their ids, oldest arrival first, revocations never among them; the
    first ``excess`` that are inert (nothing names them, nothing counted for them) and are
    not ``keep`` (the record being stored) go. Fewer if fewer are inert: what others reference
    or count is kept, even past the bound."""
    out: list[str] = []
    if excess <= 0:
        return out
    for rid in candidates:
        if rid != keep and inert(rid):
            out.append(rid)
            if len(out) >= excess:
                break
    return out


def wire_error_action(code: str) -> Action:
    return WIRE_ERROR_ACTIONS.get(code, Action.REJECT)


class NodePolicy:
    """The admission decisions of one node, in the order a message meets them.

    The caller (the ingest pipeline) runs: :meth:`admit_message` (size, graylist, rate per
    peer; before any decoding), the wire validation (:meth:`wire_rejected` turns its error
    into a verdict), the duplicate check against the store, :meth:`admit_author`, and
    finally reports the verdict with :meth:`account`.
    """

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        lim = self.limits
        self.ledger = PeerLedger(lim)
        self.peer_rate = RateLimiter(lim.peer_rate, lim.peer_burst, lim.max_tracked_keys)
        self.author_rate = RateLimiter(lim.author_rate, lim.author_burst, lim.max_tracked_keys)
        self.fetch_rate = RateLimiter(lim.fetch_rate, lim.fetch_burst, lim.max_tracked_keys)
        self.fresh_keys = RateLimiter(lim.fresh_key_rate, lim.fresh_key_burst, lim.max_tracked_keys)
        #: Peers the operator blocked: ignored like graylisted ones, whatever their score.
        self.blocked: set[Hashable] = set()

    # -- messages -------------------------------------------------------------------------
    def admit_message(
        self, size: int, forwarder: Hashable, originated: bool, now: float,
        solicited: bool = False,
    ) -> Verdict | None:
        """Cheap checks before decoding. None means: go on and validate.

        ``solicited`` messages (answers to our own requests) skip the rate limit."""
        if forwarder in self.blocked:
            return Verdict(Action.IGNORE, BLOCKED, "the operator blocked this peer")
        if self.ledger.is_graylisted(forwarder, now):
            return Verdict(Action.IGNORE, GRAYLISTED, "sending peer is graylisted")
        if not solicited and not self.peer_rate.take(forwarder, now):
            if originated:
                return Verdict(
                    Action.REJECT, PEER_RATE, "peer publishes faster than its rate limit",
                    self.limits.rate_penalty,
                )
            return Verdict(Action.IGNORE, PEER_RATE, "peer relays faster than its rate limit")
        if size > self.limits.max_record_bytes:
            return Verdict(
                Action.REJECT, TOO_LARGE,
                f"{size} bytes > {self.limits.max_record_bytes}", self.limits.invalid_penalty,
            )
        return None

    def wire_rejected(self, code: str, detail: str = "") -> Verdict:
        action = wire_error_action(code)
        penalty = self.limits.invalid_penalty if action is Action.REJECT else 0.0
        return Verdict(action, code, detail, penalty)

    def admit_author(self, author: Hashable, now: float) -> Verdict:
        if self.author_rate.take(author, now):
            return ACCEPTED
        return Verdict(Action.IGNORE, AUTHOR_RATE, "author publishes faster than its rate limit")

    def admit_fresh_key(self, forwarder: Hashable, originated: bool, now: float) -> Verdict:
        """A record from a key never seen here, brought by ``forwarder`` unsolicited."""
        if self.fresh_keys.take(forwarder, now):
            return ACCEPTED
        detail = "more records from never-seen keys than the peer's budget"
        if originated:
            return Verdict(Action.REJECT, FRESH_KEY, detail, self.limits.rate_penalty)
        return Verdict(Action.IGNORE, FRESH_KEY, detail + " (relayed)")

    def blocked_author(self) -> Verdict:
        """A record signed by a key the operator blocked: dropped, counted, nobody penalised
        (the relay did nothing wrong: the block is this node's own choice)."""
        return Verdict(Action.IGNORE, BLOCKED_KEY, "signed by a key this node's operator blocked")

    def author_wait(self, author: Hashable, now: float) -> float:
        """For local pacing: seconds until this author may publish one more record."""
        return self.author_rate.wait_time(author, now)

    # -- fetch ----------------------------------------------------------------------------
    def admit_fetch(self, peer: Hashable, now: float) -> Verdict | None:
        if peer in self.blocked:
            return Verdict(Action.IGNORE, BLOCKED, "the operator blocked this peer")
        if self.ledger.is_graylisted(peer, now):
            return Verdict(Action.IGNORE, GRAYLISTED, "requesting peer is graylisted")
        if not self.fetch_rate.take(peer, now):
            return Verdict(Action.REJECT, FETCH_RATE, "fetch rate exceeded", self.limits.rate_penalty)
        return None

    def bad_input(self, code: str, detail: str = "") -> Verdict:
        """A protocol violation by the peer (wrong topic, bad fetch request or answer)."""
        return Verdict(Action.REJECT, code, detail, self.limits.invalid_penalty)

    # -- accounting -----------------------------------------------------------------------
    def account(self, peer: Hashable | None, verdict: Verdict, now: float) -> bool:
        """Record a verdict against the peer that sent it (None: local). True if the peer
        has just crossed into the graylist."""
        if peer is None:
            return False
        return self.ledger.record(peer, verdict, now)

    def score(self, peer: Hashable, now: float) -> float:
        return self.ledger.score(peer, now)
