#!/usr/bin/env python3
"""Machine instructions per record of a fresh node's accept path for a sync catch-up, on the
main thread (valgrind, callgrind): the load-independent figure beside sync_catchup.py's times.

    python benchmarks/sync_instructions.py [--base REV] [--records 2000]

What it counts is what ``sync_catchup.py``'s floor runs: a fresh store and commons state, the
records of ``tests/node/records.make_records`` (``--records`` of 200 keys) in the order a session
pulls them (by type: revocations, vouches, lessons, attestations; by id within a type), taken by
:meth:`Ingest.accept_batch` (``via="sync"``, solicited) in batches of what the session stores in
one transaction. Only the main thread is counted (``--separate-threads``): the signatures'
thread (``Ingest._check_ahead``) runs beside it and bounds nothing while it has a core. Inside
that, callgrind's own view of the C functions gives SQLite's share (``sqlite3_step`` and the
commit) and the cyclic garbage collector's. With ``--base REV``, the same for that revision's
code (``git archive`` into a temporary folder), then the ratio. The records are made once (they
are signed: slow under valgrind) and written to a temporary file for every run. The clock is
fixed; the node's verify is real. Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import functools
import os
import pickle
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOW = 1_800_000_000


def _child(root: Path, records_file: Path) -> None:
    """Run inside callgrind: every batch once inside functools.reduce (nothing else calls it)."""
    sys.path.insert(0, str(root))
    import dataclasses  # noqa: PLC0415

    from openmemory_node import sync, wire  # noqa: PLC0415
    from openmemory_node.config import Config  # noqa: PLC0415
    from openmemory_node.ingest import Ingest  # noqa: PLC0415
    from openmemory_node.policy import NodePolicy  # noqa: PLC0415
    from openmemory_node.status import CommonsStatus  # noqa: PLC0415
    from openmemory_node.store import Store  # noqa: PLC0415

    records = pickle.loads(records_file.read_bytes())
    with tempfile.TemporaryDirectory() as home:
        config = Config()
        limits = dataclasses.replace(config.limits, max_without_standing=1_000_000)
        store = Store.open(Path(home))
        commons = CommonsStatus(config.commons, store, b"\x01" * 32)
        ingest = Ingest(store, NodePolicy(limits), status_rules=commons, clock=lambda: float(NOW))
        index = sync.SyncIndex.from_store(store)
        ingest.on_accept_hooks.append(index.on_accept)
        wire.validate(records[0], now=NOW)  # the observation rule's tables, loaded first
        per = sync.MAX_WANT * getattr(sync, "WANTS_PER_COMMIT", 1)
        batches = [records[start:start + per] for start in range(0, len(records), per)]
        outcomes = functools.reduce(
            lambda n, batch: n + sum(o.accepted for o in ingest.accept_batch(
                batch, peer="12D3KooWFloor", via="sync", solicited=True)), batches, 0)
        store.close()
    if outcomes != len(records):
        raise SystemExit(f"accepted {outcomes} of {len(records)}")


def _records(n: int, path: Path) -> None:
    sys.path.insert(0, str(ROOT))
    from openmemory_node import wire  # noqa: PLC0415
    from openmemory_node.sync import TYPE_ORDER  # noqa: PLC0415
    from tests.node.records import make_records  # noqa: PLC0415

    records = make_records(n, 200, NOW)
    records.sort(key=lambda d: (TYPE_ORDER.index(wire.decode(d).record_type), wire.record_id(d)))
    path.write_bytes(pickle.dumps(records))


#: The C functions whose inclusive counts make each part (each counted once: the largest line).
_PARTS = {"sqlite": (r"pysqlite_connection_execute", r"pysqlite_connection_commit(_impl)?"),
          "gc": (r"gc_collect_main",)}


def count(root: Path, records_file: Path, n: int) -> dict[str, float]:
    """Instructions per record on the main thread, in all and in SQLite and the collector."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
             "--separate-threads=yes", f"--callgrind-out-file={out}", sys.executable, __file__,
             "--child", str(root), "--records-file", str(records_file)],
            capture_output=True, text=True, check=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
        main = Path(f"{out}-01")
        total = int(re.search(r"^totals: (\d+)", main.read_text(), re.M).group(1))
        annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(main)],
                                   capture_output=True, text=True, check=True).stdout
    figures = {"all": total / n}
    lines = [(int(m.group(1).replace(",", "")), m.group(2).split("'")[0]) for m in
             (re.match(r"\s*([\d,]+) \(.*?\)\s+\S*?:(\S+)", line) for line in annotated.splitlines()) if m]
    for part, patterns in _PARTS.items():
        figures[part] = sum(max((n_ for n_, name in lines if re.fullmatch(p, name)), default=0)
                            for p in patterns) / n
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="a git revision to count too, and compare against")
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--records-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child, args.records_file)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        records_file = Path(tmp) / "records.pickle"
        _records(args.records, records_file)
        trees = {"this tree": ROOT}
        if args.base:
            from ingest import _export  # noqa: PLC0415 - benchmarks/ingest.py (this folder is on the path)

            trees = {args.base: _export(args.base, Path(tmp) / "base"), **trees}
        figures = {name: count(root, records_file, args.records) for name, root in trees.items()}
    print(f"machine instructions per record, B's main thread (callgrind; {args.records:,} records of "
          "200 keys in a session's order, accept_batch as the session calls it)")
    print(f"{'tree':<14}{'all':>12}{'SQLite':>12}{'collector':>12}{'the rest':>12}")
    for name, f in figures.items():
        print(f"{name:<14}{f['all']:>12,.0f}{f['sqlite']:>12,.0f}{f['gc']:>12,.0f}"
              f"{f['all'] - f['sqlite'] - f['gc']:>12,.0f}")
    if args.base:
        old, new = figures[args.base], figures["this tree"]
        print(f"this tree / {args.base}: {new['all'] / old['all']:.2f} (SQLite {new['sqlite'] / old['sqlite']:.2f})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")  # (the children inherit it: the same hashes each run)
    sys.exit(main())
