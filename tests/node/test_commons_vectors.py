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
from openmemory_node.reconcile import IdSet, Params, Reconciler, decode_message, encode_message, fingerprint

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
                           local_revocations=frozenset(c["local_revocations"]))
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
    run = SYNC["reconciliation"]
    me = Reconciler(IdSet(bytes.fromhex(i) for i in run["initiator_ids"]), Params())
    other = Reconciler(IdSet(bytes.fromhex(i) for i in run["responder_ids"]), Params())
    message = me.initiate()
    for step in run["transcript"]:
        assert message.hex() == step["initiator"]
        answer = other.respond(message)
        assert answer.hex() == step["responder"]
        message = me.reply(answer)
    assert message is None and sorted(i.hex() for i in me.need) == run["need"]


def test_the_settled_questions_each_have_a_scenario():
    # spec/js/README.md, question 4 (a)-(f): each rule is pinned by a scenario whose statuses
    # would differ under the other reading.
    names = {v["name"] for v in COMMONS["vectors"]}
    assert {"fade-window-boundary", "vote-before-head", "latest-voice-before-head", "revoked-head",
            "vouch-under-open", "attestation-of-a-non-lesson"} <= names
