"""The commons state machine (openmemory_node/commons.py), on real signed records."""

from __future__ import annotations

import random

import nacl.signing
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from openmemory_node import wire
from openmemory_node.commons import (
    CANDIDATE, COMMON, COUNTED, EFFECTIVE, FADED, NO_EFFECT, NOT_COUNTED, PENDING, REVOKED,
    TRANSITIONS, Commons, CommonsConfig, evaluate,
)

T0 = 1_760_000_000
DAY = 86400
TEXT = "The user corrected the agent for using pip; this project uses uv."


def key(n: int) -> nacl.signing.SigningKey:
    return nacl.signing.SigningKey(bytes([n]) * 32)


def pub(k: nacl.signing.SigningKey) -> bytes:
    return bytes(k.verify_key)


def lesson(k, text=TEXT, created=T0, parents=(), kind="correction"):
    return wire.new_lesson(k, text=text, kind=kind, strength=1000, provenance=bytes(32),
                           derived_from=[p.id for p in parents], created=created)


def attest(k, target, verdict="confirmed", created=T0 + 60, met_before=False):
    matched = 1 if verdict == "confirmed" else 0
    return wire.new_attestation(k, lesson_id=target.id, verdict=verdict, met_before=met_before,
                                evidence={"sessions": 3, "matched": matched, "window": 7 * DAY},
                                created=created)


def revoke(k, target, created=T0 + 600, code="incorrect"):
    return wire.new_revocation(k, target=target.id, reason_code=code, reason="", created=created)


def vouch(k, subject, created=T0):
    return wire.new_vouch(k, subject=pub(subject), created=created)


AUTHOR = key(1)
ATTESTERS = [key(10 + i) for i in range(5)]
OPEN = CommonsConfig(policy="open")


def trusting(*keys, **kw) -> CommonsConfig:
    return CommonsConfig(trust=frozenset(pub(k) for k in keys), **kw)


def test_the_transition_table_is_the_documented_one():
    assert [(a, on, b) for a, on, _, b in TRANSITIONS] == [
        (CANDIDATE, "confirmed", COMMON), (COMMON, "failed", FADED), (FADED, "confirmed", COMMON)]


def test_three_independent_confirmations_promote_and_not_fewer():
    lsn = lesson(AUTHOR)
    machine = Commons(OPEN)
    assert machine.add(lsn) == {lsn.id: CANDIDATE}
    a1, a2, a3 = (attest(k, lsn, created=T0 + 60 * i) for i, k in enumerate(ATTESTERS[:3], 1))
    assert machine.add(a1) == {a1.id: COUNTED}
    assert machine.add(a2) == {a2.id: COUNTED}
    assert machine.add(a3) == {a3.id: COUNTED, lsn.id: COMMON}
    history = machine.explain(lsn.id)["group"]["history"]
    assert [(h["from"], h["to"], h["cause"]) for h in history] == [
        (None, CANDIDATE, lsn.id), (CANDIDATE, COMMON, a3.id)]


def test_votes_that_are_not_independent_do_not_count():
    lsn = lesson(AUTHOR)
    own = attest(AUTHOR, lsn)
    met = attest(ATTESTERS[0], lsn, met_before=True)
    twice = [attest(ATTESTERS[1], lsn, created=T0 + 60 + i) for i in range(3)]
    statuses = evaluate([lsn, own, met, *twice], OPEN)
    assert statuses[lsn.id] == CANDIDATE  # one independent key, whatever it repeats
    assert statuses[own.id] == NOT_COUNTED and statuses[met.id] == NOT_COUNTED
    assert all(statuses[t.id] == COUNTED for t in twice)
    machine = Commons(OPEN)
    for r in (lsn, own, met, *twice):
        machine.add(r)
    assert machine.explain(own.id)["reason"] == "author"
    assert machine.explain(met.id)["reason"] == "met-before"
    assert machine.explain(lsn.id)["tally"]["confirmers"] == 1


def test_sybil_keys_promote_nothing_under_trusted_but_trusted_and_vouched_keys_do():
    lsn = lesson(AUTHOR)
    sybils = [attest(key(100 + i), lsn, created=T0 + 60 + i) for i in range(20)]
    config = trusting(*ATTESTERS[:2])
    statuses = evaluate([lsn, *sybils], config)
    assert statuses[lsn.id] == CANDIDATE
    assert {statuses[s.id] for s in sybils} == {NOT_COUNTED}
    # The same 20 keys promote it under `open`: it is the policy that stops them.
    assert evaluate([lsn, *sybils], OPEN)[lsn.id] == COMMON
    # Two trusted keys and one vouched for by a trusted key: common.
    trusted = [attest(k, lsn, created=T0 + 100 + i) for i, k in enumerate(ATTESTERS[:3])]
    v = vouch(ATTESTERS[0], ATTESTERS[2])
    assert evaluate([lsn, *sybils, *trusted], config)[lsn.id] == CANDIDATE  # third not trusted yet
    machine = Commons(config)
    for r in (lsn, *sybils, *trusted):
        machine.add(r)
    changes = machine.add(v)
    assert changes[lsn.id] == COMMON and changes[v.id] == EFFECTIVE
    # A vouch by a key that is only vouched for counts for nothing (one hop).
    v2 = vouch(ATTESTERS[2], ATTESTERS[3])
    a4 = attest(ATTESTERS[3], lsn, verdict="failed", created=T0 + 500)
    assert machine.add(v2) == {v2.id: NO_EFFECT}
    assert machine.add(a4) == {a4.id: NOT_COUNTED}
    # The voucher withdraws its vouch: its subject's vote goes, the lesson is a candidate again.
    changes = machine.add(revoke(ATTESTERS[0], v))
    assert changes[v.id] == REVOKED and changes[lsn.id] == CANDIDATE
    assert machine.status(trusted[2].id) == NOT_COUNTED


def test_fade_when_failures_outweigh_confirmations_in_the_window_and_recover():
    lsn = lesson(AUTHOR)
    ks = ATTESTERS
    config = CommonsConfig(policy="open", fade_window=10 * DAY)
    machine = Commons(config)
    machine.add(lsn)
    for i in range(3):
        machine.add(attest(ks[i], lsn, created=T0 + DAY + i))
    assert machine.status(lsn.id) == COMMON
    # Within the window: one failure against three confirmations: still common.
    machine.add(attest(ks[3], lsn, "failed", created=T0 + 2 * DAY))
    assert machine.status(lsn.id) == COMMON
    # Twenty days later the confirmations are out of the window: failures now outweigh.
    fail = attest(ks[4], lsn, "failed", created=T0 + 20 * DAY)
    assert machine.add(fail)[lsn.id] == FADED
    # Confirmations again (two keys re-attest, a later voice replacing their earlier one).
    machine.add(attest(ks[0], lsn, created=T0 + 21 * DAY))
    assert machine.status(lsn.id) == FADED  # 1 confirmed vs 1 failed in the window: a tie
    back = attest(ks[1], lsn, created=T0 + 21 * DAY + 5)
    assert machine.add(back)[lsn.id] == COMMON
    transitions = [h["to"] for h in machine.explain(lsn.id)["group"]["history"]]
    assert transitions == [CANDIDATE, COMMON, FADED, COMMON]


def test_a_failed_vote_never_demotes_a_candidate():
    lsn = lesson(AUTHOR)
    votes = [attest(k, lsn, "failed", created=T0 + 60 + i) for i, k in enumerate(ATTESTERS)]
    assert evaluate([lsn, *votes], OPEN)[lsn.id] == CANDIDATE


def test_an_attestation_cannot_predict_a_lesson_published_after_it():
    lsn = lesson(AUTHOR, created=T0 + DAY)
    config = CommonsConfig(policy="open", fade_window=DAY)
    early = [attest(k, lsn, created=T0 - 30 * DAY + i) for i, k in enumerate(ATTESTERS[:3])]
    # Dated before the lesson, they count at its time (not 30 days before it): common, and a
    # failure a little later weighs against them inside the window, not against nothing.
    machine = Commons(config)
    for r in (lsn, *early):
        machine.add(r)
    assert machine.status(lsn.id) == COMMON
    machine.add(attest(ATTESTERS[3], lsn, "failed", created=T0 + DAY + 3600))
    assert machine.status(lsn.id) == COMMON


def test_author_revocation_revokes_the_lesson_and_its_descendants_even_late_arrivals():
    root = lesson(AUTHOR)
    child = lesson(ATTESTERS[0], text="The agent used pip twice; the lock file is uv.lock.", parents=[root])
    grandchild = lesson(ATTESTERS[1], text="The project builds with uv; pip installs failed.", parents=[child])
    other = lesson(ATTESTERS[2], text="The CI job timed out on the integration tests.", kind="error")
    rev = revoke(AUTHOR, root)
    machine = Commons(OPEN)
    for r in (root, child, other):
        machine.add(r)
    changes = machine.add(rev)
    assert changes == {rev.id: EFFECTIVE, root.id: REVOKED, child.id: REVOKED}
    assert machine.add(grandchild) == {grandchild.id: REVOKED}  # revoked on arrival
    assert machine.status(other.id) == CANDIDATE
    cause = machine.explain(grandchild.id)["revoked_because"]
    assert cause["by"] == "ancestor" and cause["ancestor"] == child.id
    assert cause["root"]["root"] == {"by": "revocation", "revocation": rev.id, "id": root.id}
    chain = machine.chain(child.id)
    assert [p["id"] for p in chain["parents"]] == [root.id]
    assert [(c["id"], c["status"]) for c in chain["children"]] == [(grandchild.id, REVOKED)]


def test_revocations_by_strangers_have_no_effect_revokers_need_no_target_local_stays_local():
    root = lesson(AUTHOR)
    child = lesson(ATTESTERS[0], text="The agent used pip twice; the lock file is uv.lock.", parents=[root])
    stranger = revoke(ATTESTERS[3], root)
    statuses = evaluate([root, child, stranger], OPEN)
    assert statuses[stranger.id] == NO_EFFECT and statuses[root.id] == CANDIDATE
    # The same record is effective on a node where its signer is a revoker: before the target
    # even arrives, and on the descendants that arrive later.
    revoker = CommonsConfig(policy="open", revokers=frozenset({pub(ATTESTERS[3])}))
    machine = Commons(revoker)
    assert machine.add(stranger) == {stranger.id: EFFECTIVE}
    assert machine.add(child) == {child.id: REVOKED}
    assert machine.add(root) == {root.id: REVOKED}
    # An author's revocation of a lesson not here yet is pending, then effective.
    machine = Commons(OPEN)
    own = revoke(AUTHOR, root)
    assert machine.add(own) == {own.id: PENDING}
    changes = machine.add(root)
    assert changes == {root.id: REVOKED, own.id: EFFECTIVE}
    # A local revocation: applied here, to descendants too; no record involved.
    local = CommonsConfig(policy="open", local_revocations=frozenset({root.id}))
    statuses = evaluate([root, child], local)
    assert statuses == {root.id: REVOKED, child.id: REVOKED}


def test_a_revocation_cannot_be_revoked_and_an_attester_can_withdraw_its_vote():
    lsn = lesson(AUTHOR)
    votes = [attest(k, lsn, created=T0 + 60 + i) for i, k in enumerate(ATTESTERS[:3])]
    rev = revoke(AUTHOR, lsn)
    undo = revoke(AUTHOR, rev)
    statuses = evaluate([lsn, *votes, rev, undo], OPEN)
    assert statuses[lsn.id] == REVOKED and statuses[undo.id] == NO_EFFECT
    withdraw = revoke(ATTESTERS[0], votes[0], code="withdrawn")
    statuses = evaluate([lsn, *votes, withdraw], OPEN)
    assert statuses[withdraw.id] == EFFECTIVE and statuses[votes[0].id] == REVOKED
    assert statuses[lsn.id] == CANDIDATE
    # Someone else cannot withdraw it.
    meddler = revoke(ATTESTERS[1], votes[0])
    assert evaluate([lsn, *votes, meddler], OPEN)[lsn.id] == COMMON


def test_same_observation_by_another_author_is_one_lesson_with_a_corroboration():
    first = lesson(AUTHOR, created=T0)
    # Same text after normalisation (case, spacing, final full stop): same dedup key.
    second = lesson(ATTESTERS[0], text="the user corrected the agent for using pip;  this project uses UV",
                    created=T0 + 100)
    assert first.dedup_key == second.dedup_key and first.id != second.id
    machine = Commons(OPEN)
    machine.add(first)
    machine.add(second)
    view = machine.explain(second.id)
    assert view["group"]["head"] == first.id and view["group"]["members"] == sorted([first.id, second.id])
    [corroboration] = view["votes"]["shown"]
    assert corroboration["corroboration"] and corroboration["reason"] == "corroboration"
    # The corroborator cannot attest the group; attestations on either member count for both.
    machine.add(attest(ATTESTERS[0], first))
    assert machine.status(first.id) == CANDIDATE
    machine.add(attest(ATTESTERS[1], first, created=T0 + 200))
    machine.add(attest(ATTESTERS[2], second, created=T0 + 300))
    machine.add(attest(ATTESTERS[3], second, created=T0 + 400))
    assert machine.status(first.id) == COMMON and machine.status(second.id) == COMMON
    # Revoking one member leaves the other with the group's status.
    machine.add(revoke(AUTHOR, first))
    assert machine.status(first.id) == REVOKED and machine.status(second.id) == COMMON


def test_an_attestation_before_its_lesson_is_pending_then_counts():
    lsn = lesson(AUTHOR)
    votes = [attest(k, lsn, created=T0 + 60 + i) for i, k in enumerate(ATTESTERS[:3])]
    machine = Commons(OPEN)
    for v in votes:
        assert machine.add(v) == {v.id: PENDING}
    changes = machine.add(lsn)
    assert changes == {lsn.id: COMMON, **{v.id: COUNTED for v in votes}}


def test_an_attestation_of_a_record_that_is_not_a_lesson_is_not_counted_once_that_record_is_here():
    lsn = lesson(AUTHOR)
    v = vouch(ATTESTERS[0], ATTESTERS[1])
    odd = attest(ATTESTERS[2], v)  # names a vouch: no lesson can ever have that id
    machine = Commons(CommonsConfig(policy="open"))
    assert machine.add(odd) == {odd.id: PENDING}
    assert machine.explain(odd.id)["reason"] == "lesson not here yet"
    assert machine.add(v)[odd.id] == NOT_COUNTED
    assert machine.explain(odd.id)["reason"] == "names a record that is not a lesson"
    machine.add(lsn)
    assert machine.status(odd.id) == NOT_COUNTED and machine.status(lsn.id) == CANDIDATE


def test_a_keys_voice_is_its_latest_vote_by_created_even_before_the_head():
    # Both votes are raised to the head's time; the later-signed one is the key's voice,
    # whichever id sorts first. With N = 1: confirmed last -> common, failed last -> stays.
    for first, second, want in (("failed", "confirmed", COMMON), ("confirmed", "failed", FADED)):
        lsn = lesson(AUTHOR, created=T0 + DAY)
        for offset in range(40):  # both id orders occur among these; the outcome must not move
            a = attest(ATTESTERS[0], lsn, first, created=T0 + offset)
            b = attest(ATTESTERS[0], lsn, second, created=T0 + 100 + offset)
            config = CommonsConfig(policy="open", threshold=1)
            assert evaluate([lsn, a, b], config)[lsn.id] == want
            assert evaluate([b, a, lsn], config)[lsn.id] == want


def test_a_long_chain_is_revoked_without_recursion_limits():
    chain = [lesson(AUTHOR, text="The build failed at step 0.", kind="error")]
    for i in range(1, 1500):
        chain.append(lesson(AUTHOR, text=f"The build failed at step {i}.", kind="error", parents=[chain[-1]]))
    machine = Commons(OPEN)
    for r in chain:
        machine.add(r)
    changes = machine.add(revoke(AUTHOR, chain[0]))
    assert sum(1 for s in changes.values() if s == REVOKED) == 1500
    assert machine.add(lesson(AUTHOR, text="The build failed at the end.", kind="error",
                              parents=[chain[-1]]))  # revoked on arrival, 1500 deep
    assert list(machine.statuses().values()).count(REVOKED) == 1501


# -- any order of the same records gives the same statuses ------------------------------------

def _pool() -> list:
    """A small universe where every rule meets every other: shared dedup keys, chains, votes in
    and out of the window, revocations by authors, strangers and revokers, vouches."""
    rng = random.Random(7)
    keys = [key(40 + i) for i in range(7)]
    texts = ["The deploy failed when the cache was cold.", "the deploy failed when the cache was cold",
             "The migration timed out on the large table."]
    lessons = []
    for i in range(7):
        parents = rng.sample(lessons, k=min(len(lessons), rng.randrange(3)))
        lessons.append(lesson(keys[i % 4], text=texts[i % 3] if i < 4 else f"The job {i} failed twice.",
                              kind="error", created=T0 + rng.randrange(0, 20) * DAY, parents=parents))
    records = list(lessons)
    for i in range(22):
        target = rng.choice(lessons)
        records.append(attest(rng.choice(keys), target, rng.choice(["confirmed", "confirmed", "failed"]),
                              created=T0 + rng.randrange(0, 60) * DAY + i, met_before=rng.random() < 0.15))
    for i in range(5):
        target = rng.choice(records)
        signer = rng.choice(keys) if rng.random() < 0.5 else (
            keys[[l.id for l in lessons].index(target.id) % 4] if target in lessons else rng.choice(keys))
        records.append(revoke(signer, target, created=T0 + 70 * DAY + i))
    records.append(revoke(keys[1], records[-1], created=T0 + 80 * DAY))  # a revocation of a revocation
    vouches = [vouch(keys[0], keys[5]), vouch(keys[5], keys[6]), vouch(keys[1], keys[4])]
    records += vouches
    records.append(revoke(keys[0], vouches[0], created=T0 + 90 * DAY))
    # Attestations naming held records that are not lessons (R2: not-counted once they are here).
    records.append(attest(keys[2], vouches[1], created=T0 + 91 * DAY))
    records.append(attest(keys[3], records[-2], "failed", created=T0 + 92 * DAY))
    # One key's two votes, both before the head: its voice is the later by created (R4).
    head = lessons[0]
    records.append(attest(keys[6], head, "failed", created=head.created - 100))
    records.append(attest(keys[6], head, "confirmed", created=head.created - 50))
    return records


POOL = _pool()
KEYS = [pub(key(40 + i)) for i in range(7)]
CONFIGS = [
    CommonsConfig(policy="open", threshold=2, fade_window=10 * DAY),
    CommonsConfig(trust=frozenset(KEYS[:2]), threshold=1, fade_window=5 * DAY),
    CommonsConfig(policy="open", threshold=1, revokers=frozenset({KEYS[3]}), fade_window=DAY,
                  local_revocations=frozenset({POOL[2].id})),
]


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, len(POOL) - 1), min_size=1, max_size=len(POOL), unique=True),
       st.randoms(use_true_random=False), st.sampled_from(range(len(CONFIGS))))
def test_any_order_of_the_same_records_gives_the_same_statuses(indices, rng, which):
    config = CONFIGS[which]
    records = [POOL[i] for i in indices]
    batch = Commons(config)
    for record in sorted(records, key=lambda r: r.id):
        batch.add(record)
    reference = batch.statuses()
    shuffled = list(records)
    rng.shuffle(shuffled)
    machine = Commons(config)
    revoked_so_far: set[str] = set()
    for record in shuffled:
        changes = machine.add(record)
        # Incremental changes are exactly the moves of the full status map...
        assert all(machine.status(i) == s for i, s in changes.items())
        # ...and a revoked lesson stays revoked (R7) whatever arrives after.
        now_revoked = {i for i, s in machine.statuses().items() if s == REVOKED and i in machine.lessons}
        assert revoked_so_far <= now_revoked
        revoked_so_far = now_revoked
    assert machine.statuses() == reference
    # Not only the statuses: each group's history and tally, and every vote's standing.
    for lid in machine.lessons:
        assert machine.explain(lid) == batch.explain(lid)


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, len(POOL) - 1), min_size=1, max_size=len(POOL), unique=True),
       st.sampled_from(range(len(CONFIGS))), st.randoms(use_true_random=False))
def test_the_shortcuts_of_add_change_nothing(indices, which, rng):
    """Commons.add skips the closure and the replay where they would find nothing: each add
    returns the same changes as the machine that takes every step, every record explains
    the same, and forgetting then re-adding agrees too."""
    config = CONFIGS[which]
    fast, full = Commons(config), Commons(config)
    full.shortcuts = False
    records = [POOL[i] for i in indices]
    for record in records:
        assert fast.add(record) == full.add(record)
    assert fast.statuses() == full.statuses()
    for record in records:
        assert fast.explain(record.id) == full.explain(record.id)
        assert fast.inert(record.id) == full.inert(record.id)
    inert = [r for r in records if fast.inert(r.id)]
    for record in rng.sample(inert, k=min(3, len(inert))):
        if fast.inert(record.id):
            fast.forget(record.id)
            full.forget(record.id)
    for record in records:
        assert fast.add(record) == full.add(record)
    assert fast.statuses() == full.statuses()
    for record in records:
        assert fast.explain(record.id) == full.explain(record.id)


def test_the_pool_reaches_every_status_so_the_property_test_means_something():
    seen = set()
    for config in CONFIGS:
        seen |= set(evaluate(POOL, config).values())
    assert seen >= {CANDIDATE, COMMON, REVOKED, COUNTED, NOT_COUNTED, EFFECTIVE, NO_EFFECT}


def test_config_checks():
    with pytest.raises(ValueError):
        CommonsConfig(policy="anyone")
    with pytest.raises(ValueError):
        CommonsConfig(threshold=0)


# -- forgetting inert records (the store's bound on records without standing) ---------------

@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, len(POOL) - 1), min_size=1, max_size=len(POOL), unique=True),
       st.randoms(use_true_random=False), st.sampled_from(range(len(CONFIGS))))
def test_forgetting_an_inert_record_is_as_if_it_never_arrived(indices, rng, which):
    config = CONFIGS[which]
    held = [POOL[i] for i in indices]
    machine = Commons(config)
    for record in held:
        machine.add(record)
    forgotten = []
    while True:
        inert = [r for r in held if machine.inert(r.id)]
        if not inert:
            break
        victim = rng.choice(inert)
        assert victim.record_type != "revocation"
        machine.forget(victim.id)
        held.remove(victim)
        forgotten.append(victim)
        fresh = Commons(config)
        for record in held:
            fresh.add(record)
        assert machine.statuses() == fresh.statuses()
        for lid in machine.lessons:
            assert machine.explain(lid) == fresh.explain(lid)
    for record in held:  # what is left is all referenced, counted, or a revocation
        with pytest.raises(ValueError):
            machine.forget(record.id)
    # A forgotten record that arrives again is taken in as if for the first time.
    for record in forgotten[::-1]:
        machine.add(record)
        held.append(record)
    assert machine.statuses() == evaluate(held, config)


def test_what_is_inert_and_what_is_not():
    lsn, other = lesson(AUTHOR), lesson(AUTHOR, text="The build cache was stale after the upgrade.")
    vote = attest(ATTESTERS[0], lsn)
    rev = revoke(AUTHOR, other)
    stranger_vouch = vouch(ATTESTERS[1], ATTESTERS[2])
    machine = Commons(OPEN)
    for record in (lsn, other, vote, rev, stranger_vouch):
        machine.add(record)
    assert not machine.inert(lsn.id)  # an attestation names it
    assert not machine.inert(vote.id)  # it counts (open policy)
    assert not machine.inert(other.id) and not machine.inert(rev.id)  # revoked; a revocation
    assert machine.inert(stranger_vouch.id)  # no effect, named by nothing
    untrusted = Commons(trusting(ATTESTERS[3]))
    for record in (lsn, vote):
        untrusted.add(record)
    assert untrusted.inert(vote.id) and not untrusted.inert(lsn.id)  # not counted: inert
    untrusted.forget(vote.id)
    assert untrusted.inert(lsn.id)  # nothing names it any more
