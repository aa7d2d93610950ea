"""The matrix by coordinate, 8-bit: exact recall for short queries in a store too big for one pass.

A query of the hashed embedding is sparse: its few words and word pairs fall in 10 to 20 of
the 256 coordinates (a stored text of 10 to 40 words fills about 50). Its relevance to a row
is the sum over the query's coordinates only, so a copy of the matrix laid out coordinate by
coordinate (*slot-major*) answers it by reading those coordinates' columns: 10 of 256 is a
twenty-fifth of the bytes of the exact pass. The copy is quantised to 8 bits (a quarter of the
float32 matrix: 256 MB at a million rows) with one scale per coordinate and block, so the
relevance it gives is approximate within a bound that is known: ``|q|_1 * scale / 2`` per
block. :meth:`openmemory_local.recall.query.RecallIndex.search` uses the bound to keep every row that
can reach the top ``k`` by score and scores those exactly from the float32 matrix: the answer
is the exact pass's, not an approximation (see ``_search_columns`` there).

The file is derived data beside the matrix, like the HNSW index (:mod:`openmemory_local.recall.ann`):
``vectors/<matrix stem>.<token>.cols`` holds blocks of consecutive rows (at least
:data:`MIN_BLOCK` rows each, up to :data:`BLOCK`), each ``dims`` float32 scales then ``dims x
rows`` int8 codes; ``<stem>.cols.json`` names that file and lists its blocks (first row, rows,
offset). A copy written anew goes to a new file (a reader that mapped the old one keeps it
whole), then the list points at it. The
matrix's rows never change once written (a new file is made when it is compacted or the
embedding changes), so a block is written once: :func:`update` appends the blocks for rows
added since, then replaces the list atomically; bytes past the listed blocks (an update that
was killed) are cut off by the next one. Rows past the last block are scored exactly by recall.
A list that does not match its file, its matrix or the store's embedding is ignored (recall is
then exact or uses the HNSW index) until the next update rewrites it. A store of a model's
embedding (dense: every coordinate of every query is non-zero) gets no copy.
"""

from __future__ import annotations

import fcntl
import json
import os

import numpy as np

from openmemory_local.core.embedders import HASHED_EMBEDDING

__all__ = ["Columns", "update", "max_slots", "BLOCK", "MIN_BLOCK", "MAX_SLOTS"]

#: Rows per block written at once (the first build cuts the matrix into blocks this big).
BLOCK = 65536
#: An update writes a block only for this many new rows or more (fewer are recall's exact tail).
MIN_BLOCK = 16384
#: Queries with more non-zero coordinates than this take the other paths when the column pass is
#: numpy's (it would read more than a fifth of the copy: the HNSW index or one exact pass is then
#: as quick). With the C pass (``_columns_c``, built by setup.py) every query takes the copy.
MAX_SLOTS = 48
_CODE_MAX = 127.0
#: Row-slot products past which the C pass shares the rows between two threads.
_THREADED = 1 << 22


def _native():
    from openmemory_protocol.native import load

    return load("openmemory_local._columns_c")


def max_slots(dims: int) -> int:
    """The most non-zero coordinates a query may have for the copy to serve it."""
    return dims if _native() is not None else MAX_SLOTS


def _paths(vectors, name: str):
    """(the matrix's stem, the list's path)."""
    stem = name.split(".", 1)[0]
    return stem, vectors.dir / f"{stem}.cols.json"


def _data_path(vectors, stem: str, meta: dict):
    """The data file the list names (a plain name of this matrix's), else ValueError."""
    file = meta["file"]
    if not isinstance(file, str) or "/" in file or not file.startswith(stem + ".") or not file.endswith(".cols"):
        raise ValueError(f"not a copy of {stem}: {file!r}")
    return vectors.dir / file


def _quantise(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(scales (dims,), codes (dims, n) int8) of a block of float32 rows."""
    block = np.ascontiguousarray(np.asarray(rows, dtype=np.float32).T)
    top = np.abs(block).max(axis=1) if block.shape[1] else np.zeros(block.shape[0], np.float32)
    scales = np.where(top > 0, top / _CODE_MAX, 1.0).astype(np.float32)
    codes = np.rint(block / scales[:, None]).clip(-_CODE_MAX, _CODE_MAX).astype(np.int8)
    return scales, codes


class Columns:
    """The blocks of a matrix's slot-major copy, mapped read-only."""

    def __init__(self, blocks: list[tuple[int, np.ndarray, np.ndarray]], rows: int, dims: int,
                 path=None, listed: list[tuple[int, int, int]] = (), end: int = 0):
        self.blocks = blocks  # (first row, scales (dims,), codes (dims, n)) each
        self.rows = rows
        self.dims = dims
        self.path = path  # the data file, its list's blocks (first row, rows, offset), the bytes they take
        self.listed = list(listed)
        self.end = end

    @classmethod
    def open(cls, store, name: str, matrix: np.ndarray | None = None) -> "Columns | None":
        """The copy of matrix ``name`` if it is there and agrees with it (three sampled rows of
        ``matrix`` against their codes), else None."""
        from openmemory_local.storage.vectors import VectorFile

        vectors = VectorFile(store)
        stem, meta_path = _paths(vectors, name)
        try:
            meta = json.loads(meta_path.read_text())
            path = _data_path(vectors, stem, meta)
            dims = int(meta["dims"])
            listed = [(int(a), int(n), int(off)) for a, n, off in meta["blocks"]]
            if meta.get("embedding") != store.get_meta("embedding") or dims != vectors.dims:
                return None
            size = os.path.getsize(path)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        rows, end, blocks = 0, 0, []
        raw = np.memmap(path, dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)
        for first, n, offset in listed:
            end = offset + 4 * dims + dims * n
            if first != rows or n <= 0 or end > size:
                return None
            scales = raw[offset:offset + 4 * dims].view(np.float32)
            codes = raw[offset + 4 * dims:end].view(np.int8).reshape(dims, n)
            blocks.append((first, scales, codes))
            rows += n
        columns = cls(blocks, rows, dims, path, listed, end)
        if matrix is not None and rows and not columns._agrees(matrix):
            return None
        return columns

    def _agrees(self, matrix: np.ndarray) -> bool:
        if len(matrix) < self.rows:
            return False
        for row in {0, self.rows // 2, self.rows - 1}:
            first, scales, codes = next(b for b in reversed(self.blocks) if b[0] <= row)
            got = codes[:, row - first].astype(np.float32) * scales
            if not np.all(np.abs(got - np.asarray(matrix[row], dtype=np.float32)) <= scales * 0.5 + 1e-6):
                return False
        return True

    def relevance(self, vector: np.ndarray, slots: np.ndarray) -> tuple[np.ndarray, float]:
        """(approximate relevance of every covered row to ``vector``, the bound of its error):
        only the coordinates ``slots`` (those where ``vector`` is not zero) are read."""
        out = np.empty(self.rows, dtype=np.float32)
        weights = np.asarray(vector, dtype=np.float32)[slots]
        native = _native()
        if native is not None:  # the same float32 operations in the same order, in one C pass
            slots = np.ascontiguousarray(slots, dtype=np.int64)
            work, bound = [], 0.0
            for first, scales, codes in self.blocks:
                w = np.ascontiguousarray(weights * scales[slots], dtype=np.float32)
                bound = max(bound, float(np.abs(w).sum()) * 0.5)
                work.append((codes, w, out[first:first + codes.shape[1]]))
            native.accumulate(work, slots, 2 if self.rows * len(slots) >= _THREADED and _cores() > 1 else 1)
            return out, bound + _rounding(len(slots))
        spare = np.empty(max((c.shape[1] for _, _, c in self.blocks), default=0), dtype=np.float32)
        bound = 0.0
        for first, scales, codes in self.blocks:
            n = codes.shape[1]
            acc, tmp = out[first:first + n], spare[:n]
            w = weights * scales[slots]
            bound = max(bound, float(np.abs(w).sum()) * 0.5)
            if not len(slots):
                acc.fill(0.0)
                continue
            np.multiply(codes[slots[0]], w[0], out=acc)
            for slot, weight in zip(slots[1:].tolist(), w[1:]):  # float32 scalars: a float32 loop
                np.multiply(codes[slot], weight, out=tmp)
                np.add(acc, tmp, out=acc)
        return out, bound + _rounding(len(slots))


def _rounding(terms: int) -> float:
    """A bound of float32's rounding in a sum of ``terms`` products whose magnitudes add up to
    about 1 at most (|q|, |v| <= 1; the codes' error adds a little): each product and each sum
    rounds by at most 2**-24 of that, so (terms + 1) * 6e-8, doubled for safety, and 1e-5."""
    return 1e-5 + (terms + 1) * 1.2e-7


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def update(store, progress=None) -> dict:
    """Append the blocks of the rows added to the store's matrix since the last update (when the
    store is big enough: ``Config.recall_copy_min_rows``). Returns ``{"rows", "covered", "added"}``.
    Call outside a write transaction (it only reads the store; the list is replaced atomically)."""
    from openmemory_local.storage.vectors import VectorFile

    config = store.config
    vectors = VectorFile(store)
    name, rows = vectors.current_name(), vectors.committed_rows()
    out = {"rows": rows, "covered": 0, "added": 0}
    if not config.recall_copy_min_rows or rows < config.recall_copy_min_rows or not name:
        return out
    if (store.get_meta("embedding") or HASHED_EMBEDDING) != HASHED_EMBEDDING:
        return out  # a model's vectors are dense: every query would read the whole copy (the HNSW index serves them)
    stem, meta_path = _paths(vectors, name)
    vectors.dir.mkdir(parents=True, exist_ok=True)
    with open(vectors.dir / f"{stem}.cols.lock", "a+b") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return out  # another process is extending it (with the same rows or more)
        return _extend(store, vectors, name, rows, stem, meta_path, out, progress)


def _extend(store, vectors, name, rows, stem, meta_path, out, progress) -> dict:
    dims = vectors.dims
    matrix = vectors.map(name, rows, dims)
    embedding = store.get_meta("embedding")
    existing = Columns.open(store, name, matrix)
    if existing is not None:  # extended in place: only bytes past its listed blocks are written
        path, listed, covered, end = existing.path, [list(b) for b in existing.listed], existing.rows, existing.end
    else:  # a new file: a reader that mapped the old one keeps it whole
        path, listed, covered, end = vectors.dir / f"{stem}.{os.urandom(4).hex()}.cols", [], 0, 0
    out["covered"] = covered
    if rows - covered < MIN_BLOCK:
        return out
    with open(path, "r+b" if existing is not None else "wb") as f:
        f.truncate(end)  # what a killed update left past the listed blocks
        f.seek(end)
        start = covered
        while rows - start >= MIN_BLOCK:
            stop = min(rows, start + BLOCK)
            if rows - stop < MIN_BLOCK:  # no block of the few rows left: this one takes them
                stop = rows
            scales, codes = _quantise(matrix[start:stop])
            f.write(scales.tobytes())
            f.write(codes.tobytes())
            listed.append([start, stop - start, end])
            end += 4 * dims + dims * (stop - start)
            start = stop
            if progress:
                progress(start - covered, rows - covered)
        f.flush()
        os.fsync(f.fileno())
    tmp = meta_path.with_name(meta_path.name + ".tmp")
    tmp.write_text(json.dumps({"rows": start, "embedding": embedding, "dims": dims, "file": path.name,
                               "blocks": listed}))
    os.replace(tmp, meta_path)
    for other in vectors.dir.glob(f"{stem}.*cols"):  # what the list no longer names
        if other.name != path.name:
            other.unlink(missing_ok=True)
    out.update(covered=start, added=start - covered)
    return out
