"""Where the benchmarks find the real transcripts: as the tests do (tests/conftest.py),
``$OPENMEMORY_TEST_DATA``, default ``../shared/data``, a relative path taken from the repository's
root (not from the current directory)."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shared_data_dir() -> Path:
    raw = Path(os.environ.get("OPENMEMORY_TEST_DATA", "../shared/data"))
    return raw if raw.is_absolute() else (ROOT / raw).resolve()
