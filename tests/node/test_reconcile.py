"""Range-based set reconciliation (openmemory_node/reconcile.py), sans-I/O: two in-memory sets."""

from __future__ import annotations

import hashlib
import random

import pytest
from hypothesis import given, settings, strategies as st

from openmemory_node.reconcile import (
    FINGERPRINT, IDLIST, INFINITY, MISSING, SKIP, IdSet, Params, Range, Reconciler, SyncError,
    decode_message, decode_varint, encode_message, encode_varint, fingerprint, reconcile,
)


def ids(n: int, tag: str = "x") -> list[bytes]:
    return [b"\x12\x20" + hashlib.sha256(f"{tag}{i}".encode()).digest() for i in range(n)]


def check(mine: list[bytes], theirs: list[bytes], params: Params = Params()) -> tuple[int, int]:
    need, rounds, size = reconcile(IdSet(mine), IdSet(theirs), params)
    assert sorted(need) == sorted(set(theirs) - set(mine))
    assert len(need) == len(set(need))
    return rounds, size


@pytest.mark.parametrize("a,b", [(0, 0), (0, 1), (1, 0), (0, 5000), (5000, 0), (3, 3), (40, 40), (10_000, 10_000)])
def test_empty_identical_and_one_sided_sets(a, b):
    shared = ids(min(a, b))
    mine = shared + ids(a - len(shared), "mine")
    theirs = shared + ids(b - len(shared), "theirs")
    rounds, size = check(mine, theirs)
    if mine == theirs and a > 32:
        assert rounds == 1 and size < 60  # one fingerprint each way
    if a == b == 0:
        assert rounds == 1


def test_ten_thousand_differing_in_ten_costs_a_few_kilobytes():
    common = ids(10_000)
    extra_theirs = ids(5, "t")
    extra_mine = ids(5, "m")
    rounds, size = check(common + extra_mine, common + extra_theirs)
    # Sending every record would be ~3 MB (300-byte records); every id alone 340 KB.
    assert size < 0.05 * 10_000 * 34, size
    assert rounds <= 5


def test_messages_reach_the_default_limit_and_never_pass_it():
    # A fresh node (empty set) against 20,000 ids: the responder's answers fill 60,000 bytes.
    me, other = Reconciler(IdSet(), Params()), Reconciler(IdSet(ids(20_000)), Params())
    message = me.initiate()
    sizes = []
    while message is not None:
        answer = other.respond(message)
        sizes += [len(message), len(answer)]
        message = me.reply(answer)
    assert len(me.need) == 20_000
    assert max(sizes) <= 60_000
    assert max(sizes) > 60_000 - 600  # within one answer of the limit: it was reached


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.integers(0, 2000), st.integers(0, 300), st.integers(0, 300), st.integers(0, 2**32))
def test_every_message_fits_and_only_a_cut_one_ends_with_a_fingerprint_of_the_rest(shared, a, b, seed):
    pool = ids(shared + a + b, f"cut{seed}")
    mine, theirs = pool[:shared + a], pool[:shared] + pool[shared + a:]
    params = Params(max_message_bytes=4096)
    me, other = Reconciler(IdSet(mine), params), Reconciler(IdSet(theirs), params)
    message = me.initiate()
    while message is not None:
        answer = other.respond(message)
        assert len(message) <= 4096 and len(answer) <= 4096
        message = me.reply(answer)
    assert sorted(me.need) == sorted(set(theirs) - set(mine))


def test_the_writer_limit_is_inclusive_and_keeps_18_bytes_for_the_final_range():
    from openmemory_node.reconcile import FINAL_RANGE_BYTES, _Writer, encode_range

    assert FINAL_RANGE_BYTES == len(encode_range(Range(INFINITY, FINGERPRINT, bytes(16)))) == 18
    for final, limit in ((False, 4096 - 18), (True, 4096)):
        answer = Range(INFINITY if final else b"\x13\x00", SKIP)
        for over in (0, 1):
            writer = _Writer(4096)
            # a message of (limit - the answer's size + over) bytes so far, ending in a fingerprint
            writer.ranges = [Range(b"\x12", FINGERPRINT, bytes(16))]
            writer.size = limit - len(encode_range(answer)) + over
            assert writer.write([answer], final=final) is (over == 0), (final, over)


def test_a_fresh_node_gets_everything_within_the_message_budget():
    params = Params(max_message_bytes=8192)
    mine: list[bytes] = []
    theirs = ids(20_000)
    me, other = Reconciler(IdSet(mine), params), Reconciler(IdSet(theirs), params)
    message = me.initiate()
    largest = 0
    while message is not None:
        answer = other.respond(message)
        largest = max(largest, len(message), len(answer))
        message = me.reply(answer)
    assert sorted(me.need) == sorted(theirs)
    assert largest <= 8192
    assert me.rounds >= 20_000 * 34 // 8192  # the budget forced many rounds


def test_max_need_stops_early_and_the_next_session_goes_on():
    theirs = IdSet(ids(3000))
    mine = IdSet()
    need, _, _ = reconcile(mine, theirs, max_need=1000)
    assert len(need) == 1000
    for id_ in need:
        mine.add(id_)
    need2, _, _ = reconcile(mine, theirs)
    assert sorted(need + need2) == sorted(theirs)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(0, 3000), st.integers(0, 60), st.integers(0, 60), st.integers(0, 2**32),
       st.sampled_from([Params(), Params(branching=2, idlist_threshold=1, max_message_bytes=4096),
                        Params(branching=4, idlist_threshold=8)]))
def test_need_is_exactly_what_they_have_and_i_lack(shared, only_mine, only_theirs, seed, params):
    rng = random.Random(seed)
    pool = ids(shared + only_mine + only_theirs, str(seed))
    rng.shuffle(pool)
    common = pool[:shared]
    mine = common + pool[shared:shared + only_mine]
    theirs = common + pool[shared + only_mine:]
    check(mine, theirs, params)


def test_the_set_may_grow_between_rounds():
    theirs = IdSet(ids(2000))
    mine = IdSet(ids(1990))
    me, other = Reconciler(mine, Params()), Reconciler(theirs, Params())
    message = me.initiate()
    extra = ids(30, "late")
    while message is not None:
        answer = other.respond(message)
        if extra:
            theirs.add(extra.pop())  # records arrive at the responder mid-session
        message = me.reply(answer)
    assert set(ids(2000)[1990:]) <= set(me.need)


def test_fingerprint_is_order_independent_and_counts():
    a = ids(50)
    s = IdSet(a)
    assert s.fingerprint(0, 50) == fingerprint(reversed(a))
    assert fingerprint(a[:10]) == IdSet(a[:10]).fingerprint(0, 10)
    assert fingerprint([]) != fingerprint([b"\x12\x20" + bytes(32)])  # the count is in it


def test_messages_round_trip():
    lst = tuple(sorted(ids(3)))
    ranges = [Range(lst[0][:4], SKIP), Range(lst[2][:5], FINGERPRINT, bytes(16)),
              Range(INFINITY, MISSING, ids=(lst[2],))]
    data = encode_message(ranges)
    assert decode_message(data, max_ranges=10, allow_missing=True) == ranges
    assert decode_message(encode_message([Range(INFINITY, IDLIST, ids=lst)]), max_ranges=1,
                          allow_missing=False)[0].ids == lst


HOSTILE = {
    "empty": b"",
    "no end": bytes([3]) + b"\x12\x20\x05" + bytes([SKIP]),
    "unknown mode": bytes([0xFF, 9]),
    "bound too long": bytes([35]) + b"\x12" * 35 + bytes([SKIP]),
    "descending bounds": bytes([3]) + b"\x12\x20\x09" + bytes([SKIP, 3]) + b"\x12\x20\x05" + bytes([SKIP, 0xFF, SKIP]),
    "range after the end": bytes([0xFF, SKIP, 0xFF, SKIP]),
    "truncated fingerprint": bytes([0xFF, FINGERPRINT]) + bytes(5),
    "count beyond the data": bytes([0xFF, IDLIST]) + encode_varint(1000) + bytes(34),
    "id not a multihash": bytes([0xFF, IDLIST, 1]) + bytes(34),
    "ids not ascending": bytes([0xFF, IDLIST, 2]) + b"\x12\x20" + b"\x09" * 32 + b"\x12\x20" + b"\x01" * 32,
    "id outside its range": bytes([3]) + b"\x12\x20\x05" + bytes([IDLIST, 1]) + b"\x12\x20" + b"\x09" * 32 + bytes([0xFF, SKIP]),
    "non-minimal varint": bytes([0xFF, IDLIST, 0x80, 0x00]),
    "trailing mode missing": bytes([0xFF]),
    "bound at infinity spelled long": bytes([1, 0xFF, SKIP]),
    "missing to a responder": bytes([0xFF, MISSING, 0]),
    "id list one byte short": bytes([0xFF, IDLIST, 1]) + b"\x12\x20" + bytes(31),
    "empty bound": bytes([0, SKIP, 0xFF, SKIP]),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_messages_are_refused_with_a_code(name):
    responder = Reconciler(IdSet(ids(100)), Params())
    with pytest.raises(SyncError) as err:
        responder.respond(HOSTILE[name])
    assert err.value.code == "bad-message"


def test_too_many_ranges_is_refused():
    bounds = sorted(ids(20))
    data = encode_message([Range(b[:6], SKIP) for b in bounds] + [Range(INFINITY, SKIP)])
    with pytest.raises(SyncError) as err:
        Reconciler(IdSet(), Params(max_ranges=10)).respond(data)
    assert err.value.code == "too-many-ranges"


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_raise_only_sync_error(data):
    responder = Reconciler(IdSet(ids(200)), Params())
    initiator = Reconciler(IdSet(ids(150)), Params())
    for role in (responder.respond, initiator.reply):
        try:
            role(data)
        except SyncError:
            pass


def test_a_responder_that_never_agrees_is_bounded_by_rounds():
    # A liar answers every message with a fresh mismatching fingerprint: the initiator keeps
    # splitting; the caller's round limit (reconcile's max_rounds, the session's in the
    # daemon) is what ends it.
    me = Reconciler(IdSet(ids(5000)), Params())
    message = me.initiate()
    for i in range(64):
        lie = encode_message([Range(INFINITY, FINGERPRINT, hashlib.sha256(bytes([i])).digest()[:16])])
        message = me.reply(lie)
        assert message is not None and len(message) <= Params().max_message_bytes
    assert me.need == []


def test_varints():
    for n in (0, 1, 127, 128, 300, 2**32):
        value, pos = decode_varint(encode_varint(n), 0, limit=2**40)
        assert value == n and pos == len(encode_varint(n))
    with pytest.raises(SyncError):
        decode_varint(b"\xff" * 10, 0)
