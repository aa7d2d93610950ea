"""Keep the node connected: re-dial known and bootstrap peers, with exponential backoff.

py-libp2p never re-dials a peer that went away (trap 7), so the node does. The plan is
sans-I/O (:class:`ReconnectPlan`, an injected clock and random source); :class:`Reconnector`
is the loop that executes it on the host.

Rules: a peer is dialled when it is not connected, not graylisted and its next attempt is
due. A failed dial doubles its delay, from ``backoff_initial`` up to ``backoff_max``, with
+-20 % jitter so that peers restarting together do not dial in lockstep. A connection (in
either direction) resets the delay. A known peer that has been unreachable for
``forget_after`` seconds is forgotten; bootstrap peers never are.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import trio

from .config import ReconnectSection
from .log import event

log = logging.getLogger(__name__)

FORGET_AFTER = 7 * 24 * 3600.0


def transport_addr(addr: str) -> str:
    """The address without its /p2p/<peer id> suffix (the peer id is kept beside it). A relayed
    address keeps the relay's: ``/ip4/R/tcp/P/p2p/<relay>/p2p-circuit``."""
    if "/p2p-circuit" in addr:
        head, sep, tail = addr.rpartition("/p2p-circuit")
        return head + sep
    head, sep, _ = addr.partition("/p2p/")
    return head if sep else addr


@dataclass
class PeerPlan:
    peer_id: str
    addrs: list[str]
    bootstrap: bool = False
    delay: float = 0.0
    next_at: float = 0.0
    failures: int = 0
    last_ok: float | None = None
    first_failure: float | None = None


@dataclass
class ReconnectPlan:
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    forget_after: float = FORGET_AFTER
    rng: random.Random = field(default_factory=random.Random)
    peers: dict[str, PeerPlan] = field(default_factory=dict)

    def add(self, peer_id: str, addrs: list[str], *, bootstrap: bool = False) -> None:
        addrs = [transport_addr(a) for a in addrs]
        plan = self.peers.get(peer_id)
        if plan is None:
            self.peers[peer_id] = PeerPlan(peer_id, list(dict.fromkeys(addrs)), bootstrap)
            return
        plan.addrs = list(dict.fromkeys(plan.addrs + addrs))
        plan.bootstrap = plan.bootstrap or bootstrap

    def due(self, now: float, connected: set[str], excluded: set[str]) -> list[PeerPlan]:
        return [
            p for p in self.peers.values()
            if p.peer_id not in connected and p.peer_id not in excluded and p.addrs
            and now >= p.next_at
        ]

    def failed(self, peer_id: str, now: float) -> float:
        """Record a failed dial; returns the delay before the next attempt."""
        plan = self.peers[peer_id]
        plan.failures += 1
        if plan.first_failure is None:
            plan.first_failure = now
        base = self.backoff_initial if plan.delay <= 0 else min(self.backoff_max, plan.delay * 2)
        plan.delay = base
        jittered = base * self.rng.uniform(0.8, 1.2)
        plan.next_at = now + jittered
        return jittered

    def succeeded(self, peer_id: str, now: float) -> None:
        plan = self.peers.get(peer_id)
        if plan is None:
            return
        plan.failures = 0
        plan.delay = 0.0
        plan.next_at = now
        plan.last_ok = now
        plan.first_failure = None

    def disconnected(self, peer_id: str, now: float) -> None:
        """A connection dropped: try again soon, not at once (the peer may be restarting)."""
        plan = self.peers.get(peer_id)
        if plan is not None and plan.next_at < now + self.backoff_initial:
            plan.next_at = now + self.backoff_initial * self.rng.uniform(0.8, 1.2)

    def stale(self, now: float) -> list[str]:
        return [
            p.peer_id for p in self.peers.values()
            if not p.bootstrap and p.first_failure is not None
            and now - p.first_failure > self.forget_after
        ]

    def forget(self, peer_id: str) -> None:
        self.peers.pop(peer_id, None)


class Reconnector:
    """The loop: every ``interval`` seconds, dial the peers the plan says are due."""

    def __init__(
        self,
        host: Any,
        plan: ReconnectPlan,
        settings: ReconnectSection,
        *,
        clock: Callable[[], float],
        excluded: Callable[[], set[str]] = set,
        on_forget: Callable[[str], None] | None = None,
    ):
        self.host = host
        self.plan = plan
        self.settings = settings
        self.clock = clock
        self.excluded = excluded
        self.on_forget = on_forget
        self.dials = 0
        self.dial_failures = 0

    def connected_ids(self) -> set[str]:
        return {p.to_base58() for p in self.host.get_connected_peers()}

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            while True:
                now = self.clock()
                for peer_id in self.plan.stale(now):
                    self.plan.forget(peer_id)
                    if self.on_forget:
                        self.on_forget(peer_id)
                connected = self.connected_ids()
                for peer_id in connected:
                    plan = self.plan.peers.get(peer_id)
                    if plan is not None and plan.failures:
                        self.plan.succeeded(peer_id, now)
                for plan in self.plan.due(now, connected, self.excluded()):
                    # Not due again until this dial ends (success or failure resets it).
                    plan.next_at = now + self.settings.dial_timeout + 1
                    nursery.start_soon(self._dial, plan)
                await trio.sleep(self.settings.interval)

    async def _dial(self, plan: PeerPlan) -> None:
        from libp2p.peer.id import ID
        from libp2p.peer.peerinfo import PeerInfo
        import multiaddr

        from .host import dial

        self.dials += 1
        try:
            info = PeerInfo(ID.from_base58(plan.peer_id), [multiaddr.Multiaddr(a) for a in plan.addrs])
            with trio.fail_after(self.settings.dial_timeout):
                await dial(self.host, info)
        except Exception as exc:  # unreachable, refused, timed out, handshake failed
            self.dial_failures += 1
            delay = self.plan.failed(plan.peer_id, self.clock())
            event(log, logging.DEBUG, "dial failed", peer=plan.peer_id,
                  error=f"{type(exc).__name__}: {exc}"[:160], retry_in=round(delay, 1))
            return
        self.plan.succeeded(plan.peer_id, self.clock())
        event(log, logging.DEBUG, "dial succeeded", peer=plan.peer_id)
