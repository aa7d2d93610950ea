"""Fixtures for the Codex CLI / Gemini CLI tests: the synthetic transcripts of ``data/`` (see
its README: written for these tests, shaped like the real files), copied where a test may
change them, with the project folder they name moved to a real folder of the test's own."""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from openmemory_local.core.config import Config
from openmemory_local.storage.store import Store

DATA = Path(__file__).parent / "data"
FIXTURE_CWD = "/home/dev/src/webapp"
CODEX_ROLLOUT = next((DATA / "codex").rglob("rollout-*.jsonl"))
GEMINI_JSONL = next((DATA / "gemini").rglob("session-*.jsonl"))
GEMINI_JSON = next((DATA / "gemini").rglob("session-*.json"))
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def utc(*parts) -> datetime:
    return datetime(*parts, tzinfo=timezone.utc)


@pytest.fixture
def now() -> datetime:
    return NOW


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(Config(home=tmp_path / "home")) as s:
        yield s


def codex_copy(root: Path, *, cwd: str = FIXTURE_CWD, day: str = "2026-11-20",
               session: str = "0199a1b2-7c3d-7e4f-9a0b-1c2d3e4f5a6b") -> Path:
    """The synthetic rollout under ``root/sessions/YYYY/MM/DD/``, its project folder, date and
    session id changed."""
    text = (CODEX_ROLLOUT.read_text().replace(FIXTURE_CWD, cwd).replace("2026-11-20", day)
            .replace("0199a1b2-7c3d-7e4f-9a0b-1c2d3e4f5a6b", session))
    text = re.sub(r'"call_(?!id")', f'"call_{session[-6:]}_', text)  # call ids unique per session, as Codex's are
    target = root / "sessions" / day.replace("-", "/") / f"rollout-{day}T10-00-00-{session}.jsonl"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def gemini_copy(root: Path, *, cwd: str = FIXTURE_CWD, day: str = "2026-11-21",
                session: str = "5f2c8e1a-3b4d-4c6e-8f0a-1b2c3d4e5f6a", project: str = "webapp") -> Path:
    """The synthetic JSONL session under ``root/tmp/<project>/chats/``, with ``.project_root``."""
    text = GEMINI_JSONL.read_text().replace("2026-11-21", day).replace("5f2c8e1a-3b4d-4c6e-8f0a-1b2c3d4e5f6a", session)
    chats = root / "tmp" / project / "chats"
    chats.mkdir(parents=True, exist_ok=True)
    (chats.parent / ".project_root").write_text(cwd)
    target = chats / f"session-{day}T09-00-{session[:8]}.jsonl"
    target.write_text(text)
    return target


@pytest.fixture
def copies(tmp_path: Path) -> Path:
    target = tmp_path / "agents"
    shutil.copytree(DATA, target)
    return target
