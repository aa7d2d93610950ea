"""GossipSub for records: one topic per record type (per domain for lessons and
attestations), message id = record id.

What this adds to py-libp2p 0.8.1 (see /work/shared/notes/py-libp2p-0.8.1.md):

* **Message id = record id** (``msg_id_constructor``): the multihash (sha2-256) of the
  message data, which for a record is its id. The same record published by two nodes, or
  replayed, is one message.
* **Full validation in the topic validator**, synchronously: the ingest pipeline validates,
  applies the node policy, stores and commits; only an accepted record is forwarded.
  py-libp2p's validation cache is disabled: it is keyed by message id, and a forged message
  carrying a real record's id must not be able to poison it.
* **Duplicates are counted**: a message the seen-cache already knows still reaches
  :meth:`NodePubsub.push_msg`, which counts it against the record before dropping it.
* **Every inbound message is accounted for**: :meth:`NodePubsub.push_msg` is py-libp2p's
  with a counter for each way a message can be dropped before the topic validator (the
  sender or origin blacklisted, the sender's score under the publish threshold, a bad
  message signature, a message claiming to be ours, a topic we do not subscribe to);
  the validator's own verdicts are counted by the ingest. ``status`` shows both.
* **Topics joined before the host listens**: a GRAFT that reaches py-libp2p before it has
  joined the topic is answered with a PRUNE and a 60 s backoff on both sides; subscribing
  every topic before any peer can connect closes that window, and a GRAFT for a topic not
  joined is ignored (as go-libp2p-pubsub does) rather than pruned.
* **Topics by domain** (:mod:`openmemory_node.follow`): a lesson goes out as one message on
  the topics of its domains, an attestation on its lesson's; revocations and vouches on their
  type's topic. The node joins the topics of the domains it follows, and changes them while
  it runs when the engine reports other domains (:meth:`Gossip.follow`). A message on several
  topics must be a lesson or attestation on its own domains' topics (``wrong-topic``).
* **Scoring**: the node's ledger is GossipSub's application-specific score (P6).
* **No silent drops**: the per-peer outbound queue is raised from 32 to
  ``gossip.outbound_queue``, local publishing is paced (author token bucket, queue depth,
  a mesh peer present), and every RPC the router still drops is counted and logged.
"""

from __future__ import annotations

import logging
import math
from collections import Counter, deque
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable

import trio
from libp2p.peer.id import ID
from libp2p.pubsub.gossipsub import PROTOCOL_ID_V11, PROTOCOL_ID_V12, GossipSub
from libp2p.pubsub.pb import rpc_pb2
from libp2p.pubsub.pubsub import Pubsub
from libp2p.exceptions import ValidationError
from libp2p.pubsub.score import ScoreParams, TopicScoreParams
from libp2p.pubsub.validators import signature_validator
from libp2p.tools.anyio_service import background_trio_service

from . import wire
from openmemory_protocol.domains import DOMAINS, domain_topic

from .config import GossipSection
from .follow import DOMAIN_TYPES, DomainIndex, Following, record_topics, topic_domain
from .ingest import Ingest
from .log import event
from .policy import WRONG_TOPIC, Limits, TokenBucket

log = logging.getLogger(__name__)

TOPIC_PREFIX = "/openmemory/1/"
RECORD_TYPES = ("lesson", "attestation", "revocation", "vouch")


#: A node publishes at this fraction of the per-author rate and burst its peers enforce.
PACING_MARGIN = 0.8


def topic_for(record_type: str) -> str:
    return TOPIC_PREFIX + record_type


TOPICS = tuple(topic_for(t) for t in RECORD_TYPES)  # (lessons' and attestations' general topics)
#: Every topic a node may join: the type topics and the domain topics.
ALL_TOPICS = TOPICS + tuple(domain_topic(t, d) for t in DOMAIN_TYPES for d in DOMAINS
                            if domain_topic(t, d) not in TOPICS)
#: Seconds with peers connected, none of which joined a record's topics, after which the
#: record is published anyway (to no one: sync brings it to its domains' followers later).
SUBSCRIPTION_GRACE = 3.0


def message_id(msg: rpc_pb2.Message) -> bytes:
    """The GossipSub message id: the record id, the multihash of the message's bytes."""
    return wire.record_id(msg.data)


class _NoValidationCache:
    def get(self, msg_id: bytes) -> None:
        return None

    def put(self, msg_id: bytes, result: Any) -> None:
        pass

    def clear_expired(self) -> None:
        pass


class NodePubsub(Pubsub):
    def __init__(self, *args: Any, outbound_queue: int = 1024,
                 on_seen: Callable[[ID, rpc_pb2.Message], None] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.validation_cache = _NoValidationCache()  # type: ignore[assignment]
        self.outbound_queue = outbound_queue
        self.on_seen = on_seen
        self.received = 0  # messages from peers that reached push_msg or the topic filter
        self.dropped: Counter[str] = Counter()  # dropped before the validator, by reason

    def get_msg_validators(self, msg: rpc_pb2.Message) -> tuple[Any, ...]:
        # Every topic has the same validator, which checks the message as a whole: run it once
        # for a message on several topics (py-libp2p would run it once per topic).
        return super().get_msg_validators(msg)[:1]

    def _is_subscribed_to_msg(self, msg: rpc_pb2.Message) -> bool:
        # Called for every message of an inbound RPC, before push_msg.
        if super()._is_subscribed_to_msg(msg):
            return True
        self.received += 1
        self.dropped["topic-not-subscribed"] += 1
        return False

    async def push_msg(self, msg_forwarder: ID, msg: rpc_pb2.Message) -> None:
        """py-libp2p 0.8.1's push_msg, each drop counted (and duplicates counted per record)."""
        own = msg_forwarder == self.my_id
        if not own:
            self.received += 1
        if self._is_msg_seen(msg):
            if self.on_seen is not None and not own:
                self.on_seen(msg_forwarder, msg)
            return
        reason = self._drop_reason(msg_forwarder, msg)
        if reason is not None:
            self.dropped[reason] += 1
            return
        try:
            await self.validate_msg(msg_forwarder, msg)
        except ValidationError:
            return  # refused by the topic validator, which the ingest has counted
        self._mark_msg_seen(msg)
        self.notify_subscriptions(msg)
        await self.router.publish(msg_forwarder, msg)

    def _drop_reason(self, forwarder: ID, msg: rpc_pb2.Message) -> str | None:
        if self.is_peer_blacklisted(forwarder):
            return "sender-blacklisted"
        if self.is_peer_blacklisted(ID(msg.from_id)):
            return "origin-blacklisted"
        scorer = getattr(self.router, "scorer", None)
        if scorer is not None and not scorer.allow_publish(forwarder, list(msg.topicIDs)):
            return "sender-score"
        if self.strict_signing and not signature_validator(msg):
            return "message-signature"
        if ID(msg.from_id) == self.my_id and forwarder != self.my_id:
            return "claims-to-be-ours"
        return None

    async def _handle_new_peer(self, peer_id: ID) -> None:
        await super()._handle_new_peer(peer_id)
        queue = self.peer_queues.get(peer_id)
        if queue is not None:
            queue._queue.max_size = max(queue._queue.max_size, self.outbound_queue)


class NodeGossipSub(GossipSub):
    dropped: int = 0

    async def handle_graft(self, graft_msg: rpc_pb2.ControlGraft, sender_peer_id: ID) -> None:
        # py-libp2p answers a GRAFT for a topic it has not joined (yet) with a PRUNE, which
        # sets a 60 s backoff at the sender; and the sender's own GRAFT, once we do join,
        # then reads as a flood (within 10 s of "our" PRUNE) and is pruned in turn: a minute
        # without a mesh. go-libp2p-pubsub ignores such a GRAFT; so do we.
        if graft_msg.topicID not in self.mesh:
            return
        await super().handle_graft(graft_msg, sender_peer_id)

    def _handle_dropped_rpc(self, peer_id: ID, rpc: rpc_pb2.RPC, reason: str) -> None:
        if rpc.publish:
            self.dropped += len(rpc.publish)
            event(log, logging.WARNING, "outbound gossip dropped", peer=str(peer_id),
                  reason=reason, messages=len(rpc.publish))
        super()._handle_dropped_rpc(peer_id, rpc, reason)


def score_params(limits: Limits, app_score: Callable[[ID], float]) -> ScoreParams:
    """GossipSub peer scoring, as documented in PROTOCOL.md.

    Only P6 (application-specific, weight 1) carries weight: it is minus the node ledger's
    decaying penalty. P1-P3 rewards would let a peer buy credit with cheap valid traffic;
    py-libp2p's P4 counts every refusal (it cannot tell "reject" from "ignore") and, like
    every py-libp2p counter, is forgotten when the peer disconnects. P5 and P7 stay off
    (P7 would punish peers behind one NAT, and every test peer shares 127.0.0.1).
    """
    off = TopicScoreParams(weight=0.0, cap=0.0, decay=1.0)
    threshold = -limits.graylist_penalty
    return ScoreParams(
        p1_time_in_mesh=off,
        p2_first_message_deliveries=off,
        p3_mesh_message_deliveries=off,
        p4_invalid_messages=off,
        p5_behavior_penalty_weight=0.0,
        p6_appl_slack_weight=1.0,
        p6_appl_slack_decay=1.0,
        p7_ip_colocation_weight=0.0,
        publish_threshold=threshold / 2,
        gossip_threshold=threshold / 2,
        graylist_threshold=threshold,
        accept_px_threshold=0.0,
        app_specific_score_fn=app_score,
    )


class Gossip:
    """The node's GossipSub: services, topic validators, and the paced local publisher."""

    def __init__(
        self,
        host: Any,
        ingest: Ingest,
        settings: GossipSection,
        *,
        author: bytes,
        clock: Callable[[], float],
        following: Following | None = None,
        domains: DomainIndex | None = None,
    ):
        self.host = host
        self.ingest = ingest
        self.settings = settings
        self.author = author
        self.clock = clock
        self.my_id = host.get_id()
        self.following = following or Following()
        self.domains = domains or DomainIndex()
        limits = ingest.policy.limits
        self.router = NodeGossipSub(
            protocols=[PROTOCOL_ID_V12, PROTOCOL_ID_V11],
            degree=settings.degree,
            degree_low=settings.degree_low,
            degree_high=settings.degree_high,
            heartbeat_interval=settings.heartbeat_interval,
            score_params=score_params(limits, self._app_score),
            spam_protection_enabled=False,  # trap 2: our policy limits rates instead
            adaptive_gossip_enabled=False,  # it stretches the heartbeat to 30-60 s
            eclipse_protection_enabled=False,  # needs distinct IPs; loopback has one
        )
        self.pubsub = NodePubsub(
            host,
            self.router,
            strict_signing=True,
            msg_id_constructor=message_id,
            seen_ttl=settings.seen_ttl,
            outbound_queue=settings.outbound_queue,
            on_seen=self._on_seen,
            max_inbound_rpc_size=max(64 * 1024, 4 * limits.max_record_bytes + 4096),
        )
        for topic in ALL_TOPICS:
            self.pubsub.set_topic_validator(topic, self._validator, False)
        self._subscriptions: dict[str, Any] = {}
        self._nursery: trio.Nursery | None = None
        self._outbox: deque[tuple[str, str, bytes]] = deque()
        self._outbox_event = trio.Event()
        # Pace our own publishing below the author limit every peer applies, so that timing
        # jitter between hops never pushes an honest author over it (PACING_MARGIN).
        self._author_bucket = TokenBucket(limits.author_rate * PACING_MARGIN,
                                          max(1.0, limits.author_burst * PACING_MARGIN))
        self.published = 0
        self.delivered = 0  # messages handed to our subscriptions (accepted or own)
        self.inbound: Counter[str] = Counter()  # what the validator made of each message

    # -- scoring --------------------------------------------------------------------------
    def _app_score(self, peer: ID) -> float:
        return self.ingest.policy.score(peer.to_base58(), self.clock())

    def score(self, peer: ID) -> float:
        return self.router.scorer.score(peer, list(TOPICS)) if self.router.scorer else 0.0

    def is_graylisted(self, peer: ID) -> bool:
        scorer = self.router.scorer
        return bool(scorer and scorer.is_graylisted(peer, list(TOPICS)))

    # -- topics ---------------------------------------------------------------------------
    def topics(self) -> list[str]:
        """The topics this node joins (its followed domains')."""
        return self.following.topics(TOPICS)

    def topics_of(self, record_type: str, data: bytes) -> list[str]:
        """The topics a record is published on (:func:`openmemory_node.follow.record_topics`)."""
        if record_type not in DOMAIN_TYPES:
            return [topic_for(record_type)]
        domains = self.domains.of_record(wire.decode(data))
        return record_topics(record_type, domains, topic_for(record_type))

    async def follow(self) -> dict[str, list[str]]:
        """Join the topics of the domains now followed and leave the others (after the engine
        reported its domains). A GRAFT for a topic not yet joined is ignored, not pruned
        (NodeGossipSub), so joining late costs at most a heartbeat."""
        wanted = self.topics()
        joined = [t for t in wanted if t not in self._subscriptions]
        left = [t for t in self._subscriptions if t not in wanted]
        for topic in joined:
            await self._join(topic)
        for topic in left:
            self._subscriptions.pop(topic)
            await self.pubsub.unsubscribe(topic)
        return {"joined": joined, "left": left}

    async def _join(self, topic: str) -> None:
        subscription = await self.pubsub.subscribe(topic)
        self._subscriptions[topic] = subscription
        if self._nursery is not None:
            self._nursery.start_soon(self._drain, subscription)

    # -- validation -----------------------------------------------------------------------
    def _validator(self, forwarder: ID, msg: rpc_pb2.Message) -> bool:
        if forwarder == self.my_id:
            return True  # our own publish: validated and stored before it was queued
        peer = forwarder.to_base58()
        if not msg.topicIDs:
            self.ingest.charge(peer, self.ingest.policy.bad_input(WRONG_TOPIC, "a message on no topic"))
            self.inbound["reject:" + WRONG_TOPIC] += 1
            return False
        scopes = [topic_domain(t) for t in msg.topicIDs]
        types = {scope[0] for scope in scopes if scope is not None}
        if None in scopes or len(types) != 1 or (len(scopes) > 1 and not types <= set(DOMAIN_TYPES)):
            self.ingest.charge(peer, self.ingest.policy.bad_input(
                WRONG_TOPIC, "a message on several topics that are not one type's domain topics"))
            self.inbound["reject:" + WRONG_TOPIC] += 1
            return False
        expect = types.pop()
        topic_domains = frozenset(scope[1] for scope in scopes if scope[1] is not None) or None  # type: ignore[index]
        try:
            outcome = self.ingest.accept(
                msg.data, peer=peer, originated=(msg.from_id == forwarder.to_bytes()),
                via="gossip", expect_type=expect, topic_domains=topic_domains,
            )
        except Exception:  # e.g. the disk is full: refuse (not forwarded), say why, go on
            log.exception("could not store a record from %s; refused it", peer)
            self.inbound["error"] += 1
            return False
        verdict = outcome.verdict
        self.inbound[verdict.action.value if verdict.code in ("ok", "duplicate")
                     else f"{verdict.action.value}:{verdict.code}"] += 1
        return outcome.accepted

    def _on_seen(self, forwarder: ID, msg: rpc_pb2.Message) -> None:
        # Only accepted records are marked seen, so the message id is a stored record's id.
        self.ingest.store.count_duplicate(message_id(msg))
        self.ingest.stats["duplicate"] += 1
        self.inbound["duplicate"] += 1

    def inbound_accounting(self) -> dict[str, Any]:
        """Every message received from peers, and what became of it: ``outcomes`` (the
        validator's verdicts, duplicates) plus ``dropped`` (before the validator) add up to
        ``received``; ``unaccounted`` is the difference (0 unless a message is in flight)."""
        outcomes = dict(sorted(self.inbound.items()))
        dropped = dict(sorted(self.pubsub.dropped.items()))
        received = self.pubsub.received
        return {"received": received, "outcomes": outcomes, "dropped": dropped,
                "unaccounted": received - sum(outcomes.values()) - sum(dropped.values())}

    # -- running --------------------------------------------------------------------------
    @asynccontextmanager
    async def services(self) -> AsyncIterator[None]:
        """Run pubsub and the router and join every topic; enter this BEFORE host.run()
        (trap 3), so that no peer meets a topic announced but not yet joined."""
        async with background_trio_service(self.pubsub):
            async with background_trio_service(self.router):
                await self.pubsub.wait_until_ready()
                for topic in self.topics():
                    await self._join(topic)
                yield

    async def run(self) -> None:
        """Drain the subscriptions, run the paced publisher."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for subscription in self._subscriptions.values():
                nursery.start_soon(self._drain, subscription)
            for row in self.ingest.store.unpublished(self.author.hex()):
                self._outbox.append((row.id, row.type, row.data))
            self._outbox_event.set()
            nursery.start_soon(self._publisher)

    async def _drain(self, subscription: Any) -> None:
        # Records are stored by the validator; reading keeps the 32-slot channel empty.
        async for _msg in subscription:
            self.delivered += 1

    def publish(self, record_id: str, record_type: str, data: bytes) -> None:
        """Queue a stored local record for gossip (the publisher paces it)."""
        self._outbox.append((record_id, record_type, data))
        self._outbox_event.set()

    @property
    def outbox_size(self) -> int:
        return len(self._outbox)

    async def _publisher(self) -> None:
        while True:
            if not self._outbox:
                self._outbox_event = trio.Event()
                await self._outbox_event.wait()
                continue
            record_id, record_type, data = self._outbox[0]
            topics = self.topics_of(record_type, data)
            await self._wait_for_peers(topics)
            wait = self._author_bucket.wait_time(self.clock())
            if wait > 0 and math.isfinite(wait):
                await trio.sleep(wait)
            await self._wait_for_queues()
            self._author_bucket.take(self.clock())
            await self.pubsub.publish(topics, data)
            self._outbox.popleft()
            self.ingest.store.mark_published(record_id)
            self.published += 1
            event(log, logging.DEBUG, "published", id=record_id, topics=",".join(topics))

    def live_mesh(self, topic: str) -> set[ID]:
        """Mesh peers with an open connection (the mesh forgets a dead peer a little later)."""
        connections = self.host.get_network().connections
        return {p for p in self.router.mesh.get(topic, ()) if connections.get(p)}

    def live_subscribers(self, topic: str) -> set[ID]:
        """Connected peers that joined a topic this node has not (a fanout's candidates)."""
        connections = self.host.get_network().connections
        return {p for p in self.pubsub.peer_topics.get(topic, ()) if connections.get(p)}

    async def _wait_for_peers(self, topics: list[str]) -> None:
        # Publishing into an empty mesh reaches nobody: wait for a connected peer in the mesh
        # of one of the record's topics this node joined (for topics it did not join, a
        # connected peer that joined one: the fanout). When the peers have been connected for
        # SUBSCRIPTION_GRACE seconds and none joined any of the record's topics (a domain no
        # peer here follows), publish at once rather than hold up the records behind it:
        # sync brings it to that domain's followers.
        joined = [t for t in topics if t in self._subscriptions]
        since: float | None = None
        while True:
            if any(self.live_mesh(t) for t in joined):
                return
            subscribed = any(self.live_subscribers(t) for t in topics)
            if subscribed and not joined:
                return
            now = trio.current_time()
            since = (since or now) if self.host.get_network().connections else None
            if not subscribed and since is not None and now - since >= SUBSCRIPTION_GRACE:
                return
            await trio.sleep(0.05)

    async def _wait_for_queues(self) -> None:
        high = self.settings.publish_queue_high_water
        while any(len(q) >= high for q in list(self.pubsub.peer_queues.values())):
            await trio.sleep(0.01)

    # -- views ----------------------------------------------------------------------------
    def mesh_topics(self, peer: ID) -> list[str]:
        return sorted(t for t, peers in self.router.mesh.items() if peer in peers)
