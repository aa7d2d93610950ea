"""Schema version 2 (sleep's tables): a version-1 store upgrades in place."""

from __future__ import annotations

import openmemory_local.storage.store as store_module
from openmemory_local.core.config import Config
from openmemory_local.sleep.passes import sleep
from openmemory_local.storage.store import Store

from .test_sleep import at, error


def _add_v1(store, *episodes):
    """Episodes as version 1 stored them: the embedding as a blob beside its row of the vectors file."""
    from openmemory_local.text.embed import embed
    from openmemory_local.core.jsonio import dumps

    store.config.vectors_dir.mkdir(parents=True, exist_ok=True)
    with store.write(), open(store.config.vectors_dir / "episodes-1.f32", "wb") as matrix:
        store.set_meta("embedding", "hash-wb-256-v1")
        store.set_meta("vectors_file", "episodes-1.f32")
        store.set_meta("vectors_generation", "1")
        for row, ep in enumerate(episodes):
            vec = embed(ep.text)
            matrix.write(vec.tobytes())
            store.set_counter("vec_rows", row + 1)
            store.conn.execute(
                "INSERT INTO episodes (kind, key, session_id, project, text, fields, embedding, created, last_touched, "
                "vec_row, ingested, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (ep.kind, ep.key, ep.session_id, ep.project, ep.text, dumps(ep.fields), vec.tobytes(), ep.created,
                 ep.created, row, ep.created, ep.created))


def test_a_version_1_store_upgrades_and_keeps_its_episodes(tmp_path, monkeypatch):
    config = Config(home=tmp_path / "home")
    monkeypatch.setattr(store_module, "MIGRATIONS", store_module.MIGRATIONS[:1])
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", 1)
    with Store.open(config) as old:
        _add_v1(old, error("e1", "s1", 0), error("e2", "s2", 0))
        assert "lessons" not in old.db.table_names()
    monkeypatch.undo()
    with Store.open(config) as new:
        assert new.schema_version() == store_module.SCHEMA_VERSION  # every later migration too
        assert [e["key"] for e in new.episodes()] == ["e1", "e2"]
        assert sleep(new, at(0, 23)).learn["learned"]
        # deleting an episode (a transcript re-read) takes its membership with it
        with new.write():
            new.conn.execute("DELETE FROM episodes WHERE key = 'e1'")
        assert new.conn.execute("SELECT COUNT(*) FROM lesson_members").fetchone()[0] == 1

