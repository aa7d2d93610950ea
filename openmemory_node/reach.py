"""Reachability, relays and discovery: how a node behind a NAT takes part in the commons.

py-libp2p 0.8.1 ships the pieces; this module composes them for the node:

* **Relay (offer)**: with ``[relay] enabled`` the node serves circuit relay v2 ``hop``
  (``/libp2p/circuit/relay/0.2.0/hop``) within ``[relay]``'s limits: reservations held at once,
  relayed connections per reserved node, bytes and seconds per relayed connection.
* **Relay (use)**: every node speaks ``stop`` (it accepts a relayed connection) and dials
  relayed addresses (``host.openmemory_circuit``, used by :func:`openmemory_node.host.dial`).
* **Reachability** (:func:`verdict`, pure): ``[reachability] mode = "auto"`` decides that the
  node cannot be dialled when a peer reports (identify's observed address) an IP that is none of
  the node's own (a NAT rewrote it), or when no direct inbound connection arrived within
  ``probe_after`` seconds. Then it reserves a slot on each ``[reachability] relays`` (kept
  connected by the reconnect loop) and advertises ``<relay addr>/p2p/<relay>/p2p-circuit``.
* **Hole punching**: DCUtR (``/libp2p/dcutr``) runs on every relayed connection: both sides
  dial each other's predicted public address from their listen port at the same moment (TCP
  simultaneous open); where the NATs allow it the peers then hold a direct connection and the
  relayed one is closed after a grace period; where they do not, they stay relayed.
* **Discovery**: rendezvous (``/rendezvous/1.0.0``): with ``[discovery] rendezvous_server``
  the node is a rendezvous point; a node given rendezvous points registers its addresses
  (relayed ones included) under ``[discovery] namespace`` and looks the others up every
  ``interval`` seconds, and under ``<namespace>/<domain>`` for each of ``[discovery] domains``
  (the peers of a small domain are rarely among random connections: docs/simulations.md,
  "Domains at scale"); what it finds goes to the reconnect plan. mDNS (``[discovery] mdns``)
  feeds the plan the same way.

The node's view of all this is written to ``node.reach`` (JSON) in its data folder every
second: the verdict, reservations, advertised relayed addresses, and which peers are
connected directly and which through a relay.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket
import struct
import time
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import multiaddr
import trio

from .config import Config
from .log import event

log = logging.getLogger(__name__)

REACH_FILE = "node.reach"
RENDEZVOUS_TTL = 2 * 3600


def verdict(mode: str, *, elapsed: float, probe_after: float, inbound_direct: bool,
            observed_ips: set[str], local_ips: set[str]) -> str:
    """``public``, ``private`` or ``unknown`` (still probing). Pure: the node's reachability
    from what it has seen. A NAT seen rewriting our address wins over an inbound connection
    (a hole-punched connection is inbound too)."""
    if mode in ("public", "private"):
        return mode
    if any(ip not in local_ips for ip in observed_ips):
        return "private"
    if inbound_direct:
        return "public"
    if elapsed >= probe_after:
        return "private"
    return "unknown"


def local_ipv4s() -> set[str]:
    """The IPv4 address of every interface of this network namespace (SIOCGIFADDR)."""
    out = {"127.0.0.1"}
    for _, name in socket.if_nameindex():
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            out.add(socket.inet_ntoa(packed[20:24]))
    return out


def conn_is_relayed(conn: Any) -> bool:
    try:
        addrs = conn.get_transport_addresses() or []
    except Exception:
        return False
    return any("/p2p-circuit" in str(a) for a in addrs)


def conn_transport(conn: Any) -> str:
    """"relayed", "quic" or "tcp": what carries a connection."""
    if conn_is_relayed(conn):
        return "relayed"
    muxed = getattr(conn, "muxed_conn", None)
    return "quic" if "quic" in type(muxed).__name__.lower() else "tcp"


def relayed_addr(relay_addr: str, relay_peer: str) -> str:
    """Our address through a relay: ``<relay transport addr>/p2p/<relay>/p2p-circuit``."""
    return f"{relay_addr}/p2p/{relay_peer}/p2p-circuit"


def _quiet_clean_close(record: logging.LogRecord) -> bool:
    """py-libp2p 0.8.1's rendezvous point logs an ERROR, with an empty reason, each time a
    client closes its stream after an answer (the point waits for a next message): dropped."""
    message = record.getMessage()
    return not (message.startswith("Error handling stream from ") and message.endswith(": "))


class Reach:
    def __init__(self, host: Any, config: Config, home: Path, *,
                 found: Callable[[str, list[str], str], None],
                 clock: Callable[[], float] = time.time):
        from libp2p.relay.circuit_v2.config import RelayConfig, RelayRole
        from libp2p.relay.circuit_v2.protocol import CircuitV2Protocol
        from libp2p.relay.circuit_v2.resources import RelayLimits
        from libp2p.relay.circuit_v2.transport import CircuitV2Transport

        from .host import peer_info

        self.host = host
        self.config = config
        self.home = Path(home)
        #: the domains the node follows (None: every one), for the rendezvous namespaces
        self.followed: Callable[[], Any] | None = None
        self.found = found  # (peer id, addrs, source) -> None: into the reconnect plan
        self.clock = clock
        self.started = clock()
        r = config.relay
        self.limits = RelayLimits(
            duration=r.max_circuit_duration, data=r.max_circuit_bytes,
            max_circuit_conns=r.max_circuits, max_reservations=r.max_reservations,
            reservation_ttl=r.reservation_ttl,
        )
        self.circuit = CircuitV2Protocol(host, limits=self.limits, allow_hop=r.enabled)
        roles = RelayRole.STOP | RelayRole.CLIENT | (RelayRole.HOP if r.enabled else RelayRole(0))
        self.transport = CircuitV2Transport(host, self.circuit, RelayConfig(roles=roles, limits=self.limits))
        host.openmemory_circuit = self.transport  # host.dial uses it for relayed addresses
        self.dcutr = None
        if config.reachability.hole_punch:
            from libp2p.relay.circuit_v2.dcutr import DCUtRProtocol

            self.dcutr = DCUtRProtocol(host)
        self.rendezvous_service = None
        if config.discovery.rendezvous_server:
            from libp2p.discovery.rendezvous.service import RendezvousService

            self.rendezvous_service = RendezvousService(host)
            logging.getLogger("libp2p.discovery.rendezvous.service").addFilter(_quiet_clean_close)
        self.relays = [peer_info(a) for a in config.reachability.relays]
        self.rendezvous_points = [peer_info(a) for a in config.discovery.rendezvous]
        self.reservations: dict[str, float] = {}  # relay peer id -> expiry (unix time)
        self.inbound_direct = False
        self.state = "unknown"
        self.local_ips = local_ipv4s()
        self.registered_at: dict[str, tuple[str, ...]] = {}  # rendezvous point -> addrs registered
        self.by_namespace: dict[str, set[str]] = {}  # namespace -> peers found there
        self.last_lookup = 0.0
        self.discovered: dict[str, list[str]] = {}
        self.counters = {"reservations_made": 0, "reservation_failures": 0,
                         "registrations": 0, "lookups": 0, "lookup_failures": 0}
        if config.discovery.mdns:
            from libp2p.discovery.events.peerDiscovery import peerDiscovery

            peerDiscovery.register_peer_discovered_handler(self._mdns_found)

    # -- what the daemon asks -------------------------------------------------------------
    def bootstrap_addrs(self) -> list[str]:
        """Relays and rendezvous points: kept connected like bootstrap peers."""
        return list(dict.fromkeys([*self.config.reachability.relays, *self.config.discovery.rendezvous]))

    def note_connection(self, conn: Any) -> None:
        """A connection opened: a direct inbound one tells that we can be dialled."""
        direction = str(getattr(conn, "direction", "")).split(".")[-1].lower()
        if direction == "inbound" and not conn_is_relayed(conn):
            self.inbound_direct = True

    def relayed_addrs(self) -> list[str]:
        out = []
        for info in self.relays:
            pid = info.peer_id.to_base58()
            if self.reservations.get(pid, 0) > time.time():
                from .reconnect import transport_addr

                for a in info.addrs:
                    out.append(relayed_addr(transport_addr(str(a)), pid))
        return out

    def direct_addrs(self) -> list[str]:
        from .reconnect import transport_addr

        out = []
        for a in self.host.get_transport_addrs():
            text = transport_addr(str(a))
            if "/ip4/0.0.0.0/" in text:
                out.extend(text.replace("/ip4/0.0.0.0/", f"/ip4/{ip}/")
                           for ip in sorted(self.local_ips) if ip != "127.0.0.1")
            else:  # an address we listen on by name (loopback too: a test, one machine)
                out.append(text)
        return out

    def advertised(self) -> list[str]:
        return [*self.direct_addrs(), *self.relayed_addrs()]

    def connections(self) -> dict[str, str]:
        """peer id -> "direct" or "relayed" (direct if any of its connections is)."""
        out: dict[str, str] = {}
        for pid, conns in dict(self.host.get_network().connections).items():
            if not isinstance(conns, list):
                conns = [conns]
            kinds = {"relayed" if conn_is_relayed(c) else "direct" for c in conns}
            if kinds:
                out[pid.to_base58()] = "direct" if "direct" in kinds else "relayed"
        return out

    def transports(self) -> dict[str, list[str]]:
        """peer id -> the kinds of its open connections: "tcp", "quic", "relayed"."""
        out: dict[str, list[str]] = {}
        for pid, conns in dict(self.host.get_network().connections).items():
            kinds = {conn_transport(c) for c in (conns if isinstance(conns, list) else [conns])}
            if kinds:
                out[pid.to_base58()] = sorted(kinds)
        return out

    def view(self) -> dict[str, Any]:
        return {
            "state": self.state, "mode": self.config.reachability.mode,
            "relay_offered": self.config.relay.enabled,
            "reservations": {p: int(e) for p, e in self.reservations.items()},
            "relayed_addrs": self.relayed_addrs(), "advertised": self.advertised(),
            "connections": self.connections(),
            "transports": self.transports(),
            "relay_served": self.relay_served(),
            "discovered": sorted(self.discovered), "counters": dict(self.counters),
            "namespaces": {ns: sorted(self.by_namespace.get(ns, ())) for ns in self.namespaces()},
        }

    def relay_served(self) -> dict[str, int]:
        rm = self.circuit.resource_manager
        return {"reservations": len(getattr(rm, "_reservations", {}) or {}),
                "circuits": len(self.circuit._active_relays)}

    # -- running --------------------------------------------------------------------------
    @asynccontextmanager
    async def services(self) -> AsyncIterator[None]:
        """The relay and DCUtR services: entered before the host listens (their stream
        handlers must be there for the first connection)."""
        from libp2p.tools.anyio_service import background_trio_service

        async with AsyncExitStack() as stack:
            await stack.enter_async_context(background_trio_service(self.circuit))
            if self.dcutr is not None:
                await stack.enter_async_context(background_trio_service(self.dcutr))
            yield

    async def run(self) -> None:
        while True:
            try:
                await self._tick()
            except trio.Cancelled:
                raise
            except Exception:
                log.exception("reachability tick failed")
            try:
                self._write_view()
            except OSError:
                pass
            await trio.sleep(1.0)

    async def _tick(self) -> None:
        now = self.clock()
        observed = set()
        manager = getattr(self.host, "_observed_addr_manager", None)
        if manager is not None:
            for a in manager.addrs(min_observers=1):
                try:
                    observed.add(a.value_for_protocol("ip4"))
                except Exception:
                    pass
        observed.discard(None)
        state = verdict(self.config.reachability.mode, elapsed=now - self.started,
                        probe_after=self.config.reachability.probe_after,
                        inbound_direct=self.inbound_direct, observed_ips=observed,
                        local_ips=self.local_ips)
        if state != self.state:
            event(log, logging.INFO, "reachability", state=state, observed=",".join(sorted(observed)))
            self.state = state
        if state == "private":
            await self._reserve()
        await self._rendezvous(now)

    async def _reserve(self) -> None:
        from libp2p.relay.circuit_v2.protocol import PROTOCOL_ID as HOP

        connected = set(self.host.get_network().connections)
        for info in self.relays:
            pid = info.peer_id.to_base58()
            if info.peer_id not in connected:
                # a relay that restarts forgets its slots: reserve again once reconnected
                if self.reservations.pop(pid, None) is not None:
                    event(log, logging.INFO, "relay reservation lost", relay=pid)
                continue
            expires = self.reservations.get(pid, 0)
            if expires - time.time() > min(self.config.relay.reservation_ttl / 4, 300):
                continue
            ok = False
            with trio.move_on_after(15):
                try:
                    stream = await self.host.new_stream(info.peer_id, [HOP])
                except Exception as exc:  # the relay does not offer hop, or went away
                    event(log, logging.DEBUG, "relay reservation failed", relay=pid,
                          error=f"{type(exc).__name__}: {exc}"[:160])
                else:
                    try:
                        ok = await self.transport._make_reservation(stream, info.peer_id)
                    finally:
                        await stream.close()
            if ok:
                self.reservations[pid] = float(self.transport._reservations.get(info.peer_id, 0))
                self.counters["reservations_made"] += 1
                event(log, logging.INFO, "relay reservation", relay=pid,
                      ttl=int(self.reservations[pid] - time.time()),
                      address=relayed_addr(str(info.addrs[0]), pid) if info.addrs else "")
            else:
                self.counters["reservation_failures"] += 1
                self.reservations.pop(pid, None)

    def namespaces(self) -> list[str]:
        """The commons' namespace, and one per domain of ``[discovery] domains`` and per domain
        the node follows (``<namespace>/<domain>``)."""
        ns = self.config.discovery.namespace
        domains = set(self.config.discovery.domains)
        followed = self.followed() if self.followed is not None else None
        if followed is not None:  # (a node that follows every domain registers under the commons' only)
            domains |= set(followed) - {"general"}
        return [ns] + [f"{ns}/{d}" for d in sorted(domains)]

    async def _rendezvous(self, now: float) -> None:
        if not self.rendezvous_points:
            return
        from libp2p.discovery.rendezvous.client import RendezvousClient
        from libp2p.discovery.rendezvous.pb.rendezvous_pb2 import Message

        connected = set(self.host.get_network().connections)
        advertised = tuple(self.advertised())
        due = now - self.last_lookup >= self.config.discovery.interval
        points = [i for i in self.rendezvous_points if i.peer_id in connected]
        if not due and all(self.registered_at.get(i.peer_id.to_base58()) == advertised for i in points):
            return
        self_id = self.host.get_id().to_base58()
        for info in points:
            point = info.peer_id.to_base58()
            client = RendezvousClient(self.host, info.peer_id)
            register = bool(advertised) and (due or self.registered_at.get(point) != advertised)
            found: list[tuple[str, Any]] = []
            try:
                with trio.fail_after(15 * len(self.namespaces())):
                    for ns in self.namespaces():
                        if register:
                            # Built here, not by py-libp2p's helper: it strips the last /p2p/
                            # component, which in a relayed address is the relay's.
                            msg = Message()
                            msg.type = Message.REGISTER
                            msg.register.peer.id = self.host.get_id().to_bytes()
                            msg.register.peer.addrs.extend(multiaddr.Multiaddr(a).to_bytes() for a in advertised)
                            msg.register.ns = ns
                            msg.register.ttl = RENDEZVOUS_TTL
                            resp = await client._send_message(msg)
                            if resp is not None and resp.registerResponse.status == Message.ResponseStatus.OK:
                                self.counters["registrations"] += 1
                        peers, _ = await client.discover(ns, limit=1000)
                        found.extend((ns, p) for p in peers)
                        self.counters["lookups"] += 1
                if register:
                    self.registered_at[point] = advertised
                self.last_lookup = now
            except Exception as exc:
                self.counters["lookup_failures"] += 1
                event(log, logging.DEBUG, "rendezvous failed", point=point,
                      error=f"{type(exc).__name__}: {exc}"[:160])
            for ns, peer in found:
                pid = peer.peer_id.to_base58()
                addrs = [str(a) for a in peer.addrs]
                if pid == self_id or not addrs:
                    continue
                self.by_namespace.setdefault(ns, set()).add(pid)
                if self.discovered.get(pid) != addrs:
                    self.discovered[pid] = addrs
                    event(log, logging.INFO, "peer discovered", peer=pid, via="rendezvous",
                          namespace=ns, addrs=",".join(addrs))
                    self.found(pid, addrs, "rendezvous")

    def _mdns_found(self, info: Any) -> None:
        pid = info.peer_id.to_base58()
        if pid == self.host.get_id().to_base58():
            return
        addrs = [str(a) for a in info.addrs]
        if addrs and self.discovered.get(pid) != addrs:
            self.discovered[pid] = addrs
            event(log, logging.INFO, "peer discovered", peer=pid, via="mdns", addrs=",".join(addrs))
            self.found(pid, addrs, "mdns")

    def close(self) -> None:
        if self.config.discovery.mdns:
            from libp2p.discovery.events.peerDiscovery import peerDiscovery

            peerDiscovery.unregister_peer_discovered_handler(self._mdns_found)

    def _write_view(self) -> None:
        path = self.home / REACH_FILE
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.view(), sort_keys=True) + "\n")
        os.replace(tmp, path)
