"""A sync session stores the answers to several WANTs in one transaction
(``sync.WANTS_PER_COMMIT``): the same outcomes as storing them one WANT at a time.

The client side is the real :class:`Sync` session code over a real trio in-memory stream and a
real SQLite store; the other side is a scripted peer (reconciliation says "you lack these ids",
then each WANT is answered from a script that can break any answer), as a misbehaving peer would.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
import trio.testing

import openmemory_node.sync as sync_module
from openmemory_node import wire
from openmemory_node.config import Config, SyncSection
from openmemory_node.ingest import Ingest
from openmemory_node.policy import NodePolicy
from openmemory_node.reconcile import INFINITY, MISSING, Range, decode_varint, encode_message
from openmemory_node.status import CommonsStatus
from openmemory_node.store import Store
from openmemory_node.streams import FrameReader, frame
from openmemory_node.sync import BUSY, ERROR, NOT_FOUND, RECONCILE, RECORD, WANT, SessionReport, Sync, SyncAbort

from .records import make_records

PEER = "12D3KooWPeer"


class _Stream:
    """The read/write/close of a libp2p stream over one end of a trio in-memory stream pair."""

    def __init__(self, end):
        self.end = end

    async def read(self, n: int | None = None) -> bytes:
        return await self.end.receive_some(n or 65536)

    async def write(self, data: bytes) -> None:
        await self.end.send_all(data)

    async def close(self) -> None:
        await self.end.aclose()


async def _peer(end, records: dict[bytes, bytes], answer) -> None:
    """Says the client lacks every id of ``records``, then answers each WANT through
    ``answer(want, position, idb, data)``: a frame's payload, or None to close the stream."""
    stream = FrameReader(_Stream(end), 1 << 20)
    wants = 0
    try:
        while True:
            data = await stream.read(30)
            if data is None:
                return
            if data[0] == RECONCILE:
                ids = tuple(sorted(records)) if data[1] == sync_module.TYPE_CODES["lesson"] else ()
                reply = encode_message([Range(INFINITY, MISSING, ids=ids)])
                await end.send_all(frame(bytes([RECONCILE, data[1]]) + reply))
                continue
            assert data[0] == WANT
            count, pos = decode_varint(data, 1, limit=64)
            out = b""
            for i in range(count):
                idb = data[pos + 34 * i:pos + 34 * (i + 1)]
                payload = answer(wants, i, idb, records[idb])
                if payload is None:  # close its side (what the client writes after it still goes through)
                    await end.send_all(out)
                    await end.send_stream.aclose()
                    return
                out += frame(payload)
            await end.send_all(out)
            wants += 1
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return  # the client ended the session
    finally:
        await end.send_stream.aclose()


def _session(home: Path, records: dict[bytes, bytes], answer, per_commit: int, monkeypatch) -> tuple:
    monkeypatch.setattr(sync_module, "WANTS_PER_COMMIT", per_commit)
    home.mkdir()
    config = Config()
    store = Store.open(home)
    ingest = Ingest(store, NodePolicy(config.limits), status_rules=CommonsStatus(config.commons, store, b"\x01" * 32))
    sync = Sync(None, ingest, SyncSection(frame_timeout=5), time.time, connected=lambda: [])
    report = SessionReport(PEER, time.time())
    outcome = "done"

    async def main():
        nonlocal outcome
        client, server = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_peer, server, records, answer)
            reader = FrameReader(_Stream(client), sync.max_frame)
            try:
                await sync._session_type(reader, PEER, "lesson", 20_000, report)
            except (SyncAbort, sync_module.FrameError) as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            await client.aclose()

    trio.run(main)
    rows = store.conn.execute("SELECT id, status, change, via, from_peer FROM records ORDER BY change").fetchall()
    result = (outcome, report.received, report.refused, report.duplicates, dict(ingest.stats), rows,
              {code: row["count"] for code, row in store.rejections().items()},
              round(ingest.policy.ledger.penalty(PEER, time.time())), sorted(sync._refused))
    store.close()
    return result


def _lessons(n: int) -> dict[bytes, bytes]:
    records = [r for r in make_records(n * 2, 8, int(time.time())) if wire.decode(r).record_type == "lesson"]
    return {wire.record_id(r): r for r in records[:n]}


RECORDS = _lessons(300)  # 5 WANTs (4 of 64, one of 44)
_SIGNED = sorted(RECORDS)


def _bad_signature(data: bytes) -> bytes:
    out = bytearray(data)
    out[data.index(wire.decode(data).signature) + 9] ^= 0x04
    return bytes(out)


def _with_bad() -> tuple[dict[bytes, bytes], bytes]:
    """The same, one of them sent with a broken signature under the id of those bytes: the first
    (in id order) whose new id sorts after the first WANT and before the last."""
    for idb in _SIGNED:
        bad = _bad_signature(RECORDS[idb])
        out = dict(RECORDS)
        del out[idb]
        out[wire.record_id(bad)] = bad
        if 64 <= sorted(out).index(wire.record_id(bad)) < len(out) - 64:
            return out, bad
    raise AssertionError("no record to break")  # pragma: no cover


WITH_BAD, _BAD = _with_bad()


def _at(want: int, position: int, make):
    """An answer script: every record as asked, but ``make(idb, data)`` at one place."""
    def answer(w, i, idb, data):
        if (w, i) == (want, position):
            return make(idb, data)
        return bytes([RECORD]) + data
    return answer


SCRIPTS = {
    "all good": lambda w, i, idb, data: bytes([RECORD]) + data,
    "a bad signature": lambda w, i, idb, data: bytes([RECORD]) + data,  # (WITH_BAD: announced, then sent)
    "NOT_FOUND in the third WANT": _at(2, 10, lambda idb, data: bytes([NOT_FOUND])),
    "another record in the fourth WANT": _at(3, 3, lambda idb, data: bytes([RECORD]) + RECORDS[_SIGNED[0]]),
    "an unknown kind in the second WANT": _at(1, 0, lambda idb, data: bytes([9]) + data),
    "an empty frame in the second WANT": _at(1, 5, lambda idb, data: b""),
    "BUSY in the third WANT": _at(2, 40, lambda idb, data: bytes([BUSY])),
    "ERROR in the fifth WANT": _at(4, 2, lambda idb, data: bytes([ERROR])),
    "the stream closed in the middle of the third WANT": _at(2, 30, lambda idb, data: None),
    "the stream closed after the fourth WANT": _at(4, 0, lambda idb, data: None),
}


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_answers_stored_several_wants_at_a_time_give_what_one_want_at_a_time_gives(tmp_path, monkeypatch, name):
    script = SCRIPTS[name]
    records = WITH_BAD if name == "a bad signature" else RECORDS
    one = _session(tmp_path / "one", records, script, 1, monkeypatch)
    grouped = _session(tmp_path / "grouped", records, script, sync_module.WANTS_AHEAD, monkeypatch)
    assert grouped == one
    outcome, received, refused = one[0], one[1], one[2]
    if name == "all good":
        assert outcome == "done" and received == len(RECORDS) and len(one[5]) == len(RECORDS)
    else:
        assert outcome != "done" and received < len(RECORDS)
    if name == "a bad signature":  # stored up to it, and no further
        position = sorted(WITH_BAD).index(wire.record_id(_BAD))
        assert 64 <= position < len(WITH_BAD) - 64  # (neither in the first WANT nor in the last)
        assert received == position and refused == 1 and one[6] == {"signature": 1} and one[7] > 0
    if name == "NOT_FOUND in the third WANT":
        assert received == 2 * 64 + 10 and one[6] == {"sync-lie": 1}
