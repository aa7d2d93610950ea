"""The index sleep uses to find the lesson a surprise resembles, without comparing all pairs.

Groups (lessons, and groups still forming) live under a key: (kind, project family). A
surprise is only ever compared with the groups of its key. :meth:`GroupIndex.find`:

1. *Exact*: a group that already holds this very signature takes it (a repeat of the
   same failure, after normalisation: the common case, one dictionary lookup).
2. *Exhaustive*, while the key has at most ``Config.cluster_exhaustive_max`` groups:
   the cosine with every group's centroid, in one matrix-vector product.
3. *Candidates*, beyond that: an inverted index maps each feature of the groups'
   signatures (words and word pairs, :func:`openmemory_local.text.embed.features`) to the
   groups that have it. The surprise's ``cluster_prefix_features`` rarest features
   (those shared by at most ``cluster_posting_cap`` groups) name the candidate groups;
   the ``cluster_candidates`` sharing most features with it are scored exactly. A group
   whose centroid resembles the surprise (cosine >= 0.55) shares words with it, and
   rare words are what set similar failures apart from the rest, so the miss rate is
   small (``benchmarks/sleep.py`` measures it against the exhaustive search); the work
   per surprise is bounded, so a sleep grows as n log n (the sort by time), not n².

The best group wins if its cosine reaches ``Config.lesson_join_cosine``; ties go to the
older group. Pure numpy and dictionaries: no store, no clock; the Python code is the reference and
the fallback of an optional C accelerator, ``openmemory_local._find_c`` (when built): the whole
:meth:`GroupIndex.find` and :meth:`~GroupIndex.join`. Its postings are by rows (``_row_postings``:
each key's ``{feature: bytearray of int32 rows}``, the same groups in the same order as ``_postings``'
ids, which stays empty). The scoring keeps every decision numpy's: numpy's sums of products round in
an order of their own (the BLAS kernel's), so C computes each cosine with a rigorous bound on any
order's rounding and decides only when no value within the bounds decides otherwise (the threshold
cleared or missed by more, no other row within reach of the first maximum); the rest (near ties, ~1
in 50,000 finds at 100k) goes to :meth:`GroupIndex._score_numpy`. The cosine returned is then C's,
within ~2e-13 of numpy's (learn does not use it). See ``_find_c.c``.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain
from typing import Hashable, Iterable

import numpy as np

from openmemory_protocol.native import load

from openmemory_local.text.embed import DIMS

__all__ = ["GroupIndex"]

_FIND = load("openmemory_local._find_c")

_MAX_INDEXED_SIGNATURES = 8


class GroupIndex:
    def __init__(self, *, exhaustive_max: int = 256, prefix: int = 12, posting_cap: int = 2000,
                 candidates: int = 64, dims: int = DIMS):
        self.exhaustive_max = exhaustive_max
        self.prefix = prefix
        self.posting_cap = posting_cap
        self.candidates = candidates
        self._sums = np.zeros((64, dims), dtype=np.float64)  # dims: the embedder's (256 for the hashed one)
        self._n = 0
        self._row: dict[int, int] = {}
        self._gid: list[int] = []
        self._by_key: dict[Hashable, list[int]] = {}
        self._exact: dict[tuple[Hashable, str], int] = {}
        self._postings: dict[tuple[Hashable, str], list[int]] = {}
        # with _find_c: each key's postings by rows instead, {feature: bytearray of int32 rows}
        self._row_postings: dict[Hashable, dict[str, bytearray]] = {}
        self._indexed: dict[int, int] = {}  # gid -> signatures indexed so far
        self._features: dict[int, set[str]] = {}
        self._key_rows: dict[Hashable, list[int]] = {}  # a key's rows, for the exhaustive search (made on demand)
        self.undecided = 0  # the finds C left to numpy (too close to call)

    def __len__(self) -> int:
        return self._n

    # --- building ---------------------------------------------------------------------

    def add(self, gid: int, key: Hashable, vector_sum: np.ndarray, signatures: Iterable[tuple[str, dict]] = ()) -> None:
        """A group with the sum of its members' vectors and its distinct signatures
        (each with its feature dict)."""
        if self._n == len(self._sums):  # twice the rows
            self.reserve(len(self._sums))
        row = self._n
        self._n += 1
        self._sums[row] = vector_sum
        self._row[gid] = row
        self._gid.append(gid)
        self._by_key.setdefault(key, []).append(gid)
        self._key_rows.pop(key, None)
        self._indexed[gid] = 0
        self._features[gid] = set()
        for sig, feats in signatures:
            self._index_signature(gid, key, sig, feats)

    def reserve(self, more: int) -> None:
        """Room for ``more`` groups beyond those held, made at once (np.zeros leaves the new pages to
        the kernel to zero when first written: rows never added cost no memory, and no copy is made
        as the groups come)."""
        if self._n + more > len(self._sums):
            sums = np.zeros((self._n + more, self._sums.shape[1]), dtype=np.float64)
            sums[:self._n] = self._sums[:self._n]
            self._sums = sums

    def _index_signature(self, gid: int, key: Hashable, sig: str, feats: dict) -> None:
        self._exact.setdefault((key, sig), gid)
        if self._indexed[gid] >= _MAX_INDEXED_SIGNATURES:
            return
        self._indexed[gid] += 1
        mine = self._features[gid]
        if _FIND is not None:  # the loop below, in C, into postings by rows (see _candidate_rows)
            _FIND.index_rows(self._row_postings.setdefault(key, {}), feats, mine, self._row[gid])
            return
        for feature in feats:
            if feature not in mine:
                mine.add(feature)
                self._postings.setdefault((key, feature), []).append(gid)

    def join(self, gid: int, key: Hashable, sig: str, feats: dict, vector: np.ndarray) -> None:
        """Add a member to a group: its vector to the centroid, its signature to the index."""
        if _FIND is not None and _FIND.join(self, gid, key, sig, feats, vector, _MAX_INDEXED_SIGNATURES):
            return  # the steps below, in C
        row = self._row[gid]
        if _FIND is None or not _FIND.add_row(self._sums, row, vector):  # C: the same additions
            self._sums[row] += vector
        self._index_signature(gid, key, sig, feats)

    # --- finding ------------------------------------------------------------------------

    def exact(self, key: Hashable, sig: str) -> int | None:
        return self._exact.get((key, sig))

    def find(self, key: Hashable, sig: str, feats: dict, vector: np.ndarray,
             threshold: float) -> tuple[int | None, float]:
        """The group this surprise joins and its cosine, or ``(None, best cosine)``. In C when the
        accelerator is built (the same groups: see ``_find_c.c`` for the cosine's value)."""
        if _FIND is not None:
            found = _FIND.find(self, key, sig, feats, vector, threshold)
            if found is not None:
                return found
        gid = self._exact.get((key, sig))
        if gid is not None:
            return gid, 1.0
        groups = self._by_key.get(key)
        if not groups:
            return None, 0.0
        if len(groups) <= self.exhaustive_max:
            rows = self._key_rows.get(key)
            if rows is None:
                rows = self._key_rows[key] = [self._row[g] for g in groups]
        else:
            rows = self._candidate_rows(key, feats)
            if not rows:
                return None, 0.0
        if _FIND is not None:  # the same decision, in C, when no rounding can change it (see _find_c.c)
            decided = _FIND.score(self._sums, rows, vector, threshold)
            if decided is not None:
                row, cos = decided
                return (self._gid[row] if row >= 0 else None), cos
            self.undecided += 1
        return self._score_numpy(rows, vector, threshold)

    def _score_numpy(self, rows: list[int], vector: np.ndarray, threshold: float) -> tuple[int | None, float]:
        """The cosine of ``vector`` with the centroid of each row, the first maximum joined if it reaches
        ``threshold`` (the reference; numpy's sums decide)."""
        sums = self._sums[np.array(rows, dtype=np.int64)]
        norms = np.sqrt(np.einsum("ij,ij->i", sums, sums))
        norms[norms == 0] = 1.0
        cos = (sums @ vector.astype(np.float64)) / norms
        best = int(np.argmax(cos))  # first maximum: the oldest group on ties
        if cos[best] >= threshold:
            return self._gid[rows[best]], float(cos[best])
        return None, float(cos[best])

    def _candidate_rows(self, key: Hashable, feats: dict) -> list[int]:
        """The rows of the groups to score (see the module doc), in order: in C when the accelerator
        is built (the same rows: ``tests/local/test_find_c.py``), else :meth:`_candidate_rows_python`."""
        if _FIND is not None:
            postings = self._row_postings.get(key)
            if postings is None:
                return []
            return _FIND.candidate_rows(postings, feats, self.posting_cap, self.prefix, self.candidates)
        return self._candidate_rows_python(key, feats)

    def _candidate_rows_python(self, key: Hashable, feats: dict) -> list[int]:
        """:meth:`_candidate_rows` in Python (the reference)."""
        lists = []
        for feature in feats:
            posting = self._postings.get((key, feature))
            if posting and len(posting) <= self.posting_cap:
                lists.append(posting)
        if not lists:
            return []
        lists.sort(key=len)
        lists = lists[: self.prefix]
        chosen = set().union(*lists)
        if len(chosen) > self.candidates:
            # the count of each group in the prefix's postings, in the order first met (one C-level pass)
            chosen = _most_shared(Counter(chain.from_iterable(lists)), self.candidates)
        return sorted(map(self._row.__getitem__, chosen))


def _most_shared(counts: dict[int, int], n: int) -> list[int]:
    """The ``n`` keys of ``counts`` with the largest counts, ties to the first met: the set
    ``Counter.most_common(n)`` names (a stable sort by count), without sorting every key."""
    size = len(counts)
    values = np.fromiter(counts.values(), dtype=np.int64, count=size)
    cutoff = np.partition(values, size - n)[size - n]  # the n-th largest count
    keys = np.fromiter(counts, dtype=np.int64, count=size)
    above = keys[values > cutoff]
    return above.tolist() + keys[values == cutoff][: n - len(above)].tolist()
