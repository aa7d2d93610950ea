"""The node's store migrates in the engine's style (a ``Migration`` list, a ``schema_version``
table), and adopts a store made by the old runner (``PRAGMA user_version``) at any version."""

from __future__ import annotations

import sqlite3

import pytest
import sqlite_utils

from openmemory_node import store as store_mod
from openmemory_node.store import MIGRATIONS, SCHEMA_VERSION, Store, StoreError


def _old_runner_store(path, version: int) -> None:
    """A node.db as the old code path left it at ``version``: the first ``version`` migrations,
    each in its own transaction, then ``PRAGMA user_version`` (no schema_version table)."""
    conn = sqlite3.connect(path, isolation_level=None)
    db = sqlite_utils.Database(conn)
    for index in range(version):
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            MIGRATIONS[index].apply(db)
            conn.execute(f"PRAGMA user_version={index + 1}")
    if version >= 1:  # a record stored by the old node: it must survive the migration
        rid = f"{7:068x}"
        conn.execute("INSERT INTO records (id, idb, type, author, created, arrived, via, status, size, data) "
                     "VALUES (?,?,?,?,?,?,?,?,?,?)",
                     (rid, bytes.fromhex(rid), "lesson", "ab", 7, 0.0, "gossip", "candidate", 1, b"x"))
    conn.close()


def _versions(store: Store) -> list[int]:
    return [v for (v,) in store.conn.execute("SELECT version FROM schema_version ORDER BY version")]


def test_migrations_are_numbered_in_order_with_descriptions():
    assert [m.version for m in MIGRATIONS] == list(range(1, len(MIGRATIONS) + 1))
    assert all(m.description for m in MIGRATIONS) and SCHEMA_VERSION == len(MIGRATIONS)


def test_a_new_store_records_every_migration(tmp_path):
    store = Store(tmp_path / "node.db")
    assert _versions(store) == list(range(1, SCHEMA_VERSION + 1)) and store.schema_version() == SCHEMA_VERSION
    assert store.migrate() == []  # current: nothing runs twice
    store.close()


@pytest.mark.parametrize("version", range(0, len(MIGRATIONS) + 1))
def test_a_store_of_the_old_runner_at_each_version_opens_and_migrates(tmp_path, version):
    path = tmp_path / "node.db"
    _old_runner_store(path, version)
    store = Store(path)
    assert _versions(store) == list(range(1, SCHEMA_VERSION + 1))
    described = dict(store.conn.execute("SELECT version, description FROM schema_version"))
    assert all(described[v].startswith("before schema_version") for v in range(1, version + 1))
    assert not any(described[v].startswith("before") for v in range(version + 1, SCHEMA_VERSION + 1))
    # The schema is the current one: what the later migrations made is there, what they dropped is gone.
    indexes = {name for (name,) in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "idx_records_idb" not in indexes and "records_change" in indexes
    triggers = {sql for (sql,) in store.conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger'")}
    assert any("WHEN NEW.change IS NULL" in sql for sql in triggers)
    if version >= 1:
        assert [r.id for _, r in store.changes(0)] == [f"{7:068x}"]
    store.close()
    reopened = Store(path)  # and opens again without running anything
    assert reopened.migrate() == [] and _versions(reopened) == list(range(1, SCHEMA_VERSION + 1))
    reopened.close()


def test_a_store_newer_than_this_code_is_refused_untouched(tmp_path, monkeypatch):
    path = tmp_path / "node.db"
    Store(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("INSERT INTO schema_version VALUES (?, 'from a later node', '2030-01-01T00:00:00Z')",
                 (SCHEMA_VERSION + 1,))
    conn.close()
    with pytest.raises(StoreError, match="newer than this node knows"):
        Store(path)
    legacy = tmp_path / "legacy.db"
    _old_runner_store(legacy, len(MIGRATIONS))
    conn = sqlite3.connect(legacy, isolation_level=None)
    conn.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer than this node knows"):
        Store(legacy)
    conn = sqlite3.connect(legacy)
    assert conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] == 1  # nothing lost
    assert conn.execute("SELECT name FROM sqlite_master WHERE name = 'schema_version'").fetchone() is None
    conn.close()
    assert store_mod.SCHEMA_VERSION == SCHEMA_VERSION
