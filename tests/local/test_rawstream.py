"""Complete lines only, oversized lines skipped, every consumed byte archived: checked
against a plain reference reader on random inputs and block sizes."""

from __future__ import annotations

import gzip
import hashlib
import io

from hypothesis import given, settings
from hypothesis import strategies as st

from openmemory_local.ingest.archive import ArchiveFile, ArchiveReader, MemberWriter
from openmemory_local.ingest.rawstream import Consumed, LineReader


def reference(data: bytes, limit: int):
    """(lines as (number, offset, data or None, size), consumed bytes)."""
    out, offset, number = [], 0, 0
    while True:
        nl = data.find(b"\n", offset)
        if nl < 0:
            return out, offset
        line = data[offset : nl + 1]
        number += 1
        out.append((number, offset, line if len(line) <= limit else None, len(line)))
        offset = nl + 1


lines = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30)


@settings(max_examples=300, deadline=None)
@given(lines=lines, tail=st.binary(max_size=50).map(lambda b: b.replace(b"\n", b"")),
       block=st.integers(1, 64), limit=st.integers(1, 60))
def test_the_reader_matches_the_reference(tmp_path_factory, lines, tail, block, limit):
    data = b"".join(line + b"\n" for line in lines) + tail
    expected, consumed = reference(data, limit)
    tmp = tmp_path_factory.mktemp("m")
    member = MemberWriter(tmp)
    sink = Consumed(member=member)
    reader = LineReader(io.BytesIO(data), sink, max_line_bytes=limit)
    reader.BLOCK = block
    got = [(l.number, l.offset, l.data, l.size) for l in reader]
    sink.finish()
    assert got == expected
    assert reader.offset == consumed and reader.line == len(expected)
    assert reader.incomplete == (consumed < len(data))
    assert sink.bytes == consumed
    assert sink.head_hash == hashlib.sha256(data[:consumed][: 64 * 1024]).hexdigest()
    assert sink.tail_hash == hashlib.sha256(data[:consumed][-4096:]).hexdigest()
    size = member.finish()
    archived = gzip.decompress(member.getvalue()) if size else b""
    member.discard()
    assert archived == data[:consumed]


@settings(max_examples=300, deadline=None)
@given(lines=lines, tail=st.binary(max_size=50).map(lambda b: b.replace(b"\n", b"")),
       block=st.integers(1, 64), limit=st.integers(1, 60), start=st.integers(0, 3))
def test_runs_hold_the_same_lines_a_block_at_a_time(lines, tail, block, limit, start):
    """What ingest reads: runs of complete lines in place, or a Line for a line that spans
    blocks or is oversized; the position is past each item when it comes."""
    data = b"".join(line + b"\n" for line in lines) + tail
    expected, consumed = reference(data, limit)
    offset = sum(e[3] for e in expected[:start])
    expected = expected[start:]
    reader = LineReader(io.BytesIO(data[offset:]), Consumed(), offset=offset, line=min(start, len(lines)),
                        max_line_bytes=limit)
    reader.BLOCK = block
    got = []
    for item in reader.runs():
        if isinstance(item, tuple):
            chunk, pos, end, number = item
            assert chunk[end - 1 : end] == b"\n" and number == reader.line - chunk.count(b"\n", pos, end)
            at = reader.offset - (end - pos)
            for raw in (piece + b"\n" for piece in chunk[pos : end - 1].split(b"\n")):
                number += 1
                got.append((number, at, raw, len(raw)))
                at += len(raw)
        else:
            got.append((item.number, item.offset, item.data, item.size))
        assert (reader.line, reader.offset) == (got[-1][0], got[-1][1] + got[-1][3])
    assert got == expected
    assert reader.offset == consumed and reader.incomplete == (consumed < len(data))


def test_resuming_from_an_offset_continues_the_numbering():
    data = b"a\nbb\nccc\n"
    reader = LineReader(io.BytesIO(data[2:]), Consumed(), offset=2, line=1, max_line_bytes=10)
    assert [(l.number, l.offset, l.data) for l in reader] == [(2, 2, b"bb\n"), (3, 5, b"ccc\n")]


def test_a_damaged_archive_still_yields_what_came_before(tmp_path):
    archive = ArchiveFile(tmp_path, "archive/x/t.jsonl.gz")
    for part in (b"one\ntwo\n", b"three\n"):
        member = MemberWriter(tmp_path / "tmp")
        member.write(part)
        member.finish()
        archive.append_member(member)
        member.discard()
    good = archive.size()
    with open(archive.path, "ab") as f:
        f.write(gzip.compress(b"four\n")[:12])
    reader = ArchiveReader(archive.path)
    got = io.BufferedReader(reader).read()
    # Everything before the torn member, then at most a prefix of what it held.
    assert got.startswith(b"one\ntwo\nthree\n") and b"four\n".startswith(got[14:])
    assert reader.damaged
    archive.truncate_to(good)
    reader = ArchiveReader(archive.path)
    assert io.BufferedReader(reader).read() == b"one\ntwo\nthree\n" and not reader.damaged
