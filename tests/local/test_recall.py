"""Recall: the score and its components, touching, filters, and the cached index."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from datetime import timedelta

import numpy as np
import pytest

from openmemory_local.core.clock import iso
from openmemory_local.text.embed import DIMS, embed, tokens
from openmemory_local.ingest.episodes import Episode
from openmemory_local.ingest.transcripts import add_episodes
from openmemory_local.recall.query import EmptyQuery, RecallIndex, recall
from openmemory_local.storage.store import Store


def ep(key: str, text: str, created, kind: str = "error", project: str = "/home/me/app") -> Episode:
    return Episode(kind=kind, key=key, text=text, fields={}, session_id="s1", agent_id=None,
                   project=project, created=iso(created), source_line=1)


@pytest.fixture
def filled(store, now):
    add_episodes(store, [
        ep("push", "Bash `git push` failed with exit code 128: the current branch has no upstream branch.",
           now - timedelta(days=30)),
        ep("test", "Bash `mix test` failed with exit code 2: no secret_key_base configuration found.",
           now - timedelta(days=1)),
        ep("ignored", "Bash `git add priv/static/assets` failed: the paths are ignored by .gitignore.",
           now - timedelta(days=60), project="/home/me/other"),
        ep("session", "Session in app: asked to fix the push; ran git push and mix test.", now,
           kind="session"),
    ], now=now)
    return store


def test_score_is_relevance_scaled_by_recency_and_strength(filled, now):
    query = "git push fails: no upstream branch"
    results = recall(filled, query, 4, now, touch=False)
    assert [r.episode["key"] for r in results][0] == "push"
    q = embed(query)
    for r in results:
        e = r.episode
        rel = float(embed(e["text"]) @ q)  # the vectors file holds the text's embedding
        age_days = (now - _dt(e["last_touched"])).total_seconds() / 86400
        rec = 0.5 ** (age_days / 30)
        assert r.relevance == pytest.approx(rel, abs=1e-5)
        assert r.recency == pytest.approx(rec, abs=1e-6)
        assert r.strength == 1.0
        assert r.score == pytest.approx(rel * (0.6 + 0.25 * rec + 0.15 * 1.0), abs=1e-5)
    push = results[0]
    assert push.recency == pytest.approx(0.5, abs=1e-6)  # 30 days: one half-life
    assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)


def _dt(text):
    from openmemory_local.core.clock import parse_time

    return parse_time(text)


def test_strength_is_clipped_and_archived_memories_are_not_recalled(filled, now):
    with filled.write():
        filled.conn.execute("UPDATE episodes SET strength = 2.5 WHERE key = 'push'")
        filled.conn.execute("UPDATE episodes SET strength = 0.2 WHERE key = 'test'")
        filled.conn.execute("UPDATE episodes SET archived = 1 WHERE key = 'ignored'")
    results = {r.episode["key"]: r for r in recall(filled, "git push mix test gitignore", 10, now, touch=False)}
    assert results["push"].strength == 1.0
    assert results["test"].strength == pytest.approx(0.2)
    assert "ignored" not in results


def test_recall_touches_what_it_returns(filled, now):
    later = now + timedelta(days=3)
    [top] = recall(filled, "git push no upstream", 1, later)
    row = filled.episode(top.id)
    assert row["last_touched"] == iso(later) and row["touches"] == 1
    others = [e for e in filled.episodes() if e["id"] != top.id]
    assert all(e["touches"] == 0 for e in others)
    # Touched means recent: the next recall sees recency 1.0.
    [again] = recall(filled, "git push no upstream", 1, later)
    assert again.id == top.id and again.recency == pytest.approx(1.0)
    # A simulated earlier "now" never moves last_touched back.
    recall(filled, "git push no upstream", 1, now)
    assert filled.episode(top.id)["last_touched"] == iso(later)
    assert filled.episode(top.id)["touches"] == 3
    recall(filled, "git push no upstream", 1, later, touch=False)
    assert filled.episode(top.id)["touches"] == 3


def test_filters_by_kind_and_project(filled, now):
    kinds = {r.episode["kind"] for r in recall(filled, "git push", 10, now, kinds=["session"], touch=False)}
    assert kinds == {"session"}
    projects = {r.episode["key"] for r in recall(filled, "git", 10, now, project="other", touch=False)}
    assert projects == {"ignored"}
    assert recall(filled, "git", 10, now, project="-home-me-other", touch=False)[0].episode["key"] == "ignored"
    assert recall(filled, "git", 10, now, project="nowhere", touch=False) == []


def test_an_empty_query_is_an_error(filled, now):
    with pytest.raises(EmptyQuery):
        recall(filled, "the of and --", 5, now)


def test_an_empty_store_recalls_nothing(store, now):
    assert recall(store, "anything at all", 5, now) == []


def test_the_cached_index_follows_every_change(filled, now, config):
    assert recall(filled, "docker compose network", 1, now, touch=False)[0].episode["key"] != "docker"
    add_episodes(filled, [ep("docker", "docker compose up failed: network not found", now)], now=now)
    assert recall(filled, "docker compose network", 1, now, touch=False)[0].episode["key"] == "docker"
    # Another process (here another connection) archives it, then deletes it.
    with Store.open(config) as other:
        with other.write():
            other.conn.execute("UPDATE episodes SET archived = 1 WHERE key = 'docker'")
    assert recall(filled, "docker compose network", 1, now, touch=False)[0].episode["key"] != "docker"
    with Store.open(config) as other:
        with other.write():
            other.conn.execute("UPDATE episodes SET archived = 0 WHERE key = 'docker'")
    assert recall(filled, "docker compose network", 1, now, touch=False)[0].episode["key"] == "docker"
    with Store.open(config) as other:
        with other.write():
            other.conn.execute("DELETE FROM episodes WHERE key = 'docker'")
    assert all(r.episode["key"] != "docker" for r in recall(filled, "docker compose network", 5, now, touch=False))


def test_a_changed_text_gets_a_new_vector(filled, now):
    add_episodes(filled, [ep("push", "npm install failed: ERESOLVE unable to resolve dependency tree", now)],
                 now=now)
    [top] = recall(filled, "npm ERESOLVE dependency tree", 1, now, touch=False)
    assert top.episode["key"] == "push" and top.relevance > 0.5


def test_a_lost_or_damaged_matrix_is_rebuilt_from_the_store(filled, now, config):
    expected = [(r.episode["key"], round(r.score, 6)) for r in recall(filled, "git push", 4, now, touch=False)]
    matrix = config.vectors_dir / filled.get_meta("vectors_file")
    matrix.unlink()
    fresh = Store.open(config)
    assert [(r.episode["key"], round(r.score, 6)) for r in recall(fresh, "git push", 4, now, touch=False)] == expected
    # Overwrite it with zeros: validation against the store notices and rebuilds.
    path = config.vectors_dir / fresh.get_meta("vectors_file")
    path.write_bytes(bytes(path.stat().st_size))
    again = Store.open(config)
    assert [(r.episode["key"], round(r.score, 6)) for r in recall(again, "git push", 4, now, touch=False)] == expected


def test_stale_rows_are_compacted(config, now):
    store = Store.open(config.with_(vector_garbage_min=3, vector_garbage_ratio=0.5))
    add_episodes(store, [ep("a", "alpha beta", now), ep("b", "gamma delta", now)], now=now)
    for i in range(5):
        add_episodes(store, [ep("a", f"alpha beta version {i}", now)], now=now)
    rows = store.counter("vec_rows")
    assert rows < 7  # compacted at least once
    assert store.get_meta("vectors_file") != "episodes-1.f32"
    [top] = recall(store, "alpha beta version 4", 1, now, touch=False)
    assert top.episode["key"] == "a" and top.relevance == pytest.approx(1.0, abs=1e-5)


def test_index_arrays_match_the_store(filled, now):
    index = RecallIndex(filled)
    index.refresh()
    live = index.ids[index.ids >= 0]
    assert sorted(live.tolist()) == sorted(e["id"] for e in filled.episodes(include_archived=True))
    assert index.matrix.shape[1] == DIMS


# --- the embedding ------------------------------------------------------------------


GOLDEN = "git push failed with exit code 128: the current branch has no upstream branch"


def test_the_embedding_is_the_same_in_every_process():
    here = hashlib.sha256(embed(GOLDEN).tobytes()).hexdigest()
    code = ("import hashlib; from openmemory_local.text.embed import embed; "
            f"print(hashlib.sha256(embed({GOLDEN!r}).tobytes()).hexdigest())")
    for seed in ("1", "2", "random"):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert out.stdout.strip() == here


def test_the_embedding_is_pinned():
    """A change to tokenising, stemming, hashing or weights must change EMBEDDING too."""
    vec = embed(GOLDEN)
    assert vec.dtype == np.float32 and vec.shape == (256,)
    assert float(np.linalg.norm(vec)) == pytest.approx(1.0, abs=1e-6)
    assert hashlib.sha256(vec.tobytes()).hexdigest() == PINNED


PINNED = "bcaa9cb4cae12b866f3e8163c7d0db770c1837cc566c09c5411d047537d4fe23"


def test_tokens_and_stems():
    assert tokens("Pushes failed; FAILING branches: git-push --set-upstream") == [
        "push", "fail", "fail", "branch", "git", "push", "set", "upstream"]
    assert not embed("the of and").any()
    a, b = embed("git push fails"), embed("git push failed")
    assert float(a @ b) == pytest.approx(1.0, abs=1e-6)



def test_recency_never_lets_a_memory_that_barely_matches_outrank_one_that_matches_well(store, now):
    """The rule: a memory outranks another only if its relevance is at least 0.6 times the other's.
    A fresh, strong, just-touched memory that barely matches stays below an old one that matches."""
    from datetime import timedelta

    from openmemory_local.ingest.episodes import Episode
    from openmemory_local.ingest.transcripts import add_episodes
    from openmemory_local.recall.query import score_of

    old = now - timedelta(days=400)
    exact = Episode("error", "exact", "git push failed: fatal: the current branch has no upstream branch", {},
                    "s1", None, "/a", old.isoformat(), 1)
    loose = Episode("error", "loose", "the branch of the web page layout was reviewed and merged today", {},
                    "s2", None, "/a", now.isoformat(), 1)
    add_episodes(store, [exact, loose], now=now)
    store.conn.execute("UPDATE episodes SET strength = 0.2 WHERE key = 'exact'")
    query = "git push says the branch has no upstream"
    for _ in range(3):  # recall touches what it returns: the loose one is renewed every time
        results = recall(store, query, 2, now)
    rel = {r.episode["key"]: r for r in results}
    assert rel["exact"].relevance > 2 * rel["loose"].relevance > 0
    assert [r.episode["key"] for r in results] == ["exact", "loose"]
    # the bound, whatever the recency and strength: at most a factor 1.0 / 0.6 between two memories
    config = store.config
    assert score_of(config, 0.5, 1.0, 1.0) < score_of(config, 0.84, 0.0, 0.0)
    assert score_of(config, 0.61, 1.0, 1.0) > score_of(config, 1.0, 0.0, 0.0)


def test_lessons_are_recalled_first_and_only_when_they_match(store, now):
    from .test_sleep import add, at, error, session
    from openmemory_local.recall.query import recall_lessons
    from openmemory_local.sleep.passes import sleep

    add(store, error("e1", "s1", 0), error("e2", "s2", 0), session("s1", 0, ["git push"]), day=0)
    sleep(store, at(0, 23))
    [hit] = recall_lessons(store, "git push says the branch has no upstream", now=at(1))
    assert "has no upstream branch" in hit.lesson["text"] and hit.lesson["seen"] == 2
    assert hit.evidence is not None and hit.relevance >= 0.3
    assert recall_lessons(store, "css grid layout of the landing page", now=at(1)) == []


def test_a_process_that_applied_many_changes_saves_the_arrays_again(filled, now, config, monkeypatch):
    import json

    import openmemory_local.recall.query as recall_module

    monkeypatch.setattr(recall_module, "_SAVE_MIN_ROWS", 1)
    RecallIndex(filled).refresh()
    saved = config.vectors_dir / (filled.get_meta("vectors_file").split(".")[0] + ".recall.npy")

    def saved_seq() -> int:
        with open(saved, "rb") as f:
            return json.loads(np.load(f).tobytes().decode())["seq"]

    first = saved_seq()
    touched = [r.id for r in recall(filled, "git push mix test", 3, now)]  # touches: changed rows
    assert len(touched) >= 2
    monkeypatch.setattr(recall_module, "_RESAVE_CHANGES", len(touched) + 1)
    with Store.open(config) as fresh:
        RecallIndex(fresh).refresh()  # fewer changes than the threshold: applied, not saved
    assert saved_seq() == first
    monkeypatch.setattr(recall_module, "_RESAVE_CHANGES", len(touched))
    with Store.open(config) as fresh:
        RecallIndex(fresh).refresh()
        assert saved_seq() == fresh.counter("episode_seq") > first
        again = RecallIndex(fresh)
        assert again._load_saved(fresh.get_meta("vectors_file"), fresh.counter("episode_epoch"),
                                 fresh.counter("vec_rows"), fresh.counter("episode_seq")) == saved_seq()
        full = RecallIndex(fresh)
        full._load(fresh.counter("vec_rows"), changed_since=None)
        live = full.ids >= 0
        assert np.array_equal(again.ids, full.ids) and np.array_equal(again.touched[live], full.touched[live])


def test_a_fresh_process_loads_the_saved_arrays_and_what_changed_since(filled, now, config, monkeypatch):
    import openmemory_local.recall.query as recall_module

    monkeypatch.setattr(recall_module, "_SAVE_MIN_ROWS", 1)
    first = RecallIndex(filled)
    first.refresh()  # a full load: the arrays are saved beside the matrix
    saved = config.vectors_dir / (filled.get_meta("vectors_file").split(".")[0] + ".recall.npy")
    assert saved.is_file()
    with Store.open(config) as other, other.write():  # another process changes the store meanwhile
        other.conn.execute("UPDATE episodes SET archived = 1 WHERE key = 'push'")
    add_episodes(filled, [ep("docker", "docker compose up failed: network not found", now,  # a new row, new codes
                             kind="correction", project="/home/me/docker"),
                          ep("test", "npm install failed: ERESOLVE unable to resolve dependency tree",
                             now - timedelta(days=1))], now=now)  # a new text: the same episode on a new row
    with Store.open(config) as fresh:
        index = RecallIndex(fresh)
        assert index._load_saved(fresh.get_meta("vectors_file"), fresh.counter("episode_epoch"),
                                 fresh.counter("vec_rows"), fresh.counter("episode_seq")) is not None
        index = RecallIndex(fresh)
        index.refresh()
        assert index._rows_of is None  # the changes were applied without a dict of every row
        full = RecallIndex(fresh)
        full._load(fresh.counter("vec_rows"), changed_since=None)
        assert np.array_equal(index.ids, full.ids) and np.array_equal(index.active, full.active)
        live = full.ids >= 0  # a row left behind keeps its old values, under id -1 and inactive
        for key in ("strength", "touched"):
            assert np.array_equal(getattr(index, key)[live], getattr(full, key)[live]), key
        for key, codes in (("kind", "_kinds"), ("project", "_projects")):  # the codes' order may differ
            names = [{c: n for n, c in getattr(i, codes).items()} for i in (index, full)]
            assert ([names[0][c] for c in getattr(index, key)[live]] == [names[1][c] for c in getattr(full, key)[live]])
        assert index._row_of == full._row_of
        [moved] = fresh.conn.execute("SELECT id, vec_row FROM episodes WHERE key = 'test'").fetchall()
        assert moved[1] > 0 and index._row_of[moved[0]] == moved[1] and list(index.ids).count(moved[0]) == 1
        keys = [r.episode["key"] for r in recall(fresh, "git push docker network", 5, now, touch=False)]
        assert "push" not in keys and "docker" in keys
    good = saved.read_bytes()
    import io

    listed = io.BytesIO()
    np.save(listed, np.frombuffer(b"[1, 2]", dtype=np.uint8))  # a well-formed array whose meta is no object
    for damaged in (b"not a numpy archive", good[: len(good) // 2], good[:200], listed.getvalue()):
        # garbage, cut, not ours: the store is read
        saved.write_bytes(damaged)
        with Store.open(config) as fresh:
            keys = [r.episode["key"] for r in recall(fresh, "git push docker network", 5, now, touch=False)]
            assert "push" not in keys and "docker" in keys


def test_a_one_shot_recall_imports_only_what_it_uses(filled, now, config):
    """What `openmemory recall` pays at every call from a hook: not shutil (and its compressors),
    hashlib's OpenSSL, or normalize's expressions (needed with --project only)."""
    probe = ("import sys; from openmemory_local.cli.main import main; code = main(sys.argv[1:]); "
             "print(code, sorted(m for m in ('shutil', 'hashlib', 'lzma', 'openmemory_local.text.normalize') "
             "if m in sys.modules))")
    env = dict(os.environ, OPENMEMORY_HOME=str(config.home), OPENMEMORY_NOW=iso(now))
    run = subprocess.run([sys.executable, "-c", probe, "recall", "git push upstream"], capture_output=True,
                         text=True, env=env, check=True)
    assert "#1" in run.stdout and run.stdout.splitlines()[-1] == "0 []"
    run = subprocess.run([sys.executable, "-c", probe, "recall", "git push upstream", "--project", "app"],
                         capture_output=True, text=True, env=env, check=True)
    assert "#1" in run.stdout and run.stdout.splitlines()[-1] == "0 ['openmemory_local.text.normalize']"
