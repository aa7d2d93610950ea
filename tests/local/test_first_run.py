"""The first ten minutes of a new user, as the README's quick start has them: an empty home,
``openmemory run`` before any transcript, then the real spotter history arriving, opting a
project in before its first ingest, and what the memory folder then shows."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from openmemory_local.cli import main
from openmemory_local.config import Config
from openmemory_local.store import Store

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
