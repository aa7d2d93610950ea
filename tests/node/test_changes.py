"""GET /v1/changes: a cursor over arrivals and status changes (what the engine pulls)."""

from __future__ import annotations

import sqlite3
import time

import nacl.signing
import pytest
import sqlite_utils

from openmemory_node import store as store_mod
from openmemory_node import wire
from openmemory_node.client import ApiError
from openmemory_node.store import Store

from .harness import Cluster

LESSON = "The user corrected the agent for using pip; this project uses uv."


def _add(store: Store, n: int, status: str = "candidate") -> str:
    rid = f"{n:068x}"
    store.add(id=rid, idb=bytes.fromhex(rid), type="lesson", kind="correction", author="ab" * 32,
              created=n, data=b"x", via="local", from_peer=None, status=status)
    return rid


def test_every_arrival_and_status_change_takes_the_next_change_number(tmp_path):
    store = Store(tmp_path / "node.db")
    a, b = _add(store, 1), _add(store, 2)
    assert [(c, r.id) for c, r in store.changes(0)] == [(1, a), (2, b)]
    assert store.set_status([(a, "common"), (b, "candidate")]) == 1  # b unchanged: no new number
    assert [(c, r.id, r.status) for c, r in store.changes(0)] == [(2, b, "candidate"), (3, a, "common")]
    assert [r.id for _, r in store.changes(2)] == [a]
    c = _add(store, 3)
    assert [(n, r.id) for n, r in store.changes(3)] == [(4, c)]
    assert store.last_change() == 4
    assert [r.id for _, r in store.changes(0, limit=1)] == [b]
    assert store.changes(0, type="vouch") == []
    store.close()


def _store_of_schema(path, version: int, numbers) -> sqlite3.Connection:
    """A node.db file at schema ``version`` holding a lesson row of id f"{n:068x}" for each n."""
    conn = sqlite3.connect(path, isolation_level=None)
    db = sqlite_utils.Database(conn)
    for migration in store_mod.MIGRATIONS[:version]:  # the old runner's way: PRAGMA user_version
        migration.apply(db)
    conn.execute(f"PRAGMA user_version={version}")
    for n in numbers:
        rid = f"{n:068x}"
        conn.execute("INSERT INTO records (id, idb, type, author, created, arrived, via, status, size, data) "
                     "VALUES (?,?,?,?,?,?,?,?,?,?)", (rid, bytes.fromhex(rid), "lesson", "ab", n, 0.0, "gossip",
                                                     "candidate", 1, b"x"))
    return conn


def test_a_store_of_the_previous_schema_is_numbered_in_arrival_order(tmp_path):
    path = tmp_path / "node.db"
    _store_of_schema(path, 2, (5, 6, 7)).close()
    store = Store(path)  # migrates
    assert [c for c, _ in store.changes(0)] == [1, 2, 3]
    assert [r.id for _, r in store.changes(0)] == [f"{n:068x}" for n in (5, 6, 7)]
    new = _add(store, 8)
    assert store.changes(3)[0][1].id == new and store.last_change() == 4
    store.close()


def test_an_insert_by_another_path_is_still_numbered_and_an_arrival_written_once(tmp_path):
    store = Store(tmp_path / "node.db")
    a = _add(store, 1)
    rid = f"{2:068x}"  # a row written without Store.add (a tool, a later write path): the trigger numbers it
    store.conn.execute("INSERT INTO records (id, idb, type, author, created, arrived, via, status, size, data) "
                       "VALUES (?,?,?,?,?,?,?,?,?,?)", (rid, bytes.fromhex(rid), "lesson", "ab", 2, 0.0, "gossip",
                                                       "candidate", 1, b"x"))
    c = _add(store, 3)
    assert [(n, r.id) for n, r in store.changes(0)] == [(1, a), (2, rid), (3, c)]
    # Store.add numbers the row in its own INSERT: the trigger does not write it a second time
    # (total_changes counts the rows its programs write too).
    before = store.conn.total_changes
    _add(store, 4)
    assert store.conn.total_changes - before == 1 and store.last_change() == 4
    store.close()


@pytest.mark.slow
def test_changes_catch_a_status_change_without_a_record_of_its_own(cluster: Cluster):
    node = cluster.node("a")
    node.init()
    node.configure("[commons]\nthreshold = 1")
    node.start()
    lesson = node.publish(LESSON)["id"]
    first = node.get("/v1/changes?after=0")
    assert [c["id"] for c in first["changes"]] == [lesson]
    entry = first["changes"][0]
    assert entry["status"] == "candidate" and entry["record"]["text"] == LESSON
    assert entry["commons"]["confirmers"] == 0 and entry["commons"]["threshold"] == 1
    assert entry["commons"]["authors"] == [node.public_key] and entry["commons"]["group"] == lesson
    cursor = first["next_after"]
    assert first["last"] == cursor and first["more"] is False
    nothing = node.get(f"/v1/changes?after={cursor}")
    assert nothing["changes"] == [] and nothing["next_after"] == cursor

    # An attestation by a key this node does not trust: a new record, no status change.
    stranger = nacl.signing.SigningKey.generate()
    att = wire.new_attestation(stranger, lesson_id=lesson, verdict="confirmed", met_before=False,
                               evidence={"sessions": 2, "matched": 1, "window": 86400}, created=int(time.time()))
    node.post("/v1/records", {"cbor": wire.encode(att).hex()})
    page = node.get(f"/v1/changes?after={cursor}")
    assert [(c["type"], c["status"]) for c in page["changes"]] == [("attestation", "not-counted")]
    assert page["changes"][0]["commons"]["lesson"] == lesson  # the summary of the lesson it names
    assert page["changes"][0]["commons"]["votes"] == 1 and page["changes"][0]["commons"]["counted"] == 0
    cursor = page["next_after"]

    # Trusting that key recomputes the statuses: the lesson is common, and the cursor sees it,
    # though no record arrived.
    node.post("/v1/trust", {"key": stranger.verify_key.encode().hex()})
    page = node.get(f"/v1/changes?after={cursor}")
    by_id = {c["id"]: c for c in page["changes"]}
    assert by_id[lesson]["status"] == "common" and by_id[lesson]["commons"]["confirmers"] == 1
    assert by_id[att.id]["status"] == "counted"
    assert all(c["change"] > cursor for c in page["changes"])
    assert node.get("/v1/changes?after=0&type=lesson")["changes"][0]["id"] == lesson
    for bad in ("after=-1", "limit=0", "limit=5000", "type=episode", "after=x"):
        with pytest.raises(ApiError) as err:
            node.get(f"/v1/changes?{bad}")
        assert err.value.status == 400


def test_a_store_of_schema_4_loses_its_idb_index_and_finds_records_by_id_as_before(tmp_path):
    path = tmp_path / "node.db"
    conn = _store_of_schema(path, 4, (9,))
    rid = f"{9:068x}"
    assert "idx_records_idb" in {row[1] for row in conn.execute("PRAGMA index_list(records)")}
    conn.close()
    store = Store(path)  # migrates
    indexes = {row[1] for row in store.conn.execute("PRAGMA index_list(records)")}
    assert "idx_records_idb" not in indexes and len(indexes) == 5  # the id's, type+status, kind, author, change
    idb = bytes.fromhex(rid)
    assert store.has_idb(idb) and store.get_by_idb(idb).id == rid and store.data_by_idb(idb) == b"x"
    assert not store.has_idb(bytes.fromhex(f"{8:068x}"))
    # (the plan of a look-up by id bytes uses the id's index, not a scan)
    plan = " ".join(str(r) for r in store.conn.execute("EXPLAIN QUERY PLAN SELECT 1 FROM records WHERE id=?", (rid,)))
    assert "USING" in plan and "INDEX" in plan
    store.count_duplicate(idb)
    store.flush()
    assert store.get_by_idb(idb).duplicates == 1
    with pytest.raises(ValueError):  # the id is the text of the id bytes, or nothing is stored
        store.add(id=f"{7:068x}", idb=idb, type="lesson", kind=None, author="ab", created=1, data=b"y",
                  via="api", from_peer=None, status="candidate")
    store.close()
