"""The reconnect plan, sans-I/O: exponential backoff with jitter, reset, forgetting."""

from __future__ import annotations

import random

import pytest

from openmemory_node.reconnect import ReconnectPlan, transport_addr


def plan(**kw) -> ReconnectPlan:
    return ReconnectPlan(backoff_initial=1.0, backoff_max=60.0, rng=random.Random(7), **kw)


def test_due_skips_connected_excluded_and_not_yet_due_peers():
    p = plan()
    p.add("a", ["/ip4/127.0.0.1/tcp/1"])
    p.add("b", ["/ip4/127.0.0.1/tcp/2"])
    p.add("c", ["/ip4/127.0.0.1/tcp/3"])
    p.add("no-addr", [])
    assert {x.peer_id for x in p.due(0.0, connected={"a"}, excluded={"b"})} == {"c"}
    p.failed("c", 0.0)
    assert "c" not in {x.peer_id for x in p.due(0.5, set(), set())}


def test_backoff_doubles_up_to_the_cap_with_twenty_percent_jitter():
    p = plan()
    p.add("a", ["/ip4/127.0.0.1/tcp/1"])
    delays = [p.failed("a", 0.0) for _ in range(10)]
    bases = [1, 2, 4, 8, 16, 32, 60, 60, 60, 60]
    for delay, base in zip(delays, bases):
        assert 0.8 * base <= delay <= 1.2 * base
    assert p.peers["a"].failures == 10


def test_success_resets_the_backoff():
    p = plan()
    p.add("a", ["/ip4/127.0.0.1/tcp/1"])
    for _ in range(5):
        p.failed("a", 0.0)
    p.succeeded("a", 100.0)
    assert p.peers["a"].failures == 0
    assert p.failed("a", 100.0) == pytest.approx(1.0, rel=0.2)


def test_a_dropped_connection_is_retried_after_the_initial_delay():
    p = plan()
    p.add("a", ["/ip4/127.0.0.1/tcp/1"])
    p.disconnected("a", 10.0)
    assert p.due(10.0, set(), set()) == []
    assert [x.peer_id for x in p.due(11.3, set(), set())] == ["a"]


def test_stale_peers_are_forgotten_but_bootstrap_peers_never():
    p = plan(forget_after=100.0)
    p.add("seen", ["/ip4/127.0.0.1/tcp/1"])
    p.add("boot", ["/ip4/127.0.0.1/tcp/2"], bootstrap=True)
    p.failed("seen", 0.0)
    p.failed("boot", 0.0)
    assert p.stale(50.0) == []
    assert p.stale(101.0) == ["seen"]


def test_addresses_are_merged_without_the_p2p_suffix():
    p = plan()
    p.add("a", ["/ip4/127.0.0.1/tcp/1/p2p/a"])
    p.add("a", ["/ip4/127.0.0.1/tcp/1", "/ip4/10.0.0.1/tcp/1"], bootstrap=True)
    assert p.peers["a"].addrs == ["/ip4/127.0.0.1/tcp/1", "/ip4/10.0.0.1/tcp/1"]
    assert p.peers["a"].bootstrap
    assert transport_addr("/dns4/node1/tcp/4771/p2p/12D3Koo") == "/dns4/node1/tcp/4771"
