#!/usr/bin/env python3
"""A fresh node catching up by ``/openmemory/sync/1.0.0``: records/s between two processes,
beside the rate at which the same node code takes the same records in-process.

    python benchmarks/sync_catchup.py [--records 10000] [--authors 200] [--repeat 1] [--json]
                                      [--profile FILE]

Node A (a real ``openmemory-node start`` process on 127.0.0.1) holds ``--records`` records of
``--authors`` keys: lessons, attestations of them, revocations and vouches (60/30/5/5 %),
written to its store before it starts. Node B, a second process with an empty store,
bootstraps from A; its first sync session with A pulls everything. Printed:

* ``session``: B's own report of that session (``GET /v1/sync``: the seconds from opening the
  stream to the last record stored), and records/s over it: the catch-up rate (target 5,000/s);
* ``wall``: from B's API answering to B's report of the session (the connection, the session's
  ``connect_delay`` and the session itself; polled every 0.25 s), then B is checked to hold
  every record;
* ``B's main``: the CPU time of B's main thread over the same time: what bounds the rate when
  the signatures' thread (``Ingest._check_ahead``) has a core of its own;
* ``floor``: the same bytes taken in this process by what B runs for each record a sync
  pulls (a fresh store and commons state, :meth:`Ingest.accept_batch` with ``via="sync"`` in
  batches of what the session stores in one transaction, ``WANTS_PER_COMMIT`` WANTs; CPU
  time of every thread, then of the main thread alone, then wall time), and ``validate``:
  :func:`wire.validate` alone over them. The
  ratio session/floor is what the network, the framing and the two processes cost.

Both nodes keep their default configuration, except ``max_without_standing`` (the records come
from keys without standing on B, and the default bound is 10,000): raised so that nothing is
dropped. The load average is printed: on the shared 2-core machine the figures are indicative,
the ratio against the floor of the same run less so.

``--profile FILE`` runs node B under cProfile (CPU time) and writes its stats to FILE.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nacl.signing import SigningKey  # noqa: E402

from openmemory_node import wire  # noqa: E402
from openmemory_node.store import Store  # noqa: E402
from tests.node.harness import Cluster, Node, wait_until  # noqa: E402
from tests.node.records import make_records, populate  # noqa: E402

TARGET = 5000
CONFIG = """
[limits]
max_without_standing = 1000000
"""


def floor(records: list[bytes], home: Path, now: int) -> dict[str, float]:
    """What B's code does per record pulled, in this process: records/s."""
    from openmemory_node.status import CommonsStatus
    from openmemory_node.config import Config
    from openmemory_node.ingest import Ingest
    from openmemory_node.policy import NodePolicy
    from openmemory_node import sync

    SyncIndex = sync.SyncIndex
    per_batch = sync.MAX_WANT * getattr(sync, "WANTS_PER_COMMIT", 1)  # what the session stores at once

    config = Config()
    limits = dataclasses.replace(config.limits, max_without_standing=1_000_000)
    home.mkdir(parents=True, exist_ok=True)
    store = Store.open(home)
    commons = CommonsStatus(config.commons, store, SigningKey.generate().verify_key.encode())
    ingest = Ingest(store, NodePolicy(limits), status_rules=commons)
    index = SyncIndex.from_store(store)
    ingest.on_accept_hooks.append(index.on_accept)
    peer = "12D3KooWFloor"
    wire.validate(records[0], now=now)  # load the observation rule's tables first
    started, main0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    accepted = 0
    for start in range(0, len(records), per_batch):
        batch = records[start:start + per_batch]
        outcomes = ingest.accept_batch(batch, peer=peer, via="sync", solicited=True)
        accepted += sum(o.accepted for o in outcomes)
    ingest_s = time.process_time() - started
    main_s, wall_s = time.thread_time() - main0, time.perf_counter() - wall0
    store.close()
    assert accepted == len(records), f"the floor accepted {accepted} of {len(records)}"
    started = time.process_time()
    for data in records:
        wire.validate(data, now=now)
    validate_s = time.process_time() - started
    return {"floor": len(records) / ingest_s, "floor_main": len(records) / main_s, "floor_wall": len(records) / wall_s,
            "validate": len(records) / validate_s}


def cpu_seconds(pid: int, thread: int | None = None) -> float:
    """User and system CPU time of a process so far (/proc/PID/stat), or of one of its
    threads (its main thread's id is the process's)."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    fields = Path(path).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ProfiledNode(Node):
    """A node whose process runs under cProfile (its stats written at a clean stop)."""

    profile: str = ""

    def start(self, wait: bool = True) -> "Node":
        import subprocess

        try:
            (self.home / "api.addr").unlink()
        except FileNotFoundError:
            pass
        log = open(self.log_path, "ab")
        code = ("import cProfile, sys, time; from openmemory_node.cli import build_parser; "
                "args = build_parser().parse_args(sys.argv[1:]); "
                "p = cProfile.Profile(time.process_time); p.enable()\n"
                "try: args.fn(args)\n"
                f"finally: p.disable(); p.dump_stats({self.profile!r})")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, "--home", str(self.home), "start", "--log-level", self.log_level],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        if wait:
            self.wait_ready()
        return self


def catch_up(records: list[bytes], root: Path, profile: str | None) -> dict[str, float]:
    cluster = Cluster(root)
    try:
        a = cluster.node("a", extra_config=CONFIG)
        a.init()
        populate(a.home, records)
        a.start()
        total = sum(sum(v.values()) for v in a.status()["records"].values())
        assert total == len(records), f"A holds {total} of {len(records)}"
        if profile:
            b = ProfiledNode(root / "b", name="b", extra_config=CONFIG)
            b.profile = profile
            cluster.nodes.append(b)
        else:
            b = cluster.node("b", extra_config=CONFIG)
        b.init([a.multiaddr])
        b.start()
        t0 = time.monotonic()
        cpu0 = {"a": cpu_seconds(a.proc.pid), "b": cpu_seconds(b.proc.pid)}
        main0 = cpu_seconds(b.proc.pid, b.proc.pid)

        # B's report of its session with A, written once its last record is stored: polled every
        # 0.25 s (a poll of the record counts instead costs B a count of its table each time, on
        # its main thread: 2 to 3 % of it in a 10 s session)
        report = wait_until(lambda: b.get("/v1/sync")["last"].get(a.peer_id), 600, 0.25, "B's session report")
        wall = time.monotonic() - t0
        cpu = {name: cpu_seconds(node.proc.pid) - cpu0[name] for name, node in (("a", a), ("b", b))}
        b_main = cpu_seconds(b.proc.pid, b.proc.pid) - main0
        held = sum(sum(v.values()) for v in b.status()["records"].values())
        if report["outcome"] != "done" or report["received"] != len(records) or held != len(records):
            raise SystemExit(f"the session did not pull everything: {report} ({held} held)")
        if profile:
            b.stop()
        return {"session_s": report["seconds"], "wall_s": wall, "received": report["received"],
                "a_cpu_s": cpu["a"], "b_cpu_s": cpu["b"], "b_main_cpu_s": b_main,
                "bytes_received": report["bytes_received"], "reconcile_bytes": report["reconcile_bytes"]}
    finally:
        cluster.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--authors", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1, help="catch-ups to run (the best is reported)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--profile", help="run node B under cProfile and write its stats here")
    args = parser.parse_args()

    now = int(time.time())
    records = make_records(args.records, args.authors, now)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="om-sync-bench-") as tmp:
        runs = []
        for i in range(args.repeat):
            runs.append(catch_up(records, Path(tmp) / f"run{i}", args.profile))
            print(f"(catch-up {i + 1}: {runs[-1]['session_s']:.2f} s)", file=sys.stderr)
        base = floor(records, Path(tmp) / "floor", now)
    run = min(runs, key=lambda r: r["session_s"])
    load_after = os.getloadavg()
    out = {
        "records": len(records), "authors": args.authors, **run,
        "session_rate": len(records) / run["session_s"], "wall_rate": len(records) / run["wall_s"],
        "floor_rate": base["floor"], "floor_main_rate": base["floor_main"], "floor_wall_rate": base["floor_wall"],
        "validate_rate": base["validate"],
        "load_before": load_before, "load_after": load_after,
    }
    out["b_cpu_rate"] = len(records) / run["b_cpu_s"]
    out["b_main_rate"] = len(records) / run["b_main_cpu_s"]
    out["session_vs_floor"] = out["session_rate"] / out["floor_rate"]
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    verdict = "meets" if out["session_rate"] >= TARGET else "MISSES"
    print(f"sync catch-up of {len(records):,} records ({args.authors} authors) from node A to a fresh node B, "
          f"two processes on loopback; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print(f"  session   {run['session_s']:7.2f} s  {out['session_rate']:9,.0f} records/s   "
          f"({run['bytes_received'] / 1e6:.1f} MB received, reconciliation {run['reconcile_bytes'] / 1e3:.1f} kB)")
    print(f"  wall      {run['wall_s']:7.2f} s  {out['wall_rate']:9,.0f} records/s   "
          "(B's API up to its session report)")
    print(f"  B's CPU   {run['b_cpu_s']:7.2f} s  {out['b_cpu_rate']:9,.0f} records/s   "
          f"(over the wall time; A's CPU {run['a_cpu_s']:.2f} s)")
    print(f"  B's main  {run['b_main_cpu_s']:7.2f} s  {out['b_main_rate']:9,.0f} records/s   "
          "(B's main thread's CPU: the bound given a free core for the verifier thread)")
    print(f"  floor               {out['floor_rate']:9,.0f} records/s   (B's accept path in-process, CPU time)")
    print(f"  floor main          {out['floor_main_rate']:9,.0f} records/s   (the same, the main thread's CPU time; "
          f"wall time {out['floor_wall_rate']:,.0f} records/s)")
    print(f"  validate            {out['validate_rate']:9,.0f} records/s   (wire.validate alone, CPU time)")
    print(f"session/floor {out['session_vs_floor']:.0%}; {verdict} the {TARGET:,} records/s target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
