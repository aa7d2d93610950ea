"""Same input, two versions of the engine's sleep: the same lessons, members, predictions and verdicts?

The correctness gate for changes that make sleep faster. A store is built once (with the
``--old`` tree's code, in its own process: ingest is not what is compared, and a store the old
code made the new code migrates, where the old code refuses a newer schema), copied, and each copy is slept on by
one version of the engine, in its own process (``PYTHONPATH`` points at the tree given):

* ``real``: the real Claude Code transcripts (``$OPENMEMORY_TEST_DATA``, default
  ``../shared/data``), ingested at once and replayed day by day (one sleep per past day,
  :mod:`openmemory_local.sleep.replay`), then slept on at ``now``;
* ``synthetic``: ``benchmarks/sleep.py``'s workload (2,000 episodes of history over 10
  days, then N new over 5), slept at the end of the history and again at the end;
* ``replay``: the same workload over 40 days (``--replay-episodes``, 4,000), replayed day by
  day: lessons form, predictions are made, confirmed and failed, strengths decay and groups
  are archived across many sleeps.

Then the tables a sleep writes (``lessons`` with their centroids, ``lesson_members``,
``predictions``, ``events``, the episodes' strength and archived flag, the sleep's
``meta`` keys) are compared row by row; the first differences are printed. Also printed:
each version's sleep time (wall and CPU) on the same store in the same run.

    python benchmarks/sleep_compare.py --old /path/to/old/tree [--sizes 10000] [--no-real]

(``--old``: a checkout of the version to compare with, e.g. ``git archive <commit> | tar -x -C
/tmp/old``.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The tree whose code builds the stores (the ``--old`` one: a store it makes, the new code migrates
#: when it opens it; the old code would refuse a store of a newer schema). Set for the build's process.
BUILD_TREE = os.environ.get("OM_SLEEP_COMPARE_BUILD_TREE")
sys.path.insert(0, str(ROOT))
if BUILD_TREE:
    sys.path.insert(0, BUILD_TREE)

REAL_NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)

#: table -> the query whose rows must be the same (ordered)
TABLES = {
    "lessons": "SELECT * FROM lessons ORDER BY id",
    "lesson_members": "SELECT * FROM lesson_members ORDER BY episode_id",
    "predictions": "SELECT * FROM predictions ORDER BY id",
    "events": "SELECT * FROM events ORDER BY id",
    "episodes": "SELECT id, strength, archived, last_touched FROM episodes ORDER BY id",
    "meta": "SELECT key, value FROM meta WHERE key IN ('last_sleep', 'decayed_until', 'centroid_embedding') "
            "ORDER BY key",
}


def build_real(home: Path) -> None:
    from openmemory_local.core.config import Config
    from openmemory_local.ingest.transcripts import ingest
    from openmemory_local.storage.store import Store

    data = Path(os.environ.get("OPENMEMORY_TEST_DATA", ROOT.parent / "shared" / "data")) / "claude-code"
    store = Store.open(Config(home=home))
    ingest(store, [data], now=REAL_NOW)
    store.close()


def build_replay(home: Path, n: int) -> dict:
    from benchmarks.sleep import START, _add
    from openmemory_local.core.config import Config
    from openmemory_local.storage.store import Store
    from simulations.workload import Workload

    store = Store.open(Config(home=home))
    end = START + timedelta(days=40)
    _add(store, Workload(seed=11).episodes(n, START, 40), end)
    store.close()
    return {"replay": (end + timedelta(days=1)).isoformat(), "sleeps": [(end + timedelta(days=1)).isoformat()]}


def build_synthetic(home: Path, n: int) -> dict:
    from benchmarks.sleep import HISTORY, START, _add
    from openmemory_local.core.config import Config
    from openmemory_local.storage.store import Store
    from simulations.workload import Workload

    store = Store.open(Config(home=home))
    work = Workload(seed=7)
    history_end = START + timedelta(days=10)
    _add(store, work.episodes(HISTORY, START, 10), history_end)
    now = history_end + timedelta(days=5)
    _add(store, work.episodes(n, history_end, 5), now)
    store.close()
    return {"sleeps": [history_end.isoformat(), now.isoformat()]}


_CHILD = r"""
import json, sys, time
from datetime import datetime
from pathlib import Path
from openmemory_local.core.config import Config
from openmemory_local.storage.store import Store
from openmemory_local.sleep.passes import sleep
home, plan = Path(sys.argv[1]), json.loads(sys.argv[2])
store = Store.open(Config(home=home))
out = {"wall": 0.0, "cpu": 0.0, "sleeps": 0, "last_wall": 0.0, "last_cpu": 0.0}
if plan.get("replay"):
    from openmemory_local.sleep.replay import replay
    wall, cpu = time.perf_counter(), time.process_time()
    days = replay(store, datetime.fromisoformat(plan["replay"]))["days"]
    out["wall"] += time.perf_counter() - wall
    out["cpu"] += time.process_time() - cpu
    out["sleeps"] += days
for moment in plan.get("sleeps", []):
    wall, cpu = time.perf_counter(), time.process_time()
    sleep(store, datetime.fromisoformat(moment))
    out["last_wall"], out["last_cpu"] = time.perf_counter() - wall, time.process_time() - cpu
    out["wall"] += out["last_wall"]
    out["cpu"] += out["last_cpu"]
    out["sleeps"] += 1
store.close()
print(json.dumps(out))
"""


def run_version(tree: Path, home: Path, plan: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(home), json.dumps(plan)], env=env, cwd=str(tree),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"sleep with {tree} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def dump(home: Path) -> dict[str, list]:
    conn = sqlite3.connect(home / "openmemory.db")
    try:
        return {name: conn.execute(sql).fetchall() for name, sql in TABLES.items()}
    finally:
        conn.close()


def compare(a: dict[str, list], b: dict[str, list], show: int = 3) -> dict:
    out = {}
    for name in TABLES:
        rows_a, rows_b = a[name], b[name]
        diffs = [(i, x, y) for i, (x, y) in enumerate(zip(rows_a, rows_b)) if x != y]
        out[name] = {"rows": (len(rows_a), len(rows_b)), "different": len(diffs) + abs(len(rows_a) - len(rows_b)),
                     "examples": [(i, _short(x), _short(y)) for i, x, y in diffs[:show]]}
    return out


def _short(row) -> tuple:
    return tuple(f"<{len(v)} bytes>" if isinstance(v, bytes) else v for v in row)


BUILDERS = {"real": lambda home, n: build_real(home), "replay": build_replay, "synthetic": build_synthetic}


def build_with(tree: Path, builder: str, home: Path, n: int) -> dict:
    """``BUILDERS[builder](home, n)`` run by ``tree``'s code, in its own process."""
    env = dict(os.environ, OM_SLEEP_COMPARE_BUILD_TREE=str(tree))
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--build", builder, str(home), str(n)],
                          env=env, cwd=str(tree), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"building the {builder} store with {tree} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def case(name: str, work: Path, build, plan: dict, old: Path, new: Path) -> bool:
    base = work / f"{name}-base"
    started = time.perf_counter()
    plan = dict(plan, **(build_with(old, build[0], base, build[1]) or {}))
    print(f"{name}: store built in {time.perf_counter() - started:.1f} s", flush=True)
    results = {}
    for label, tree in (("old", old), ("new", new)):
        home = work / f"{name}-{label}"
        shutil.copytree(base, home)
        results[label] = (run_version(tree, home, plan), dump(home))
    same = True
    for table, entry in compare(results["old"][1], results["new"][1]).items():
        ok = entry["different"] == 0
        same &= ok
        print(f"  {table:<15} rows old {entry['rows'][0]:>7,} new {entry['rows'][1]:>7,}  "
              f"{'same' if ok else str(entry['different']) + ' DIFFERENT'}")
        for i, x, y in entry["examples"]:
            print(f"    row {i}:\n      old {x}\n      new {y}")
    for label in ("old", "new"):
        t = results[label][0]
        print(f"  {label}: {t['sleeps']} sleeps, {t['wall']:.2f} s wall, {t['cpu']:.2f} s CPU "
              f"(the last: {t['last_wall']:.2f} s wall, {t['last_cpu']:.2f} s CPU)")
    return same


def main() -> None:
    if sys.argv[1:2] == ["--build"]:  # the build's process (build_with)
        builder, home, n = sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
        print(json.dumps(BUILDERS[builder](home, n) or {}))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="a tree with the version to compare with")
    parser.add_argument("--new", type=Path, default=ROOT, help="the tree to check (default: this one)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[10000])
    parser.add_argument("--replay-episodes", type=int, default=4000, help="0: no replay case")
    parser.add_argument("--no-real", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="om-sleep-compare-"))
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    same = True
    try:
        if not args.no_real:
            same &= case("real", work, ("real", 0), {"replay": REAL_NOW.isoformat(), "sleeps": [REAL_NOW.isoformat()]},
                         args.old.resolve(), args.new.resolve())
        if args.replay_episodes:
            same &= case(f"replay-{args.replay_episodes}", work, ("replay", args.replay_episodes),
                         {}, args.old.resolve(), args.new.resolve())
        for n in args.sizes:
            same &= case(f"synthetic-{n}", work, ("synthetic", n), {}, args.old.resolve(), args.new.resolve())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("same lessons, members, predictions, verdicts and events" if same else "DIFFERENT")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
