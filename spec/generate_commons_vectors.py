#!/usr/bin/env python3
"""Generate the commons and sync test vectors: spec/vectors/commons.json and sync.json.

    python spec/generate_commons_vectors.py           # write them
    python spec/generate_commons_vectors.py --check   # exit 1 if they differ from what this makes

commons.json: scenarios, each a configuration, records (CBOR hex, in one arrival order: any
order must give the same result) and the status every record must get (PROTOCOL.md, "Commons
state machine"). sync.json: fingerprints of id sets, encoded reconciliation messages, and one
reconciliation between two sets as this implementation runs it (PROTOCOL.md, "Sync").
Deterministic: fixed seeds, fixed times, deterministic Ed25519.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import random
import sys
from pathlib import Path
from typing import Any

from nacl.signing import SigningKey

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from generate_vectors import emit, render  # noqa: E402
from openmemory_node import wire  # noqa: E402
from openmemory_node.commons import Commons, CommonsConfig  # noqa: E402
from openmemory_protocol import claims  # noqa: E402
from openmemory_node.reconcile import (  # noqa: E402
    FINGERPRINT, IDLIST, INFINITY, MISSING, SKIP, IdSet, Params, Range, Reconciler, SyncError,
    decode_message, encode_message, encode_varint, fingerprint,
)

VECTORS = HERE / "vectors"
T0 = 1_760_000_000
DAY = 86_400


def key(name: str) -> SigningKey:
    return SigningKey(hashlib.sha256(b"openmemory/commons-vectors/" + name.encode()).digest())


def pub(name: str) -> str:
    return bytes(key(name).verify_key).hex()


def lesson(author: str, text: str, created: int = T0, parents: tuple = (), kind: str = "correction"):
    return wire.new_lesson(key(author), text=text, kind=kind, strength=1000, provenance=bytes(32),
                           derived_from=[p.id for p in parents], created=created)


def attest(attester: str, target, verdict: str = "confirmed", created: int = T0 + 60, met_before: bool = False):
    return wire.new_attestation(key(attester), lesson_id=target.id, verdict=verdict, met_before=met_before,
                                evidence={"sessions": 3, "matched": 1 if verdict == "confirmed" else 0,
                                          "window": 7 * DAY}, created=created)


def claim_lesson(author: str, claim: "claims.Claim", created: int = T0, parents: tuple = ()):
    """A version 2 lesson: a claim (its text is the claim's rendering)."""
    return wire.new_lesson(key(author), claim=claim, kind="error", strength=1000, provenance=bytes(32),
                           derived_from=[p.id for p in parents], created=created)


def attest2(attester: str, target, failure: str = "confirmed", fix: str = "confirmed", created: int = T0 + 60,
            exposed: bool = False, met_before: bool = False):
    """A version 2 attestation: a verdict per part (confirmed, failed or untested)."""
    matched = 1 if "confirmed" in (failure, fix) else 0
    return wire.new_attestation(key(attester), lesson_id=target.id, failure=failure, fix=fix, exposed=exposed,
                                met_before=met_before, evidence={"sessions": 3, "matched": matched, "window": 7 * DAY},
                                created=created)


def revoke(signer: str, target, created: int = T0 + 600, code: str = "incorrect"):
    return wire.new_revocation(key(signer), target=target.id if hasattr(target, "id") else target,
                               reason_code=code, reason="", created=created)


def vouch(voucher: str, subject: str, created: int = T0):
    return wire.new_vouch(key(voucher), subject=pub(subject), created=created)


TEXT = "The user corrected the agent for using pip; this project uses uv."
CHILD = "The agent ran pip install twice; the project has a uv.lock file."
GRANDCHILD = "The uv lock file was regenerated after the agent ran pip install."


def scenarios() -> list[tuple[str, str, dict[str, Any], list]]:
    out = []
    L = lesson("author", TEXT)
    votes = [attest(f"v{i}", L, created=T0 + 60 * (i + 1)) for i in range(3)]
    out.append(("promotion", "three independent confirming keys under open, N = 3: common",
                {"policy": "open"}, [L, *votes]))
    out.append(("not-independent", "the author's own vote, a met_before vote and one key three "
                "times: one independent key, a candidate", {"policy": "open"},
                [L, attest("author", L), attest("v0", L, met_before=True),
                 *[attest("v1", L, created=T0 + 100 + i) for i in range(3)]]))
    sybils = [attest(f"sybil{i}", L, created=T0 + 60 + i) for i in range(20)]
    out.append(("sybil-flood", "twenty fresh keys under trusted: nothing counted",
                {"trust": [pub("v0"), pub("v1")]}, [L, *sybils]))
    v = vouch("v0", "v2")
    out.append(("vouched", "two trusted keys and one vouched for by a trusted key: common",
                {"trust": [pub("v0"), pub("v1")]}, [L, *votes, v, vouch("v2", "v3"), attest("v3", L, created=T0 + 900)]))
    out.append(("vouch-withdrawn", "the voucher revokes its vouch: its subject's vote goes",
                {"trust": [pub("v0"), pub("v1")]}, [L, *votes, v, revoke("v0", v)]))
    fade = [attest(f"v{i}", L, created=T0 + DAY + i) for i in range(3)]
    fade += [attest("v3", L, "failed", created=T0 + 2 * DAY), attest("v4", L, "failed", created=T0 + 20 * DAY)]
    out.append(("faded", "failures outweigh confirmations within a 10-day window",
                {"policy": "open", "fade_window": 10 * DAY}, [L, *fade]))
    out.append(("faded-and-back", "two keys confirm again: common again",
                {"policy": "open", "fade_window": 10 * DAY},
                [L, *fade, attest("v0", L, created=T0 + 21 * DAY), attest("v1", L, created=T0 + 21 * DAY + 5)]))
    C = lesson("v0", CHILD, parents=(L,))
    G = lesson("v1", GRANDCHILD, parents=(C,))
    out.append(("revocation-closure", "the author revokes: the lesson, its child and a grandchild "
                "that arrives later are revoked; a stranger's revocation has no effect",
                {"policy": "open"}, [L, C, revoke("author", L), G, revoke("stranger", C)]))
    missing = lesson("author", "The build failed because the cache directory was read-only.", kind="error")
    orphan = lesson("v0", "The cache directory was read-only on the shared runner.", kind="error",
                    parents=(missing,))
    out.append(("revoker-before-target", "a revoker's revocation of an id not held: effective, and "
                "what derives from that id is revoked; the author's of another absent lesson: pending",
                {"policy": "open", "revokers": [pub("guardian")]},
                [revoke("guardian", missing), orphan, revoke("author", L)]))
    out.append(("local-revocation", "an operator's local revocation: the lesson and its child",
                {"policy": "open", "local_revocations": [L.id]}, [L, C]))
    twin = lesson("v5", "the user corrected the agent for using pip;  this project uses UV", created=T0 + 100)
    out.append(("corroboration", "the same observation by another author is one group: its author "
                "cannot vote for it, votes on either member count for both; revoking one member "
                "leaves the other", {"policy": "open"},
                [L, twin, attest("v5", L), attest("v0", L, created=T0 + 200), attest("v1", twin, created=T0 + 300),
                 attest("v2", twin, created=T0 + 400), revoke("author", L)]))
    rev = revoke("author", L)
    out.append(("final", "a revocation of a revocation has no effect; an attester withdraws its vote",
                {"policy": "open"}, [L, *votes, rev, revoke("author", rev), revoke("v0", votes[0], code="withdrawn")]))
    out.append(("pending", "attestations before their lesson: pending", {"policy": "open"}, votes))
    out += settled_scenarios(L)
    out += claim_scenarios(L)
    return out


def settled_scenarios(L) -> list[tuple[str, str, dict[str, Any], list]]:
    """The scenarios that pin the rules the JavaScript verifier found ambiguous (spec/js/README.md,
    question 4): each would give another status under the other reading."""
    out = []
    # (a) The fade window is (t - W, t]: a voice exactly W old has left it.
    W = 10 * DAY
    A = lesson("author", "The nightly build failed when the disk cache was full.", kind="error")
    B = lesson("author", "The nightly build failed when the network mirror was down.", kind="error")
    records: list = [A, B]
    for target in (A, B):
        records += [attest(f"v{i}", target, created=T0 + 1 + i) for i in range(3)]  # common at T0 + 3
        records += [attest(f"f{i}", target, "failed", created=T0 + 5 + i) for i in range(2)]
    records.append(attest("f2", A, "failed", created=T0 + 1 + W))  # v0's voice has just left: 2 < 3
    records.append(attest("f2", B, "failed", created=T0 + W))  # one second earlier: 3 vs 3
    out.append(("fade-window-boundary", "the window ending at t is t - W < time <= t: a failure "
                "exactly W after the first confirmation fades the lesson (failures 3, confirmations 2), "
                "one second earlier it does not (3 and 3)", {"policy": "open", "fade_window": W}, records))
    # (b) A vote earlier than its head is dated at the head's created, for the window too.
    H = lesson("author", "The release script failed when the changelog was empty.", created=T0 + 30 * DAY,
               kind="error")
    early = [attest(f"f{i}", H, "failed", created=T0 + i) for i in range(4)]  # 30 days before H
    confirms = [attest(f"v{i}", H, created=T0 + 30 * DAY + 10 * (i + 1)) for i in range(3)]
    out.append(("vote-before-head", "four failures signed 30 days before the lesson count as cast at "
                "its created: within a 1-day window when a fifth failure comes, so the lesson fades (dated "
                "at their own created they would have left the window and it would stay common)",
                {"policy": "open", "fade_window": DAY},
                [H, *early, *confirms, attest("f9", H, "failed", created=T0 + 30 * DAY + 100)]))
    # (c) One key's voice is its latest vote by created, even among votes raised to the head's time.
    K = lesson("author", "The test suite failed when the locale was not UTF-8.", created=T0 + DAY, kind="error")
    for offset in range(100):  # the id order opposite to the created order: replay by id would differ
        failed = attest("v0", K, "failed", created=T0 + offset)
        confirmed = attest("v0", K, created=T0 + 100 + offset)
        if confirmed.id < failed.id:
            break
    else:  # pragma: no cover
        raise AssertionError("no offset puts the later vote's id first")
    out.append(("latest-voice-before-head", "one key signs failed, then confirmed, both before the "
                "lesson (both dated at its created): its voice is the later by created, confirmed, whose "
                "id sorts first; with N = 1 the lesson is common (in replay by id alone it would fade)",
                {"policy": "open", "threshold": 1}, [K, failed, confirmed]))
    # (d) A revoked head stays the head and its author an author.
    twin = lesson("v5", "the user corrected the agent for using pip; this project uses uv.", created=T0 + 2 * DAY)
    assert twin.dedup_key == L.dedup_key
    out.append(("revoked-head", "the head is revoked: it still dates the group (the confirmations of day 0 "
                "have left a 1-day window when a failure comes on day 2, so the group fades; were the twin the "
                "head they would be dated on day 2 and it would stay common) and its author still cannot vote",
                {"policy": "open", "fade_window": DAY},
                [L, twin, revoke("author", L), *[attest(f"v{i}", L, created=T0 + 10 * (i + 1)) for i in range(3)],
                 attest("author", twin, created=T0 + 2 * DAY + 50),
                 attest("f0", twin, "failed", created=T0 + 2 * DAY + 100)]))
    # (e) A vouch under open: effective when its voucher is in the trust list.
    out.append(("vouch-under-open", "under open a vouch by a key in the trust list is effective (one by a "
                "key outside it is not), and an untrusted key's vote counts",
                {"policy": "open", "threshold": 1, "trust": [pub("v0")]},
                [L, vouch("v0", "v2"), vouch("v1", "v3"), attest("v4", L)]))
    # (f) An attestation naming a held record that is not a lesson: not-counted.
    v = vouch("v0", "v2")
    rev = revoke("v1", L, code="withdrawn")
    att = attest("v3", L)
    out.append(("attestation-of-a-non-lesson", "attestations naming a vouch, a revocation and an "
                "attestation that are here: not-counted (no lesson can have those ids); one naming an "
                "id not here: pending", {"policy": "open"},
                [L, v, rev, att, attest("v4", v), attest("v5", rev), attest("v6", att),
                 attest("v7", lesson("author", "The formatter rewrote the lock file.", kind="error"))]))
    return out


PUSH = claims.Claim(situation="git push", failure="fatal: The current branch <branch> has no upstream branch.",
                    fix="git push --set-upstream origin <branch>", fix_how="changed")
LOCK = claims.Claim(situation="npm ci", failure="npm ERR! The npm ci command can only install with an existing "
                    "package-lock.json", fix="npm install", fix_how="instead")
MODULE = claims.Claim(situation="npx jest", failure="Cannot find module 'ts-node' from 'jest.config.ts'")
PYTEST = claims.Claim(situation="pytest", failure="ModuleNotFoundError: No module named <module>",
                      fix="uv run pytest", fix_how="instead")


def _statuses(records: list, config: CommonsConfig) -> dict[str, str]:
    machine = Commons(config)
    for r in records:
        machine.add(r)
    return machine.statuses()


def claim_scenarios(L) -> list[tuple[str, str, dict[str, Any], list]]:
    """Version 2: claims and their parts (R10), exposure, the team and blocked lists (R8, R11)
    and the same claim (R12). Every lesson here is a real version 2 record (a claim), every
    attestation a version 2 one unless named otherwise."""
    out = []
    N3 = {"policy": "open"}
    # R10: a claim with a fix needs N confirmers of its failure AND N of its fix.
    P = claim_lesson("author", PUSH)
    Q = claim_lesson("author", PYTEST)
    records: list = [P, Q]
    records += [attest2(f"v{i}", P, created=T0 + 10 + i) for i in range(2)]  # both parts: fix has 2
    records += [attest2(f"v{i}", P, fix="untested", created=T0 + 10 + i) for i in range(2, 5)]  # failure 5, fix 2
    records += [attest2(f"v{i}", Q, fix="untested", created=T0 + 20 + i) for i in range(5)]  # failure 5, fix 0
    assert _statuses(records, CommonsConfig(policy="open"))[P.id] == "candidate"  # failure 5, fix 2
    records.append(attest2("v5", P, created=T0 + 100))  # the third fix: common
    out.append(("claim-parts", "a claim with a fix is common only when its failure and its fix each have N "
                "confirmers: five keys met the failure of the first, two used its fix, then a third did (common); "
                "the second, five failure-only confirmations, stays a candidate", N3, records))
    # R10: a claim without a fix has one part, its failure.
    M = claim_lesson("author", MODULE)
    out.append(("claim-without-fix", "a claim that states no fix is common on its failure alone (three keys met "
                "it, the fix untested or, on a claim without one, ignored)", N3,
                [M, attest2("v0", M, fix="untested"), attest2("v1", M, fix="untested", created=T0 + 61),
                 attest2("v2", M, created=T0 + 62)]))
    # R3: exposure: evidence the lesson could have caused never counts.
    E = claim_lesson("author", LOCK)
    out.append(("exposed", "three exposed attestations (the attester saw the lesson where its evidence came "
                "from) and two unexposed: not counted, a candidate", N3,
                [E, *[attest2(f"x{i}", E, exposed=True, created=T0 + 60 + i) for i in range(3)],
                 attest2("v0", E, created=T0 + 70), attest2("v1", E, created=T0 + 71)]))
    # R10: a vote tests parts the group has, or does not count.
    V = claim_lesson("author", MODULE)
    out.append(("parts", "three version 1 attestations of a claim test no part it has (not counted: a "
                "candidate, with two version 2 confirmations); three version 2 attestations of a version 1 "
                "lesson neither (a candidate)", N3,
                [V, L, *[attest(f"w{i}", V, created=T0 + 60 + i) for i in range(3)],
                 attest2("v0", V, fix="untested", created=T0 + 70), attest2("v1", V, fix="untested", created=T0 + 71),
                 *[attest2(f"v{i}", L, created=T0 + 80 + i) for i in range(3)]]))
    # R5 per part: one part's failures outweighing its confirmations fade the claim.
    F = claim_lesson("author", PUSH)
    out.append(("claim-fix-fails", "common (three keys confirmed both parts), then four keys met the failure "
                "and their sessions' use of the fix failed: the fix part's failures outweigh its confirmations, "
                "so the claim fades although its failure was confirmed seven times", N3,
                [F, *[attest2(f"v{i}", F, created=T0 + 60 + i) for i in range(3)],
                 *[attest2(f"f{i}", F, fix="failed", created=T0 + DAY + i) for i in range(4)]]))
    # R8: the team list: trusted to vote, as any trusted key (unexposed votes only).
    T = claim_lesson("author", PUSH)
    out.append(("team", "under trusted with an empty trust list, three team keys confirm: common; a "
                "stranger's vote and a team key's exposed vote are not counted",
                {"team": [pub("v0"), pub("v1"), pub("v2")]},
                [T, attest2("stranger", T, created=T0 + 50), attest2("v0", T, exposed=True, created=T0 + 55),
                 *[attest2(f"v{i}", T, created=T0 + 60 + i) for i in range(3)]]))
    # R11: the blocked list.
    B = claim_lesson("mallory", PUSH)
    child = claim_lesson("v0", LOCK, created=T0 + 30, parents=(B,))
    G = claim_lesson("author", MODULE)
    out.append(("blocked", "a blocked author: its lesson is revoked, and the lesson derived from it; its "
                "vote on another claim is not counted (two other keys: a candidate)",
                {"policy": "open", "blocked": [pub("mallory")]},
                [B, child, G, attest2("v1", B), attest2("mallory", G, fix="untested"),
                 attest2("v1", G, fix="untested", created=T0 + 61), attest2("v2", G, created=T0 + 62)]))
    vb = vouch("v0", "v3")
    out.append(("blocked-voucher", "a key both trusted and blocked: its vouch has no effect (R8, R11), so the key it "
                "vouched for is not trusted and its vote on a claim is not counted",
                {"trust": [pub("v0"), pub("v1"), pub("v2")], "blocked": [pub("v0")]},
                [G, vb, attest2("v3", G, fix="untested"), attest2("v1", G, fix="untested", created=T0 + 61),
                 attest2("v2", G, created=T0 + 62)]))
    # R12: a revoker's revocation covers every member of the same claim.
    X = claim_lesson("author", PUSH)
    copies = [
        claim_lesson("v5", dataclasses.replace(PUSH, failure="FATAL: the current branch <branch> has no upstream "
                                               "branch."), created=T0 + 10),  # case
        claim_lesson("v6", dataclasses.replace(PUSH, failure=PUSH.failure.rstrip(".")), created=T0 + 20),  # a full stop
        claim_lesson("v7", dataclasses.replace(PUSH, fix="git push origin --set-upstream <branch>"),
                     created=T0 + 30),  # a re-ordered command
    ]
    later = claim_lesson("v8", dataclasses.replace(PUSH, failure="Fatal: the current branch <branch> has no "
                                                   "upstream branch", fix="git push origin <branch> --set-upstream"),
                         created=T0 + DAY)
    other = claim_lesson("v5", LOCK)
    assert all(c.dedup_key == X.dedup_key and c.text != X.text for c in [*copies, later])
    out.append(("same-claim-revoked", "a revoker revokes a claim: every member of the same claim (a copy in "
                "capitals, one without the full stop, one with the command's words re-ordered) is revoked, and "
                "a copy that arrives later; another claim by a copier is not", {"policy": "open",
                                                                               "revokers": [pub("guardian")]},
                [X, *copies, other, revoke("guardian", X), attest2("v0", copies[0]), later]))
    # R12: an author's withdrawal is of its record only (a revoker's of its own record too).
    W = claim_lesson("author", PUSH)
    Wc = claim_lesson("v5", copies[0].claim, created=T0 + 10)
    K = claim_lesson("guardian", LOCK)
    Kc = claim_lesson("v6", dataclasses.replace(LOCK, failure=LOCK.failure.upper()), created=T0 + 10)
    assert Kc.dedup_key == K.dedup_key
    out.append(("same-claim-withdrawn", "an author withdraws its claim: only its record is revoked, the copy "
                "stays; a revoker withdrawing its own claim revokes only its record too",
                {"policy": "open", "revokers": [pub("guardian")]},
                [W, Wc, revoke("author", W, code="withdrawn"), K, Kc, revoke("guardian", K, code="withdrawn")]))
    # R12: a local revocation of one member covers the claim (and what derives from its members).
    Y = claim_lesson("author", PUSH)
    Yc = claim_lesson("v6", copies[1].claim, created=T0 + 10)
    derived = claim_lesson("v1", MODULE, created=T0 + 20, parents=(Yc,))
    out.append(("same-claim-local", "an operator's local revocation of one member revokes the claim: the "
                "other member and the lesson derived from it", {"policy": "open", "local_revocations": [Y.id]},
                [Y, Yc, derived]))
    return out


def commons_vectors() -> dict[str, Any]:
    vectors = []
    for name, description, cfg, records in scenarios():
        config = CommonsConfig(
            policy=cfg.get("policy", "trusted"), threshold=cfg.get("threshold", 3),
            fade_window=cfg.get("fade_window", 30 * DAY),
            trust=frozenset(bytes.fromhex(k) for k in cfg.get("trust", ())),
            revokers=frozenset(bytes.fromhex(k) for k in cfg.get("revokers", ())),
            local_revocations=frozenset(cfg.get("local_revocations", ())),
            team=frozenset(bytes.fromhex(k) for k in cfg.get("team", ())),
            blocked=frozenset(bytes.fromhex(k) for k in cfg.get("blocked", ())),
        )
        machine = Commons(config)
        for r in records:
            machine.add(r)
        shuffled = list(records)
        random.Random(name).shuffle(shuffled)
        other = Commons(config)
        for r in shuffled:
            other.add(r)
        assert other.statuses() == machine.statuses(), name
        vectors.append({
            "name": name, "description": description,
            "config": {"policy": config.policy, "threshold": config.threshold,
                       "fade_window": config.fade_window, "trust": sorted(k.hex() for k in config.trust),
                       "revokers": sorted(k.hex() for k in config.revokers),
                       "local_revocations": sorted(config.local_revocations),
                       "team": sorted(k.hex() for k in config.team),
                       "blocked": sorted(k.hex() for k in config.blocked)},
            "records": [wire.encode(r).hex() for r in records],
            "statuses": dict(sorted(machine.statuses().items())),
        })
    return {"description": "Commons state machine scenarios (PROTOCOL.md, 'Commons state machine'): for "
            "each, feed the records (valid; in any order) to a machine with the config; every record must "
            "get its status. No clock is involved.", "vectors": vectors}


def ids(tag: str, n: int) -> list[bytes]:
    return [b"\x12\x20" + hashlib.sha256(f"{tag}{i}".encode()).digest() for i in range(n)]


def sync_vectors() -> dict[str, Any]:
    fingerprints = []
    for n in (0, 1, 3, 100):
        s = ids("fp", n)
        fingerprints.append({"ids": [i.hex() for i in s], "fingerprint": fingerprint(s).hex()})
    sample = sorted(ids("msg", 3))
    messages = [
        {"ranges": [{"bound": "end", "mode": "fingerprint", "fingerprint": fingerprint(sample).hex()}]},
        {"ranges": [{"bound": "end", "mode": "idlist", "ids": [i.hex() for i in sample]}]},
        {"ranges": [{"bound": sample[1][:3].hex(), "mode": "skip"},
                    {"bound": "end", "mode": "missing", "ids": [sample[2].hex()]}]},
    ]
    for m in messages:
        ranges = [Range(INFINITY if r["bound"] == "end" else bytes.fromhex(r["bound"]),
                        {"skip": SKIP, "fingerprint": FINGERPRINT, "idlist": IDLIST, "missing": MISSING}[r["mode"]],
                        bytes.fromhex(r.get("fingerprint", "")), tuple(bytes.fromhex(i) for i in r.get("ids", ())))
                  for r in m["ranges"]]
        m["hex"] = encode_message(ranges).hex()
    shared = ids("shared", 200)
    run = transcript_run(shared + ids("mine", 3), shared + ids("theirs", 4), Params())
    assert run["need"] == sorted(i.hex() for i in ids("theirs", 4))
    return {
        "description": "Sync (PROTOCOL.md, 'Sync'): fingerprints of id sets; reconciliation messages "
        "with their encoding; one reconciliation between two sets as this implementation runs it "
        "(branching 16, leaves of 16 ids), and one at the smallest message size, 4096 bytes, that "
        "reaches it (`limit`: a responder answer of exactly 4096 bytes, ending with the final "
        "FINGERPRINT). The fingerprints and the message format are normative; the transcripts show "
        "correct runs (another implementation may split ranges elsewhere and still interoperate: "
        "check that your responder's answers lead to the same need). `invalid_messages`: one message "
        "per strict check, each refused with `error` by a receiver in the role `at`; "
        "`valid_messages`: messages at the limits, accepted, with their number of ranges. A message "
        "is given by `hex`, or, when large, by `build`: the concatenation of its items in order, "
        "each either a hex string or {\"counter\": {prefix, width, from, count, suffix}}, which "
        "stands for, for i = from to from + count - 1, prefix || i as `width` bytes big-endian || "
        "suffix.",
        "fingerprints": fingerprints, "messages": messages,
        "reconciliation": run,
        "limit": limit_run(),
        "invalid_messages": invalid_messages(),
        "valid_messages": valid_messages(),
    }


LIMIT_SEED = 68  # the first seed whose run has a message of exactly max_message_bytes


def limit_run() -> dict[str, Any]:
    """A reconciliation at max_message_bytes = 4096 (the smallest setting) whose messages reach
    the limit: one answer is exactly 4096 bytes, its last range the final FINGERPRINT."""
    shared = ids(f"limit-shared{LIMIT_SEED}", 300)
    run = transcript_run(shared + ids(f"limit-mine{LIMIT_SEED}", 4), shared + ids(f"limit-theirs{LIMIT_SEED}", 200),
                         Params(max_message_bytes=4096))
    sizes = [len(m) // 2 for t in run["transcript"] for m in t.values()]
    assert max(sizes) == 4096, sizes  # reaches the limit, exactly
    return {"max_message_bytes": 4096, **run}


def transcript_run(mine: list[bytes], theirs: list[bytes], params: Params) -> dict[str, Any]:
    """One reconciliation between two sets, as this implementation runs it."""
    me, other = Reconciler(IdSet(mine), params), Reconciler(IdSet(theirs), params)
    transcript = []
    message = me.initiate()
    while message is not None:
        answer = other.respond(message)
        transcript.append({"initiator": message.hex(), "responder": answer.hex()})
        message = me.reply(answer)
    assert sorted(me.need) == sorted(set(theirs) - set(mine))
    return {"initiator_ids": [i.hex() for i in sorted(mine)], "responder_ids": [i.hex() for i in sorted(theirs)],
            "transcript": transcript, "need": sorted(i.hex() for i in me.need)}


def _counter(prefix: str, width: int, start: int, count: int, suffix: str) -> dict[str, Any]:
    return {"counter": {"prefix": prefix, "width": width, "from": start, "count": count, "suffix": suffix}}


def build_message(items: list) -> bytes:
    """The bytes a `build` list stands for (see sync.json's description)."""
    out = bytearray()
    for item in items:
        if isinstance(item, str):
            out += bytes.fromhex(item)
            continue
        c = item["counter"]
        for i in range(c["from"], c["from"] + c["count"]):
            out += bytes.fromhex(c["prefix"]) + i.to_bytes(c["width"], "big") + bytes.fromhex(c["suffix"])
    return bytes(out)


def _long(total: int) -> list:
    """A message of exactly `total` bytes, valid but for its length: an IDLIST below the bound
    0x13 (ids 0x1220 || i), SKIP ranges with one-byte bounds from 0x14, a final SKIP."""
    for k in range(total // ID_LEN, 0, -1):
        head = "0113" + "02" + encode_varint(k).hex()
        rest = total - len(head) // 2 - ID_LEN * k - 2
        if rest >= 0 and rest % 3 == 0:
            skips = "".join(f"01{0x14 + j:02x}00" for j in range(rest // 3))
            return [head, _counter("1220", 32, 1, k, ""), skips + "ff00"]
    raise AssertionError(total)  # pragma: no cover


ID_LEN = 34
A_ID = "1220" + "05" * 32
B_ID = "1220" + "09" * 32


def invalid_messages() -> list[dict[str, Any]]:
    """One message per strict check of PROTOCOL.md ("A receiver checks every message strictly")."""
    fp = "ab" * 16
    cases = [
        ("bound-empty", "a bound is empty", "responder", "0000ff00"),
        ("bound-too-long", "a bound is longer than 34 bytes", "responder", "23" + "12" * 35 + "00ff00"),
        ("bound-begins-with-ff", "a bound begins with the byte 0xFF", "responder", "01ff00ff00"),
        ("bound-begins-with-ff-long", "a bound begins with the byte 0xFF", "responder", "02ff0000ff00"),
        ("bound-equal", "a bound is not above the previous one", "responder", "0312200500" "0312200500" "ff00"),
        ("bound-below", "a bound is not above the previous one", "responder", "0312200900" "0312200500" "ff00"),
        ("bound-prefix-below", "a bound is not above the previous one", "responder", "0312200500" "02122000" "ff00"),
        ("end-before-last", "0xFF before the last range", "responder", "ff00ff00"),
        ("bytes-after-end", "bytes follow the last range", "responder", "ff0100" + fp),
        ("no-end", "the ranges do not end at 0xFF", "responder", "0312200500"),
        ("empty", "the ranges do not end at 0xFF (an empty message)", "responder", ""),
        ("unknown-mode", "a mode is unknown", "responder", "ff04"),
        ("unknown-mode-high", "a mode is unknown", "initiator", "ff80"),
        ("missing-at-responder", "MISSING reaches a responder", "responder", "ff03 01" + A_ID),
        ("missing-empty-at-responder", "MISSING reaches a responder", "responder", "ff0300"),
        ("truncated-bound", "a payload is truncated (a bound)", "responder", "051220"),
        ("truncated-mode", "a payload is truncated (a mode byte)", "responder", "ff"),
        ("truncated-mode-after-bound", "a payload is truncated (a mode byte)", "responder", "03122005"),
        ("truncated-fingerprint", "a payload is truncated (a fingerprint)", "responder", "ff01" + "ab" * 15),
        ("truncated-varint", "a payload is truncated (a varint)", "responder", "ff0280"),
        ("truncated-id-list", "a payload is truncated (an id list)", "responder", "ff0202" + A_ID),
        ("truncated-id", "a payload is truncated (an id)", "initiator", "ff0301" + A_ID[:-2]),
        ("varint-not-minimal-zero", "a varint is not minimal", "responder", "ff028000"),
        ("varint-not-minimal-one", "a varint is not minimal", "responder", "ff028100" + A_ID),
        ("id-not-multihash", "an id is not a sha2-256 multihash", "responder", "ff0201" + "1221" + "05" * 32),
        ("id-not-multihash-prefix", "an id is not a sha2-256 multihash", "initiator", "ff0301" + "1320" + "05" * 32),
        ("ids-duplicate", "ids are not strictly ascending", "responder", "ff0202" + A_ID + A_ID),
        ("ids-descending", "ids are not strictly ascending", "initiator", "ff0302" + B_ID + A_ID),
        ("id-at-bound", "an id falls outside its range (at the range's bound)", "responder",
         "22" + A_ID + "0201" + A_ID + "ff00"),
        ("id-above-bound", "an id falls outside its range (above the range's bound)", "responder",
         "03122006" + "0201" + B_ID + "ff00"),
        ("id-below-lower-bound", "an id falls outside its range (below the previous bound)", "responder",
         "0312200600" + "ff0201" + A_ID),
    ]
    out = [{"name": n, "check": c, "at": at, "hex": h.replace(" ", ""), "error": "sync-bad-message"}
           for n, c, at, h in cases]
    out.append({"name": "too-many-ranges", "check": "a message has more than 8192 ranges", "at": "responder",
                "build": [_counter("02", 2, 1, 8192, "00"), "ff00"], "error": "sync-bad-message"})
    out.append({"name": "too-long", "check": "a message is longer than 131,072 bytes", "at": "responder",
                "build": _long(131_073), "error": "sync-bad-message"})
    for v in out:
        data = bytes.fromhex(v["hex"]) if "hex" in v else build_message(v["build"])
        if v["name"] == "too-long":
            assert len(data) == 131_073
        try:
            decode_message(data, max_ranges=8192, allow_missing=v["at"] == "initiator", max_bytes=131_072)
        except SyncError:
            continue
        raise AssertionError(f"{v['name']} was accepted")
    return out


def valid_messages() -> list[dict[str, Any]]:
    """Messages at the limits of the strict checks: accepted."""
    out = [
        {"name": "8192-ranges", "at": "responder", "build": [_counter("02", 2, 1, 8191, "00"), "ff00"], "ranges": 8192},
        {"name": "131072-bytes", "at": "responder", "build": _long(131_072)},
        {"name": "missing-at-initiator", "at": "initiator", "hex": "ff0301" + A_ID, "ranges": 1},
        {"name": "bound-34-bytes", "at": "responder", "hex": "22" + B_ID + "0201" + A_ID + "ff00", "ranges": 2},
        {"name": "bound-just-below-ff", "at": "responder", "hex": "01fe00ff00", "ranges": 2},
    ]
    for v in out:
        data = bytes.fromhex(v["hex"]) if "hex" in v else build_message(v["build"])
        ranges = decode_message(data, max_ranges=8192, allow_missing=v["at"] == "initiator", max_bytes=131_072)
        assert encode_message(ranges) == data
        v["bytes"] = len(data)
        v["ranges"] = len(ranges)
    assert out[1]["bytes"] == 131_072
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    args = parser.parse_args()
    files = {"commons.json": render(commons_vectors()), "sync.json": render(sync_vectors())}
    return emit(files, args.check, "spec/generate_commons_vectors.py")


if __name__ == "__main__":
    sys.exit(main())
