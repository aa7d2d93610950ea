"""An approximate nearest-neighbour index over the vectors file, for stores too big for one exact pass.

Queries of a big store of the hashed embedding are answered exactly by the slot-major copy
(:mod:`openmemory_local.recall.columns`, from ``Config.recall_copy_min_rows``): every one where its C
column pass is built, short ones (up to ``columns.MAX_SLOTS`` non-zero coordinates) with numpy's.
Where the copy serves every query, this index is not built (:func:`serves_every_query`). Up to
``Config.recall_index_min_rows`` (200,000) vectors, any other query scores every one (one
BLAS pass). Beyond, a long query the copy does not serve (or any query of a dense embedding)
takes this index: an HNSW graph (usearch, half-precision vectors,
32 links a node) proposes the rows nearest the query and recall scores those exactly
(:meth:`openmemory_local.recall.query.RecallIndex.search` grows the proposal until it provably
holds the top k by score, else falls back to the exact pass). Measured in
``benchmarks/recall_scale.py``: recall@10 against the exact pass, p50/p95, memory, disk.

The index is a file beside the matrix: ``vectors/<matrix stem>.usearch`` (keys are matrix
rows) with ``<stem>.usearch.json`` saying how many rows it covers. It is derived data: built
and extended by the write paths (:func:`update`, called at the end of an ingest run and of a
sleep), saved to a temporary file and renamed, so a reader maps either the old or the new
one; rows appended since are scored exactly by recall. Without usearch (it is a dependency,
so only a broken install lacks it) recall stays exact.
"""

from __future__ import annotations

import json
import os

import numpy as np

__all__ = ["AnnIndex", "update", "available", "serves_every_query", "CONNECTIVITY", "EXPANSION_ADD", "EXPANSION_SEARCH"]

CONNECTIVITY = 32
EXPANSION_ADD = 128
EXPANSION_SEARCH = 1024
DTYPE = "f16"
#: Rows added to the index per call to usearch (bounded memory for the copy it makes).
CHUNK = 65536
#: An index is extended once this many rows are missing from it.
UPDATE_MIN_ROWS = 20_000


def available() -> bool:
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


def _paths(vectors, name: str):
    stem = name.split(".", 1)[0]
    return vectors.dir / f"{stem}.usearch", vectors.dir / f"{stem}.usearch.json"


class AnnIndex:
    """A usearch index mapped read-only (``view``), covering the first ``rows`` rows of a matrix."""

    def __init__(self, index, rows: int):
        self.index = index
        self.rows = rows

    @classmethod
    def open(cls, store, name: str) -> "AnnIndex | None":
        from openmemory_local.storage.vectors import VectorFile

        vectors = VectorFile(store)
        path, meta_path = _paths(vectors, name)
        try:
            meta = json.loads(meta_path.read_text())
        except (OSError, ValueError):
            return None
        if meta.get("embedding") != store.get_meta("embedding") or not path.is_file() or not available():
            return None
        from usearch.index import Index

        try:
            index = Index.restore(str(path), view=True)
        except Exception:  # a damaged or foreign file: exact recall until the next update rewrites it
            return None
        if index is None:
            return None
        index.expansion_search = EXPANSION_SEARCH
        return cls(index, int(meta.get("rows", 0)))

    def search(self, vector: np.ndarray, n: int) -> np.ndarray:
        """The rows of the ``n`` vectors nearest ``vector`` (inner product), nearest first."""
        found = self.index.search(np.asarray(vector, dtype=np.float32), n)
        return np.asarray(found.keys, dtype=np.int64)


def serves_every_query(store) -> bool:
    """Whether the slot-major copy answers every query of this store (the hashed embedding, the
    C column pass built, the copy on from no more rows than this index): then this index,
    half an hour of build and 0.8 GB at a million rows, would never be read."""
    from openmemory_local.recall.columns import _native
    from openmemory_local.core.embedders import HASHED_EMBEDDING

    config = store.config
    return (bool(config.recall_copy_min_rows) and config.recall_copy_min_rows <= config.recall_index_min_rows
            and (store.get_meta("embedding") or HASHED_EMBEDDING) == HASHED_EMBEDDING and _native() is not None)


def update(store, progress=None, *, force: bool = False) -> dict:
    """Build or extend the index of the store's current matrix when the store is big enough
    (``Config.recall_index_min_rows``) and enough rows are missing from it. Returns what it did.
    Call outside a write transaction (it only reads the store; the file is replaced atomically)."""
    from openmemory_local.storage.vectors import VectorFile

    config = store.config
    vectors = VectorFile(store)
    name, rows = vectors.current_name(), vectors.committed_rows()
    out = {"rows": rows, "indexed": 0, "added": 0}
    if not config.recall_index_min_rows or rows < config.recall_index_min_rows or not name or not available():
        return out
    if serves_every_query(store):
        return out  # (an index built before stays, unused: remove_stale_files drops it with its matrix)
    from usearch.index import Index

    path, meta_path = _paths(vectors, name)
    embedding = store.get_meta("embedding")
    covered, index = 0, None
    try:
        meta = json.loads(meta_path.read_text())
        if meta.get("embedding") == embedding and path.is_file():
            covered = int(meta.get("rows", 0))
    except (OSError, ValueError):
        pass
    out["indexed"] = covered
    missing = rows - covered
    if missing <= 0 or (covered and missing < UPDATE_MIN_ROWS and not force):
        return out  # recall scores the few rows past the index exactly
    if covered:
        try:
            index = Index.restore(str(path))
        except Exception:
            index, covered = None, 0
    if index is None:
        index = Index(ndim=vectors.dims, metric="ip", dtype=DTYPE, connectivity=CONNECTIVITY,
                      expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)
    matrix = vectors.map(name, rows)
    for start in range(covered, rows, CHUNK):
        stop = min(rows, start + CHUNK)
        index.add(np.arange(start, stop, dtype=np.uint64), np.asarray(matrix[start:stop], dtype=np.float32),
                  threads=os.cpu_count() or 1)
        if progress:
            progress(stop - covered, rows - covered)
    tmp = path.with_name(path.name + ".tmp")
    index.save(str(tmp))
    os.replace(tmp, path)
    meta_tmp = meta_path.with_name(meta_path.name + ".tmp")
    meta_tmp.write_text(json.dumps({"rows": rows, "embedding": embedding, "dims": vectors.dims, "dtype": DTYPE,
                                    "connectivity": CONNECTIVITY, "expansion_add": EXPANSION_ADD}))
    os.replace(meta_tmp, meta_path)
    out.update(indexed=rows, added=rows - covered)
    return out
