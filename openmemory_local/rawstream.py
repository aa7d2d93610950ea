"""Reading the raw stream: complete lines only, with offsets, fingerprints and a copy.

A transcript is append-only JSONL that may be in the middle of being written. The
:class:`LineReader` yields only complete lines (ending in ``\\n``); a last line without its
newline is left for the next run, and the reader's ``offset`` always stops at the end of
the last complete line. A line longer than ``max_line_bytes`` is never held in memory: it
is skipped in chunks and reported as oversized (its bytes still go to the archive, which
keeps the raw stream whole).

Every consumed byte goes through a :class:`Consumed` sink, which computes the fingerprints
stored with the transcript (head, tail and chained content hashes) and, when ingesting
from an original, writes the archive member.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import BinaryIO, Iterator

from .archive import MemberWriter

__all__ = ["HEAD_BYTES", "TAIL_BYTES", "Line", "Consumed", "LineReader", "chain_hash"]

HEAD_BYTES = 64 * 1024
TAIL_BYTES = 4 * 1024
_FLUSH = 1 << 20
_SKIP_CHUNK = 1 << 20


def chain_hash(previous: str | None, chunk_digest: bytes) -> str:
    """``sha256(previous + sha256(chunk))``: the content hash after one more chunk."""
    seed = bytes.fromhex(previous) if previous else b""
    return hashlib.sha256(seed + chunk_digest).hexdigest()


@dataclass(slots=True)
class Line:
    """One complete line: 1-based ``number``, byte ``offset`` of its start, and ``data``
    (``None`` for an oversized line, whose length is ``size``)."""

    number: int
    offset: int
    data: bytes | None
    size: int


class Consumed:
    """Everything read in one run, in order: hashes, head and tail, and the archive copy.

    ``head`` is pre-seeded with the first bytes of the file (up to 64 KiB) and ``tail``
    with the bytes just before the starting offset, both read when the stored
    fingerprints were checked.
    """

    def __init__(self, head: bytes = b"", tail: bytes = b"", member: MemberWriter | None = None):
        self._head = bytearray(head[:HEAD_BYTES])
        self._tail = bytes(tail[-TAIL_BYTES:])
        self._member = member
        self._hash = hashlib.sha256()
        self._buffer: list[bytes] = []
        self._buffered = 0
        self.bytes = 0
        self._mark: tuple | None = None

    def feed(self, data: bytes) -> None:
        self._buffer.append(data)
        self._buffered += len(data)
        self.bytes += len(data)
        if self._buffered >= _FLUSH:
            self._flush()

    def _flush(self) -> None:
        if not self._buffer:
            return
        data = b"".join(self._buffer)
        self._buffer.clear()
        self._buffered = 0
        self._hash.update(data)
        if self._member is not None:
            self._member.write(data)
        if len(self._head) < HEAD_BYTES:
            self._head += data[: HEAD_BYTES - len(self._head)]
        self._tail = (self._tail + data[-TAIL_BYTES:])[-TAIL_BYTES:]

    def mark(self) -> None:
        self._flush()
        if self._member is not None:
            self._member.mark()
        self._mark = (self._hash.copy(), len(self._head), self._tail, self.bytes)

    def rollback(self) -> None:
        self._buffer.clear()
        self._buffered = 0
        self._hash, head_len, self._tail, self.bytes = self._mark
        del self._head[head_len:]
        if self._member is not None:
            self._member.rollback()
        self._mark = None

    def finish(self) -> None:
        self._flush()

    @property
    def head_hash(self) -> str:
        return hashlib.sha256(bytes(self._head)).hexdigest()

    @property
    def tail_hash(self) -> str:
        return hashlib.sha256(self._tail).hexdigest()

    def content_hash(self, previous: str | None) -> str:
        return chain_hash(previous, self._hash.digest()) if self.bytes else (previous or "")


class LineReader:
    """Iterate the complete lines of ``stream`` from ``offset`` (line ``line`` + 1 next).

    After iteration ``offset``/``line`` are the position after the last complete line,
    and ``incomplete`` is True when bytes were left unread at the end.
    """

    def __init__(
        self,
        stream: BinaryIO,
        sink: Consumed,
        *,
        offset: int = 0,
        line: int = 0,
        max_line_bytes: int,
    ):
        self.stream = stream
        self.sink = sink
        self.offset = offset
        self.line = line
        self.max_line_bytes = max_line_bytes
        self.incomplete = False

    def __iter__(self) -> Iterator[Line]:
        readline = self.stream.readline
        limit = self.max_line_bytes + 1
        feed = self.sink.feed
        while True:
            data = readline(limit)
            if not data:
                return
            if data[-1:] == b"\n":
                feed(data)
                self.line += 1
                start = self.offset
                self.offset += len(data)
                yield Line(self.line, start, data, len(data))
                continue
            if len(data) < limit:
                self.incomplete = True  # the writer has not finished this line yet
                return
            size = self._skip_oversized(data)
            if size is None:
                self.incomplete = True
                return
            self.line += 1
            start = self.offset
            self.offset += size
            yield Line(self.line, start, None, size)

    def _skip_oversized(self, first: bytes) -> int | None:
        """Consume the rest of an oversized line; None (nothing consumed) if it never ends."""
        self.sink.mark()
        self.sink.feed(first)
        size = len(first)
        while True:
            chunk = self.stream.readline(_SKIP_CHUNK)
            if not chunk:
                self.sink.rollback()
                return None
            self.sink.feed(chunk)
            size += len(chunk)
            if chunk[-1:] == b"\n":
                return size
