"""The daemon: one trio nursery that owns the host, gossip, stream protocols, the reconnect
loop, the local API and housekeeping, and stops them all on SIGINT or SIGTERM.

Start order matters (py-libp2p traps 3 and 4): stream handlers are registered and the
pubsub services run *before* the host listens; the host is closed explicitly on the way out,
else its listener outlives the process's intent. Shutdown is bounded: the nursery is
cancelled, the host gets at most 1.5 s to close, the store is flushed and closed; then
``openmemory-node start`` leaves without Python's own teardown (1.5 to 3 s of py-libp2p's
object graph on a busy machine), so that SIGTERM stops it in about 0.1 s.

Extending the node (what part 2 plugs in, before :meth:`Daemon.run`):

* a stream protocol: an object with ``protocol_id``, ``async handle(stream, peer)`` and
  ``async run()`` appended to ``daemon.protocols`` (see :mod:`openmemory_node.streams` for
  framing with limits and deadlines, and :mod:`openmemory_node.fetch` for an example);
  records it receives go through ``daemon.ingest.accept(..., via="sync", solicited=True)``;
* API endpoints: ``@daemon.api.route("POST", "/v1/attest")`` (see :mod:`openmemory_node.api`;
  the endpoints see the daemon as a :class:`openmemory_node.interface.NodeInterface`);
* record status: ``Daemon(home, config, status_rules=...)`` with a pure
  :class:`openmemory_node.status.StatusRules`; hooks on accepted records:
  ``daemon.ingest.on_accept_hooks``;
* a new record type gets its topic (``/openmemory/1/<type>``) from ``gossip.RECORD_TYPES``.

Part 2 plugs in this way: :class:`openmemory_node.status.CommonsStatus` (the commons state
machine, rebuilt from the store at start and when the operator changes trust, revokers or
local revocations) is the default status rules; :class:`openmemory_node.sync.Sync` is the
second stream protocol (a session with each peer when it connects, then every
``[sync] interval``); :mod:`openmemory_node.api_commons` adds the attest, revoke, trust,
vouch, sync and peer-management endpoints.

Reachability (issue 33) plugs in the same way: :class:`openmemory_node.reach.Reach` (circuit
relay v2 offered and used, the reachability verdict, DCUtR hole punching, rendezvous and mDNS
discovery) has its services entered before the host listens and its loop in the nursery;
peers it finds go to the reconnect plan.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Callable

import multiaddr
import trio

from . import __version__, identity as identity_mod
from .api import install_v1
from .api_changes import install_changes
from .api_commons import install_commons
from .config import Config
from .fetch import Fetch
from .follow import DomainIndex, Following
from .gossip import Gossip
from .home import ADDRS_FILE, API_ADDR_FILE, LOCK_FILE, ensure_token
from .host import build_host, dial, peer_info
from .httpserver import HttpServer
from .ingest import Ingest
from .log import event
from .policy import NodePolicy
from .reach import REACH_FILE, Reach
from .reconnect import ReconnectPlan, Reconnector, transport_addr
from .status import CommonsStatus, StatusRules
from .store import Store
from .streams import StreamProtocol
from .sync import Sync

log = logging.getLogger(__name__)

#: Revocations received by sync and created within this many seconds are gossiped on.
RELAY_SYNCED_WITHIN = 86400.0


class DaemonError(Exception):
    pass


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def check_ports_free(listen: list[str]) -> None:
    """py-libp2p listens with SO_REUSEPORT, so a second daemon on the same port would start
    and silently share it: bind each TCP port once without it, to refuse that up front."""
    for addr in listen:
        maddr = multiaddr.Multiaddr(addr)
        protocols = [p.name for p in maddr.protocols()]
        if "tcp" not in protocols:
            continue
        port = int(maddr.value_for_protocol("tcp"))
        if port == 0:
            continue
        family = socket.AF_INET6 if "ip6" in protocols else socket.AF_INET
        host = maddr.value_for_protocol("ip6" if "ip6" in protocols else "ip4") \
            if ("ip4" in protocols or "ip6" in protocols) else ""
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            # SO_REUSEADDR: old connections in TIME_WAIT do not count, a live listener does.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as exc:
                raise DaemonError(f"cannot listen on {addr}: {exc.strerror or exc}") from None


def _expand_unspecified(addr: str) -> list[str]:
    """0.0.0.0 is where we listen, not where peers reach us: list loopback and our IPs."""
    if "/ip4/0.0.0.0/" not in addr:
        return [addr]
    ips = ["127.0.0.1"]
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            ip = info[4][0]
            if ip not in ips:
                ips.append(ip)
    except OSError:
        pass
    return [addr.replace("/ip4/0.0.0.0/", f"/ip4/{ip}/") for ip in ips]


class Daemon:
    def __init__(
        self,
        home: Path,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        status_rules: StatusRules | None = None,
    ):
        self.home = Path(home)
        self.config = config
        self.clock = clock
        self.identity = identity_mod.load(self.home)
        self.token = ensure_token(self.home)
        self.started_at = clock()
        self.store = Store.open(self.home, clock)
        self.policy = NodePolicy(config.limits)
        self.policy.blocked = set(self.store.blocked_peers())
        self.commons: CommonsStatus | None = None
        if status_rules is None:  # built from the store in run(), once the home is locked
            self.commons = CommonsStatus(config.commons, self.store, self.identity.public_key)
            status_rules = self.commons
        self.ingest = Ingest(
            self.store, self.policy, clock=clock,
            status_rules=status_rules, on_graylist=self._on_graylist,
        )
        self.host = build_host(self.identity, config.node.listen, mdns=config.discovery.mdns)
        self.peer_id = self.host.get_id().to_base58()
        #: relays, reachability, hole punching, rendezvous and mDNS (openmemory_node.reach)
        self.reach = Reach(self.host, config, self.home, found=self._found_peer, clock=clock)
        #: the domains this node follows, and those of the records it holds (openmemory_node.follow)
        self.following = Following(config.domains.follow, self.home)
        self.domains = DomainIndex.from_store(self.store)
        self.ingest.record_domains = self.domains.of_record
        self.ingest.follows = self.following.follows
        own = self.identity.public_key.hex()
        for (idb,) in self.store.conn.execute(
                "SELECT idb FROM records WHERE type = 'lesson' AND author = ?", (own,)):
            self.following.add_authored(self.domains.of_lesson(bytes(idb)) or ())
        self.ingest.on_accept_hooks.append(self._follow_own_domains)
        self.reach.followed = lambda: self.following.domains
        self.gossip = Gossip(self.host, self.ingest, config.gossip,
                             author=self.identity.public_key, clock=clock,
                             following=self.following, domains=self.domains)
        self.fetch = Fetch(self.host, self.ingest, config.fetch, clock)
        self.sync = Sync(self.host, self.ingest, config.sync, clock, connected=self.connected_ids,
                         following=self.following, domains=self.domains)
        self.ingest.on_accept_hooks.append(self._relay_synced_revocation)
        #: Stream protocols served by this node.
        self.protocols: list[StreamProtocol] = [self.fetch, self.sync]
        rc = config.reconnect
        self.plan = ReconnectPlan(backoff_initial=rc.backoff_initial, backoff_max=rc.backoff_max)
        self.reconnector = Reconnector(
            self.host, self.plan, rc, clock=clock, excluded=self._excluded_ids,
            on_forget=self.store.forget_peer,
        )
        api = config.api
        self.api = HttpServer(self.token, max_connections=api.max_connections,
                              header_timeout=api.header_timeout, keep_alive_timeout=api.header_timeout,
                              max_concurrent_requests=api.max_concurrent_requests)
        install_v1(self.api, self)  # the API sees this daemon as its NodeInterface
        install_commons(self.api, self)
        install_changes(self.api, self)
        self.api_address: tuple[str, int] | None = None
        self._nursery: trio.Nursery | None = None
        self._lock_fd: int | None = None
        self.stopping = trio.Event()
        self._announced: set[str] = set()  # peers whose connection was logged

    # -- peers ----------------------------------------------------------------------------
    def graylisted_ids(self) -> set[str]:
        return set(self.policy.ledger.graylisted(self.clock()))

    def _excluded_ids(self) -> set[str]:
        """Peers not to dial nor keep: graylisted ones and those the operator blocked."""
        return self.graylisted_ids() | self.policy.blocked

    def connected_ids(self) -> list[str]:
        return [p.to_base58() for p in self.host.get_connected_peers()]

    async def dial(self, info: Any) -> None:
        with trio.fail_after(self.config.reconnect.dial_timeout):
            await dial(self.host, info)

    def block(self, peer: str) -> None:
        """Cut a peer off (the operator's decision): ignore it, disconnect, never dial it."""
        self.policy.blocked.add(peer)
        self._cut_off(peer)

    def unblock(self, peer: str) -> None:
        self.policy.blocked.discard(peer)
        self._release_recovered()

    def _on_graylist(self, peer: str) -> None:
        """Called by the ingest when a peer's penalty crosses the graylist threshold."""
        self._cut_off(peer)

    def _cut_off(self, peer: str) -> None:
        """Out of the pubsub router (blacklisted) and disconnected."""
        from libp2p.peer.id import ID

        pid = ID.from_base58(peer)
        try:
            self.gossip.pubsub.add_to_blacklist(pid)
        except Exception:
            log.exception("blacklisting %s failed", peer)
        if self._nursery is not None:
            self._nursery.start_soon(self._disconnect, pid)

    async def _disconnect(self, pid: Any) -> None:
        with trio.move_on_after(2):
            try:
                await self.host.disconnect(pid)
            except Exception:
                pass

    def _release_recovered(self) -> None:
        """Lift the pubsub blacklist of peers whose penalty decayed below the threshold."""
        excluded = self._excluded_ids()
        for pid in list(self.gossip.pubsub.blacklisted_peers):
            if pid.to_base58() not in excluded:
                self.gossip.pubsub.remove_from_blacklist(pid)
                event(log, logging.INFO, "peer released from graylist", peer=pid.to_base58())

    def _relay_synced_revocation(self, record: Any, via: str, peer: str | None) -> None:
        """A recent revocation that reached us by sync (gossip missed it: we were offline, or
        on the other side of a partition) is gossiped on, so that our side of the network has
        it at once rather than at its next sync. Older ones, and other records, wait for sync:
        after a long absence they may be many, and would hold up our own publishing."""
        if (via == "sync" and record.record_type == "revocation"
                and record.created >= self.clock() - RELAY_SYNCED_WITHIN):
            from . import wire

            self.gossip.publish(record.id, record.record_type, wire.encode(record))

    def _follow_own_domains(self, record: Any, via: str, peer: str | None) -> None:
        """A lesson this node wrote: follow its domains (its attestations come back here)."""
        if peer is None and record.record_type == "lesson" and record.signer == self.identity.public_key:
            if self.following.add_authored(self.domains.of_record(record) or ()) and self._nursery is not None:
                self._nursery.start_soon(self._refollow)

    async def _refollow(self) -> None:
        await self.gossip.follow()
        self.sync.sync_soon()

    async def follow_domains(self, domains: list[str]) -> dict[str, Any]:
        """The engine's domains (``PUT /v1/domains``): kept, then the gossip topics and the
        rendezvous namespaces follow, and a sync session with each peer pulls what the newly
        followed domains hold."""
        changed = self.following.report(domains, self.clock())
        topics: dict[str, list[str]] = {"joined": [], "left": []}
        if changed:
            topics = await self.gossip.follow()
            self.sync.sync_soon()
        return {**self.following.status(), "changed": changed, **topics}

    def add_bootstrap(self, addrs: list[str]) -> None:
        for addr in addrs:
            info = peer_info(addr)  # ValueError for a bad address: reported by the CLI
            pid = info.peer_id.to_base58()
            if pid == self.peer_id:
                continue
            addrs = [transport_addr(str(a)) for a in info.addrs]
            self.plan.add(pid, addrs, bootstrap=True)
            self.store.remember_peer(pid, addrs, "bootstrap")

    def _found_peer(self, peer: str, addrs: list[str], source: str) -> None:
        """A peer found by discovery (rendezvous, mDNS): into the reconnect plan."""
        if peer == self.peer_id or peer in self._excluded_ids():
            return
        addrs = [transport_addr(a) for a in addrs]
        self.plan.add(peer, addrs)
        self.store.remember_peer(peer, addrs, source)

    def listen_addrs(self) -> list[str]:
        out = []
        for addr in self.host.get_addrs():
            out.extend(_expand_unspecified(str(addr)))
        return out

    # -- notifications from the network ---------------------------------------------------
    def _notifee(self) -> Any:
        from libp2p.abc import INotifee

        daemon = self

        class Notifee(INotifee):
            async def opened_stream(self, network: Any, stream: Any) -> None:
                pass

            async def closed_stream(self, network: Any, stream: Any) -> None:
                pass

            async def connected(self, network: Any, conn: Any) -> None:
                daemon._connected(conn)

            async def disconnected(self, network: Any, conn: Any) -> None:
                daemon._disconnected(conn)

            async def listen(self, network: Any, maddr: Any) -> None:
                pass

            async def listen_close(self, network: Any, maddr: Any) -> None:
                pass

        return Notifee()

    def _connected(self, conn: Any) -> None:
        pid = conn.muxed_conn.peer_id
        peer = pid.to_base58()
        if self.policy.ledger.is_graylisted(peer, self.clock()) or peer in self.policy.blocked:
            if self._nursery is not None:
                self._nursery.start_soon(self._disconnect, pid)
            return
        self.plan.succeeded(peer, self.clock())
        self.reach.note_connection(conn)
        self.sync.peer_connected(peer)
        if peer not in self._announced:
            self._announced.add(peer)
            direction = str(getattr(conn, "direction", "")).split(".")[-1].lower()
            event(log, logging.INFO, "peer connected", peer=peer, direction=direction)
        if self._nursery is not None:
            self._nursery.start_soon(self._learn_addrs, pid)

    def _disconnected(self, conn: Any) -> None:
        peer = conn.muxed_conn.peer_id.to_base58()
        if peer in {p.to_base58() for p in self.host.get_connected_peers()}:
            return
        self.plan.disconnected(peer, self.clock())
        self.sync.peer_disconnected(peer)
        self.store.peer_event(peer, connected=False)
        if peer in self._announced:
            self._announced.discard(peer)
            event(log, logging.INFO, "peer disconnected", peer=peer)

    async def _learn_addrs(self, pid: Any) -> None:
        """Remember a connected peer's listen addresses (identify fills them in)."""
        await trio.sleep(1.0)
        peer = pid.to_base58()
        try:
            addrs = [str(a) for a in self.host.get_peerstore().addrs(pid)]
        except Exception:
            addrs = []
        addrs = sorted({transport_addr(a) for a in addrs
                        if "/tcp/" in a and "/ip4/0.0.0.0/" not in a and "/ip6/::/" not in a})
        if addrs:
            self.store.remember_peer(peer, addrs, "seen")
            self.plan.add(peer, addrs)
        self.store.peer_event(peer, connected=True)

    # -- running --------------------------------------------------------------------------
    def _take_lock(self) -> None:
        path = self.home / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DaemonError(f"another openmemory-node is running on {self.home}")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _release_lock(self) -> None:
        for name in (API_ADDR_FILE, ADDRS_FILE, REACH_FILE):
            try:
                (self.home / name).unlink()
            except FileNotFoundError:
                pass
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _write_runtime_files(self) -> None:
        assert self.api_address is not None
        host, port = self.api_address
        shown = f"[{host}]" if ":" in host else host
        _write_atomic(self.home / API_ADDR_FILE, f"{shown}:{port}\n")
        _write_atomic(self.home / ADDRS_FILE, "".join(a + "\n" for a in self.listen_addrs()))

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        self._take_lock()
        try:
            if self.commons is not None:
                changed = self.commons.rebuild()  # the configuration may have changed while stopped
                if changed:
                    event(log, logging.INFO, "statuses recomputed", changed=changed)
            for peer in self.store.known_peers():
                self.plan.add(peer["peer_id"], peer["addrs"], bootstrap=peer["source"] == "bootstrap")
            self.add_bootstrap(self.config.node.bootstrap)
            self.add_bootstrap(self.reach.bootstrap_addrs())
            self.host.get_network().register_notifee(self._notifee())
            for protocol in self.protocols:
                self.host.set_stream_handler(protocol.protocol_id, self._stream_handler(protocol))
            check_ports_free(self.config.node.listen)
            listen = [multiaddr.Multiaddr(a) for a in self.config.node.listen]
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(self.gossip.services())  # before host.run
                await stack.enter_async_context(self.reach.services())
                await stack.enter_async_context(self.host.run(listen))
                nursery = await stack.enter_async_context(trio.open_nursery())
                self._nursery = nursery
                api_host, api_port = self.config.api_host_port()
                self.api_address = await nursery.start(self.api.serve, api_host, api_port)
                self._write_runtime_files()
                nursery.start_soon(self._watch_signals, nursery.cancel_scope)
                nursery.start_soon(self.gossip.run)
                nursery.start_soon(self.reconnector.run)
                for protocol in self.protocols:
                    nursery.start_soon(protocol.run)
                nursery.start_soon(self._housekeeping)
                nursery.start_soon(self.reach.run)
                event(log, logging.INFO, "node started", peer_id=self.peer_id,
                      listen=",".join(self.listen_addrs()),
                      api=f"http://{self.api_address[0]}:{self.api_address[1]}",
                      version=__version__)
                task_status.started(self)
                await self.stopping.wait()
                nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            self.reach.close()
            with trio.CancelScope(shield=True):
                with trio.move_on_after(1.5):
                    try:
                        await self.host.close()
                    except Exception:
                        log.debug("host.close failed", exc_info=True)
            try:
                self.store.close()
            finally:
                self._release_lock()
            event(log, logging.INFO, "node stopped", peer_id=self.peer_id)

    def stop(self) -> None:
        self.stopping.set()

    async def _watch_signals(self, scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                event(log, logging.INFO, "stopping", signal=signal.Signals(signum).name)
                self.stop()
                return

    def _stream_handler(self, protocol: StreamProtocol) -> Callable[[Any], Any]:
        async def handler(stream: Any) -> None:
            peer = stream.muxed_conn.peer_id.to_base58()
            try:
                await protocol.handle(stream, peer)
            except Exception:
                log.exception("%s handler failed for %s", protocol.protocol_id, peer)
                try:
                    await stream.reset()
                except Exception:
                    pass

        return handler

    async def _housekeeping(self) -> None:
        while True:
            await trio.sleep(1.0)
            try:
                self.store.flush()
                self._release_recovered()
                self.policy.ledger.prune(self.clock())
            except Exception:
                log.exception("housekeeping failed")


