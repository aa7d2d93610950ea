"""The kept raw stream: one compressed, append-growing archive file per transcript.

Claude Code deletes transcripts after ``cleanupPeriodDays`` (30 by default); Open Memory
keeps a copy of every byte it read. The archive of a transcript is a sequence of gzip
members (RFC 1952 allows several in one file; ``gzip -dc`` and Python's ``gzip`` read them
as one stream), one member per ingest that found new bytes. Decompressed, the archive is
byte for byte the part of the original that was read (always ending at a complete line),
so a line number or byte offset means the same in both.

Layout: ``<home>/archive/<adapter>/<absolute path of the original>.gz``, for example
``archive/claude-code/home/me/.claude/projects/-home-me-app/3f2a….jsonl.gz``; the path of
the original is recoverable from the archive's own path, so the archive alone is enough to
rebuild every episode (``openmemory ingest --from-archive``).

When an original shrinks or its earlier bytes change, its archive is not overwritten: it
is renamed ``<name>.superseded-<UTC time>.gz`` beside it (kept, and ignored by rebuilds),
and a new archive starts.

Crash safety: a member is compressed first (in memory, or in ``<home>/tmp`` when large),
then appended inside
the store transaction that records the new archive size; an archive longer than its
recorded size (a process killed between the append and the commit) is truncated back to
the recorded size before the next append, and one shorter than recorded (a power loss
before the data reached the disk) is re-archived from the original. Durability matches
the store's (SQLite WAL, ``synchronous=NORMAL``): by default the archive is flushed to
disk once at the end of each ingest run (``Config.archive_sync``).
"""

from __future__ import annotations

import io
import os
import zlib
from pathlib import Path
from typing import Iterator

try:  # ISA-L: the same gzip format, several times faster than zlib
    from isal import isal_zlib as _fast_zlib
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    _fast_zlib = None

__all__ = [
    "ARCHIVE_ROOT",
    "SUPERSEDED",
    "archive_relpath",
    "original_path",
    "iter_archives",
    "MemberWriter",
    "ArchiveFile",
    "ArchiveReader",
    "read_line",
    "read_lines",
]

ARCHIVE_ROOT = "archive"
SUPERSEDED = ".superseded-"
_GZIP_WBITS = 31  # zlib: gzip header and trailer
_CHUNK = 1 << 20


def archive_relpath(adapter: str, original: Path) -> str:
    """The archive of ``original`` (absolute), relative to the data folder, POSIX form."""
    parts = Path(os.path.abspath(original)).parts[1:]  # drop the root "/"
    return "/".join((ARCHIVE_ROOT, adapter, *parts)) + ".gz"


def original_path(relpath: str) -> Path:
    """The original transcript path an archive path stands for (inverse of archive_relpath)."""
    parts = relpath.split("/")
    if len(parts) < 3 or parts[0] != ARCHIVE_ROOT or not relpath.endswith(".gz"):
        raise ValueError(f"not an archive path: {relpath!r}")
    inner = "/".join(parts[2:])[: -len(".gz")]
    return Path("/" + inner)


def iter_archives(home: Path, adapter: str) -> Iterator[str]:
    """Current (not superseded) archive files of ``adapter``, as relative paths, sorted."""
    root = home / ARCHIVE_ROOT / adapter
    if not root.is_dir():
        return
    found = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for name in filenames:
            if name.endswith(".gz") and SUPERSEDED not in name:
                found.append(Path(dirpath, name).relative_to(home).as_posix())
    yield from sorted(found)


class MemberWriter:
    """Compresses what one ingest read into a temporary file of gzip members.

    ``mark()`` ends the current member and remembers the position; ``rollback()`` cuts
    the file back to it (used when a line that was being read turns out to be incomplete
    at the end of the file). Every member is standard gzip, so the extra boundary a mark
    leaves is invisible to readers.
    """

    #: Compressed bytes kept in memory; a larger member spills to a file in ``tmp_dir``.
    SPILL = 8 << 20

    def __init__(self, tmp_dir: Path, level: int = 1):
        self._tmp_dir = tmp_dir
        self.path: Path | None = None  # set when the member spilled to a file
        self._file = io.BytesIO()
        self._level = level
        self._zip = _compressor(level)
        self._open = False  # bytes written to the current member
        self.raw_bytes = 0
        self._mark: tuple[int, int] | None = None

    def _spill(self) -> None:
        self._tmp_dir.mkdir(parents=True, exist_ok=True)
        fd, name = _mkstemp(self._tmp_dir)
        spilled = os.fdopen(fd, "w+b")
        spilled.write(self._file.getvalue())
        self._file = spilled
        self.path = Path(name)

    def write(self, data: bytes) -> None:
        if data:
            self._file.write(self._zip.compress(data))
            self.raw_bytes += len(data)
            self._open = True
            if self.path is None and self._file.tell() > self.SPILL:
                self._spill()

    def _end_member(self) -> None:
        if self._open:
            self._file.write(self._zip.flush())
            self._zip = _compressor(self._level)
            self._open = False

    def mark(self) -> None:
        self._end_member()
        self._file.flush()
        self._mark = (self._file.tell(), self.raw_bytes)

    def rollback(self) -> None:
        if self._mark is None:
            raise RuntimeError("rollback without mark")
        position, self.raw_bytes = self._mark
        self._zip = _compressor(self._level)
        self._open = False
        self._file.flush()
        self._file.seek(position)
        self._file.truncate()
        self._mark = None

    def finish(self) -> int:
        """End the last member; return the compressed size (0 if nothing was written)."""
        self._end_member()
        self._file.flush()
        return self._file.tell()

    def copy_to(self, out) -> None:
        """Write the finished member(s) to the binary file ``out``."""
        if self.path is None:
            out.write(self._file.getbuffer())
            return
        self._file.seek(0)
        while True:
            chunk = self._file.read(_CHUNK)
            if not chunk:
                break
            out.write(chunk)

    def detach(self) -> bytes | str | None:
        """Finish and hand the member over: its bytes, or the path of its spilled file
        (the caller then owns and deletes that file); None when nothing was written."""
        size = self.finish()
        if size == 0:
            self.discard()
            return None
        if self.path is None:
            data = self._file.getvalue()
            self._file.close()
            return data
        self._file.close()
        return str(self.path)

    def getvalue(self) -> bytes:
        buffer = io.BytesIO()
        self.copy_to(buffer)
        return buffer.getvalue()

    def discard(self) -> None:
        try:
            self._file.close()
        except (OSError, ValueError):
            pass
        if self.path is not None:
            try:
                self.path.unlink()
            except OSError:
                pass


def _compressor(level: int):
    """A raw gzip-member compressor: ISA-L when installed (levels 0-3), else zlib."""
    if _fast_zlib is not None:
        return _fast_zlib.compressobj(min(max(level, 0), 3), _fast_zlib.DEFLATED, _GZIP_WBITS)
    return zlib.compressobj(level, zlib.DEFLATED, _GZIP_WBITS)


def _mkstemp(tmp_dir: Path):
    import tempfile

    return tempfile.mkstemp(prefix="member-", suffix=".gz.part", dir=tmp_dir)


class ArchiveFile:
    """One transcript's archive on disk."""

    def __init__(self, home: Path, relpath: str):
        self.home = home
        self.relpath = relpath
        self.path = home / relpath

    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except FileNotFoundError:
            return 0

    def exists(self) -> bool:
        return self.path.is_file()

    def truncate_to(self, size: int) -> None:
        """Drop bytes beyond ``size`` (an append that was never committed)."""
        if self.size() > size:
            with open(self.path, "r+b") as f:
                f.truncate(size)
                f.flush()
                os.fsync(f.fileno())

    def append_member(self, member, *, fsync: bool = False) -> int:
        """Append finished member(s): a MemberWriter, bytes, or the path of a member file.
        Return the new archive size."""
        try:
            out = open(self.path, "ab")
        except FileNotFoundError:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            out = open(self.path, "ab")
        with out:
            if isinstance(member, MemberWriter):
                member.copy_to(out)
            elif isinstance(member, (bytes, bytearray, memoryview)):
                out.write(member)
            else:
                with open(member, "rb") as src:
                    while True:
                        chunk = src.read(_CHUNK)
                        if not chunk:
                            break
                        out.write(chunk)
            out.flush()
            if fsync:
                os.fsync(out.fileno())
            return out.tell()

    def supersede(self, stamp: str) -> str | None:
        """Rename the current archive aside (kept); return its new relative path."""
        if not self.exists():
            return None
        safe = stamp.replace(":", "").replace("-", "").replace(".", "")
        base = self.relpath[: -len(".gz")]
        target = f"{base}{SUPERSEDED}{safe}.gz"
        n = 1
        while (self.home / target).exists():
            n += 1
            target = f"{base}{SUPERSEDED}{safe}-{n}.gz"
        os.replace(self.path, self.home / target)
        return target

    def reader(self) -> "ArchiveReader":
        return ArchiveReader(self.path)


class ArchiveReader(io.RawIOBase):
    """The decompressed bytes of an archive, member after member, as a raw stream.

    Reading stops cleanly at a damaged or incomplete final member (``damaged`` is then
    True): everything before it is still delivered.
    """

    def __init__(self, path: Path):
        super().__init__()
        self._src = open(path, "rb")
        self._zip = zlib.decompressobj(_GZIP_WBITS)
        self._in_member = False
        self._pending = b""
        self._pos = 0
        self._eof = False
        self.damaged = False

    def readable(self) -> bool:
        return True

    def _fill(self) -> None:
        while self._pos >= len(self._pending) and not self._eof:
            self._pending, self._pos = b"", 0
            data = self._src.read(_CHUNK)
            if not data:
                # The file ended inside a member: a torn append, never committed.
                self.damaged = self._in_member
                self._eof = True
                return
            out = []
            while data:
                try:
                    out.append(self._zip.decompress(data))
                except zlib.error:
                    self.damaged = True
                    self._eof = True
                    break
                self._in_member = True
                if self._zip.eof:
                    data = self._zip.unused_data
                    self._zip = zlib.decompressobj(_GZIP_WBITS)
                    self._in_member = False
                else:
                    data = b""
            self._pending = b"".join(out)

    def readinto(self, buffer) -> int:
        self._fill()
        available = len(self._pending) - self._pos
        if available <= 0:
            return 0
        n = min(len(buffer), available)
        buffer[:n] = self._pending[self._pos : self._pos + n]
        self._pos += n
        return n

    def close(self) -> None:
        try:
            self._src.close()
        finally:
            super().close()


def read_lines(archive: ArchiveFile, first: int, last: int) -> dict[int, str]:
    """Lines ``first`` to ``last`` (1-based, inclusive) of an archived transcript, decoded
    (invalid UTF-8 replaced), without their line ends; fewer where the archive is shorter,
    none if it is gone."""
    out: dict[int, str] = {}
    if not archive.exists() or last < first:
        return out
    reader = archive.reader()
    try:
        stream = io.BufferedReader(reader, buffer_size=1 << 20)
        for i, line in enumerate(stream, 1):
            if i >= first:
                out[i] = line.decode("utf-8", "replace").rstrip("\n")
            if i >= last:
                break
    finally:
        reader.close()
    return out


def read_line(archive: ArchiveFile, number: int) -> str | None:
    """Line ``number`` (1-based) of an archived transcript (``openmemory show --raw``), or None."""
    return read_lines(archive, number, number).get(number)
