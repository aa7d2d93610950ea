"""Fixtures for the local engine's tests: a fresh data folder, a store, a fixed clock."""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from openmemory_local.core.config import Config
from openmemory_local.storage.store import Store

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=timezone.utc)


@pytest.fixture
def now() -> datetime:
    return NOW


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(home=tmp_path / "home")


@pytest.fixture
def store(config: Config):
    with Store.open(config) as s:
        yield s


@pytest.fixture
def spotter_copy(spotter: Path, tmp_path: Path) -> Path:
    """A writable copy of the real transcripts (tests append, delete and rewrite it)."""
    target = tmp_path / "projects" / "spotter"
    shutil.copytree(spotter, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target
