"""The commons at scale: a discrete-event model of 1,000 to 10,000 nodes that runs the project's
own commons state machine (``openmemory_node.commons``: :class:`Commons`, the ``open`` and
``trusted`` policies, imported, never copied) on real signed records (``openmemory_node.wire``).

    python -m simulations.commons_des --nodes 1000 --out DIR [--seed S] [--json]

A MODEL, not a measurement: the network, the churn and the sybils below are assumptions, named
as such in every output. What is not assumed is what a node does with the records it holds:
that is the real code.

Part 1, PROPAGATION AND REVOCATION (every node runs its own ``Commons``).
  Network: each node keeps a GossipSub mesh of ``degree`` peers (a random regular graph) and as
  many other connections for lazy gossip. A record a node accepts is forwarded at once to its
  mesh peers (eager push) and announced at its next heartbeat (1 s) to ``degree`` non-mesh
  peers, which ask for it if they lack it (IHAVE/IWANT: three one-way trips). Each link has a
  one-way latency drawn once (log-normal, median ``latency_ms``), each message on it a jitter.
  Each hop costs the receiving node the time the real code takes to validate the record
  (``wire.validate``: schema, signature, observation rule) and add it to a ``Commons``,
  measured in the same run. Churn: each node is online for exponential periods (mean
  ``online_hours``) and offline for others (mean ``offline_hours``); an offline node receives
  nothing; when it comes back it runs a sync session with an online peer after
  ``connect_delay`` and gets every record that peer holds; a node online that still lacks a
  record (its peers were offline) gets it at its next periodic sync (every ``sync_interval``).
  The drill: ``lessons`` lessons from random online nodes (their reach to 50 % and 99 % of the
  nodes online when they were published), one lesson derived from the first, then its author
  revokes the first: how long until every node that was online at that moment shows both
  revoked (its own ``Commons`` says ``revoked``), and how long a node that was offline takes
  after it comes back.

Part 2, THE SYBIL CURVE (the state machine on a sample of honest nodes, ``observers``).
  A share of all keys are sybils of one attacker. The attacker publishes ``false_lessons``;
  every sybil key attests each of them ``confirmed`` within two days, and (strategy
  ``attest+vouch``) vouches for the next two sybil keys, so that one trusted sybil brings two
  more (a vouch is one hop). Honest authors publish ``true_lessons``. Each honest node attests
  each lesson with probability ``attest_share`` over the following three weeks: a true lesson
  ``confirmed`` with probability 0.9 (``failed`` otherwise), a false one ``failed`` with
  probability ``honest_detect`` (fooled otherwise); with probability ``met_before_share`` it
  had met the surprise itself (``met_before``). Each honest node trusts ``trust_size`` keys:
  honest colleagues, except that each entry is, with probability ``trust_mistake``, a key
  picked at random from everyone (a sybil with the sybil share's probability). At day 30, for
  each observer and each policy, a ``Commons`` holding the records that node holds (all but
  those published while it was offline at the end) says which lessons are common and which
  ever were (its transition history): *falsely promoted* = a false lesson that was common at
  some point.
  One reduction, exact by the rules and checked in the tests: a vouch takes effect only when
  its voucher is in the node's own trust list (R8), so an observer's ``Commons`` is fed only the
  vouches whose voucher it lists (the others cannot change any lesson's or attestation's status;
  feeding them costs the state machine O(vouches^2)). Everything else the node holds is fed.

Writes to DIR: ``summary.json``, ``reach.png`` (the share of nodes holding the lesson and
showing it revoked, over time), ``sybil_curve.png`` (false promotions per policy against the
sybil share).
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import math
import random
import sys
import time
from bisect import bisect_right
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nacl.signing
import numpy as np

from openmemory_node import wire
from openmemory_node.commons import COMMON, REVOKED, Commons, CommonsConfig

__all__ = ["ModelConfig", "Network", "propagation", "sybil_curve", "run", "main", "MODEL_NOTE"]

MODEL_NOTE = ("a model: the network, churn and sybils are assumptions; each node's statuses come from the "
              "project's own Commons state machine on real signed records")
T0 = 1_780_000_000  # the records' clock (seconds): any fixed epoch
DAY = 86400


@dataclass(frozen=True)
class ModelConfig:
    nodes: int = 1000
    seed: int = 1
    # network
    degree: int = 6
    latency_ms: float = 50.0  # median one-way link latency
    latency_sigma: float = 0.5  # log-normal spread of link latencies
    jitter_sigma: float = 0.2  # per-message spread on a link
    heartbeat_s: float = 1.0
    # churn
    online_hours: float = 8.0
    offline_hours: float = 1.0
    connect_delay_s: float = 0.5
    sync_interval_s: float = 30.0
    # the drill
    lessons: int = 5
    horizon_hours: float = 12.0  # how long after the revocation offline nodes are followed
    # the sybil curve
    sybil_shares: tuple[float, ...] = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
    strategies: tuple[str, ...] = ("attest", "attest+vouch")
    observers: int = 100
    false_lessons: int = 3
    true_lessons: int = 3
    attest_share: float = 0.05
    honest_detect: float = 0.9
    met_before_share: float = 0.2
    trust_size: int = 50
    trust_mistake: float = 0.02
    threshold: int = 3

    def __post_init__(self) -> None:
        if self.nodes < 20:
            raise ValueError("--nodes must be at least 20")
        if not 2 <= self.degree < self.nodes:
            raise ValueError("the mesh degree must be at least 2 and below the node count")
        if any(not 0.0 <= s < 1.0 for s in self.sybil_shares):
            raise ValueError("sybil shares are between 0 (included) and 1 (excluded)")
        if self.observers < 1 or self.lessons < 1:
            raise ValueError("at least one observer and one lesson")
        unknown = set(self.strategies) - {"attest", "attest+vouch"}
        if unknown:
            raise ValueError(f"unknown strategies {sorted(unknown)} (known: attest, attest+vouch)")

    @property
    def availability(self) -> float:
        return self.online_hours / (self.online_hours + self.offline_hours)


def _key(label: str) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(hashlib.sha256(label.encode()).digest())


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, as benchmarks/gossip.py's);
    infinite (never reached) when the rank falls on a node that was never reached."""
    if not len(values):
        return float("nan")
    ordered = np.sort(np.asarray(values, dtype=float))
    rank = (len(ordered) - 1) * q
    lo, hi = math.floor(rank), math.ceil(rank)
    if np.isinf(ordered[hi]):
        return math.inf
    return float(np.interp(rank, (lo, hi), (ordered[lo], ordered[hi])))


# -- the network ----------------------------------------------------------------------------------

def regular_graph(n: int, d: int, rng: random.Random) -> list[list[int]]:
    """A random d-regular-ish graph (configuration model; self-loops and doubles dropped)."""
    stubs = [i for i in range(n) for _ in range(d)]
    rng.shuffle(stubs)
    adj: list[set[int]] = [set() for _ in range(n)]
    for a, b in zip(stubs[::2], stubs[1::2]):
        if a != b:
            adj[a].add(b)
            adj[b].add(a)
    for i in range(n):  # no node left without a peer
        while len(adj[i]) < 2:
            j = rng.randrange(n)
            if j != i:
                adj[i].add(j)
                adj[j].add(i)
    return [sorted(s) for s in adj]


class Churn:
    """Each node's online intervals over [0, end): alternating exponential periods."""

    def __init__(self, n: int, end: float, cfg: ModelConfig, rng: random.Random):
        on, off = cfg.online_hours * 3600, cfg.offline_hours * 3600
        self.changes: list[list[float]] = []  # per node: times its state flips
        self.initially: list[bool] = []
        for _ in range(n):
            online = rng.random() < cfg.availability
            self.initially.append(online)
            t, flips = 0.0, []
            # the first period is a residual life: exponential again (memoryless)
            while t < end:
                t += rng.expovariate(1.0 / (on if online else off))
                if t < end:
                    flips.append(t)
                online = not online
            self.changes.append(flips)

    def online(self, node: int, t: float) -> bool:
        k = bisect_right(self.changes[node], t)
        return self.initially[node] ^ (k % 2 == 1)

    def next_online(self, node: int, t: float) -> float | None:
        """The first time >= t the node is online (t itself if it is)."""
        if self.online(node, t):
            return t
        k = bisect_right(self.changes[node], t)
        flips = self.changes[node]
        return flips[k] if k < len(flips) else None

    def offline_at_end(self, node: int, end: float) -> float | None:
        """When the node's last offline period began, if it is offline at ``end``."""
        if self.online(node, end):
            return None
        k = bisect_right(self.changes[node], end)
        return self.changes[node][k - 1] if k > 0 else 0.0


@dataclass
class Network:
    cfg: ModelConfig
    mesh: list[list[int]]
    lazy: list[list[int]]
    base: dict[tuple[int, int], float]
    phase: list[float]  # heartbeat and sync phases
    churn: Churn

    @classmethod
    def build(cls, cfg: ModelConfig, end: float, rng: random.Random) -> "Network":
        n = cfg.nodes
        mesh = regular_graph(n, cfg.degree, rng)
        lazy = regular_graph(n, cfg.degree, rng)
        lazy = [[j for j in lazy[i] if j not in set(mesh[i])] for i in range(n)]
        mu = math.log(cfg.latency_ms / 1000.0)
        base: dict[tuple[int, int], float] = {}
        for i in range(n):
            for j in mesh[i] + lazy[i]:
                edge = (i, j) if i < j else (j, i)
                if edge not in base:
                    base[edge] = rng.lognormvariate(mu, cfg.latency_sigma)
        phase = [rng.random() for _ in range(n)]
        return cls(cfg, mesh, lazy, base, phase, Churn(n, end, cfg, rng))

    def latency(self, i: int, j: int, rng: random.Random) -> float:
        return self.base[(i, j) if i < j else (j, i)] * rng.lognormvariate(0.0, self.cfg.jitter_sigma)


# -- part 1: propagation and revocation, every node its own Commons ------------------------------

DELIVER, IHAVE, SYNC, PUBLISH, SWEEP = 0, 1, 2, 3, 4
_SWEEP_AFTER_S = 10.0  # after a record's gossip wave, online nodes still without it wait for their periodic sync


def hop_cost(samples: int = 200) -> float:
    """Seconds the real code takes per received record: ``wire.validate`` (all checks) and
    ``Commons.add``, averaged over a lesson, an attestation and a revocation."""
    author, other = _key("cost-author"), _key("cost-other")
    lesson = wire.new_lesson(author, text="The deploy failed when the cache was cold.", kind="error",
                             strength=1000, provenance=bytes(32), derived_from=[], created=T0)
    att = wire.new_attestation(other, lesson_id=lesson.id, verdict="confirmed", met_before=False,
                               evidence={"sessions": 3, "matched": 1, "window": 14 * DAY}, created=T0 + 60)
    rev = wire.new_revocation(author, target=lesson.id, reason_code="incorrect", reason="", created=T0 + 120)
    blobs = [wire.encode(r) for r in (lesson, att, rev)]
    started = time.perf_counter()
    for _ in range(samples):
        machine = Commons()
        for data in blobs:
            machine.add(wire.validate(data, now=T0 + 600))
    return (time.perf_counter() - started) / (samples * len(blobs))


def propagation(cfg: ModelConfig, progress=None) -> dict:
    """Part 1 (see the module docstring). Returns the figures and the curves to plot."""
    rng = random.Random(f"des-{cfg.seed}")
    n = cfg.nodes
    publish_at = 600.0  # seconds into the run: the lessons, 20 s apart
    revoke_at = publish_at + 20.0 * (cfg.lessons + 2) + 60.0
    end = revoke_at + cfg.horizon_hours * 3600
    started = time.perf_counter()
    net = Network.build(cfg, end, rng)
    cost = hop_cost()
    machines = [Commons() for _ in range(n)]
    built = time.perf_counter() - started

    # The records: lessons from random online nodes, one derived from the first, its revocation.
    online_at = lambda t: [i for i in range(n) if net.churn.online(i, t)]  # noqa: E731
    records: list[Any] = []
    sources: list[tuple[float, int]] = []
    authors = rng.sample(online_at(publish_at), cfg.lessons + 1)
    keys = {i: _key(f"des-{cfg.seed}-node-{i}") for i in authors}
    for k in range(cfg.lessons):
        t = publish_at + 20.0 * k
        rec = wire.new_lesson(keys[authors[k]], text=f"The build step {k} failed when the cache was cold.",
                              kind="error", strength=1000, provenance=bytes(32), derived_from=[],
                              created=T0 + int(t))
        records.append(rec)
        sources.append((t, authors[k]))
    derived_t = publish_at + 20.0 * cfg.lessons
    derived = wire.new_lesson(keys[authors[-1]], text="The cache was cold after a runner restart.", kind="error",
                              strength=1000, provenance=bytes(32), derived_from=[records[0].id],
                              created=T0 + int(derived_t))
    records.append(derived)
    sources.append((derived_t, authors[-1]))
    author0 = authors[0]
    if not net.churn.online(author0, revoke_at):  # the author revokes when it is online
        revoke_at = net.churn.next_online(author0, revoke_at) or revoke_at
    revocation = wire.new_revocation(keys[author0], target=records[0].id, reason_code="incorrect",
                                     reason="", created=T0 + int(revoke_at))
    records.append(revocation)
    sources.append((revoke_at, author0))
    blobs = [wire.encode(r) for r in records]
    decoded = [wire.validate(b, now=T0 + int(end) + 1) for b in blobs]  # what every node accepts
    R = len(records)
    have = [[math.inf] * n for _ in range(R)]
    revoked_at = {records[0].id: [math.inf] * n, derived.id: [math.inf] * n}
    watch = list(revoked_at)

    heap: list[tuple[float, int, int, int, int, int]] = []
    seq = 0

    def push(t: float, kind: int, node: int, r: int, sender: int = -1) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (t, seq, kind, node, r, sender))

    for r, (t, node) in enumerate(sources):
        push(t, PUBLISH, node, r)
        push(t + _SWEEP_AFTER_S, SWEEP, -1, r)
    for i in range(n):  # reconnections: each one starts a sync session
        for k, flip in enumerate(net.churn.changes[i]):
            if net.churn.initially[i] ^ (k % 2 == 0):  # this flip brings the node online
                if flip >= publish_at - 60:
                    push(flip + cfg.connect_delay_s, SYNC, i, -1)
    counts = {"deliveries": 0, "duplicates": 0, "lost_offline": 0, "ihave": 0, "syncs": 0, "synced_records": 0}
    online = net.churn.online
    hb = cfg.heartbeat_s

    def accept(node: int, r: int, t: float) -> None:
        have[r][node] = t
        changes = machines[node].add(decoded[r])
        for lid in watch:
            if changes.get(lid) == REVOKED:
                revoked_at[lid][node] = t

    def forward(node: int, r: int, ready: float, sender: int) -> None:
        for peer in net.mesh[node]:
            if peer != sender:
                push(ready + net.latency(node, peer, rng), DELIVER, peer, r, node)
        beat = math.floor((ready - net.phase[node]) / hb + 1) * hb + net.phase[node]
        for peer in net.lazy[node]:
            push(beat + net.latency(node, peer, rng), IHAVE, peer, r, node)

    steps = 0
    while heap:
        t, _, kind, node, r, sender = heapq.heappop(heap)
        steps += 1
        if kind == PUBLISH:
            if not online(node, t):  # an author publishes once it is online
                up = net.churn.next_online(node, t)
                if up is not None:
                    push(up, PUBLISH, node, r)
            elif have[r][node] == math.inf:
                accept(node, r, t)
                forward(node, r, t, -1)
        elif kind == SWEEP:
            for i in range(n):
                if have[r][i] == math.inf and online(i, t):
                    tick = math.ceil((t - net.phase[i] * cfg.sync_interval_s) / cfg.sync_interval_s)
                    push(tick * cfg.sync_interval_s + net.phase[i] * cfg.sync_interval_s, SYNC, i, -1)
        elif kind == DELIVER:
            if not online(node, t):
                counts["lost_offline"] += 1
            elif have[r][node] != math.inf:
                counts["duplicates"] += 1
            else:
                counts["deliveries"] += 1
                accept(node, r, t + cost)
                forward(node, r, t + cost, sender)
        elif kind == IHAVE:
            counts["ihave"] += 1
            if online(node, t) and have[r][node] == math.inf and online(sender, t):
                # IWANT back, then the record: two more one-way trips
                push(t + 2 * net.latency(node, sender, rng), DELIVER, node, r, sender)
        elif kind == SYNC:
            if not online(node, t):
                continue
            peers = [p for p in net.mesh[node] + net.lazy[node] if online(p, t)]
            if not peers:
                push(t + cfg.sync_interval_s, SYNC, node, -1)
                continue
            peer = rng.choice(peers)
            rtt = 2 * net.latency(node, peer, rng)
            counts["syncs"] += 1
            missing = [q for q in range(R) if have[q][node] == math.inf and have[q][peer] <= t]
            for q in missing:  # stored; a synced record is not forwarded by gossip
                counts["synced_records"] += 1
                accept(node, q, t + rtt + cost)
            published = [q for q in range(R) if sources[q][0] <= t]
            if any(have[q][node] == math.inf for q in published):
                push(t + cfg.sync_interval_s, SYNC, node, -1)  # still missing: the periodic session
        if progress and steps % 500_000 == 0:
            progress(f"  {steps:,} events, t = {t:,.0f} s")
    simulated = time.perf_counter() - started

    def reach(r: int) -> dict:
        t0, src = sources[r]
        base = [i for i in range(n) if i != src and online(i, t0)]
        stayed = [i for i in base if online(i, t0 + 120)]  # still online two minutes later
        lags = [have[r][i] - t0 for i in stayed]
        reached = [x for x in lags if x < math.inf]
        return {"online_at_publish": len(base), "followed": len(stayed), "reached_within_120s": len(
            [x for x in reached if x <= 120]) / max(1, len(stayed)),
            "t50_s": percentile(lags, 0.5), "t99_s": percentile(lags, 0.99), "t100_s": max(lags) if lags else None}

    lesson_reach = [reach(r) for r in range(cfg.lessons)]
    t_rev = sources[-1][0]
    stay = [i for i in range(n) if online(i, t_rev) and online(i, t_rev + 300)]
    offline = [i for i in range(n) if not online(i, t_rev)]
    rev = {}
    for name, lid in (("revoked", records[0].id), ("derived", derived.id)):
        lags = [revoked_at[lid][i] - t_rev for i in stay]
        back = []
        never = 0
        for i in offline:
            up = net.churn.next_online(i, t_rev)
            if up is None:
                never += 1
                continue
            back.append(revoked_at[lid][i] - up)
        rev[name] = {"every_online_node_s": max(lags) if lags else None, "p50_s": percentile(lags, 0.5),
                     "p99_s": percentile(lags, 0.99), "nodes": len(stay),
                     "offline_nodes": len(offline), "offline_back_within_horizon": len(back),
                     "offline_catch_up_after_return_s": {"p50": percentile(back, 0.5),
                                                         "max": max(back) if back else None},
                     "every_node_s": max((revoked_at[lid][i] for i in range(n) if
                                          net.churn.next_online(i, t_rev) is not None), default=math.inf) - t_rev}
    span = max(1.0, 1.5 * max((have[0][i] - sources[0][0] for i in online_at(sources[0][0]) if have[0][i] < math.inf),
                              default=1.0), 1.5 * max(rev["revoked"]["every_online_node_s"] or 0, 0))
    curve_t = [span * x / 100 for x in range(0, 101)]  # 0 .. 1.5 x the slowest online node
    online_pub = [i for i in range(n) if online(i, sources[0][0])]
    online_rev = [i for i in range(n) if online(i, t_rev)]
    curves = {
        "t_s": curve_t,
        "lesson_held": [sum(1 for i in online_pub if have[0][i] - sources[0][0] <= x) / len(online_pub)
                        for x in curve_t],
        "revoked": [sum(1 for i in online_rev if revoked_at[records[0].id][i] - t_rev <= x) / len(online_rev)
                    for x in curve_t],
        "derived_revoked": [sum(1 for i in online_rev if revoked_at[derived.id][i] - t_rev <= x) / len(online_rev)
                            for x in curve_t],
    }
    offline_curve_h = [x / 4 for x in range(0, int(cfg.horizon_hours * 4) + 1)]
    curves["all_nodes_h"] = offline_curve_h
    curves["all_nodes_revoked"] = [sum(1 for i in range(n) if revoked_at[records[0].id][i] - t_rev <= h * 3600) / n
                                   for h in offline_curve_h]
    statuses_agree = all(machines[i].status(records[0].id) == REVOKED and machines[i].status(derived.id) == REVOKED
                         for i in range(n) if have[0][i] < math.inf and have[R - 2][i] < math.inf
                         and have[R - 1][i] < math.inf)
    return {
        "nodes": n, "online_share": round(len(online_pub) / n, 3), "hop_cost_ms": round(cost * 1000, 3),
        "events": steps, "counts": counts,
        "lessons": lesson_reach,
        "lesson_t50_s": {"p50": percentile([x["t50_s"] for x in lesson_reach], 0.5),
                         "max": max(x["t50_s"] for x in lesson_reach)},
        "lesson_t99_s": {"p50": percentile([x["t99_s"] for x in lesson_reach], 0.5),
                         "max": max(x["t99_s"] for x in lesson_reach)},
        "revocation": rev,
        "every_holder_shows_revoked": statuses_agree,
        "seconds": {"build": round(built, 2), "total": round(simulated, 2)},
        "curves": curves,
    }


# -- part 2: the sybil curve -------------------------------------------------------------------

@dataclass
class _World:
    honest: list[nacl.signing.SigningKey]
    sybils: list[nacl.signing.SigningKey]
    false_lessons: list[Any]
    true_lessons: list[Any]
    honest_atts: list[Any]
    sybil_atts: list[list[Any]]  # per sybil: its attestations of the false lessons
    vouches: dict[tuple[int, int], Any] = field(default_factory=dict)  # (voucher, subject) -> vouch, signed on demand

    def vouch(self, voucher: int, subject: int) -> Any:
        key = (voucher, subject)
        if key not in self.vouches:
            self.vouches[key] = wire.new_vouch(self.sybils[voucher], subject=bytes(self.sybils[subject].verify_key),
                                               created=T0 + int(0.1 * DAY))
        return self.vouches[key]


def _sybil_world(cfg: ModelConfig, max_sybils: int, rng: random.Random) -> _World:
    n = cfg.nodes
    honest = [_key(f"sybil-{cfg.seed}-honest-{i}") for i in range(n)]
    sybils = [_key(f"sybil-{cfg.seed}-sybil-{i}") for i in range(max_sybils)]
    attacker = sybils[0] if sybils else _key("attacker")
    false_lessons = [wire.new_lesson(attacker, text=f"The test suite {k} passes only when it is run twice.",
                                     kind="error", strength=5000, provenance=bytes(32), derived_from=[],
                                     created=T0 + k * 3600) for k in range(cfg.false_lessons)]
    true_lessons = [wire.new_lesson(honest[rng.randrange(n)], text=f"The release step {k} failed when the tag existed.",
                                    kind="error", strength=2000, provenance=bytes(32), derived_from=[],
                                    created=T0 + k * 3600 + 600) for k in range(cfg.true_lessons)]
    honest_atts = []
    evidence = {"sessions": 4, "matched": 1, "window": 14 * DAY}
    for lesson, is_true in [(x, True) for x in true_lessons] + [(x, False) for x in false_lessons]:
        for i in range(n):
            if rng.random() >= cfg.attest_share or bytes(honest[i].verify_key) == lesson.signer:
                continue
            if is_true:
                verdict = "confirmed" if rng.random() < 0.9 else "failed"
            else:
                verdict = "failed" if rng.random() < cfg.honest_detect else "confirmed"
            created = lesson.created + int(rng.uniform(1, 21) * DAY)
            honest_atts.append(wire.new_attestation(
                honest[i], lesson_id=lesson.id, verdict=verdict, met_before=rng.random() < cfg.met_before_share,
                evidence=dict(evidence, matched=int(verdict == "confirmed")), created=created))
    sybil_atts = [[wire.new_attestation(key, lesson_id=lesson.id, verdict="confirmed", met_before=False,
                                        evidence=evidence, created=lesson.created + int(rng.uniform(0.2, 2) * DAY))
                   for lesson in false_lessons] for key in sybils]
    return _World(honest, sybils, false_lessons, true_lessons, honest_atts, sybil_atts)


def _ever_common(machine: Commons, lid: str) -> bool:
    history = machine.explain(lid, max_votes=0)["group"]["history"]
    return any(h["to"] == COMMON for h in history)


def reduce_for(policy: str, records: list[Any], trust: frozenset[bytes]) -> list[Any]:
    """The records that can change a lesson's status on a node with this policy and trust list;
    exact by the rules (tests/sim/test_commons_des.py compares with the full feed):

    * a vouch takes effect only if its voucher is in the trust list (R8, one hop), and it only
      moves trust, which ``open`` does not look at (R3): under ``open`` no vouch matters, under
      ``trusted`` only those of listed vouchers;
    * under ``trusted`` an attestation by a key that is neither listed nor vouched for by a
      listed key is refused (R3) and a refused vote has no effect at all (R4).
    """
    if policy == "open":
        return [r for r in records if r.record_type != "vouch"]
    vouches = [r for r in records if r.record_type == "vouch" and r.signer in trust]
    trusted = set(trust) | {bytes(v.subject) for v in vouches}
    return [r for r in records if (r.record_type == "vouch" and r.signer in trust)
            or (r.record_type == "attestation" and r.signer in trusted)
            or r.record_type not in ("vouch", "attestation")]


def observer_commons(records: list[Any], policy: str, trust: frozenset[bytes], threshold: int,
                     *, reduce: bool = True) -> Commons:
    """A node's ``Commons`` over the records it holds, fed in time order (with ``reduce``, only
    those :func:`reduce_for` keeps: the same lesson statuses, for less work)."""
    machine = Commons(CommonsConfig(policy=policy, threshold=threshold, trust=trust))
    for record in sorted(reduce_for(policy, records, trust) if reduce else records, key=lambda r: (r.created, r.id)):
        machine.add(record)
    return machine


def lesson_outcome(machine: Commons, lesson_ids: list[str]) -> dict[str, tuple[str, bool]]:
    """Each lesson's status and whether it was ever common."""
    return {lid: (machine.status(lid), _ever_common(machine, lid)) for lid in lesson_ids}


def sybil_curve(cfg: ModelConfig, progress=None) -> dict:
    rng = random.Random(f"sybil-{cfg.seed}")
    started = time.perf_counter()
    n = cfg.nodes
    max_share = max(cfg.sybil_shares)
    max_sybils = round(max_share / (1 - max_share) * n)
    world = _sybil_world(cfg, max_sybils, rng)
    made = time.perf_counter() - started
    end = 30 * DAY
    churn = Churn(n, end, cfg, rng)
    observers = rng.sample(range(n), min(cfg.observers, n))
    honest_pub = [bytes(k.verify_key) for k in world.honest]
    sybil_index = {bytes(k.verify_key): i for i, k in enumerate(world.sybils)}
    base = world.false_lessons + world.true_lessons + world.honest_atts
    rows = []
    timing = {"open": 0.0, "trusted": 0.0}
    runs = {"open": 0, "trusted": 0}
    open_memo: dict[tuple, dict] = {}
    lesson_ids = [x.id for x in world.false_lessons + world.true_lessons]
    for share in cfg.sybil_shares:
        count = round(share / (1 - share) * n) if share else 0
        everyone = honest_pub + [bytes(k.verify_key) for k in world.sybils[:count]]
        attacks = [a for s in range(count) for a in world.sybil_atts[s]]
        for strategy in cfg.strategies:
            stats = {p: {"false_ever": 0, "false_end": 0, "true_ever": 0, "trusting_a_sybil": 0}
                     for p in ("open", "trusted")}
            for obs in observers:
                orng = random.Random(f"obs-{cfg.seed}-{obs}-{share}")
                trust = {honest_pub[obs]}
                while len(trust) < cfg.trust_size + 1:
                    trust.add(orng.choice(everyone) if orng.random() < cfg.trust_mistake
                              else honest_pub[orng.randrange(n)])
                trust = frozenset(trust)
                trusted_sybils = [sybil_index[k] for k in trust if k in sybil_index and sybil_index[k] < count]
                vouches = []
                if strategy == "attest+vouch" and count > 1:  # the ring: each sybil vouches for the next two
                    vouches = [world.vouch(v, (v + step) % count) for v in trusted_sybils
                               for step in (1, 2) if (v + step) % count != v]
                # What this node holds at day 30: all but what was published in its final offline stretch.
                gone = churn.offline_at_end(obs, end)
                cutoff = T0 + (gone if gone is not None else end + 1)
                held = [r for r in base + attacks + vouches if r.created < cutoff]
                for policy in ("open", "trusted"):
                    t0 = time.perf_counter()
                    # Under `open` the trust list changes no lesson's status (R3): nodes holding the
                    # same records agree, so one machine serves every observer with that holding.
                    memo = ("open", share, cutoff) if policy == "open" else None
                    outcome = open_memo.get(memo) if memo else None
                    if outcome is None:
                        machine = observer_commons(held, policy, trust, cfg.threshold)
                        outcome = lesson_outcome(machine, lesson_ids)
                        runs[policy] += 1
                        if memo:
                            open_memo[memo] = outcome
                    timing[policy] += time.perf_counter() - t0
                    st = stats[policy]
                    st["trusting_a_sybil"] += bool(trusted_sybils)
                    for lesson in world.false_lessons:
                        status, ever = outcome[lesson.id]
                        st["false_ever"] += ever
                        st["false_end"] += status == COMMON
                    for lesson in world.true_lessons:
                        st["true_ever"] += outcome[lesson.id][1]
            pairs_false = len(observers) * len(world.false_lessons)
            pairs_true = len(observers) * len(world.true_lessons)
            for policy, st in stats.items():
                rows.append({"share": share, "sybil_keys": count, "strategy": strategy, "policy": policy,
                             "falsely_promoted": round(st["false_ever"] / pairs_false, 4),
                             "false_common_at_day_30": round(st["false_end"] / pairs_false, 4),
                             "true_promoted": round(st["true_ever"] / pairs_true, 4),
                             "observers_trusting_a_sybil": round(st["trusting_a_sybil"] / len(observers), 4)})
            if progress:
                shown = "; ".join(f"{r['policy']} false {r['falsely_promoted']:.2f} true {r['true_promoted']:.2f}"
                                  for r in rows[-2:])
                progress(f"  sybil share {share:.2f} ({count} keys), {strategy}: {shown}")
    return {"observers": len(observers), "honest_attestations": len(world.honest_atts),
            "sybil_attestations_at_max_share": sum(len(a) for a in world.sybil_atts),
            "state_machines_run": runs,
            "rows": rows, "seconds": {"records": round(made, 2),
                                      "state_machine": {k: round(v, 2) for k, v in timing.items()},
                                      "total": round(time.perf_counter() - started, 2)}}


# -- output --------------------------------------------------------------------------------------

def plot(out: Path, cfg: ModelConfig, result: dict) -> list[str]:
    from .plots import pyplot, save

    plt = pyplot()
    paths = []
    p = result["propagation"]
    c = p["curves"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4.4))
    ax1.plot(c["t_s"], c["lesson_held"], label="a lesson, held")
    ax1.plot(c["t_s"], c["revoked"], label="its revocation: lesson revoked")
    ax1.plot(c["t_s"], c["derived_revoked"], "--", label="the lesson derived from it: revoked")
    ax1.set_xlabel("seconds after publication")
    ax1.set_ylabel("share of the nodes online at that moment")
    ax1.set_title(f"{cfg.nodes:,} nodes: gossip reach", fontsize=10)
    ax1.legend(fontsize=8, loc="lower right")
    ax2.plot(c["all_nodes_h"], c["all_nodes_revoked"])
    ax2.set_xlabel("hours after the revocation")
    ax2.set_ylabel("share of all nodes showing it revoked")
    ax2.set_title("offline nodes catching up on return (sync)", fontsize=10)
    ax2.set_ylim(0, 1.02)
    fig.subplots_adjust(bottom=0.2, wspace=0.3)
    paths.append(save(fig, out / "reach.png", f"{MODEL_NOTE}. Mesh degree {cfg.degree}, median link latency "
                      f"{cfg.latency_ms:g} ms, online {cfg.online_hours:g} h / offline {cfg.offline_hours:g} h."))
    s = result.get("sybil")
    if s:
        fig, axes = plt.subplots(1, len(cfg.strategies), figsize=(5 * len(cfg.strategies), 4.4), squeeze=False)
        for ax, strategy in zip(axes[0], cfg.strategies):
            for policy, colour in (("open", "#c0392b"), ("trusted", "#2471a3")):
                rows = [r for r in s["rows"] if r["policy"] == policy and r["strategy"] == strategy]
                xs = [r["share"] * 100 for r in rows]
                ax.plot(xs, [r["falsely_promoted"] for r in rows], "o-", color=colour,
                        label=f"{policy}: false, ever common")
                ax.plot(xs, [r["false_common_at_day_30"] for r in rows], "x:", color=colour,
                        label=f"{policy}: false, common at day 30")
                ax.plot(xs, [r["true_promoted"] for r in rows], "s--", color=colour, alpha=0.5,
                        label=f"{policy}: true lessons promoted")
            ax.set_xlabel("sybil share of all keys (%)")
            ax.set_ylabel("share of (observer, lesson) pairs")
            ax.set_ylim(-0.03, 1.05)
            ax.set_title(f"attacker: {strategy}", fontsize=10)
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=3, bbox_to_anchor=(0.5, 0.06))
        fig.subplots_adjust(bottom=0.32)
        paths.append(save(fig, out / "sybil_curve.png", f"{MODEL_NOTE}. {cfg.nodes:,} honest nodes, "
                          f"{s['observers']} observers, N = {cfg.threshold}, trust lists of {cfg.trust_size} keys with "
                          f"{cfg.trust_mistake:.0%} mistaken entries."))
    return paths


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isinf(value) or math.isnan(value) else round(value, 4)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def run(cfg: ModelConfig, out: Path | None = None, *, sybil: bool = True, plots: bool = True, progress=None) -> dict:
    started = time.perf_counter()
    result: dict[str, Any] = {"what": MODEL_NOTE, "model": asdict(cfg)}
    if progress:
        progress(f"propagation and revocation, {cfg.nodes:,} nodes ...")
    result["propagation"] = propagation(cfg, progress)
    if sybil:
        if progress:
            progress(f"sybil curve, {cfg.nodes:,} honest nodes, {cfg.observers} observers ...")
        result["sybil"] = sybil_curve(cfg, progress)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result = _clean(result)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        result["plots"] = plot(out, cfg, result) if plots else []
        (out / "summary.json").write_text(json.dumps(result, indent=2) + "\n")  # the curves included
    return result


def _print(result: dict) -> None:
    p = result["propagation"]
    cfg = result["model"]
    print(f"The commons at {p['nodes']:,} nodes ({result['what']}).")
    print(f"  per-hop cost (real wire.validate + Commons.add, measured in this run): {p['hop_cost_ms']} ms; "
          f"{p['online_share']:.0%} of nodes online")
    print(f"  a lesson reaches 50 % of the online nodes in {p['lesson_t50_s']['p50']:.3f} s, 99 % in "
          f"{p['lesson_t99_s']['p50']:.3f} s (median of {cfg['lessons']} lessons; "
          f"worst {p['lesson_t99_s']['max']:.3f} s)")
    for name, r in p["revocation"].items():
        what = "the revoked lesson" if name == "revoked" else "the lesson derived from it"
        back = r["offline_catch_up_after_return_s"]
        print(f"  revocation, {what}: every online node ({r['nodes']:,}) in {r['every_online_node_s']:.3f} s "
              f"(p50 {r['p50_s']:.3f} s); {r['offline_nodes']} offline nodes caught up {back['p50']:.2f} s (p50), "
              f"{back['max']:.2f} s (max) after they came back; every node within {r['every_node_s'] / 3600:.2f} h")
    print(f"  every node holding both shows the lesson revoked: {p['every_holder_shows_revoked']}")
    s = result.get("sybil")
    if s:
        print(f"  sybil curve ({s['observers']} observers, threshold N = {cfg['threshold']}): "
              f"share of (observer, false "
              f"lesson) pairs ever common / common at day 30; true lessons promoted")
        for r in s["rows"]:
            print(f"    share {r['share']:>5.0%} ({r['sybil_keys']:>5} keys) {r['strategy']:13} {r['policy']:8} "
                  f"false {r['falsely_promoted']:.2f} / {r['false_common_at_day_30']:.2f}   "
                  f"true {r['true_promoted']:.2f}   observers trusting a sybil {r['observers_trusting_a_sybil']:.2f}")
    for path in result.get("plots", []):
        print(f"  plot: {path}")
    print(f"  {result['seconds']} s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.commons_des", description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="folder for summary.json and the plots")
    parser.add_argument("--observers", type=int, default=ModelConfig.observers)
    parser.add_argument("--lessons", type=int, default=ModelConfig.lessons)
    parser.add_argument("--shares", default=",".join(str(s) for s in ModelConfig.sybil_shares))
    parser.add_argument("--no-sybil", action="store_true", help="part 1 only")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        cfg = ModelConfig(nodes=args.nodes, seed=args.seed, observers=args.observers, lessons=args.lessons,
                          sybil_shares=tuple(float(x) for x in args.shares.split(",") if x.strip()))
    except ValueError as exc:
        parser.error(str(exc))
    progress = None if args.json else (lambda line: print(line, file=sys.stderr, flush=True))
    result = run(cfg, args.out, sybil=not args.no_sybil, plots=not args.no_plots and args.out is not None,
                 progress=progress)
    if args.json:
        shown = dict(result)
        shown["propagation"] = {k: v for k, v in result["propagation"].items() if k != "curves"}
        print(json.dumps(shown, indent=2))
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
