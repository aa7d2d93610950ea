"""The first ten minutes of a new user, as the README's quick start has them: an empty home,
``openmemory run`` before any transcript, then the real spotter history arriving, opting a
project in before its first ingest, and what the memory folder then shows."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from openmemory_local.cli.main import main
from openmemory_local.core.config import Config
from openmemory_local.storage.store import Store

PROJECT = "-home-USER-projects-spotter"  # where Claude Code keeps a project's transcripts


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty $HOME and nothing else: every folder from its default (~/.claude, ~/.local/share)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("OPENMEMORY_HOME", "OPENMEMORY_NOW", "XDG_DATA_HOME", "CLAUDE_CONFIG_DIR", "OPENMEMORY_NODE_HOME",
                 "OPENMEMORY_LESSON_MODEL_URL", "OPENMEMORY_ALLOW_FUTURE"):
        monkeypatch.delenv(name, raising=False)
    return home


def _arrive(spotter: Path, home: Path) -> Path:
    """The spotter sessions appear where Claude Code writes them."""
    target = home / ".claude" / "projects" / PROJECT
    shutil.copytree(spotter, target)
    return target


def _run(capsys, *args) -> dict:
    assert main(["run", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def _records(home: Path) -> dict:
    """Confirmed and failed predictions, over every lesson of the store."""
    with Store.open(Config(home=home / ".local" / "share" / "openmemory")) as store:
        rows = store.conn.execute("SELECT state, COUNT(*) FROM predictions GROUP BY state").fetchall()
    return dict(rows)


def test_history_arriving_after_the_first_run_is_replayed_as_from_the_start(spotter, home, tmp_path, capsys,
                                                                               monkeypatch):
    first = _run(capsys)  # the quick start's first command: no transcripts yet
    assert first["ingest"]["files"] == [] and first["sleep"]["empty"] is True
    _arrive(spotter, home)
    later = _run(capsys)
    # the same history in a home that had it from its first run
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv("HOME", str(other))
    _arrive(spotter, other)
    start = _run(capsys)
    assert start["replay"]["days"] == 3 and start["replay"]["confirmed"] == 1 and start["replay"]["failed"] == 3
    keys = ("days", "learned", "strengthened", "confirmed", "failed", "made")
    assert {k: later["replay"][k] for k in keys} == {k: start["replay"][k] for k in keys}
    assert _records(home) == _records(other) and _records(home).get("confirmed") == 1


def test_a_project_opted_in_before_its_first_ingest_publishes_its_family(spotter, home, capsys):
    """`openmemory publish enable` names a folder the store knows nothing of yet (the README's
    example, a worktree of spotter); once its sessions are ingested, the opt-in covers the family
    its worktrees form, and the run queues that family's lessons (no node: they wait)."""
    folder = "/home/USER/projects/spotter-worktrees/spotter-gqc"
    family = "/home/USER/projects/spotter-worktrees/*"
    assert main(["publish", "enable", folder]) == 0
    said = capsys.readouterr().out
    assert f"{folder}: opted in" in said and "once there are, the opt-in covers the project family" in said
    _arrive(spotter, home)
    report = _run(capsys)
    assert family in report["publish"]["opted_in"]
    assert report["publish"]["queued"] and report["publish"]["waiting"] >= 1
    assert main(["publish", "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert family in dry["opted_in"]
    assert dry["records"] and all(r["family"] == family for r in dry["records"])
    assert any("`git push --set-upstream origin <branch>`" in r["text"] for r in dry["records"])
    assert main(["publish", "status", "--json"]) == 0
    listed = {f["family"]: f for f in json.loads(capsys.readouterr().out)["families"]}
    assert listed[family]["enabled"] and listed[family]["path"] == folder and folder not in listed
    # opting the same folder out covers the family too
    assert main(["publish", "disable", folder]) == 0
    assert "opted out" in capsys.readouterr().out
    assert main(["publish", "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["opted_in"] == []


ENTITY = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);")


def test_memory_md_shows_each_failure_and_its_fix_and_no_html_entity(spotter, home, capsys):
    _arrive(spotter, home)
    assert main(["run"]) == 0
    out = capsys.readouterr().out
    # the sessions ran in worktrees this machine has no Claude Code folder for: nothing is rendered, and it says so
    assert re.search(r"Nothing rendered: the [1-9]\d* project\(s\) with lessons have no Claude Code folder", out), out
    assert "no Claude Code folder " + str(home / ".claude" / "projects" / "-home-USER-projects-spotter-worktrees-spotter-gqc") in out
    # Claude Code has run in one worktree: its folder exists, and the next run renders there
    folder = home / ".claude" / "projects" / "-home-USER-projects-spotter-worktrees-spotter-gqc"
    folder.mkdir()
    assert main(["run"]) == 0
    out = capsys.readouterr().out
    assert "Nothing rendered" not in out and f"into {folder / 'memory'}" in out
    files = {p.name: p.read_text(encoding="utf-8") for p in (folder / "memory").iterdir()}
    index = files["MEMORY.md"]
    lines = [line for line in index.splitlines() if line.startswith("- [")]
    [push] = [line for line in lines if "`git push` failed" in line]
    assert "`git push --set-upstream origin <branch>` succeeded" in push
    assert "fatal: The current branch" in push  # the failure too, its quote shortened if need be
    fixes = 0
    for line in lines:  # each line shows the fix its lesson file quotes, whole
        name = re.search(r"\]\((openmemory-lesson-\d+\.md)\)", line).group(1)
        quoted = next(t[2:] for t in files[name].splitlines() if t.startswith("> "))
        fix = re.search(r"; (?:(?:each|that) time|in \d+ of \d+ sessions), .*$", quoted)
        if fix:
            fixes += 1
            assert fix.group(0) + "](" + name in line, (line, quoted)
    assert fixes >= 3
    assert len(index.encode()) <= 25_000 and len(index.splitlines()) <= 200
    for name, text in files.items():
        assert not ENTITY.search(text), (name, ENTITY.search(text))
