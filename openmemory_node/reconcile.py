"""Range-based set reconciliation over sorted record ids: the core of ``/openmemory/sync/1.0.0``.

Sans-I/O: messages are bytes in, bytes out; nothing here touches a stream, a clock or the
store. The scheme is Aljoscha Meyer's range-based set reconciliation, in the form Negentropy
made practical: both sides sort their ids; a message is a list of consecutive ranges that
cover the whole id space, each carrying either nothing (SKIP: agreed), a fingerprint of the
sender's ids in the range, or the sender's ids themselves. The receiver compares each range
with its own ids and answers range by range: agreed ranges are skipped, differing ones are
split into ``branching`` sub-ranges with their fingerprints, small ones are settled by sending
the ids. After O(log n) rounds the *initiator* knows every id the other side has that it
lacks (``need``). The *responder* keeps no state between messages, so serving is cheap and
any message can be answered on its own.

Wire form of a message (PROTOCOL.md, "Sync"), ranges until the end of the message::

    range  = bound mode payload
    bound  = 0xFF                 the end of the id space (the last range's bound, only)
           | len(1 byte, 1..34) bytes   the range holds ids >= the previous bound and < this
                                        (a bound never begins with 0xFF)
    mode   = 0x00 SKIP            no payload
           | 0x01 FINGERPRINT     16 bytes
           | 0x02 IDLIST          varint n, then n ids (34 bytes each, ascending, in the range)
           | 0x03 MISSING         as IDLIST: responder only, "the ids I have that your list lacks"

The fingerprint of a set of ids is the first 16 bytes of
``SHA-256(sum mod 2**256 of the ids' 32 digest bytes read as little-endian integers ||
varint(count))``: order-independent, cheap to compute for any range from prefix sums, and not
open to the linear-algebra collisions an XOR fingerprint allows.

Every message is checked strictly on receipt (:class:`SyncError` with a stable code): bounds
strictly ascending and the last one 0xFF, known modes, ids well-formed, ascending and inside
their range, no trailing bytes, at most ``max_ranges`` ranges and ``max_receive_bytes`` bytes.
Outgoing messages are at most ``max_message_bytes``: each answer is written only if the message
keeps 18 bytes of room for a final FINGERPRINT range (no room needed for the answer that ends
the message); when one does not fit, the rest of the id space is sent as that single
fingerprint and reconciled in the next round (progress is made on a prefix each round).
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass
from typing import Iterable, Iterator

ID_BYTES = 34
ID_PREFIX = b"\x12\x20"  # sha2-256 multihash
FINGERPRINT_BYTES = 16
INFINITY = b"\xff"  # compares above every id (they start with 0x12)
_INF_TAG = 0xFF

SKIP, FINGERPRINT, IDLIST, MISSING = 0, 1, 2, 3
MODE_NAMES = {SKIP: "skip", FINGERPRINT: "fingerprint", IDLIST: "idlist", MISSING: "missing"}
_MOD = 1 << 256


class SyncError(Exception):
    """A message broke the reconciliation protocol. ``code`` is stable (PROTOCOL.md)."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# -- varints (unsigned LEB128, minimal) --------------------------------------------------------

def encode_varint(n: int) -> bytes:
    if n < 0:
        raise ValueError("a varint is unsigned")
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def decode_varint(data: bytes, pos: int, limit: int = 1 << 32) -> tuple[int, int]:
    """(value, next position); minimal encoding only, at most ``limit``."""
    value = shift = 0
    start = pos
    while True:
        if pos >= len(data):
            raise SyncError("bad-message", "truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 35:
            raise SyncError("bad-message", "varint too long")
    if pos - start > 1 and byte == 0:
        raise SyncError("bad-message", "varint not in its shortest form")
    if value > limit:
        raise SyncError("bad-message", f"count {value} exceeds {limit}")
    return value, pos


# -- the id set -----------------------------------------------------------------------------------

def _value(id_: bytes) -> int:
    return int.from_bytes(id_[-32:], "little")


class IdSet:
    """Sorted unique record ids with prefix sums for O(1) range fingerprints.

    Adding keeps the list sorted (O(n) memmove, fast in practice); the prefix sums are rebuilt
    lazily, once per batch of additions, when a fingerprint is next asked for."""

    def __init__(self, ids: Iterable[bytes] = ()):
        self._ids: list[bytes] = sorted(set(ids))
        self._prefix: list[int] | None = None

    def add(self, id_: bytes) -> bool:
        at = bisect.bisect_left(self._ids, id_)
        if at < len(self._ids) and self._ids[at] == id_:
            return False
        self._ids.insert(at, id_)
        self._prefix = None
        return True

    def discard(self, id_: bytes) -> bool:
        at = bisect.bisect_left(self._ids, id_)
        if at < len(self._ids) and self._ids[at] == id_:
            del self._ids[at]
            self._prefix = None
            return True
        return False

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, id_: object) -> bool:
        at = bisect.bisect_left(self._ids, id_)  # type: ignore[arg-type]
        return at < len(self._ids) and self._ids[at] == id_

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._ids)

    def index(self, bound: bytes) -> int:
        """The number of ids below ``bound``."""
        if bound == INFINITY:
            return len(self._ids)
        return bisect.bisect_left(self._ids, bound)

    def ids(self, lo: int, hi: int) -> list[bytes]:
        return self._ids[lo:hi]

    def at(self, i: int) -> bytes:
        return self._ids[i]

    def fingerprint(self, lo: int, hi: int) -> bytes:
        if self._prefix is None:
            prefix = [0]
            total = 0
            for id_ in self._ids:
                total += _value(id_)
                prefix.append(total)
            self._prefix = prefix
        total = (self._prefix[hi] - self._prefix[lo]) % _MOD
        return fingerprint_of(total, hi - lo)


def fingerprint_of(total: int, count: int) -> bytes:
    return hashlib.sha256(total.to_bytes(32, "little") + encode_varint(count)).digest()[:FINGERPRINT_BYTES]


def fingerprint(ids: Iterable[bytes]) -> bytes:
    """The fingerprint of a set of ids, from scratch (the definition; tests use it)."""
    ids = set(ids)
    return fingerprint_of(sum(_value(i) for i in ids) % _MOD, len(ids))


# -- messages ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Range:
    bound: bytes  # INFINITY for the last range
    mode: int
    fingerprint: bytes = b""
    ids: tuple[bytes, ...] = ()


def encode_bound(bound: bytes) -> bytes:
    if bound == INFINITY:
        return bytes([_INF_TAG])
    if len(bound) > ID_BYTES:
        raise ValueError("a bound is at most an id long")
    return bytes([len(bound)]) + bound


def encode_range(r: Range) -> bytes:
    out = encode_bound(r.bound) + bytes([r.mode])
    if r.mode == FINGERPRINT:
        out += r.fingerprint
    elif r.mode in (IDLIST, MISSING):
        out += encode_varint(len(r.ids)) + b"".join(r.ids)
    return out


def encode_message(ranges: Iterable[Range]) -> bytes:
    return b"".join(encode_range(r) for r in ranges)


def decode_message(data: bytes, *, max_ranges: int, allow_missing: bool,
                   max_bytes: int | None = None) -> list[Range]:
    """Parse and check one message (see the module docstring); raises SyncError."""
    if max_bytes is not None and len(data) > max_bytes:
        raise SyncError("bad-message", f"a message of {len(data)} bytes, over {max_bytes}")
    ranges: list[Range] = []
    pos = 0
    previous = b""
    while pos < len(data):
        if len(ranges) >= max_ranges:
            raise SyncError("too-many-ranges", f"more than {max_ranges} ranges in one message")
        if previous == INFINITY:
            raise SyncError("bad-message", "a range after the end of the id space")
        tag = data[pos]
        pos += 1
        if tag == _INF_TAG:
            bound = INFINITY
        else:
            if tag > ID_BYTES:
                raise SyncError("bad-message", f"a bound of {tag} bytes")
            if pos + tag > len(data):
                raise SyncError("bad-message", "truncated bound")
            bound = data[pos:pos + tag]
            pos += tag
            if bound >= INFINITY:
                raise SyncError("bad-message", "a bound at or above the end of the id space")
        if bound <= previous:
            raise SyncError("bad-message", "bounds must ascend strictly")
        if pos >= len(data):
            raise SyncError("bad-message", "truncated range: no mode")
        mode = data[pos]
        pos += 1
        if mode == SKIP:
            ranges.append(Range(bound, SKIP))
        elif mode == FINGERPRINT:
            if pos + FINGERPRINT_BYTES > len(data):
                raise SyncError("bad-message", "truncated fingerprint")
            ranges.append(Range(bound, FINGERPRINT, data[pos:pos + FINGERPRINT_BYTES]))
            pos += FINGERPRINT_BYTES
        elif mode in (IDLIST, MISSING):
            if mode == MISSING and not allow_missing:
                raise SyncError("bad-message", "MISSING is the responder's answer only")
            count, pos = decode_varint(data, pos, limit=(len(data) - pos) // ID_BYTES)
            if pos + count * ID_BYTES > len(data):  # the limit above still counted the varint
                raise SyncError("bad-message", "truncated id list")
            ids = []
            last = previous
            for _ in range(count):
                id_ = data[pos:pos + ID_BYTES]
                pos += ID_BYTES
                if id_[:2] != ID_PREFIX:
                    raise SyncError("bad-message", "an id that is not a sha2-256 multihash")
                if id_ < last or (ids and id_ == last):
                    raise SyncError("bad-message", "ids must ascend strictly")
                if id_ >= bound:
                    raise SyncError("bad-message", "an id outside its range")
                ids.append(id_)
                last = id_
            ranges.append(Range(bound, mode, ids=tuple(ids)))
        else:
            raise SyncError("bad-message", f"unknown mode {mode}")
        previous = bound
    if previous != INFINITY:
        raise SyncError("bad-message", "the ranges do not reach the end of the id space")
    return ranges


# -- the two roles ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Params:
    branching: int = 16  # sub-ranges per split
    idlist_threshold: int = 16  # a range with at most this many ids is sent as ids
    max_message_bytes: int = 60_000  # what we send (the receiving limit is larger)
    max_ranges: int = 8192  # accepted per message
    max_receive_bytes: int = 131_072  # the longest message accepted

    def __post_init__(self) -> None:
        if self.branching < 2 or self.idlist_threshold < 1 or self.max_message_bytes < 4096:
            raise ValueError("branching >= 2, idlist_threshold >= 1, max_message_bytes >= 4096")


#: The room every message keeps for a final ``0xFF FINGERPRINT <16 bytes>`` range.
FINAL_RANGE_BYTES = 1 + 1 + FINGERPRINT_BYTES


def _split_bound(before: bytes, after: bytes) -> bytes:
    """The shortest prefix of ``after`` that is above ``before`` (before < after)."""
    for n in range(1, len(after) + 1):
        if after[:n] > before:
            return after[:n]
    return after  # pragma: no cover - after > before guarantees a prefix above it


class _Writer:
    """An outgoing message under construction, within a byte budget (PROTOCOL.md, "Sync"):
    an answer is written only if the message with it is at most ``budget - 18`` bytes (the
    room for a final FINGERPRINT range), or at most ``budget`` for the answer that ends the
    message (to the range whose bound is 0xFF)."""

    def __init__(self, budget: int):
        self.budget = budget
        self.ranges: list[Range] = []
        self.size = 0

    def _size_with(self, answer: list[Range]) -> int:
        size = self.size
        skip = self.ranges[-1].bound if self.ranges and self.ranges[-1].mode == SKIP else None
        for r in answer:
            if r.mode == SKIP and skip is not None:  # merges with the SKIP before it
                size += len(encode_bound(r.bound)) - len(encode_bound(skip))
            else:
                size += len(encode_range(r))
            skip = r.bound if r.mode == SKIP else None
        return size

    def write(self, answer: list[Range], *, final: bool) -> bool:
        """Append ``answer`` if it fits (see the class); False, and nothing written, if not."""
        if self._size_with(answer) > self.budget - (0 if final else FINAL_RANGE_BYTES):
            return False
        for r in answer:
            self.add(r)
        return True

    def add(self, r: Range) -> None:
        if r.mode == SKIP and self.ranges and self.ranges[-1].mode == SKIP:
            self.size -= len(encode_bound(self.ranges[-1].bound)) + 1
            self.ranges[-1] = r  # adjacent skips merge
        else:
            self.ranges.append(r)
        self.size += len(encode_range(r))

    def only_skips(self) -> bool:
        return all(r.mode == SKIP for r in self.ranges)

    def encode(self) -> bytes:
        return encode_message(self.ranges)


class Reconciler:
    """One side of one reconciliation, over one :class:`IdSet`.

    Initiator: ``message = r.initiate()``, then for each reply ``message = r.reply(answer)``
    until it returns None; ``r.need`` then holds the ids the other side has and we lack.
    Responder: ``answer = r.respond(message)`` for each message (no state kept between them).
    """

    def __init__(self, ids: IdSet, params: Params = Params(), *, max_need: int = 1 << 30):
        self.set = ids
        self.params = params
        self.max_need = max_need
        self.need: list[bytes] = []
        self._need: set[bytes] = set()
        self.announced: set[bytes] = set()  # ids the other side said it has
        self.rounds = 0
        self.full = False  # max_need reached: the rest waits for the next session

    # -- initiator ----------------------------------------------------------------------------
    def initiate(self) -> bytes:
        writer = _Writer(self.params.max_message_bytes)
        n = len(self.set)
        if n <= self.params.idlist_threshold:
            writer.add(Range(INFINITY, IDLIST, ids=tuple(self.set.ids(0, n))))
        else:
            writer.add(Range(INFINITY, FINGERPRINT, self.set.fingerprint(0, n)))
        self.rounds = 1
        return writer.encode()

    def reply(self, message: bytes) -> bytes | None:
        """Process the responder's answer; the next message, or None when reconciled."""
        ranges = decode_message(message, max_ranges=self.params.max_ranges, allow_missing=True,
                                max_bytes=self.params.max_receive_bytes)
        writer = self._process(ranges, initiator=True)
        if writer.only_skips() or self.full:
            return None
        self.rounds += 1
        return writer.encode()

    def _learn(self, ids: Iterable[bytes]) -> None:
        for id_ in ids:
            self.announced.add(id_)
            if id_ not in self.set and id_ not in self._need:
                if len(self.need) >= self.max_need:
                    self.full = True
                    return
                self._need.add(id_)
                self.need.append(id_)

    # -- responder ----------------------------------------------------------------------------
    def respond(self, message: bytes) -> bytes:
        ranges = decode_message(message, max_ranges=self.params.max_ranges, allow_missing=False,
                                max_bytes=self.params.max_receive_bytes)
        return self._process(ranges, initiator=False).encode()

    # -- both -----------------------------------------------------------------------------------
    def _process(self, ranges: list[Range], *, initiator: bool) -> _Writer:
        writer = _Writer(self.params.max_message_bytes)
        lower = b""
        for r in ranges:
            lo, hi = self.set.index(lower), self.set.index(r.bound)
            final = r.bound == INFINITY
            if not any(writer.write(answer, final=final) for answer in self._answers(writer, r, lo, hi, initiator)):
                # Over budget: the rest of the id space, from this range's lower bound, as one
                # fingerprint, which the next round takes up.
                writer.add(Range(INFINITY, FINGERPRINT, self.set.fingerprint(lo, len(self.set))))
                return writer
            if initiator and r.mode in (IDLIST, MISSING):
                self._learn(r.ids)  # written (as a SKIP): the ids are noted
            lower = r.bound
        return writer

    def _answers(self, writer: _Writer, r: Range, lo: int, hi: int,
                 initiator: bool) -> Iterator[list[Range]]:
        """The answers to one range, in order of preference: the first that fits is written."""
        p = self.params
        if r.mode == SKIP:
            yield [Range(r.bound, SKIP)]
            return
        if r.mode == FINGERPRINT:
            if self.set.fingerprint(lo, hi) == r.fingerprint:
                yield [Range(r.bound, SKIP)]
            elif hi - lo <= p.idlist_threshold:
                yield [Range(r.bound, IDLIST, ids=tuple(self.set.ids(lo, hi)))]
            else:
                yield self._split(r.bound, lo, hi)
            return
        # IDLIST or MISSING: the sender's ids in the range, all of them (IDLIST) or only those
        # we lack (MISSING, an answer to our own IDLIST). The initiator notes them (_process).
        if initiator:
            yield [Range(r.bound, SKIP)]
            return
        theirs = set(r.ids)
        room = max(0, (writer.budget - writer.size) // ID_BYTES)
        missing: list[bytes] = []
        for k in range(lo, hi):  # stops as soon as the list cannot fit: bounded work
            id_ = self.set.at(k)
            if id_ not in theirs:
                missing.append(id_)
                if len(missing) > room:
                    break
        if not missing:
            yield [Range(r.bound, SKIP)]
            return
        if len(missing) <= room:
            yield [Range(r.bound, MISSING, ids=tuple(missing))]
        if hi - lo > p.idlist_threshold:
            # Too many to list in this message: split, and the initiator lists its side again.
            yield self._split(r.bound, lo, hi)

    def _split(self, bound: bytes, lo: int, hi: int) -> list[Range]:
        """Fingerprints of ``branching`` sub-ranges with about equal counts: sub-range k holds
        the ids at positions floor(k * n / b) to floor((k + 1) * n / b) - 1."""
        count = hi - lo
        parts = min(self.params.branching, count)
        out = []
        start = lo
        for k in range(1, parts + 1):
            end = lo + (count * k) // parts
            sub_bound = bound if k == parts else _split_bound(self.set.at(end - 1), self.set.at(end))
            out.append(Range(sub_bound, FINGERPRINT, self.set.fingerprint(start, end)))
            start = end
        return out


def reconcile(mine: IdSet, theirs: IdSet, params: Params = Params(), max_rounds: int = 64,
              max_need: int = 1 << 30) -> tuple[list[bytes], int, int]:
    """Run both sides in memory: (ids I need, rounds, bytes exchanged). For tests and the
    benchmark; the daemon runs the same two roles over a stream."""
    me = Reconciler(mine, params, max_need=max_need)
    other = Reconciler(theirs, params)
    message: bytes | None = me.initiate()
    total = 0
    while message is not None:
        if me.rounds > max_rounds:
            raise SyncError("too-many-rounds", f"not reconciled in {max_rounds} rounds")
        total += len(message)
        answer = other.respond(message)
        total += len(answer)
        message = me.reply(answer)
    return me.need, me.rounds, total
