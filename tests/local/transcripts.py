"""Builders for small synthetic Claude Code transcripts (the shapes seen in the real ones).

The writer lives in ``simulations/transcripts.py`` (the simulated agents write their sessions
with it too); the tests import it from here.
"""

import json
from pathlib import Path
from typing import Any, Iterator

from simulations.transcripts import CWD, SESSION, T

__all__ = ["CWD", "SESSION", "T", "real_records"]


def real_records(shared_data: Path) -> Iterator[Any]:
    """Each line of the real transcripts under ``shared_data/claude-code``, parsed, in file
    order (a line that is no JSON is skipped)."""
    for path in sorted((shared_data / "claude-code").rglob("*.jsonl")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            yield record
