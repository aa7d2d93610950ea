"""One admission for every way in, on real nodes: a node that holds records of many fresh keys
(put there through its own local API, as an attacker's node would) serves them to a peer's
sync; the peer stores no more than its fresh-key budget allows, counts every record past it,
charges the serving node as their origin, and keeps the honest records it had."""

from __future__ import annotations

import time

import nacl.signing
import pytest

from openmemory_node import wire
from tests.node.harness import Cluster, wait_until

pytestmark = pytest.mark.slow

FLOOD = 150
BURST = 20


def test_sync_passes_the_same_fresh_key_budget_as_gossip(cluster: Cluster):
    x = cluster.node("x")
    x.init()
    x.configure(f"[limits]\nfresh_key_burst = {float(BURST)}\nfresh_key_rate = 0.5\n[sync]\ninterval = 3600.0")
    x.start()
    honest = x.publish('`make release` failed: "the signing key was missing".', kind="error")["id"]
    w = cluster.node("w")  # the attacker's own node
    w.init()
    w.configure("[sync]\ninterval = 3600.0")
    w.start()
    now = int(time.time())
    for i in range(FLOOD):
        record = wire.new_lesson(nacl.signing.SigningKey.generate(), text=f"The flaky test failed on run {i}.",
                                 kind="error", strength=1000, provenance=bytes(32), created=now)
        w.post("/v1/records", {"cbor": wire.encode(record).hex()})
    started = time.monotonic()
    x.post("/v1/peers", {"addr": w.multiaddr})
    wait_until(lambda: any(p["connected"] for p in x.get("/v1/peers")["peers"] if p["peer_id"] == w.peer_id), 60,
               what="x connected to w")

    def synced() -> bool:
        x.post("/v1/sync", {"peer": w.peer_id})
        return x.status()["ingest"]["refused"].get("reject:fresh-key-budget", 0) > 0

    wait_until(synced, 90, interval=1.0, what="a sync session that met the budget")
    elapsed = time.monotonic() - started
    stored = sum(1 for r in x.records().values() if r["author"] != x.public_key and r["author"] != w.public_key)
    bound = BURST + 0.5 * elapsed + 1
    assert 0 < stored <= bound, (stored, bound)  # the budget, not the flood, decided
    refused = x.status()["ingest"]["refused"]
    # every record of the flood: stored within the budget, refused past it (1 point each to the
    # node that served it), and once that node is graylisted (100 points), ignored unread (two
    # sessions that overlap, the one at connection and an asked one, may each bring a record: >=)
    assert stored + refused["reject:fresh-key-budget"] + refused.get("ignore:graylisted", 0) >= FLOOD, refused
    assert refused["reject:fresh-key-budget"] >= 50
    peer = next(p for p in x.get("/v1/peers")["peers"] if p["peer_id"] == w.peer_id)
    assert peer["graylisted"] and peer["penalty"] >= 50  # charged as the records' origin
    assert x.has(honest)  # nothing honest evicted
