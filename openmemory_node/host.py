"""The libp2p host: the node's key, TCP, Noise only (no plaintext, secio or TLS), yamux."""

from __future__ import annotations

from typing import Sequence

import multiaddr

from .identity import Identity


def build_host(identity: Identity, listen: Sequence[str] = ()):
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
    await host.connect(info)


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
