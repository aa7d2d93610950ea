"""Ingest throughput on the real transcripts replicated to >= 200 MB, against a baseline.

Baseline (measured in the same run, on the same bytes, page cache warm): read every file
and ``orjson.loads`` every line: the engine itself parses with orjson, so that is the floor
(issue 16; the ``json.loads`` loop, the baseline before, is printed beside it). Open Memory's
ingest does that and more (archive every byte as gzip, classify records, build episodes,
embed them, write SQLite in one transaction per transcript). Target: at least half the
baseline's speed.

    python benchmarks/ingest.py [--data DIR] [--mb 200] [--base REV]

``--base REV`` also ingests the same bytes with the code of a git revision (``main``, the
merge-base of a branch), in a process of its own, interleaved with the runs of this tree's
code: before and after in one run, under the same load. Each copy of the data gets its own session ids and tool-call ids, so the copies are
distinct sessions (as on a real disk), not duplicates.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmemory_local.core.config import Config  # noqa: E402
from openmemory_local.ingest.transcripts import ingest  # noqa: E402
from openmemory_local.storage.store import Store  # noqa: E402
from simulations.transcripts import replicate  # noqa: E402

def baseline(root: Path, loads=None) -> tuple[float, int, int]:
    """Read every transcript and parse every line (``loads``: orjson's, else json's)."""
    if loads is None:
        try:
            from orjson import loads
        except ImportError:
            loads = json.loads
    started = time.perf_counter()
    lines = size = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            if not name.endswith(".jsonl"):
                continue
            with open(os.path.join(dirpath, name), "rb") as f:
                data = f.read()
            size += len(data)
            for line in data.splitlines():
                loads(line)
                lines += 1
    return time.perf_counter() - started, size, lines


_BASE_RUN = """
import json, sys, time
from datetime import datetime, timezone
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from openmemory_local.core.config import Config
from openmemory_local.ingest.transcripts import ingest
from openmemory_local.storage.store import Store
store = Store.open(Config(home=Path(sys.argv[3])))
started, cpu = time.perf_counter(), time.process_time()
ingest(store, [Path(sys.argv[2])], now=datetime(2026, 3, 1, tzinfo=timezone.utc))
print(json.dumps([time.perf_counter() - started, time.process_time() - cpu]))
"""


def _export(rev: str, target: Path) -> Path:
    """The tree of git revision ``rev``, unpacked in ``target``."""
    root = Path(__file__).resolve().parent.parent
    target.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=root, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def _ingest_with(code: Path, projects: Path, home: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of one ingest of ``projects`` by the code in ``code`` (its own process)."""
    out = subprocess.run([sys.executable, "-c", _BASE_RUN, str(code), str(projects), str(home)], cwd=code,
                         check=True, capture_output=True, text=True).stdout
    wall, cpu = json.loads(out.strip().splitlines()[-1])
    shutil.rmtree(home, ignore_errors=True)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("OPENMEMORY_TEST_DATA", "/work/shared/data"))
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5, help="interleaved runs (best is reported)")
    parser.add_argument("--base", help="also time the code of this git revision on the same bytes")
    args = parser.parse_args()
    source = Path(args.data) / "claude-code" / "spotter"
    work = Path(tempfile.mkdtemp(prefix="om-bench-ingest-"))
    try:
        total, copies = replicate(source, work / "projects", args.mb)
        print(f"data: {total / 1e6:.1f} MB ({copies} copies of {source})")
        baseline(work / "projects")  # warm the page cache
        now = datetime(2026, 3, 1, tzinfo=timezone.utc)
        # Interleaved runs, best of each: the machine may be shared with other work.
        base_runs, ours_runs, base_cpu, ours_cpu = [], [], [], []
        before = _export(args.base, work / "base-code") if args.base else None
        before_runs: list[tuple[float, float]] = []
        for attempt in range(args.repeat):
            if before is not None:
                before_runs.append(_ingest_with(before, work / "projects", work / f"base-home{attempt}"))
            cpu = time.process_time()
            base_s, size, lines = baseline(work / "projects")
            base_cpu.append(time.process_time() - cpu)
            base_runs.append(base_s)
            home = work / f"home{attempt}"
            store = Store.open(Config(home=home))
            started, cpu = time.perf_counter(), time.process_time()
            summary = ingest(store, [work / "projects"], now=now)
            ours_runs.append(time.perf_counter() - started)
            ours_cpu.append(time.process_time() - cpu)
            if attempt < args.repeat - 1:
                store.close()
                shutil.rmtree(home)
        base_s, ours = min(base_runs), min(ours_runs)
        print(f"baseline  read + orjson.loads:{base_s:6.2f} s  {size / 1e6 / base_s:7.1f} MB/s  ({lines:,} lines)"
              f"  runs: {', '.join(f'{x:.2f}' for x in base_runs)}")
        t = summary.totals()
        print(f"openmemory ingest (first):    {ours:6.2f} s  {size / 1e6 / ours:7.1f} MB/s  "
              f"runs: {', '.join(f'{x:.2f}' for x in ours_runs)}")
        print(f"  -> episodes {t['episodes_added']}, {t['problems']} problems")
        median = sorted(base_runs)[len(base_runs) // 2] / sorted(ours_runs)[len(ours_runs) // 2]
        print(f"ratio: ingest speed / baseline speed = {base_s / ours:.2f} best of {args.repeat}, "
              f"{median:.2f} median  (target >= 0.50)")
        print(f"  CPU time (this process): baseline {min(base_cpu):.2f} s, ingest {min(ours_cpu):.2f} s, "
              f"ratio {min(base_cpu) / min(ours_cpu):.2f}")
        if before_runs:
            wall, cpu = min(w for w, _ in before_runs), min(c for _, c in before_runs)
            print(f"  {args.base} code, same bytes: {wall:6.2f} s wall ({base_s / wall:.2f} of the baseline), "
                  f"CPU {cpu:.2f} s ({min(base_cpu) / cpu:.2f}); this tree is {wall / ours:.2f}x as fast "
                  f"(CPU {cpu / min(ours_cpu):.2f}x)")
        json_s = baseline(work / "projects", json.loads)[0]
        print(f"(the former baseline, read + json.loads: {json_s:.2f} s {size / 1e6 / json_s:.1f} MB/s; "
              f"ratio {json_s / ours:.2f}" + (f"; {args.base} code {json_s / wall:.2f})" if before_runs else ")"))
        print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
        archive = sum(p.stat().st_size for p in (home / "archive").rglob("*.gz"))
        print(f"archive: {archive / 1e6:.1f} MB ({archive / size:.1%} of the raw stream)")
        started = time.perf_counter()
        again = ingest(store, [work / "projects"], now=now)
        print(f"second ingest (nothing new):  {time.perf_counter() - started:6.2f} s  "
              f"-> {again.totals()['by_status']}")
        grown = sorted((work / "projects").glob("*/*.jsonl"))[:20]
        extra = (source / "short.jsonl").read_bytes()
        for i, path in enumerate(grown):
            with open(path, "ab") as f:
                f.write(extra.replace(b"toolu_", b"toolu_grown%02d_" % i))
        started = time.perf_counter()
        third = ingest(store, [work / "projects"], now=now)
        print(f"ingest after 20 files grew:   {time.perf_counter() - started:6.2f} s  "
              f"-> {third.totals()['by_status']}, added {third.totals()['episodes_added']}")
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
