"""Admission of new authors: the fresh-key budget per peer and the store's bound on records
from keys without standing (PROTOCOL.md, "Admission of new authors"), over a real SQLite
store, the real wire format and the real commons state machine."""

from __future__ import annotations

import nacl.signing
import pytest

from openmemory_node import wire
from openmemory_node.config import CommonsSection
from openmemory_node.ingest import Ingest
from openmemory_node.policy import Action, Limits, NodePolicy, evictions
from openmemory_node.status import CommonsStatus
from openmemory_node.store import Store
from openmemory_node.sync import SyncIndex
from openmemory_node.sync_plan import wanted as plan_wanted

from .test_ingest_store import NOW, Clock


def fresh() -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey.generate()


def lesson(key, i: int = 0, parents=()) -> bytes:
    return wire.encode(wire.new_lesson(
        key, text=f"The integration test number {i} failed on the shared runner.", kind="error",
        strength=1000, provenance=bytes(32), derived_from=[p.id for p in parents], created=NOW))


def attestation(key, target: bytes) -> bytes:
    return wire.encode(wire.new_attestation(
        key, lesson_id=wire.record_id(target), verdict="confirmed", met_before=False,
        evidence={"sessions": 2, "matched": 1, "window": 86400}, created=NOW + 1))


def revocation(key, target: bytes) -> bytes:
    return wire.encode(wire.new_revocation(key, target=wire.record_id(target), reason_code="spam",
                                           reason="", created=NOW + 2))


OWN = fresh()
TRUSTED = fresh()


def make(tmp_path, **limits) -> Ingest:
    clock = Clock()
    store = Store.open(tmp_path, clock)
    rules = CommonsStatus(CommonsSection(trust=[bytes(TRUSTED.verify_key).hex()]), store,
                          bytes(OWN.verify_key))
    ingest = Ingest(store, NodePolicy(Limits(**limits)), clock=clock, status_rules=rules)
    ingest.index = SyncIndex.from_store(store)
    ingest.on_accept_hooks.append(ingest.index.on_accept)
    ingest.on_evict_hooks.append(ingest.index.on_evict)
    return ingest


@pytest.fixture
def node(tmp_path):
    ingest = make(tmp_path, fresh_key_burst=10, fresh_key_rate=0.5)
    yield ingest
    ingest.store.close()


def test_a_peer_originating_records_of_fresh_keys_past_its_budget_is_refused_and_penalised(node):
    outcomes = [node.accept(lesson(fresh(), i), peer="rogue", originated=True) for i in range(40)]
    assert sum(o.accepted for o in outcomes) == 10  # the burst
    refused = [o.verdict for o in outcomes if not o.accepted]
    assert {(v.action, v.code) for v in refused} == {(Action.REJECT, "fresh-key-budget")}
    assert node.policy.ledger.penalty("rogue", NOW) == pytest.approx(30)
    assert node.store.count() == 10
    # The budget refills at its rate, per peer: another peer is not affected.
    node.clock.t += 4
    assert sum(node.accept(lesson(fresh(), 100 + i), peer="rogue", originated=True).accepted
               for i in range(5)) == 2
    assert node.accept(lesson(fresh(), 200), peer="honest", originated=True).accepted
    node.store.flush()
    assert node.store.rejections()["fresh-key-budget"]["count"] == 33


def test_relayed_records_past_the_budget_are_ignored_not_penalised(node):
    outcomes = [node.accept(lesson(fresh(), i), peer="relay", originated=False) for i in range(15)]
    assert sum(o.accepted for o in outcomes) == 10
    assert {o.verdict.action for o in outcomes if not o.accepted} == {Action.IGNORE}
    assert node.policy.ledger.penalty("relay", NOW) == 0
    assert node.stats["ignore:fresh-key-budget"] == 5


def test_known_keys_and_standing_cost_no_budget(node):
    author = fresh()
    assert node.accept(lesson(author, 0), peer="p", originated=True).accepted  # one token
    for i in range(1, 20):  # the key is known now: its records cost no fresh-key token
        node.clock.t += 0.01
        assert node.accept(lesson(author, i), peer="p", originated=True).accepted
    for i in range(20):  # a trusted key has standing, this node's own key too
        node.clock.t += 0.01
        assert node.accept(lesson(TRUSTED if i % 2 else OWN, 100 + i), peer="p", originated=True).accepted
    assert node.policy.fresh_keys.bucket("p").tokens == pytest.approx(9, abs=0.3)  # (burst 10, one spent)
    assert node.stats.get("reject:fresh-key-budget", 0) == 0


@pytest.mark.parametrize("via", ["sync", "fetch"])
def test_solicited_records_pass_the_same_fresh_key_budget(node, via):
    """One admission for every way in: records a peer serves to our sync or fetch requests
    cost that peer's fresh-key budget as gossip does, and the excess is charged to it as if it
    had authored them (a node put 2,000 fresh keys in its store through its own API)."""
    burst = int(node.policy.limits.fresh_key_burst)
    outcomes = [node.accept(lesson(fresh(), 200 + i), peer="p", via=via, solicited=True) for i in range(burst + 5)]
    assert sum(o.accepted for o in outcomes) == burst
    refused = [o.verdict for o in outcomes if not o.accepted]
    assert {(v.action, v.code) for v in refused} == {(Action.REJECT, "fresh-key-budget")}
    assert node.policy.ledger.penalty("p", NOW) == pytest.approx(5, abs=0.01)
    assert node.stats["reject:fresh-key-budget"] == 5


def test_the_store_keeps_at_most_the_bound_dropping_the_oldest_inert_records(tmp_path):
    node = make(tmp_path, max_without_standing=20, fresh_key_burst=1000)
    stranger = fresh()
    referenced = lesson(stranger, 0)
    child = lesson(TRUSTED, 1, parents=[wire.decode(referenced)])  # a trusted key derives from it
    attested = lesson(stranger, 2)
    revoked_target = lesson(stranger, 3)
    first = [referenced, child, attested, revoked_target,
             attestation(TRUSTED, attested),  # counted: its lesson has a counted vote
             revocation(stranger, revoked_target)]
    for data in first:
        assert node.accept(data, peer="p", originated=True).accepted
    flood = [lesson(fresh(), 100 + i) for i in range(40)]
    evicted: list[list] = []
    node.on_evict_hooks.append(evicted.append)
    for data in flood:
        node.clock.t += 0.01
        assert node.accept(data, peer="p", originated=True).accepted
    own = [lesson(OWN, 500 + i) for i in range(5)]
    for data in own:
        node.clock.t += 1
        assert node.accept(data, peer=None, via="local").accepted
    held = set(node.store.ids())
    trusted_key = bytes(TRUSTED.verify_key).hex()
    without = [i for i in held if node.store.get(i).author not in (trusted_key, bytes(OWN.verify_key).hex())]
    assert len(without) <= 20 == node.policy.limits.max_without_standing
    assert node.without_standing() == len(without)
    # Kept: what is named (the parent, the attested lesson, the revoked one), what counts
    # (the trusted attestation), every revocation, and the newest of the flood; dropped:
    # the oldest unreferenced records first.
    for data in first + own:
        assert wire.record_id(data).hex() in held
    flood_ids = [wire.record_id(d).hex() for d in flood]
    kept = [i for i in flood_ids if i in held]
    assert kept == flood_ids[len(flood_ids) - len(kept):] and len(kept) >= 10
    dropped = {row[0] for batch in evicted for row in batch}
    assert dropped == set(flood_ids) - set(kept) and node.stats["evicted"] == len(dropped)
    # The sync index and the commons machine forgot them too; a dropped record can come back.
    assert len(node.index) == len(held)
    assert all(node.status_rules.machine.status(i) is None for i in dropped)
    again = flood[0]
    assert node.accept(again, peer="q", originated=True).accepted


def test_evictions_take_the_first_inert_ones_never_the_record_being_stored():
    inert = {"a": False, "b": True, "c": True, "d": True}.get
    assert evictions(["a", "b", "c", "d"], 2, inert) == ["b", "c"]
    assert evictions(["a", "b", "c", "d"], 5, inert, keep="c") == ["b", "d"]
    assert evictions(["a", "b"], 0, inert) == []


def test_sync_stops_announcing_a_dropped_record_but_serves_it_to_sessions_that_saw_it(tmp_path):
    from openmemory_node.config import SyncSection
    from openmemory_node.sync import Sync

    node = make(tmp_path, max_without_standing=5, fresh_key_burst=1000)
    sync = Sync(host=None, ingest=node, settings=SyncSection(session_timeout=120), clock=node.clock,
                connected=list)
    flood = [lesson(fresh(), i) for i in range(12)]
    for data in flood:
        node.clock.t += 1
        assert node.accept(data, peer="p", originated=True).accepted
    dropped = [wire.record_id(d) for d in flood if not node.store.has_idb(wire.record_id(d))]
    assert dropped and node.without_standing() <= 5
    for idb in dropped:
        assert idb not in sync.index.sets["lesson"]  # no longer announced
        assert sync._served_data(idb) is not None  # but a session that saw it may still pull it
        assert plan_wanted([idb], sync._refused, node.clock()) == []  # and it is not pulled back for an hour
    node.clock.t += 121
    assert all(sync._served_data(idb) is None for idb in dropped)
