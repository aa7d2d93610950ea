"""The four sleep passes, one by one, with an injected clock; the lock; a sleep killed midway."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from openmemory_local.core.clock import iso
from openmemory_local.core.config import Config
from openmemory_local.ingest.episodes import Episode
from openmemory_local.ingest.transcripts import add_episodes
from openmemory_local.sleep.lessons import lesson_rows, veto
from openmemory_protocol.observation import is_observation
from openmemory_local.recall.query import recall
from openmemory_local.sleep.passes import SleepBusy, decay, learn, predict, sleep, sleep_lock, verify
from openmemory_local.storage.store import Store

D0 = datetime(2026, 3, 2, tzinfo=timezone.utc)  # a Monday, midnight UTC
APP = "/home/me/app"
WT = "/home/me/src/shop-worktrees"
REPO = Path(__file__).resolve().parents[2]


def at(day: float, hour: float = 10) -> datetime:
    return D0 + timedelta(days=day, hours=hour)


def error(key, session, day, *, cwd=APP, branch="main", command="git push 2>&1",
          first=None, failure="exit_code", tool="Bash", hour=10) -> Episode:
    first = first if first is not None else f"fatal: The current branch {branch} has no upstream branch."
    fields = {"tool": tool, "command": command, "description": "", "failure": failure, "exit_code": 128,
              "first_line": first, "output": first, "call_id": key, "cwd": cwd, "branch": branch}
    return Episode("error", key, f"{tool} `{command}` failed: {first}", fields, session, None, cwd,
                   iso(at(day, hour)), 1)


def correction(key, session, day, said="no, this project uses uv, not pip", *, cwd=APP, branch="main",
               action="pip install requests") -> Episode:
    fields = {"message": said, "opening": "no", "agent_statement": "I'll install it with pip.",
              "agent_action": {"tool": "Bash", "command": action, "line": 3}, "cwd": cwd, "branch": branch}
    return Episode("correction", key, f'The person corrected the agent: "{said}".', fields, session, None, cwd,
                   iso(at(day)), 1)


def session(key, day, commands, *, cwd=APP, branch="main", lines=None, hour=9) -> Episode:
    fields = {"commands": {c: 1 for c in commands}, "command_lines": lines or list(commands), "files_edited": [],
              "files_read": [], "cwd": cwd, "branch": branch}
    return Episode("session", key, f"Session in {cwd} ran {', '.join(commands)}.", fields, key, None, cwd,
                   iso(at(day, hour)), 1)


def add(store, *episodes, day=0):
    add_episodes(store, list(episodes), now=at(day, 23))


def lessons(store, **kw):
    return lesson_rows(store, states=("active", "archived", "forming"), **kw)


def strength(store, eid):
    return store.conn.execute("SELECT strength FROM episodes WHERE key = ?", (eid,)).fetchone()[0]


# --- decay ------------------------------------------------------------------------------------


def _busy(store, days, cwd=APP):
    """A session in ``cwd`` on each of these days: the family was active."""
    add(store, *[session(f"busy-{cwd}-{d}", d, ["git status"], cwd=cwd, hour=12) for d in days], day=max(days))


def test_decay_halves_every_45_days_counted_in_whole_days(store):
    add(store, session("s1", 0, ["ls"], hour=0))
    _busy(store, range(1, 47))
    decay(store, at(45, 15))  # up to the start of day 45: exactly 45 active days after the touch
    assert strength(store, "s1") == pytest.approx(0.5)
    decay(store, at(45, 23))  # the same day again: nothing more
    assert strength(store, "s1") == pytest.approx(0.5)
    decay(store, at(46, 1))
    assert strength(store, "s1") == pytest.approx(0.5 * 0.5 ** (1 / 45))


def test_decay_counts_days_of_activity_in_the_family_not_the_calendar(store):
    add(store, session("s1", 0, ["ls"], hour=0), session("other", 0, ["ls"], cwd="/home/me/other", hour=0))
    _busy(store, range(100, 109), cwd="/home/me/other")  # another project, busy
    _busy(store, [200])
    decay(store, at(300))  # 300 days later, the project was active on 2 of them (days 0 and 200)
    assert strength(store, "s1") == pytest.approx(0.5 ** (2 / 45))
    assert strength(store, "other") == pytest.approx(0.5 ** (10 / 45))  # days 0, 100..108


def test_a_lesson_does_not_fade_while_its_project_is_left_alone(store):
    add(store, error("e1", "a", 0), error("e2", "b", 1), day=1)
    sleep(store, at(1, 23))
    [lesson] = [l for l in lessons(store) if l["state"] == "active"]
    _busy(store, range(2, 300), cwd="/home/me/other")  # the agent works elsewhere
    sleep(store, at(365))
    day1 = 0.5 ** ((14 / 24) / 45)  # day 1 was active after the lesson's last failure (10:00): 14 hours of it
    assert lessons(store)[0]["strength"] == pytest.approx(lesson["strength"] * day1, rel=1e-5)
    _busy(store, range(365, 410))  # back in the project: 45 active days later, half
    sleep(store, at(410))
    assert lessons(store)[0]["strength"] == pytest.approx(lesson["strength"] * day1 * 0.5, rel=1e-5)


def test_decay_archives_below_the_threshold_and_never_deletes(store):
    add(store, session("old", 0, ["ls"], hour=0), session("new", 120, ["ls"], hour=0))
    _busy(store, range(1, 126))
    result = decay(store, at(125))  # 0.5 ** (125 / 45) = 0.146 < 0.15
def test_recall_keeps_a_memory_alive(store):
    add(store, session("used", 0, ["git push"], hour=0), session("unused", 0, ["git push"], hour=0))
    recall(store, "Session in /home/me/app ran git push", k=1, now=at(30))
    used_key = store.conn.execute("SELECT key FROM episodes WHERE touches = 1").fetchone()[0]
    decay(store, at(45))
    other = "unused" if used_key == "used" else "used"
    assert strength(store, used_key) > strength(store, other)


# --- lessons ----------------------------------------------------------------------------------


def test_an_error_is_a_lesson_once_it_repeats_in_another_session(store):
    add(store, error("e1", "s1", 0), error("e2", "s1", 0, hour=11))
    out = learn(store, at(0, 23))
    assert out["learned"] == [] and len(lessons(store)) == 1 and lessons(store)[0]["state"] == "forming"
    add(store, error("e3", "s2", 1, branch="fix-login", cwd=APP), day=1)
    out = learn(store, at(1, 23))
    [lesson] = lessons(store)
    assert out["learned"] == [lesson["id"]]
    assert (lesson["state"], lesson["strength"], lesson["seen"], lesson["sessions"]) == ("active", 1.0, 3, 2)
    assert lesson["text"].startswith("`git push` failed in 2 sessions, on branches main and fix-login: ")
    assert is_observation(lesson["text"])


def test_one_correction_is_a_lesson_on_its_own(store):
    add(store, correction("c1", "s1", 0))
    learn(store, at(0, 23))
    [lesson] = lessons(store)
    assert lesson["state"] == "active" and lesson["kind"] == "correction" and lesson["strength"] == 1.0
    assert lesson["text"] == ('The person corrected the agent after it ran `pip install`: '
                              '"no, this project uses uv, not pip".')


def test_corrections_are_alike_by_what_was_said_and_done_not_by_being_corrections(store):
    add(store, correction("c1", "s1", 0, said="no", action="git push --force"),
        correction("c2", "s2", 0, said="no", action="rm -rf build"),
        correction("c3", "s3", 0, said="no, this project uses uv, not pip"),
        correction("c4", "s4", 0, said="no, we use uv here, not pip"))
    learn(store, at(0, 23))
    assert sorted(l["seen"] for l in lessons(store)) == [1, 1, 2]


def test_a_surprise_joins_the_lesson_it_resembles(store, now):
    add(store, error("e1", "s1", 0), error("e2", "s2", 0))
    learn(store, at(0, 23))
    add(store, error("e3", "s3", 1, branch="feature-y"), error("e4", "s3", 1, hour=12, branch="feature-y"), day=1)
    out = learn(store, at(1, 23))
    [lesson] = lessons(store)
    assert out["strengthened"] == [lesson["id"]]
    # +1 seen for each surprise, +0.5 strength for the one new session (a retry is one encounter)
    assert (lesson["strength"], lesson["seen"], lesson["sessions"]) == (1.5, 4, 3)
    event = store.conn.execute("SELECT detail FROM events WHERE kind = 'strengthened'").fetchone()
    assert json.loads(event[0])["after"] == 1.5


def test_strength_is_capped(store):
    add(store, *[error(f"e{i}", f"s{i}", 0) for i in range(20)])
    learn(store, at(0, 23))
    assert lessons(store)[0]["strength"] == Config(home="/x").lesson_max_strength == 5.0


def test_unlike_failures_other_kinds_and_other_projects_stay_apart(store):
    add(store,
        error("a1", "s1", 0), error("a2", "s2", 0),  # git push, /home/me/app
        error("b1", "s1", 0, command="mix test", first="** (RuntimeError) no :secret_key_base configuration found"),
        error("b2", "s2", 0, command="mix test", first="** (RuntimeError) no :secret_key_base configuration found"),
        error("c1", "s3", 0, cwd="/home/me/other"), error("c2", "s4", 0, cwd="/home/me/other"),
        correction("k1", "s1", 0, said="no, git push needs the upstream branch"))
    learn(store, at(0, 23))
    got = sorted((l["kind"], l["family"], l["seen"]) for l in lessons(store))
    assert got == [("correction", APP, 1), ("error", APP, 2), ("error", APP, 2), ("error", "/home/me/other", 2)]


def test_worktrees_of_one_project_are_one_family(store):
    add(store, error("e1", "s1", 0, cwd=f"{WT}/spotter-gqc", branch="spotter-gqc"),
        error("e2", "s2", 0, cwd=f"{WT}/spotter-fum", branch="spotter-fum"))
    learn(store, at(0, 23))
    [lesson] = lessons(store)
    assert lesson["state"] == "active" and lesson["family"] == f"{WT}/*"


def test_calls_cancelled_by_a_parallel_failure_are_not_surprises(store):
    add(store, error("e1", "s1", 0, failure="cancelled", first="cancelled: a parallel tool call failed"),
        error("e2", "s2", 0, failure="cancelled", first="cancelled: a parallel tool call failed"))
    assert learn(store, at(0, 23))["surprises"] == 0
    assert lessons(store) == []


def test_a_vetoed_lesson_absorbs_its_recurrences(store):
    add(store, error("e1", "s1", 0), error("e2", "s2", 0))
    learn(store, at(0, 23))
    [lesson] = lessons(store)
    assert veto(store, lesson["id"], at(1))
    add(store, error("e3", "s3", 2), day=2)
    learn(store, at(2, 23))
    [again] = lessons(store)  # no second lesson for the same failure
    assert again["id"] == lesson["id"] and again["vetoed"] and again["seen"] == 3


def test_surprises_after_now_wait(store):
    add(store, error("e1", "s1", 0), error("e2", "s2", 5))
    assert learn(store, at(1))["surprises"] == 1


# --- verify and predict -------------------------------------------------------------------------


UPSTREAM_FIX = {"kind": "changed", "tool": "Bash", "command": "git push --set-upstream origin <branch>",
                "norm": "git push --set-upstream origin {branch}", "delta": ["--set-upstream"], "calls_after": 0,
                "after": [], "line": 9}


def _git_push_lesson(store, resolution=UPSTREAM_FIX) -> int:
    eps = [error("e1", "s1", 0), error("e2", "s2", 1)]
    for ep in eps:
        ep.fields["resolution"] = resolution
    add(store, *eps, day=1)
    learn(store, at(1, 23))
    made = predict(store, at(1, 23))["made"]
    assert len(made) == 1
    return lessons(store)[0]["id"]


def _prediction(store):
    return store.conn.execute("SELECT state, facet, similarity, episode_id FROM predictions").fetchone()


def test_predict_makes_one_prediction_per_strong_lesson(store):
    lid = _git_push_lesson(store)
    row = store.conn.execute("SELECT lesson_id, text, probes, state FROM predictions").fetchone()
    assert row[0] == lid and row[3] == "open"
    assert row[1] == ("A coming session in app that runs `git push` will see this failure again or its resolution, "
                      "`git push --set-upstream origin <branch>`.")
    probes = json.loads(row[2])
    assert {"text": "git push", "require": None, "role": "situation"} in probes
    assert {"text": "git push --set-upstream origin {branch}", "require": None, "role": "resolution",
            "words": ["--set-upstream"]} in probes
    assert [p["role"] for p in probes].count("failure") == 1
    assert predict(store, at(2))["made"] == []  # one open prediction at a time


def test_weak_and_vetoed_lessons_make_no_prediction(store):
    add(store, error("e1", "s1", 0), error("e2", "s2", 0), correction("c1", "s1", 0))
    learn(store, at(0, 23))
    by_kind = {l["kind"]: l["id"] for l in lessons(store)}
    store.conn.execute("UPDATE lessons SET strength = 0.9 WHERE id = ?", (by_kind["correction"],))
    veto(store, by_kind["error"], at(0, 23))
    assert predict(store, at(0, 23))["made"] == []


def test_the_resolution_used_confirms_without_the_failure(store):
    _git_push_lesson(store)
    add(store, session("later", 3, ["mix test", "git push"], lines=["git push -u origin main"]), day=3)
    out = verify(store, at(3, 23))
    assert len(out["confirmed"]) == 1
    pred = _prediction(store)
    assert pred[0] == "confirmed" and pred[1] == "git push -u origin {branch}"
    assert pred[3] == store.conn.execute("SELECT id FROM episodes WHERE key = 'later'").fetchone()[0]
    assert lessons(store)[0]["strength"] == pytest.approx(1.5)
    why = store.conn.execute("SELECT json_extract(detail, '$.why') FROM events WHERE kind = 'confirmed'").fetchone()
    assert why == ("its resolution was used",)


def test_the_failure_itself_confirms_too(store):
    _git_push_lesson(store)
    add(store, error("e9", "s9", 4), day=4)
    assert len(verify(store, at(4, 23))["confirmed"]) == 1


def test_the_situation_with_neither_fails_the_world_changed(store):
    lid = _git_push_lesson(store)
    add(store, session("pushed", 3, ["git push"], lines=["git push"]), day=3)
    assert verify(store, at(3, 9, ) + timedelta(minutes=30))["failed"] == []  # the session may still be running
    out = verify(store, at(3, 23))
    assert len(out["failed"]) == 1
    assert _prediction(store)[:2] == ("failed", "git push")
    assert lessons(store)[0]["strength"] == pytest.approx(0.5)
    event = store.conn.execute("SELECT lesson_id, detail FROM events WHERE kind = 'failed'").fetchone()
    assert event[0] == lid and json.loads(event[1])["after"] == 0.5
    assert json.loads(event[1])["why"] == "the situation recurred without the failure or its resolution"


def test_a_situation_that_never_recurs_leaves_the_prediction_open(store):
    _git_push_lesson(store)
    add(store, session("reading", 3, ["git log"], lines=["git log --oneline"]), day=3)
    assert verify(store, at(60)) == {"open": 1, "episodes": 1, "sessions": 0, "confirmed": [], "failed": []}
    assert _prediction(store)[0] == "open"


def test_the_first_session_that_decides_decides(store):
    _git_push_lesson(store)
    add(store, session("first", 3, ["git push"], lines=["git push"]),
        session("second", 4, ["git push"], lines=["git push --set-upstream origin main"]), day=4)
    verify(store, at(4, 23))
    assert _prediction(store)[0] == "failed"


def test_what_does_not_confirm(store):
    _git_push_lesson(store)
    add(store,
        session("before", 1, ["git push"], hour=20),                    # before the prediction was made
        session("elsewhere", 3, ["git push"], cwd="/home/me/other"),    # another project
        session("unlike", 3, ["mix deps.get", "git status", "git pull"]),  # shares words, not the situation
        session("future", 30, ["git push"]), day=3)                    # after now
    out = verify(store, at(3, 23))
    assert out["confirmed"] == [] and out["failed"] == []


def test_a_failed_prediction_can_archive_a_weak_lesson(store):
    _git_push_lesson(store)
    store.conn.execute("UPDATE lessons SET strength = 0.6")
    add(store, session("pushed", 3, ["git push"]), day=3)
    verify(store, at(3, 23))
    assert lessons(store)[0]["state"] == "archived"


def test_a_correction_is_confirmed_by_the_program_it_asked_for(store):
    add(store, correction("c1", "s1", 0), session("s1", 0, ["pip install", "uv sync"]))
    sleep(store, at(0, 23))
    probes = json.loads(store.conn.execute("SELECT probes FROM predictions").fetchone()[0])
    assert {"text": "uv", "require": None, "role": "resolution"} in probes
    add(store, session("s2", 2, ["uv sync"]), day=2)
    assert len(verify(store, at(2, 23))["confirmed"]) == 1


# --- the whole sleep -----------------------------------------------------------------------------


def test_a_second_sleep_with_nothing_new_changes_nothing(store):
    add(store, error("e1", "s1", 0), error("e2", "s2", 0), correction("c1", "s3", 0))
    first = sleep(store, at(0, 23))
    assert first.changed and first.learn["learned"] and first.predict["made"]
    before = store.conn.total_changes
    second = sleep(store, at(0, 23, ) + timedelta(minutes=30))
    assert not second.changed and store.conn.total_changes == before
    assert all(l["prediction"] for l in lessons(store) if l["strength"] >= 1)


def test_two_sleeps_never_run_at_once(store):
    with sleep_lock(store.config):
        with pytest.raises(SleepBusy):
            sleep(store, at(0))
        env = dict(os.environ, OPENMEMORY_HOME=str(store.config.home))
        out = subprocess.run([sys.executable, "-m", "openmemory_local.cli.main", "sleep", "--now", "2026-03-02"],
                             capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 5 and "another sleep" in out.stderr
    sleep(store, at(0))  # free again


def _state(db: Path) -> str:
    """Everything sleep writes, as one comparable text."""
    conn = sqlite3.connect(db)
    try:
        parts = []
        for table, order in (("lessons", "id"), ("lesson_members", "episode_id"), ("predictions", "id"),
                             ("events", "id"), ("meta", "key")):
            parts.append(json.dumps(conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall(), default=str))
        parts.append(json.dumps(conn.execute("SELECT id, strength, archived FROM episodes ORDER BY id").fetchall()))
        return "\n".join(parts)
    finally:
        conn.close()


def _wait_until_sleeping(lock: Path, proc: subprocess.Popen) -> None:
    """Until the sleep holds its lock (it is running), or the process ended."""
    import fcntl

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if lock.exists():
            fd = os.open(lock, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
            except BlockingIOError:
                return
            finally:
                os.close(fd)
        time.sleep(0.005)


def test_a_sleep_killed_midway_leaves_the_store_as_before_or_as_after(tmp_path):
    sys.path.insert(0, str(REPO))
    from simulations.workload import Workload

    home = tmp_path / "home"
    with Store.open(Config(home=home)) as store:
        episodes = Workload(seed=3).episodes(4000, at(0), 3)
        add_episodes(store, episodes, now=at(3))
    before = _state(home / "openmemory.db")
    reference = tmp_path / "reference"
    shutil.copytree(home, reference)
    env = dict(os.environ, OPENMEMORY_NOW=iso(at(3, 23)))
    cli = [sys.executable, "-m", "openmemory_local.cli.main", "sleep", "--no-report", "--json"]
    started = time.perf_counter()
    done = subprocess.run([*cli, "--home", str(reference)], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    print(f"a whole sleep in a subprocess: {time.perf_counter() - started:.2f} s")
    after = _state(reference / "openmemory.db")
    assert after != before
    seen = set()
    for delay in (0.05, 0.3, 0.6):
        victim = tmp_path / f"kill-{delay}"
        shutil.copytree(home, victim)
        proc = subprocess.Popen([*cli, "--home", str(victim)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=env)
        _wait_until_sleeping(victim / "sleep.lock", proc)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        state = _state(victim / "openmemory.db")
        assert state in (before, after), f"killed after {delay} s: the store is neither as before nor as after"
        if state == before and "before" not in seen:
            with Store.open(Config(home=victim)) as store:  # and the next sleep does the whole job
                sleep(store, at(3, 23))
            assert _state(victim / "openmemory.db") == after
        seen.add("before" if state == before else "after")
    assert "before" in seen  # at least one kill landed mid-sleep


def test_what_sleep_keeps_between_passes_and_sleeps_changes_nothing(tmp_path):
    """learn's signatures reused by verify (``SleepMemo``) and verify's memos kept across the sleeps
    of a process give the same tables as each pass on its own with every memo emptied: day by
    day over a synthetic week (lessons form, predictions are made, confirmed and failed)."""
    sys.path.insert(0, str(REPO))
    from simulations.workload import Workload
    from openmemory_local.sleep import passes as sleep_module
    episodes = Workload(seed=5).episodes(1200, at(0), 7)
    homes = [tmp_path / "memo", tmp_path / "plain"]
    for home in homes:
        with Store.open(Config(home=home)) as store:
            add_episodes(store, episodes, now=at(7))
    for day in range(1, 8):
        moment = at(day, 0)
        with Store.open(Config(home=homes[0])) as store:
            sleep(store, moment)
        with Store.open(Config(home=homes[1])) as store, store.write():
            sleep_module._EPISODE_FACETS.clear()
            sleep_module._PAIR_SIMS.clear()
            decay(store, moment)
            learn(store, moment)
            verify(store, moment)
            predict(store, moment)
            store.set_meta("last_sleep", iso(moment))
    tables = ["SELECT * FROM lessons ORDER BY id", "SELECT * FROM lesson_members ORDER BY episode_id",
              "SELECT * FROM predictions ORDER BY id", "SELECT id, kind, lesson_id, prediction_id, detail FROM events "
              "ORDER BY id", "SELECT id, strength, archived FROM episodes ORDER BY id"]
    dumps = []
    for home in homes:
        conn = sqlite3.connect(home / "openmemory.db")
        dumps.append([conn.execute(sql).fetchall() for sql in tables])
        conn.close()
    states = {row[6] for row in dumps[0][2]}
    assert {"confirmed", "failed"} <= states, states  # the week decided predictions both ways
    for sql, memo, plain in zip(tables, *dumps):
        assert memo == plain, sql


def test_the_collector_is_paused_for_the_passes_and_left_as_it_was(store, monkeypatch):
    import gc

    import openmemory_local.sleep.passes as sleep_module

    add(store, error("e1", "s1", 0), error("e2", "s2", 1), day=1)
    seen = []
    real_learn = sleep_module.learn

    def learn(*args, **kwargs):
        seen.append(gc.isenabled())
        return real_learn(*args, **kwargs)

    monkeypatch.setattr(sleep_module, "learn", learn)
    was = gc.isenabled()
    try:
        gc.enable()
        result = sleep(store, at(2))
        assert seen == [False] and gc.isenabled()
        assert result.learn["surprises"] == 2 and lessons(store)
        gc.disable()  # a host that runs without the collector keeps it off
        sleep(store, at(3))
        assert seen == [False, False] and not gc.isenabled()
        gc.enable()

        def broken(*args, **kwargs):
            raise RuntimeError("a pass that fails")

        monkeypatch.setattr(sleep_module, "verify", broken)
        with pytest.raises(RuntimeError, match="a pass that fails"):
            sleep(store, at(4))
        assert gc.isenabled()  # turned back on although the sleep failed
    finally:
        (gc.enable if was else gc.disable)()
