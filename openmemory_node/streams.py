"""What every request/response stream protocol of the node shares.

A protocol is a :class:`StreamProtocol`: an id, a server ``handle(stream, peer)`` and,
optionally, a background ``run()``. The daemon registers every protocol in its list with the
host and starts their background tasks in its nursery: adding ``/openmemory/sync/1.0.0``
is one more class here and one more entry in that list.

Frames are unsigned-varint length-prefixed byte strings (the libp2p convention); every read
has a size limit and a deadline, and every failure (short read, oversized frame, bad
varint, reset, timeout) is one exception, :class:`FrameError`.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import trio
from libp2p.utils.varint import encode_uvarint, read_varint_prefixed_bytes_limited

log = logging.getLogger(__name__)


class FrameError(Exception):
    """A stream broke its framing, its limits or its deadline."""


class StreamProtocol(Protocol):
    protocol_id: str

    async def handle(self, stream: Any, peer: str) -> None:
        """Serve one inbound stream from ``peer`` (errors are contained by the caller)."""

    async def run(self) -> None:
        """Background work for the life of the daemon (may return at once)."""


def frame(payload: bytes) -> bytes:
    return encode_uvarint(len(payload)) + payload


async def read_frame(stream: Any, max_bytes: int, timeout: float) -> bytes | None:
    """Read one frame; None on a clean end of stream before the first byte."""
    with trio.move_on_after(timeout) as scope:
        first = await _read_some(stream, 1)
        if not first:
            return None
        try:
            return await read_varint_prefixed_bytes_limited(
                _Prepend(first, stream), max_bytes
            )
        except Exception as exc:
            raise FrameError(f"{type(exc).__name__}: {exc}") from None
    if scope.cancelled_caught:
        raise FrameError(f"no complete frame within {timeout:g} s")
    return None  # pragma: no cover


async def _read_some(stream: Any, n: int) -> bytes:
    """``stream.read(n)``; b"" at the end of the stream; FrameError for any other failure."""
    try:
        return await stream.read(n)
    except Exception as exc:
        if type(exc).__name__ in ("StreamEOF", "MuxedStreamEOF"):
            return b""
        raise FrameError(f"read failed: {type(exc).__name__}: {exc}") from None


class FrameReader:
    """The frames of one stream, read through a buffer: each read of the stream takes whatever
    has arrived (up to ``chunk`` bytes), so a burst of small frames (a sync answer: one frame
    per record) costs one read of the stream, not two or three per frame, nor a window update
    each. Same limits and errors as :func:`read_frame`: a frame over ``max_bytes`` is refused
    as soon as its length prefix is read; the buffer never holds more than one frame and one
    chunk."""

    def __init__(self, stream: Any, max_bytes: int, chunk: int = 65536):
        self.stream = stream
        self.max_bytes = max_bytes
        self.chunk = chunk
        self._buffer = b""
        self._pos = 0  # where the unread bytes of _buffer start

    async def read(self, timeout: float) -> bytes | None:
        """The next frame's payload; None on a clean end of stream between frames."""
        payload = self._parse()  # a frame already in the buffer (most of a burst's): no timer to set
        if payload is not None:
            return payload
        with trio.move_on_after(timeout) as scope:
            while True:
                payload = self._parse()
                if payload is not None:
                    return payload
                if not await self._fill():
                    if self._pos >= len(self._buffer):
                        return None
                    raise FrameError(f"IncompleteReadError: the stream ended within a frame "
                                     f"({len(self._buffer) - self._pos} bytes of it read)")
        if scope.cancelled_caught:
            raise FrameError(f"no complete frame within {timeout:g} s")
        return None  # pragma: no cover

    def _parse(self) -> bytes | None:
        buf, pos = self._buffer, self._pos
        end = len(buf)
        value = shift = 0
        i = pos
        while i < end:
            byte = buf[i]
            value |= (byte & 0x7F) << shift
            i += 1
            if byte < 0x80:
                if value > self.max_bytes:
                    raise FrameError(f"MessageTooLarge: Message length {value} exceeds maximum allowed "
                                     f"{self.max_bytes}")
                stop = i + value
                if stop > end:
                    return None
                self._pos = stop
                return buf[i:stop]
            shift += 7
            if shift >= 70:
                raise FrameError("ParseError: a varint length prefix longer than 10 bytes")
        return None

    async def _fill(self) -> bool:
        data = await _read_some(self.stream, self.chunk)
        if not data:
            return False
        rest = self._buffer[self._pos:]
        self._buffer = rest + data if rest else bytes(data)
        self._pos = 0
        return True


async def read_exact(stream: Any, n: int, timeout: float) -> bytes:
    out = bytearray()
    with trio.move_on_after(timeout) as scope:
        while len(out) < n:
            try:
                chunk = await stream.read(n - len(out))
            except Exception as exc:
                raise FrameError(f"read failed: {type(exc).__name__}: {exc}") from None
            if not chunk:
                raise FrameError(f"stream ended after {len(out)} of {n} bytes")
            out.extend(chunk)
    if scope.cancelled_caught:
        raise FrameError(f"no {n} bytes within {timeout:g} s")
    return bytes(out)


class _Prepend:
    """A reader that yields ``head`` before reading on from ``stream``."""

    def __init__(self, head: bytes, stream: Any):
        self.head = head
        self.stream = stream

    async def read(self, n: int | None = None) -> bytes:
        if self.head:
            if n is None or n >= len(self.head):
                out, self.head = self.head, b""
            else:
                out, self.head = self.head[:n], self.head[n:]
            return out
        try:
            return await self.stream.read(n)
        except Exception as exc:
            if type(exc).__name__ in ("StreamEOF", "MuxedStreamEOF"):
                return b""
            raise


async def close_quietly(stream: Any, reset: bool = False) -> None:
    with trio.move_on_after(1) as scope:
        scope.shield = True
        try:
            if reset:
                await stream.reset()
            else:
                await stream.close()
        except Exception:
            pass
