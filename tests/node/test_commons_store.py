"""The commons state machine as the node's status rules, over a real SQLite store."""

from __future__ import annotations

import nacl.signing

from openmemory_node import wire
from openmemory_node.config import CommonsSection
from openmemory_node.ingest import Ingest
from openmemory_node.policy import NodePolicy
from openmemory_node.status import CommonsStatus
from openmemory_node.store import Store

NOW = 1_760_000_000


def records():
    author = nacl.signing.SigningKey(bytes([1]) * 32)
    voters = [nacl.signing.SigningKey(bytes([10 + i]) * 32) for i in range(3)]
    lesson = wire.new_lesson(author, text="The deploy failed when the cache was cold.", kind="error",
                             strength=1000, provenance=bytes(32), created=NOW)
    child = wire.new_lesson(voters[0], text="The deploy cache was cold after the runner restarted.",
                            kind="error", strength=1000, provenance=bytes(32), derived_from=[lesson.id],
                            created=NOW + 10)
    votes = [wire.new_attestation(k, lesson_id=lesson.id, verdict="confirmed", met_before=False,
                                  evidence={"sessions": 2, "matched": 1, "window": 86400}, created=NOW + 60 + i)
             for i, k in enumerate(voters)]
    revocation = wire.new_revocation(author, target=lesson.id, reason_code="incorrect", created=NOW + 120)
    return author, voters, lesson, child, votes, revocation


def ingest_for(tmp_path, section: CommonsSection, own: bytes | None = None) -> tuple[Ingest, CommonsStatus]:
    store = Store.open(tmp_path, lambda: NOW + 200)
    rules = CommonsStatus(section, store, own)
    rules.rebuild()
    return Ingest(store, NodePolicy(), clock=lambda: NOW + 200, status_rules=rules), rules


def test_statuses_are_written_as_records_arrive_even_before_what_they_name(tmp_path):
    author, voters, lesson, child, votes, revocation = records()
    section = CommonsSection(trust=[bytes(k.verify_key).hex() for k in voters])
    ingest, rules = ingest_for(tmp_path, section)
    store = ingest.store
    for vote in votes:  # attestations before their lesson: pending
        assert ingest.accept(wire.encode(vote), peer=None, via="api").accepted
        assert store.get(vote.id).status == "pending"
    ingest.accept(wire.encode(lesson), peer=None, via="api")
    assert store.get(lesson.id).status == "common"
    assert {store.get(v.id).status for v in votes} == {"counted"}
    ingest.accept(wire.encode(revocation), peer=None, via="api")
    assert store.get(lesson.id).status == "revoked" and store.get(revocation.id).status == "effective"
    ingest.accept(wire.encode(child), peer=None, via="api")  # derived from a revoked lesson
    assert store.get(child.id).status == "revoked"
    assert store.counts()["lesson"] == {"revoked": 2}
    store.close()


def test_rebuild_applies_settings_changed_at_run_time_or_while_stopped(tmp_path):
    author, voters, lesson, child, votes, revocation = records()
    ingest, rules = ingest_for(tmp_path, CommonsSection())
    store = ingest.store
    for r in (lesson, child, *votes):
        ingest.accept(wire.encode(r), peer=None, via="api")
    assert store.get(lesson.id).status == "candidate"  # nobody trusted
    for k in voters:
        store.add_commons_key(bytes(k.verify_key).hex(), "trust")
    assert rules.rebuild() == 4  # the lesson and its three votes
    assert store.get(lesson.id).status == "common"
    store.add_local_revocation(lesson.id, "poisoned")
    rules.rebuild()
    assert store.get(lesson.id).status == "revoked" and store.get(child.id).status == "revoked"
    store.remove_local_revocation(lesson.id)
    rules.rebuild()
    assert store.get(lesson.id).status == "common"
    # A different configuration next start: the open policy with N = 4 (three votes: candidate).
    other = CommonsStatus(CommonsSection(policy="open", threshold=4), store)
    other.rebuild()
    assert store.get(lesson.id).status == "candidate"
    store.close()


def test_a_node_trusts_its_own_key_unless_told_not_to(tmp_path):
    author, voters, lesson, child, votes, revocation = records()
    own = bytes(voters[0].verify_key)
    section = CommonsSection(threshold=1)
    ingest, rules = ingest_for(tmp_path, section, own)
    for r in (lesson, votes[0]):
        ingest.accept(wire.encode(r), peer=None, via="api")
    assert ingest.store.get(lesson.id).status == "common"
    rules.section = CommonsSection(threshold=1, trust_self=False)
    rules.rebuild()
    assert ingest.store.get(lesson.id).status == "candidate"
    ingest.store.close()
