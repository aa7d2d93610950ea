"""``openmemory run``: the job a user schedules (nightly, or from a hook).

A run is a list of steps, each a function ``(store, now, report) -> dict`` whose result is
stored under its name in the run's report (later steps can read earlier ones). Today the
job ingests the default transcript sources; the sleep, render and morning-report passes
of the next issue append their steps to :data:`STEPS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from .ingest import ingest
from .store import Store

__all__ = ["Step", "STEPS", "run_job", "ingest_step"]


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Store, datetime, dict], dict]


def ingest_step(store: Store, now: datetime, report: dict) -> dict:
    """Ingest every default source (``Config.sources``: Claude Code's projects folder)."""
    summary = ingest(store, None, now=now, progress=report.get("_progress"))
    out = summary.to_dict()
    out["problems"] = len(summary.problems)
    return out


#: The steps of ``openmemory run``, in order.
STEPS: list[Step] = [Step("ingest", ingest_step)]


def run_job(store: Store, now: datetime, steps: list[Step] | None = None, progress=None) -> dict:
    """Run the steps in order; return ``{step name: step result}``."""
    report: dict = {"_progress": progress}
    for step in steps if steps is not None else STEPS:
        report[step.name] = step.run(store, now, report)
    report.pop("_progress", None)
    return report
