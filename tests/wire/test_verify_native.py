"""The C verifier (openmemory_node/wire/_verify_c.c) answers as ``wire.verify_signature``.

``codec.verify_signatures`` decides in C only the signatures that verify (libsodium's
``crypto_sign_verify_detached``, from PyNaCl's own library, without the GIL); every other one
goes through the Python ``verify_signature``, which words the refusal. Here: the C answer is 1
exactly where ``verify_signature`` returns (a signature of 64 bytes, a key of 32), over valid
records of every type and the same with a bit of the signature, the key or the message
changed, cut or lengthened; ``verify_signatures`` gives the same errors with and without the
module; bad arguments are refused.
"""

from __future__ import annotations

import os
import random
import threading

import pytest
from nacl.signing import SigningKey

from openmemory_node import wire
from openmemory_node.wire import codec
from . import native_diff
from .conftest import NOW, make_lesson


def _module():
    module = native_diff.built("openmemory_node.wire._verify_c", "the C verifier")
    import nacl._sodium as sodium

    module.configure(sodium.__file__, int(sodium.ffi.cast("uintptr_t", sodium.ffi.addressof(
        sodium.lib, "crypto_sign_open"))))
    return module


def _signed() -> list[tuple[wire.Record, bytes]]:
    alice, bob = SigningKey(b"\x01" * 32), SigningKey(b"\x02" * 32)
    lesson = make_lesson(alice)
    records = [
        lesson, make_lesson(bob, text="`make` failed twice: the build folder was stale.", kind="e-2x", strength=0),
        wire.new_attestation(bob, lesson_id=lesson.id, verdict="confirmed", met_before=True,
                             evidence={"sessions": 4, "matched": 4, "window": 1}, created=NOW),
        wire.new_revocation(alice, target=lesson.id, reason_code="incorrect", reason="Fixed upstream.", created=NOW),
        wire.new_vouch(alice, subject=bob.verify_key, created=NOW),
    ]
    out = []
    for record in records:
        decoded = wire.decode(wire.encode(record))
        out.append((decoded, wire.verify_unsigned(decoded, now=NOW)))
    return out


def _python_verdict(signature: bytes, message: bytes, key: bytes) -> int:
    record = type("R", (), {"signature": signature, "signer": key, "record_type": "lesson"})()
    try:
        codec.verify_signature(record, message)
    except wire.WireError:
        return 0
    return 1


def _variants() -> list[tuple[bytes, bytes, bytes]]:
    rng = random.Random(16)
    other = SigningKey(b"\x03" * 32).verify_key.encode()
    out = []
    for record, message in _signed():
        sig, key = record.signature, record.signer
        out += [(sig, message, key), (sig, message, other), (sig, b"", key), (sig, message + b"\x00", key),
                (sig, message[:-1], key), (sig[:63], message, key), (sig + b"\x00", message, key),
                (sig, message, key[:31]), (sig, message, key + b"\x00"), (bytes(64), message, key),
                (sig, message, bytes(32)), (b"", message, key), (sig, message, b"")]
        for _ in range(40):
            which = rng.randrange(3)
            parts = [bytearray(sig), bytearray(message), bytearray(key)]
            part = parts[which]
            part[rng.randrange(len(part))] ^= 1 << rng.randrange(8)
            out.append((bytes(parts[0]), bytes(parts[1]), bytes(parts[2])))
    return out


def test_the_c_verifier_is_built_current_and_used():
    c = _module()
    assert len(c.SOURCE_SHA256) == 64
    if not os.environ.get("OPENMEMORY_PURE"):
        assert codec._verifier is c
    else:
        assert codec._verifier is None


def test_the_c_verdict_is_the_python_one():
    c = _module()
    variants = _variants()
    got = c.verify(variants)
    assert type(got) is bytes and len(got) == len(variants)
    # (a key or signature of another length is left to the Python code: 0, never 1; PyNaCl
    # reads the first 32 bytes of a longer key. A record's are checked to be 32 and 64 bytes.)
    expected = bytes(_python_verdict(*v) if len(v[0]) == 64 and len(v[2]) == 32 else 0 for v in variants)
    assert got == expected
    assert 0 < sum(got) < len(got)  # both answers are exercised
    assert c.verify([]) == b""


def test_verify_signatures_gives_the_same_errors_with_and_without_the_module(monkeypatch):
    c = _module()
    items = []
    for record, message in _signed():
        items += [(record, message), (record, message + b"x")]
    monkeypatch.setattr(codec, "_verifier", c)
    with_c = codec.verify_signatures(items)
    monkeypatch.setattr(codec, "_verifier", None)
    without = codec.verify_signatures(items)
    assert [None if e is None else (type(e), e.code, str(e)) for e in with_c] == \
           [None if e is None else (type(e), e.code, str(e)) for e in without]
    assert with_c[0::2] == [None] * (len(items) // 2)
    assert all(e is not None and e.code == "signature" for e in with_c[1::2])
    # Not records of bytes: the Python path says what is wrong, as verify_signature would.
    monkeypatch.setattr(codec, "_verifier", c)
    odd = type("R", (), {"signature": "text", "signer": b"\x00" * 32, "record_type": "lesson"})()
    errors = codec.verify_signatures([(odd, b"m")])
    assert isinstance(errors[0], TypeError)


def test_bad_arguments_are_refused():
    c = _module()
    record, message = _signed()[0]
    good = (record.signature, message, record.signer)
    for bad in [(good,), {good}, None, b"x"]:
        with pytest.raises(TypeError):
            c.verify(bad)
    for item in [good[:2], good + (b"",), [*good], (record.signature, bytearray(message), record.signer),
                 (record.signature, message, "key"), None]:
        with pytest.raises(TypeError):
            c.verify([good, item])
    with pytest.raises(OSError):
        c.configure("/nonexistent/libsodium.so", 0)  # never loads a library
    import nacl._sodium as sodium

    with pytest.raises(OSError):
        c.configure(sodium.__file__, id(object()))  # an address outside that library
    assert c.verify([good]) == b"\x01"  # (still configured as before)


def test_it_runs_on_many_threads_at_once():
    c = _module()
    variants = _variants()
    expected = c.verify(variants)
    results = []

    def run():
        results.append(c.verify(variants))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [expected] * 4
