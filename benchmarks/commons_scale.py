#!/usr/bin/env python3
"""The commons on 20 real node processes on loopback: how fast a lesson reaches every node, and
how fast a revocation does (with the lesson derived from the revoked one), against a baseline
measured in the same run.

    python benchmarks/commons_scale.py [--nodes 20] [--lessons 20] [--rounds 5] [--json]

N ``openmemory-node`` processes (tests/node/harness.py), a random connected graph (each node
bootstraps from up to two earlier ones, as in benchmarks/gossip.py). Readiness is what the nodes
report: the run waits, polling ``GET /v1/status``, until every node has a peer in its mesh for
the lesson and revocation topics (bounded by ``--ready-timeout``, generous: mesh formation at
20 nodes is slow on a loaded machine, and its time is printed).

1. **Lesson propagation.** ``--lessons`` lessons published one at a time from random nodes. For
   each node, the time from the lesson's arrival in the publisher's store to its arrival in that
   node's store (every store stamps ``arrived`` with the same machine clock): p50 and p99 over
   every (lesson, node); and per lesson the time until *every* node has it: p50, p99.
2. **Revocation reach.** ``--rounds`` rounds: a lesson from one node, a lesson derived from it
   from another; once every node holds both, the first author revokes the first. The time from
   the revocation's arrival in the author's store until every node's store shows the lesson
   ``revoked`` (``status_changed``), and until every node shows the derived lesson revoked too
   (the closure over ``derived_from``): p50 and max over rounds, and p50/p99 over every node.
3. **Baseline, same run, same topology.** Bare py-libp2p processes with the same GossipSub
   parameters and no validation, no store (benchmarks/gossip.py): publish to every node. The
   ratios say what the node's validation, store and commons cost on top of gossip itself, and
   what a revocation costs beyond a lesson.

The machine is shared and busy: the figures are indicative; the ratios are the comparable part.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gossip import BENCH_CONFIG, bare_latency, percentile, topology  # noqa: E402
from revocation import revoked_at, store_rows  # noqa: E402
from tests.node.harness import Cluster, Node, wait_until  # noqa: E402

TOPICS = ("/openmemory/1/lesson", "/openmemory/1/revocation")


def start(cluster: Cluster, n: int, edges: list[list[int]], ready_timeout: float) -> tuple[list[Node], float]:
    nodes: list[Node] = []
    for i in range(n):
        node = cluster.node(extra_config=BENCH_CONFIG, log_level="warning")
        node.init([nodes[j].multiaddr for j in edges[i]])
        nodes.append(node)
    t0 = time.monotonic()
    for node in nodes:
        node.start(wait=False)
    for node in nodes:
        node.wait_ready(timeout=ready_timeout)

    def meshed() -> bool:
        for node in nodes:
            mesh = node.status()["gossip"]["mesh"]
            if any(mesh.get(topic, 0) < 1 for topic in TOPICS):
                return False
        return True

    wait_until(meshed, ready_timeout, 0.5, "every node with a mesh peer on the lesson and revocation topics")
    return nodes, time.monotonic() - t0


def arrived(node: Node, rid: str) -> float:
    return node.get(f"/v1/records/{rid}")["arrived"]


def propagate(nodes: list[Node], count: int, rng: random.Random, timeout: float) -> dict:
    per_node: list[float] = []
    everywhere: list[float] = []
    for i in range(count):
        origin = nodes[rng.randrange(len(nodes))]
        rid = origin.publish(f'`make bench` failed: "run {i}: the cache was cold ({rng.random():.6f})".', kind="error")["id"]
        wait_until(lambda: all(n.has(rid) for n in nodes), timeout, 0.05, "a lesson on every node")
        start_t = arrived(origin, rid)
        lags = [arrived(n, rid) - start_t for n in nodes if n is not origin]
        per_node += lags
        everywhere.append(max(lags))
    return {"lessons": count,
            "per_node_s": {"p50": percentile(per_node, 0.5), "p99": percentile(per_node, 0.99)},
            "every_node_s": {"p50": percentile(everywhere, 0.5), "p99": percentile(everywhere, 0.99),
                             "max": max(everywhere)}}


def revocations(nodes: list[Node], rounds: int, rng: random.Random, timeout: float) -> dict:
    root_all, derived_all, root_every, derived_every = [], [], [], []
    for r in range(rounds):
        author, second = rng.sample(nodes, 2)
        root = author.publish(f'`make deploy` failed: "round {r}: the cache was cold".', kind="error")["id"]
        derived = second.publish(f'`make deploy` failed: "round {r}: the cache was cold after a runner restart".', kind="error",
                                 derived_from=[root])["id"]
        wait_until(lambda: all(n.has(root) and n.has(derived) for n in nodes), timeout, 0.05, "both on every node")
        rev = author.post("/v1/revoke", {"id": root, "reason_code": "incorrect"})["id"]
        t0 = arrived(author, rev)
        wait_until(lambda: all(revoked_at(n, [root, derived]) for n in nodes), timeout, 0.1,
                   "both revoked on every node")
        rows = [store_rows(n) for n in nodes]
        root_lags = [row[root][1] - t0 for row in rows]
        derived_lags = [row[derived][1] - t0 for row in rows]
        root_all += root_lags
        derived_all += derived_lags
        root_every.append(max(root_lags))
        derived_every.append(max(derived_lags))
        print(f"  round {r}: revoked on every node in {max(root_lags):.3f} s, the derived lesson in "
              f"{max(derived_lags):.3f} s", file=sys.stderr)
    return {
        "rounds": rounds,
        "lesson_revoked_every_node_s": {"p50": percentile(root_every, 0.5), "max": max(root_every)},
        "derived_revoked_every_node_s": {"p50": percentile(derived_every, 0.5), "max": max(derived_every)},
        "lesson_revoked_per_node_s": {"p50": percentile(root_all, 0.5), "p99": percentile(root_all, 0.99)},
        "derived_revoked_per_node_s": {"p50": percentile(derived_all, 0.5), "p99": percentile(derived_all, 0.99)},
    }


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--lessons", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--ready-timeout", type=float, default=300.0, help="seconds for the mesh to form")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per lesson or revocation")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    edges = topology(args.nodes, rng)
    out: dict = {"nodes": args.nodes, "topology": edges}
    with tempfile.TemporaryDirectory(prefix=f"om-commons-{args.nodes}-") as tmp:
        cluster = Cluster(Path(tmp))
        try:
            print(f"starting {args.nodes} nodes ...", file=sys.stderr)
            nodes, formed = start(cluster, args.nodes, edges, args.ready_timeout)
            out["mesh_formed_s"] = formed
            print(f"  meshed in {formed:.1f} s", file=sys.stderr)
            propagate(nodes, 2, rng, args.timeout)  # warm-up, not measured
            out["propagation"] = propagate(nodes, args.lessons, rng, args.timeout)
            print(f"  propagation: {out['propagation']}", file=sys.stderr)
            out["revocation"] = revocations(nodes, args.rounds, rng, args.timeout)
        finally:
            cluster.close()
    if not args.no_baseline:
        print("bare py-libp2p baseline, same topology ...", file=sys.stderr)
        try:
            bare = bare_latency(args.nodes, edges, args.lessons, rng)
            out["bare_libp2p_every_node_s"] = {"p50": percentile(bare, 0.5), "p99": percentile(bare, 0.99),
                                               "max": max(bare)}
        except TimeoutError as exc:
            print(f"  the baseline failed: {exc}", file=sys.stderr)
    p, rv = out["propagation"], out["revocation"]
    ratios = {"revocation_vs_lesson_every_node_p50":
              rv["lesson_revoked_every_node_s"]["p50"] / p["every_node_s"]["p50"],
              "derived_vs_lesson_every_node_p50": rv["derived_revoked_every_node_s"]["p50"] / p["every_node_s"]["p50"]}
    if "bare_libp2p_every_node_s" in out:
        bare_p50 = out["bare_libp2p_every_node_s"]["p50"]
        ratios["lesson_vs_bare_libp2p_every_node_p50"] = p["every_node_s"]["p50"] / bare_p50
    out["ratios"] = ratios
    out = _rounded(out)
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{args.nodes} node processes on loopback, mesh formed in {out['mesh_formed_s']:.1f} s (busy 2-core machine: "
          f"indicative figures)")
    print(f"lesson propagation ({p['lessons']} lessons): per node p50 {p['per_node_s']['p50']:.3f} s, "
          f"p99 {p['per_node_s']['p99']:.3f} s; to every node p50 {p['every_node_s']['p50']:.3f} s, "
          f"p99 {p['every_node_s']['p99']:.3f} s")
    print(f"revocation ({rv['rounds']} rounds): lesson revoked on every node p50 "
          f"{rv['lesson_revoked_every_node_s']['p50']:.3f} s (max {rv['lesson_revoked_every_node_s']['max']:.3f}); "
          f"the derived lesson p50 {rv['derived_revoked_every_node_s']['p50']:.3f} s "
          f"(max {rv['derived_revoked_every_node_s']['max']:.3f}); per node p99 "
          f"{rv['lesson_revoked_per_node_s']['p99']:.3f} s")
    if "bare_libp2p_every_node_s" in out:
        b = out["bare_libp2p_every_node_s"]
        print(f"baseline, bare py-libp2p, same topology: to every node p50 {b['p50']:.3f} s, p99 {b['p99']:.3f} s")
    print("ratios: " + ", ".join(f"{k} {v:.2f}" for k, v in out["ratios"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
