"""A history replayed as it happened; activity windows; times where they happened; the clock's edges.

On the real transcripts: a store imported from year-old transcripts has lessons after the first
``openmemory run`` (on the real clock), a session still running when the sleep happens confirms
or fails what it meets after it, and ``--now`` is refused before the last sleep and after the
clock (unless asked for)."""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from openmemory_local.core.clock import iso, parse_time
from openmemory_local.cli.main import main
from openmemory_local.core.config import Config
from openmemory_local.ingest.transcripts import ingest
from openmemory_local.sleep.replay import pending_days, replay
from openmemory_local.sleep.passes import SleepClockError, sleep, verify
from openmemory_local.storage.store import Store

from .test_sleep import _git_push_lesson, add, at, error, session
from .test_sleep_real import DAYS, place

_STAMP = re.compile(r'"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z)"')


def _shifted(source: Path, target: Path, days: int) -> None:
    """Copy a transcript (or a folder of them) with every timestamp moved by ``days``."""
    def shift(match):
        moved = parse_time(match.group(1)) + timedelta(days=days)
        return f'"{iso(moved)}"'

    items = [source] if source.is_file() else sorted(source.rglob("*.jsonl"))
    for item in items:
        out = target / item.relative_to(source.parent)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(_STAMP.sub(shift, item.read_text(encoding="utf-8")), encoding="utf-8")


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A new user's machine: $HOME, Claude Code's folder, no Open Memory data yet."""
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for name in ("OPENMEMORY_NOW", "XDG_DATA_HOME", "OPENMEMORY_LESSON_MODEL_URL", "OPENMEMORY_ALLOW_FUTURE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    monkeypatch.setenv("OPENMEMORY_HOME", str(tmp_path / "om"))
    return tmp_path


def test_a_store_imported_from_year_old_transcripts_has_lessons_after_the_first_run(spotter, user, capsys,
                                                                                    monkeypatch):
    """The spotter history, every timestamp moved back so that it ended over a year before today,
    brought in by the first `openmemory run` on the real clock."""
    age = (datetime.now(timezone.utc) - datetime(2026, 2, 12, tzinfo=timezone.utc)).days + 366
    staging = user / "staging"
    for names in DAYS.values():
        for name in names:
            for item in (spotter / name, (spotter / name).with_suffix(".jsonl")):
                if item.exists():
                    _shifted(item, staging, -age)
            place(staging / name, user / "claude" / "projects")
    assert main(["run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    replayed = report["replay"]
    assert replayed["days"] == 3 and replayed["learned"] >= 5 and replayed["confirmed"] >= 1
    assert report["sleep"]["decay"]["episodes_archived"] == 0  # nothing archived for being old
    with Store.open(Config(home=user / "om")) as store:
        lessons = store.conn.execute("SELECT strength, text FROM lessons WHERE state = 'active'").fetchall()
        assert store.conn.execute("SELECT COUNT(*) FROM episodes WHERE archived = 1").fetchone()[0] == 0
    push = [s for s, text in lessons if "`git push` failed in 3 sessions" in text]
    assert len(push) == 1 and push[0] > 1.9  # learned on day 2, strengthened on day 3, its prediction confirmed
    # as strong as the same history, unshifted, run the morning after it ended: the year between changed nothing
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(user / "claude-control"))
    for names in DAYS.values():
        for name in names:
            place(spotter / name, user / "claude-control" / "projects")
    assert main(["run", "--json", "--home", str(user / "control"), "--now", "2026-02-13T09:00:00Z"]) == 0
    capsys.readouterr()
    with Store.open(Config(home=user / "control")) as store:
        control = store.conn.execute("SELECT strength, text FROM lessons WHERE state = 'active'").fetchall()
    assert len(lessons) >= 5
    assert sorted(round(s, 6) for s, _ in lessons) == sorted(round(s, 6) for s, _ in control)
    memory = (user / "claude" / "projects").glob("*spotter-a0y/memory/MEMORY.md")
    assert "`git push` failed in 3 sessions" in next(memory).read_text()
    # the next run has nothing to replay
    assert main(["run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["replay"]["days"] == 0


def _until(source: Path, target: Path, cutoff: str) -> Path:
    """The lines of a transcript written up to ``cutoff``: the file as it was at that moment."""
    keep = []
    for line in source.read_text(encoding="utf-8").splitlines(keepends=True):
        stamp = _STAMP.search(line)
        if stamp and '"timestamp"' in line and iso(parse_time(stamp.group(1))) > cutoff:
            break
        keep.append(line)
    target.write_text("".join(keep), encoding="utf-8")
    return target


def test_a_session_that_spans_the_sleep_decides_what_it_meets_after_it(spotter, tmp_path):
    """The issue's example: spotter-a0y was running when the sleep happened (15:40 on the 12th)
    and ran `mix test` after it. Its session episode starts before the predictions were made; its
    commands are dated when they ran, so the `mix test` predictions are decided by it."""
    config = Config(home=tmp_path / "home")
    projects = tmp_path / "projects"
    name = "fa812bfe-b295-4cca-9c2f-fdf01028cb46"
    with Store.open(config) as store:
        for day in ("2026-02-10", "2026-02-11"):
            paths = [p for n in DAYS[day] for p in place(spotter / n, projects)]
            ingest(store, paths, now=parse_time(f"{day}T23:59:59Z"))
        [live] = [p for p in place(spotter / name, projects) if p.is_file()]
        _until(spotter / f"{name}.jsonl", live, "2026-02-12T15:40:00.000Z")
        ingest(store, [live], now=parse_time("2026-02-12T15:40:00Z"))
        sleep(store, parse_time("2026-02-12T15:40:00Z"))
        made = {text: pid for pid, text in store.conn.execute(
            "SELECT p.id, l.text FROM predictions p JOIN lessons l ON l.id = p.lesson_id WHERE p.state = 'open'")}
        mix = [pid for text, pid in made.items() if "`mix test` failed" in text and (
            "lazy_html" in text or "secret_key_base" in text)]
        assert len(mix) == 2
        shutil.copy(spotter / f"{name}.jsonl", live)  # the session went on: the rest of its transcript
        ingest(store, [live], now=parse_time("2026-02-12T23:59:59Z"))
        result = sleep(store, parse_time("2026-02-12T23:59:59Z"))
        rows = store.conn.execute(
            f"SELECT p.state, p.facet, e.kind, e.session_id, e.created FROM predictions p JOIN episodes e "
            f"ON e.id = p.episode_id WHERE p.id IN ({','.join('?' * len(mix))})", mix).fetchall()
        assert sorted(r[0] for r in rows) == ["failed", "failed"]  # `mix test` ran, the failures did not recur
        assert all(r[1] == "mix test" and r[2] == "session" and r[3] == name for r in rows)
        assert all(r[4] < "2026-02-12T15:40" for r in rows)  # the session began before the prediction
        events = store.conn.execute(
            "SELECT json_extract(detail, '$.why') FROM events WHERE kind = 'failed'").fetchall()
        assert ("the situation recurred without the failure or its resolution",) in events
        assert set(mix) <= set(result.verify["failed"])


def test_a_session_still_running_decides_before_a_later_one(store):
    """The first session that meets the situation decides, even when a later one has already
    shown the resolution: until the first is quiet, nothing is decided."""
    _git_push_lesson(store)  # predicted at 23:00 on day 1
    running = session("running", 3, ["git push"], hour=22)
    running.fields["ended"] = iso(at(3, 22.9))
    later = session("later", 3, ["git push"], lines=["git push --set-upstream origin main"], hour=22.5)
    later.fields["ended"] = iso(at(3, 22.6))
    add(store, running, later, day=3)
    assert verify(store, at(3, 23)) == {"open": 1, "episodes": 2, "sessions": 2, "confirmed": [], "failed": []}
    out = verify(store, at(4, 1))
    assert len(out["failed"]) == 1  # quiet now: it met the situation without the failure or the resolution


def test_facets_are_dated_when_they_happened(store):
    """A session that began before the prediction confirms with what it ran after it, and not with
    what it ran before it."""
    _git_push_lesson(store)  # predicted at 23:00 on day 1
    before = session("before", 1, ["git push"], lines=["git push --set-upstream origin main"], hour=21)
    before.fields["times"] = {"c git push": [iso(at(1, 21)), iso(at(1, 21.5))],
                              "l git push --set-upstream origin main": [iso(at(1, 21.5))] * 2}
    before.fields["ended"] = iso(at(2, 2))
    add(store, before, day=2)
    assert verify(store, at(2, 9)) == {"open": 1, "episodes": 1, "sessions": 0, "confirmed": [], "failed": []}
    spans = session("spans", 1, ["git push"], lines=["git push --set-upstream origin main"], hour=22)
    spans.fields["times"] = {"c git push": [iso(at(1, 22)), iso(at(2, 1))],
                             "l git push --set-upstream origin main": [iso(at(2, 1))] * 2}
    spans.fields["ended"] = iso(at(2, 1))
    add(store, spans, day=2)
    assert len(verify(store, at(2, 9))["confirmed"]) == 1
    row = store.conn.execute("SELECT p.facet, e.key FROM predictions p JOIN episodes e ON e.id = p.episode_id "
                             "WHERE p.state = 'confirmed'").fetchone()
    assert row == ("git push --set-upstream origin {branch}", "spans")


def test_replay_sleeps_at_the_end_of_each_past_day_with_activity(store):
    add(store, error("e1", "s1", 0), error("e2", "s2", 2), session("s3", 5, ["ls"]), day=5)
    assert [iso(d) for d in pending_days(store, at(5, 12))] == [
        "2026-03-02T23:59:59.000Z", "2026-03-04T23:59:59.000Z"]  # day 5 is today's: the caller's own sleep
    out = replay(store, at(5, 12))
    assert out["days"] == 2 and out["learned"] == 1 and out["made"] == 1
    assert store.get_meta("last_sleep") == "2026-03-04T23:59:59.000Z"
    assert pending_days(store, at(5, 12)) == []
    assert [iso(d) for d in pending_days(store, at(6, 1))] == ["2026-03-07T23:59:59.000Z"]  # day 5: not slept


def test_a_sleep_before_the_last_one_is_refused(store):
    add(store, error("e1", "s1", 0))
    sleep(store, at(1))
    with pytest.raises(SleepClockError, match="last slept at 2026-03-03T10:00:00.000Z"):
        sleep(store, at(0, 23))
    sleep(store, at(1))  # the same moment again is fine (nothing new)


def test_now_on_the_command_line_forward_only_and_not_past_the_clock(user, capsys):
    with Store.open(Config(home=user / "om")) as store:  # a store that holds something (an empty one records no sleep)
        add(store, session("s1", 0, ["git push"]))
    future = iso(datetime.now(timezone.utc) + timedelta(days=3))
    assert main(["sleep", "--now", future]) == 2
    assert "is later than the clock" in capsys.readouterr().err
    assert main(["sleep", "--now", future, "--future", "--json"]) == 0
    capsys.readouterr()
    code = main(["run", "--now", "2026-01-01T00:00:00Z"])
    err = capsys.readouterr().err
    assert code == 2 and f"this store last slept at {iso(parse_time(future))}" in err
    assert main(["sleep", "--now", "2026-01-01T00:00:00Z"]) == 2
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OPENMEMORY_ALLOW_FUTURE", "1")
        later = iso(datetime.now(timezone.utc) + timedelta(days=4))
        assert main(["sleep", "--now", later, "--json"]) == 0
