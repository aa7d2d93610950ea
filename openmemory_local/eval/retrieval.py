"""Retrieval, measured: rank memories for a query by several methods and score the rankings.

Methods (each ranks a corpus of texts for each query text, best first):

* ``hashed``: the engine's embedding (:mod:`openmemory_local.text.embed`, 256 hashed word and
  bigram features), cosine; what recall's relevance is;
* ``learned``: sentence-transformers all-MiniLM-L6-v2 (:mod:`openmemory_local.core.embedders`,
  the ``learned`` extra), cosine;
* ``bm25``: SQLite FTS5's ``bm25()`` over the same texts (an in-memory table, the ``unicode61``
  tokenizer with Porter stemming), the query's distinct words OR-ed;
* ``fusion`` (hashed and BM25) and ``fusion-all`` (all three): reciprocal rank fusion,
  ``sum 1 / (60 + rank)`` over the methods' rankings (Cormack et al., 2009).

Scores (:func:`score`): for each query, the rank of its first relevant item; ``recall@k`` is
the share of queries with a relevant item in the top k, ``mrr`` the mean of ``1 / rank``
(0 when none is ranked), and, where hard non-pairs are labelled, ``confused`` the share of
queries for which a hard non-pair (same program, another failure) ranks above every relevant
item. Used by ``benchmarks/retrieval.py`` (a labelled set) and by ``openmemory eval``'s
measure 6 (the store's own lessons).
"""

from __future__ import annotations

import re
import sqlite3
from typing import Iterable, Sequence

import numpy as np

from openmemory_local.text.embed import embed_many

__all__ = ["METHODS", "FAST_METHODS", "rank", "rank_vectors", "rank_bm25", "fuse", "score", "RRF_K"]

RRF_K = 60
#: Every method, in the order tables show them.
METHODS = ("hashed", "learned", "bm25", "fusion", "fusion-all")
#: The methods that need no optional extra.
FAST_METHODS = ("hashed", "bm25", "fusion")

Ranking = list[list[int]]  # per query, corpus indices best first


def rank_vectors(queries: np.ndarray, corpus: np.ndarray, exclude: Sequence[set] | None = None,
                 depth: int | None = None) -> Ranking:
    """Corpus rows by cosine with each query row (both L2-normalised), best first; ties by index;
    the first ``depth`` only if given."""
    sims = queries.astype(np.float64) @ corpus.astype(np.float64).T if len(corpus) else np.zeros((len(queries), 0))
    out = []
    for q, row in enumerate(sims):
        skip = exclude[q] if exclude else ()
        if skip:
            row = row.copy()
            row[list(skip)] = -np.inf
        order = np.argsort(-row, kind="stable")  # ties: by index
        keep = len(row) - len(skip)
        out.append(order[: keep if depth is None else min(depth, keep)].tolist())
    return out


_WORD = re.compile(r"[^\W_]+")


def rank_bm25(queries: Sequence[str], corpus: Sequence[str], exclude: Sequence[set] | None = None,
              depth: int | None = None) -> Ranking:
    """Corpus texts by FTS5 BM25 for each query (every corpus text ranked: those that share no
    word with the query after those that do, in corpus order; the first ``depth`` only if given)."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE docs USING fts5(body, tokenize = 'porter unicode61')")
        conn.executemany("INSERT INTO docs (rowid, body) VALUES (?, ?)", ((i, t) for i, t in enumerate(corpus)))
        out = []
        found: dict[str, list[int]] = {}  # the same text (a retry) is searched once
        for q, text in enumerate(queries):
            skip = exclude[q] if exclude else set()
            words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
            hits: list[int] = []
            if words:
                match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words[:64])
                if match not in found:
                    found[match] = [row[0] for row in conn.execute(
                        "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs), rowid", (match,))]
                for rowid in found[match]:
                    if rowid not in skip:
                        hits.append(rowid)
                        if depth is not None and len(hits) >= depth:
                            break
            if depth is None or len(hits) < depth:
                seen = set(hits)
                for i in range(len(corpus)):
                    if depth is not None and len(hits) >= depth:
                        break
                    if i not in seen and i not in skip:
                        hits.append(i)
            out.append(hits)
        return out
    finally:
        conn.close()


def fuse(rankings: Iterable[Ranking], k: int = RRF_K, depth: int | None = None) -> Ranking:
    """Reciprocal rank fusion of several rankings of the same queries and corpus (an item absent
    from a truncated ranking adds nothing for it)."""
    rankings = list(rankings)
    out = []
    for per_query in zip(*rankings):
        total: dict[int, float] = {}
        for order in per_query:
            for r, i in enumerate(order, 1):
                total[i] = total.get(i, 0.0) + 1.0 / (k + r)
        fused = sorted(total, key=lambda i: (-total[i], i))
        out.append(fused if depth is None else fused[:depth])
    return out


def rank(method: str, queries: Sequence[str], corpus: Sequence[str], exclude: Sequence[set] | None = None,
         cache: dict | None = None, depth: int | None = None) -> Ranking:
    """The ranking by one of :data:`METHODS` (``cache`` keeps the component rankings between calls;
    ``depth``: only the first so many of each, for scores that look no further)."""
    cache = {} if cache is None else cache
    if method in cache:
        return cache[method]
    if method == "hashed":
        out = rank_vectors(embed_many(queries), embed_many(corpus), exclude, depth)
    elif method == "learned":
        from openmemory_local.core.embedders import LEARNED, embedder_named

        vectors = embedder_named(LEARNED).embed_many(list(queries) + list(corpus))
        out = rank_vectors(vectors[: len(queries)], vectors[len(queries):], exclude, depth)
    elif method == "bm25":
        out = rank_bm25(queries, corpus, exclude, depth)
    elif method == "fusion":
        out = fuse([rank(m, queries, corpus, exclude, cache, depth) for m in ("hashed", "bm25")], depth=depth)
    elif method == "fusion-all":
        out = fuse([rank(m, queries, corpus, exclude, cache, depth) for m in ("hashed", "learned", "bm25")],
                   depth=depth)
    else:
        raise ValueError(f"unknown retrieval method {method!r} (known: {', '.join(METHODS)})")
    cache[method] = out
    return out


def score(ranking: Ranking, relevant: Sequence[set], hard: Sequence[set] | None = None,
          ks: tuple[int, ...] = (1, 3, 10)) -> dict:
    """recall@k, MRR (and ``confused`` where ``hard`` non-pairs are given) of a ranking."""
    n = len(ranking)
    firsts = []
    confused = 0
    for q, order in enumerate(ranking):
        first = next((r for r, i in enumerate(order, 1) if i in relevant[q]), None)
        firsts.append(first)
        if hard and hard[q]:
            top_hard = next((r for r, i in enumerate(order, 1) if i in hard[q]), None)
            if top_hard is not None and (first is None or top_hard < first):
                confused += 1
    out = {"queries": n}
    for k in ks:
        out[f"recall@{k}"] = round(sum(1 for f in firsts if f is not None and f <= k) / n, 4) if n else None
    out["mrr"] = round(sum(1.0 / f for f in firsts if f) / n, 4) if n else None
    if hard is not None:
        with_hard = sum(1 for h in hard if h)
        out["confused"] = round(confused / with_hard, 4) if with_hard else None
        out["with_hard"] = with_hard
    return out
