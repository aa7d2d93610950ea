"""The domains a node follows, the domains of the records it holds, the topics and sync scopes
that follow (openmemory_node/follow.py, sync_plan.scopes): pure, over synthetic records."""

from __future__ import annotations

import time

import nacl.signing
import pytest

from openmemory_node import wire
from openmemory_node.follow import DOMAINS_FILE, DomainIndex, Following, record_topics, topic_domain
from openmemory_node.gossip import TOPICS
from openmemory_node.sync_plan import scopes
from openmemory_protocol.claims import Claim

KEY = nacl.signing.SigningKey(bytes(range(32)))


def lesson(situation: str, failure: str = "error: it failed") -> wire.Lesson:
    return wire.new_lesson(KEY, claim=Claim(situation=situation, failure=failure), kind="error",
                           strength=1000, provenance=bytes(32), created=int(time.time()))


def attestation(of: wire.Lesson) -> wire.Attestation:
    return wire.new_attestation(KEY, lesson_id=of.id_bytes, failure="confirmed", fix="untested",
                                met_before=False, evidence={"sessions": 1, "matched": 1, "window": 86400},
                                created=int(time.time()))


def test_a_node_told_nothing_follows_every_domain_and_general_is_always_followed(tmp_path):
    nothing = Following((), tmp_path)
    assert nothing.domains is None and nothing.follows(("ruby",))
    assert Following(["*"]).domains is None
    python = Following(["python"])
    assert python.domains == {"python", "general"}
    assert python.follows(("git", "python")) and not python.follows(("node",))
    assert python.follows(None)  # unknown domains (an attestation of a lesson not held): taken
    with pytest.raises(ValueError):
        Following(["cobol"])


def test_the_engines_report_is_kept_across_a_restart_and_a_damaged_file_is_as_if_never_told(tmp_path):
    following = Following((), tmp_path)
    assert following.report(["node"], 100.0) is True
    assert following.report(["node"], 101.0) is False
    assert Following((), tmp_path).domains == {"node", "general"}
    assert Following(["rust"], tmp_path).domains == {"node", "rust", "general"}
    (tmp_path / DOMAINS_FILE).write_text("{not json")
    assert Following((), tmp_path).domains is None


def test_topics_joined_and_topics_of_a_record():
    topics = Following(["python"]).topics(TOPICS)
    assert set(topics) == {"/openmemory/1/revocation", "/openmemory/1/vouch", "/openmemory/1/lesson",
                           "/openmemory/1/attestation", "/openmemory/1/lesson/python",
                           "/openmemory/1/attestation/python"}
    assert record_topics("lesson", ("git", "node"), "/openmemory/1/lesson") == [
        "/openmemory/1/lesson/git", "/openmemory/1/lesson/node"]
    assert record_topics("attestation", None, "/openmemory/1/attestation") == ["/openmemory/1/attestation"]
    assert record_topics("revocation", ("git",), "/openmemory/1/revocation") == ["/openmemory/1/revocation"]
    assert topic_domain("/openmemory/1/lesson") == ("lesson", "general")
    assert topic_domain("/openmemory/1/revocation") == ("revocation", None)
    assert topic_domain("/openmemory/1/lesson/cobol") is None and topic_domain("/other/1/lesson") is None


def test_an_attestation_takes_its_lessons_domains_once_the_lesson_is_held():
    index = DomainIndex()
    npm = lesson("npm test")
    vote = attestation(npm)
    assert index.add(vote) == [] and index.of_record(vote) is None  # lesson not held: unknown
    assert index.add(npm) == [vote.id_bytes]  # the attestation now has domains
    assert index.of_record(vote) == ("node",) and index.of_id("attestation", vote.id_bytes) == ("node",)
    index.discard(vote.id_bytes)
    assert index.of_id("attestation", vote.id_bytes) is None


def test_sync_scopes_every_type_whole_or_per_followed_domain():
    order, per_domain = ("revocation", "vouch", "lesson", "attestation"), ("lesson", "attestation")
    assert scopes(order, per_domain, None) == [(t, None) for t in order]
    assert scopes(order, per_domain, {"python", "general"}) == [
        ("revocation", None), ("vouch", None), ("lesson", "general"), ("lesson", "python"),
        ("attestation", "general"), ("attestation", "python")]


def test_the_sync_index_kept_by_arrivals_equals_the_one_rebuilt_from_the_store(tmp_path):
    """Per (type, domain) id sets: what on-accept hooks keep (an attestation arriving before its
    lesson included) is what a restart rebuilds from a real store (differential)."""
    from openmemory_node.ingest import Ingest
    from openmemory_node.policy import NodePolicy
    from openmemory_node.store import Store
    from openmemory_node.sync import SyncIndex

    store = Store.open(tmp_path)
    ingest = Ingest(store, NodePolicy())
    live = SyncIndex.from_store(store)
    ingest.on_accept_hooks.append(live.on_accept)
    npm, both, py = lesson("npm test"), lesson("cd web && npm test && git push"), lesson("pytest")
    for record in (attestation(npm), npm, both, attestation(both), py, attestation(lesson("cargo build"))):
        assert ingest.accept(wire.encode(record), peer=None, via="local").accepted
    rebuilt = SyncIndex.from_store(store)
    sets = lambda index: {k: list(v._ids) for k, v in index.domain_sets.items() if len(v)}  # noqa: E731
    assert sets(live) == sets(rebuilt)
    assert set(sets(live)) == {("lesson", "node"), ("lesson", "git"), ("lesson", "python"),
                               ("attestation", "node"), ("attestation", "git")}
    assert len(live.domain_sets[("attestation", "node")]) == 2  # npm's (arrived first) and both's
    store.close()


def test_the_domains_of_a_nodes_own_lessons_are_followed_once_it_follows_some():
    following = Following(["git"])
    assert following.add_authored(("python",)) is True  # its attestations must come back
    assert following.domains == {"git", "python", "general"}
    everything = Following(())
    assert everything.add_authored(("python",)) is False and everything.domains is None
    everything.report(["node"], 1.0)
    assert everything.domains == {"node", "python", "general"}
