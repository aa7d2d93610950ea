"""The node policy, sans-I/O: token buckets, the peer ledger, admission order."""

from __future__ import annotations

import pytest

from openmemory_node.policy import (
    AUTHOR_RATE, GRAYLISTED, PEER_RATE, TOO_LARGE, Action, Limits, NodePolicy, PeerLedger,
    RateLimiter, TokenBucket, Verdict, wire_error_action,
)
from openmemory_node.wire import ERROR_CODES, MAX_RECORD_BYTES


def test_token_bucket_starts_full_refills_at_rate_and_caps_at_burst():
    bucket = TokenBucket(rate=2.0, burst=3.0)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.wait_time(0.0) == pytest.approx(0.5)
    assert not bucket.take(0.4)
    assert bucket.take(0.5)
    assert [bucket.take(100.0) for _ in range(4)] == [True, True, True, False]  # capped at burst


def test_token_bucket_ignores_a_clock_going_backwards():
    bucket = TokenBucket(rate=1.0, burst=1.0)
    assert bucket.take(10.0)
    assert not bucket.take(5.0)  # no refill from a negative interval
    assert bucket.take(11.0)


def test_rate_limiter_keeps_one_bucket_per_key_and_forgets_the_least_recent():
    limiter = RateLimiter(rate=0.0, burst=1.0, max_keys=2)
    assert limiter.take("a", 0) and limiter.take("b", 0)
    assert not limiter.take("a", 0)
    assert limiter.take("c", 0)  # evicts "b", the least recently used
    assert len(limiter) == 2
    assert limiter.take("b", 0)  # a fresh bucket: "b" was forgotten


def reject(penalty: float = 10.0) -> Verdict:
    return Verdict(Action.REJECT, "signature", "", penalty)


def test_ledger_graylists_at_the_threshold_and_releases_with_hysteresis():
    limits = Limits(graylist_penalty=100, ungraylist_penalty=50, penalty_half_life=10)
    ledger = PeerLedger(limits)
    crossed = [ledger.record("p", reject(), 0.0) for _ in range(10)]
    assert crossed == [False] * 9 + [True]  # the 10th invalid record crosses 100
    assert ledger.is_graylisted("p", 0.0)
    assert ledger.score("p", 0.0) == pytest.approx(-100)
    # One half-life later the penalty is 50: still graylisted (release below 50 only).
    assert ledger.penalty("p", 10.0) == pytest.approx(50)
    assert ledger.is_graylisted("p", 9.9)
    assert not ledger.is_graylisted("p", 10.1)
    assert ledger.graylisted(10.1) == []


def test_ledger_ignores_do_not_penalise_and_accepts_are_not_recorded():
    ledger = PeerLedger(Limits())
    for _ in range(1000):
        ledger.record("p", Verdict(Action.IGNORE, AUTHOR_RATE), 0.0)
        ledger.record("q", Verdict(Action.ACCEPT, "ok"), 0.0)
    assert ledger.penalty("p", 0.0) == 0
    assert ledger.stats("p", 0.0)["ignored"] == 1000
    assert len(ledger) == 1  # nothing kept for a peer that only sent good records


def test_ledger_prune_forgets_recovered_peers_but_never_graylisted_ones():
    ledger = PeerLedger(Limits(penalty_half_life=1, graylist_penalty=20, ungraylist_penalty=10))
    ledger.record("mild", reject(5), 0.0)
    for _ in range(3):
        ledger.record("bad", reject(10), 0.0)
    assert ledger.is_graylisted("bad", 0.0)
    assert ledger.prune(0.0) == 0
    assert ledger.prune(10.0) == 2  # both decayed to ~0; "bad" was released on the way
    assert ledger.penalty("mild", 10.0) == 0 and len(ledger) == 0
    ledger.record("bad", reject(10), 10.0)
    ledger.record("bad", reject(10), 10.0)
    assert ledger.is_graylisted("bad", 10.0)
    assert ledger.prune(10.0, below=1000) == 0  # a graylisted peer is kept


def test_wire_error_codes_map_to_reject_except_clock_skew_and_version():
    actions = {code: wire_error_action(code) for code in ERROR_CODES}
    assert actions.pop("clock-skew") is Action.IGNORE
    assert actions.pop("version") is Action.IGNORE
    assert set(actions.values()) == {Action.REJECT}
    assert wire_error_action("a-code-from-the-future") is Action.REJECT  # fail closed


def test_admission_order_graylist_then_peer_rate_then_size():
    policy = NodePolicy(Limits(peer_rate=0.0, peer_burst=2, graylist_penalty=20, ungraylist_penalty=10))
    big = MAX_RECORD_BYTES + 1
    first = policy.admit_message(big, "p", True, 0.0)
    assert first.action is Action.REJECT and first.code == TOO_LARGE == "size"
    assert policy.admit_message(10, "p", True, 0.0) is None  # second token
    third = policy.admit_message(10, "p", True, 0.0)
    assert third.action is Action.REJECT and third.code == PEER_RATE  # it published them
    relayed = policy.admit_message(10, "p", False, 0.0)
    assert relayed.action is Action.IGNORE and relayed.code == PEER_RATE  # a relay is not punished
    assert policy.admit_message(10, "p", True, 0.0, solicited=True) is None  # we asked for it
    for verdict in (first, first):
        policy.account("p", verdict, 0.0)
    gate = policy.admit_message(10, "p", True, 0.0, solicited=True)
    assert gate.action is Action.IGNORE and gate.code == GRAYLISTED  # even solicited answers


def test_author_rate_ignores_and_pacing_wait_matches_the_bucket():
    policy = NodePolicy(Limits(author_rate=1.0, author_burst=2))
    assert policy.admit_author(b"k", 0.0).accepted
    assert policy.admit_author(b"k", 0.0).accepted
    over = policy.admit_author(b"k", 0.0)
    assert over.action is Action.IGNORE and over.code == AUTHOR_RATE and over.penalty == 0
    assert policy.author_wait(b"k", 0.0) == pytest.approx(1.0)
    assert policy.admit_author(b"other", 0.0).accepted  # per key


def test_penalties_of_rejections():
    limits = Limits(invalid_penalty=7, rate_penalty=2)
    policy = NodePolicy(limits)
    assert policy.wire_rejected("signature").penalty == 7
    assert policy.wire_rejected("clock-skew").penalty == 0
    assert policy.bad_input("wrong-topic").penalty == 7
    policy2 = NodePolicy(Limits(peer_rate=0, peer_burst=0.5, rate_penalty=2))
    assert policy2.admit_message(1, "p", True, 0.0).penalty == 2
