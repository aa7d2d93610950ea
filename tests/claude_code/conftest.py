"""Fixtures for the Claude Code integration tests (see cc_helpers for the fakes, named as such)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cc_helpers import CLAUDE_JSON, FAKE_CRONTAB, FAKE_SYSTEMCTL, SETTINGS_JSON, write_script


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty temporary HOME."""
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def claude_home(home: Path) -> Path:
    """A temporary HOME where Claude Code has been used: both settings files present."""
    (home / ".claude.json").write_text(CLAUDE_JSON, encoding="utf-8")
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_bytes(SETTINGS_JSON.encode("utf-8"))
    (home / ".claude" / "projects").mkdir()
    return home


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """The Open Memory data folder (outside HOME, so HOME snapshots compare the user's files)."""
    return tmp_path / "data"


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    """A folder holding the fake ``systemctl`` and ``crontab`` (see cc_helpers)."""
    path = tmp_path / "fakebin"
    path.mkdir()
    write_script(path / "systemctl", FAKE_SYSTEMCTL)
    write_script(path / "crontab", FAKE_CRONTAB)
    return path


@pytest.fixture
def env(home: Path, tmp_path: Path) -> dict[str, str]:
    """The environment for ``openmemory``: the temporary HOME, no system scheduler in PATH."""
    clean = {k: v for k, v in os.environ.items() if k not in ("CLAUDE_CONFIG_DIR", "XDG_CONFIG_HOME", "OPENMEMORY_HOME")}
    bare = tmp_path / "bin-empty"
    bare.mkdir()
    clean.update(
        HOME=str(home),
        # only an empty folder: no systemctl, no crontab (the real systemctl here cannot reach a
        # user manager, but on a machine where one runs a test must never enable a real timer)
        PATH=str(bare),
        FAKE_SYSTEMCTL_LOG=str(tmp_path / "systemctl.log"),
        FAKE_CRONTAB_FILE=str(tmp_path / "crontab.txt"),
    )
    return clean


