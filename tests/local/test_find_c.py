"""The C accelerator of finding a surprise's group (``openmemory_local/_find_c.c``) takes the numpy
code's decisions exactly: the same group or none, whatever the rounding of numpy's sums, and leaves
to numpy every case too close to call. The module is imported directly (these tests fail, not skip,
when it is not built or stale) and compared with the Python and numpy reference on random,
adversarial (ties, thresholds hit within an ulp, zeros, non-finite values) and real inputs."""

from __future__ import annotations

import importlib
import random

import numpy as np
import pytest

from openmemory_local.sleep import cluster
from openmemory_local.sleep.cluster import GroupIndex
from openmemory_protocol import native


@pytest.fixture(scope="module")
def f():
    module = importlib.import_module("openmemory_local._find_c")  # fails when not built
    assert native._current(module), "openmemory_local._find_c is stale: rebuild it (pip install -e .)"
    return module


def _index(sums: np.ndarray) -> GroupIndex:
    index = GroupIndex(dims=sums.shape[1])
    for row, vector in enumerate(sums):
        index.add(1000 + row, "k", vector)
    return index


def _check(f, index: GroupIndex, rows: list[int], vector: np.ndarray, threshold: float) -> bool:
    """C's decision, when it makes one, is numpy's; True when C decided."""
    expected = index._score_numpy(rows, vector, threshold)
    got = f.score(index._sums, rows, vector, threshold)
    if got is None:
        return False
    row, cos = got
    assert (index._gid[row] if row >= 0 else None) == expected[0], (rows, threshold)
    assert abs(cos - expected[1]) <= 1e-12
    return True


def test_score_decides_what_numpy_decides(f):
    rng = np.random.default_rng(5)
    decided = cases = 0
    for _ in range(400):
        dims = int(rng.choice([1, 3, 4, 16, 256]))
        height = int(rng.integers(1, 300))
        sums = rng.normal(size=(height, dims)) * rng.choice([1e-3, 1.0, 7.0, 1e6])
        if rng.random() < 0.3:  # sums of float32 vectors, as the index holds
            sums = np.cumsum(rng.normal(size=(height, dims)).astype(np.float32), axis=0, dtype=np.float64)
        index = _index(sums)
        for _ in range(10):
            rows = sorted(rng.choice(height, size=int(rng.integers(1, min(height, 80) + 1)), replace=False).tolist())
            vector = rng.normal(size=dims).astype(rng.choice([np.float32, np.float64]))
            vector /= np.linalg.norm(vector)
            threshold = float(rng.choice([0.0, 0.3, 0.55, 0.8, 0.99, -0.5]))
            decision = _check(f, index, rows, vector, threshold)
            if dims > 1:  # in one dimension every cosine is +-1: ties, numpy's call
                cases += 1
                decided += decision
    assert decided > 0.98 * cases  # the bound is tight: a near tie is rare in random data


def test_score_leaves_ties_and_the_threshold_edge_to_numpy(f):
    rng = np.random.default_rng(6)
    for _ in range(300):
        dims = int(rng.choice([4, 256]))
        base = rng.normal(size=dims)
        vector = rng.normal(size=dims).astype(np.float32)
        rows = [base * float(rng.choice([1.0, 3.0, 0.5])) for _ in range(int(rng.integers(2, 6)))]  # equal cosines
        rows += [rng.normal(size=dims) for _ in range(3)]
        sums = np.array(rows)
        index = _index(sums)
        order = rng.permutation(len(rows)).tolist()
        exact = index._score_numpy(order, vector, -2.0)[1]
        for threshold in (exact, np.nextafter(exact, 2), np.nextafter(exact, -2), exact + 1e-14, exact - 1e-14,
                          exact - 1e-3):
            _check(f, index, order, vector, float(threshold))
        # a tie for the maximum, above the threshold: C must not pick one of the tied rows itself
        if index._score_numpy(order, vector, -2.0)[0] in {1000 + i for i in range(len(rows) - 3)}:
            assert f.score(index._sums, order, vector, -2.0) is None


def test_score_on_zeros_and_values_numpy_must_decide(f):
    sums = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1e-160, 0.0], [np.inf, 0.0], [np.nan, 1.0], [1e200, 0.0]])
    index = _index(sums)
    vector = np.array([0.6, 0.8], dtype=np.float32)
    assert f.score(index._sums, [0], vector, 0.5) == (-1, 0.0)  # a zero row: cosine 0 (numpy's norm 1)
    assert _check(f, index, [0, 1, 2], vector, 0.5)
    for rows in ([3], [4], [5], [6], [0, 4]):  # underflow, inf, nan, near overflow: numpy's call
        assert f.score(index._sums, rows, vector, 0.5) is None
        with np.errstate(all="ignore"):
            index._score_numpy(rows, vector, 0.5)  # and numpy answers
    for rows in ([-1], [len(index._sums)], [1 << 70]):  # numpy wraps or refuses an index: its call
        assert f.score(index._sums, rows, vector, 0.5) is None
    with pytest.raises(IndexError):
        index._score_numpy([len(index._sums)], vector, 0.5)
    assert f.score(index._sums, [1], np.array([np.nan, 1.0]), 0.5) is None
    assert f.score(index._sums, [1], np.array([1, 2], dtype=np.int64), 0.5) is None  # not float32/float64
    assert f.score(index._sums, [1], np.array([1.0, 2.0, 3.0]), 0.5) is None  # not the sums' width
    assert f.score(np.ones((2, 2), dtype=np.float32), [1], vector, 0.5) is None
    assert f.score(index._sums, [], vector, 0.5) is None
    assert f.score(index._sums, ["1"], vector, 0.5) is None
    with pytest.raises(TypeError):
        f.score(index._sums, (1,), vector, 0.5)
    with pytest.raises(TypeError):
        f.score(index._sums, [1], vector, "0.5")
    assert f.score(index._sums, [1], object(), 0.5) is None  # not a buffer: numpy's call (and its error)
    assert f.score(np.asfortranarray(np.ones((3, 2))), [1], vector, 0.5) is None  # not C-contiguous
    assert f.score([[1.0, 0.0]], [0], vector, 0.5) is None


def test_find_with_c_is_find_with_numpy(f, monkeypatch):
    # whole finds through GroupIndex (exact, exhaustive, candidates), with joins between them
    from openmemory_local.text.embed import embed_features, features

    rng = random.Random(9)
    words = [f"w{k}" for k in range(40)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randrange(1, 9))) for _ in range(600)]
    for exhaustive_max in (3, 256):  # candidates, then every group of the key
        answers = {}
        for mode in ("c", "numpy"):
            monkeypatch.setattr(cluster, "_FIND", f if mode == "c" else None)
            index = GroupIndex(exhaustive_max=exhaustive_max, candidates=16)
            got = []
            for i, text in enumerate(texts):
                feats = features(text)
                vector = embed_features(feats)
                key = ("error", f"/p{i % 3}")
                gid, _ = index.find(key, text, feats, vector, 0.55)
                if gid is None:
                    gid = i + 1
                    index.add(gid, key, np.zeros(len(vector)))
                index.join(gid, key, text, feats, vector)
                got.append(gid)
            answers[mode] = got
        assert answers["c"] == answers["numpy"]
        assert len(set(answers["c"])) > 20


def test_postings_by_rows_and_candidate_rows_are_the_python_ones(f, monkeypatch):
    rng = random.Random(13)
    for _ in range(30):
        prefix, cap, candidates = rng.choice([1, 3, 12, -2]), rng.choice([2, 20, 500]), rng.choice([1, 4, 64])
        indexes = {}
        vocabulary = [f"w{k}" for k in range(rng.choice([8, 60, 300]))]
        gids = rng.choice([5, 80, 700])
        order = rng.sample(range(1, 3 * gids + 2), gids) if rng.random() < 0.5 else list(range(1, gids + 1))
        keys = [("error", "/a"), ("error", "/b")]
        plan = []
        for gid in order:  # ids not in row order, sometimes; past the 8 signatures indexed; joins between adds
            key = rng.choice(keys)
            sigs = [(f"s{gid}-{k}", {w: 1.0 for w in rng.sample(vocabulary, rng.randrange(1, 8))})
                    for k in range(rng.randrange(0, 11))]
            plan.append(("add", gid, key, sigs))
            if rng.random() < 0.3:
                joined = rng.choice(plan)
                plan.append(("join", joined[1], joined[2], {w: 1.0 for w in rng.sample(vocabulary, 3)}))
        for mode in ("c", "python"):
            monkeypatch.setattr(cluster, "_FIND", f if mode == "c" else None)
            index = indexes[mode] = GroupIndex(exhaustive_max=0, prefix=prefix, posting_cap=cap,
                                               candidates=candidates, dims=4)
            for step, gid, key, what in plan:
                if step == "add":
                    index.add(gid, key, np.zeros(4), what)
                else:
                    index.join(gid, key, f"j{len(what)}", what, np.ones(4, dtype=np.float32))
        c_index, py_index = indexes["c"], indexes["python"]
        assert c_index._features == py_index._features and not c_index._postings
        decoded = {(key, feature): [c_index._gid[r] for r in np.frombuffer(rows, dtype=np.int32).tolist()]
                   for key, postings in c_index._row_postings.items() for feature, rows in postings.items()}
        assert decoded == py_index._postings
        assert np.array_equal(c_index._sums[:len(c_index)], py_index._sums[:len(py_index)])  # the same bits
        for _ in range(40):
            key = rng.choice(keys + [("correction", "/a")])
            feats = {w: 1.0 for w in rng.sample(vocabulary, rng.randrange(0, min(30, len(vocabulary))))}
            expected = py_index._candidate_rows_python(key, feats)
            monkeypatch.setattr(cluster, "_FIND", f)
            assert c_index._candidate_rows(key, feats) == expected


def test_candidate_rows_and_index_rows_refuse_what_is_not_theirs(f):
    feats = {"a": 1.0}
    with pytest.raises(TypeError):
        f.candidate_rows({"a": [1]}, feats, 10, 12, 64)
    with pytest.raises(TypeError):
        f.candidate_rows({"a": bytearray(b"\x01\x00\x00")}, feats, 10, 12, 64)  # not whole int32 rows
    with pytest.raises(ValueError):
        f.candidate_rows({"a": bytearray(np.array([-1], dtype=np.int32).tobytes())}, feats, 10, 12, 64)
    assert f.candidate_rows({"a": bytearray(np.array([7, 3], dtype=np.int32).tobytes())}, feats, 10, 12, 64) == [3, 7]
    assert f.candidate_rows({}, feats, 10, 12, 64) == []
    for row in (-1, 1 << 31, 1 << 70):
        with pytest.raises(OverflowError):
            f.index_rows({}, feats, set(), row)
    with pytest.raises(TypeError):
        f.index_rows({"a": [1]}, feats, set(), 1)
    with pytest.raises(TypeError):
        f.index_rows({}, feats, [], 1)
    postings, mine = {}, set()
    f.index_rows(postings, {"a": 1.0, "b": 0.5}, mine, 5)
    f.index_rows(postings, {"b": 1.0, "c": 1.0}, mine, 5)  # b already indexed for this group
    f.index_rows(postings, {"b": 1.0}, set(), 9)
    assert {k: np.frombuffer(v, dtype=np.int32).tolist() for k, v in postings.items()} == \
        {"a": [5], "b": [5, 9], "c": [5]} and mine == {"a", "b", "c"}


def test_add_row_is_numpy_add(f):
    rng = np.random.default_rng(3)
    sums = rng.normal(size=(5, 256)) * 1e3
    expected = sums.copy()
    for _ in range(200):
        row = int(rng.integers(5))
        vector = rng.normal(size=256).astype(rng.choice([np.float32, np.float64]))
        expected[row] += vector
        assert f.add_row(sums, row, vector) is True
    assert np.array_equal(sums, expected)
    for bad in ((sums, 5, vector), (sums, -1, vector), (sums, 0, vector[:3]), (sums.astype(np.float32), 0, vector),
                (sums, 0, vector.astype(np.int64)), (np.asfortranarray(sums), 0, vector), (sums, 0, object())):
        assert f.add_row(*bad) is False  # numpy's add does it (or raises its error)
    frozen = sums.copy()
    frozen.flags.writeable = False
    assert f.add_row(frozen, 0, vector) is False
    with pytest.raises(TypeError):
        f.add_row(sums, "0", vector)


def test_find_answers_in_c_or_hands_over(f, monkeypatch):
    monkeypatch.setattr(cluster, "_FIND", f)
    index = GroupIndex(exhaustive_max=2, candidates=4, dims=2)
    vector = np.array([1.0, 0.0], dtype=np.float32)
    assert f.find(index, "k", "s", {"a": 1.0}, vector, 0.5) == (None, 0.0)  # no group under the key
    index.add(7, "k", np.array([2.0, 0.1]), [("s", {"a": 1.0})])
    assert f.find(index, "k", "s", {"a": 1.0}, vector, 0.5) == (7, 1.0)  # the exact signature
    assert f.find(index, "k", "t", {"b": 1.0}, vector, 0.5) is None  # the key's rows: made by the Python code
    assert index.find("k", "t", {"b": 1.0}, vector, 0.5)[0] == 7
    gid, cos = f.find(index, "k", "t", {"b": 1.0}, vector, 0.5)  # then in C
    assert gid == 7 and abs(cos - 2.0 / np.hypot(2.0, 0.1)) < 1e-12
    assert f.find(index, "k", "t", {"b": 1.0}, vector, 0.9999) == (None, cos)
    for gid in (8, 9):  # past exhaustive_max: the candidates of the inverted index
        index.add(gid, "k", np.array([0.0, 1.0]), [(f"s{gid}", {"c": 1.0})])
    assert f.find(index, "k", "u", {"z": 1.0}, vector, 0.5) == (None, 0.0)  # no candidate
    assert f.find(index, "k", "u", {"c": 1.0}, vector, 0.5)[0] is None  # 8 and 9 scored, orthogonal
    assert f.find(index, "k", "u", {"a": 1.0, "c": 1.0}, vector, 0.5)[0] == 7
    index.add(10, "k", np.array([2.0, 0.1]), [("s10", {"a": 1.0})])  # a tie with 7: numpy's call
    assert f.find(index, "k", "u", {"a": 1.0}, vector, 0.5) is None
    assert index.find("k", "u", {"a": 1.0}, vector, 0.5)[0] == 7 and index.undecided == 1
    with pytest.raises(TypeError):
        f.find(index, "k", "u", [("a", 1.0)], vector, 0.5)
    with pytest.raises(TypeError):
        f.find(index, "k", "u", {"a": 1.0}, vector, None)
    with pytest.raises(AttributeError):
        f.find(object(), "k", "u", {"a": 1.0}, vector, 0.5)


def test_join_in_c_or_hands_over(f, monkeypatch):
    monkeypatch.setattr(cluster, "_FIND", f)
    index = GroupIndex(dims=2)
    index.add(3, "k", np.zeros(2))
    vector = np.array([0.5, 0.25], dtype=np.float32)
    assert f.join(index, 3, "k", "s", {"a": 1.0}, vector, 8) is True
    assert index._exact == {("k", "s"): 3} and index._indexed[3] == 1 and index._features[3] == {"a"}
    assert index._sums[0].tolist() == [0.5, 0.25]
    assert f.join(index, 3, "k", "t", {"a": 1.0, "b": 1.0}, vector, 1) is True  # past max_indexed: not indexed
    assert index._exact[("k", "t")] == 3 and index._features[3] == {"a"} and index._sums[0].tolist() == [1.0, 0.5]
    before = index._sums.copy()
    for bad in ((index, 4, "k", "s", {}, vector, 8), (index, 3, "k", "s", {}, vector[:1], 8),
                (index, 3, "k", "s", {}, vector.astype(np.int32), 8)):
        assert f.join(*bad) is False  # nothing changed: the Python code does it (and raises its error)
    assert np.array_equal(index._sums, before) and len(index._exact) == 2
    with pytest.raises(KeyError):
        index.join(4, "k", "s", {}, vector)
    with pytest.raises(TypeError):
        f.join(index, 3, "k", "s", [], vector, 8)


def test_candidate_rows_are_the_most_shared_rows(f):
    # the counting straight from the module doc, over postings of any rows (repeated ones too, which
    # the index never makes): the `candidates` rows sharing most of the prefix's features, ties to the
    # first met (Counter.most_common), sorted
    from collections import Counter

    rng = random.Random(22)
    for _ in range(300):
        size = rng.randrange(1, 400)
        pool = rng.sample(range(0, 10 * size), size)
        postings = {f"f{k}": [rng.choice(pool) for _ in range(rng.randrange(1, size + 1))]
                    for k in range(rng.randrange(1, 20))}
        feats = {f"f{k}": 1.0 for k in range(25)}
        prefix, cap, candidates = rng.choice([1, 5, 12]), rng.choice([3, 50, 1000]), rng.choice([1, 7, 64])
        lists = sorted((p for k in feats if (p := postings.get(k)) and len(p) <= cap), key=len)[:prefix]
        chosen = set().union(*lists)
        if len(chosen) > candidates:
            chosen = {r for r, _ in Counter(r for p in lists for r in p).most_common(candidates)}
        packed = {k: bytearray(np.array(v, dtype=np.int32).tobytes()) for k, v in postings.items()}
        assert f.candidate_rows(packed, feats, cap, prefix, candidates) == sorted(chosen)
