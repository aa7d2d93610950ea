"""Sleep time at 1k, 10k and 100k new episodes: it must grow as n log n, never n².

For each size N: a store gets a history (2,000 episodes over the 10 days before, slept
on, so that lessons and open predictions exist), then N new episodes over the next 5 days
(``simulations/workload.py``: sessions, recurring and one-off failures with volatile
tokens, corrections, in worktree families and plain projects), and one sleep consolidates
them (decay, lessons, verify, predict: the public ``sleep(store, now)``). Printed per size:
the sleep's time, time per new episode, the baseline (reading the same N episodes from the
store and embedding their texts, the least any consolidation does) and the ratio, and the
growth from the previous size next to what n log n and n² would give. Also: how often the
inverted-index candidates (used beyond ``cluster_exhaustive_max`` groups per project
family) chose the same group as an exhaustive comparison would have, at the smallest size
where they are used. Target (issue 16): 100k new episodes consolidated in under 20 s.

    python benchmarks/sleep.py [--sizes 1000 10000 100000] [--json] [--process]

``--process`` also times ``openmemory sleep`` on a copy of each store in a process of its own
(what the command's user waits for; the benchmark's own process holds the prepared episodes
and the baseline's memos while it sleeps).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmemory_local.core.config import Config  # noqa: E402
from openmemory_local.text.embed import embed  # noqa: E402
from openmemory_local.ingest.transcripts import add_episodes  # noqa: E402
from openmemory_local.sleep.passes import sleep  # noqa: E402
from openmemory_local.storage.store import Store  # noqa: E402
from simulations.workload import Workload  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
HISTORY = 2000


def _add(store, episodes, now) -> None:
    for i in range(0, len(episodes), 10_000):
        add_episodes(store, episodes[i:i + 10_000], now=now)


def prepare(home: Path, n: int, config_changes: dict | None = None) -> tuple[Store, datetime, list]:
    store = Store.open(Config(home=home, **(config_changes or {})))
    work = Workload(seed=7)
    history_end = START + timedelta(days=10)
    _add(store, work.episodes(HISTORY, START, 10), history_end)
    sleep(store, history_end)
    new = work.episodes(n, history_end, 5)
    now = history_end + timedelta(days=5)
    _add(store, new, now)
    return store, now, new


def baseline(store: Store, since: datetime) -> float:
    started = time.perf_counter()
    rows = store.conn.execute("SELECT text FROM episodes WHERE created > ?", (since.isoformat(),)).fetchall()
    for (text,) in rows:
        embed(text)
    return time.perf_counter() - started


def process_sleep(home: Path, now: datetime) -> dict:
    """``openmemory sleep`` on ``home`` in a process of its own (what a user of the command waits
    for, the interpreter's start included): its wall and CPU time, and what it made."""
    import os
    import resource
    import subprocess

    os.sync()  # the copy just made is written out first: its flush is the benchmark's work, not the command's
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "openmemory_local.cli.main", "sleep", "--home", str(home), "--now",
                    now.isoformat(), "--future", "--no-report", "--json"], check=True, stdout=subprocess.DEVNULL,
                   env={**os.environ, "OPENMEMORY_NODE_HOME": str(home / "no-node")})
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    store = Store.open(Config(home=home))
    try:
        groups = store.conn.execute("SELECT COUNT(*) FROM lessons").fetchone()[0]
        lessons = store.conn.execute("SELECT COUNT(*) FROM lessons WHERE state = 'active'").fetchone()[0]
    finally:
        store.close()
    return {"seconds": wall, "cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "groups": groups, "lessons": lessons}


def assignments(store: Store) -> dict[int, int]:
    return dict(store.conn.execute("SELECT episode_id, lesson_id FROM lesson_members"))


def groups_agreement(work_dir: Path, n: int) -> dict:
    """Same workload slept with candidates, and exhaustively: share of new surprises whose
    group is the same (compared as the set of surprises each group holds)."""
    out = {}
    for mode, changes in (("candidates", {}), ("exhaustive", {"cluster_exhaustive_max": 10**9})):
        home = work_dir / f"agree-{mode}"
        store, now, _ = prepare(home, n, changes)
        started = time.perf_counter()
        sleep(store, now)
        out[mode + "_seconds"] = time.perf_counter() - started
        groups: dict[int, set] = {}
        for eid, gid in assignments(store).items():
            groups.setdefault(gid, set()).add(eid)
        out[mode] = {eid: frozenset(groups[gid]) for eid, gid in assignments(store).items()}
        store.close()
    same = sum(1 for eid, members in out["candidates"].items() if out["exhaustive"].get(eid) == members)
    return {"surprises": len(out["candidates"]), "same_group": same,
            "agreement": same / max(1, len(out["candidates"])),
            "candidates_seconds": out["candidates_seconds"], "exhaustive_seconds": out["exhaustive_seconds"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--agreement-size", type=int, default=10000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--process", action="store_true",
                        help="also time `openmemory sleep` on a copy of each store, in a process of its own")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="om-bench-sleep-"))
    rows = []
    try:
        for n in args.sizes:
            home = work / f"home-{n}"
            store, now, new = prepare(home, n)
            base = baseline(store, now - timedelta(days=5))
            if args.process:  # the same store, slept on by the command in a process of its own
                store.close()
                shutil.copytree(home, work / f"process-{n}")
                store = Store.open(Config(home=home))
            cpu = time.process_time()
            result = sleep(store, now)
            cpu = time.process_time() - cpu
            groups = store.conn.execute("SELECT COUNT(*) FROM lessons").fetchone()[0]
            lessons = store.conn.execute("SELECT COUNT(*) FROM lessons WHERE state = 'active'").fetchone()[0]
            rows.append({"n": len(new), "seconds": result.seconds, "cpu_seconds": cpu, "baseline_seconds": base,
                         "surprises": result.learn["surprises"], "groups": groups, "lessons": lessons,
                         "confirmed": len(result.verify["confirmed"]), "failed": len(result.verify["failed"]),
                         "predictions_made": len(result.predict["made"])})
            store.close()
            shutil.rmtree(home, ignore_errors=True)
            if args.process:
                rows[-1]["process"] = process_sleep(work / f"process-{n}", now)
                shutil.rmtree(work / f"process-{n}", ignore_errors=True)
        agreement = groups_agreement(work, args.agreement_size) if args.agreement_size else None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({"sizes": rows, "agreement": agreement}, indent=2))
        return
    import os

    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores; "
          "cpu s: the CPU time the sleep's process got (fairer than wall time on a busy machine)")
    print(f"{'new episodes':>12} {'sleep s':>9} {'cpu s':>7} {'us/episode':>11} {'baseline s':>11} {'x baseline':>11} "
          f"{'growth':>8} {'n log n':>8} {'n^2':>8}  surprises groups lessons confirmed failed")
    previous = None
    for row in rows:
        n, s = row["n"], row["seconds"]
        growth = nlogn = square = ""
        if previous:
            growth = f"{s / previous['seconds']:.1f}x"
            nlogn = f"{(n * math.log(n)) / (previous['n'] * math.log(previous['n'])):.1f}x"
            square = f"{(n / previous['n']) ** 2:.0f}x"
        print(f"{n:>12,} {s:>9.2f} {row['cpu_seconds']:>7.2f} {1e6 * s / n:>11.0f} {row['baseline_seconds']:>11.2f} "
              f"{s / row['baseline_seconds']:>11.1f} {growth:>8} {nlogn:>8} {square:>8}  "
              f"{row['surprises']:>9} {row['groups']:>6} {row['lessons']:>7} {row['confirmed']:>9} {row['failed']:>6}")
        previous = row
    for row in rows:
        if "process" in row:
            proc = row["process"]
            same = (proc["groups"], proc["lessons"]) == (row["groups"], row["lessons"])
            print(f"{row['n']:>12,} as `openmemory sleep` in a process of its own (its start included): "
                  f"{proc['seconds']:.2f} s, {proc['cpu_seconds']:.2f} s of CPU; {proc['groups']} groups, "
                  f"{proc['lessons']} lessons ({'the same' if same else 'NOT the same'} as in-process)")
    if agreement:
        print(f"\ngroups at {args.agreement_size:,} new episodes, candidates vs exhaustive: "
              f"{agreement['same_group']:,} of {agreement['surprises']:,} surprises (history included) "
              f"in the same group "
              f"({100 * agreement['agreement']:.2f}%); sleep {agreement['candidates_seconds']:.2f} s vs "
              f"{agreement['exhaustive_seconds']:.2f} s exhaustive")
    target = next((r for r in rows if r["n"] >= 100_000), None)
    if target:
        print(f"target: {target['n']:,} new episodes in {target['seconds']:.2f} s, "
              f"{target['cpu_seconds']:.2f} s of CPU (under 20 s: {'yes' if target['seconds'] < 20 else 'NO'})")
        if "process" in target:
            proc = target["process"]
            print(f"        as `openmemory sleep`: {proc['seconds']:.2f} s, {proc['cpu_seconds']:.2f} s of CPU "
                  f"(under 20 s: {'yes' if proc['seconds'] < 20 else 'NO'})")


if __name__ == "__main__":
    main()
