"""Shared test fixtures.

Real Claude Code transcripts live in ``$OPENMEMORY_TEST_DATA`` (default ``../shared/data``
relative to the repository root). Tests that need them use the ``shared_data`` fixture,
which skips only where the folder is absent; CI always has it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# A suite started in the background by a script (``cmd &`` in a non-interactive shell) inherits
# SIGINT ignored, and so would every process it starts: the tests that press Ctrl-C on a CLI or a
# node would see it ignored. Caught here instead, SIGINT is back at its default in each child (a
# caught signal is reset at exec), as a terminal's Ctrl-C finds it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def shared_data_dir() -> Path:
    raw = os.environ.get("OPENMEMORY_TEST_DATA", "../shared/data")
    path = Path(raw)
    if not path.is_absolute():
        path = (REPO_ROOT / path).resolve()
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not (path / "claude-code").is_dir():
        pytest.skip(f"shared transcripts not found at {path} (set OPENMEMORY_TEST_DATA)")
    return path


@pytest.fixture(scope="session")
def spotter(shared_data: Path) -> Path:
    return shared_data / "claude-code" / "spotter"
