"""Recall beyond ``recall_index_min_rows``: the HNSW index proposes, recall scores exactly.

A small store with the threshold lowered (the index's rules do not depend on size): the
answers are the exact pass's, rows added after the index was built are found, and a damaged
or missing index leaves recall exact.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from openmemory_local.recall.ann import AnnIndex, update
from openmemory_local.core.config import Config
from openmemory_local.ingest.transcripts import add_episodes
from openmemory_local.recall.query import index_for, recall
from openmemory_local.storage.store import Store

from .test_recall import ep

WORDS = ("git push branch upstream mix test secret key base docker compose network port allocated npm build "
         "module chunk pytest settings import credo format check commit hook ignored assets static read file "
         "missing cache state json timeout deploy release migration database locked schema").split()


def _fill(store, now, n, start=0, seed=1):
    rng = random.Random(seed)
    add_episodes(store, [ep(f"m{start + i}", " ".join(rng.choices(WORDS, k=rng.randint(4, 12))),
                            now - timedelta(days=rng.uniform(0, 200))) for i in range(n)], now=now)


def _answers(store, now, queries, k=10):
    return [[(r.id, round(r.score, 6)) for r in recall(store, q, k, now, touch=False)] for q in queries]


def _recall_at_10(found, exact) -> float:
    """Share of the exact answers the index found (an answer that ties the exact 10th score counts)."""
    hits = total = 0
    for a, e in zip(found, exact):
        ids, kth = {i for i, _ in e}, (e[-1][1] if e else 0.0)
        hits += sum(1 for i, score in a if i in ids or score >= kth - 1e-6)
        total += len(e)
    return hits / max(1, total)


def test_the_index_finds_what_the_exact_pass_finds_and_rows_added_since(tmp_path, now):
    pytest.importorskip("usearch")
    from openmemory_local.core.embedders import store_embedder

    home = tmp_path / "home"
    rng = random.Random(7)
    queries = [" ".join(rng.choices(WORDS, k=rng.randint(2, 5))) for _ in range(40)]
    with Store.open(Config(home=home, recall_index_min_rows=0)) as exact:
        _fill(exact, now, 3000)
    with Store.open(Config(home=home, recall_index_min_rows=1000)) as store:
        assert update(store)["indexed"] == 3000
        index = index_for(store)
        index.refresh()
        assert isinstance(index.ann, AnnIndex) and index.ann.rows == 3000
        # rows past the index are scored exactly, as its tail
        add_episodes(store, [ep("tail", "zebra quokka narwhal stampede", now)], now=now)
        assert recall(store, "zebra quokka narwhal", 1, now, touch=False)[0].episode["key"] == "tail"
        with_index = _answers(store, now, queries)
        answered = [index._search_ann(store_embedder(store).embed(q), now, 10, None, None) for q in queries]
        assert sum(a is not None for a in answered) >= 30  # the index answered, not the exact fallback
    with Store.open(Config(home=home, recall_index_min_rows=0)) as exact:
        exact_answers = _answers(exact, now, queries)
    assert _recall_at_10(with_index, exact_answers) >= 0.98
    # the index is derived data: damaged, it is ignored (recall is the exact pass) until rebuilt
    for path in (home / "vectors").glob("*.usearch"):
        path.write_bytes(b"garbage")
    with Store.open(Config(home=home, recall_index_min_rows=1000)) as store:
        assert _answers(store, now, queries) == exact_answers
        assert update(store, force=True)["added"] == 3001
    with Store.open(Config(home=home, recall_index_min_rows=1000)) as store:
        index = index_for(store)
        index.refresh()
        assert index.ann is not None and index.ann.rows == 3001
        assert _recall_at_10(_answers(store, now, queries), exact_answers) >= 0.98
