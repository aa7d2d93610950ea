"""How long Claude Code's exit waits for the SessionEnd hook.

Measures, over N runs each, the wall time from starting the hook process to its exit
(the ingest it starts runs detached and is not waited for; here it is a no-op stand-in so
that the machine is not loaded by N real ingests), against a baseline measured in the same
run: the bare interpreter (``python -c pass``) and the interpreter importing the
``openmemory`` command line (what a hook written as ``openmemory hook session-end`` would cost).

    python benchmarks/hook_latency.py [-n 30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(argv: list[str], stdin: bytes, env: dict[str, str], n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, input=stdin, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        transcript = tmp_path / "session.jsonl"
        transcript.write_text('{"type": "user"}\n')
        noop = tmp_path / "noop"
        noop.write_text("#!/bin/sh\nexit 0\n")
        noop.chmod(0o755)
        payload = json.dumps(
            {"session_id": "s", "transcript_path": str(transcript), "cwd": tmp, "hook_event_name": "SessionEnd",
             "reason": "other"}
        ).encode()
        env = dict(os.environ)
        hook = [sys.executable, "-P", "-m", "openmemory_local.integrations.session_end", "--home", str(tmp_path / "d"),
                "--openmemory", str(noop)]
        rows = {
            "python -c pass (baseline)": timed([sys.executable, "-c", "pass"], b"", env, args.n),
            "python -c 'import openmemory_local.cli.main'": timed(
                [sys.executable, "-c", "import openmemory_local.cli.main"], b"", env, args.n
            ),
            "SessionEnd hook, valid payload": timed(hook, payload, env, args.n),
            "SessionEnd hook, broken payload": timed(hook, b"{not json", env, args.n),
        }
        time.sleep(0.5)  # let the detached no-op runners finish before the folder goes
    base = statistics.median(rows["python -c pass (baseline)"])
    print(f"{'what':45} {'p50 ms':>8} {'p95 ms':>8} {'x baseline':>10}")
    for name, times in rows.items():
        times.sort()
        p50 = statistics.median(times)
        p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
        print(f"{name:45} {p50:8.1f} {p95:8.1f} {p50 / base:10.2f}")


if __name__ == "__main__":
    main()
