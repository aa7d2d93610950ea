"""Domains at scale: what following only its agent's domains does to a node's traffic and store,
and whether a small domain's topic holds together, at 1,000 to 10,000 nodes.

    python -m simulations.domains_des --nodes 10000 [--seed S] [--days 30] [--json]

A MODEL, not a measurement. Assumed (named in the output): which domains an agent's projects
touch (:data:`POPULARITY`: each node follows each domain independently with that probability,
``general`` always), how many lessons a node publishes a day (``lessons_per_node_day``), how
many attestations a lesson draws (``attestations_per_lesson``, every one in its lesson's
domains), the record size (``record_bytes``), GossipSub's duplication (each node receives a
message about ``degree`` times in a topic's mesh) and the overlay (a random regular graph of
``2 * degree`` connections per node, as in :mod:`simulations.commons_des`, whose
:func:`regular_graph` it uses). Not assumed: a lesson's domains come from the project's rule,
:func:`openmemory_protocol.domains.domains_of`, applied to claims whose situation is drawn
from the author's domains' programs.

Two questions:

1. **Traffic and store.** Records a node receives (unique and with the mesh's duplicates) and
   stores per day, when a node takes every topic (follows every domain) and when it follows only its
   domains and ``general``.
2. **Does a domain's topic hold together?** A topic's mesh forms among the topic's subscribers
   among a node's *connections*. With random connections, the followers of a domain followed
   by few nodes are mostly not connected to each other: the share of its followers in the
   largest connected group of followers is the share a record published there can reach by
   gossip. The remedy modelled: a rendezvous namespace per domain (``openmemory/1/<domain>``),
   where a follower whose connections hold fewer than ``degree_low`` followers of that domain
   (its topic mesh would be thin) finds ``per_domain_peers`` other followers and connects.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import asdict, dataclass
from typing import Any

from openmemory_protocol.claims import Claim
from openmemory_protocol.domains import DOMAINS, GENERAL, _TABLE, domains_of

from .commons_des import regular_graph

MODEL_NOTE = ("a model: domain popularity, publishing and attestation rates, record size and the overlay are "
              "assumptions; a lesson's domains come from the project's own rule (domains_of) on its claim")

#: share of nodes whose agent's projects touch each domain (an assumption)
POPULARITY = {"git": 0.9, "python": 0.45, "node": 0.45, "containers": 0.3, "go": 0.12, "rust": 0.1,
              "c": 0.1, "jvm": 0.1, "ruby": 0.05, "dotnet": 0.04, "terraform": 0.04}


@dataclass(frozen=True)
class DomainModel:
    nodes: int = 10000
    seed: int = 1
    days: int = 30
    degree: int = 6
    degree_low: int = 4
    lessons_per_node_day: float = 0.2
    attestations_per_lesson: float = 5.0
    record_bytes: int = 600
    general_share: float = 0.1  # of lessons whose claim names no known ecosystem
    per_domain_peers: int = 4


def _claim_for(domain: str, rng: random.Random) -> Claim:
    if domain == GENERAL:
        return Claim(situation=rng.choice(["Read", "Edit", "frobnicate"]), failure="error: failed")
    program = rng.choice(_TABLE[domain].split())
    return Claim(situation=f"{program} run", failure="error: failed")


def _largest_share(members: list[int], adj: list[set[int]]) -> float:
    """Share of ``members`` in the largest connected group of the graph induced on them."""
    inside = set(members)
    seen: set[int] = set()
    best = 0
    for start in members:
        if start in seen:
            continue
        stack, size = [start], 0
        seen.add(start)
        while stack:
            v = stack.pop()
            size += 1
            for w in adj[v]:
                if w in inside and w not in seen:
                    seen.add(w)
                    stack.append(w)
        best = max(best, size)
    return best / len(members) if members else 0.0


def run(m: DomainModel) -> dict[str, Any]:
    rng = random.Random(m.seed)
    follows = [{GENERAL} | {d for d, p in POPULARITY.items() if rng.random() < p} for _ in range(m.nodes)]
    # lessons of one day: each from a random node, about one of its domains (general at general_share)
    lessons = round(m.nodes * m.lessons_per_node_day)
    per_domain: dict[str, float] = {d: 0.0 for d in DOMAINS}
    for _ in range(lessons):
        author = rng.randrange(m.nodes)
        own = sorted(follows[author] - {GENERAL})
        domain = GENERAL if (not own or rng.random() < m.general_share) else rng.choice(own)
        for d in domains_of(_claim_for(domain, rng)):
            per_domain[d] += 1.0
    records_day = {d: n * (1 + m.attestations_per_lesson) for d, n in per_domain.items()}
    everything = sum(records_day.values())
    received = sorted(sum(records_day[d] for d in f) for f in follows)

    def pct(values: list[float], q: float) -> float:
        return values[min(len(values) - 1, int(q * len(values)))]

    traffic = {
        "all_topics": {"records_per_day": round(everything), "copies_per_day": round(everything * m.degree),
                       "mb_per_day": round(everything * m.degree * m.record_bytes / 1e6, 2),
                       "store_mb_after_days": round(everything * m.days * m.record_bytes / 1e6, 1)},
        "followed_domains": {
            "records_per_day_median": round(pct(received, 0.5)), "records_per_day_p90": round(pct(received, 0.9)),
            "mb_per_day_median": round(pct(received, 0.5) * m.degree * m.record_bytes / 1e6, 2),
            "store_mb_after_days_median": round(pct(received, 0.5) * m.days * m.record_bytes / 1e6, 1),
            "share_of_all_median": round(pct(received, 0.5) / everything, 3),
            "topics_followed_median": sorted(len(f) for f in follows)[m.nodes // 2],
        },
    }
    # overlay: random connections; then per-domain rendezvous connections
    base = [set(a) for a in regular_graph(m.nodes, 2 * m.degree, rng)]
    with_rdv = [set(a) for a in base]
    cohesion = {}
    for d in DOMAINS:
        members = [i for i, f in enumerate(follows) if d in f]
        random_share = _largest_share(members, base)
        inside = set(members)
        for i in members:
            # a node looks a domain up only while its topic mesh would be thin: fewer than
            # degree_low connected followers (GossipSub's D_low, 4)
            if sum(1 for j in base[i] if j in inside) >= m.degree_low:
                continue
            for j in rng.sample(members, min(m.per_domain_peers, len(members) - 1)):
                if j != i:
                    with_rdv[i].add(j)
                    with_rdv[j].add(i)
        cohesion[d] = {"followers": len(members), "share": round(len(members) / m.nodes, 3),
                       "records_per_day": round(records_day[d]),
                       "reachable_random_overlay": round(random_share, 3)}
    for d in DOMAINS:
        members = [i for i, f in enumerate(follows) if d in f]
        cohesion[d]["reachable_with_domain_rendezvous"] = round(_largest_share(members, with_rdv), 3)
    extra = sum(len(a) for a in with_rdv) / m.nodes - sum(len(a) for a in base) / m.nodes
    return {"model": MODEL_NOTE, "config": asdict(m), "popularity": POPULARITY, "traffic": traffic,
            "topics": cohesion, "extra_connections_per_node": round(extra, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.domains_des", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=DomainModel.nodes)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--days", type=int, default=DomainModel.days)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.nodes < 20:
        parser.error("--nodes must be at least 20")
    result = run(DomainModel(nodes=args.nodes, seed=args.seed, days=args.days))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"# {result['model']}")
    t = result["traffic"]
    print(f"every topic: {t['all_topics']}")
    print(f"followed domains: {t['followed_domains']}")
    print("domain      followers  records/day  reachable(random)  reachable(rendezvous per domain)")
    for d, row in result["topics"].items():
        print(f"{d:11} {row['followers']:9}  {row['records_per_day']:11}  {row['reachable_random_overlay']:17}  "
              f"{row['reachable_with_domain_rendezvous']}")
    print(f"extra connections per node for per-domain rendezvous: {result['extra_connections_per_node']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
