"""What the local API needs of the node: :class:`NodeInterface`.

The API modules (:mod:`openmemory_node.api`, :mod:`openmemory_node.api_commons`) are written
against this protocol, not against :class:`openmemory_node.daemon.Daemon`, which implements
it: the daemon imports the API, the API imports only this. A test, a simulation or another
front end can serve the same endpoints over any object with these members.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from .config import Config
    from .fetch import Fetch
    from .follow import Following
    from .gossip import Gossip
    from .httpserver import HttpServer
    from .identity import Identity
    from .ingest import Ingest
    from .policy import NodePolicy
    from .reconnect import ReconnectPlan, Reconnector
    from .status import CommonsStatus
    from .store import Store
    from .sync import Sync


class NodeInterface(Protocol):
    # identity and configuration
    home: Path
    config: "Config"
    identity: "Identity"
    peer_id: str
    clock: Callable[[], float]
    started_at: float
    api_address: tuple[str, int] | None
    # the parts the endpoints read and drive
    store: "Store"
    ingest: "Ingest"
    policy: "NodePolicy"
    commons: "CommonsStatus | None"
    gossip: "Gossip"
    fetch: "Fetch"
    sync: "Sync"
    following: "Following"
    plan: "ReconnectPlan"
    reconnector: "Reconnector"
    api: "HttpServer"

    def listen_addrs(self) -> list[str]:
        """Where peers reach this node (multiaddrs with /p2p/)."""

    def connected_ids(self) -> list[str]:
        """Peer ids with an open connection."""

    def graylisted_ids(self) -> set[str]:
        """Peers whose penalty put them on the graylist."""

    async def follow_domains(self, domains: list[str]) -> dict[str, Any]:
        """Follow the engine's domains (``PUT /v1/domains``): topics, namespaces, a sync soon."""

    async def dial(self, info: Any) -> None:
        """Connect to a PeerInfo now (within ``[reconnect] dial_timeout``; raises on failure)."""

    def block(self, peer: str) -> None:
        """Cut a peer off: disconnect, never dial, ignore."""

    def unblock(self, peer: str) -> None:
        """Lift :meth:`block`."""
