"""A fresh node catching up by sync, and what makes it fast: batched answers and writes.

Two real node processes for the catch-up; a real SQLite file and a process killed by SIGKILL for
the batch's atomicity; the buffered frame reader over a byte source fed in arbitrary pieces.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import trio

from openmemory_node import wire
from openmemory_node.config import Config
from openmemory_node.ingest import Ingest
from openmemory_node.policy import Action, NodePolicy
from openmemory_node.status import CommonsStatus
from openmemory_node.store import Store
from openmemory_node.streams import FrameError, FrameReader, frame
from openmemory_node.sync import MAX_WANT

from .harness import wait_until
from .records import make_records, populate

ROOT = Path(__file__).resolve().parents[2]


def total(node) -> int:
    return sum(sum(by_status.values()) for by_status in node.status()["records"].values())


@pytest.mark.slow
def test_a_fresh_node_catches_up_every_record_with_the_same_statuses(cluster):
    records = make_records(300, 12, int(time.time()))  # lessons, attestations, revocations, vouches
    a = cluster.node("a")
    a.init()
    populate(a.home, records)
    a.start()
    b = cluster.node("b")
    b.init([a.multiaddr])
    b.start()
    wait_until(lambda: total(b) == len(records), 90, 0.1, "b holding every record")
    report = wait_until(lambda: b.get("/v1/sync")["last"].get(a.peer_id), 30, 0.1, "b's session report")
    assert report["outcome"] == "done", report
    assert report["received"] == len(records) and report["refused"] == 0 and report["duplicates"] == 0
    assert report["need"]["lesson"] > MAX_WANT  # several WANTs, pipelined
    # The same records, and the commons machine reached the same statuses from batched arrivals.
    assert b.statuses() == a.statuses()
    assert b.status()["ingest"]["accepted"] == len(records)


def _ingest(home: Path) -> Ingest:
    config = Config()
    store = Store.open(home)
    return Ingest(store, NodePolicy(config.limits),
                  status_rules=CommonsStatus(config.commons, store, b"\x01" * 32))


def test_a_batch_is_one_transaction_and_a_kill_within_it_loses_no_committed_record(tmp_path):
    records = make_records(200, 8, int(time.time()))
    first, second = records[:MAX_WANT], records[MAX_WANT:2 * MAX_WANT]
    (tmp_path / "records").write_bytes(b"".join(frame(r) for r in first + second))
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from pathlib import Path
        from tests.node.test_sync_catchup import _ingest, _split
        home = Path({str(tmp_path)!r})
        records = _split((home / "records").read_bytes())
        ingest = _ingest(home)
        outcomes = ingest.accept_batch(records[:{MAX_WANT}], peer="12D3KooWPeer", solicited=True)
        assert all(o.accepted for o in outcomes)
        print("first batch committed", flush=True)
        rules = ingest.status_rules
        seen = []
        def after_accept(record, store, now):
            seen.append(record)
            if len(seen) == 20:  # the second batch, 20 records stored in its transaction
                os.kill(os.getpid(), signal.SIGKILL)
            return type(rules).after_accept(rules, record, store, now)
        rules.after_accept = after_accept
        ingest.accept_batch(records[{MAX_WANT}:], peer="12D3KooWPeer", solicited=True)
        print("not reached", flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert "first batch committed" in proc.stdout and "not reached" not in proc.stdout
    store = Store.open(tmp_path)
    try:
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        held = set(store.ids())
        assert held == {wire.decode(r).id for r in first}  # the first batch whole, none of the second
        # The second batch, sent again, is taken whole.
        ingest = Ingest(store, NodePolicy(Config().limits),
                        status_rules=CommonsStatus(Config().commons, store, b"\x01" * 32))
        ingest.status_rules.rebuild()
        outcomes = ingest.accept_batch(second, peer="12D3KooWPeer", solicited=True)
        assert [o.verdict.action for o in outcomes] == [Action.ACCEPT] * len(second)
        assert store.count() == len(first) + len(second)
    finally:
        store.close()


def _split(data: bytes) -> list[bytes]:
    """Frames back into records (the test's own file of records for the child process)."""
    out, pos = [], 0
    while pos < len(data):
        length = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        out.append(data[pos:pos + length])
        pos += length
    return out


def test_a_batch_counts_each_refusal_and_runs_the_hooks_after_its_commit(tmp_path):
    records = make_records(20, 4, int(time.time()))
    tampered = bytearray(records[3])
    at = records[3].index(wire.decode(records[3]).signature)
    tampered[at] ^= 1  # a byte of the signature: decodes, does not verify
    batch = [records[0], records[1], bytes(tampered), records[1], records[2]]
    ingest = _ingest(tmp_path)
    observer = sqlite_reader(tmp_path)
    seen_committed = []
    ingest.on_accept_hooks.append(
        lambda record, via, peer: seen_committed.append(
            observer.execute("SELECT 1 FROM records WHERE id=?", (record.id,)).fetchone() is not None))
    outcomes = ingest.accept_batch(batch, peer="12D3KooWPeer", solicited=True)
    assert [(o.verdict.action, o.verdict.code) for o in outcomes] == [
        (Action.ACCEPT, "ok"), (Action.ACCEPT, "ok"), (Action.REJECT, "signature"),
        (Action.DUPLICATE, "duplicate"), (Action.ACCEPT, "ok")]
    assert seen_committed == [True, True, True]  # each hook saw its record already committed
    assert ingest.stats["reject:signature"] == 1 and ingest.stats["duplicate"] == 1
    assert ingest.store.rejections()["signature"]["count"] == 1
    assert ingest.policy.ledger.penalty("12D3KooWPeer", time.time()) > 0  # the sender was charged
    # stop_on_reject: the batch ends at the invalid record; what follows is not looked at.
    outcomes = ingest.accept_batch([records[4], bytes(tampered), records[5]], peer="12D3KooWPeer",
                                   solicited=True, stop_on_reject=True)
    assert [o.verdict.action for o in outcomes] == [Action.ACCEPT, Action.REJECT]
    assert not ingest.store.has(wire.decode(records[5]).id)
    assert ingest.store.count() == 4


def sqlite_reader(home: Path):
    import sqlite3

    return sqlite3.connect(str(home / "node.db"), isolation_level=None)


class Pieces:
    """A byte source that hands out its bytes in the given pieces, then ends."""

    def __init__(self, pieces: list[bytes]):
        self.pieces = list(pieces)
        self.reads = 0

    async def read(self, n: int | None = None) -> bytes:
        self.reads += 1
        await trio.lowlevel.checkpoint()
        if not self.pieces:
            return b""
        piece = self.pieces.pop(0)
        if n is not None and len(piece) > n:
            self.pieces.insert(0, piece[n:])
            piece = piece[:n]
        return piece


async def read_all(reader: FrameReader) -> list[bytes]:
    out = []
    while (payload := await reader.read(5)) is not None:
        out.append(payload)
    return out


async def test_frame_reader_takes_frames_in_any_pieces():
    payloads = [b"", b"x", b"y" * 127, b"z" * 128, b"w" * 300, bytes(range(256)) * 4]
    stream = b"".join(frame(p) for p in payloads)
    one = Pieces([stream])
    assert await read_all(FrameReader(one, 2048)) == payloads
    assert one.reads == 2  # every frame out of one read, then the end
    bytewise = Pieces([stream[i:i + 1] for i in range(len(stream))])
    assert await read_all(FrameReader(bytewise, 2048)) == payloads
    odd = Pieces([stream[i:i + 7] for i in range(0, len(stream), 7)])
    assert await read_all(FrameReader(odd, 2048, chunk=5)) == payloads


async def test_frame_reader_refuses_what_read_frame_refuses():
    with pytest.raises(FrameError, match="exceeds maximum"):  # at the prefix, before the payload
        await FrameReader(Pieces([frame(b"x" * 101)[:3]]), 100).read(5)
    with pytest.raises(FrameError, match="ended within a frame"):
        await FrameReader(Pieces([frame(b"abc")[:-1]]), 100).read(5)
    with pytest.raises(FrameError, match="longer than 10 bytes"):
        await FrameReader(Pieces([b"\xff" * 11]), 100).read(5)
    assert await FrameReader(Pieces([]), 100).read(5) is None

    class Silent:
        async def read(self, n=None):
            await trio.sleep_forever()

    with pytest.raises(FrameError, match="no complete frame within"):
        await FrameReader(Silent(), 100).read(0.05)


def test_records_of_the_helper_are_all_valid_and_distinct():
    now = int(time.time())
    records = make_records(100, 5, now)
    decoded = [wire.validate(r, now=now) for r in records]
    assert len({r.id for r in decoded}) == 100
    assert {r.record_type for r in decoded} == {"lesson", "attestation", "revocation", "vouch"}
    assert records == make_records(100, 5, now)  # keys derived from an index: the same records every run


def test_a_batch_that_fails_is_rolled_back_whole_and_the_statuses_recomputed(tmp_path):
    records = make_records(40, 4, int(time.time()))
    ingest = _ingest(tmp_path)
    assert all(o.accepted for o in ingest.accept_batch(records[:10], peer="12D3KooWPeer", solicited=True))
    rules = ingest.status_rules
    calls = []

    def failing(record, store, now):
        calls.append(record)
        if len(calls) == 3:
            raise OSError("disk I/O error (made by the test)")
        return type(rules).after_accept(rules, record, store, now)

    rules.after_accept = failing
    with pytest.raises(OSError, match="made by the test"):
        ingest.accept_batch(records[10:20], peer="12D3KooWPeer", solicited=True)
    del rules.after_accept
    assert set(ingest.store.ids()) == {wire.decode(r).id for r in records[:10]}
    assert rules.machine.statuses() == {r.id: r.status for r in ingest.store.list(limit=100)}
    # The same batch again is taken whole.
    assert all(o.accepted for o in ingest.accept_batch(records[10:20], peer="12D3KooWPeer", solicited=True))
    assert ingest.store.count() == 20
