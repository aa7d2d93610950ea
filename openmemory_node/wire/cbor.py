"""Strict deterministic CBOR for the v1 data model (RFC 8949 section 4.2.1).

Decoding is in two steps. :func:`scan` walks the raw bytes first, with no allocation beyond
the input and a recursion depth of at most ``MAX_NESTING``, and rejects anything outside the
v1 data model: unsigned and negative integers, byte strings, text strings, arrays, maps, false
and true, each with the shortest head, definite lengths only, map keys in strictly increasing
bytewise order of their encodings (so no duplicates), no trailing bytes. Only bytes that pass
are handed to cbor2, so cbor2 never sees a tag, a float, an indefinite length or a length
larger than the input. Then :func:`loads` re-encodes what cbor2 decoded and rejects the input
unless the bytes are identical: whatever the scan might have missed, a record has exactly one
encoding.

:func:`loads_record`, what the node's decoding uses, is faster for the shape of every v1 record:
one pass that applies those rules as it decodes (so it needs no re-encoding), anything else
handed to the two steps above. This is the one decoder: every node runs this code.
"""

from __future__ import annotations

from typing import Any

import cbor2

from .errors import WireError
from .limits import MAX_NESTING

__all__ = ["scan", "loads", "loads_with_spans", "loads_record", "dumps", "without_entry"]

_SIMPLE_NAMES = {0xF4: "false", 0xF5: "true", 0xF6: "null", 0xF7: "undefined"}


def _bad(message: str) -> WireError:
    return WireError("encoding", message)


def _item(data: bytes, pos: int, end: int, depth: int) -> int:
    """Check one data item starting at ``pos``; return the offset just after it."""
    if pos >= end:
        raise _bad(f"truncated: a data item was expected at offset {pos}")
    initial = data[pos]
    # Fast paths for the commonest items: a small unsigned integer, a string whose length fits
    # in the initial byte (every map key, most text). The general code below gives the same
    # answer for them, only slower.
    if initial < 0x18:
        return pos + 1
    if 0x40 <= initial <= 0x57 or 0x60 <= initial <= 0x77:
        stop = pos + 1 + (initial & 0x1F)
        if stop > end:
            raise _bad(f"truncated: the string at offset {pos} claims {initial & 0x1F} bytes")
        return stop
    major = initial >> 5
    info = initial & 0x1F
    start = pos
    pos += 1
    if major == 7:
        if initial == 0xF4 or initial == 0xF5:
            return pos
        if 25 <= info <= 27:
            raise _bad(f"a floating-point number at offset {start}: the wire carries no floats")
        if initial == 0xFF:
            raise _bad(f"a 'break' byte at offset {start} outside an indefinite-length item")
        name = _SIMPLE_NAMES.get(initial, "a simple value")
        raise _bad(f"{name} at offset {start}: only false and true are allowed")
    if major == 6:
        raise _bad(f"a tag at offset {start}: tags are not allowed")
    if info < 24:
        arg = info
    elif info <= 27:
        width = 1 << (info - 24)
        if pos + width > end:
            raise _bad(f"truncated: the head at offset {start} needs {width} more bytes")
        arg = int.from_bytes(data[pos : pos + width], "big")
        pos += width
        if arg < (24 if width == 1 else 1 << (4 * width)):
            raise _bad(f"a non-shortest head at offset {start}: {arg} fits in a shorter form")
    elif info == 31:
        raise _bad(f"an indefinite length at offset {start}: lengths must be definite")
    else:
        raise _bad(f"a reserved additional-information value {info} at offset {start}")
    if major <= 1:
        return pos
    if major <= 3:
        if arg > end - pos:
            raise _bad(f"truncated: the string at offset {start} claims {arg} bytes")
        return pos + arg
    if depth >= MAX_NESTING:
        raise _bad(f"a container at offset {start} nests deeper than {MAX_NESTING}")
    if major == 4:
        if arg > end - pos:  # every item takes at least one byte
            raise _bad(f"truncated: the array at offset {start} claims {arg} items")
        for _ in range(arg):
            pos = _item(data, pos, end, depth + 1)
        return pos
    # major == 5, a map
    if 2 * arg > end - pos:
        raise _bad(f"truncated: the map at offset {start} claims {arg} entries")
    return _entries(data, pos, end, arg, depth + 1, None)


def _entries(data: bytes, pos: int, end: int, count: int, depth: int, spans: dict | None) -> int:
    """Check ``count`` map entries from ``pos``: keys strictly increasing bytewise (so unique).
    With ``spans``, record each entry's (start, end) offsets under its encoded key."""
    previous = b""
    for index in range(count):
        key_start = pos
        pos = _item(data, pos, end, depth)
        key = data[key_start:pos]
        if index and key <= previous:
            what = "a duplicate" if key == previous else "an unsorted"
            raise _bad(
                f"{what} map key at offset {key_start}: keys must be unique and sorted "
                "bytewise by their encoding"
            )
        previous = key
        pos = _item(data, pos, end, depth)
        if spans is not None:
            spans[key] = (key_start, pos)
    return pos


def scan(data: bytes) -> dict[bytes, tuple[int, int]] | None:
    """Raise WireError("encoding") unless ``data`` is one deterministic v1 data item.

    When the item is a map of at most 23 entries (a one-byte head, as every v1 record), return
    its entries' byte spans: encoded key -> (offset of the key, offset after the value).
    """
    end = len(data)
    if end == 0:
        raise _bad("no bytes")
    head = data[0]
    if 0xA0 <= head <= 0xB7:
        count = head - 0xA0
        if 2 * count > end - 1:
            raise _bad(f"truncated: the map at offset 0 claims {count} entries")
        spans: dict[bytes, tuple[int, int]] | None = {}
        pos = _entries(data, 1, end, count, 1, spans)
    else:
        spans = None
        pos = _item(data, 0, end, 0)
    if pos != end:
        raise _bad(f"{end - pos} trailing bytes after the data item")
    return spans


def dumps(value: Any) -> bytes:
    """The deterministic encoding of ``value`` (cbor2, canonical)."""
    return cbor2.dumps(value, canonical=True)


def loads(data: bytes) -> Any:
    """Decode ``data`` strictly: scan, decode with cbor2, re-encode, compare."""
    return loads_with_spans(data)[0]


def loads_with_spans(data: bytes) -> tuple[Any, dict[bytes, tuple[int, int]] | None]:
    """:func:`loads`, also returning the top-level map's entry spans (see :func:`scan`)."""
    spans = scan(data)
    try:
        value = cbor2.loads(data)
    except (cbor2.CBORError, ValueError, TypeError, UnicodeError, OverflowError, RecursionError) as exc:
        raise _bad(f"undecodable: {exc}") from None
    if dumps(value) != data:
        raise _bad("the bytes are not the deterministic encoding of what they decode to")
    return value, spans


_UINT_WIDTH = {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}
_UINT_MIN = {1: 24, 2: 256, 4: 65536, 8: 1 << 32}


def _fast_item(data: bytes, pos: int, end: int, depth: int) -> tuple[Any, int] | None:
    """One item of the common shapes (see :func:`loads_record`) decoded, with the offset after
    it; None for anything else (the caller then takes the general path)."""
    initial = data[pos]
    if initial < 0x18:
        return initial, pos + 1
    if initial < 0x1C:
        width = _UINT_WIDTH[initial]
        stop = pos + 1 + width
        if stop > end:
            return None
        value = int.from_bytes(data[pos + 1:stop], "big")
        return (value, stop) if value >= _UINT_MIN[width] else None
    major = initial >> 5
    if major == 2 or major == 3:
        info = initial & 0x1F
        start = pos + 1
        if info < 24:
            length = info
        elif info == 24:
            if start >= end or data[start] < 24:
                return None
            length = data[start]
            start += 1
        elif info == 25:
            if start + 2 > end:
                return None
            length = (data[start] << 8) | data[start + 1]
            if length < 256:
                return None
            start += 2
        else:
            return None
        stop = start + length
        if stop > end:
            return None
        if major == 2:
            return data[start:stop], stop
        try:
            return data[start:stop].decode("utf-8"), stop
        except UnicodeDecodeError:
            return None
    if initial == 0xF4:
        return False, pos + 1
    if initial == 0xF5:
        return True, pos + 1
    if depth >= MAX_NESTING:
        return None
    if 0x80 <= initial <= 0x97:  # a short array
        items = []
        pos += 1
        for _ in range(initial - 0x80):
            if pos >= end:
                return None
            got = _fast_item(data, pos, end, depth + 1)
            if got is None:
                return None
            items.append(got[0])
            pos = got[1]
        return items, pos
    if 0xA0 <= initial <= 0xB7:  # a short map
        got = _fast_map(data, pos + 1, end, initial - 0xA0, depth + 1, None)
        return None if got is None else (got[0], got[1])
    return None


#: The names of map keys already seen, by their encoding (a record's keys are a few dozen).
_KEY_NAMES: dict[bytes, str] = {}


def _fast_map(data: bytes, pos: int, end: int, count: int, depth: int,
              spans: dict | None) -> tuple[dict, int] | None:
    out: dict[str, Any] = {}
    previous = b""
    for _ in range(count):
        if pos >= end:
            return None
        head = data[pos]
        if not 0x60 <= head <= 0x77:  # keys: short text strings only
            return None
        key_start = pos
        pos += head - 0x5F
        key = data[key_start:pos]
        if key <= previous or pos >= end:  # unsorted, duplicate, truncated: the general path says
            return None
        previous = key
        name = _KEY_NAMES.get(key)
        if name is None:
            try:
                name = key[1:].decode("utf-8")
            except UnicodeDecodeError:
                return None
            if len(_KEY_NAMES) < 256:
                _KEY_NAMES[key] = name
        # the commonest values inline (each as _fast_item would decode it): a small integer, a
        # byte string of 24 to 255 bytes, a text string of up to 255 bytes, a 2- or 4-byte integer
        head = data[pos]
        if head < 0x18:
            out[name] = head
            pos += 1
        elif head == 0x58 and pos + 1 < end and data[pos + 1] >= 24:
            stop = pos + 2 + data[pos + 1]
            if stop > end:
                return None
            out[name] = data[pos + 2:stop]
            pos = stop
        elif 0x60 <= head <= 0x78:
            if head == 0x78:
                if pos + 1 >= end or data[pos + 1] < 24:
                    return None
                start = pos + 2
                stop = start + data[pos + 1]
            else:
                start = pos + 1
                stop = start + head - 0x60
            if stop > end:
                return None
            try:
                out[name] = data[start:stop].decode("utf-8")
            except UnicodeDecodeError:
                return None
            pos = stop
        elif head == 0x1A or head == 0x19:
            stop = pos + (5 if head == 0x1A else 3)
            if stop > end:
                return None
            value = int.from_bytes(data[pos + 1:stop], "big")
            if value < (65536 if head == 0x1A else 256):
                return None
            out[name] = value
            pos = stop
        else:
            got = _fast_item(data, pos, end, depth)
            if got is None:
                return None
            out[name], pos = got
        if spans is not None:
            spans[key] = (key_start, pos)
    return out, pos


def loads_record(data: bytes) -> tuple[Any, dict[bytes, tuple[int, int]] | None]:
    """:func:`loads_with_spans`, faster for the shape of every v1 record: a map of at most 23
    entries with short text keys, whose values are integers, byte and text strings, booleans,
    and arrays or maps of those. Such bytes are decoded in one pass that applies the scan's
    rules (shortest heads, definite lengths, keys strictly increasing bytewise, nesting, no
    trailing bytes); cbor2 never decodes them. Anything else (and anything refused) takes
    :func:`loads_with_spans`, so the answer, and the error, are always the general path's.

    The general path re-encodes what it decoded and compares; this one need not: within that
    shape, the rules it applies leave each value exactly one encoding (shortest heads for every
    integer and length, keys in strictly increasing bytewise order, which for short text keys is
    the canonical order, UTF-8 decoded strictly), so re-encoding gives the input back. The
    property tests check it: the same value (types included), spans or refusal as the general
    path at every structural byte, every cut and on random CBOR (tests/wire/test_wire_properties.py)."""
    got = _fast_record(data)
    return got if got is not None else loads_with_spans(data)


def _fast_record(data: bytes) -> tuple[dict, dict[bytes, tuple[int, int]]] | None:
    """The one pass of :func:`loads_record`: (value, spans), or None for the general path."""
    end = len(data)
    if end:
        head = data[0]
        if 0xA0 <= head <= 0xB7:
            spans: dict[bytes, tuple[int, int]] = {}
            got = _fast_map(data, 1, end, head - 0xA0, 1, spans)
            if got is not None and got[1] == end:
                return got[0], spans
    return None


def without_entry(data: bytes, spans: dict[bytes, tuple[int, int]], key: bytes, prefix: bytes = b"") -> bytes:
    """The encoding of the map ``data`` with the entry ``key`` removed, by cutting the bytes
    (after ``prefix``: the signed message is a domain, then the record without its signature).

    ``data`` must be canonical with a one-byte head (as :func:`scan` returned spans for it):
    removing an entry then leaves the other entries' bytes and order unchanged, and the head
    counts one entry less. Equal to re-encoding the map without the entry, and cheaper.
    """
    start, stop = spans[key]
    return prefix + bytes((data[0] - 1,)) + data[1:start] + data[stop:]
