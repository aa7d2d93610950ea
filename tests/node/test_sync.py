"""/openmemory/sync/1.0.0 between node processes and in-test libp2p hosts: repair, limits, lies."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager

import multiaddr
import nacl.signing
import pytest
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from openmemory_node import wire
from openmemory_node.config import SyncSection
from openmemory_node.host import build_host, peer_info
from openmemory_node.identity import Identity
from openmemory_node.ingest import Ingest
from openmemory_node.policy import NodePolicy
from openmemory_node.reconcile import IDLIST, INFINITY, MISSING, SKIP, Range, encode_message
from openmemory_node.store import Store
from openmemory_node.streams import frame, read_frame
from openmemory_node.sync import BUSY, ERROR, NOT_FOUND, PROTOCOL_ID, RECONCILE, WANT, Sync

from .harness import wait_until

pytestmark = pytest.mark.slow

SYNC = TProtocol(PROTOCOL_ID)


@asynccontextmanager
async def libp2p_host(handler=None):
    host = build_host(Identity(nacl.signing.SigningKey.generate()), ["/ip4/127.0.0.1/tcp/0"])
    if handler is not None:
        host.set_stream_handler(SYNC, handler)
    try:
        async with host.run([multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            yield host
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            await host.close()


@asynccontextmanager
async def facing_a_node(cluster):
    """A node process x, and an in-test host connected to it: (x, host, x's peer ID)."""
    x = cluster.node("x")
    x.init()
    await thread(x.start)
    async with libp2p_host() as host:
        await host.connect(peer_info(x.multiaddr))
        yield x, host, ID.from_base58(x.peer_id)


async def thread(fn, *args):
    return await trio.to_thread.run_sync(fn, *args)


def peer_row(node, peer_id):
    return next((p for p in node.get("/v1/peers")["peers"] if p["peer_id"] == peer_id), None)


def lesson_bytes(text: str) -> bytes:
    return wire.encode(wire.new_lesson(nacl.signing.SigningKey.generate(), text=text, kind="error",
                                       strength=1000, provenance=bytes(32), created=int(time.time())))


def test_sync_repairs_a_record_that_gossip_never_delivered(cluster):
    x = cluster.node("x")
    x.init()
    # A record x accepted but never forwarded (as when gossip drops a message on the way):
    # stored directly, not queued for publication.
    data = lesson_bytes("The release build failed because the signing key had expired.")
    record = wire.decode(data)
    store = Store.open(x.home)
    store.add(id=record.id, idb=record.id_bytes, type="lesson", kind="error",
              author=record.signer.hex(), created=record.created, data=data, via="gossip",
              from_peer="12D3KooWGone", status="candidate")
    store.close()
    x.start()
    y = cluster.node("y")
    y.init([x.multiaddr])
    y.start()
    view = wait_until(lambda: y.has(record.id), 30, 0.1, "the record on y")
    assert view["via"] == "sync" and view["from_peer"] == x.peer_id
    assert x.status()["gossip"]["published"] == 0  # it did not travel by gossip


async def test_sessions_run_on_connect_then_every_interval_but_not_with_a_peer_without_sync():
    from libp2p.host.exceptions import StreamFailure
    from libp2p.protocol_muxer.exceptions import ProtocolNotSupportedError

    attempts: dict[str, int] = {}
    no_sync = "12D3KooWPjU1x5EAvo3jcwFkmp6jBh5L9wDXRutJYiobGVAssjf8"  # a js-libp2p node, say
    flaky = "12D3KooWGone8rC1tzh3jaSLLgqu2jqTYCeewW8Zr6FEGFXyCWdV"  # its connection keeps breaking

    class Streams:
        async def new_stream(self, peer, protocols):
            attempts[peer.to_base58()] = attempts.get(peer.to_base58(), 0) + 1
            if peer.to_base58() == no_sync:
                try:
                    raise ProtocolNotSupportedError("protocol not supported: /openmemory/sync/1.0.0")
                except ProtocolNotSupportedError as exc:
                    raise StreamFailure("failed to open a stream") from exc
            raise ConnectionResetError("connection reset")

    class FakeStore:
        def ids_by_type(self):
            return iter(())

        def scan(self):  # (the domains of the records held: none)
            return iter(())

    ingest = Ingest.__new__(Ingest)
    ingest.store, ingest.policy, ingest.on_accept_hooks, ingest.on_evict_hooks = FakeStore(), NodePolicy(), [], []
    now = [1000.0]
    sync = Sync(Streams(), ingest, SyncSection(interval=30, connect_delay=0.5), lambda: now[0],
                connected=lambda: [no_sync, flaky])

    async def attempted(peer: str, n: int) -> None:
        with trio.fail_after(20):
            while attempts.get(peer, 0) < n:
                await trio.sleep(0.01)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sync.run)
        for peer in (no_sync, flaky):
            sync.peer_connected(peer)
        now[0] += 1  # the connect delay has passed: a session with each
        await attempted(no_sync, 1)
        await attempted(flaky, 1)
        for rounds in range(2, 5):  # three intervals later, and a reconnection
            now[0] += 40
            sync.peer_connected(no_sync)
            now[0] += 1
            await attempted(flaky, rounds)
        assert attempts[no_sync] == 1  # remembered: not asked every interval nor on reconnect
        assert sync.status()["unsupported"] == [no_sync]
        now[0] += 3600  # an hour later it is asked again
        await attempted(no_sync, 2)
        nursery.cancel_scope.cancel()
    assert sync.last[no_sync].outcome == "unsupported" and sync.last[flaky].outcome == "failed"


async def test_garbage_and_oversized_messages_are_refused_and_penalised(cluster):
    async with facing_a_node(cluster) as (x, host, pid):
        me = host.get_id().to_base58()
        stream = await host.new_stream(pid, [SYNC])
        await stream.write(frame(bytes([RECONCILE, 0]) + b"\x07garbage"))
        assert (await read_frame(stream, 1024, 5)) == bytes([ERROR])
        stream = await host.new_stream(pid, [SYNC])
        await stream.write(frame(bytes([RECONCILE, 2]) + bytes(200_000)))
        assert (await read_frame(stream, 1024, 5)) == bytes([ERROR])
        stream = await host.new_stream(pid, [SYNC])
        await stream.write(frame(bytes([WANT, 0])))  # a WANT of nothing
        assert (await read_frame(stream, 1024, 5)) == bytes([ERROR])
        row = await thread(peer_row, x, me)
        assert row["penalty"] == pytest.approx(30, abs=0.5)
        refused = (await thread(x.status))["rejections"]
        assert refused["sync-bad-message"]["count"] == 3


async def test_a_flood_of_sessions_gets_busy_and_a_small_penalty(cluster):
    async with facing_a_node(cluster) as (x, host, pid):
        answers = []
        for _ in range(9):
            stream = await host.new_stream(pid, [SYNC])
            await stream.write(frame(bytes([RECONCILE, 2]) + encode_message([Range(INFINITY, IDLIST)])))
            answers.append((await read_frame(stream, 100_000, 5))[0])
            await stream.close()
        assert answers[:6] == [RECONCILE] * 6  # the burst
        assert answers[6:] == [BUSY] * 3
        row = await thread(peer_row, x, host.get_id().to_base58())
        assert row["penalty"] == pytest.approx(3, abs=0.2) and not row["graylisted"]


async def test_a_peer_that_announces_records_it_does_not_have_is_penalised(cluster):
    x = cluster.node("x")
    x.init()
    await thread(x.start)
    fake = b"\x12\x20" + bytes(range(32))
    wanted: list[bytes] = []

    async def liar(stream):
        try:
            while True:
                data = await read_frame(stream, 200_000, 5)
                if data is None:
                    return
                if data[0] == RECONCILE:
                    if data[1] == 0:  # revocations: "you lack this one"
                        answer = encode_message([Range(INFINITY, MISSING, ids=(fake,))])
                    else:
                        answer = encode_message([Range(INFINITY, SKIP)])
                    await stream.write(frame(bytes([RECONCILE, data[1]]) + answer))
                elif data[0] == WANT:
                    wanted.append(data[2:])
                    await stream.write(frame(bytes([NOT_FOUND])))
        finally:
            await stream.close()

    async with libp2p_host(liar) as host:
        await host.connect(peer_info(x.multiaddr))  # x syncs with whoever connects
        me = host.get_id().to_base58()

        def lied() -> bool:
            return (x.status()["rejections"].get("sync-lie") or {}).get("count") == 1

        await thread(lambda: wait_until(lied, 30, 0.1, "x catching the lie"))
        assert wanted == [fake]
        row = await thread(peer_row, x, me)
        assert row["penalty"] == pytest.approx(10, abs=0.5)
        last = await thread(lambda: wait_until(lambda: x.get("/v1/sync")["last"].get(me), 20, 0.05,
                                               "x ending the session"))
        assert last["outcome"] == "aborted" and "NOT_FOUND" in last["detail"]
