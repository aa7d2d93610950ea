"""The libp2p host: the node's key, TCP, Noise only (no plaintext, secio or TLS), yamux.

Relayed addresses (``.../p2p/<relay>/p2p-circuit/p2p/<peer>``) are dialled through the
circuit relay v2 client that :mod:`openmemory_node.reach` attaches to the host
(``host.openmemory_circuit``): py-libp2p 0.8.1's swarm skips them."""

from __future__ import annotations

from typing import Any, Sequence

import multiaddr
import trio

from .identity import Identity


#: seconds a peer's direct addresses are tried before its relayed ones
DIRECT_FIRST_TIMEOUT = 3.0


def build_host(identity: Identity, listen: Sequence[str] = (), *, mdns: bool = False):
    from libp2p import new_host
    from libp2p.crypto.x25519 import create_new_key_pair as x25519_key_pair
    from libp2p.security.noise.transport import PROTOCOL_ID as NOISE, Transport as Noise
    from libp2p.stream_muxer.yamux.yamux import PROTOCOL_ID as YAMUX, Yamux

    key_pair = identity.key_pair()
    host = new_host(
        key_pair=key_pair,
        muxer_opt={YAMUX: Yamux},
        sec_opt={NOISE: Noise(key_pair, noise_privkey=x25519_key_pair().private_key)},
        listen_addrs=[multiaddr.Multiaddr(a) for a in listen] or None,
        enable_mDNS=mdns,
        # QUIC (py-libp2p's transport/quic, TLS 1.3 inside QUIC) beside TCP when a listen
        # address asks for it (``/udp/4771/quic-v1``): docs/node.md, "QUIC"
        enable_quic=any("/quic" in a for a in listen),
    )
    _disable_auto_connector(host)
    return host


def _disable_auto_connector(host) -> None:
    """py-libp2p 0.8.1 dials any peer in its peerstore while it has fewer than 50
    connections. The node's reconnect loop is the one dialler: it honours the graylist and
    a backoff, and dials only bootstrap and known peers."""
    connector = getattr(host.get_network(), "auto_connector", None)
    if connector is None:
        return

    async def _no_dials(*args, **kwargs) -> None:
        return None

    connector.maybe_connect = _no_dials


async def dial(host, info) -> None:
    """Connect to ``info`` (a PeerInfo) now, whatever py-libp2p remembers of earlier failures.

    py-libp2p 0.8.1's swarm keeps a *negative cache*: a peer whose addresses all failed is
    refused for 60 s without a dial ("recently failed all addresses"). The node's reconnect
    loop is the one dialler and has its own backoff, so that cache only hides a peer that is
    up again: a node whose bootstrap peer was still starting would wait a minute or more
    (with the loop's own backoff doubling meanwhile) before its first connection. Every dial
    of ours lifts it first."""
    network = host.get_network()
    unblock = getattr(network, "unblock_peer", None)
    if unblock is not None:
        unblock(info.peer_id)
    circuit = [a for a in info.addrs if is_relayed(str(a))]
    if not circuit:
        await host.connect(info)
        return
    if info.peer_id in network.connections:
        return
    direct = [a for a in info.addrs if not is_relayed(str(a))]
    failure: Exception | None = None
    if direct:  # a direct address first: a relay is the way of last resort
        from libp2p.peer.peerinfo import PeerInfo

        try:
            # bounded: a private address behind someone else's NAT may only time out
            with trio.fail_after(DIRECT_FIRST_TIMEOUT):
                await host.connect(PeerInfo(info.peer_id, direct))
            return
        except Exception as exc:
            failure = exc
    client = getattr(host, "openmemory_circuit", None)
    if client is None:
        raise failure or ConnectionError("only relayed addresses, and no relay client")
    for addr in circuit:
        try:
            await client.dial(with_peer_id(addr, info.peer_id.to_base58()))
            return
        except Exception as exc:
            failure = exc
    assert failure is not None
    raise failure


def is_relayed(addr: str) -> bool:
    return "/p2p-circuit" in addr


def with_peer_id(addr: Any, peer: str) -> Any:
    """``addr`` ending in /p2p/<peer> (a relayed address names the relay before p2p-circuit)."""
    text = str(addr)
    if not text.endswith(f"/p2p/{peer}"):
        text = f"{text}/p2p/{peer}"
    return multiaddr.Multiaddr(text)


def peer_info(addr: str):
    """PeerInfo from a full multiaddr ending in /p2p/<peer id>; ValueError otherwise."""
    from libp2p.peer.peerinfo import info_from_p2p_addr

    try:
        maddr = multiaddr.Multiaddr(addr)
    except Exception as exc:
        raise ValueError(f"{addr!r} is not a multiaddr: {exc}") from None
    try:
        return info_from_p2p_addr(maddr)
    except Exception as exc:
        raise ValueError(f"{addr!r} does not end in /p2p/<peer id>: {exc}") from None
