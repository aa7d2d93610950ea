"""The whole loop on the real transcripts: day by day, sleep, predictions met and unmet,
``openmemory run`` twice, a veto by deletion, and the Python API the MCP server uses."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openmemory_local.core.clock import parse_time
from openmemory_local.core.config import Config
from openmemory_local.core.config import project_dir
from openmemory_local.ingest.transcripts import ingest
from openmemory_local.sleep.lessons import lesson_rows, lessons_for_project
from openmemory_protocol.observation import check_observation, is_observation
from openmemory_local.render.report import latest_report, make_report
from openmemory_local.sleep.passes import sleep
from openmemory_local.storage.store import Store

DATA = Path(__file__).parent / "data"
CLI = [sys.executable, "-m", "openmemory_local.cli.main"]
DAYS = {
    "2026-02-10": ["short.jsonl", "subagent.jsonl", "tool_heavy.jsonl", "6c2214d7-b87e-4432-8e41-22ba294ea584"],
    "2026-02-11": ["258c7280-ae70-4798-800f-63464d01a85d", "8463c716-a2ea-4c14-9efa-87158ebd9f20"],
    "2026-02-12": ["ae4a77f8-aedd-4bc1-888f-c94edc91af04", "fa812bfe-b295-4cca-9c2f-fdf01028cb46"],
}
WORKTREES = "/home/USER/projects/spotter-worktrees"


def end_of(day: str):
    return parse_time(f"{day}T23:59:59Z")


def _cwd(path: Path) -> str:
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if record.get("cwd"):
                return record["cwd"]
    raise AssertionError(f"no cwd in {path}")


def place(source: Path, projects: Path) -> list[Path]:
    """Copy a session (its file and its folder of subagents) where Claude Code keeps it."""
    placed = []
    for item in (source.with_suffix(".jsonl") if source.suffix != ".jsonl" else source, source.with_suffix("")):
        if not item.exists():
            continue
        sample = item if item.is_file() else next(item.rglob("*.jsonl"))
        folder = projects / project_dir(_cwd(sample))
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / item.name
        if item.is_file():
            shutil.copy2(item, target)
        else:
            shutil.copytree(item, target)
        placed.append(target)
    return placed


def digest_tree(*roots: Path) -> dict[str, str]:
    out = {}
    for root in roots:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def lived(spotter, tmp_path_factory):
    """The real transcripts ingested day by day, a sleep at the end of each day."""
    root = tmp_path_factory.mktemp("lived")
    claude = root / "claude"
    config = Config(home=root / "home", claude_dir=claude, sources=(claude / "projects",))
    results = {}
    with Store.open(config) as store:
        for day, names in DAYS.items():
            paths = [p for name in names for p in place(spotter / name, claude / "projects")]
            summary = ingest(store, paths, now=end_of(day))
            assert not summary.problems
            results[day] = sleep(store, end_of(day))
    return root, config, results


@pytest.fixture
def copy(lived, tmp_path):
    root, config, results = lived
    shutil.copytree(root, tmp_path / "lived")
    new = Config(home=tmp_path / "lived" / "home", claude_dir=tmp_path / "lived" / "claude",
                 sources=(tmp_path / "lived" / "claude" / "projects",))
    return new, results


def _lesson(lessons, *needles):
    found = [l for l in lessons if all(n in l["text"] for n in needles)]
    assert len(found) == 1, (needles, [l["text"] for l in lessons])
    return found[0]


def test_lessons_from_the_real_transcripts(lived):
    root, config, results = lived
    with Store.open(config) as store:
        lessons = lesson_rows(store)
        for lesson in lessons:
            print(f"lesson {lesson['id']} (strength {lesson['strength']:.2f}, seen {lesson['seen']}, "
                  f"{lesson['sessions']} sessions): {lesson['text']}\n    predicts: {lesson['prediction']}")
        push = _lesson(lessons, "`git push`", "has no upstream branch")
        assets = _lesson(lessons, "priv/static/assets", "ignored by one of your .gitignore files")
        fmt = _lesson(lessons, "Pre-commit validation failed: [FORMAT] Code is not formatted")
        assert push["sessions"] == 3 and push["record"]["confirmed"] == 1
        # what made it go away, each time: the lesson names the resolution
        assert "each time, `git push --set-upstream origin <branch>` succeeded right after" in push["text"]
        # the pre-commit lesson quotes a finding, not the checker's progress
        assert "Finding suitable PLTs" not in fmt["text"] and "the same call succeeded after `mix format`" in fmt["text"]
        assert assets["sessions"] == 2 and fmt["sessions"] == 2
        # the same failure on three branches is one lesson
        assert push["branches"] == ["spotter-gqc", "spotter-fum", "spotter-a0y"]
        # no lesson text fails the observation check; nor do the predictions
        for lesson in lesson_rows(store, states=("active", "archived", "forming"), include_vetoed=True):
            check_observation(lesson["text"] or lesson["rule_text"])
        for (text,) in store.conn.execute("SELECT text FROM predictions"):
            check_observation(text)
        # every lesson of strength >= 1 has an open prediction
        strong = [l for l in lessons if l["strength"] >= 1]
        assert strong and all(l["prediction"] for l in strong)
        # a failure seen in one session only is not a lesson
        assert not any("command not found: tree" in l["text"] for l in lessons)
    # the story day by day: push learned on the 11th (two sessions), met again on the 12th
    # on the 10th only the person's bug report ("scrolling ... still does not work"): not a
    # correction (issue 32), so nothing is learned that day
    assert results["2026-02-10"].learn["learned"] == []
    assert not any("still does not work" in l["text"] for l in lessons)
    assert push["id"] in results["2026-02-11"].learn["learned"]
    assert push["id"] in results["2026-02-12"].learn["strengthened"]
    assert results["2026-02-12"].verify["confirmed"]


def _push(store):
    return _lesson(lesson_rows(store), "`git push`", "has no upstream branch")


def _live(store, config, transcript: str, day: str):
    """A session of ours, placed where Claude Code keeps it, ingested at the end of ``day``."""
    [path] = place(DATA / transcript, config.claude_dir / "projects")
    ingest(store, [path], now=end_of(day))


def test_a_session_that_uses_the_resolution_confirms_the_prediction(copy):
    config, _ = copy
    with Store.open(config) as store:
        before = _push(store)
        _live(store, config, "pushes-new-branch.jsonl", "2026-02-13")
        result = sleep(store, end_of("2026-02-13"))
        after = _push(store)
        # pushed with its upstream set (`-u`): the lesson's resolution was used
        assert before["prediction_id"] in result.verify["confirmed"]
        row = store.conn.execute("SELECT p.state, p.facet, e.session_id FROM predictions p JOIN episodes e "
                                 "ON e.id = p.episode_id WHERE p.id = ?", (before["prediction_id"],)).fetchone()
        assert row == ("confirmed", "git push -u origin {branch}", "c0ffee13-5a1d-4e2b-9d07-2f6a1b3c4d5e")
        assert after["strength"] > before["strength"] and after["record"]["confirmed"] == 2
        assert after["prediction"] and after["prediction_id"] != before["prediction_id"]  # a new one, open
        report = make_report(store, end_of("2026-02-13"))
        assert report["counts"]["confirmed"] >= 1 and "met by episode" in report["markdown"]


def test_a_prediction_stays_open_while_its_situation_does_not_recur(copy):
    config, _ = copy
    with Store.open(config) as store:
        before = _push(store)
        _live(store, config, "reads-only.jsonl", "2026-02-13")
        assert before["prediction_id"] not in sleep(store, end_of("2026-02-13")).verify["confirmed"]
        result = sleep(store, end_of("2026-03-27"))  # six weeks later, no session pushed
        assert before["prediction_id"] not in result.verify["failed"]
        assert _push(store)["prediction_id"] == before["prediction_id"]  # still open


def test_prediction_accuracy_on_the_replayed_history_is_neither_0_nor_1(lived):
    root, config, results = lived
    with Store.open(config) as store:
        rows = store.conn.execute(
            "SELECT p.state, l.text, p.facet, json_extract(e.detail, '$.why') FROM predictions p "
            "JOIN lessons l ON l.id = p.lesson_id JOIN events e ON e.prediction_id = p.id AND e.kind = p.state "
            "WHERE p.state IN ('confirmed', 'failed') ORDER BY p.id").fetchall()
    for state, text, facet, why in rows:
        print(f"{state}: {why} ({facet}): {text}")
    confirmed = sum(1 for r in rows if r[0] == "confirmed")
    assert 0 < confirmed < len(rows)
    # the push failure recurred on the 12th; the secret_key_base and lazy_html failures did not
    # (fixed in the project), though `mix test` ran again: the world changed
    assert any(r[0] == "confirmed" and "has no upstream branch" in r[1] for r in rows)
    assert any(r[0] == "failed" and "lazy_html" in r[1] and r[2] == "mix test" for r in rows)


def _run(config: Config, now: str, *extra) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENMEMORY_NOW", "XDG_DATA_HOME")}
    env.update(OPENMEMORY_HOME=str(config.home), CLAUDE_CONFIG_DIR=str(config.claude_dir), HOME=str(config.home.parent))
    out = subprocess.run([*CLI, "run", "--now", now, *extra], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def _claude_code_with_every_session(spotter, tmp_path) -> tuple[Config, Path]:
    claude = tmp_path / "claude"
    for names in DAYS.values():
        for name in names:
            place(spotter / name, claude / "projects")
    return Config(home=tmp_path / "home", claude_dir=claude), claude


def test_openmemory_run_twice_changes_nothing_on_disk(spotter, tmp_path):
    config, claude = _claude_code_with_every_session(spotter, tmp_path)
    first = _run(config, "2026-02-12T21:00:00Z")
    assert "# Open Memory: morning report" in first.stdout and "## Learned" in first.stdout
    memory = list((claude / "projects").glob("*/memory/MEMORY.md"))
    assert len(memory) == 5  # the five worktrees of the family (the main folder's one message is a bug report)
    state = digest_tree(config.home, claude)
    # later the same day, nothing new (decay counts whole UTC days: tomorrow would be new)
    second = _run(config, "2026-02-12T23:45:00Z")
    assert "Nothing new since the last report" in second.stdout
    assert digest_tree(config.home, claude) == state


def test_deleting_a_rendered_lesson_file_is_a_veto(spotter, tmp_path):
    config, claude = _claude_code_with_every_session(spotter, tmp_path)
    _run(config, "2026-02-12T23:59:59Z")
    folder = claude / "projects" / project_dir(f"{WORKTREES}/spotter-a0y") / "memory"
    with Store.open(config) as store:
        victim = _push(store)
    (folder / victim["file_name"]).unlink()
    out = _run(config, "2026-02-13T08:00:00Z")
    assert "## Vetoed" in out.stdout and f"lesson {victim['id']} vetoed (its file was deleted)" in out.stdout
    assert not list((claude / "projects").glob(f"*/memory/{victim['file_name']}"))  # gone from every worktree
    assert all(victim["file_name"] not in p.read_text() for p in (claude / "projects").glob("*/memory/MEMORY.md"))
    again = _run(config, "2026-02-13T09:00:00Z", "--json")
    assert not list((claude / "projects").glob(f"*/memory/{victim['file_name']}"))
    assert json.loads(again.stdout)["report"]["report"] is None
    env = dict(os.environ, OPENMEMORY_HOME=str(config.home))
    report = json.loads(subprocess.run([*CLI, "report", "--json"], capture_output=True, text=True, env=env,
                                       check=True).stdout)
    assert report["counts"]["vetoed"] == 1
    vetoed = json.loads(subprocess.run([*CLI, "lessons", "--vetoed", "--json"], capture_output=True, text=True,
                                       env=env, check=True).stdout)
    assert [l["id"] for l in vetoed] == [victim["id"]]


def test_the_python_api_of_the_mcp_server(lived):
    root, config, _ = lived
    with Store.open(config) as store:
        # a worktree with no session yet gets its family's lessons
        lessons = lessons_for_project(store, f"{WORKTREES}/spotter-brand-new", end_of("2026-02-13"))
        assert lessons and lessons == sorted(lessons, key=lambda l: -l["strength"])
        for lesson in lessons:
            assert {"kind", "text", "strength", "seen", "last_seen", "prediction", "provenance"} <= set(lesson)
            assert is_observation(lesson["text"]) and lesson["provenance"].startswith("Open Memory lesson")
        assert lessons_for_project(store, "/home/someone/else") == []
        make_report(store, end_of("2026-02-12"))
    path, markdown = latest_report(config.home)
    assert path.parent == config.home / "reports" and markdown.startswith("# Open Memory: morning report")
    with Store.open(Config(home=root / "never-slept")) as fresh:
        assert lessons_for_project(fresh, WORKTREES) is None
    assert latest_report(root / "never-slept") is None
