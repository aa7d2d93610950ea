"""What a sync session asks for and what it does with each answer: pure decisions, no I/O.

The trio code (:mod:`openmemory_node.sync`) reconciles, reads and writes frames; every choice
it makes about records lives here, so that it can be read and tested without a network:

* :func:`scopes`: what a session reconciles, in order: each record type whole, or, for a node
  that follows some domains only, lessons and attestations once per followed domain.
* :func:`wanted`: of the ids the reconciliation found missing, the ones to ask for (not those
  refused or dropped here within the last hour, ``REFUSED_TTL``), in WANTs of ``MAX_WANT``.
* :func:`after_answer`: what an answered record's outcome means for the session: counted as
  received, duplicate or refused; remembered (not asked for again for an hour) or not; and
  whether the session ends. A record that is *invalid* ends the session (the peer broke the
  protocol); a record refused by this node's admission (the fresh-key budget, a blocked
  author, the rate limits) does not: the peer is charged for a fresh-key excess as if it
  were the record's origin, and the session goes on with the rest (one admission for every
  way in: PROTOCOL.md, "Admission of new authors").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .policy import BLOCKED_KEY, FRESH_KEY, Action, Verdict

__all__ = ["scopes", "MAX_WANT", "REFUSED_TTL", "Answer", "wanted", "after_answer", "ends_session", "ADMISSION_CODES"]

#: Ids in one WANT frame.
MAX_WANT = 64
#: How long a record refused on arrival (other than for clock skew), or dropped by the store's
#: bound, is not asked for again.
REFUSED_TTL = 3600.0
#: Refusals that are this node's admission, not the peer's fault as a protocol matter.
ADMISSION_CODES = frozenset({FRESH_KEY, BLOCKED_KEY, "rate-limited-author", "rate-limited-peer"})


@dataclass(frozen=True)
class Answer:
    """What one answered record's outcome means for the session."""

    counted: str  # "received", "duplicate" or "refused"
    remember: bool  # not asked for again for REFUSED_TTL
    ends_session: bool


def scopes(type_order: Iterable[str], domain_types: Iterable[str],
           followed: Iterable[str] | None) -> list[tuple[str, str | None]]:
    """(type, domain or None for the whole type) in session order: every type whole when
    ``followed`` is None (every domain), else the types of ``domain_types`` once per followed
    domain, in the domains' order, and the others whole."""
    domain_types = set(domain_types)
    per_domain = None if followed is None else sorted(followed)
    return [(t, d) for t in type_order
            for d in ([None] if per_domain is None or t not in domain_types else per_domain)]


def ends_session(verdict: Verdict) -> bool:
    """An invalid record ends a sync session; an admission refusal does not."""
    return verdict.action is Action.REJECT and verdict.code not in ADMISSION_CODES


def after_answer(verdict: Verdict) -> Answer:
    if verdict.action is Action.ACCEPT:
        return Answer("received", False, False)
    if verdict.action is Action.DUPLICATE:
        return Answer("duplicate", False, False)
    return Answer("refused", verdict.code != "clock-skew", ends_session(verdict))


def wanted(need: Iterable[bytes], refused_at: dict[bytes, float], now: float,
           ttl: float = REFUSED_TTL) -> list[bytes]:
    """The ids to ask for: those not refused or dropped here within ``ttl`` seconds."""
    return [i for i in need if not (i in refused_at and now - refused_at[i] <= ttl)]
