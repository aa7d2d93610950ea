"""Schema version 5 (issue 16): each embedding stored once, read-only opens that write nothing.

``data/store-v4.tar.gz`` is a store made by the code before version 5 (schema 4: embeddings
as SQLite blobs and in the vectors file): three real spotter transcripts ingested, one sleep
(5 lessons, 5 open predictions). It is migrated here as a user's store would be.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tarfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from openmemory_local.core.config import Config
from openmemory_local.recall.query import recall
from openmemory_local.sleep.passes import sleep
from openmemory_local.storage.store import SCHEMA_VERSION, Store

FIXTURE = Path(__file__).parent / "data" / "store-v4.tar.gz"
NOW = datetime(2026, 2, 14, tzinfo=timezone.utc)


@pytest.fixture
def v4_home(tmp_path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(home, filter="data")
    return home


def _raw(home: Path, sql: str) -> list:
    conn = sqlite3.connect(home / "openmemory.db")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_a_version_4_store_keeps_every_vector_and_drops_the_blobs(v4_home):
    before = {key: (kind, text, blob) for kind, key, text, blob in
              _raw(v4_home, "SELECT kind, key, text, embedding FROM episodes")}
    counts = [_raw(v4_home, f"SELECT COUNT(*) FROM {t}")[0][0] for t in ("lessons", "lesson_members", "predictions")]
    assert _raw(v4_home, "SELECT MAX(version) FROM schema_version")[0][0] == 4 and len(before) == 33
    db_before = (v4_home / "openmemory.db").stat().st_size
    with Store.open(Config(home=v4_home)) as store:
        assert store.schema_version() == SCHEMA_VERSION
        assert (v4_home / "openmemory.db").stat().st_size < db_before  # the blobs' pages were given back
        columns = {row[1] for row in store.conn.execute("PRAGMA table_info(episodes)")}
        assert "embedding" not in columns and "embedder" in columns
        assert [store.conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("lessons", "lesson_members", "predictions")] == counts
        rows = store.conn.execute("SELECT key, text, vec_row, embedder FROM episodes").fetchall()
        assert len(rows) == len(before)
        matrix = np.fromfile(store.config.vectors_dir / store.get_meta("vectors_file"), dtype="<f4").reshape(-1, 256)
        for key, text, vec_row, embedder in rows:
            assert before[key][1] == text and embedder == "hash-wb-256-v1"
            assert matrix[vec_row].tobytes() == before[key][2]  # the very vector, not a re-embedding
        # recall and sleep work on the migrated store; the triggers follow the new column
        [top] = recall(store, "git push has no upstream branch", 1, NOW, touch=False)
        assert "push" in top.episode["text"]
        seq = store.counter("episode_seq")
        with store.write():
            store.conn.execute("UPDATE episodes SET embedder = embedder WHERE id = ?", (top.id,))
        assert store.counter("episode_seq") == seq + 1
        assert sleep(store, NOW).verify["open"] == counts[2]
    with Store.open(Config(home=v4_home)) as again:
        assert again.migrate() == []


def _holding_the_write_lock(home: Path):
    """Another process in a write transaction on the store, until its stdin closes."""
    code = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(home / "openmemory.db")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_read_only_commands_open_the_store_without_writing(v4_home, capsys):
    from openmemory_local.cli.main import main

    Store.open(Config(home=v4_home)).close()  # migrated once
    proc = _holding_the_write_lock(v4_home)
    try:
        config = Config(home=v4_home, busy_timeout=0.2)
        with Store.open(config) as store:  # no write transaction: the writer does not block it
            assert store.stats()["episodes"]["active"] == 33
            assert store.conn.total_changes == 0
        for command in (["stats"], ["lessons"], ["report"], ["episodes", "--limit", "3"],
                        ["recall", "git push", "--no-touch"]):
            assert main([*command, "--home", str(v4_home)]) == 0, command
        capsys.readouterr()
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
