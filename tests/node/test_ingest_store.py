"""The ingest pipeline over a real SQLite store and the real wire format."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import nacl.signing
import pytest

from openmemory_node import wire
from openmemory_node.ingest import Ingest
from openmemory_node.policy import Action, Limits, NodePolicy
from openmemory_node.store import MIGRATIONS, Store

REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "spec" / "vectors"
NOW = 1_760_000_000


class Clock:
    def __init__(self, t: float = NOW):
        self.t = t

    def __call__(self) -> float:
        return self.t


def lesson(key, text="The user corrected the agent for using pip; this project uses uv.", created=NOW, **kw):
    return wire.encode(wire.new_lesson(key, text=text, kind=kw.pop("kind", "correction"),
                                       strength=1500, provenance=bytes(32), created=created, **kw))


@pytest.fixture
def node(tmp_path):
    clock = Clock()
    store = Store.open(tmp_path, clock)
    graylisted = []
    ingest = Ingest(store, NodePolicy(Limits(author_burst=5, author_rate=1.0)), clock=clock,
                    on_graylist=graylisted.append)
    ingest.clock_ = clock
    ingest.graylisted = graylisted
    yield ingest
    store.close()


def test_a_valid_record_is_stored_with_where_and_when_it_came_from(node):
    key = nacl.signing.SigningKey.generate()
    data = lesson(key)
    outcome = node.accept(data, peer="peerA", originated=True)
    assert outcome.accepted
    row = node.store.get(outcome.record.id)
    assert row.data == data and row.type == "lesson" and row.kind == "correction"
    assert row.author == bytes(key.verify_key).hex() and row.created == NOW
    assert row.arrived == NOW and row.via == "gossip" and row.from_peer == "peerA"
    assert row.status == "candidate" and row.duplicates == 0
    assert node.store.get_by_idb(wire.record_id(data)).id == outcome.record.id


def test_data_by_idbs_answers_as_data_by_idb_for_each_id(node):
    key = nacl.signing.SigningKey(b"\x05" * 32)
    stored = [lesson(key, text=f"`make test{i}` failed twice: the fixture {i} was stale.") for i in range(600)]
    for data in stored:
        assert node.accept(data, peer=None).accepted
    ids = [wire.record_id(d) for d in stored]
    missing = [b"\x12\x20" + bytes([i]) * 32 for i in range(3)]
    asked = ids[:2] + missing[:1] + ids[2:] + ids[:1] + missing[1:]  # over 500 ids, some twice, some not held
    got = node.store.data_by_idbs(asked)
    assert got == {idb: node.store.data_by_idb(idb) for idb in asked if node.store.data_by_idb(idb) is not None}
    assert len(got) == 600 and all(got[i] == d for i, d in zip(ids, stored))
    assert node.store.data_by_idbs([]) == {} and node.store.data_by_idbs(missing) == {}


def test_duplicates_are_counted_not_stored_twice_and_not_penalised(node):
    data = lesson(nacl.signing.SigningKey.generate())
    assert node.accept(data, peer="a").accepted
    for peer in ("a", "b", "b"):
        assert node.accept(data, peer=peer).verdict.action is Action.DUPLICATE
    node.store.flush()
    assert node.store.count() == 1
    assert node.store.list()[0].duplicates == 3
    assert node.policy.ledger.penalty("b", NOW) == 0


def test_every_invalid_vector_is_refused_with_its_code_and_nothing_is_stored(node):
    vectors = json.loads((VECTORS / "invalid.json").read_text())
    assert vectors["now"] == NOW
    seen = set()
    for i, v in enumerate(vectors["vectors"]):
        if "expect_id" in v:  # the id check belongs to a fetch by id (see test_fetch.py)
            continue
        outcome = node.accept(bytes.fromhex(v["cbor"]), peer=f"peer{i}")
        assert outcome.verdict.code == v["error"], v["name"]
        expected = Action.IGNORE if v["error"] in ("clock-skew", "version") else Action.REJECT
        assert outcome.verdict.action is expected, v["name"]
        penalty = node.policy.ledger.penalty(f"peer{i}", NOW)
        assert penalty == (0 if expected is Action.IGNORE else node.policy.limits.invalid_penalty)
        seen.add(v["error"])
    assert seen >= set(wire.ERROR_CODES) - {"id"}
    assert node.store.count() == 0
    refused = node.store.rejections()
    assert sum(r["count"] for r in refused.values()) == sum(
        1 for v in vectors["vectors"] if "expect_id" not in v)


def test_every_valid_vector_is_accepted(node):
    vectors = json.loads((VECTORS / "valid.json").read_text())
    node.clock_.t = vectors.get("now", NOW)
    for v in vectors["vectors"]:
        outcome = node.accept(bytes.fromhex(v["cbor"]), peer=None, via="api")
        assert outcome.accepted, v.get("name")
        assert outcome.record.id == v["id"]


def test_a_record_on_the_wrong_topic_is_rejected(node):
    data = lesson(nacl.signing.SigningKey.generate())
    outcome = node.accept(data, peer="p", expect_type="revocation")
    assert outcome.verdict.action is Action.REJECT and outcome.verdict.code == "wrong-topic"
    assert not node.store.has_idb(wire.record_id(data))


def test_author_rate_limit_ignores_the_excess_unless_we_asked_for_it(node):
    key = nacl.signing.SigningKey.generate()
    records = [lesson(key, text=f"The test run {i} failed on the CI runner.") for i in range(8)]
    results = [node.accept(d, peer="relay").verdict for d in records[:6]]
    assert [v.action for v in results] == [Action.ACCEPT] * 5 + [Action.IGNORE]
    assert results[-1].code == "rate-limited-author"
    assert node.policy.ledger.penalty("relay", NOW) == 0  # an author's excess is not the relay's fault
    assert node.accept(records[6], peer="relay", via="fetch", solicited=True).accepted
    node.clock_.t += 1.0
    assert node.accept(records[7], peer="relay").accepted  # one token refilled


def test_refusals_are_charged_to_the_peer_until_it_is_graylisted_then_ignored_unread(node):
    key = nacl.signing.SigningKey.generate()
    bad = bytearray(lesson(key))
    sig = wire.decode(bytes(bad)).signature
    bad[bytes(bad).index(sig)] ^= 1
    for i in range(10):
        verdict = node.accept(bytes(bad), peer="evil").verdict
        assert verdict.code == "signature"
    assert node.graylisted == ["evil"]  # called once, when crossing the threshold
    good = lesson(key, text="The deploy took forty minutes on Monday.")
    verdict = node.accept(good, peer="evil").verdict
    assert verdict.action is Action.IGNORE and verdict.code == "graylisted"
    assert node.accept(good, peer="honest").accepted


def test_local_records_are_validated_but_charge_no_peer(node):
    key = nacl.signing.SigningKey.generate()
    unsigned = wire.Lesson(text="Always use uv.", kind="correction", strength=1, provenance=bytes(32),
                           derived_from=(), signer=bytes(key.verify_key), created=NOW, signature=bytes(64))
    data = wire.encode(wire.sign(unsigned, key))
    outcome = node.accept(data, peer=None, via="local")
    assert outcome.verdict.code == "observation"
    assert len(node.policy.ledger) == 0


def test_status_rules_are_applied_after_the_record_is_stored(tmp_path):
    class Rules:
        def initial(self, record):
            return "candidate"

        def after_accept(self, record, store, now):
            # e.g. a revocation changes its target's status: here every lesson becomes "seen"
            assert store.get(record.id) is not None  # the record is already stored
            return [(row.id, "seen") for row in store.list(type="lesson")]

    store = Store.open(tmp_path, Clock())
    ingest = Ingest(store, NodePolicy(), clock=Clock(), status_rules=Rules())
    outcome = ingest.accept(lesson(nacl.signing.SigningKey.generate()), peer=None)
    assert store.get(outcome.record.id).status == "seen"
    store.close()


def test_store_lists_filters_and_pages(tmp_path):
    store = Store.open(tmp_path, Clock())
    ingest = Ingest(store, NodePolicy(), clock=Clock())
    key = nacl.signing.SigningKey.generate()
    ids = [ingest.accept(lesson(key, text=f"The job {i} failed.", kind=("error" if i % 2 else "correction")),
                         peer=None).record.id for i in range(10)]
    assert [r.id for r in store.list(limit=3)] == ids[::-1][:3]
    page2 = store.list(limit=3, before_seq=store.list(limit=3)[-1].seq)
    assert [r.id for r in page2] == ids[::-1][3:6]
    assert {r.kind for r in store.list(kind="error")} == {"error"} and len(store.list(kind="error")) == 5
    assert store.counts() == {"lesson": {"candidate": 10}}
    assert store.set_status([(ids[0], "common"), (ids[1], "common")]) == 2
    assert store.count(status="common") == 2
    assert store.schema_version() == len(MIGRATIONS) == MIGRATIONS[-1].version
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()
    reopened = Store.open(tmp_path, Clock())  # migrations do not run twice
    assert reopened.count() == 10
    reopened.close()


WRITER = textwrap.dedent("""
    import sys, time, nacl.signing
    from openmemory_node import wire
    from openmemory_node.ingest import Ingest
    from openmemory_node.policy import NodePolicy, Limits
    from openmemory_node.store import Store
    store = Store.open(sys.argv[1])
    ingest = Ingest(store, NodePolicy(Limits(author_burst=10**9)))
    key = nacl.signing.SigningKey.generate()
    i = 0
    while True:
        data = wire.encode(wire.new_lesson(key, text=f"The build {i} failed on the runner.", kind="error",
                                           strength=1000, provenance=bytes(32), created=int(time.time())))
        if ingest.accept(data, peer="p").accepted:
            print(wire.record_id(data).hex(), flush=True)  # acknowledged after the commit
        i += 1
""")


def test_every_acknowledged_record_survives_kill_9_mid_write(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE,
                            text=True)
    acknowledged = []
    try:
        deadline = time.monotonic() + 20
        while len(acknowledged) < 300 and time.monotonic() < deadline:
            acknowledged.append(proc.stdout.readline().strip())
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    acknowledged += [line.strip() for line in proc.stdout.read().splitlines() if line.strip()]
    assert len(acknowledged) >= 300
    db = sqlite3.connect(tmp_path / "node.db")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    stored = {row[0] for row in db.execute("SELECT id FROM records")}
    assert set(acknowledged) <= stored
    db.close()
    store = Store.open(tmp_path)  # and the node opens it again
    assert store.count() == len(stored)
    store.close()
