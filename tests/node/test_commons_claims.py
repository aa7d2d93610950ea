"""The commons state machine on claims (R10-R12 of openmemory_node/commons.py): per-part
tallies, exposed votes, blocked authors, a revoker's revocation covering the claim.

The machine is pure over a record's fields; these records are built as the wire's version 2
records expose them (``version``, ``claim``, ``dedup_key``; an attestation's ``parts``,
``exposed``), so that the rules are tested apart from the encoding (tests/wire tests that)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

from openmemory_node.commons import COMMON, CANDIDATE, FADED, REVOKED, Commons, CommonsConfig, evaluate
from openmemory_protocol import claims

T0 = 1_800_000_000
AUTHOR, STRANGER = b"\xaa" * 32, b"\xcc" * 32
KEYS = [bytes([k]) * 32 for k in range(1, 9)]
CLAIM = claims.Claim(situation="npm test", failure="npm ERR! code ELIFECYCLE", fix="npm ci", fix_how="changed")


def _id(*parts) -> str:
    return "1220" + hashlib.sha256(repr(parts).encode()).hexdigest()


def lesson(claim=CLAIM, signer=AUTHOR, created=T0, parents=()):
    return SimpleNamespace(record_type="lesson", version=2, id=_id("l", claims.render(claim), signer, created),
                           signer=signer, created=created, claim=claim, dedup_key=claims.dedup_key(claim),
                           derived_from=tuple(bytes.fromhex(p) for p in parents), text=claims.render(claim))


def attest(target, signer, created, failure="confirmed", fix="confirmed", exposed=False, met_before=False):
    parts = {"failure": failure, "fix": fix}
    verdict = "failed" if "failed" in parts.values() else "confirmed"
    return SimpleNamespace(record_type="attestation", version=2, id=_id("a", target.id, signer, created, failure, fix),
                           signer=signer, created=created, lesson_id=bytes.fromhex(target.id), verdict=verdict,
                           met_before=met_before, exposed=exposed, parts=parts, failure=failure, fix=fix)


def revoke(target, signer, created=T0 + 99):
    return SimpleNamespace(record_type="revocation", version=1, id=_id("r", target.id, signer), signer=signer,
                           created=created, target=bytes.fromhex(target.id), reason_code="harmful", reason="")


def config(**kw):
    return CommonsConfig(policy="trusted", threshold=3, trust=frozenset(KEYS), **kw)


def test_common_only_when_failure_and_fix_each_have_n_confirmers():
    head = lesson()
    failure_only = [attest(head, KEYS[i], T0 + 10 + i, fix="untested") for i in range(5)]
    assert evaluate([head, *failure_only], config())[head.id] == CANDIDATE  # the fix never confirmed
    two_fixes = [attest(head, KEYS[i], T0 + 20 + i) for i in range(2)]
    assert evaluate([head, *failure_only, *two_fixes], config())[head.id] == CANDIDATE
    third = attest(head, KEYS[5], T0 + 30)
    assert evaluate([head, *failure_only, *two_fixes, third], config())[head.id] == COMMON
    # a claim without a fix needs its failure only
    bare = lesson(claims.Claim(situation="npm test", failure="npm ERR! code ELIFECYCLE"))
    votes = [attest(bare, KEYS[i], T0 + 10 + i, fix="untested") for i in range(3)]
    assert evaluate([bare, *votes], config())[bare.id] == COMMON


def test_exposed_votes_never_count():
    head = lesson()
    exposed = [attest(head, KEYS[i], T0 + 10 + i, exposed=True) for i in range(6)]
    machine = Commons(config())
    for record in [head, *exposed]:
        machine.add(record)
    assert machine.status(head.id) == CANDIDATE
    assert set(machine.groups[head.dedup_key].refused.values()) == {"exposed"}
    assert machine.explain(head.id)["votes"]["refused"] == {"exposed": 6}


def test_a_failed_part_fades_a_common_claim():
    head = lesson()
    votes = [attest(head, KEYS[i], T0 + 10 + i) for i in range(3)]
    fails = [attest(head, KEYS[3 + i], T0 + 100 + i, failure="confirmed", fix="failed") for i in range(4)]
    assert evaluate([head, *votes], config())[head.id] == COMMON
    assert evaluate([head, *votes, *fails], config())[head.id] == FADED


def test_the_same_claim_from_strangers_and_sybils_is_one_group():
    """A copy with a capital letter or a re-spaced pipe is the same claim: one group, whose
    authors are never independent attesters of it."""
    bad = claims.Claim(situation="npm test", failure="npm ERR! code ELIFECYCLE", fix="npm ci --force",
                       fix_how="changed")
    copy = claims.Claim(situation="npm test", failure="NPM ERR! Code ELIFECYCLE", fix="npm --force ci",
                        fix_how="changed")
    a, b = lesson(bad, STRANGER), lesson(copy, KEYS[0], T0 + 5)
    assert a.dedup_key == b.dedup_key
    votes = [attest(a, KEYS[0], T0 + 10), attest(a, KEYS[1], T0 + 11), attest(a, KEYS[2], T0 + 12)]
    machine = Commons(config())
    for record in [a, b, *votes]:
        machine.add(record)
    assert machine.status(a.id) == CANDIDATE  # KEYS[0] authored a member: its vote is not independent
    assert machine.groups[a.dedup_key].refused[votes[0].id] == "author"


def test_a_blocked_author_is_revoked_with_what_derives_from_it_and_its_votes_stop_counting():
    head = lesson(signer=STRANGER)
    child = lesson(claims.Claim(situation="npm test", failure="npm ERR! code E404"), KEYS[7], T0 + 3,
                   parents=[head.id])
    other = lesson(claims.Claim(situation="pytest", failure="E ImportError: x"), AUTHOR, T0 + 4)
    votes = [attest(other, KEYS[i], T0 + 10 + i, fix="untested") for i in range(3)]
    records = [head, child, other, *votes]
    assert evaluate(records, config())[other.id] == COMMON
    blocked = evaluate(records, config(blocked=frozenset({STRANGER, KEYS[0]})))
    assert blocked[head.id] == REVOKED and blocked[child.id] == REVOKED
    assert blocked[other.id] == CANDIDATE  # KEYS[0]'s vote no longer counts: two of three
    assert evaluate(records, config())[head.id] == CANDIDATE  # unblocked: as before


def test_a_revokers_revocation_covers_the_claim_an_authors_withdrawal_only_its_record():
    revoker = KEYS[6]
    first = lesson(signer=STRANGER)
    copy = lesson(claims.Claim(situation="npm test", failure="npm ERR! code ELIFECYCLE.", fix="npm ci",
                               fix_how="changed"), KEYS[5], T0 + 2)
    late = lesson(claims.Claim(situation="npm test", failure="Npm ERR! code ELIFECYCLE", fix="npm  ci".replace("  ", " "),
                               fix_how="changed"), KEYS[4], T0 + 50)
    assert first.dedup_key == copy.dedup_key == late.dedup_key
    by_revoker = config(revokers=frozenset({revoker}))
    statuses = evaluate([first, copy, revoke(first, revoker), late], by_revoker)
    assert {statuses[r.id] for r in (first, copy, late)} == {REVOKED}  # the late member too, on arrival
    # in any order (the machine's promise)
    again = evaluate([late, revoke(first, revoker), copy, first], by_revoker)
    assert again == statuses
    withdrawn = evaluate([first, copy, revoke(first, STRANGER)], config())
    assert withdrawn[first.id] == REVOKED and withdrawn[copy.id] == CANDIDATE
    local = evaluate([first, copy], config(local_revocations=frozenset({copy.id})))
    assert local[first.id] == REVOKED and local[copy.id] == REVOKED


def test_team_keys_are_trusted_to_vote():
    head = lesson()
    team = [b"\x71" * 32, b"\x72" * 32, b"\x73" * 32]
    votes = [attest(head, k, T0 + 10 + i) for i, k in enumerate(team)]
    untrusted = CommonsConfig(policy="trusted", threshold=3)
    assert evaluate([head, *votes], untrusted)[head.id] == CANDIDATE
    assert evaluate([head, *votes], CommonsConfig(policy="trusted", threshold=3, team=frozenset(team)))[head.id] == COMMON
