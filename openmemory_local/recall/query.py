"""Recall: the memories that best answer a query, scored in one vectorised pass.

    score = relevance * (0.60 + 0.25 * recency + 0.15 * strength)

* relevance: cosine similarity of the query's embedding and the memory's
  (:mod:`openmemory_local.text.embed`; both are L2-normalised, so a dot product);
* recency: ``0.5 ** (age / 30 days)``, age measured from ``last_touched`` (0 for a
  time in the future of ``now``);
* strength: the memory's strength clipped to [0, 1].

Recency and strength scale relevance, they are never added to it: the factor lies between
0.60 and 1.00, so **a memory outranks another only if its relevance is at least 0.6 times the
other's**. However fresh and strong, a memory that barely matches (0.13) never outranks one
that matches well (0.44); among memories that match alike, the recent and strong come first.

Lessons are recalled beside episodes (:func:`recall_lessons`): a lesson's relevance is the
best of its text's and of its evidence's (the episodes it was learned from), scored by the
same rule from its last sighting and its strength; the MCP ``recall`` tool and ``openmemory
recall`` show the lessons that match first.

The weights and the half-life are :class:`openmemory_local.core.config.Config` settings. Only
active memories (``archived = 0``) are candidates. Recall *touches* what it returns:
``last_touched = now`` and ``touches + 1``, so use keeps a memory alive (the touch is
skipped, never waited for, if another process holds the write lock for long).

Python API (what an MCP server calls, in-process)::

    from openmemory_local.recall.query import recall
    results = recall(store, "git push fails because the branch has no upstream", k=5, now=now)
    for r in results:
        print(r.score, r.relevance, r.recency, r.strength, r.episode["text"])

A :class:`RecallIndex` keeps the embedding matrix memory-mapped and the scoring columns in
numpy arrays; it refreshes itself incrementally from the store (rows whose ``seq`` moved,
full reload when ``episode_epoch`` or the matrix file changes), so it is right to keep one
per store in a long-lived process: :func:`recall` does that for you (``store`` caches it).
Past ``Config.recall_copy_min_rows`` it answers short queries from the slot-major copy
(:mod:`openmemory_local.recall.columns`), past ``recall_index_min_rows`` long ones through the HNSW
index (:mod:`openmemory_local.recall.ann`), each falling back to the exact pass when it cannot prove
its answer.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from openmemory_local.core.clock import DAY, epoch, iso, resolve_now
from openmemory_local.text.embed import features
from openmemory_local.core.embedders import store_embedder
from openmemory_local.storage.vectors import VectorFile, _size, validate
from openmemory_local.storage import recall as recall_reads
from openmemory_local.storage.episodes import episodes_changed_since

__all__ = ["recall", "recall_lessons", "RecallResult", "LessonHit", "RecallIndex", "EmptyQuery", "score_of"]


def score_of(config, relevance: float, recency: float, strength: float) -> float:
    """The recall score of one memory (the module docstring's rule)."""
    return relevance * (config.relevance_weight + config.recency_weight * recency
                        + config.strength_weight * min(max(strength, 0.0), 1.0))


class EmptyQuery(ValueError):
    """The query has no word that can be searched (only stop words or punctuation)."""


@dataclass
class RecallResult:
    """One recalled memory: the stored episode (a dict) and its score components."""

    episode: dict
    score: float
    relevance: float
    recency: float
    strength: float

    @property
    def id(self) -> int:
        return self.episode["id"]

    def to_dict(self) -> dict:
        return {
            "score": round(self.score, 6),
            "components": {
                "relevance": round(self.relevance, 6),
                "recency": round(self.recency, 6),
                "strength": round(self.strength, 6),
            },
            "episode": self.episode,
        }


class RecallIndex:
    """Arrays over the store's episodes, indexed by matrix row (``episodes.vec_row``)."""

    def __init__(self, store):
        self.store = store
        self.vectors = VectorFile(store)
        self._file: str | None = None
        self._epoch: int | None = None
        self._seq = -1
        self._rows = 0
        self.ann = None  # the approximate index over the first rows (openmemory_local.recall.ann), when big
        self.columns = None  # the 8-bit slot-major copy of the first rows (openmemory_local.recall.columns), when big
        self.matrix = np.zeros((0, self.vectors.dims), dtype=np.float32)
        self.ids = np.zeros(0, dtype=np.int64)
        self.touched = np.zeros(0, dtype=np.float64)
        self.strength = np.zeros(0, dtype=np.float32)
        self.active = np.zeros(0, dtype=bool)
        self.kind = np.zeros(0, dtype=np.int16)
        self.project = np.zeros(0, dtype=np.int32)
        self._rows_of: dict[int, int] | None = {}
        self._bias: np.ndarray | None = None
        self._days = np.zeros(0)
        self._kinds: dict[str, int] = {}
        self._projects: dict[str | None, int] = {}
        self.last_relevance: np.ndarray | None = None

    # --- keeping up with the store -------------------------------------------------------

    def refresh(self) -> None:
        """Bring the arrays up to date with the store (cheap when nothing changed).

        The matrix file is checked against the store when (re)mapped: a file that is
        missing, short, or whose sampled rows differ from ``episodes.embedding`` is rebuilt.
        """
        for _attempt in range(3):
            with self.store.read():
                name = self.store.get_meta("vectors_file") or ""
                rows = self.store.counter("vec_rows")
                epoch_ = self.store.counter("episode_epoch")
                seq = self.store.counter("episode_seq")
                full = name != self._file or epoch_ != self._epoch or rows < self._rows
                if not full and seq == self._seq and rows == self._rows:
                    return
                dims = self.vectors.dims
                if rows and (not name or _size(self.vectors.path(name)) < rows * dims * 4):
                    broken = True
                else:
                    since = None if full else self._seq
                    loaded = full and self._load_saved(name, epoch_, rows, seq)
                    if loaded:
                        since = loaded
                    changed = self._load(rows, changed_since=since)
                    if full and (not loaded or changed >= _RESAVE_CHANGES):
                        self._save(name, epoch_, seq)
                    if name != self._file or rows != self._rows:
                        self.matrix = self.vectors.map(name, rows, dims) if name else np.zeros((0, dims), np.float32)
                        self.ann = _ann_for(self.store, name, rows)
                        self.columns = _columns_for(self.store, name, rows, self.matrix)
                    self._file, self._epoch, self._seq, self._rows = name, epoch_, seq, rows
                    broken = full and not self._valid()
            if not broken:
                return
            with self.store.write():
                self.vectors.rebuild()
            self._file = None

    @property
    def _row_of(self) -> dict[int, int]:
        """Episode id -> matrix row (made on first use: a one-shot recall never needs it)."""
        if self._rows_of is None:
            live = np.flatnonzero(self.ids >= 0)
            self._rows_of = dict(zip(self.ids[live].tolist(), live.tolist()))
        return self._rows_of

    # --- the saved arrays: what a fresh process loads instead of reading 100k rows ------------

    _SAVED = ("ids", "touched", "strength", "active", "kind", "project")

    def _saved_path(self, name: str):
        return self.vectors.dir / (name.split(".", 1)[0] + ".recall.npy")

    def _save(self, name: str, epoch_: int, seq: int) -> None:
        """Keep the arrays beside the matrix (``<stem>.recall.npy``, replaced atomically: a
        cache of the store, never the store), for the next process's :meth:`_load_saved`: the
        meta (JSON bytes) then each array, one ``.npy`` after the other (read back in order
        without the zip archive ``np.savez`` makes, whose module alone costs a fresh process ~6 ms)."""
        if not name or len(self.ids) < _SAVE_MIN_ROWS:
            return
        import json
        import os

        meta = {"file": name, "epoch": epoch_, "seq": seq, "rows": len(self.ids),
                "kinds": list(self._kinds), "projects": list(self._projects)}
        path = self._saved_path(name)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                np.save(f, np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), allow_pickle=False)
                for key in self._SAVED:
                    np.save(f, getattr(self, key), allow_pickle=False)
            os.replace(tmp, path)
            path.with_suffix(".npz").unlink(missing_ok=True)  # the zip form of earlier versions
        except OSError:  # a read-only folder, a full disk: the next process loads from the store
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def _load_saved(self, name: str, epoch_: int, rows: int, seq: int) -> int | None:
        """Load the saved arrays if they are of this matrix and epoch and few rows changed since
        they were saved; return the ``seq`` they are at (the caller reads what changed since)."""
        import json

        path = self._saved_path(name)
        try:
            with open(path, "rb") as saved:
                meta = json.loads(np.load(saved, allow_pickle=False).tobytes().decode())
                if meta.get("file") != name or meta.get("epoch") != epoch_ or meta.get("rows", 0) > rows:
                    return None
                changed = episodes_changed_since(self.store, meta["seq"])
                if changed > max(1000, rows // 10):
                    return None  # a full load is quicker than so many single rows
                arrays = {key: np.load(saved, allow_pickle=False) for key in self._SAVED}
        except (OSError, ValueError, EOFError, KeyError, TypeError, AttributeError):
            return None
        if meta["seq"] > seq or any(len(a) != meta["rows"] for a in arrays.values()):
            return None
        for key, value in arrays.items():
            setattr(self, key, value)
        self._kinds = {k: i + 1 for i, k in enumerate(meta["kinds"])}
        self._projects = {p: i + 1 for i, p in enumerate(meta["projects"])}
        self._rows_of = None
        self._bias = None
        return int(meta["seq"])

    def _valid(self) -> bool:
        live = np.flatnonzero(self.ids >= 0)
        if len(live) == 0:
            return True
        picks = {int(live[0]), int(live[-1])}
        if store_embedder(self.store).inline:  # a model's texts cost ~0.1 s each: the first and last only
            picks.update(int(live[i]) for i in random.sample(range(len(live)), min(6, len(live))))
        return validate(self.store, self.matrix, [(int(self.ids[r]), r) for r in picks])

    def _grow(self, rows: int) -> None:
        old = len(self.ids)
        if rows <= old:
            return
        extra = rows - old
        self.ids = np.concatenate([self.ids, np.full(extra, -1, dtype=np.int64)])
        self.touched = np.concatenate([self.touched, np.zeros(extra)])
        self.strength = np.concatenate([self.strength, np.zeros(extra, dtype=np.float32)])
        self.active = np.concatenate([self.active, np.zeros(extra, dtype=bool)])
        self.kind = np.concatenate([self.kind, np.zeros(extra, dtype=np.int16)])
        self.project = np.concatenate([self.project, np.zeros(extra, dtype=np.int32)])

    def _load(self, rows: int, changed_since: int | None) -> int:
        """Load every row (``changed_since`` None) or those changed since; return how many
        changed rows were applied (0 for a full load)."""
        if changed_since is None:
            self.ids = np.full(rows, -1, dtype=np.int64)
            self.touched = np.zeros(rows, dtype=np.float64)
            self.strength = np.zeros(rows, dtype=np.float32)
            self.active = np.zeros(rows, dtype=bool)
            self.kind = np.zeros(rows, dtype=np.int16)
            self.project = np.zeros(rows, dtype=np.int32)
            self._rows_of = None
            self._load_all(rows)
            changes = []
        else:
            self._grow(rows)
            changes = recall_reads.episodes_changed_after(self.store, changed_since)
            row_of = self._rows_of if self._rows_of is not None else self._old_rows(changes, rows)
            for eid, row, kind, project, touched, strength, archived in changes:
                old = row_of.get(eid)
                if old is not None and old != row:
                    self.ids[old] = -1
                    self.active[old] = False
                if row is None or row >= rows:
                    row_of.pop(eid, None)
                    continue
                row_of[eid] = row
                self.ids[row] = eid
                self.touched[row] = epoch(touched)
                self.strength[row] = min(max(float(strength), 0.0), 1.0)
                self.active[row] = not archived
                self.kind[row] = self._kinds.setdefault(kind, len(self._kinds) + 1)
                self.project[row] = self._projects.setdefault(project, len(self._projects) + 1)
        self._bias = None
        return len(changes)

    def _old_rows(self, changes: list[tuple], rows: int) -> dict[int, int]:
        """The rows the changed episodes hold now (id -> row), found without making the whole
        :attr:`_row_of` (a dict of every row: 20 ms at 100k, for a process that applies the few
        touches since the arrays were saved and recalls once): a changed episode that still
        holds its row is checked there, the others are looked for in one pass over the ids."""
        found: dict[int, int] = {}
        missing = []
        for eid, row, *_ in changes:
            if row is not None and row < rows and self.ids[row] == eid:
                found[eid] = row
            else:
                missing.append(eid)
        if missing:
            at = np.flatnonzero(np.isin(self.ids, np.asarray(missing, dtype=np.int64)))
            found.update(zip(self.ids[at].tolist(), at.tolist()))
        return found

    def _load_all(self, rows: int) -> None:
        """A full load, vectorised: SQLite concatenates each column, numpy parses it, so
        100k memories load without creating a Python object per value."""
        cols = recall_reads.episode_index_columns(self.store, rows)
        if cols[0] is None:
            return
        at = _ints(cols[0])
        ids = _ints(cols[1])
        self.ids[at] = ids
        self.touched[at] = np.array(cols[2].split(","), dtype=np.float64)
        self.strength[at] = np.clip(np.array(cols[3].split(","), dtype=np.float32), 0.0, 1.0)
        self.active[at] = _ints(cols[4]) == 0
        for text, codes, target in ((cols[5], self._kinds, self.kind), (cols[6], self._projects, self.project)):
            names = text.split("\x1f")
            for name in set(names):
                codes.setdefault(name or None, len(codes) + 1)
            target[at] = np.array([codes[name or None] for name in names], dtype=target.dtype)

    # --- scoring --------------------------------------------------------------------------

    def search(
        self,
        query_vector: np.ndarray,
        now: datetime,
        k: int,
        *,
        kinds: list[str] | None = None,
        project: str | None = None,
    ) -> list[tuple[int, float, float, float, float]]:
        """Top ``k`` as (episode id, score, relevance, recency, strength), best first."""
        if self._rows == 0 or k <= 0:
            return []
        found = self._search_columns(query_vector, now, k, kinds, project) if self.columns is not None else None
        if found is None and self.ann is not None:
            found = self._search_ann(query_vector, now, k, kinds, project)
        if found is None:
            rel = self.matrix @ query_vector  # float32, one BLAS pass: the bulk of the time
            self.last_relevance = rel
            rows = None
            factor, recency = self._factor(now, None, kinds, project)
        else:
            rows, rel, factor, recency = found
        with np.errstate(invalid="ignore"):
            score = rel * factor
        score[~np.isfinite(factor)] = -np.inf
        if len(score) > k:
            top = np.argpartition(-score, k - 1)[:k]
        else:
            top = np.arange(len(score))
        top = top[np.isfinite(score[top])]
        at = top if rows is None else rows[top]
        order = np.lexsort((self.ids[at], -score[top]))
        top, at = top[order], at[order]
        return [
            (int(self.ids[r]), float(score[t]), float(rel[t]), float(recency[t]), float(self.strength[r]))
            for t, r in zip(top, at)
        ]

    def _factor(self, now: datetime, rows: np.ndarray | None, kinds=None, project=None):
        """(factor, recency) of ``rows`` (None: every row): the factor is 0.60 + 0.25 recency
        + 0.15 strength, -inf where the row may not be recalled (archived, stale, filtered)."""
        config = self.store.config
        if self._bias is None:
            # the factor's constant part and strength's share, and -inf for what may not be recalled
            self._bias = (config.relevance_weight + config.strength_weight * self.strength).astype(np.float32)
            self._bias[~self.active] = -np.inf
            self._days = (self.touched / DAY).astype(np.float64)
        bias, days = (self._bias, self._days) if rows is None else (self._bias[rows], self._days[rows])
        age = (epoch(now) / DAY) - days
        np.maximum(age, 0.0, out=age)
        recency = np.exp2(age.astype(np.float32) / np.float32(-config.recency_half_life_days))
        factor = recency * np.float32(config.recency_weight)
        factor += bias
        if kinds:
            codes = [self._kinds[k_] for k_ in kinds if k_ in self._kinds]
            factor[~np.isin(self.kind if rows is None else self.kind[rows], codes)] = -np.inf
        if project:
            codes = [code for name, code in self._projects.items() if _project_matches(name, project)]
            factor[~np.isin(self.project if rows is None else self.project[rows], codes)] = -np.inf
        return factor, recency

    def _search_ann(self, query_vector: np.ndarray, now: datetime, k: int, kinds, project):
        """(rows, relevance, factor, recency) of candidates that hold the top ``k`` by score, or
        None (then every row is scored). The index proposes the ``n`` rows nearest the query
        among those it covers, the rows appended since are scored exactly, and the answer
        stands when the k-th best score reaches the relevance of the farthest proposal (a row
        left out is no nearer, and a score never exceeds its relevance); else ``n`` grows,
        up to a share of the rows past which one exact pass is cheaper."""
        covered = min(self.ann.rows, self._rows)
        tail = np.arange(covered, self._rows)
        if len(tail) > max(4096, covered // 4):
            return None  # the index is far behind (the next ingest or sleep updates it)
        n = max(128, 8 * k)
        while n <= max(4096, covered // 50):
            proposed = self.ann.search(query_vector, n)
            proposed = proposed[proposed < covered]
            rows = np.concatenate([proposed, tail]) if len(tail) else proposed
            rel = np.asarray(self.matrix[rows], dtype=np.float32) @ query_vector
            factor, recency = self._factor(now, rows, kinds, project)
            if len(proposed) < n:  # the index holds fewer rows than asked: every one came back
                return rows, rel, factor, recency
            with np.errstate(invalid="ignore"):
                score = rel * factor
            score[~np.isfinite(factor)] = -np.inf
            floor = float(rel[: len(proposed)].min())
            if len(score) >= k and float(np.partition(score, len(score) - k)[len(score) - k]) >= floor:
                return rows, rel, factor, recency
            n *= 4
        return None

    def _search_columns(self, query_vector: np.ndarray, now: datetime, k: int, kinds, project):
        """(rows, relevance, factor, recency) of candidates that provably hold the top ``k`` by
        score, or None, by the 8-bit slot-major copy
        (:mod:`openmemory_local.recall.columns`).

        The copy gives every covered row's relevance within ``eps`` (the rows appended since
        are scored exactly). With R no more than the k-th best of those among active rows, at
        least k rows score at least ``fmin * (R - eps)`` (the factor is at least ``fmin``, the
        relevance weight), and a row whose relevance by the copy is below ``fmin / fmax * (R -
        eps) - eps`` scores below that (the factor is at most ``fmax``, the sum of the weights):
        only the rows above that line are candidates. Their factors are exact, so their scores
        by the copy are within ``eps * fmax``: those more than twice that below the k-th best
        cannot reach the top k either. The rest are scored exactly from the matrix, and the
        answer stands if, the filters applied, their k-th best still reaches ``fmin * (R - eps)``.

        A long query (many coordinates: the C column pass serves it) matches many rows about as
        well, and the line then keeps too many: every row's factor is computed instead, and the
        rows whose score by the copy is within ``2 * eps * fmax`` of a k-th best (from below: the
        chunks' maxima again) are the candidates, scored exactly (``_near_by_scores``)."""
        from openmemory_local.recall.columns import max_slots

        config = self.store.config
        weights = (config.relevance_weight, config.recency_weight, config.strength_weight)
        slots = np.flatnonzero(query_vector)
        if len(slots) > max_slots(len(query_vector)) or min(weights) < 0 or weights[0] <= 0:
            return None
        fmin, fmax = weights[0], sum(weights)
        covered = min(self.columns.rows, self._rows)
        if self._rows - covered > max(65536, covered // 4):
            return None  # the copy is far behind (the next ingest extends it)
        rel, eps = self.columns.relevance(query_vector, slots)
        rel = rel[:covered]
        if self._rows > covered:
            tail = np.asarray(self.matrix[covered:self._rows], dtype=np.float32)[:, slots] @ query_vector[slots]
            rel = np.concatenate([rel, tail])
        rel[~self.active] = -np.inf
        n = len(rel)
        if n <= 8 * k:
            return None
        best = _kth_from_below(rel, k)
        line = fmin / fmax * (best - eps) - eps
        if not np.isfinite(best) or line <= 0:
            return self._near_by_scores(rel, eps, fmax, slots, query_vector, now, k, kinds, project)
        rows = np.flatnonzero(rel >= line)
        if len(rows) > n // 8:
            return self._near_by_scores(rel, eps, fmax, slots, query_vector, now, k, kinds, project)
        factor, recency = self._factor(now, rows, kinds, project)
        allowed = np.isfinite(factor)
        if int(allowed.sum()) < k:
            return None  # the filters left too few of the candidates: one exact pass
        with np.errstate(invalid="ignore"):
            approx = np.where(allowed, rel[rows] * factor, -np.inf)
        kth = float(np.partition(approx, len(approx) - k)[len(approx) - k])
        near = approx >= kth - 2 * eps * fmax
        rows, factor, recency = rows[near], factor[near], recency[near]
        exact = np.asarray(self.matrix[rows], dtype=np.float32)[:, slots] @ query_vector[slots]
        score = exact * factor
        if float(np.partition(score, len(score) - k)[len(score) - k]) < fmin * (best - eps):
            return None  # (with filters) the candidates' k-th best may not be the store's
        return rows, exact, factor, recency

    def _near_by_scores(self, rel, eps, fmax, slots, query_vector, now, k, kinds, project):
        """_search_columns' candidates by every row's score: a row's score by the copy is within
        ``eps * fmax`` of its score (its factor is exact), so with S no more than the k-th best
        by the copy, the top k score at least ``S - eps * fmax`` and a row more than twice that
        below S cannot reach them."""
        factor, recency = self._factor(now, None, kinds, project)
        allowed = np.isfinite(factor)
        with np.errstate(invalid="ignore"):
            approx = np.where(allowed, rel * factor, -np.inf)
        kth = _kth_from_below(approx, k)
        if not np.isfinite(kth):
            return None  # fewer than k rows may be recalled: one exact pass
        rows = np.flatnonzero(approx >= kth - 2 * eps * fmax)
        if len(rows) > len(rel) // 8:
            return None
        exact = np.asarray(self.matrix[rows], dtype=np.float32)[:, slots] @ query_vector[slots]
        return rows, exact, factor[rows], recency[rows]

    def note_touched(self, ids: list[int], now: datetime) -> None:
        t = epoch(now)
        rows = self._row_of if self._rows_of is not None else None
        at = ([rows[e] for e in ids if e in rows] if rows is not None
              else np.flatnonzero(np.isin(self.ids, np.asarray(ids, dtype=np.int64))))
        for row in at:
            self.touched[row] = max(self.touched[row], t)
            if self._bias is not None:
                self._days[row] = self.touched[row] / DAY


#: Rows per chunk whose maximum relevance bounds the k-th best from below (_search_columns).
_CHUNK = 1024


def _kth_from_below(values: np.ndarray, k: int) -> float:
    """A value no more than the k-th best of ``values`` (len > 8k): the k-th best of the chunks'
    maxima (k distinct rows reach it), one pass over them instead of a partition of them all."""
    n = len(values)
    chunk = min(_CHUNK, n // (8 * k))
    whole = n - n % chunk
    maxima = values[:whole].reshape(-1, chunk).max(axis=1)
    if whole < n:
        maxima = np.append(maxima, values[whole:].max())
    return float(np.partition(maxima, len(maxima) - k)[len(maxima) - k])

#: Stores this big keep their recall arrays beside the matrix (a smaller one loads them at once).
_SAVE_MIN_ROWS = 20_000
#: A process that loaded the saved arrays and applied this many rows changed since (touches,
#: mostly) saves them again, so that each later process does not apply them all once more.
_RESAVE_CHANGES = 256


def _ann_for(store, name: str, rows: int):
    """The approximate index of matrix ``name`` when the store is big enough to need one."""
    minimum = store.config.recall_index_min_rows
    if not minimum or rows < minimum or not name:
        return None
    from openmemory_local.recall.ann import AnnIndex

    return AnnIndex.open(store, name)


def _columns_for(store, name: str, rows: int, matrix: np.ndarray):
    """The slot-major copy of matrix ``name`` when the store is big enough to have one."""
    minimum = store.config.recall_copy_min_rows
    if not minimum or rows < minimum or not name:
        return None
    from openmemory_local.recall.columns import Columns

    return Columns.open(store, name, matrix)


def _ints(text: str) -> np.ndarray:
    return np.array(text.split(","), dtype=np.int64)


def _project_matches(name: str | None, wanted: str) -> bool:
    if not name:
        return False
    wanted = wanted.rstrip("/")
    from openmemory_local.core.config import project_dir

    return name.rstrip("/") == wanted or name.rstrip("/").rsplit("/", 1)[-1] == wanted or project_dir(name) == wanted


def index_for(store) -> RecallIndex:
    """The store's cached :class:`RecallIndex` (created on first use)."""
    index = store._cache.get("recall_index")
    if index is None:
        index = store._cache["recall_index"] = RecallIndex(store)
    return index


def _prepare(store, query: str, now: datetime | None):
    """(now, the query's vector, the store's refreshed index); EmptyQuery for a query without words."""
    if not features(query):
        raise EmptyQuery(f"nothing to search for in {query!r}: use some content words")
    vector = store_embedder(store).embed(query)
    index = index_for(store)
    index.refresh()
    return now or resolve_now(), vector, index


def recall(
    store,
    query: str,
    k: int = 5,
    now: datetime | None = None,
    *,
    kinds: list[str] | None = None,
    project: str | None = None,
    touch: bool = True,
) -> list[RecallResult]:
    """The ``k`` best memories for ``query`` at time ``now``, best first.

    ``kinds`` restricts to episode kinds (``["error"]``), ``project`` to a project
    (working directory, its last component, or Claude Code folder name). With ``touch``
    (the default) the returned memories are touched. Raises :class:`EmptyQuery` for a query
    without searchable words.
    """
    now, vector, index = _prepare(store, query, now)
    hits = index.search(vector, now, k, kinds=kinds, project=project)
    if not hits:
        return []
    ids = [h[0] for h in hits]
    rows = {e["id"]: e for e in store.episodes(ids=ids, include_archived=True)}
    results = [
        RecallResult(rows[eid], score, rel, rec, strength)
        for eid, score, rel, rec, strength in hits
        if eid in rows
    ]
    if touch and results:
        if store.touch([r.id for r in results], iso(now), timeout=store.config.touch_timeout):
            index.note_touched([r.id for r in results], now)
    return results


#: Beyond ``recall_index_min_rows`` a lesson's evidence is the best of its latest members only.
_EVIDENCE_MEMBERS = 64


def _evidence(store, index: RecallIndex, vector: np.ndarray) -> dict[int, tuple[int, float]]:
    """Active lesson id -> (the member episode that matches ``vector`` best, its relevance),
    in one pass: SQLite lists the members' rows, numpy scores them and takes each lesson's best."""
    big = bool(store.config.recall_index_min_rows) and index._rows >= store.config.recall_index_min_rows
    lids, eids, vrows = recall_reads.lesson_member_rows(store, index._rows, _EVIDENCE_MEMBERS if big else None)
    if lids is None:
        return {}
    lids, eids, vrows = _ints(lids), _ints(eids), _ints(vrows)
    live = index.ids[vrows] == eids  # the row is still this episode's (not stale)
    lids, eids, vrows = lids[live], eids[live], vrows[live]
    if not len(vrows):
        return {}
    rel = np.asarray(index.matrix[vrows], dtype=np.float32) @ vector
    order = np.lexsort((eids, -rel, lids))  # by lesson, best first, lowest id on ties
    lids, eids, rel = lids[order], eids[order], rel[order]
    first = np.flatnonzero(np.r_[True, lids[1:] != lids[:-1]])
    return {int(lids[i]): (int(eids[i]), float(rel[i])) for i in first}


def _lesson_vectors(store, index: RecallIndex, texts: list[str]) -> dict[str, np.ndarray]:
    """The vectors of lesson texts, by the store's embedder, kept by the index between calls."""
    cache = index.__dict__.setdefault("_text_vectors", {})
    missing = [t for t in dict.fromkeys(texts) if t not in cache]
    if missing:
        for text, vec in zip(missing, store_embedder(store).embed_many(missing)):
            cache[text] = vec
    return cache


@dataclass
class LessonHit:
    """One recalled lesson: the lesson (text, strength, seen, sessions, resolution, ...) and its
    score components; ``evidence`` is the member episode that matches the query best (None if
    none is left)."""

    lesson: dict
    score: float
    relevance: float
    recency: float
    strength: float
    evidence: int | None = None

    def to_dict(self) -> dict:
        return {"score": round(self.score, 6),
                "components": {"relevance": round(self.relevance, 6), "recency": round(self.recency, 6),
                               "strength": round(self.strength, 6)},
                "evidence": self.evidence, "lesson": self.lesson}


def recall_lessons(store, query: str, k: int = 3, now: datetime | None = None, *, project: str | None = None,
                   min_relevance: float = 0.3) -> list[LessonHit]:
    """The ``k`` active lessons that best match ``query``, best first, those of relevance
    ``min_relevance`` or more only (see the module docstring). Raises :class:`EmptyQuery`."""
    import math

    from openmemory_local.core.jsonio import loads

    if project:  # its regular expressions take a fresh process 5 ms to compile: only when asked
        from openmemory_local.text.normalize import family_matches
    now, vector, index = _prepare(store, query, now)
    config = store.config
    rows = recall_reads.recallable_lessons(store)
    if not rows:
        return []
    evidence_of = _evidence(store, index, vector)
    texts = _lesson_vectors(store, index, [r[3] for r in rows])
    hits = []
    for lid, kind, fam, text, strength, seen, sessions, last_seen, reinforced, details_json, file_name in rows:
        if project and not (family_matches(fam, project) or (fam or "").rstrip("/*").endswith(project.rstrip("/"))):
            continue
        evidence, evidence_rel = evidence_of.get(lid, (None, -1.0))
        best = max(float(texts[text] @ vector), evidence_rel)
        if best < min_relevance:
            continue
        when = reinforced or last_seen
        age = max(0.0, (epoch(now) - epoch(when)) / DAY) if when else math.inf
        recency = 0.5 ** (age / config.recency_half_life_days) if math.isfinite(age) else 0.0
        details = loads(details_json, {})
        lesson = {"id": lid, "kind": kind, "family": fam, "text": text, "strength": round(float(strength), 4),
                  "seen": seen, "sessions": sessions, "last_seen": last_seen, "file_name": file_name,
                  "resolution": (details.get("resolutions") or [None])[0], "signature": details.get("signature")}
        hits.append(LessonHit(lesson, score_of(config, best, recency, strength), best, recency,
                              min(max(float(strength), 0.0), 1.0), evidence))
    hits.sort(key=lambda h: (-h.score, h.lesson["id"]))
    if hits:  # the rule of recall: nothing below 0.6 times the best match's relevance
        floor = 0.6 * max(h.relevance for h in hits)
        hits = [h for h in hits if h.relevance >= floor]
    return hits[:k]
