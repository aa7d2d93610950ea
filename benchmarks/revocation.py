#!/usr/bin/env python3
"""Revocation and sync between openmemory-node processes on loopback: how fast a revocation
reaches every node with the lessons derived from it, how fast a node that was offline catches
up, and what sync costs in bytes.

    python benchmarks/revocation.py [--nodes 10] [--rounds 5] [--records 10000] [--diff 10] [--json]

1. **Revocation to every online node.** N node processes (a random connected graph, as in
   benchmarks/gossip.py). Each round: a lesson, a lesson derived from it and one derived from
   that, from three nodes; once every node holds all three, the author revokes the first. For
   each node, the time from the revocation's arrival in the author's store to the moment the
   node's store shows all three revoked (``status_changed``, stamped by the same machine clock).
   p50 and max over every node and round. One node is stopped before the first revocation.
2. **Rejoin.** That node is started again after every round's revocation (and after gossip's
   windows, so only sync can bring them): the time from its start to its store showing every
   revocation and every descendant revoked, and from its API being up to the same.
3. **Sync cost.** (a) In memory, with the same reconciliation code: bytes to reconcile two id
   sets against their size and difference, beside the baselines of sending every id and every
   record. (b) Two node processes, each preloaded with ``--records`` shared records and
   ``--diff``/2 of its own, connected: the bytes of their sync sessions; in the same run, a
   fresh node pulling the whole set from one of them (the full-transfer baseline).

Targets at N = 10: every online node within 2 s; a rejoining node within one sync round
(30 s at most); two stores of 10k records differing in 10 reconcile in under 5 % of the bytes
of sending them all.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import nacl.signing  # noqa: E402

from gossip import percentile, start_nodes, topology  # noqa: E402
from openmemory_node import wire  # noqa: E402
from openmemory_node.reconcile import IdSet, reconcile  # noqa: E402
from openmemory_node.store import Store  # noqa: E402
from tests.node.harness import Cluster, Node, wait_until  # noqa: E402

QUIET = "\n[log]\nlevel = \"warning\"\n"


def store_rows(node: Node) -> dict[str, tuple[str, float]]:
    """id -> (status, status_changed), read from the node's SQLite file (WAL: a live reader)."""
    db = sqlite3.connect(f"file:{node.home / 'node.db'}?mode=ro", uri=True, timeout=10)
    try:
        return {r[0]: (r[1], r[2]) for r in db.execute("SELECT id, status, status_changed FROM records")}
    finally:
        db.close()


def revoked_at(node: Node, ids: list[str]) -> float | None:
    rows = store_rows(node)
    if all(rows.get(i, ("",))[0] == "revoked" for i in ids):
        return max(rows[i][1] for i in ids)
    return None


def arrived(node: Node, rid: str) -> float:
    return node.get(f"/v1/records/{rid}")["arrived"]


# -- 1 and 2: revocation latency, rejoin ---------------------------------------------------------

def revocation_rounds(n: int, rounds: int, rng: random.Random) -> dict:
    edges = topology(n, rng)
    with tempfile.TemporaryDirectory(prefix=f"om-revoke-{n}-") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            nodes = start_nodes(cluster, n, edges)
            time.sleep(2.0)
            offline = nodes[-1]  # nobody bootstraps from the last node: the rest stay connected
            online = nodes[:-1]
            chains: list[list[str]] = []
            revocations: list[str] = []
            latencies: list[float] = []
            for r in range(rounds):
                authors = rng.sample(online, 3)
                root = authors[0].publish(f'`make deploy` failed: "round {r}: the cache was cold".',
                                          kind="error")["id"]
                child = authors[1].publish(f'`make deploy` failed: "round {r}: the cache was cold after a runner restart".',
                                           kind="error", derived_from=[root])["id"]
                grandchild = authors[2].publish(f'`make deploy` failed: "round {r}: the runner restarted".',
                                                kind="error", derived_from=[child])["id"]
                chain = [root, child, grandchild]
                everyone = nodes if r == 0 else online
                wait_until(lambda: all(all(x.has(i) for i in chain) for x in everyone), 30, 0.05,
                           "the chain everywhere")
                if r == 0:
                    offline.stop()  # it misses every revocation from here on
                time.sleep(0.5)
                revocation = authors[0].post("/v1/revoke", {"id": root, "reason_code": "incorrect"})["id"]
                start = arrived(authors[0], revocation)
                done = wait_until(lambda: [revoked_at(x, chain) for x in online]
                                  if all(revoked_at(x, chain) for x in online) else None,
                                  30, 0.1, "the chain revoked on every online node")
                per_node = [t - start for t in done]
                latencies += per_node
                chains.append(chain)
                revocations.append(revocation)
                print(f"  round {r}: revoked everywhere in p50 {percentile(per_node, 0.5):.3f} s, "
                      f"max {max(per_node):.3f} s", file=sys.stderr)
            time.sleep(6.0)  # past gossip's message-cache history (5 heartbeats)
            everything = [i for chain in chains for i in chain]
            started = time.monotonic()
            offline.start(wait=False)
            offline.wait_ready(timeout=60)
            ready = time.monotonic()
            wait_until(lambda: revoked_at(offline, everything), 60, 0.05, "the rejoining node caught up")
            caught = time.monotonic()
            via = {offline.get(f"/v1/records/{rid}")["via"] for rid in revocations}
        finally:
            cluster.close()
    return {
        "nodes": n, "rounds": rounds,
        "revoked_everywhere_s": {"p50": round(percentile(latencies, 0.5), 3),
                                 "p99": round(percentile(latencies, 0.99), 3),
                                 "max": round(max(latencies), 3)},
        "rejoin_s": {"from_start": round(caught - started, 3), "from_api_up": round(caught - ready, 3)},
        "rejoin_revocations_via": sorted(via),
    }


# -- 3: sync cost ------------------------------------------------------------------------------------

def make_records(count: int, seed: int) -> list[bytes]:
    keys = [nacl.signing.SigningKey(hashlib.sha256(f"{seed}-key-{k}".encode()).digest()) for k in range(50)]
    now = int(time.time()) - 86400
    out = []
    for i in range(count):
        record = wire.new_lesson(keys[i % len(keys)], text=f"The build step {seed}-{i} failed when the cache was cold.",
                                 kind="error", strength=1000, provenance=hashlib.sha256(str(i).encode()).digest(),
                                 created=now + i % 3600)
        out.append(wire.encode(record))
    return out


def in_memory_costs(mean_record: float) -> list[dict]:
    rows = []
    for size in (1_000, 10_000, 100_000):
        base = [b"\x12\x20" + hashlib.sha256(f"s{size}-{i}".encode()).digest() for i in range(size)]
        for diff in (0, 10, 100, 1000):
            mine = base + [b"\x12\x20" + hashlib.sha256(f"m{size}-{i}".encode()).digest() for i in range(diff // 2)]
            theirs = base + [b"\x12\x20" + hashlib.sha256(f"t{size}-{i}".encode()).digest()
                             for i in range(diff - diff // 2)]
            t0 = time.perf_counter()
            need, rounds, nbytes = reconcile(IdSet(mine), IdSet(theirs))
            ms = (time.perf_counter() - t0) * 1000
            assert len(need) == diff - diff // 2
            rows.append({"set": size, "diff": diff, "rounds": rounds, "bytes": nbytes, "ms": round(ms, 1),
                         "vs_all_ids": round(nbytes / (size * 34), 5),
                         "vs_all_records": round(nbytes / (size * mean_record), 5)})
    return rows


def preload(node: Node, records: list[bytes]) -> None:
    store = Store.open(node.home)
    try:
        for data in records:
            r = wire.decode(data)
            store.add(id=r.id, idb=r.id_bytes, type=r.record_type, kind=r.kind, author=r.signer.hex(),
                      created=r.created, data=data, via="gossip", from_peer=None, status="candidate")
    finally:
        store.close()


def network_costs(count: int, diff: int) -> dict:
    shared = make_records(count, 1)
    only_a, only_b = make_records(diff // 2, 2), make_records(diff - diff // 2, 3)
    total_bytes = sum(len(d) for d in shared + only_a)
    with tempfile.TemporaryDirectory(prefix="om-sync-cost-") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            a, b, fresh = (cluster.node(name, extra_config=QUIET, log_level="warning")
                           for name in ("a", "b", "fresh"))
            for node in (a, b, fresh):
                node.init()
            preload(a, shared + only_a)
            preload(b, shared + only_b)
            for node in (a, b):
                node.start(wait=False)
            for node in (a, b):
                node.wait_ready(timeout=120)
            t0 = time.monotonic()
            b.post("/v1/peers", {"addr": a.multiaddr})
            wait_until(lambda: a.get("/v1/sync")["last"].get(b.peer_id, {}).get("outcome") == "done"
                       and b.get("/v1/sync")["last"].get(a.peer_id, {}).get("outcome") == "done",
                       60, 0.1, "a and b synced")
            diff_seconds = time.monotonic() - t0
            sessions = [a.get("/v1/sync")["last"][b.peer_id], b.get("/v1/sync")["last"][a.peer_id]]
            assert a.status()["records"]["lesson"]["candidate"] == count + diff
            fresh.start()
            t0 = time.monotonic()
            fresh.post("/v1/peers", {"addr": a.multiaddr})
            wait_until(lambda: fresh.get("/v1/sync")["last"].get(a.peer_id, {}).get("outcome") == "done"
                       and fresh.status()["records"].get("lesson", {}).get("candidate", 0) >= count + diff,
                       300, 0.2, "the fresh node's full transfer")
            full_seconds = time.monotonic() - t0
            full = fresh.get("/v1/sync")["last"][a.peer_id]
        finally:
            cluster.close()
    diff_bytes = sum(s["bytes_sent"] + s["bytes_received"] for s in sessions)
    reconcile_bytes = sum(s["reconcile_bytes"] for s in sessions)
    full_bytes = full["bytes_sent"] + full["bytes_received"]
    return {
        "records_per_store": count + diff // 2, "differing": diff, "record_bytes_total": total_bytes,
        "diff_sync": {"bytes": diff_bytes, "reconcile_bytes": reconcile_bytes, "seconds": round(diff_seconds, 2),
                      "sessions": len(sessions), "received": sum(s["received"] for s in sessions)},
        "full_transfer": {"bytes": full_bytes, "reconcile_bytes": full["reconcile_bytes"],
                          "received": full["received"], "seconds": round(full_seconds, 2),
                          "records_per_s": round(full["received"] / max(full_seconds, 1e-9))},
        "ratio_vs_full_transfer": round(diff_bytes / full_bytes, 5),
        "ratio_vs_record_bytes": round(diff_bytes / total_bytes, 5),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--diff", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--skip-network", action="store_true", help="only the in-memory sync costs")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    out: dict = {}
    sample = make_records(200, 9)
    mean_record = sum(len(d) for d in sample) / len(sample)
    print("sync cost in memory ...", file=sys.stderr)
    out["sync_in_memory"] = {"mean_record_bytes": round(mean_record, 1), "rows": in_memory_costs(mean_record)}
    if not args.skip_network:
        print(f"revocation, N={args.nodes} ...", file=sys.stderr)
        out["revocation"] = revocation_rounds(args.nodes, args.rounds, rng)
        print(f"sync cost between processes, {args.records} records differing in {args.diff} ...",
              file=sys.stderr)
        out["sync_network"] = network_costs(args.records, args.diff)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    mem = out["sync_in_memory"]
    print(f"sync in memory (mean record {mem['mean_record_bytes']} bytes):")
    print(f"{'set':>8} {'diff':>6} {'rounds':>7} {'bytes':>9} {'ms':>8} {'vs all ids':>11} {'vs all records':>15}")
    for row in mem["rows"]:
        print(f"{row['set']:>8} {row['diff']:>6} {row['rounds']:>7} {row['bytes']:>9} {row['ms']:>8} "
              f"{row['vs_all_ids']:>11.2%} {row['vs_all_records']:>15.3%}")
    if "revocation" in out:
        rv = out["revocation"]
        lat = rv["revoked_everywhere_s"]
        print(f"revocation, N={rv['nodes']}, {rv['rounds']} rounds: every online node in p50 {lat['p50']} s, "
              f"p99 {lat['p99']} s, max {lat['max']} s (target 2 s: {'met' if lat['max'] <= 2 else 'MISSED'})")
        rj = rv["rejoin_s"]
        print(f"rejoin: caught up {rj['from_start']} s after its start, {rj['from_api_up']} s after its API was up "
              f"(via {', '.join(rv['rejoin_revocations_via'])}; target 30 s: "
              f"{'met' if rj['from_start'] <= 30 else 'MISSED'})")
        net = out["sync_network"]
        d, f = net["diff_sync"], net["full_transfer"]
        print(f"sync between processes, {net['records_per_store']} records each, {net['differing']} differing: "
              f"{d['bytes']} bytes in {d['sessions']} sessions ({d['reconcile_bytes']} reconciling), {d['seconds']} s")
        print(f"  full transfer baseline (a fresh node, same run): {f['bytes']} bytes, {f['received']} records "
              f"in {f['seconds']} s ({f['records_per_s']} records/s)")
        print(f"  ratio {net['ratio_vs_full_transfer']:.3%} of the full transfer, {net['ratio_vs_record_bytes']:.3%} "
              f"of the records' bytes (target < 5 %: {'met' if net['ratio_vs_full_transfer'] < 0.05 else 'MISSED'})")


if __name__ == "__main__":
    main()
