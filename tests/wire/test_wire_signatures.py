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


# --- the strictness vectors are meaningful: a lax verifier accepts them ---------------------
# RFC 8032's reference verification (section 6), in pure Python, with the two checks a lax
# verifier skips made optional: S < L, and the key's y coordinate below p. Like the reference,
# it has no small-order check and compares points, not encodings.

_P = 2**255 - 19
_D = -121665 * pow(121666, _P - 2, _P) % _P
_SQRT_M1 = pow(2, (_P - 1) // 4, _P)


def _recover_x(y: int, sign: int) -> int | None:
    x2 = (y * y - 1) * pow(_D * y * y + 1, _P - 2, _P) % _P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (_P + 3) // 8, _P)
    if (x * x - x2) % _P:
        x = x * _SQRT_M1 % _P
    if (x * x - x2) % _P:
        return None
    return _P - x if (x & 1) != sign else x


def _decompress(data: bytes, *, reduce: bool):
    y = int.from_bytes(data, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    if y >= _P:
        if not reduce:
            return None
        y %= _P
    x = _recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % _P)


def _add(a, b):
    aa, bb = (a[1] - a[0]) * (b[1] - b[0]) % _P, (a[1] + a[0]) * (b[1] + b[0]) % _P
    cc, dd = 2 * a[3] * b[3] * _D % _P, 2 * a[2] * b[2] % _P
    e, f, g, h = bb - aa, dd - cc, dd + cc, bb + aa
    return (e * f, g * h, f * g, e * h)


def _mul(s: int, point):
    out = (0, 1, 1, 0)
    while s:
        if s & 1:
            out = _add(out, point)
        point, s = _add(point, point), s >> 1
    return out


def _equal(a, b) -> bool:
    return (a[0] * b[2] - b[0] * a[2]) % _P == 0 and (a[1] * b[2] - b[1] * a[2]) % _P == 0


_BASE_Y = 4 * pow(5, _P - 2, _P) % _P
_BASE = (_recover_x(_BASE_Y, 0), _BASE_Y, 1, _recover_x(_BASE_Y, 0) * _BASE_Y % _P)


def _verify(public: bytes, message: bytes, signature: bytes, *, lax: bool) -> bool:
    a = _decompress(public, reduce=lax)
    r = _decompress(signature[:32], reduce=lax)
    if a is None or r is None:
        return False
    s = int.from_bytes(signature[32:], "little")
    if s >= ELL and not lax:
        return False
    k = int.from_bytes(hashlib.sha512(signature[:32] + public + message).digest(), "little") % ELL
    return _equal(_mul(s, _BASE), _add(r, _mul(k, a)))


def test_strictness_vectors_pass_a_lax_verifier_and_fail_ours():
    import json
    from pathlib import Path

    vectors = json.loads((Path(__file__).resolve().parents[2] / "spec/vectors/invalid.json").read_text())
    by_name = {v["name"]: v for v in vectors["vectors"]}
    for name in ["signature-non-canonical-s", "signature-small-order-key", "signature-non-canonical-key"]:
        data = bytes.fromhex(by_name[name]["cbor"])
        body = cbor2.loads(data)
        message = f"openmemory/{body['type']}/v1\x00".encode() + cbor2.dumps(
            {k: v for k, v in body.items() if k != "signature"}, canonical=True
        )
        assert _verify(body["signer"], message, body["signature"], lax=True), name
        assert code_of(data) == "signature", name
    # and the reference is a real verifier: the other signature vectors fail even laxly
    for name in ["signature-bit-flip", "signature-other-domain", "signature-other-key", "signature-content-changed"]:
        body = cbor2.loads(bytes.fromhex(by_name[name]["cbor"]))
        message = f"openmemory/{body['type']}/v1\x00".encode() + cbor2.dumps(
            {k: v for k, v in body.items() if k != "signature"}, canonical=True
        )
        assert not _verify(body["signer"], message, body["signature"], lax=True), name


def test_reference_verifier_accepts_valid_records(records):
    for record in records.values():
        assert _verify(record.signer, wire.signing_message(record), record.signature, lax=False)
