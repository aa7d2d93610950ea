"""The lifecycle of a lesson and of a prediction: every rule that moves one from a state to another.

Everything that decides a lesson's or a prediction's state, or a lesson's strength, lives in this
file (the node's :mod:`openmemory_node.commons` and h11's ``_state.py`` are the model): the rules
first, in prose; then the states; then the transition tables; then the functions, which only apply
them. It is pure: no I/O, no clock, no SQL. Sleep's passes (:mod:`openmemory_local.sleep.passes`:
decay, learn, verify, predict) and the veto (:func:`openmemory_local.sleep.lessons.veto`) read what
they need from the store, ask the functions below, and persist what they decide
(:mod:`openmemory_local.storage.lessons`). Every number is a :class:`~openmemory_local.core.config.Config`
field (in brackets below, with its default).

RULES
=====

Lessons. A *group* is a set of resembling surprises (failed tool calls, corrections) of one kind
and project family (which surprise joins which group is :mod:`openmemory_local.sleep.cluster`'s
business, not this file's). A row of the ``lessons`` table is a group in one of these states:

    forming    not a lesson yet: its failure has not repeated in enough sessions
    active     a lesson: rendered, recalled, predicting (unless vetoed)
    archived   faded: kept, never rendered nor predicting; it may come back (L3)
    dropped    a forming group all of whose surprises were archived: deleted (terminal)

L1  Strength. A lesson's strength is always within [0, ``lesson_max_strength``] (5): every change
    below is capped there (:func:`capped`), so a lesson that stops predicting can still fade.

L2  Promotion (forming -> active). A group becomes a lesson when its surprises come from at least
    ``error_min_sessions`` (2) distinct sessions for failures (a failure must repeat: retries in
    one session are one encounter), ``correction_min_sessions`` (1) for corrections (one
    correction is a lesson). It starts at ``lesson_initial_strength`` (1.0) plus
    ``lesson_join_strength`` (0.5) per session beyond that minimum (:func:`promote`).

L3  Reinforcement. A surprise joining a lesson (active or archived, vetoed or not) from a session
    not yet in it adds ``lesson_join_strength`` (0.5) per such session; one from a session already
    in it only counts (``seen``). An archived lesson whose strength reaches ``archive_below``
    (0.15) again this way is *revived* (archived -> active). A vetoed lesson still absorbs the
    surprises that resemble it: a veto is never undone by the same failure coming back.

L4  Decay (active -> archived). An active lesson's strength halves every ``decay_half_life_days``
    (45) days of activity of its project family since its last reinforcement
    (:func:`decayed_strength`; which days count is :class:`openmemory_local.sleep.passes.Activity`'s
    business). An active lesson below ``archive_below`` (0.15) is archived (:func:`fades`).
    Episodes decay by the same function and the same threshold (an archived episode is kept,
    never recalled nor consolidated).

L5  Verdicts. A confirmed prediction adds ``confirm_strength`` (0.5) to its lesson, and the
    confirming evidence's time becomes its last reinforcement (decay counts from there); a
    failed one takes ``fail_strength`` (0.5) away, and a lesson that falls below
    ``archive_below`` is archived (active -> archived). Only an active lesson has an open
    prediction (P1, P5), so only an active lesson's strength moves this way.

L6  Dropping (forming -> dropped). A forming group none of whose surprises is left unarchived is
    deleted: nothing remains to make it a lesson.

L7  Veto. The owner vetoes a lesson (``openmemory veto``, the page's button, or deleting its
    file from a memory folder: one function, :func:`openmemory_local.sleep.lessons.veto`, writes
    it, whichever way it came). A veto is a flag beside the state, not a state: a vetoed lesson
    keeps decaying, absorbing, archiving and reviving (L3, L4), but is never rendered and never
    predicts; its open prediction is withdrawn (P5). Unveto clears the flag. Only a lesson
    (active or archived) can be vetoed: a forming group is not one yet.

Predictions. A row of the ``predictions`` table, in one of these states:

    none       no row yet (the lesson has no open prediction)
    open       made; waiting for a later session of the family to meet its situation
    confirmed  that session showed the failure again, or its resolution used (terminal)
    failed     that session met the situation with neither, and went quiet (terminal)
    withdrawn  its lesson was archived or vetoed before a verdict (terminal, counts for nothing)

P1  Making (none -> open). An active, unvetoed lesson with strength >= ``predict_min_strength``
    (1) and no open prediction makes one (:func:`may_predict`).

P2  Confirmed (open -> confirmed). Of the later sessions of the family that met the
    prediction's situation or its outcome, the first in time decides (:func:`verdict`): the
    failure or the resolution in it confirms (L5).

P3  Failed (open -> failed). That first session met the situation alone, and has been quiet
    ``prediction_settle_minutes`` (60): the world changed (L5). Until it is quiet nothing is
    decided, a later session included (it may yet show them).

P4  No expiry. A prediction stays open while no session of its family meets its situation, however
    long: a project left alone for a year fails nothing. (No ``expired`` state exists.)

P5  Withdrawn (open -> withdrawn). When its lesson is archived (L4, L5) or vetoed (L7).

Received lessons (``commons_lessons``, :mod:`openmemory_local.commons.receive`) have their own
lifecycle, the node's (:mod:`openmemory_node.commons`: candidate, common, faded, revoked), and
their own predictions; their veto is the same flag with the same meaning (L7: never rendered,
never attested, its open prediction withdrawn), written by one function of their own
(:func:`openmemory_local.commons.receive.veto_commons`), because it is another table whose rows
another party decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

# -- states -------------------------------------------------------------------------------------

FORMING = "forming"
ACTIVE = "active"
ARCHIVED = "archived"
DROPPED = "dropped"
LESSON_STATES = (FORMING, ACTIVE, ARCHIVED, DROPPED)
#: The states a lesson leaves no more (its row is gone).
LESSON_FINAL = (DROPPED,)
#: The states the owner may veto (a forming group is not a lesson yet).
VETOABLE = (ACTIVE, ARCHIVED)

NONE = "none"
OPEN = "open"
CONFIRMED = "confirmed"
FAILED = "failed"
WITHDRAWN = "withdrawn"
PREDICTION_STATES = (NONE, OPEN, CONFIRMED, FAILED, WITHDRAWN)
PREDICTION_FINAL = (CONFIRMED, FAILED, WITHDRAWN)
UNDECIDED = "undecided"  # a verdict that decides nothing (P2, P3, P4)

# -- events -------------------------------------------------------------------------------------

JOIN = "join"  # surprises joined the group (L2, L3)
DECAY = "decay"  # a decay pass (L4)
CONFIRM = "confirm"  # its prediction was confirmed (L5)
FAIL = "fail"  # its prediction failed (L5)
FORGET = "forget"  # its surprises were archived (L6)
VETO = "veto"  # (L7)
UNVETO = "unveto"  # (L7)
LESSON_EVENTS = (JOIN, DECAY, CONFIRM, FAIL, FORGET, VETO, UNVETO)

MAKE = "make"  # (P1)
WITHDRAW = "withdraw"  # (P5)
PREDICTION_EVENTS = (MAKE, CONFIRM, FAIL, WITHDRAW)


class Lesson(NamedTuple):
    """What the rules need to know of a group or lesson."""

    state: str = FORMING
    strength: float = 0.0
    vetoed: bool = False
    kind: str = "error"  # ``error`` or ``correction`` (L2)


class Facts(NamedTuple):
    """What a guard reads besides the lesson: the group's distinct sessions now and those new to it
    (L2, L3), whether any of its surprises is unarchived (L6)."""

    sessions: int = 0
    new_sessions: int = 0
    live_members: bool = True


@dataclass(frozen=True)
class Row:
    """One transition: on ``event``, from ``source`` to ``target`` when ``guard`` holds (``when``
    says it in words, for the docs); ``rule`` names the rule above that allows it."""

    event: str
    source: str
    target: str
    rule: str
    when: str
    guard: Callable[[Lesson, Facts, object], bool]


def _enough_sessions(lesson: Lesson, facts: Facts, config) -> bool:
    return promote(lesson.kind, facts.sessions, config) is not None


def _back_above_threshold(lesson: Lesson, facts: Facts, config) -> bool:
    return facts.new_sessions > 0 and not fades(lesson.strength, config)


def _below_threshold(lesson: Lesson, facts: Facts, config) -> bool:
    return fades(lesson.strength, config)


def _no_live_member(lesson: Lesson, facts: Facts, config) -> bool:
    return not facts.live_members


#: A lesson's transitions. The first row that matches (event, source, guard) applies; no row, no
#: change of state. The guards read the lesson as the event leaves it (its strength after L3, L4
#: or L5 changed it). Vetoing is a flag beside these states: :data:`VETO_TRANSITIONS`.
LESSON_TRANSITIONS: tuple[Row, ...] = (
    Row(JOIN, FORMING, ACTIVE, "L2", "its surprises come from enough sessions", _enough_sessions),
    Row(FORGET, FORMING, DROPPED, "L6", "none of its surprises is left unarchived", _no_live_member),
    Row(JOIN, ARCHIVED, ACTIVE, "L3", "a new session brings it back to `archive_below`", _back_above_threshold),
    Row(DECAY, ACTIVE, ARCHIVED, "L4", "its strength is below `archive_below`", _below_threshold),
    Row(FAIL, ACTIVE, ARCHIVED, "L5", "its strength is below `archive_below`", _below_threshold),
)

#: The veto flag's transitions (L7): (event, vetoed before, vetoed after), for a lesson in
#: :data:`VETOABLE` only; a veto of a vetoed lesson, or an unveto of one that is not, changes nothing.
VETO_TRANSITIONS: tuple[tuple[str, bool, bool], ...] = (
    (VETO, False, True),
    (UNVETO, True, False),
)


#: A prediction's transitions: (event, source, target, rule, when). The guards are the functions
#: that decide the event (:func:`may_predict`, :func:`verdict`, :func:`withdraws`); no row, no change.
PREDICTION_TRANSITIONS: tuple[tuple[str, str, str, str, str], ...] = (
    (MAKE, NONE, OPEN, "P1", "its lesson is active, unvetoed, strong enough, without an open prediction"),
    (CONFIRM, OPEN, CONFIRMED, "P2", "the first later session meeting it showed the failure or its resolution"),
    (FAIL, OPEN, FAILED, "P3", "that session met the situation alone and is quiet"),
    (WITHDRAW, OPEN, WITHDRAWN, "P5", "its lesson was archived or vetoed"),
)


class LifecycleError(ValueError):
    """An event the tables do not allow from this state (a veto of a group that is not a lesson)."""


# -- the functions --------------------------------------------------------------------------------


class Change(NamedTuple):
    """What an event did to a lesson: the lesson before and after, and the rule that moved its
    state (None when it stayed)."""

    before: Lesson
    after: Lesson
    rule: str | None = None

    @property
    def learned(self) -> bool:
        return self.before.state == FORMING and self.after.state == ACTIVE

    @property
    def revived(self) -> bool:
        return self.before.state == ARCHIVED and self.after.state == ACTIVE

    @property
    def archived(self) -> bool:
        return self.before.state != ARCHIVED and self.after.state == ARCHIVED

    @property
    def dropped(self) -> bool:
        return self.after.state == DROPPED

    @property
    def strengthened(self) -> bool:
        return self.after.strength > self.before.strength

    @property
    def withdraws(self) -> bool:
        """P5: whether the lesson's open prediction is withdrawn by this change."""
        return withdraws(self.before, self.after)


def step(lesson: Lesson, event: str, facts: Facts, config) -> tuple[str, str | None]:
    """The state after ``event`` (and the rule that moved it, or None): the first row of
    :data:`LESSON_TRANSITIONS` that matches. ``lesson`` carries the strength the event left."""
    rows = _ROWS.get((event, lesson.state))
    if rows is None:
        if event not in LESSON_EVENTS:
            raise LifecycleError(f"unknown lesson event {event!r}")
        return lesson.state, None
    for row in rows:
        if row.guard(lesson, facts, config):
            return row.target, row.rule
    return lesson.state, None


#: The rows of :data:`LESSON_TRANSITIONS` by (event, source), in the table's order.
_ROWS: dict[tuple[str, str], tuple[Row, ...]] = {}
for _row in LESSON_TRANSITIONS:
    _ROWS[(_row.event, _row.source)] = _ROWS.get((_row.event, _row.source), ()) + (_row,)
del _row
_NO_FACTS = Facts()


def _moved(lesson: Lesson, strength: float, event: str, facts: Facts, config) -> Change:
    """The change of ``lesson`` whose strength ``event`` made ``strength``: its state by the table."""
    moved = lesson if strength == lesson.strength else Lesson(lesson.state, strength, lesson.vetoed, lesson.kind)
    state, rule = step(moved, event, facts, config)
    if state != moved.state:
        moved = Lesson(state, moved.strength, moved.vetoed, moved.kind)
    return Change(lesson, moved, rule)


def capped(strength: float, config) -> float:
    """L1: ``strength`` within [0, ``lesson_max_strength``]."""
    return min(config.lesson_max_strength, max(0.0, strength))


def min_sessions(kind: str, config) -> int:
    """L2: the distinct sessions a group of this kind needs to be a lesson."""
    return config.correction_min_sessions if kind == "correction" else config.error_min_sessions


def promote(kind: str, sessions: int, config) -> float | None:
    """L2: the strength a group of ``kind`` whose surprises come from ``sessions`` distinct
    sessions starts with as a lesson, or None while it is not one."""
    least = min_sessions(kind, config)
    if sessions < least:
        return None
    return capped(config.lesson_initial_strength + config.lesson_join_strength * (sessions - least), config)


def fades(strength: float, config) -> bool:
    """L4, L5: whether a lesson (or an episode) this strong is archived."""
    return strength < config.archive_below


def decay_factor(active_days: float | None, half_life_days: float) -> float:
    """L4: what a strength is multiplied by after ``active_days`` days of activity."""
    return 0.5 ** (max(active_days or 0.0, 0.0) / half_life_days)


def decayed_strength(strength: float, active_days: float | None, config) -> float:
    """L4: ``strength`` after ``active_days`` days of activity without reinforcement."""
    return strength * decay_factor(active_days, float(config.decay_half_life_days))


def after_join(lesson: Lesson, sessions: int, new_sessions: int, config) -> Change:
    """L2, L3: a group that surprises joined, its surprises now from ``sessions`` distinct
    sessions, ``new_sessions`` of them new to it."""
    strength = lesson.strength
    if lesson.state == FORMING:
        promoted = promote(lesson.kind, sessions, config)
        strength = strength if promoted is None else promoted
    elif lesson.state in (ACTIVE, ARCHIVED) and new_sessions > 0:
        strength = capped(strength + config.lesson_join_strength * new_sessions, config)
    return _moved(lesson, strength, JOIN, Facts(sessions=sessions, new_sessions=new_sessions), config)


def after_decay(lesson: Lesson, active_days: float | None, config) -> Change:
    """L4: an active lesson after ``active_days`` days of activity (0: only the threshold is
    applied); a lesson in any other state does not decay."""
    if lesson.state != ACTIVE:
        return Change(lesson, lesson)
    return _moved(lesson, decayed_strength(lesson.strength, active_days, config), DECAY, _NO_FACTS, config)


def after_verdict(lesson: Lesson, outcome: str, config) -> Change:
    """L5: a lesson whose prediction was ``confirmed`` or ``failed``. Only an active lesson has an
    open prediction (P1, P5): a lesson in another state is left as it is."""
    if lesson.state != ACTIVE:
        return Change(lesson, lesson)
    if outcome == CONFIRMED:
        event, delta = CONFIRM, config.confirm_strength
    elif outcome == FAILED:
        event, delta = FAIL, -config.fail_strength
    else:
        return Change(lesson, lesson)
    return _moved(lesson, capped(lesson.strength + delta, config), event, _NO_FACTS, config)


def after_forgetting(lesson: Lesson, live_members: bool) -> Change:
    """L6: a group after decay archived surprises (``live_members``: one of its surprises is
    still unarchived)."""
    return _moved(lesson, lesson.strength, FORGET, Facts(live_members=live_members), None)


def veto(lesson: Lesson) -> Change:
    """L7: the lesson vetoed (unchanged if it already was); :class:`LifecycleError` for a group
    that is not a lesson."""
    return _flag(lesson, VETO)


def unveto(lesson: Lesson) -> Change:
    """L7: the veto lifted (unchanged if there was none)."""
    return _flag(lesson, UNVETO)


def _flag(lesson: Lesson, event: str) -> Change:
    if lesson.state not in VETOABLE:
        raise LifecycleError(f"a {lesson.state} group is not a lesson: it cannot be {event}ed")
    for on, source, target in VETO_TRANSITIONS:
        if on == event and source == lesson.vetoed:
            return Change(lesson, Lesson(lesson.state, lesson.strength, target, lesson.kind), "L7")
    return Change(lesson, lesson)


def withdraws(before: Lesson, after: Lesson) -> bool:
    """P5: whether a lesson's change withdraws its open prediction (archived, or vetoed)."""
    return ((after.state == ARCHIVED and before.state != ARCHIVED)
            or (after.vetoed and not before.vetoed))


def may_predict(lesson: Lesson, has_open: bool, config) -> bool:
    """P1: whether the lesson makes a prediction now."""
    return (lesson.state == ACTIVE and not lesson.vetoed and not has_open
            and lesson.strength >= config.predict_min_strength)


class Verdict(NamedTuple):
    """What the evidence decides of an open prediction (P2, P3, P4): ``outcome`` is
    :data:`CONFIRMED`, :data:`FAILED` or :data:`UNDECIDED`; ``why`` says it in words; ``match`` is
    the match that decided, ``(episode id, when, facet, similarity)``."""

    outcome: str
    why: str = ""
    match: tuple | None = None


#: What a verdict says happened, by the role of the probe that decided it.
WHY = {"failure": "the failure recurred", "resolution": "its resolution was used",
       "situation": "the situation recurred without the failure or its resolution"}

_UNDECIDED = Verdict(UNDECIDED)


def verdict(sessions: dict, quiet: set) -> Verdict:
    """P2, P3, P4 over the evidence of one prediction: ``sessions`` maps each later session of
    its family that matched one of its probes to ``{"first": when, role: match}`` (the earliest
    match of each role: ``failure``, ``resolution``, ``situation``); ``quiet`` is the sessions
    quiet long enough. The first session in time decides: the failure or the resolution in it
    confirms; the situation alone fails once that session is quiet (until then nothing is
    decided: it may yet show them); no session, nothing decided."""
    for sid, seen in sorted(sessions.items(), key=lambda kv: kv[1]["first"]):
        for role in ("failure", "resolution"):
            if role in seen:
                return Verdict(CONFIRMED, WHY[role], seen[role])
        if "situation" in seen:
            if sid in quiet:
                return Verdict(FAILED, WHY["situation"], seen["situation"])
            return _UNDECIDED
    return _UNDECIDED


def resolve(state: str, event: str) -> str:
    """A prediction's state after ``event`` (:data:`PREDICTION_TRANSITIONS`; no row, no change)."""
    if event not in PREDICTION_EVENTS:
        raise LifecycleError(f"unknown prediction event {event!r}")
    for on, source, target, _rule, _when in PREDICTION_TRANSITIONS:
        if on == event and source == state:
            return target
    return state


def table_markdown() -> str:
    """The transition tables as Markdown (docs/engine.md shows them; a test keeps them equal)."""
    lines = ["| event | from | to | when | rule |", "| --- | --- | --- | --- | --- |"]
    for row in LESSON_TRANSITIONS:
        lines.append(f"| lesson {row.event} | {row.source} | {row.target} | {row.when} | {row.rule} |")
    for event, source, target in VETO_TRANSITIONS:
        shown = lambda v: "vetoed" if v else "not vetoed"  # noqa: E731
        lines.append(f"| lesson {event} | {shown(source)} (active or archived) | {shown(target)} | always | L7 |")
    for event, source, target, rule, when in PREDICTION_TRANSITIONS:
        lines.append(f"| prediction {event} | {source} | {target} | {when} | {rule} |")
    return "\n".join(lines)
