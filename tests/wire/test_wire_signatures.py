"""Signatures and ids: domains, malleability, what the id covers."""

from __future__ import annotations

import dataclasses
import hashlib

import cbor2
import pytest

from openmemory_node import wire

from .conftest import NOW

ELL = 2**252 + 27742317777372353535851937790883648493


def code_of(data: bytes) -> str:
    with pytest.raises(wire.WireError) as exc:
        wire.validate(data, now=NOW)
    return exc.value.code


def test_signing_message_is_domain_plus_unsigned_encoding(records):
    for record in records.values():
        body = cbor2.loads(wire.encode(record))
        del body["signature"]
        expected = f"openmemory/{record.record_type}/v1\x00".encode() + cbor2.dumps(body, canonical=True)
        assert wire.signing_message(record) == expected
        assert wire.DOMAINS[record.record_type] == f"openmemory/{record.record_type}/v1\x00".encode()


def test_signatures_are_deterministic(alice, records):
    lesson = records["lesson"]
    again = wire.sign(dataclasses.replace(lesson, signature=bytes(64)), alice)
    assert again == lesson and again.id == lesson.id


def test_a_signature_cannot_be_replayed_as_another_record_type(alice, bob, records):
    # Sign a lesson's body under each domain: only the lesson domain verifies.
    lesson = records["lesson"]
    body = cbor2.loads(wire.encode(lesson))
    del body["signature"]
    for other in wire.DOMAINS:
        signature = alice.sign(wire.DOMAINS[other] + cbor2.dumps(body, canonical=True)).signature
        data = cbor2.dumps({**body, "signature": signature}, canonical=True)
        if other == "lesson":
            assert wire.validate(data, now=NOW) == lesson
        else:
            assert code_of(data) == "signature"


def test_non_canonical_s_is_rejected(records):
    # S + L satisfies the same curve equation; RFC 8032 requires S < L, and libsodium checks it.
    # Without that check anyone could mint a second valid signature, hence a second record id.
    for record in records.values():
        s = int.from_bytes(record.signature[32:], "little")
        assert s < ELL
        twisted = record.signature[:32] + (s + ELL).to_bytes(32, "little")
        forged = dataclasses.replace(record, signature=twisted)
        assert forged.id != record.id
        assert code_of(wire.encode(forged)) == "signature"


def test_small_order_key_and_r_are_rejected(records):
    identity = b"\x01" + bytes(31)
    forged = dataclasses.replace(records["lesson"], signer=identity, signature=identity + bytes(32))
    assert code_of(wire.encode(forged)) == "signature"


def test_wrong_key_and_changed_content_fail(records, bob):
    lesson = records["lesson"]
    other = dataclasses.replace(lesson, signer=bytes(bob.verify_key))
    assert code_of(wire.encode(other)) == "signature"
    changed = dataclasses.replace(lesson, text=lesson.text.replace("3", "4"))
    assert code_of(wire.encode(changed)) == "signature"


def test_id_covers_the_signature(records, alice):
    # The id is the hash of the full signed bytes: the same body with any other signature bytes
    # has another id, so an invalid copy can never share an id (a GossipSub message id) with a
    # valid record and shadow it in a seen-cache.
    lesson = records["lesson"]
    bad = dataclasses.replace(lesson, signature=bytes(64))
    assert bad.id != lesson.id
    assert lesson.id_bytes == b"\x12\x20" + hashlib.sha256(wire.encode(lesson)).digest()


def test_the_same_content_signed_by_two_keys(records, bob):
    lesson = records["lesson"]
    theirs = wire.sign(dataclasses.replace(lesson, signer=bytes(bob.verify_key)), bob)
    assert theirs.id != lesson.id
    assert wire.dedup_key(theirs) == wire.dedup_key(lesson)
    assert wire.validate(wire.encode(theirs), now=NOW) == theirs
