"""The commons state machine: the status of every record, from the records a node holds.

Everything that decides a status lives in this file (h11's ``_state.py`` is the model): the
rules first, in prose; then the transition table; then the independence policies; then the
code, which only applies them. It is pure: no I/O, no clock, no randomness. The daemon feeds it
the records it stores and writes back the statuses it returns; the tests and the simulations
feed it records directly. PROTOCOL.md ("Commons state machine") says the same for other
implementations.

Inputs: the set of records (lessons, attestations, revocations, vouches) and a
:class:`CommonsConfig` (independence policy, threshold N, fade window, trust list, revokers
list, the operator's local revocations). Output: a status per record. Two nodes that hold the
same records with the same configuration agree on every status, whatever the order in which
the records arrived (tests/node/test_commons.py checks it with hypothesis).

Time. Every transition happens at a record's own ``created`` time (signed, identical on every
node), never at its arrival and never at "now": a status does not change while no record
arrives, and nodes whose clocks differ still agree. (A clock is not needed: the wire format's
clock-skew check already keeps records from the future out.)

RULES
=====

R1  Groups. Lessons with the same dedup key (PROTOCOL.md, "Content identity") form one group,
    named by its *head*: the member with the smallest ``created``, then the smallest id. A
    group has one status, which every member that is not revoked shows. The group's authors
    are the signers of all its members. Revoked members stay members: a revoked head is still
    the head (its ``created`` still dates the group) and its author still an author.

R2  Votes. Each attestation names a lesson id and is a vote on that lesson's group (if no
    record of that id is here yet the attestation is *pending* and has no effect until it
    arrives; if the record of that id is here and is not a lesson, it is *not-counted*, for
    good: no lesson can ever have that id).
    A member of a group signed by another key than the head's author is a *corroboration*:
    that author observed the same thing on its own, so it votes as an attestation
    ``confirmed`` with ``met_before = true`` dated at the member's ``created`` would.

R3  Independence. The node's independence policy decides which votes count (see POLICIES):
    ``open`` counts a vote unless it is a corroboration, its key authored a member of the
    group, ``met_before`` is true, the attester saw the lesson rendered where its evidence
    came from (``exposed``: evidence the lesson could have caused), its key is blocked, or it
    tests none of the group's parts (R10); ``trusted`` (the default) applies the same rules and
    also requires the key to be trusted (R8). Votes that do not count have no effect at all.

R4  One key, one voice. A vote's *time* is its ``created``, raised to the head's ``created``
    if earlier (an attestation cannot predict a lesson published after it). Counted votes are
    replayed in ascending (time, created, id): of one key's votes the latest in the replay
    is the latest by ``created`` (then id), even among votes raised to the head's time. At
    each step, each key's latest counted vote so far is its current voice, dated at its time
    (a vote that does not count never replaces a voice):
        confirmers   keys whose current voice is "confirmed"
        C_w, F_w     keys whose current voice is confirmed / failed and dated within the
                     fade window ending at this step's time t: t - fade_window < time <= t
    After each step the table below is consulted with the step's verdict.

R5  Transitions (TRANSITIONS): candidate -> common when confirmers >= N; common -> faded
    when F_w > C_w; faded -> common when C_w > F_w and confirmers >= N again. A failed vote
    never demotes a candidate (it was never common; it stays a candidate). Nothing else
    moves a group. For a claim (R10) each count is kept per part, and a guard holds when it
    holds for every part the claim has (common: each part confirmed by N keys), except
    fading, which one part's failures outweighing its confirmations is enough for.

R6  Revocation. A revocation is *effective* when its signer signed its target (the author
    of a lesson, the attester of an attestation, the voucher of a vouch) or is in this
    node's revokers list. A revocation whose target is not here yet is *pending* (effective
    at once if its signer is a revoker: a revoker needs no target to check). A revocation by
    anyone else has *no-effect* here; it is still stored, forwarded and served: on a node
    where its signer is a revoker it is effective. A revocation of a revocation never has an
    effect (revocations are final). The operator's local revocations (a table, not records:
    never forwarded) are effective here only. Effective on a lesson: R7; on an attestation:
    the vote is withdrawn (as if never cast); on a vouch: the vouch is withdrawn (R8).

R7  Closure. A lesson is revoked when an effective revocation (or a local one) targets it or
    any of its ancestors through ``derived_from``, followed through the lessons this node
    holds and from any parent id that is itself revoked, held or not. A lesson that arrives
    deriving from a revoked one is revoked on arrival. Revoked is final: for a given
    configuration no record undoes it (only the operator lifts a local revocation or edits
    the revokers list). Revoking one member of a group does not revoke the others (they are
    other records): the group's attestations still count for the members that remain; the
    revoked member's corroboration (R2) is withdrawn.

R8  Trust. The trusted keys are the trust list, the team list (the owner's other machines
    and colleagues: their votes count, their lessons are shown before they are verified, an
    engine's business) plus every key vouched for by a key *in the trust list* (one hop: a
    vouched key cannot vouch further), unless the vouch is revoked (R6: by its voucher or a
    revoker), less the blocked keys. Trust is evaluated as of now over the whole history:
    removing a key removes the weight of everything it ever attested.

R9  Statuses of other records: an attestation is ``counted``, ``not-counted`` (the policy
    refused it, or it names a record that is not a lesson; :meth:`Commons.explain` says why),
    ``pending`` (no record of its lesson id is here) or ``revoked``; a revocation is
    ``effective``, ``no-effect`` or ``pending``; a vouch is ``effective`` (its voucher is in
    the trust list and not blocked: its subject is trusted, under either policy; ``open`` just
    ignores trust), ``no-effect`` or ``revoked``.

R10 Claims (lesson version 2). A lesson whose record is a claim has *parts*: ``failure``, and
    ``fix`` when the claim states one; a version 1 lesson has one part, ``claim``. A version 2
    attestation votes per part (confirmed, failed, untested: no voice on that part); a version
    1 attestation votes on the part ``claim``. A vote on a group tests the parts it names that
    the group has; a vote testing none of them does not count (``parts``). Each part keeps its
    own voices (R4: a key's latest vote that tested the part), and R5 reads them per part. So
    a claim becomes common only when independent, unexposed, trusted agents met its failure
    (N of them) and, if it states a fix, fixed that failure its way (N of them).

R11 Blocked keys (the operator's ``block`` list, like local revocations: never a record). A
    lesson signed by a blocked key is revoked (R7's closure included: what derives from it
    too); a blocked key's votes and vouches do not count. Unblocking undoes it.

R12 The same claim. An effective revocation by a revoker, or a local revocation, of a
    version 2 lesson revokes every member of its group (the same claim, whatever its bytes:
    a copy with a full stop or a capital letter added is the same claim), and any member that
    arrives later. An author withdrawing its own record withdraws only that record (R7).
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

# -- statuses ---------------------------------------------------------------------------------

CANDIDATE = "candidate"
COMMON = "common"
FADED = "faded"
REVOKED = "revoked"
LESSON_STATUSES = (CANDIDATE, COMMON, FADED, REVOKED)

COUNTED = "counted"
NOT_COUNTED = "not-counted"
PENDING = "pending"
EFFECTIVE = "effective"
NO_EFFECT = "no-effect"

STATUSES: dict[str, tuple[str, ...]] = {
    "lesson": LESSON_STATUSES,
    "attestation": (COUNTED, NOT_COUNTED, PENDING, REVOKED),
    "revocation": (EFFECTIVE, NO_EFFECT, PENDING),
    "vouch": (EFFECTIVE, NO_EFFECT, REVOKED),
}

CONFIRMED = "confirmed"
FAILED = "failed"

DEFAULT_THRESHOLD = 3
DEFAULT_FADE_WINDOW = 30 * 86400


# -- the transition table (R5) ---------------------------------------------------------------

@dataclass(frozen=True)
class PartTally:
    """One part's counts (R4, R10)."""

    part: str
    confirmers: int  # keys whose current voice on the part is "confirmed"
    confirmed_in_window: int  # C_w
    failed_in_window: int  # F_w


@dataclass(frozen=True)
class Tally:
    """What a guard sees after a step of the replay (R4, R10): each part's counts. The
    top-level numbers are the weakest part's (the fewest confirmers), for people."""

    confirmers: int
    confirmed_in_window: int
    failed_in_window: int
    threshold: int  # N
    parts: tuple[PartTally, ...] = ()

    @classmethod
    def of(cls, parts: tuple[PartTally, ...], threshold: int) -> "Tally":
        weakest = min(parts, key=lambda p: (p.confirmers, p.confirmed_in_window - p.failed_in_window))
        return cls(weakest.confirmers, weakest.confirmed_in_window, weakest.failed_in_window, threshold, parts)

    def _each(self) -> tuple[PartTally, ...]:
        return self.parts or (PartTally("claim", self.confirmers, self.confirmed_in_window, self.failed_in_window),)


Guard = Callable[[Tally], bool]


def _enough(t: Tally) -> bool:
    return all(p.confirmers >= t.threshold for p in t._each())


def _failures_outweigh(t: Tally) -> bool:
    return any(p.failed_in_window > p.confirmed_in_window for p in t._each())


def _confirmations_outweigh_and_enough(t: Tally) -> bool:
    return all(p.confirmed_in_window > p.failed_in_window for p in t._each()) and _enough(t)


#: (from status, verdict of the step, guard, to status). The first matching row applies; no
#: row, no change. Revocation (R6, R7) is not a step: it overrides any status, finally.
TRANSITIONS: tuple[tuple[str, str, Guard, str], ...] = (
    (CANDIDATE, CONFIRMED, _enough, COMMON),
    (COMMON, FAILED, _failures_outweigh, FADED),
    (FADED, CONFIRMED, _confirmations_outweigh_and_enough, COMMON),
)


def step(status: str, verdict: str, tally: Tally) -> str:
    for source, on, guard, target in TRANSITIONS:
        if source == status and on == verdict and guard(tally):
            return target
    return status


# -- independence policies (R3) -------------------------------------------------------------

@dataclass(frozen=True)
class Vote:
    """An attestation, or a corroboration (R2), as the policy sees it."""

    id: str  # the attestation's id, or the corroborating lesson's id
    signer: bytes
    verdict: str  # the step's verdict (R5): "failed" if any part failed, else "confirmed"
    met_before: bool
    created: int
    corroboration: bool = False
    #: (part, verdict) for each part the vote tested (R10); version 1: (("claim", verdict),)
    parts: tuple[tuple[str, str], ...] = ()
    exposed: bool = False  # the attester saw the lesson rendered where its evidence came from

    def tested(self) -> tuple[tuple[str, str], ...]:
        return self.parts or (("claim", self.verdict),)


@dataclass(frozen=True)
class GroupView:
    authors: frozenset[bytes]  # signers of every member
    head_author: bytes
    parts: tuple[str, ...] = ("claim",)  # R10: the parts the group's claim has
    blocked: frozenset[bytes] = frozenset()  # R11


class IndependencePolicy(Protocol):
    name: str

    def refuses(self, vote: Vote, group: GroupView, trusted: frozenset[bytes]) -> str | None:
        """None if the vote counts, else why not (a short code shown to people)."""


class OpenPolicy:
    """Distinct keys; never an author of the group; never an attester that met the surprise
    before it received the lesson."""

    name = "open"

    def refuses(self, vote: Vote, group: GroupView, trusted: frozenset[bytes]) -> str | None:
        if vote.corroboration:
            return "corroboration"  # its author met the surprise itself
        if vote.signer in group.authors:
            return "author"
        if vote.signer in group.blocked:
            return "blocked"  # R11
        if vote.met_before:
            return "met-before"
        if vote.exposed:
            return "exposed"  # evidence the lesson could have caused never counts for it
        if not any(part in group.parts for part, _ in vote.tested()):
            return "parts"  # R10: it tests nothing this claim states
        return None


class TrustedPolicy(OpenPolicy):
    """``open``, and only keys in the trust list or vouched for by a key in it (R8)."""

    name = "trusted"

    def refuses(self, vote: Vote, group: GroupView, trusted: frozenset[bytes]) -> str | None:
        reason = super().refuses(vote, group, trusted)
        if reason is None and vote.signer not in trusted:
            return "untrusted"
        return reason


#: Policies by name (``[commons] policy``). Another policy is one more entry here.
POLICIES: dict[str, IndependencePolicy] = {p.name: p for p in (OpenPolicy(), TrustedPolicy())}
DEFAULT_POLICY = "trusted"


@dataclass(frozen=True)
class CommonsConfig:
    policy: str = DEFAULT_POLICY
    threshold: int = DEFAULT_THRESHOLD  # N
    fade_window: int = DEFAULT_FADE_WINDOW  # seconds
    trust: frozenset[bytes] = frozenset()  # public keys
    revokers: frozenset[bytes] = frozenset()  # public keys
    local_revocations: frozenset[str] = frozenset()  # record ids (text)
    team: frozenset[bytes] = frozenset()  # R8: the owner's team (trusted to vote)
    blocked: frozenset[bytes] = frozenset()  # R11: the operator's blocked authors

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown independence policy {self.policy!r} (known: {', '.join(POLICIES)})")
        if self.threshold < 1:
            raise ValueError("the threshold N must be at least 1")
        if self.fade_window < 1:
            raise ValueError("the fade window must be at least 1 second")


# -- the machine ----------------------------------------------------------------------------

@dataclass
class _Lesson:
    id: str
    signer: bytes
    created: int
    key: str  # dedup key
    parents: tuple[str, ...]
    parts: tuple[str, ...] = ("claim",)  # R10
    version: int = 1


def lesson_parts(record: Any) -> tuple[str, ...]:
    """R10: the parts a lesson record's claim has (``claim`` for a version 1 lesson)."""
    claim = getattr(record, "claim", None)
    if claim is None:
        return ("claim",)
    return ("failure", "fix") if getattr(claim, "fix_how", None) is not None else ("failure",)


def vote_of(record: Any) -> Vote:
    """An attestation record as a vote (R2, R10), whatever its version."""
    parts = getattr(record, "parts", None)
    tested = tuple((p, v) for p, v in (parts or {}).items() if v in (CONFIRMED, FAILED))
    return Vote(record.id, record.signer, record.verdict, record.met_before, record.created,
                parts=tested,
                exposed=bool(getattr(record, "exposed", False)))


@dataclass
class _Attestation:
    id: str
    lesson: str
    vote: Vote


@dataclass
class _Revocation:
    id: str
    target: str
    signer: bytes
    reason_code: str
    created: int


@dataclass
class _Vouch:
    id: str
    voucher: bytes
    subject: bytes
    created: int


@dataclass
class Transition:
    at: int
    source: str
    target: str
    cause: str  # the id of the vote that caused it


@dataclass
class _Group:
    key: str
    members: set[str] = field(default_factory=set)
    head: str | None = None
    replay: "_Replay | None" = None
    refused: dict[str, str] = field(default_factory=dict)  # vote id -> why it does not count
    #: (head, members, view) of the last :meth:`Commons._view` (members only ever join a group)
    view: "tuple[str | None, int, GroupView] | None" = None

    @property
    def status(self) -> str:
        return self.replay.status if self.replay else CANDIDATE


def _order(created: int, id_: str) -> tuple[int, str]:
    return (created, id_)  # text ids are lower-case hex: their order is the bytes' order


def _replay_key(at: int, vote: "Vote") -> tuple[int, int, str]:
    """R4's replay order: (time, created, id). ``created`` breaks ties among votes raised to
    the head's time, so a key's latest vote in the replay is its latest by ``created``."""
    return (at, vote.created, vote.id)


class _Voices:
    """One part's voices (R4): each key's latest vote on the part, the confirmers, and the
    counts within the fade window, which slides forward with the replay (voices leave it
    from the left of a deque; entries superseded by a later voice of the same key are
    skipped lazily). O(1) amortised per vote."""

    def __init__(self, part: str, window: int):
        self.part = part
        self.window = window
        self.voice: dict[bytes, tuple[int, str, int]] = {}  # key -> (time, verdict, serial)
        self.recent: deque[tuple[int, bytes, int]] = deque()  # (time, key, serial) in window
        self.serial = 0
        self.confirmers = 0
        self.in_window = {CONFIRMED: 0, FAILED: 0}

    def slide(self, at: int) -> None:
        """Voices dated at or before ``at - window`` leave the window (t - W < time <= t)."""
        horizon = at - self.window
        while self.recent and self.recent[0][0] <= horizon:
            _time, key, serial = self.recent.popleft()
            if self.voice.get(key, (0, "", -1))[2] == serial:
                self.in_window[self.voice[key][1]] -= 1

    def push(self, at: int, key: bytes, verdict: str) -> None:
        previous = self.voice.get(key)
        if previous is not None:
            ptime, pverdict, _pserial = previous
            self.confirmers -= pverdict == CONFIRMED
            if ptime > at - self.window:
                self.in_window[pverdict] -= 1
        self.serial += 1
        self.voice[key] = (at, verdict, self.serial)
        self.recent.append((at, key, self.serial))
        self.confirmers += verdict == CONFIRMED
        self.in_window[verdict] += 1

    def tally(self) -> PartTally:
        return PartTally(self.part, self.confirmers, self.in_window[CONFIRMED], self.in_window[FAILED])


class _Replay:
    """R4, R5 and R10 over counted votes pushed in replay order (:func:`_replay_key`): one
    :class:`_Voices` per part of the claim."""

    def __init__(self, start: int, head: str, threshold: int, window: int, parts: tuple[str, ...] = ("claim",)):
        self.threshold = threshold
        self.window = window
        self.status = CANDIDATE
        self.history = [Transition(start, "", CANDIDATE, head)]
        self.last: tuple[int, int, str] | None = None
        self.parts = {part: _Voices(part, window) for part in parts}
        self.tally = Tally.of(tuple(v.tally() for v in self.parts.values()), threshold)

    def push(self, at: int, vid: str, vote: Vote) -> None:
        order = _replay_key(at, vote)
        assert self.last is None or order > self.last
        self.last = order
        for voices in self.parts.values():
            voices.slide(at)
        for part, verdict in vote.tested():
            voices = self.parts.get(part)
            if voices is not None:
                voices.push(at, vote.signer, verdict)
        self.tally = Tally.of(tuple(v.tally() for v in self.parts.values()), self.threshold)
        new = step(self.status, vote.verdict, self.tally)
        if new != self.status:
            self.history.append(Transition(at, self.status, new, vid))
            self.status = new


class Commons:
    """The state machine over a growing set of records, with incremental updates.

    ``add(record)`` returns the statuses it changed (the record's own included); a fresh
    instance fed the same records in any order ends with the same :meth:`statuses`.
    """

    #: Whether :meth:`add` skips the steps that would find nothing to do (the closure of a
    #: record nothing names, the replay of a group of one lesson without votes). False: every
    #: record takes every step (the reference tests/node/test_commons.py compares against).
    shortcuts = True

    def __init__(self, config: CommonsConfig | None = None):
        self.config = config or CommonsConfig()
        self.policy = POLICIES[self.config.policy]
        self.lessons: dict[str, _Lesson] = {}
        self.attestations: dict[str, _Attestation] = {}
        self.revocations: dict[str, _Revocation] = {}
        self.vouches: dict[str, _Vouch] = {}
        self.groups: dict[str, _Group] = {}
        self.votes_on: defaultdict[str, set[str]] = defaultdict(set)  # lesson id -> attestation ids
        self.revocations_of: defaultdict[str, set[str]] = defaultdict(set)  # target -> revocation ids
        self.children: defaultdict[str, set[str]] = defaultdict(set)  # parent id -> lesson ids
        self.voted_by: defaultdict[bytes, set[str]] = defaultdict(set)  # key -> lesson ids attested
        self.vouches_by: defaultdict[bytes, set[str]] = defaultdict(set)  # voucher -> vouch ids
        self.trusted: frozenset[bytes] = (frozenset(self.config.trust) | self.config.team) - self.config.blocked
        self.revoked: set[str] = set()  # ids revoked by R6/R7 (lessons, vouches, and unheld ids)
        self._status: dict[str, str] = {}

    # -- reading -----------------------------------------------------------------------------
    def status(self, id_: str) -> str | None:
        return self._status.get(id_)

    def statuses(self) -> dict[str, str]:
        return dict(self._status)

    def __len__(self) -> int:
        return len(self._status)

    def __contains__(self, id_: object) -> bool:
        return id_ in self._status

    # -- adding ------------------------------------------------------------------------------
    def add(self, record: Any) -> dict[str, str]:
        """Take one (valid) record into account; returns {id: new status} for what changed."""
        rid = record.id
        if rid in self._status:
            return {}
        kind = record.record_type
        touched: set[str] = {rid}
        groups: set[str] = set()
        roots: set[str] = {rid}  # an id some lesson names in derived_from may arrive late
        self._status[rid] = ""  # held; its status is computed below
        new_vote: _Attestation | None = None
        if kind == "lesson":
            lesson = _Lesson(rid, record.signer, record.created, record.dedup_key,
                             tuple(p.hex() for p in record.derived_from), lesson_parts(record),
                             getattr(record, "version", 1))
            self.lessons[rid] = lesson
            self.groups.setdefault(lesson.key, _Group(lesson.key)).members.add(rid)
            for parent in lesson.parents:
                self.children[parent].add(rid)
            groups.add(lesson.key)  # new member: new authors, maybe a new head
            if lesson.version >= 2:  # R12: a member may be revoked through another of its claim
                roots |= self.groups[lesson.key].members
        elif kind == "attestation":
            new_vote = _Attestation(rid, record.lesson_id.hex(), vote_of(record))
            self.attestations[rid] = new_vote
            self.votes_on[new_vote.lesson].add(rid)
            self.voted_by[record.signer].add(new_vote.lesson)
        elif kind == "revocation":
            target = record.target.hex()
            self.revocations[rid] = _Revocation(rid, target, record.signer, record.reason_code,
                                                record.created)
            self.revocations_of[target].add(rid)
            roots.add(target)
            if target in self.lessons:  # R12: a revoker's revocation covers the claim
                roots |= self.groups[self.lessons[target].key].members
        elif kind == "vouch":
            self.vouches[rid] = _Vouch(rid, record.signer, record.subject, record.created)
            self.vouches_by[record.signer].add(rid)
        else:  # pragma: no cover - the wire format has four types
            raise ValueError(f"unknown record type {kind!r}")
        votes_on = self.votes_on.get(rid)
        if votes_on:
            touched |= votes_on  # attestations naming this id: not pending now
        if (not self.shortcuts or kind == "revocation" or rid in self.children or rid in self.revocations_of
                or rid in self.revoked or rid in self.config.local_revocations
                or (kind == "lesson" and (self.lessons[rid].parents or record.signer in self.config.blocked
                                          or len(self.groups[self.lessons[rid].key].members) > 1))):
            flipped, revocations = self._close(roots)
            touched |= flipped | revocations
        else:  # (what _close would find: nothing derives from it, names it as revoked, nor revokes it)
            flipped = ()
        if kind == "lesson" and not votes_on and not flipped and self.shortcuts:
            group = self.groups[self.lessons[rid].key]
            if len(group.members) == 1:  # a group of its own, no vote: what _tally would make of it
                lesson = self.lessons[rid]
                group.head, group.refused = rid, {}
                group.replay = _Replay(lesson.created, rid, self.config.threshold, self.config.fade_window,
                                       lesson.parts)
                return self._diff(touched)
        for fid in flipped:  # a withdrawn member or vote changes its group's tally
            lesson_id = self.attestations[fid].lesson if fid in self.attestations else fid
            if lesson_id in self.lessons and fid != rid:
                groups.add(self.lessons[lesson_id].key)
        if kind in ("revocation", "vouch"):
            # They can change who is trusted (R8): re-tally the groups of the keys that moved.
            groups |= self._retrust()
        if new_vote is not None and new_vote.lesson in self.lessons and rid not in self.revoked:
            key = self.lessons[new_vote.lesson].key
            if key not in groups:
                touched |= self._vote(self.groups[key], new_vote.vote)
        for key in groups:
            touched |= self._tally(key)
        return self._diff(touched)

    # -- forgetting (a node's local storage policy, PROTOCOL.md "Admission of new authors") ---
    def inert(self, rid: str) -> bool:
        """Whether forgetting ``rid`` leaves every other status as it is: nothing here names it
        (no attestation, revocation or lesson deriving from it), it is alone in its group (a
        lesson), its vote does not count (an attestation), its vouch has no effect, it is no
        revocation (revocations are kept forever) and it is not revoked locally. Forgetting it
        then gives exactly the machine that never saw it (tests/node/test_commons.py)."""
        if rid not in self._status or rid in self.revocations or rid in self.config.local_revocations:
            return False
        if self.votes_on.get(rid) or self.revocations_of.get(rid) or self.children.get(rid):
            return False
        if rid in self.lessons:
            return self.groups[self.lessons[rid].key].members == {rid}
        if rid in self.attestations:
            return self._status[rid] != COUNTED
        return rid in self.vouches and self._status[rid] == NO_EFFECT

    def forget(self, rid: str) -> None:
        """Drop an :meth:`inert` record (ValueError for any other)."""
        if not self.inert(rid):
            raise ValueError(f"{rid} is not inert: forgetting it would change other statuses")
        if rid in self.lessons:
            lesson = self.lessons.pop(rid)
            del self.groups[lesson.key]
            for parent in lesson.parents:
                _discard(self.children, parent, rid)
        elif rid in self.attestations:
            att = self.attestations.pop(rid)
            _discard(self.votes_on, att.lesson, rid)
            signer = att.vote.signer
            if not any(self.attestations[a].vote.signer == signer for a in self.votes_on.get(att.lesson, ())):
                _discard(self.voted_by, signer, att.lesson)
            if att.lesson in self.lessons:
                self.groups[self.lessons[att.lesson].key].refused.pop(rid, None)
        else:
            _discard(self.vouches_by, self.vouches.pop(rid).voucher, rid)
        self.revoked.discard(rid)
        del self._status[rid]

    def _diff(self, touched: set[str]) -> dict[str, str]:
        changes: dict[str, str] = {}
        for rid in touched:
            if rid not in self._status:
                continue
            new = self._compute(rid)
            if self._status[rid] != new:
                self._status[rid] = new
                changes[rid] = new
        return changes

    # -- revocation (R6, R7) ----------------------------------------------------------------
    def _signer_of(self, rid: str) -> bytes | None:
        for table in (self.lessons, self.attestations, self.vouches):
            if rid in table:
                item = table[rid]
                return item.vote.signer if isinstance(item, _Attestation) else (
                    item.voucher if isinstance(item, _Vouch) else item.signer)
        return None

    def revocation_effect(self, rev: _Revocation) -> str:
        target = rev.target
        if target in self.revocations:
            return NO_EFFECT  # a revocation is final: it cannot be revoked
        if rev.signer in self.config.revokers:
            return EFFECTIVE  # a revoker needs no target to check
        owner = self._signer_of(target)
        if owner is None:
            return PENDING  # the target is not here: is the signer its author? not known yet
        return EFFECTIVE if rev.signer == owner else NO_EFFECT

    def _revoked_directly(self, target: str) -> bool:
        if target in self.revocations:
            return False
        if target in self.config.local_revocations:
            return True
        lesson = self.lessons.get(target)
        if lesson is not None and lesson.signer in self.config.blocked:
            return True  # R11
        if any(self.revocation_effect(self.revocations[r]) == EFFECTIVE
               for r in self.revocations_of.get(target, ())):
            return True
        if lesson is not None and lesson.version >= 2:  # R12: the same claim, revoked by a revoker or locally
            for member in self.groups[lesson.key].members:
                if member != target and self._claim_revoked_by(member):
                    return True
        return False

    def _claim_revoked_by(self, member: str) -> bool:
        """R12: ``member`` is revoked locally, or by a revoker who is not its author."""
        if member in self.config.local_revocations:
            return True
        signer = self.lessons[member].signer
        return any(rev.signer in self.config.revokers and rev.signer != signer
                   and self.revocation_effect(rev) == EFFECTIVE
                   for rev in (self.revocations[r] for r in self.revocations_of.get(member, ())))

    def _close(self, roots: set[str]) -> tuple[set[str], set[str]]:
        """Recompute R7 for the roots and everything derived from them. Returns the ids whose
        revoked state flipped, and the revocations of every id visited (a target that arrives
        turns its revocations from pending)."""
        revocations: set[str] = set()
        flipped: set[str] = set()
        order: list[str] = []
        seen: set[str] = set()
        stack = list(roots)
        while stack:  # every descendant, each once (derived_from is a DAG: ids are hashes)
            node = stack.pop()
            if node in seen:
                continue
            seen.add(node)
            order.append(node)
            stack.extend(self.children.get(node, ()))
            revocations |= self.revocations_of.get(node, set())
        memo: dict[str, bool] = {}
        for node in order:
            now_revoked = self._is_revoked(node, memo)
            if now_revoked != (node in self.revoked):
                (self.revoked.add if now_revoked else self.revoked.discard)(node)
                flipped.add(node)
        return flipped, revocations

    def _is_revoked(self, node: str, memo: dict[str, bool]) -> bool:
        """R7, iteratively (a chain may be long): revoked directly, or a parent is."""
        stack = [node]
        while stack:
            current = stack[-1]
            if current in memo:
                stack.pop()
                continue
            if self._revoked_directly(current):
                memo[current] = True
                stack.pop()
                continue
            lesson = self.lessons.get(current)
            parents = lesson.parents if lesson else ()
            pending = [p for p in parents if p not in memo]
            if pending:
                stack.extend(pending)
                continue
            memo[current] = any(memo[p] for p in parents)
            stack.pop()
        return memo[node]

    # -- trust (R8) --------------------------------------------------------------------------
    def _retrust(self) -> set[str]:
        """Recompute the trusted keys; returns the groups whose tallies that may change."""
        base = self.config.trust
        vouched = {self.vouches[vid].subject for key in base if key not in self.config.blocked
                   for vid in self.vouches_by.get(key, ())
                   if vid not in self.revoked}  # (the vouches of keys in the trust list)
        trusted = (frozenset(base) | frozenset(vouched) | self.config.team) - self.config.blocked
        if trusted == self.trusted:
            return set()
        moved = trusted ^ self.trusted
        self.trusted = trusted
        groups = set()
        for key in moved:
            for lid in self.voted_by.get(key, ()):
                if lid in self.lessons:
                    groups.add(self.lessons[lid].key)
        return groups

    # -- groups (R1-R5) ----------------------------------------------------------------------
    def _view(self, group: _Group) -> GroupView:
        cached = group.view
        if cached is not None and cached[0] == group.head and cached[1] == len(group.members):
            return cached[2]
        view = GroupView(frozenset(self.lessons[m].signer for m in group.members),
                         self.lessons[group.head].signer,  # type: ignore[index]
                         self.lessons[group.head].parts, self.config.blocked)  # type: ignore[index]
        group.view = (group.head, len(group.members), view)
        return view

    def _votes(self, group: _Group) -> list[Vote]:
        """Every vote on the group: its attestations and its corroborations (R2)."""
        head = self.lessons[group.head]  # type: ignore[index]
        votes = []
        corroborators: dict[bytes, _Lesson] = {}
        for mid in group.members:
            member = self.lessons[mid]
            if member.signer != head.signer and mid not in self.revoked:
                first = corroborators.get(member.signer)
                if first is None or _order(member.created, member.id) < _order(first.created, first.id):
                    corroborators[member.signer] = member
            for aid in self.votes_on.get(mid, ()):
                if aid not in self.revoked:  # withdrawn by its attester or a revoker
                    votes.append(self.attestations[aid].vote)
        for member in corroborators.values():
            votes.append(Vote(member.id, member.signer, CONFIRMED, True, member.created, corroboration=True,
                              parts=tuple((part, CONFIRMED) for part in member.parts)))
        return votes

    def _tally(self, key: str) -> set[str]:
        """Replay the group from scratch; returns the ids whose status it may set."""
        group = self.groups[key]
        group.head = min(group.members, key=lambda m: _order(self.lessons[m].created, m))
        start = self.lessons[group.head].created
        view = self._view(group)
        counted: list[tuple[int, Vote]] = []
        group.refused = {}
        for vote in self._votes(group):
            reason = self.policy.refuses(vote, view, self.trusted)
            if reason is None:
                counted.append((max(vote.created, start), vote))
            else:
                group.refused[vote.id] = reason
        counted.sort(key=lambda item: _replay_key(*item))
        group.replay = _Replay(start, group.head, self.config.threshold, self.config.fade_window,
                               self.lessons[group.head].parts)
        for at, vote in counted:
            group.replay.push(at, vote.id, vote)
        touched = set(group.members)
        for mid in group.members:
            touched |= self.votes_on.get(mid, set())
        return touched

    def _vote(self, group: _Group, vote: Vote) -> set[str]:
        """One new attestation on a held group: the common case, without a full replay."""
        assert group.replay is not None and group.head is not None
        reason = self.policy.refuses(vote, self._view(group), self.trusted)
        if reason is not None:
            group.refused[vote.id] = reason
            return {vote.id}
        at = max(vote.created, self.lessons[group.head].created)
        if group.replay.last is not None and _replay_key(at, vote) < group.replay.last:
            return self._tally(group.key) | {vote.id}  # arrived out of time order: replay
        before = group.status
        group.replay.push(at, vote.id, vote)
        return {vote.id} | (group.members if group.status != before else set())

    # -- one record's status -----------------------------------------------------------------
    def _compute(self, rid: str) -> str:
        if rid in self.lessons:
            if rid in self.revoked:
                return REVOKED
            return self.groups[self.lessons[rid].key].status
        if rid in self.attestations:
            if rid in self.revoked:
                return REVOKED
            target = self.attestations[rid].lesson
            if target not in self.lessons:
                # R2: a held record that is not a lesson can never become one (ids are hashes)
                return NOT_COUNTED if target in self._status else PENDING
            group = self.groups[self.lessons[target].key]
            return NOT_COUNTED if rid in group.refused else COUNTED
        if rid in self.revocations:
            return self.revocation_effect(self.revocations[rid])
        if rid in self.vouches:
            if rid in self.revoked:
                return REVOKED
            voucher = self.vouches[rid].voucher  # (R8, R11: a blocked key's vouch has no effect)
            return EFFECTIVE if voucher in self.config.trust and voucher not in self.config.blocked else NO_EFFECT
        raise KeyError(rid)  # pragma: no cover

    # -- views for people ---------------------------------------------------------------------
    def explain(self, rid: str, max_votes: int = 200) -> dict[str, Any]:
        """Why a record has its status: for ``show`` and ``GET /v1/commons/{id}``."""
        if rid in self.lessons:
            return self._explain_lesson(rid, max_votes)
        out: dict[str, Any] = {"status": self._status.get(rid)}
        if rid in self.attestations:
            att = self.attestations[rid]
            out["lesson"] = att.lesson
            if att.lesson in self.lessons:
                group = self.groups[self.lessons[att.lesson].key]
                out["group"] = group.head
                out["reason"] = group.refused.get(rid)
            elif att.lesson in self._status:
                out["reason"] = "names a record that is not a lesson"
            else:
                out["reason"] = "lesson not here yet"
        elif rid in self.revocations:
            rev = self.revocations[rid]
            out["target"] = rev.target
            out["reason"] = self._revocation_reason(rev, out["status"])
        elif rid in self.vouches:
            vouch = self.vouches[rid]
            out.update(subject=vouch.subject.hex(), voucher_in_trust_list=vouch.voucher in self.config.trust,
                       subject_trusted=vouch.subject in self.trusted)
        else:
            raise KeyError(rid)
        return out

    def _revocation_reason(self, rev: _Revocation, effect: str | None) -> str:
        if rev.target in self.revocations:
            return "targets a revocation (revocations are final)"
        if effect == EFFECTIVE:
            return "by a revoker" if rev.signer in self.config.revokers else "by the target's signer"
        if effect == PENDING:
            return "target not here yet"
        return "by a key that is neither the target's signer nor in the revokers list"

    def revoked_because(self, lid: str) -> dict[str, Any] | None:
        """The first cause of a revocation: a local one, an effective revocation record, or
        a revoked ancestor (with that ancestor's own cause)."""
        if lid in self.config.local_revocations:
            return {"by": "local", "id": lid}
        for r in sorted(self.revocations_of.get(lid, ())):
            if self.revocation_effect(self.revocations[r]) == EFFECTIVE:
                return {"by": "revocation", "revocation": r, "id": lid}
        memo: dict[str, bool] = {}
        lesson = self.lessons.get(lid)
        for parent in sorted(lesson.parents if lesson else ()):
            if self._is_revoked(parent, memo):
                return {"by": "ancestor", "ancestor": parent, "root": self.revoked_because(parent)}
        return None

    def _explain_lesson(self, lid: str, max_votes: int) -> dict[str, Any]:
        lesson = self.lessons[lid]
        group = self.groups[lesson.key]
        replay = group.replay
        tally = replay.tally if replay else Tally(0, 0, 0, self.config.threshold)
        votes = sorted(self._votes(group), key=lambda v: _order(v.created, v.id))
        refused: dict[str, int] = {}
        for reason in group.refused.values():
            refused[reason] = refused.get(reason, 0) + 1
        revocations = []
        for r in sorted(self.revocations_of.get(lid, ())):
            rev = self.revocations[r]
            effect = self.revocation_effect(rev)
            revocations.append({"id": r, "signer": rev.signer.hex(), "reason_code": rev.reason_code,
                                "created": rev.created, "effect": effect,
                                "why": self._revocation_reason(rev, effect)})
        return {
            "status": self._status.get(lid),
            "group": {
                "dedup_key": lesson.key, "head": group.head, "members": sorted(group.members),
                "status": group.status,
                "history": [{"at": t.at, "from": t.source or None, "to": t.target, "cause": t.cause}
                            for t in (replay.history if replay else [])],
            },
            "policy": self.policy.name,
            "threshold": self.config.threshold,
            "tally": {"confirmers": tally.confirmers, "confirmed_in_window": tally.confirmed_in_window,
                      "failed_in_window": tally.failed_in_window, "fade_window": self.config.fade_window,
                      "parts": {p.part: {"confirmers": p.confirmers, "confirmed_in_window": p.confirmed_in_window,
                                         "failed_in_window": p.failed_in_window} for p in tally._each()}},
            "votes": {
                "total": len(votes), "counted": len(votes) - len(group.refused), "refused": refused,
                "shown": [{
                    "id": v.id, "signer": v.signer.hex(), "verdict": v.verdict,
                    "met_before": v.met_before, "created": v.created, "exposed": v.exposed,
                    "parts": dict(v.tested()),
                    "corroboration": v.corroboration, "counted": v.id not in group.refused,
                    "reason": group.refused.get(v.id),
                } for v in votes[-max_votes:]],
            },
            "revocations": revocations,
            "local_revocation": lid in self.config.local_revocations,
            "revoked_because": self.revoked_because(lid) if lid in self.revoked else None,
        }

    def chain(self, rid: str, max_nodes: int = 200) -> dict[str, Any]:
        """The provenance chain of a record: ancestors and descendants, with statuses (at
        most ``max_nodes`` of each; a node seen twice, in a diamond, is expanded once)."""

        def walk(node: str, seen: set[str], nexts: Callable[[str], Iterable[str]], name: str) -> list[dict]:
            out: list[dict[str, Any]] = []
            for other in sorted(nexts(node)):
                if len(seen) >= max_nodes:
                    out.append({"id": other, "truncated": True})
                    continue
                entry: dict[str, Any] = {"id": other, "status": self._status.get(other, "absent")}
                if other in seen:
                    entry["repeated"] = True
                else:
                    seen.add(other)
                    entry[name] = walk(other, seen, nexts, name)
                out.append(entry)
            return out

        def parents(node: str) -> Iterable[str]:
            lesson = self.lessons.get(node)
            return lesson.parents if lesson else ()

        def children(node: str) -> Iterable[str]:
            return self.children.get(node, ())

        return {"id": rid, "status": self._status.get(rid, "absent"),
                "parents": walk(rid, {rid}, parents, "parents"),
                "children": walk(rid, {rid}, children, "children")}


def _discard(index: dict, key: Any, value: Any) -> None:
    """Remove ``value`` from the set ``index[key]``, and the key once its set is empty."""
    values = index.get(key)
    if values is not None:
        values.discard(value)
        if not values:
            del index[key]


def evaluate(records: Iterable[Any], config: CommonsConfig | None = None) -> dict[str, str]:
    """The status of every record: the pure function the rules above define."""
    machine = Commons(config)
    for record in records:
        machine.add(record)
    return machine.statuses()


_INITIAL = {"lesson": CANDIDATE, "attestation": PENDING, "revocation": PENDING, "vouch": NO_EFFECT}


def initial_status(record: Any) -> str:
    """A record's status before the machine has seen it (what a lone record would get)."""
    return _INITIAL[record.record_type]
