"""Where the node keeps its files, and its TOML configuration.

The data folder is ``--home DIR``, else ``$OPENMEMORY_NODE_HOME``, else
``$XDG_DATA_HOME/openmemory-node`` (``~/.local/share/openmemory-node``). It holds:

    config.toml     this configuration (written by ``init``; every key optional)
    identity.key    the node's Ed25519 key (mode 0600)
    api.token       the local API's bearer token (mode 0600)
    node.db         the SQLite store (WAL mode: node.db-wal, node.db-shm beside it)
    node.lock       held by the running daemon (one daemon per folder)
    api.addr        the running daemon's API address (removed on exit)
    node.addrs      the running daemon's listen multiaddrs, one per line

Unknown keys are an error, so that a typo does not silently fall back to a default.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .policy import Limits

CONFIG_FILE = "config.toml"
DEFAULT_LISTEN = "/ip4/0.0.0.0/tcp/4771"
DEFAULT_API = "127.0.0.1:4772"


class ConfigError(Exception):
    pass


def resolve_home(home: str | os.PathLike | None = None) -> Path:
    if home:
        return Path(home).expanduser().resolve()
    env = os.environ.get("OPENMEMORY_NODE_HOME")
    if env:
        return Path(env).expanduser().resolve()
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return (Path(xdg).expanduser() / "openmemory-node").resolve()


@dataclass
class NodeSection:
    listen: list[str] = field(default_factory=lambda: [DEFAULT_LISTEN])
    bootstrap: list[str] = field(default_factory=list)


@dataclass
class ApiSection:
    address: str = DEFAULT_API  # HOST:PORT, loopback only; port 0 picks a free one (see api.addr)
    max_connections: int = 128  # past it, the connection waiting longest for its head is closed
    header_timeout: float = 10.0  # seconds to send a request head (and idle time between requests)
    max_concurrent_requests: int = 16  # handlers running at once (token holders only)


@dataclass
class LogSection:
    level: str = "info"
    libp2p_level: str = "warning"
    format: str = "text"  # "text" (key=value) or "json" (one object per line)


@dataclass
class GossipSection:
    degree: int = 6
    degree_low: int = 4
    degree_high: int = 12
    heartbeat_interval: int = 1
    outbound_queue: int = 1024  # per-peer outbound RPC queue (py-libp2p default: 32)
    seen_ttl: int = 120
    publish_queue_high_water: int = 256  # pace local publishing above this queue depth


@dataclass
class ReconnectSection:
    interval: float = 1.0  # how often the loop looks for peers to re-dial
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    dial_timeout: float = 10.0


@dataclass
class FetchSection:
    max_requests_per_stream: int = 16
    request_timeout: float = 10.0
    max_concurrent_streams: int = 64
    max_streams_per_peer: int = 4  # served at once to one peer (and opened at once to one)


@dataclass
class CommonsSection:
    policy: str = "trusted"  # independence policy: "trusted" or "open" (PROTOCOL.md)
    threshold: int = 3  # N: counted confirmations that make a candidate common
    fade_window: int = 30 * 86400  # seconds: failures vs confirmations within it fade a lesson
    trust: list[str] = field(default_factory=list)  # keys (hex or peer id) whose votes count
    revokers: list[str] = field(default_factory=list)  # keys whose revocations apply here
    trust_self: bool = True  # this node's own key is in its trust list
    team: list[str] = field(default_factory=list)  # the owner's team: their lessons shown unverified, votes count
    blocked: list[str] = field(default_factory=list)  # authors whose records are dropped, lessons removed


@dataclass
class SyncSection:
    interval: float = 30.0  # seconds between anti-entropy sessions with each connected peer
    connect_delay: float = 0.5  # a session starts this long after a peer connects
    session_timeout: float = 120.0  # a whole session, reconciliation and transfer
    frame_timeout: float = 10.0  # one message
    max_rounds: int = 64  # reconciliation rounds per record type per session
    max_records: int = 20000  # records pulled (client) or served (server) per session
    max_message_bytes: int = 60000  # largest reconciliation message sent
    max_receive_bytes: int = 131072  # largest message accepted
    max_inbound_sessions: int = 16  # sessions served at once
    max_outbound_sessions: int = 4  # sessions run at once
    session_rate: float = 0.2  # sessions per second served to one peer
    session_burst: float = 6.0


@dataclass
class RelaySection:
    enabled: bool = False  # offer circuit relay v2 (hop) to nodes that cannot be dialled
    max_reservations: int = 32  # slots held at once (each a node reachable through us)
    max_circuits: int = 8  # relayed connections at once per reserved node
    max_circuit_bytes: int = 16 * 1024 * 1024  # bytes one relayed connection may carry
    max_circuit_duration: int = 600  # seconds one relayed connection may last
    reservation_ttl: int = 3600  # seconds a slot lasts unless refreshed


@dataclass
class ReachabilitySection:
    mode: str = "auto"  # "auto" (detect), "public" (never use a relay), "private" (always)
    relays: list[str] = field(default_factory=list)  # relays to reserve a slot on when unreachable
    probe_after: float = 20.0  # auto: no inbound direct connection within this many seconds
    hole_punch: bool = True  # DCUtR: upgrade a relayed connection to a direct one


@dataclass
class DiscoverySection:
    mdns: bool = False  # multicast DNS on the local network (off: it answers on every interface)
    rendezvous: list[str] = field(default_factory=list)  # rendezvous points (full multiaddrs)
    rendezvous_server: bool = False  # serve as a rendezvous point for others
    namespace: str = "openmemory/1"  # the rendezvous namespace (one per commons)
    domains: list[str] = field(default_factory=list)  # also register and look up <namespace>/<domain>
    interval: float = 30.0  # seconds between registrations and look-ups


@dataclass
class DomainsSection:
    # Domains this node follows beyond those its engine reports (PUT /v1/domains), "general"
    # always; "*" for every domain. Empty, and no report yet: every domain (as before domains).
    follow: list[str] = field(default_factory=list)


@dataclass
class Config:
    node: NodeSection = field(default_factory=NodeSection)
    api: ApiSection = field(default_factory=ApiSection)
    log: LogSection = field(default_factory=LogSection)
    gossip: GossipSection = field(default_factory=GossipSection)
    reconnect: ReconnectSection = field(default_factory=ReconnectSection)
    fetch: FetchSection = field(default_factory=FetchSection)
    commons: CommonsSection = field(default_factory=CommonsSection)
    sync: SyncSection = field(default_factory=SyncSection)
    limits: Limits = field(default_factory=Limits)
    relay: RelaySection = field(default_factory=RelaySection)
    reachability: ReachabilitySection = field(default_factory=ReachabilitySection)
    discovery: DiscoverySection = field(default_factory=DiscoverySection)
    domains: DomainsSection = field(default_factory=DomainsSection)

    def api_host_port(self) -> tuple[str, int]:
        return parse_host_port(self.api.address)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_SECTION_TYPES = {
    "node": NodeSection,
    "api": ApiSection,
    "log": LogSection,
    "gossip": GossipSection,
    "reconnect": ReconnectSection,
    "fetch": FetchSection,
    "commons": CommonsSection,
    "sync": SyncSection,
    "limits": Limits,
    "relay": RelaySection,
    "reachability": ReachabilitySection,
    "discovery": DiscoverySection,
    "domains": DomainsSection,
}


def parse_host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise ConfigError(f"API address {text!r} is not HOST:PORT")
    host = host.strip("[]")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"API address {text!r}: port {port!r} is not a number")
    if not 0 <= number <= 65535:
        raise ConfigError(f"API address {text!r}: port out of range")
    return host, number


def _coerce(section: str, name: str, default: Any, value: Any) -> Any:
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif isinstance(default, list):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
    else:
        ok = True
    if not ok:
        raise ConfigError(
            f"[{section}] {name} = {value!r}: expected {type(default).__name__}"
        )
    return value


def from_dict(data: dict[str, Any]) -> Config:
    config = Config()
    for section, values in data.items():
        if section not in _SECTION_TYPES:
            raise ConfigError(f"unknown section [{section}] (known: {', '.join(_SECTION_TYPES)})")
        if not isinstance(values, dict):
            raise ConfigError(f"[{section}] must be a table")
        current = getattr(config, section)
        known = {f.name for f in fields(current)}
        changes = {}
        for name, value in values.items():
            if name not in known:
                raise ConfigError(f"unknown key {name!r} in [{section}] (known: {', '.join(sorted(known))})")
            changes[name] = _coerce(section, name, getattr(current, name), value)
        setattr(config, section, dataclasses.replace(current, **changes))
    validate(config)
    return config


def check_loopback(host: str, what: str) -> None:
    """The local API listens on loopback only: it has no TLS, and its bearer token, readable by
    the local user alone, is the only lock. Anything else is refused, with that reason."""
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"{what} {host!r} is not a loopback address: the local API must listen on 127.0.0.1 "
            "(or another 127.x.y.z), ::1 or localhost, because it has no TLS and its token is its "
            "only lock (reach it from elsewhere through an SSH tunnel)")


def validate(config: Config) -> None:
    host, _ = config.api_host_port()
    check_loopback(host, f"[api] address {config.api.address!r}: host")
    if config.api.max_connections < 1 or config.api.max_concurrent_requests < 1:
        raise ConfigError("[api] max_connections and max_concurrent_requests must be at least 1")
    if config.api.header_timeout <= 0:
        raise ConfigError("[api] header_timeout must be positive")
    if config.log.format not in ("text", "json"):
        raise ConfigError("[log] format must be \"text\" or \"json\"")
    g = config.gossip
    if not (0 < g.degree_low <= g.degree <= g.degree_high):
        raise ConfigError("[gossip] needs 0 < degree_low <= degree <= degree_high")
    if g.heartbeat_interval < 1:
        raise ConfigError("[gossip] heartbeat_interval is a whole number of seconds >= 1")
    c = config.commons
    from .commons import POLICIES

    if c.policy not in POLICIES:
        raise ConfigError(f"[commons] policy must be one of {', '.join(POLICIES)}, not {c.policy!r}")
    if c.threshold < 1 or c.fade_window < 1:
        raise ConfigError("[commons] threshold and fade_window must be at least 1")
    from .identity import parse_public_key

    for name in ("trust", "revokers", "team", "blocked"):
        for text in getattr(c, name):
            try:
                parse_public_key(text)
            except ValueError as exc:
                raise ConfigError(f"[commons] {name}: {exc}") from None
    sy = config.sync
    for name in ("interval", "session_timeout", "frame_timeout", "session_rate", "session_burst"):
        if getattr(sy, name) <= 0:
            raise ConfigError(f"[sync] {name} must be positive")
    for name in ("max_rounds", "max_records", "max_inbound_sessions", "max_outbound_sessions"):
        if getattr(sy, name) < 1:
            raise ConfigError(f"[sync] {name} must be at least 1")
    if not 4096 <= sy.max_message_bytes <= sy.max_receive_bytes:
        raise ConfigError("[sync] needs 4096 <= max_message_bytes <= max_receive_bytes")
    lim = config.limits
    if lim.ungraylist_penalty > lim.graylist_penalty:
        raise ConfigError("[limits] ungraylist_penalty must not exceed graylist_penalty")
    for name in ("peer_rate", "peer_burst", "author_rate", "author_burst", "fetch_rate",
                 "fetch_burst", "penalty_half_life", "max_record_bytes", "fresh_key_rate",
                 "fresh_key_burst", "max_without_standing"):
        if getattr(lim, name) <= 0:
            raise ConfigError(f"[limits] {name} must be positive")
    validate_reach(config)
    f = config.fetch
    for name in ("max_requests_per_stream", "max_concurrent_streams", "max_streams_per_peer"):
        if getattr(f, name) < 1:
            raise ConfigError(f"[fetch] {name} must be at least 1")


def validate_reach(config: Config) -> None:
    """[relay], [reachability], [discovery]: counts and times positive, addresses full
    multiaddrs ending in /p2p/<peer id> (checked by the CLI, which knows multiaddr)."""
    r = config.relay
    for name in ("max_reservations", "max_circuits", "max_circuit_bytes",
                 "max_circuit_duration", "reservation_ttl"):
        if getattr(r, name) < 1:
            raise ConfigError(f"[relay] {name} must be at least 1")
    if config.reachability.mode not in ("auto", "public", "private"):
        raise ConfigError('[reachability] mode must be "auto", "public" or "private"')
    if config.reachability.probe_after <= 0 or config.discovery.interval <= 0:
        raise ConfigError("[reachability] probe_after and [discovery] interval must be positive")
    ns = config.discovery.namespace
    if not ns or len(ns) > 255:
        raise ConfigError("[discovery] namespace must be 1 to 255 characters")
    from openmemory_protocol.domains import DOMAINS

    unknown = sorted(set(config.discovery.domains) - set(DOMAINS))
    if unknown:
        raise ConfigError(f"[discovery] domains: unknown {', '.join(unknown)} (known: {', '.join(DOMAINS)})")
    unknown = sorted(set(config.domains.follow) - set(DOMAINS) - {"*"})
    if unknown:
        raise ConfigError(f"[domains] follow: unknown {', '.join(unknown)} (known: {', '.join(DOMAINS)}, or \"*\")")


def load(home: Path) -> Config:
    path = Path(home) / CONFIG_FILE
    if not path.exists():
        return Config()
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: {exc}")
    try:
        return from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}")


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(value)


_COMMENTS = {
    "node": "libp2p listen addresses, and peers to dial at start and re-dial when they drop",
    "api": "the local HTTP API (JSON, /v1/...): loopback only; clients send the token in api.token",
    "log": "structured logs on stderr; libp2p_level sets py-libp2p's own loggers",
    "gossip": "GossipSub mesh parameters (heartbeat in whole seconds)",
    "reconnect": "re-dialling known and bootstrap peers with exponential backoff (seconds)",
    "fetch": "the /openmemory/fetch/1.0.0 stream protocol",
    "commons": "the commons state machine: independence policy, threshold N, fade window (s), "
               "trusted keys, revokers, the team and blocked authors (hex public keys or peer ids; "
               "the `trust`, `revokers`, `team` and `block` commands add more at run time)",
    "sync": "the /openmemory/sync/1.0.0 anti-entropy protocol (seconds, counts, bytes)",
    "limits": "admission policy: sizes, clock skew, rate limits (per second), scoring penalties",
    "relay": "offer circuit relay v2 to nodes behind NAT, within these limits (docs/node.md)",
    "reachability": "behind a NAT: reserve a slot on a relay and advertise the relayed address; "
                    "then upgrade to a direct connection by hole punching (DCUtR)",
    "discovery": "finding peers beyond the bootstrap list: mDNS on the local network, "
                 "rendezvous points (one well-known address is enough)",
    "domains": "the ecosystems whose lessons this node takes (git, python, node, ...; \"*\" for all): "
               "with those its engine reports, and general; empty and no report: every domain",
}


def render(config: Config) -> str:
    lines = [
        "# openmemory-node configuration (TOML). Every key is optional: a missing key takes",
        "# the default shown by `openmemory-node config`. Unknown keys are an error.",
    ]
    for section, values in config.to_dict().items():
        lines.append("")
        lines.append(f"# {_COMMENTS[section]}")
        lines.append(f"[{section}]")
        for name, value in values.items():
            lines.append(f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def write(home: Path, config: Config) -> Path:
    path = Path(home) / CONFIG_FILE
    tmp = path.with_suffix(".toml.tmp")
    tmp.write_text(render(config))
    os.replace(tmp, path)
    return path
