"""The commons across real node processes on loopback: promotion by independent attestations,
revocation along the provenance chain, catch-up through sync, a partition healed, a sybil flood."""

from __future__ import annotations

import sqlite3
import time

import nacl.signing
import pytest
import trio

from openmemory_node import wire

from .harness import Cluster, Node, wait_until
from .rogue import rogue_peer

pytestmark = pytest.mark.slow

LESSON = "The user corrected the agent for using pip; this project uses uv."
CHILD = "The agent ran pip install twice; the project has a uv.lock file."
GRANDCHILD = "The uv lock file was regenerated after the agent ran pip install."


def start_all(nodes: list[Node]) -> None:
    for node in nodes:
        node.start(wait=False)
    for node in nodes:
        node.wait_ready()


def make_line(cluster: Cluster, names: list[str], extra: str = "") -> list[Node]:
    nodes: list[Node] = []
    for name in names:
        node = cluster.node(name)
        node.init([nodes[-1].multiaddr] if nodes else [])
        nodes.append(node)
    return nodes


def trust_config(nodes: list[Node], **extra: object) -> str:
    keys = ", ".join(f'"{n.public_key}"' for n in nodes)
    lines = [f"trust = [{keys}]"] + [f"{k} = {v}" for k, v in extra.items()]
    return "[commons]\n" + "\n".join(lines)


def everywhere(nodes: list[Node], rid: str, status: str) -> bool:
    return all(n.status_of(rid) == status for n in nodes)


def test_attested_common_then_revoked_everywhere_and_an_offline_node_catches_up_by_sync(cluster):
    author, x, y, z, late = nodes = make_line(cluster, ["author", "x", "y", "z", "late"])
    attesters = [x, y, z]
    for node in nodes:
        node.configure(trust_config(attesters))
    start_all(nodes)
    cluster.wait_line_meshed(nodes)

    lesson = author.publish(LESSON)["id"]
    child = x.publish(CHILD, derived_from=[lesson])["id"]
    wait_until(lambda: all(n.has(lesson) and n.has(child) for n in nodes), 30, what="lessons everywhere")

    # Three independent, trusted attesters confirm it: common on every node.
    for node in attesters:
        answer = node.post("/v1/attest", {"id": lesson, "verdict": "confirmed"})
        assert answer["status"] == "counted"
    wait_until(lambda: everywhere(nodes, lesson, "common"), 30, what="the lesson common everywhere")
    view = late.get(f"/v1/commons/{lesson}")["commons"]
    assert view["votes"]["counted"] == 3 and view["tally"]["confirmers"] == 3
    assert [h["to"] for h in view["group"]["history"]] == ["candidate", "common"]
    assert everywhere(nodes, child, "candidate")  # its own group has no votes

    # One node goes offline; the author revokes; every online node revokes it and its child.
    late.stop()
    revocation = author.post("/v1/revoke", {"id": lesson, "reason_code": "incorrect",
                                            "reason": "the project moved back to pip"})
    assert revocation["effect"]["status"] == "effective" and revocation["target_status"] == "revoked"
    published = time.monotonic()
    online = nodes[:-1]
    wait_until(lambda: everywhere(online, lesson, "revoked") and everywhere(online, child, "revoked"),
               5, 0.02, "the lesson and its child revoked on every online node")
    print(f"revoked on {len(online)} online nodes {time.monotonic() - published:.2f} s after publication")
    # A lesson that derives from the revoked child, published now, is revoked on arrival.
    grandchild = y.publish(GRANDCHILD, derived_from=[child])["id"]
    wait_until(lambda: everywhere(online, grandchild, "revoked"), 20, what="grandchild revoked on arrival")

    # The offline node returns after gossip's windows have passed (history: 5 heartbeats):
    # what it missed can only come through sync.
    time.sleep(max(0.0, published + 6.5 - time.monotonic()))
    db = sqlite3.connect(late.home / "node.db")
    assert db.execute("SELECT count(*) FROM records WHERE id=?", (revocation["id"],)).fetchone()[0] == 0
    db.close()
    late.start()
    wait_until(lambda: late.status_of(grandchild) == "revoked" and late.status_of(lesson) == "revoked"
               and late.status_of(child) == "revoked", 15, 0.1, "the returning node catching up")
    rows = late.records()
    assert rows[revocation["id"]]["via"] == "sync" and rows[grandchild]["via"] == "sync"
    assert rows[revocation["id"]]["status"] == "effective"
    assert late.get(f"/v1/commons/{grandchild}")["commons"]["revoked_because"]["ancestor"] == child
    # (the session may still be pulling the last types when the statuses show: wait for its end)
    sync = wait_until(lambda: (lambda v: v if z.peer_id in v["last"] else None)(late.get("/v1/sync")),
                      10, 0.1, "the returning node's session with z ended")
    assert sync["received"] >= 2 and sync["last"][z.peer_id]["outcome"] == "done"
    # Every node now holds the same records with the same statuses.
    reference = author.statuses()
    wait_until(lambda: all(n.statuses() == reference for n in nodes), 30, what="every node agreeing")


def test_a_partition_with_a_revocation_on_one_side_agrees_after_healing(cluster):
    a1, a2, b1, b2 = nodes = make_line(cluster, ["a1", "a2", "b1", "b2"])
    for node in nodes:
        node.configure(trust_config(nodes, threshold=2) + "\n[sync]\ninterval = 5.0")
    start_all(nodes)
    cluster.wait_line_meshed(nodes)
    lesson = a1.publish(LESSON)["id"]
    derived = b2.publish(CHILD, derived_from=[lesson])["id"]
    other = a1.publish('`make nightly` failed: "The nightly job timed out while the database was being vacuumed.".',
                       kind="error")["id"]
    wait_until(lambda: all(n.has(r) for n in nodes for r in (lesson, derived, other)), 30,
               what="records everywhere before the partition")

    # Partition: each node blocks the other half (disconnects, never dials, ignores).
    side = {n.name: ([a1, a2] if n.name.startswith("a") else [b1, b2]) for n in nodes}
    for node in nodes:
        for peer in nodes:
            if peer not in side[node.name]:
                node.post(f"/v1/peers/{peer.peer_id}/block", {})
    wait_until(lambda: b1.peer_id not in a2.connected() and a2.peer_id not in b1.connected(), 20,
               what="the halves disconnected")

    # Side A: the author revokes. Side B: attests the other lesson and derives from the revoked one.
    revocation = a1.post("/v1/revoke", {"id": lesson, "reason_code": "withdrawn"})["id"]
    for node in (b1, b2):
        node.post("/v1/attest", {"id": other, "verdict": "confirmed"})
    late_child = b1.publish(GRANDCHILD, derived_from=[derived])["id"]
    wait_until(lambda: everywhere([a1, a2], derived, "revoked"), 20, what="revoked on side A")
    wait_until(lambda: everywhere([b1, b2], other, "common") and b2.has(late_child), 20,
               what="side B's attestations")
    time.sleep(1.0)
    assert b1.has(revocation) is None and b2.status_of(lesson) == "candidate"  # nothing crossed
    assert a2.has(late_child) is None and a1.status_of(other) == "candidate"

    # Heal: unblock; the nodes re-dial and sync on connect. Both sides agree on everything.
    healed = time.monotonic()
    for node in nodes:
        for peer in nodes:
            if peer not in side[node.name]:
                node.client().request("DELETE", f"/v1/peers/{peer.peer_id}/block")

    def agreed() -> bool:
        maps = [n.statuses() for n in nodes]
        return all(m == maps[0] for m in maps)

    wait_until(agreed, 20, 0.2, "both sides agreeing after healing")
    print(f"agreement {time.monotonic() - healed:.2f} s after healing")
    final = a1.statuses()
    assert final[lesson] == final[derived] == final[late_child] == "revoked"
    assert final[other] == "common" and final[revocation] == "effective"


async def test_a_sybil_flood_of_attestations_promotes_nothing_under_trusted(cluster):
    x, y, z = nodes = make_line(cluster, ["x", "y", "z"])
    z.configure('[commons]\npolicy = "open"')  # z counts any independent key
    start_all(nodes)
    cluster.wait_line_meshed(nodes)
    lesson = (await trio.to_thread.run_sync(y.publish, LESSON))["id"]
    await trio.to_thread.run_sync(lambda: wait_until(lambda: x.has(lesson) and z.has(lesson), 20))
    flood = [wire.encode(wire.new_attestation(
        nacl.signing.SigningKey.generate(), lesson_id=lesson, verdict="confirmed", met_before=False,
        evidence={"sessions": 5, "matched": 5, "window": 86400}, created=int(time.time())))
        for _ in range(20)]
    async with rogue_peer(x.multiaddr) as rogue:
        for data in flood:
            await rogue.send(data, topic="/openmemory/1/attestation")
        ids = [wire.record_id(d).hex() for d in flood]

        def all_arrived() -> bool:
            return all(all(n.has(i) for i in ids) for n in nodes)

        await trio.to_thread.run_sync(lambda: wait_until(all_arrived, 60, 0.1, "the flood everywhere"))
    for node in (x, y):
        assert node.status_of(lesson) == "candidate"
        assert {node.status_of(i) for i in ids} == {"not-counted"}
        view = node.get(f"/v1/commons/{lesson}")["commons"]["votes"]
        assert view["counted"] == 0 and view["refused"] == {"untrusted": 20}
    # The same records promote it where the policy is `open`: the policy is what stops them.
    assert z.status_of(lesson) == "common"
