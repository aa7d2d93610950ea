"""The embedding matrix beside the store: a memory-mappable file of float32 rows.

``episodes.embedding`` (in SQLite) is the truth; ``<home>/vectors/<name>.f32`` is a copy
laid out for recall: row ``episodes.vec_row`` holds that episode's 256 float32 values
(little-endian, 1 KiB a row), so a one-shot command maps the file instead of reading
100k blobs, and a long-lived process keeps the map.

Rules (every writer holds the store's write transaction):

* Rows are only appended. The committed row count is ``counters.vec_rows``; bytes past
  it (an append whose transaction never committed) are truncated before the next append.
* An episode whose text changes gets a new row; its old row becomes stale. When stale
  rows exceed ``Config.vector_garbage_ratio`` (and ``vector_garbage_min``), the matrix is
  rewritten as a new file (``meta.vectors_file`` names the current one) and
  ``counters.episode_epoch`` is bumped, which tells every cache to reload.
* A file shorter than its committed rows (lost, truncated by hand) is rebuilt from the
  store, the same way. Readers validate a sample of rows against the store
  (:func:`validate`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .embed import DIMS

__all__ = ["ROW_BYTES", "VectorFile", "validate"]

ROW_BYTES = DIMS * 4
_DTYPE = np.dtype("<f4")


class VectorFile:
    """The matrix of a store (``store`` is a :class:`openmemory_local.store.Store`)."""

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

    # --- writing (inside store.write()) -------------------------------------------------

    def append(self, matrix: np.ndarray) -> int:
        """Append rows; return the first new row number. Call inside ``store.write()``."""
        matrix = np.ascontiguousarray(matrix, dtype=_DTYPE).reshape(-1, DIMS)
        name = self.current_name()
        rows = self.committed_rows()
        if not name or _size(self.path(name)) < rows * ROW_BYTES:
            self.rebuild()
            name, rows = self.current_name(), self.committed_rows()
        if len(matrix) == 0:
            return rows
        fd = self._fd(name)
        os.ftruncate(fd, rows * ROW_BYTES)  # drop rows of an append that never committed
        os.pwrite(fd, matrix.tobytes(), rows * ROW_BYTES)
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

    def rebuild(self) -> None:
        """Write every episode's embedding into a new file and point the store at it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        generation = int(self.store.get_meta("vectors_generation", "0")) + 1
        name = f"episodes-{generation}.f32"
        ids = []
        with open(self.path(name), "wb") as f:
            for episode_id, blob in self.store.conn.execute(
                "SELECT id, embedding FROM episodes ORDER BY id"
            ):
                if blob is None or len(blob) != ROW_BYTES:
                    blob = bytes(ROW_BYTES)
                f.write(blob)
                ids.append(episode_id)
        self.store.conn.executemany(
            "UPDATE episodes SET vec_row = ? WHERE id = ?", [(row, i) for row, i in enumerate(ids)]
        )
        self.store.set_meta("vectors_file", name)
        self.store.set_meta("vectors_generation", str(generation))
        self.store.set_counter("vec_rows", len(ids))
        self.store.set_counter("episode_epoch", self.store.counter("episode_epoch") + 1)

    def maybe_compact(self) -> bool:
        """Rebuild when stale rows dominate; return True if it did."""
        rows = self.committed_rows()
        live = self.store.conn.execute(
            "SELECT COUNT(*) FROM episodes WHERE vec_row IS NOT NULL"
        ).fetchone()[0]
        stale = rows - live
        config = self.store.config
        if stale >= config.vector_garbage_min and stale > config.vector_garbage_ratio * rows:
            self.rebuild()
            return True
        return False

    def remove_stale_files(self) -> None:
        """Delete matrix files other than the current one (open maps stay valid on POSIX)."""
        current = self.current_name()
        if not self.dir.is_dir():
            return
        for entry in self.dir.iterdir():
            if entry.suffix == ".f32" and entry.name != current:
                try:
                    entry.unlink()
                except OSError:
                    pass

    # --- reading --------------------------------------------------------------------------

    def map(self, name: str, rows: int) -> np.ndarray:
        """A read-only ``(rows, 256)`` map of the committed rows of file ``name``."""
        if rows == 0:
            return np.zeros((0, DIMS), dtype=_DTYPE)
        return np.memmap(self.path(name), dtype=_DTYPE, mode="r", shape=(rows, DIMS))


def validate(store, matrix: np.ndarray, sample: list[tuple[int, int]]) -> bool:
    """True if the mapped rows of ``sample`` ((episode id, row) pairs) equal the store's."""
    for episode_id, row in sample:
        got = store.conn.execute("SELECT embedding FROM episodes WHERE id = ?", (episode_id,)).fetchone()
        if got is None or row >= len(matrix):
            return False
        if np.frombuffer(got[0], dtype=_DTYPE).tobytes() != np.asarray(matrix[row]).tobytes():
            return False
    return True


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
