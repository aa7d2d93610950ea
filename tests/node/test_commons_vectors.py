"""spec/vectors/commons.json and sync.json against our implementation, and the files against
their generator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from openmemory_node import wire
from openmemory_node.commons import Commons, CommonsConfig
from openmemory_node.reconcile import (
    FINGERPRINT, IdSet, Params, Reconciler, SyncError, decode_message, encode_message, fingerprint,
)

SPEC = Path(__file__).resolve().parents[2] / "spec"
COMMONS = json.loads((SPEC / "vectors" / "commons.json").read_text())
SYNC = json.loads((SPEC / "vectors" / "sync.json").read_text())


def test_the_files_are_what_the_generator_makes():
    out = subprocess.run([sys.executable, str(SPEC / "generate_commons_vectors.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("vector", COMMONS["vectors"], ids=lambda v: v["name"])
def test_commons_vector(vector):
    c = vector["config"]
    config = CommonsConfig(policy=c["policy"], threshold=c["threshold"], fade_window=c["fade_window"],
                           trust=frozenset(bytes.fromhex(k) for k in c["trust"]),
                           revokers=frozenset(bytes.fromhex(k) for k in c["revokers"]),
                           local_revocations=frozenset(c["local_revocations"]),
                           team=frozenset(bytes.fromhex(k) for k in c["team"]),
                           blocked=frozenset(bytes.fromhex(k) for k in c["blocked"]))
    records = [wire.validate(bytes.fromhex(h), now=2_000_000_000) for h in vector["records"]]
    for order in (records, records[::-1]):
        machine = Commons(config)
        for record in order:
            machine.add(record)
        assert machine.statuses() == vector["statuses"]


def test_the_commons_vectors_reach_every_status():
    seen = {s for v in COMMONS["vectors"] for s in v["statuses"].values()}
    assert seen == {"candidate", "common", "faded", "revoked", "counted", "not-counted", "pending",
                    "effective", "no-effect"}


def test_sync_vectors():
    for v in SYNC["fingerprints"]:
        assert fingerprint(bytes.fromhex(i) for i in v["ids"]).hex() == v["fingerprint"]
    for m in SYNC["messages"]:
        data = bytes.fromhex(m["hex"])
        assert encode_message(decode_message(data, max_ranges=10, allow_missing=True)) == data
    _replay(SYNC["reconciliation"], Params())


def _replay(run, params):
    """Both roles of a transcript: our initiator sends its messages, our responder its answers."""
    me = Reconciler(IdSet(bytes.fromhex(i) for i in run["initiator_ids"]), params)
    other = Reconciler(IdSet(bytes.fromhex(i) for i in run["responder_ids"]), params)
    message = me.initiate()
    sizes = []
    for step in run["transcript"]:
        assert message.hex() == step["initiator"]
        answer = other.respond(message)
        assert answer.hex() == step["responder"]
        sizes += [len(message), len(answer)]
        message = me.reply(answer)
    assert message is None and sorted(i.hex() for i in me.need) == run["need"]
    return sizes


def test_sync_limit_transcript_reaches_the_message_size_exactly():
    run = SYNC["limit"]
    sizes = _replay(run, Params(max_message_bytes=run["max_message_bytes"]))
    assert max(sizes) == run["max_message_bytes"] == 4096
    full = next(bytes.fromhex(t["responder"]) for t in run["transcript"] if len(t["responder"]) == 2 * 4096)
    last = decode_message(full, max_ranges=8192, allow_missing=True)[-1]
    assert last.mode == FINGERPRINT and len(full) - 18 == 4078  # cut: 4078 bytes + the final range


def _message(v) -> bytes:
    if "hex" in v:
        return bytes.fromhex(v["hex"])
    out = bytearray()
    for item in v["build"]:
        if isinstance(item, str):
            out += bytes.fromhex(item)
        else:
            c = item["counter"]
            for i in range(c["from"], c["from"] + c["count"]):
                out += bytes.fromhex(c["prefix"]) + i.to_bytes(c["width"], "big") + bytes.fromhex(c["suffix"])
    return bytes(out)


def _receive(v, data):
    """What the daemon does with a RECONCILE payload, in the vector's role (default Params: the
    [sync] defaults, 8192 ranges and 131,072 bytes)."""
    ids = IdSet()
    if v["at"] == "responder":
        return Reconciler(ids).respond(data)
    return Reconciler(ids).reply(data)


@pytest.mark.parametrize("vector", SYNC["invalid_messages"], ids=lambda v: v["name"])
def test_invalid_sync_message(vector):
    # sync.py charges every SyncError from a message as sync-bad-message
    assert vector["error"] == "sync-bad-message"
    with pytest.raises(SyncError):
        _receive(vector, _message(vector))


@pytest.mark.parametrize("vector", SYNC["valid_messages"], ids=lambda v: v["name"])
def test_valid_sync_message_at_the_limits(vector):
    data = _message(vector)
    assert len(data) == vector["bytes"]
    ranges = decode_message(data, max_ranges=Params().max_ranges, allow_missing=vector["at"] == "initiator",
                            max_bytes=Params().max_receive_bytes)
    assert len(ranges) == vector["ranges"] and encode_message(ranges) == data
    _receive(vector, data)  # and the role answers it


def test_every_strict_check_has_an_invalid_message():
    checks = {v["check"].split(" (")[0] for v in SYNC["invalid_messages"]}
    assert checks == {
        "a bound is empty", "a bound is longer than 34 bytes", "a bound begins with the byte 0xFF",
        "a bound is not above the previous one", "0xFF before the last range", "bytes follow the last range",
        "the ranges do not end at 0xFF", "a mode is unknown", "MISSING reaches a responder",
        "a payload is truncated", "a varint is not minimal", "an id is not a sha2-256 multihash",
        "ids are not strictly ascending", "an id falls outside its range",
        "a message has more than 8192 ranges", "a message is longer than 131,072 bytes"}


def test_the_settled_questions_each_have_a_scenario():
    # spec/js/README.md, question 4 (a)-(f): each rule is pinned by a scenario whose statuses
    # would differ under the other reading.
    names = {v["name"] for v in COMMONS["vectors"]}
    assert {"fade-window-boundary", "vote-before-head", "latest-voice-before-head", "revoked-head",
            "vouch-under-open", "attestation-of-a-non-lesson"} <= names


def test_the_config_lists_are_sorted_hex_keys_and_always_present():
    for vector in COMMONS["vectors"]:
        c = vector["config"]
        assert set(c) == {"policy", "threshold", "fade_window", "trust", "revokers", "local_revocations",
                          "team", "blocked"}, vector["name"]
        for name in ("trust", "revokers", "team", "blocked"):
            assert c[name] == sorted(c[name]) and all(len(bytes.fromhex(k)) == 32 for k in c[name]), vector["name"]


def _statuses_with(vector, **change):
    """The vector's statuses under its config with some fields changed (a real machine)."""
    c = {**vector["config"], **change}
    config = CommonsConfig(policy=c["policy"], threshold=c["threshold"], fade_window=c["fade_window"],
                           trust=frozenset(bytes.fromhex(k) for k in c["trust"]),
                           revokers=frozenset(bytes.fromhex(k) for k in c["revokers"]),
                           local_revocations=frozenset(c["local_revocations"]),
                           team=frozenset(bytes.fromhex(k) for k in c["team"]),
                           blocked=frozenset(bytes.fromhex(k) for k in c["blocked"]))
    machine = Commons(config)
    for h in vector["records"]:
        machine.add(wire.validate(bytes.fromhex(h), now=2_000_000_000))
    return machine.statuses()


def test_the_claim_scenarios_are_version_2_and_their_lists_matter():
    # R8, R10-R12: the new scenarios hold real version 2 records, and each list in their config
    # changes what they show (so the statuses pin the list's rule, not an accident).
    by_name = {v["name"]: v for v in COMMONS["vectors"]}
    claims = ["claim-parts", "claim-without-fix", "exposed", "parts", "claim-fix-fails", "team", "blocked",
              "same-claim-revoked", "same-claim-withdrawn", "same-claim-local"]
    assert set(claims) <= set(by_name)
    for name in claims:
        records = [wire.decode(bytes.fromhex(h)) for h in by_name[name]["records"]]
        assert any(r.record_type == "lesson" and r.version == 2 for r in records), name
    for name, field in (("team", "team"), ("blocked", "blocked"), ("same-claim-revoked", "revokers"),
                        ("same-claim-local", "local_revocations")):
        vector = by_name[name]
        assert _statuses_with(vector, **{field: []}) != vector["statuses"], name
    # A near-copy is revoked with its claim (R12): more revoked members than revocations name.
    revoked = [i for i, s in by_name["same-claim-revoked"]["statuses"].items() if s == "revoked"]
    assert len(revoked) == 5
