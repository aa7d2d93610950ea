"""A misbehaving peer for the attack tests: its own libp2p host, speaking GossipSub.

It publishes whatever bytes it is given on whatever topic (no validation of its own), with
py-libp2p's default message ids (origin + sequence number), so that it can replay the same
record bytes as new messages. Its outbound queue is large, so that a flood really leaves.
"""

from __future__ import annotations

import secrets
import time
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

import multiaddr
import nacl.signing
import trio
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, PROTOCOL_ID_V12, GossipSub

from openmemory_node import wire
from openmemory_node.gossip import TOPICS, NodePubsub, topic_for
from openmemory_node.host import build_host, peer_info
from openmemory_node.identity import Identity

LESSON_TOPIC = topic_for("lesson")


@dataclass
class Rogue:
    host: Any
    pubsub: Any
    key: nacl.signing.SigningKey
    target: Any

    @property
    def peer_id(self) -> str:
        return self.host.get_id().to_base58()

    def lesson(self, text: str, *, created: int | None = None, kind: str = "error") -> bytes:
        record = wire.new_lesson(
            self.key, text=text, kind=kind, strength=1000, provenance=bytes(32),
            created=int(time.time()) if created is None else created,
        )
        return wire.encode(record)

    def bad_signature(self, text: str) -> bytes:
        """A well-formed lesson whose signature has one bit flipped."""
        data = bytearray(self.lesson(text))
        signature = wire.decode(bytes(data)).signature
        at = bytes(data).index(signature) + 7
        data[at] ^= 0x01
        return bytes(data)

    def signed_instruction(self, text: str) -> bytes:
        """A correctly signed lesson whose text instructs (the constructor does not check)."""
        unsigned = wire.Lesson(text=text, kind="correction", strength=1000, provenance=bytes(32),
                               derived_from=(), signer=bytes(self.key.verify_key),
                               created=int(time.time()), signature=bytes(64))
        return wire.encode(wire.sign(unsigned, self.key))

    async def send(self, data: bytes, topic: str | None = None, pace: float = 0.02) -> None:
        """Publish ``data`` on ``topic``; by default on its lesson topics (a lesson's domains'
        topics, as an honest node does; the general one for what does not decode)."""
        await self.pubsub.publish(topic or lesson_topics(data), data)
        if pace:
            await trio.sleep(pace)

    async def relay_as_stranger(self, data: bytes, topic: str = LESSON_TOPIC) -> None:
        """Send ``data`` as if relaying a message that a peer of its own (a new libp2p key
        each time) published: to the target, the rogue only relays it."""
        from libp2p.crypto.ed25519 import create_new_key_pair
        from libp2p.peer.id import ID
        from libp2p.pubsub.pb import rpc_pb2
        from libp2p.pubsub.validators import PUBSUB_SIGNING_PREFIX

        origin = create_new_key_pair()
        msg = rpc_pb2.Message(data=data, topicIDs=[topic], from_id=ID.from_pubkey(origin.public_key).to_bytes(),
                              seqno=secrets.token_bytes(8))
        msg.signature = origin.private_key.sign(PUBSUB_SIGNING_PREFIX.encode() + msg.SerializeToString())
        msg.key = origin.public_key.serialize()
        await self.pubsub.router.publish(self.host.get_id(), msg)

    async def reconnect(self) -> None:
        await self.host.connect(self.target)


def lesson_topics(data: bytes) -> list[str]:
    from openmemory_node.follow import record_topics
    from openmemory_protocol.domains import lesson_domains

    try:
        record = wire.decode(data)
    except wire.WireError:
        return [LESSON_TOPIC]
    if record.record_type != "lesson":
        return [LESSON_TOPIC]
    return record_topics("lesson", lesson_domains(record.claim), LESSON_TOPIC)


@asynccontextmanager
async def rogue_peer(target: str, *, queue: int = 4096) -> AsyncIterator[Rogue]:
    key = nacl.signing.SigningKey.generate()
    host = build_host(Identity(key), ["/ip4/127.0.0.1/tcp/0"])
    router = GossipSub(
        protocols=[PROTOCOL_ID_V12, PROTOCOL_ID_V11], degree=6, degree_low=4, degree_high=12,
        heartbeat_interval=1, spam_protection_enabled=False, adaptive_gossip_enabled=False,
    )
    pubsub = NodePubsub(host, router, strict_signing=True, outbound_queue=queue)
    info = peer_info(target)
    try:
        async with AsyncExitStack() as stack:
            from libp2p.tools.anyio_service import background_trio_service

            await stack.enter_async_context(background_trio_service(pubsub))
            await stack.enter_async_context(background_trio_service(router))
            await stack.enter_async_context(host.run([multiaddr.Multiaddr("/ip4/127.0.0.1/tcp/0")]))
            nursery = await stack.enter_async_context(trio.open_nursery())
            for topic in TOPICS:
                subscription = await pubsub.subscribe(topic)
                nursery.start_soon(_drain, subscription)
            with trio.fail_after(15):
                await host.connect(info)
                # In the target's mesh on every topic, so that what it sends on any of them
                # goes to the target rather than to a fanout it may not have yet.
                while any(info.peer_id not in router.mesh.get(topic, ()) for topic in TOPICS):
                    await trio.sleep(0.05)
            yield Rogue(host, pubsub, key, info)
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(2):
            await host.close()


async def _drain(subscription: Any) -> None:
    async for _ in subscription:
        pass
