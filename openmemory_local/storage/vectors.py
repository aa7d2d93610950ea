"""The embedding matrix beside the store: a memory-mappable file of float32 rows.

``<home>/vectors/<name>.f32`` holds every episode's vector, once (schema 5: SQLite keeps no
copy): row ``episodes.vec_row`` holds that episode's ``dims`` float32 values (little-endian;
256 for the hashed embedding, 1 KiB a row), made by the embedding ``episodes.embedder``,
which is the store's ``meta.embedding`` for every row of the current file. A one-shot
command maps the file instead of reading 100k rows, and a long-lived process keeps the map.
Vectors are derived from the texts: a lost file is re-embedded, never a loss.

Rules (every writer holds the store's write transaction):

* Rows are only appended. The committed row count is ``counters.vec_rows``; bytes past
  it (an append whose transaction never committed) are truncated before the next append.
* An episode whose text changes gets a new row; its old row becomes stale. When stale
  rows exceed ``Config.vector_garbage_ratio`` (and ``vector_garbage_min``), the live rows
  are copied into a new file (``meta.vectors_file`` names the current one) and
  ``counters.episode_epoch`` is bumped, which tells every cache to reload.
* A file shorter than its committed rows (lost, truncated by hand) or whose sampled rows
  differ from their texts' embeddings (:func:`validate`) is replaced by an empty one:
  every episode's ``vec_row`` is cleared and :func:`embed_pending` embeds them again.
* :func:`embed_pending` embeds what has no vector yet (episodes stored by an embedder that
  does not embed inline, rows cleared above), and switches the store to the configured
  embedder (:mod:`openmemory_local.core.embedders`) when it differs: one new file, filled in
  committed batches, so an interrupted switch resumes where it stopped. Archived episodes
  are not embedded (recall never returns them).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from openmemory_local.core.embedders import dims_of, embedder_for, store_embedder

__all__ = ["ROW_BYTES", "VectorFile", "validate", "embed_pending", "rewrite_from_blobs"]

ROW_BYTES = 256 * 4  # a row of the hashed embedding (the default)
_DTYPE = np.dtype("<f4")
EMBED_BATCH = 256


class VectorFile:
    """The matrix of a store (``store`` is a :class:`openmemory_local.storage.store.Store`)."""

    def __init__(self, store):
        self.store = store
        self.dir: Path = store.config.vectors_dir

    # --- naming ---------------------------------------------------------------------

    def current_name(self) -> str:
        return self.store.get_meta("vectors_file") or ""

    def path(self, name: str | None = None) -> Path:
        return self.dir / (name if name is not None else self.current_name())

    def committed_rows(self) -> int:
        return self.store.counter("vec_rows")

    @property
    def dims(self) -> int:
        return dims_of(self.store.get_meta("embedding"))

    @property
    def row_bytes(self) -> int:
        return self.dims * 4

    # --- writing (inside store.write()) -------------------------------------------------

    def append(self, matrix: np.ndarray) -> int:
        """Append rows; return the first new row number. Call inside ``store.write()``."""
        dims = self.dims
        matrix = np.ascontiguousarray(matrix, dtype=_DTYPE).reshape(-1, dims)
        name = self.current_name()
        rows = self.committed_rows()
        if not name or _size(self.path(name)) < rows * dims * 4:
            self.reset()
            name, rows = self.current_name(), 0
        if len(matrix) == 0:
            return rows
        fd = self._fd(name)
        os.ftruncate(fd, rows * dims * 4)  # drop rows of an append that never committed
        os.pwrite(fd, matrix.tobytes(), rows * dims * 4)
        self.store.set_counter("vec_rows", rows + len(matrix))
        return rows

    def _fd(self, name: str) -> int:
        """A descriptor of matrix file ``name``, kept open by the store between appends."""
        cached = self.store._cache.get("vectors_fd")
        if cached and cached[0] == name:
            return cached[1]
        if cached:
            os.close(cached[1])
        self.dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path(name), os.O_RDWR | os.O_CREAT, 0o644)
        self.store._cache["vectors_fd"] = (name, fd)
        return fd

    def _new_name(self) -> str:
        generation = int(self.store.get_meta("vectors_generation", "0")) + 1
        self.store.set_meta("vectors_generation", str(generation))
        return f"episodes-{generation}.f32"

    def _point_at(self, name: str, rows: int) -> None:
        self.store.set_meta("vectors_file", name)
        self.store.set_counter("vec_rows", rows)
        self.store.set_counter("episode_epoch", self.store.counter("episode_epoch") + 1)

    def reset(self, embedding: str | None = None) -> None:
        """Start an empty file (for ``embedding``, default the store's) and clear every
        episode's row: :func:`embed_pending` fills it again."""
        self.dir.mkdir(parents=True, exist_ok=True)
        name = self._new_name()
        with open(self.path(name), "wb"):
            pass
        if embedding is not None:
            self.store.set_meta("embedding", embedding)
        self.store.conn.execute("UPDATE episodes SET vec_row = NULL, embedder = NULL WHERE vec_row IS NOT NULL")
        self._point_at(name, 0)

    def rebuild(self) -> None:
        """The file is lost or wrong: start over and embed every active episode again."""
        self.reset()
        embed_pending(self.store)

    def compact(self) -> None:
        """Copy the live rows into a new file, in episode order (nothing is re-embedded)."""
        dims = self.dims
        old = self.map(self.current_name(), self.committed_rows())
        live = self.store.conn.execute(
            "SELECT id, vec_row FROM episodes WHERE vec_row IS NOT NULL AND vec_row < ? ORDER BY id",
            (len(old),)).fetchall()
        name = self._new_name()
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.path(name), "wb") as f:
            for start in range(0, len(live), 65536):
                rows = np.fromiter((r for _, r in live[start:start + 65536]), dtype=np.int64)
                f.write(np.ascontiguousarray(old[rows], dtype=_DTYPE).reshape(-1, dims).tobytes())
        self.store.conn.execute("UPDATE episodes SET vec_row = NULL WHERE vec_row >= ?", (len(old),))
        self.store.conn.executemany("UPDATE episodes SET vec_row = ? WHERE id = ?",
                                    [(row, eid) for row, (eid, _) in enumerate(live)])
        self._point_at(name, len(live))

    def maybe_compact(self) -> bool:
        """Rebuild when stale rows dominate; return True if it did."""
        rows = self.committed_rows()
        live = self.store.conn.execute(
            "SELECT COUNT(*) FROM episodes WHERE vec_row IS NOT NULL"
        ).fetchone()[0]
        stale = rows - live
        config = self.store.config
        if stale >= config.vector_garbage_min and stale > config.vector_garbage_ratio * rows:
            self.compact()
            return True
        return False

    def remove_stale_files(self) -> None:
        """Delete matrix files (and their indexes) other than the current one (open maps stay
        valid on POSIX)."""
        current = self.current_name()
        if not self.dir.is_dir():
            return
        derived = (".f32", ".usearch", ".json", ".npz", ".npy", ".cols", ".lock")
        for entry in self.dir.iterdir():
            stem = entry.name.split(".", 1)[0]
            if entry.suffix in derived and stem != current.split(".", 1)[0]:
                try:
                    entry.unlink()
                except OSError:
                    pass

    # --- reading --------------------------------------------------------------------------

    def map(self, name: str, rows: int, dims: int | None = None) -> np.ndarray:
        """A read-only ``(rows, dims)`` map of the committed rows of file ``name``."""
        dims = dims or self.dims
        if rows == 0:
            return np.zeros((0, dims), dtype=_DTYPE)
        return np.memmap(self.path(name), dtype=_DTYPE, mode="r", shape=(rows, dims))


def validate(store, matrix: np.ndarray, sample: list[tuple[int, int]]) -> bool:
    """True if the mapped rows of ``sample`` ((episode id, row) pairs) are their texts' embeddings."""
    if not sample:
        return True
    ids = [eid for eid, _ in sample]
    texts = dict(store.conn.execute(
        f"SELECT id, text FROM episodes WHERE id IN ({','.join('?' * len(ids))})", ids).fetchall())
    if len(texts) != len(set(ids)) or any(row >= len(matrix) for _, row in sample):
        return False
    embedder = store_embedder(store)
    expected = embedder.embed_many([texts[eid] for eid, _ in sample])
    got = np.asarray(matrix[[row for _, row in sample]], dtype=np.float32)
    tolerance = 1e-6 if embedder.inline else 1e-3  # a model's float sums may differ in the last bits
    return got.shape == expected.shape and bool(np.all(np.abs(got - expected) <= tolerance))


def embed_pending(store, progress=None, *, batch: int = EMBED_BATCH) -> dict:
    """Switch the store to the configured embedder if it differs, then embed every active
    episode without a vector, ``batch`` texts at a time (each batch committed).

    ``progress(done, total)`` is called after each batch. Returns ``{"embedder", "switched",
    "embedded"}``. Raises :class:`openmemory_local.core.embedders.EmbedderUnavailable` when the
    configured embedder cannot run (before changing anything).
    """
    configured = embedder_for(store.config)
    vectors = VectorFile(store)
    switched = False
    if (store.get_meta("embedding") or "") != configured.embedding:
        if not configured.inline:
            configured.embed_many(["openmemory"])  # load the model first: a missing extra changes nothing
        with store.write():
            if (store.get_meta("embedding") or "") != configured.embedding:
                vectors.reset(configured.embedding)
                switched = True
    pending_sql = "FROM episodes WHERE vec_row IS NULL AND archived = 0"
    total = store.conn.execute(f"SELECT COUNT(*) {pending_sql}").fetchone()[0]
    done = 0
    if total and progress:
        progress(0, total)
    while total:
        rows = store.conn.execute(f"SELECT id, text {pending_sql} ORDER BY id LIMIT ?", (batch,)).fetchall()
        if not rows:
            break
        matrix = configured.embed_many([text for _, text in rows])  # outside the write lock
        with store.write():
            if store.get_meta("embedding") != configured.embedding:
                break  # another process switched it meanwhile: the next run follows
            first = vectors.append(matrix)
            # only where the text is still the one embedded (else it stays pending)
            store.conn.executemany(
                "UPDATE episodes SET vec_row = ?, embedder = ? WHERE id = ? AND text = ? AND vec_row IS NULL",
                [(first + i, configured.embedding, eid, text) for i, (eid, text) in enumerate(rows)])
        done += len(rows)
        if progress:
            progress(min(done, total), total)
        if done >= total * 4 + batch:  # texts that keep changing under us: leave them for later
            break
    return {"embedder": configured.name, "switched": switched, "embedded": done}


def rewrite_from_blobs(store) -> None:
    """Migration 5: write every episode's ``embedding`` blob into a new vectors file (the
    blobs are then dropped), so an existing store keeps its vectors without re-embedding."""
    vectors = VectorFile(store)
    vectors.dir.mkdir(parents=True, exist_ok=True)
    embedding = store.get_meta("embedding") or "hash-wb-256-v1"
    row_bytes = dims_of(embedding) * 4
    name = vectors._new_name()
    ids = []
    with open(vectors.path(name), "wb") as f:
        for episode_id, blob in store.conn.execute("SELECT id, embedding FROM episodes ORDER BY id"):
            f.write(blob if blob is not None and len(blob) == row_bytes else bytes(row_bytes))
            ids.append(episode_id)
    store.conn.execute("UPDATE episodes SET vec_row = NULL")
    store.conn.executemany("UPDATE episodes SET vec_row = ?, embedder = ? WHERE id = ?",
                           [(row, embedding, i) for row, i in enumerate(ids)])
    store.set_meta("embedding", embedding)
    vectors._point_at(name, len(ids))


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
