"""The pure lifecycle core (openmemory_local.sleep.lifecycle): its tables are complete, its functions
decide as its rules say (at the boundaries Config sets), no function makes a transition outside the
tables, and sleep over a real store leaves exactly the states the core says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from openmemory_local.core.config import Config
from openmemory_local.ingest.transcripts import ingest
from openmemory_local.sleep import lifecycle as lc
from openmemory_local.sleep.lessons import LessonNotFound, unveto, veto
from openmemory_local.sleep.passes import sleep
from openmemory_local.storage.store import Store
from tests.local.test_sleep import add, at, correction, error, session
from tests.local.test_sleep_real import DAYS, end_of, place

REPO = Path(__file__).resolve().parents[2]
CONFIG = Config(home=Path("/nonexistent"))


# --- the tables -----------------------------------------------------------------------------------


def test_every_lesson_state_but_the_final_one_has_its_exits_and_the_final_one_none():
    exits = {state: {row.target for row in lc.LESSON_TRANSITIONS if row.source == state and row.target != state}
             for state in lc.LESSON_STATES}
    assert exits == {lc.FORMING: {lc.ACTIVE, lc.DROPPED}, lc.ACTIVE: {lc.ARCHIVED}, lc.ARCHIVED: {lc.ACTIVE},
                     lc.DROPPED: set()}
    assert all(not exits[s] for s in lc.LESSON_FINAL)
    for row in lc.LESSON_TRANSITIONS:
        assert row.source in lc.LESSON_STATES and row.target in lc.LESSON_STATES and row.event in lc.LESSON_EVENTS
    # every state is reachable from a group just formed
    reached, frontier = {lc.FORMING}, [lc.FORMING]
    while frontier:
        state = frontier.pop()
        for row in lc.LESSON_TRANSITIONS:
            if row.source == state and row.target not in reached:
                reached.add(row.target)
                frontier.append(row.target)
    assert reached == set(lc.LESSON_STATES)
    # the veto flag goes both ways
    assert {(source, target) for _, source, target in lc.VETO_TRANSITIONS} == {(False, True), (True, False)}


def test_every_prediction_state_but_the_final_ones_has_its_exits():
    for state in lc.PREDICTION_STATES:
        targets = {t for _, s, t, _, _ in lc.PREDICTION_TRANSITIONS if s == state}
        assert bool(targets) == (state not in lc.PREDICTION_FINAL), state
    assert {t for _, s, t, _, _ in lc.PREDICTION_TRANSITIONS if s == lc.OPEN} == {lc.CONFIRMED, lc.FAILED, lc.WITHDRAWN}
    # no event takes a prediction anywhere the table does not say, and nothing leaves a final state
    for state in lc.PREDICTION_STATES:
        for event in lc.PREDICTION_EVENTS:
            target = lc.resolve(state, event)
            assert target == state or (event, state, target) in {r[:3] for r in lc.PREDICTION_TRANSITIONS}
            if state in lc.PREDICTION_FINAL:
                assert target == state
    with pytest.raises(lc.LifecycleError):
        lc.resolve(lc.OPEN, "expire")  # there is no expiry (P4)


def test_every_rule_a_table_names_is_stated_at_the_top_of_the_file():
    doc = lc.__doc__
    rules = {row.rule for row in lc.LESSON_TRANSITIONS} | {r[3] for r in lc.PREDICTION_TRANSITIONS} | {"L7"}
    for rule in rules:
        assert re.search(rf"^{rule}  ", doc, re.M), rule


def test_docs_engine_shows_the_table_as_the_code_has_it():
    assert lc.table_markdown() in (REPO / "docs" / "engine.md").read_text()


# --- no transition outside the table, whatever the input -----------------------------------------------

_strengths = st.floats(min_value=0.0, max_value=CONFIG.lesson_max_strength, allow_nan=False)  # L1 holds of inputs
_lessons = st.builds(lc.Lesson, st.sampled_from(lc.LESSON_STATES), _strengths, st.booleans(),
                     st.sampled_from(["error", "correction"]))


def _allowed(change: lc.Change, event: str) -> bool:
    before, after = change.before.state, change.after.state
    if before == after:
        return change.rule is None
    return any(r.event == event and r.source == before and r.target == after and r.rule == change.rule
               for r in lc.LESSON_TRANSITIONS)


@settings(max_examples=400, deadline=None)
@given(lesson=_lessons, sessions=st.integers(0, 12), new=st.integers(0, 12), days=st.floats(0, 400),
       outcome=st.sampled_from([lc.CONFIRMED, lc.FAILED, lc.UNDECIDED]), live=st.booleans())
def test_no_function_moves_a_lesson_outside_the_table(lesson, sessions, new, days, outcome, live):
    changes = [(lc.after_join(lesson, sessions, new, CONFIG), lc.JOIN),
               (lc.after_decay(lesson, days, CONFIG), lc.DECAY),
               (lc.after_verdict(lesson, outcome, CONFIG), {lc.CONFIRMED: lc.CONFIRM, lc.FAILED: lc.FAIL}.get(outcome)),
               (lc.after_forgetting(lesson, live), lc.FORGET)]
    for change, event in changes:
        assert _allowed(change, event), (event, change)
        assert change.after.vetoed == lesson.vetoed  # only a veto moves the flag (L7)
        assert change.after.kind == lesson.kind
        if change.after.strength != lesson.strength:
            assert 0.0 <= change.after.strength <= CONFIG.lesson_max_strength  # L1
    if lesson.state == lc.DROPPED:  # final: nothing moves it
        assert all(change.after == lesson for change, _ in changes)
    if lesson.state in lc.VETOABLE:
        for fn, target in ((lc.veto, True), (lc.unveto, False)):
            change = fn(lesson)
            assert change.after.vetoed is target and change.after.state == lesson.state
            assert change.after.strength == lesson.strength
    else:
        for fn in (lc.veto, lc.unveto):
            with pytest.raises(lc.LifecycleError):
                fn(lesson)


# --- the rules, at their boundaries ------------------------------------------------------------------


@pytest.mark.parametrize("kind, least", [("error", CONFIG.error_min_sessions),
                                         ("correction", CONFIG.correction_min_sessions)])
def test_l2_a_group_is_promoted_at_its_minimum_of_sessions(kind, least):
    forming = lc.Lesson(lc.FORMING, 0.0, False, kind)
    assert lc.promote(kind, least - 1, CONFIG) is None
    stays = lc.after_join(forming, least - 1, least - 1, CONFIG)
    assert stays.after == forming and not stays.learned
    at_least = lc.after_join(forming, least, least, CONFIG)
    assert at_least.learned and at_least.rule == "L2"
    assert at_least.after.strength == CONFIG.lesson_initial_strength
    beyond = lc.after_join(forming, least + 2, 1, CONFIG)
    assert beyond.after.strength == CONFIG.lesson_initial_strength + 2 * CONFIG.lesson_join_strength
    assert lc.after_join(forming, least + 100, 1, CONFIG).after.strength == CONFIG.lesson_max_strength  # L1


def test_l3_a_new_session_strengthens_an_old_one_only_counts_and_an_archived_lesson_comes_back():
    active = lc.Lesson(lc.ACTIVE, 1.0)
    assert lc.after_join(active, 5, 0, CONFIG).after == active  # a session already in it
    two = lc.after_join(active, 5, 2, CONFIG)
    assert two.after.strength == 1.0 + 2 * CONFIG.lesson_join_strength and two.strengthened and two.rule is None
    assert lc.after_join(active._replace(strength=4.9), 5, 1, CONFIG).after.strength == CONFIG.lesson_max_strength
    archived = lc.Lesson(lc.ARCHIVED, 0.1, vetoed=True)
    back = lc.after_join(archived, 3, 1, CONFIG)
    assert back.revived and back.rule == "L3" and back.after.vetoed  # a vetoed lesson still absorbs (L3, L7)
    assert lc.after_join(archived, 3, 0, CONFIG).after == archived
    # a weaker join than the threshold leaves it archived
    weak = Config(home=Path("/nonexistent"), lesson_join_strength=0.01)
    assert lc.after_join(lc.Lesson(lc.ARCHIVED, 0.1), 3, 1, weak).after.state == lc.ARCHIVED


def test_l4_decay_halves_per_half_life_and_archives_below_the_threshold_not_at_it():
    half = CONFIG.decay_half_life_days
    assert lc.decayed_strength(1.0, half, CONFIG) == 0.5
    assert lc.decayed_strength(1.0, 2 * half, CONFIG) == 0.25
    assert lc.decayed_strength(1.0, 0, CONFIG) == 1.0 and lc.decayed_strength(1.0, None, CONFIG) == 1.0
    assert lc.decayed_strength(1.0, -3, CONFIG) == 1.0  # no negative days
    edge = CONFIG.archive_below
    assert not lc.fades(edge, CONFIG) and lc.fades(edge - 1e-9, CONFIG)
    assert lc.after_decay(lc.Lesson(lc.ACTIVE, edge), 0, CONFIG).after.state == lc.ACTIVE
    faded = lc.after_decay(lc.Lesson(lc.ACTIVE, 2 * edge), half + 1e-6, CONFIG)
    assert faded.archived and faded.rule == "L4" and faded.withdraws
    for state in (lc.FORMING, lc.ARCHIVED):  # only an active lesson decays
        lesson = lc.Lesson(state, 1.0)
        assert lc.after_decay(lesson, 1000, CONFIG).after == lesson


def test_l5_verdicts_move_strength_and_a_failure_below_the_threshold_archives():
    confirmed = lc.after_verdict(lc.Lesson(lc.ACTIVE, 1.0), lc.CONFIRMED, CONFIG)
    assert confirmed.after == lc.Lesson(lc.ACTIVE, 1.0 + CONFIG.confirm_strength)
    capped = lc.after_verdict(lc.Lesson(lc.ACTIVE, 4.8), lc.CONFIRMED, CONFIG)
    assert capped.after.strength == CONFIG.lesson_max_strength
    kept = lc.after_verdict(lc.Lesson(lc.ACTIVE, CONFIG.archive_below + CONFIG.fail_strength), lc.FAILED, CONFIG)
    assert kept.after.state == lc.ACTIVE and not kept.withdraws
    lost = lc.after_verdict(lc.Lesson(lc.ACTIVE, CONFIG.archive_below + CONFIG.fail_strength - 0.01), lc.FAILED, CONFIG)
    assert lost.archived and lost.rule == "L5" and lost.withdraws
    assert lc.after_verdict(lc.Lesson(lc.ACTIVE, 0.2), lc.FAILED, CONFIG).after.strength == 0.0  # L1
    assert lc.after_verdict(lc.Lesson(lc.ACTIVE, 1.0), lc.UNDECIDED, CONFIG).after == lc.Lesson(lc.ACTIVE, 1.0)


def test_l6_a_forming_group_without_a_live_surprise_is_dropped_and_a_lesson_never_is():
    assert lc.after_forgetting(lc.Lesson(lc.FORMING), False).dropped
    assert not lc.after_forgetting(lc.Lesson(lc.FORMING), True).dropped
    for state in (lc.ACTIVE, lc.ARCHIVED):
        assert lc.after_forgetting(lc.Lesson(state, 1.0), False).after.state == state


def test_l7_veto_and_unveto_move_the_flag_only_and_a_veto_withdraws():
    lesson = lc.Lesson(lc.ACTIVE, 2.0)
    vetoed = lc.veto(lesson)
    assert vetoed.after == lesson._replace(vetoed=True) and vetoed.withdraws
    assert lc.veto(vetoed.after).after == vetoed.after  # twice: unchanged
    assert lc.unveto(vetoed.after).after == lesson
    assert lc.unveto(lesson).after == lesson
    with pytest.raises(lc.LifecycleError):
        lc.veto(lc.Lesson(lc.FORMING))


def test_p1_a_prediction_is_made_by_an_active_unvetoed_strong_enough_lesson_without_one():
    least = CONFIG.predict_min_strength
    assert lc.may_predict(lc.Lesson(lc.ACTIVE, least), False, CONFIG)
    assert not lc.may_predict(lc.Lesson(lc.ACTIVE, least - 1e-9), False, CONFIG)
    assert not lc.may_predict(lc.Lesson(lc.ACTIVE, least), True, CONFIG)
    assert not lc.may_predict(lc.Lesson(lc.ACTIVE, least, vetoed=True), False, CONFIG)
    for state in (lc.FORMING, lc.ARCHIVED, lc.DROPPED):
        assert not lc.may_predict(lc.Lesson(state, 5.0), False, CONFIG)


def test_p2_to_p4_the_first_session_that_meets_the_prediction_decides():
    fail, fix, sit = (1, "t1", "git push", 0.9), (2, "t2", "git push -u", 0.8), (3, "t0", "git push", 0.7)
    # the failure (or the resolution) in the first session confirms
    confirmed = lc.verdict({"s1": {"first": "t1", "failure": fail}}, set())
    assert confirmed == lc.Verdict(lc.CONFIRMED, lc.WHY["failure"], fail)
    assert lc.verdict({"s1": {"first": "t2", "resolution": fix, "situation": sit}}, set()).outcome == lc.CONFIRMED
    # the situation alone fails once that session is quiet, not before
    failed = lc.verdict({"s1": {"first": "t0", "situation": sit}}, {"s1"})
    assert failed == lc.Verdict(lc.FAILED, lc.WHY["situation"], sit)
    assert lc.verdict({"s1": {"first": "t0", "situation": sit}}, set()).outcome == lc.UNDECIDED
    # a later session's failure decides nothing while the first, situation-only session is not quiet
    both = {"s2": {"first": "t1", "failure": fail}, "s1": {"first": "t0", "situation": sit}}
    assert lc.verdict(both, set()).outcome == lc.UNDECIDED
    assert lc.verdict(both, {"s1"}).outcome == lc.FAILED
    # no session met it: open, however long (P4)
    assert lc.verdict({}, {"s1"}).outcome == lc.UNDECIDED
    assert lc.resolve(lc.OPEN, lc.CONFIRM) == lc.CONFIRMED and lc.resolve(lc.OPEN, lc.FAIL) == lc.FAILED


# --- the store holds what the core says ----------------------------------------------------------------


def _check_store(store) -> dict:
    """Every row of the store's lessons and predictions against the core: the invariants a sleep leaves
    (L1-L7, P1, P5). Returns counts, so a caller can see the check looked at something."""
    config = store.config
    conn = store.conn
    open_of = {lid: n for lid, n in conn.execute(
        "SELECT lesson_id, COUNT(*) FROM predictions WHERE state = 'open' GROUP BY lesson_id")}
    counts = {state: 0 for state in lc.LESSON_STATES}
    for lid, state, strength, vetoed, kind, sessions in conn.execute(
            "SELECT id, state, strength, vetoed_at IS NOT NULL, kind, sessions FROM lessons"):
        lesson = lc.Lesson(state, strength, bool(vetoed), kind)
        counts[state] += 1
        assert state in lc.LESSON_STATES and state != lc.DROPPED  # a dropped group has no row
        assert 0.0 <= strength <= config.lesson_max_strength  # L1
        if state == lc.FORMING:  # L2: a group that could be a lesson is one
            assert lc.promote(kind, sessions, config) is None, lid
        elif state == lc.ACTIVE:  # L4, L5: an active lesson below the threshold would be archived
            assert not lc.fades(strength, config), lid
        else:
            assert lc.fades(strength, config), lid  # L3: it would have come back otherwise
        # P1 (predict runs last): a lesson the core says predicts has its open prediction; P5: an archived
        # or vetoed one has none (a lesson weakened below predict_min_strength keeps the one it made)
        opened = open_of.get(lid, 0)
        assert opened <= 1, lid
        if lc.may_predict(lesson, False, config):
            assert opened == 1, lid
        if opened:
            assert state == lc.ACTIVE and not vetoed, lid
    # the events agree with the core's arithmetic
    for kind, lid, detail in conn.execute("SELECT kind, lesson_id, detail FROM events ORDER BY id"):
        detail = json.loads(detail)
        if kind in ("confirmed", "failed"):
            before = lc.Lesson(lc.ACTIVE, detail["before"])
            change = lc.after_verdict(before, kind, config)
            assert round(change.after.strength, 4) == pytest.approx(detail["after"], abs=2e-4), (kind, lid)
        elif kind == "learned":
            row_kind = conn.execute("SELECT kind FROM lessons WHERE id = ?", (lid,)).fetchone()
            if row_kind:
                assert detail["strength"] == lc.promote(row_kind[0], detail["sessions"], config)
        elif kind == "archived":
            assert lc.fades(detail["strength"], config)
    return counts


def test_sleep_over_a_synthetic_store_leaves_what_the_core_says(store):
    """Synthetic episodes (tests/local/test_sleep.py's helpers): a failure learned, confirmed, vetoed,
    decayed over months of activity; a correction learned at once; a one-off failure dropped."""
    add(store, error("e1", "s1", 0), error("e2", "s2", 1), correction("c1", "s3", 1),
        error("x1", "s4", 1, command="make lint", first="lint: 3 problems"), day=1)
    sleep(store, at(1, 23))
    assert _check_store(store)[lc.ACTIVE] == 2
    add(store, error("e3", "s5", 3), day=3)
    sleep(store, at(3, 23))
    _check_store(store)
    lid = store.conn.execute("SELECT id FROM lessons WHERE kind = 'correction'").fetchone()[0]
    assert veto(store, lid, at(4)) and not veto(store, lid, at(4))
    _check_store(store)
    # months of activity: decay archives, the forming one-off is dropped once its surprise is archived
    for start in range(10, 400, 30):
        add(store, *[session(f"busy{day}", day, ["git status"]) for day in range(start, start + 30)], day=start + 29)
        sleep(store, at(start + 29, 23))
        counts = _check_store(store)
    assert counts[lc.FORMING] == 0 and store.conn.execute(
        "SELECT COUNT(*) FROM events WHERE kind = 'archived'").fetchone()[0] >= 2
    assert counts[lc.ARCHIVED] >= 2
    assert unveto(store, lid, at(400)) and not unveto(store, lid, at(400))
    with pytest.raises(LessonNotFound):
        veto(store, 10_000, at(400))


def test_sleep_over_the_real_transcripts_leaves_what_the_core_says(spotter, tmp_path):
    claude = tmp_path / "claude"
    config = Config(home=tmp_path / "home", claude_dir=claude, sources=(claude / "projects",))
    with Store.open(config) as store:
        for day, names in DAYS.items():
            paths = [p for name in names for p in place(spotter / name, claude / "projects")]
            assert not ingest(store, paths, now=end_of(day)).problems
            sleep(store, end_of(day))
            _check_store(store)
        decided = store.conn.execute("SELECT COUNT(*) FROM predictions WHERE state != 'open'").fetchone()[0]
        assert decided >= 1  # a verdict was checked against the core
        counts = _check_store(store)
        assert counts[lc.ACTIVE] >= 3 and counts[lc.FORMING] >= 1


def test_one_function_writes_a_veto_of_own_lessons():
    """L7: the only statement that writes ``lessons.vetoed_at`` is storage/lessons.py's ``set_veto``,
    and only sleep/lessons.py (veto, unveto) calls it; the renderer's deleted file goes through veto()."""
    sources = {p.relative_to(REPO).as_posix(): p.read_text() for p in (REPO / "openmemory_local").rglob("*.py")}
    writers = sorted(name for name, text in sources.items() if re.search(r"UPDATE lessons SET[^\"]*vetoed_at", text))
    assert writers == ["openmemory_local/storage/lessons.py"]
    callers = sorted(name for name, text in sources.items()
                     if re.search(r"(lessons|lesson_store)\.set_veto\(", text)
                     and not name.startswith("openmemory_local/storage/"))
    assert callers == ["openmemory_local/sleep/lessons.py"]
    assert "veto(store, lesson_id, now_iso" in sources["openmemory_local/render/memory_folder.py"]
