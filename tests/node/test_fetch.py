"""/openmemory/fetch/1.0.0 between a node process and in-test libp2p hosts."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack, asynccontextmanager

import multiaddr
import nacl.signing
import pytest
import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from openmemory_node import wire
from openmemory_node.config import FetchSection
from openmemory_node.fetch import BAD_REQUEST, FOUND, NOT_FOUND, PROTOCOL_ID, Fetch
from openmemory_node.host import build_host, peer_info
from openmemory_node.identity import Identity
from openmemory_node.ingest import Ingest
from openmemory_node.policy import NodePolicy
from openmemory_node.store import Store
from openmemory_node.streams import frame, read_exact, read_frame

from .harness import wait_until

pytestmark = pytest.mark.slow


@asynccontextmanager
async def local_node(home, serve=None):
    """A host with its own store, ingest and fetch client (and optionally a fetch server)."""
    home.mkdir(parents=True, exist_ok=True)
    host = build_host(Identity(nacl.signing.SigningKey.generate()), ["/ip4/127.0.0.1/tcp/0"])
    store = Store.open(home)
    ingest = Ingest(store, NodePolicy())
    fetch = Fetch(host, ingest, FetchSection(), time.time)
    if serve is not None:
        host.set_stream_handler(TProtocol(PROTOCOL_ID), serve)
    try:
        async with host.run([multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]):
            yield host, ingest, fetch
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            await host.close()
        store.close()


async def thread(fn, *args):
    return await trio.to_thread.run_sync(fn, *args)


async def test_fetch_by_id_found_not_found_and_validated_on_arrival(cluster, tmp_path):
    x = cluster.node("x")
    x.init()
    x.start()
    ids = [(await thread(x.publish, f"The job {i} failed when the cache was cold."))["id"] for i in range(3)]
    unknown = "1220" + "ab" * 32
    async with local_node(tmp_path / "client") as (host, ingest, fetch):
        await host.connect(peer_info(x.multiaddr))
        wanted = [bytes.fromhex(i) for i in ids] + [bytes.fromhex(unknown)]
        results = await fetch.fetch(x.peer_id, wanted)
        assert [r.status for r in results] == ["found", "found", "found", "not-found"]
        for rid in ids:
            row = ingest.store.get(rid)
            assert row is not None and row.via == "fetch" and row.from_peer == x.peer_id
        # A record id longer than 64 bytes is a bad request: answered, and charged.
        stream = await host.new_stream(ID.from_base58(x.peer_id), [TProtocol(PROTOCOL_ID)])
        await stream.write(frame(b"\x12" * 65))
        assert (await read_exact(stream, 1, 5))[0] == BAD_REQUEST
        me = host.get_id().to_base58()
        row = await thread(lambda: next(p for p in x.get("/v1/peers")["peers"] if p["peer_id"] == me))
        assert row["penalty"] == pytest.approx(10, abs=0.1)
        # At most 16 requests per stream: the 17th is not answered.
        stream = await host.new_stream(ID.from_base58(x.peer_id), [TProtocol(PROTOCOL_ID)])
        await stream.write(b"".join(frame(bytes.fromhex(ids[0])) for _ in range(17)))
        await stream.close_write()
        answered = 0
        with trio.fail_after(10):
            while True:
                try:
                    status = (await read_exact(stream, 1, 5))[0]
                except Exception:
                    break
                assert status == FOUND
                assert wire.record_id(await read_frame(stream, 4096, 5)) == bytes.fromhex(ids[0])
                answered += 1
        assert answered == 16
        # The rate limit (burst 100) answers RATE_LIMITED, and charges a little.
        statuses = []
        started = time.monotonic()
        for _ in range(60):  # until the bucket runs dry (it refills at 20/s meanwhile), bounded
            results = await fetch.fetch(x.peer_id, [bytes.fromhex(unknown)] * 16)
            statuses += [r.status for r in results]
            if "rate-limited" in statuses:
                break
        elapsed = time.monotonic() - started
        assert "rate-limited" in statuses
        # At most the burst, plus what the bucket refilled meanwhile (20/s: a loaded machine is slow).
        assert statuses.count("not-found") <= 100 + 20 * elapsed + 1


async def test_a_fetch_answer_that_is_not_the_record_asked_for_is_refused_and_charged(tmp_path):
    key = nacl.signing.SigningKey.generate()
    other = wire.encode(wire.new_lesson(key, text="The linter failed on generated files.", kind="error",
                                        strength=1000, provenance=bytes(32), created=int(time.time())))

    async def lying_server(stream):
        await read_frame(stream, 64, 5)
        await stream.write(bytes([FOUND]) + frame(other))
        await stream.close()

    async with local_node(tmp_path / "liar", serve=lying_server) as (liar, _, _):
        async with local_node(tmp_path / "client") as (host, ingest, fetch):
            addr = f"{liar.get_addrs()[0]}"
            await host.connect(peer_info(addr))
            wanted = bytes.fromhex("1220" + "cd" * 32)
            [result] = await fetch.fetch(liar.get_id().to_base58(), [wanted])
            assert result.status == "mismatch"
            assert ingest.store.count() == 0
            assert ingest.policy.ledger.penalty(liar.get_id().to_base58(), time.time()) >= 9.9


def test_api_fetch_dials_a_peer_by_multiaddr(cluster):
    x = cluster.node("x")
    x.init()
    x.start()
    y = cluster.node("y")
    y.init()
    y.start()
    rid = x.publish("The nightly backup skipped the attachments folder.")["id"]
    assert y.has(rid) is None
    found = y.post("/v1/fetch", {"id": rid, "peer": x.multiaddr})
    assert found["id"] == rid and found["fetched"]["from"] in (x.peer_id, "store")
    assert y.has(rid)["record"]["text"] == "The nightly backup skipped the attachments folder."
    missing = "1220" + "00" * 32
    from openmemory_node.client import ApiError

    with pytest.raises(ApiError) as err:
        y.post("/v1/fetch", {"id": missing})
    assert err.value.status == 404
    with pytest.raises(ApiError) as err:
        y.post("/v1/fetch", {"id": "not-an-id"})
    assert err.value.status == 400


async def test_one_peer_cannot_hold_every_fetch_slot(cluster, tmp_path):
    x = cluster.node("x")
    x.init()
    x.start()
    rid = (await thread(x.publish, "The job failed when the cache was cold."))["id"]
    async with local_node(tmp_path / "hog") as (host, ingest, fetch):
        await host.connect(peer_info(x.multiaddr))
        pid = ID.from_base58(x.peer_id)
        held = [await host.new_stream(pid, [TProtocol(PROTOCOL_ID)]) for _ in range(4)]  # and silent

        async def refused() -> bool:
            """A fifth stream: reset at once (during or right after the protocol handshake)."""
            try:
                stream = await host.new_stream(pid, [TProtocol(PROTOCOL_ID)])
            except Exception:
                return True
            with trio.move_on_after(10):
                try:
                    return await stream.read(1) == b""
                except Exception:
                    return True
            return False

        assert [await refused(), await refused()] == [True, True]  # past max_streams_per_peer (4)
        status = await thread(x.status)
        assert status["fetch"]["refused_streams"] == 2
        assert status["rejections"]["fetch-too-many-streams"]["count"] == 2
        # The four held streams are still served (the slots are this peer's, not everyone's).
        await held[0].write(frame(bytes.fromhex(rid)))
        assert (await read_exact(held[0], 1, 10))[0] == FOUND
        for stream in held:
            await stream.reset()
    # Another peer fetches meanwhile without trouble, and our own client keeps to the cap.
    async with local_node(tmp_path / "polite") as (host, ingest, fetch):
        await host.connect(peer_info(x.multiaddr))
        async with trio.open_nursery() as nursery:
            results = []

            async def one():
                results.extend(await fetch.fetch(x.peer_id, [bytes.fromhex(rid)]))

            for _ in range(10):
                nursery.start_soon(one)
        assert [r.status for r in results] == ["found"] * 10
    assert (await thread(x.status))["fetch"]["refused_streams"] == 2
