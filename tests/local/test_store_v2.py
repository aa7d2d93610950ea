"""Schema version 2 (sleep's tables): a version-1 store upgrades in place."""

from __future__ import annotations

import openmemory_local.store as store_module
from openmemory_local.config import Config
from openmemory_local.sleep import sleep
from openmemory_local.store import Store

from .test_sleep import add, at, error


def test_a_version_1_store_upgrades_and_keeps_its_episodes(tmp_path, monkeypatch):
    config = Config(home=tmp_path / "home")
    monkeypatch.setattr(store_module, "MIGRATIONS", store_module.MIGRATIONS[:1])
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", 1)
    with Store.open(config) as old:
        add(old, error("e1", "s1", 0), error("e2", "s2", 0))
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

