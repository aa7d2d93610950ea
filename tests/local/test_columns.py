"""Recall beyond ``recall_copy_min_rows`` by the 8-bit slot-major copy: the exact pass's answers.

A small store with the threshold and the block sizes lowered (the copy's rules do not depend on
size; synthetic texts of random words): every answer is the exact pass's, with filters, with
rows appended since the copy, with archived rows; a damaged, foreign or half-written copy is
ignored or repaired, never believed.
"""

from __future__ import annotations

import importlib
import json
import random

import numpy as np
import pytest

from openmemory_local.recall import columns
from openmemory_local.recall.columns import Columns, update
from openmemory_local.core.config import Config
from openmemory_local.core.embedders import store_embedder
from openmemory_local.ingest.transcripts import add_episodes
from openmemory_local.recall.query import index_for, recall
from openmemory_local.storage.store import Store
from openmemory_local.storage.vectors import VectorFile

from .test_ann import WORDS, _fill
from .test_recall import ep


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(columns, "BLOCK", 1024)
    monkeypatch.setattr(columns, "MIN_BLOCK", 256)


def _answers(store, now, queries, k=10, **kw):
    return [[(r.id, round(r.score, 5)) for r in recall(store, q, k, now, touch=False, **kw)] for q in queries]


def _queries(n=40, seed=3):
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(2, 6))) for _ in range(n)]


def _exact(home, now, queries, **kw):
    with Store.open(Config(home=home, recall_copy_min_rows=0, recall_index_min_rows=0)) as store:
        return _answers(store, now, queries, **kw)


def test_the_copy_answers_as_the_exact_pass_does(tmp_path, now):
    home = tmp_path / "home"
    queries = _queries()
    with Store.open(Config(home=home, recall_copy_min_rows=0, recall_index_min_rows=0)) as store:
        _fill(store, now, 3000)  # 3000 rows: blocks of 1024, 1024 and 952 (no block of the last few)
    with Store.open(Config(home=home, recall_copy_min_rows=1000, recall_index_min_rows=0)) as store:
        assert update(store) == {"rows": 3000, "covered": 3000, "added": 3000}
        assert update(store)["added"] == 0  # nothing new: nothing written
        meta = json.loads(next((home / "vectors").glob("*.cols.json")).read_text())
        assert [b[1] for b in meta["blocks"]] == [1024, 1024, 952]
        index = index_for(store)
        index.refresh()
        assert index.columns is not None and index.columns.rows == 3000
        vectors = [store_embedder(store).embed(q) for q in queries]
        used = [index._search_columns(v, now, 10, None, None) is not None for v in vectors]
        assert sum(used) >= 30  # the copy answered, not the exact fallback
        with_copy = _answers(store, now, queries)
        filtered = _answers(store, now, queries, kinds=["error"], project="app")
    assert with_copy == _exact(home, now, queries)
    assert filtered == _exact(home, now, queries, kinds=["error"], project="app")


def test_its_bound_holds_on_every_row(tmp_path, now):
    with Store.open(Config(home=tmp_path / "home", recall_copy_min_rows=0, recall_index_min_rows=0)) as store:
        _fill(store, now, 1500, seed=5)
    with Store.open(Config(home=tmp_path / "home", recall_copy_min_rows=1000, recall_index_min_rows=0)) as store:
        update(store)
        vectors = VectorFile(store)
        matrix = np.asarray(vectors.map(vectors.current_name(), vectors.committed_rows()))
        copy = Columns.open(store, vectors.current_name(), matrix)
        for q in _queries(20, seed=9):
            v = store_embedder(store).embed(q)
            approx, eps = copy.relevance(v, np.flatnonzero(v))
            assert np.max(np.abs(approx - matrix[: copy.rows] @ v)) <= eps
            assert 0 < eps < 0.05


def test_rows_since_the_copy_archived_rows_and_long_queries(tmp_path, now, monkeypatch):
    home = tmp_path / "home"
    with Store.open(Config(home=home, recall_copy_min_rows=0, recall_index_min_rows=0)) as store:
        _fill(store, now, 2000)
    with Store.open(Config(home=home, recall_copy_min_rows=1000, recall_index_min_rows=0)) as store:
        update(store)
        add_episodes(store, [ep("tail", "zebra quokka narwhal stampede", now)], now=now)
        assert update(store)["added"] == 0  # one new row: recall's exact tail
        hit = recall(store, "zebra quokka narwhal", 1, now, touch=False)[0]
        assert hit.episode["key"] == "tail"
        index = index_for(store)
        assert index._search_columns(store_embedder(store).embed("zebra quokka"), now, 1, None, None) is not None
        top = recall(store, "git push branch upstream", 5, now, touch=False)
        with store.write():
            store.conn.execute("UPDATE episodes SET archived = 1 WHERE id = ?", (top[0].id,))
        after = recall(store, "git push branch upstream", 5, now, touch=False)
        assert top[0].id not in [r.id for r in after]
        long_query = " ".join(WORDS)  # every word: more coordinates than numpy's column pass serves
        v = store_embedder(store).embed(long_query)
        assert len(np.flatnonzero(v)) > columns.MAX_SLOTS
        # the C pass serves it (unless OPENMEMORY_PURE turns it off)
        assert (index._search_columns(v, now, 10, None, None) is not None) == (columns._native() is not None)
        with monkeypatch.context() as m:
            m.setattr(columns, "_native", lambda: None)
            assert index._search_columns(v, now, 10, None, None) is None  # numpy's does not
            pure = _answers(store, now, [long_query, "zebra quokka"])
        queries = _queries(10) + [long_query, "zebra quokka"]
        answers = _answers(store, now, queries)
    assert answers == _exact(home, now, queries)
    assert pure == answers[-2:]


def test_the_c_column_pass_is_built_and_is_numpys_bit_for_bit(monkeypatch):
    """The test install has a compiler (the node extra needs one): the C pass must be there
    (imported directly, whatever OPENMEMORY_PURE says). Its sums are numpy's loop's, bit for
    bit, with one thread or two, on every block."""
    native = _built()
    monkeypatch.setattr(columns, "_native", lambda: native)
    rng = np.random.default_rng(7)
    blocks = []
    for first, n in ((0, 5000), (5000, 2051), (7051, 1)):
        scales = rng.uniform(1e-4, 1e-2, 256).astype(np.float32)
        blocks.append((first, scales, rng.integers(-127, 128, (256, n), dtype=np.int8)))
    copy = Columns(blocks, 7052, 256)
    for m in (1, 3, 4, 5, 17, 48, 200, 256):
        v = np.zeros(256, np.float32)
        slots = np.sort(rng.choice(256, m, replace=False))
        v[slots] = rng.normal(size=m).astype(np.float32)
        v /= np.linalg.norm(v)
        got, eps = copy.relevance(v, slots)
        with monkeypatch.context() as m:
            m.setattr(columns, "_THREADED", 1)  # two threads on any size
            two, _ = copy.relevance(v, slots)
        with monkeypatch.context() as m:
            m.setattr(columns, "_native", lambda: None)
            want, eps_numpy = copy.relevance(v, slots)
        assert got.tobytes() == want.tobytes() == two.tobytes()
        assert eps == eps_numpy


def _built():
    from openmemory_protocol import native

    try:
        module = importlib.import_module("openmemory_local._columns_c")
    except ImportError as e:
        raise AssertionError("openmemory_local._columns_c is not built (pip install -e .)") from e
    assert native._current(module), "openmemory_local._columns_c is stale (its source changed): pip install -e ."
    return module


def test_the_c_column_pass_refuses_what_does_not_fit():
    native = _built()
    codes = np.zeros((4, 10), np.int8)
    w, out, slots = np.ones(2, np.float32), np.zeros(10, np.float32), np.array([0, 3], np.int64)
    native.accumulate([(codes, w, out)], slots)
    bad = [
        ([(codes, w, out)], np.array([0, 4], np.int64), ValueError, "not a coordinate"),
        ([(codes, w, out)], np.array([-1, 0], np.int64), ValueError, "not a coordinate"),
        ([(codes, np.ones(3, np.float32), out)], slots, ValueError, "one per slot"),
        ([(codes, w, np.zeros(9, np.float32))], slots, ValueError, "rows expected"),
        ([(codes.ravel(), w, out)], slots, ValueError, "2-dimensional"),
        ([(codes.astype(np.int16), w, out)], slots, TypeError, "items of 1 bytes"),
        ([(codes, w, out)], slots.astype(np.int32), TypeError, "items of 8 bytes"),
        ([(codes, w)], slots, TypeError, "tuple"),
        ([(codes[:, ::2], w, out[:5])], slots, ValueError, "contiguous"),
    ]
    for blocks, s, error, message in bad:
        before = out.copy()
        with pytest.raises(error, match=message):
            native.accumulate(blocks, s)
        assert out.tobytes() == before.tobytes()  # nothing written
    read_only = out.copy()
    read_only.flags.writeable = False
    with pytest.raises((TypeError, ValueError, BufferError)):
        native.accumulate([(codes, w, read_only)], slots)


def test_long_queries_bound_and_filters(tmp_path, now):
    """Long queries by the C pass: the bound holds on every row, and the answers, filtered or
    not, are the exact pass's."""
    home = tmp_path / "home"
    with Store.open(Config(home=home, recall_copy_min_rows=0, recall_index_min_rows=0)) as store:
        _fill(store, now, 2500, seed=11)
    rng = random.Random(4)
    queries = [" ".join(rng.choices(WORDS, k=rng.randint(30, 80))) for _ in range(12)]
    with Store.open(Config(home=home, recall_copy_min_rows=1000, recall_index_min_rows=0)) as store:
        update(store)
        vectors = VectorFile(store)
        matrix = np.asarray(vectors.map(vectors.current_name(), vectors.committed_rows()))
        copy = Columns.open(store, vectors.current_name(), matrix)
        index = index_for(store)
        index.refresh()
        served = 0
        for q in queries:
            v = store_embedder(store).embed(q)
            approx, eps = copy.relevance(v, np.flatnonzero(v))
            assert np.max(np.abs(approx - matrix[: copy.rows] @ v)) <= eps
            served += index._search_columns(v, now, 10, None, None) is not None
        assert served >= 9 if columns._native() is not None else served == 0
        plain = _answers(store, now, queries)
        filtered = _answers(store, now, queries, kinds=["error"], project="app")
    assert plain == _exact(home, now, queries)
    assert filtered == _exact(home, now, queries, kinds=["error"], project="app")


def test_a_damaged_foreign_or_half_written_copy_is_never_believed(tmp_path, now):
    home = tmp_path / "home"
    queries = _queries(20)
    with Store.open(Config(home=home, recall_copy_min_rows=1000, recall_index_min_rows=0)) as store:
        _fill(store, now, 1200)
    exact = _exact(home, now, queries)
    config = Config(home=home, recall_copy_min_rows=1000, recall_index_min_rows=0)
    with Store.open(config) as store:
        update(store)
    data = next((home / "vectors").glob("*.cols"))
    meta_path = next((home / "vectors").glob("*.cols.json"))
    good = data.read_bytes()
    # codes overwritten (the sampled rows disagree with the matrix): ignored, recall exact
    data.write_bytes(good[:5000] + bytes(len(good) - 5000))
    mapped = np.memmap(data, dtype=np.uint8, mode="r")  # a reader that mapped it before the rewrite
    with Store.open(config) as store:
        index = index_for(store)
        index.refresh()
        assert index.columns is None
        assert _answers(store, now, queries) == exact
        # the next update rewrites it whole, into a new file (the old one is left to whoever mapped it)
        assert update(store)["added"] == 1200
    assert len(mapped) == len(good) and bytes(mapped[:5000]) == good[:5000]
    (new,) = (home / "vectors").glob("*.cols")
    assert new != data and not data.exists() and new.read_bytes() == good
    data = new
    # a list naming more than the file holds, another embedding, or a file outside the folder: ignored
    meta = json.loads(meta_path.read_text())
    for broken in ({**meta, "blocks": meta["blocks"] + [[1200, 5000, len(good)]]}, {**meta, "embedding": "other"},
                   {**meta, "file": "../../" + meta["file"]}, {**meta, "file": 7}):
        meta_path.write_text(json.dumps(broken))
        with Store.open(config) as store:
            assert Columns.open(store, VectorFile(store).current_name()) is None
            assert _answers(store, now, queries) == exact
    with Store.open(config) as store:  # a dense (model) embedding gets no copy: no query would be short
        store.set_meta("embedding", "minilm-l6-v2-384-v1")
        assert update(store) == {"rows": 1200, "covered": 0, "added": 0}
        store.set_meta("embedding", "hash-wb-256-v1")
    meta_path.write_text("{not json")
    with Store.open(config) as store:
        assert Columns.open(store, VectorFile(store).current_name()) is None
    # an update killed after writing blocks but before listing them: the bytes are cut off
    meta_path.write_text(json.dumps(meta))
    data.write_bytes(good + b"\xff" * 777)
    with Store.open(config) as store:
        _fill(store, now, 400, start=1200, seed=2)  # its ingest extends the copy (400 rows: a block)
        assert update(store) == {"rows": 1600, "covered": 1600, "added": 0}
        assert _answers(store, now, queries) == _exact(home, now, queries)
    assert data.read_bytes()[: len(good)] == good and b"\xff" * 777 not in data.read_bytes()[len(good):]


def test_no_hnsw_index_where_the_copy_serves_every_query(tmp_path, now, monkeypatch):
    from openmemory_local.recall import ann
    home = tmp_path / "home"
    with Store.open(Config(home=home, recall_copy_min_rows=0, recall_index_min_rows=0)) as store:
        _fill(store, now, 1200, seed=2)
    config = Config(home=home, recall_copy_min_rows=1000, recall_index_min_rows=1000)
    with Store.open(config) as store:
        with monkeypatch.context() as m:
            m.setattr(columns, "_native", _built)
            assert ann.serves_every_query(store)
            assert ann.update(store, force=True)["added"] == 0
            assert not list((home / "vectors").glob("*.usearch"))
            with Store.open(config.with_(recall_copy_min_rows=0)) as copy_off:
                assert not ann.serves_every_query(copy_off)
        with monkeypatch.context() as m:
            m.setattr(columns, "_native", lambda: None)  # numpy's pass: long queries need the index
            assert not ann.serves_every_query(store)
            assert ann.update(store, force=True)["added"] == 1200
