#!/usr/bin/env python3
"""A new user's first ``openmemory run``, timed as they wait for it: a whole history at once.

The real transcripts of ``$OPENMEMORY_TEST_DATA`` (default ``../shared/data``, as the tests
find them) are replicated to ``--mb`` megabytes of distinct sessions under a fresh
``~/.claude/projects``; then ``openmemory run`` (ingest, replay one sleep per past day, sleep,
render, the morning report) runs in a process of its own on an empty data folder, ``-n`` times.
Baseline in the same run: ``openmemory --version`` (the interpreter and the command's start).

``--env NAME=VALUE`` adds a second configuration, run interleaved with the first on the same
bytes (e.g. ``--env OPENMEMORY_EMBEDDER=...``): before and after under the same load.

    python benchmarks/first_run.py [--mb 30] [-n 3] [--env NAME=VALUE]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shared_data import shared_data_dir  # noqa: E402  (beside this script)
from simulations.transcripts import replicate  # noqa: E402

#: the installed command, beside this interpreter (the venv's)
OPENMEMORY = str(Path(sys.executable).with_name("openmemory"))


def timed_run(home: Path, user_home: Path, extra_env: dict[str, str]) -> float:
    """Seconds of one ``openmemory run`` on an empty data folder ``home``."""
    env = dict(os.environ, HOME=str(user_home), OPENMEMORY_HOME=str(home), **extra_env)
    for name in ("CLAUDE_CONFIG_DIR", "XDG_DATA_HOME", "OPENMEMORY_NOW", "OPENMEMORY_LESSON_MODEL_URL"):
        env.pop(name, None)
    started = time.perf_counter()
    subprocess.run([OPENMEMORY, "run"],
                   env=env, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    seconds = time.perf_counter() - started
    shutil.rmtree(home, ignore_errors=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=30.0)
    parser.add_argument("-n", type=int, default=3, help="interleaved runs of each configuration (median printed)")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="a second configuration: these variables set (repeatable)")
    args = parser.parse_args()
    source = shared_data_dir() / "claude-code" / "spotter"
    if not source.is_dir():
        sys.exit(f"no transcripts at {source} (set OPENMEMORY_TEST_DATA)")
    work = Path(tempfile.mkdtemp(prefix="om-bench-first-run-"))
    try:
        user_home = work / "user"
        total, copies = replicate(source, user_home / ".claude" / "projects", args.mb)
        print(f"data: {total / 1e6:.1f} MB ({copies} copies of {source}); load {os.getloadavg()}")
        configs = {"as installed": {}}
        if args.env:
            configs[" ".join(args.env)] = dict(item.split("=", 1) for item in args.env)
        times: dict[str, list[float]] = {name: [] for name in configs}
        version: list[float] = []
        for attempt in range(args.n):
            started = time.perf_counter()
            subprocess.run([OPENMEMORY, "--version"], check=True,
                           stdout=subprocess.DEVNULL, cwd=ROOT)
            version.append(time.perf_counter() - started)
            for name, extra in configs.items():
                times[name].append(timed_run(work / f"home-{attempt}", user_home, extra))
        print(f"baseline `openmemory --version`: {statistics.median(version) * 1000:.0f} ms")
        for name, runs in times.items():
            print(f"first `openmemory run` ({name}): median {statistics.median(runs):.2f} s, "
                  f"{total / 1e6 / statistics.median(runs):.1f} MB/s  runs: {', '.join(f'{x:.2f}' for x in runs)}")
        print(f"load after: {os.getloadavg()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
