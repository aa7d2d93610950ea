"""The C record decoder (openmemory_node/wire/_cbor_c.c) answers as the Python code, input for input.

The exhaustive byte-level comparisons (every value at every structural byte, every cut, 4,000
random record-shaped maps) are in test_wire_properties.py; here: the spec vectors, every field
replaced by values of every type and at its limits, every byte of the texts, hypothesis fuzzing
of arbitrary bytes and of mutated records, and the module's own refusals. Each comparison is
tests/wire/native_diff.check: the same value, types and spans as cbor._fast_record (or None
exactly where it gives None), and a record equal in every entry of its state to the Python
path's, or None exactly where the Python path refuses.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from openmemory_node import wire
from openmemory_node.wire import cbor, codec
from openmemory_protocol import native

from . import native_diff
from .conftest import make_lesson

SPEC = Path(__file__).resolve().parents[2] / "spec" / "vectors"
FUZZ = settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


def _records() -> list[wire.Record]:
    alice, bob = SigningKey(b"\x01" * 32), SigningKey(b"\x02" * 32)
    first = make_lesson(alice)
    second = make_lesson(bob, text="`make test` failed twice: the fixture database was missing.", kind="e-2x",
                         strength=0, derived_from=[first.id])
    many = make_lesson(alice, text="x" * wire.MAX_TEXT_BYTES, strength=wire.MAX_STRENGTH, created=wire.MIN_CREATED,
                       derived_from=[bytes([0x12, 0x20, i]) + bytes(31) for i in range(wire.MAX_DERIVED_FROM)])
    accented = make_lesson(alice, text="`git push` failed in 3 sessions: the branch \u201cma\u00een\u201d had no "
                                      "upstream \u2014 the push was refused (`\u4e2d\U0001f600`).")
    return [
        first, second, many, accented,
        wire.new_revocation(alice, target=first.id, reason_code="incorrect", created=1_760_000_000,
                            reason="The hook in the caf\u00e9 repository sets the upstream \u2014 since the move."),
        wire.new_attestation(bob, lesson_id=first.id, verdict="confirmed", met_before=True,
                             evidence={"sessions": 4, "matched": 4, "window": 1}, created=wire.MIN_CREATED + 1),
        wire.new_attestation(bob, lesson_id=first.id, verdict="failed", met_before=False,
                             evidence={"sessions": 0, "matched": 0, "window": wire.MAX_EVIDENCE_WINDOW},
                             created=1_760_000_000),
        wire.new_revocation(alice, target=first.id, reason_code="other", reason="", created=1_760_000_000),
        wire.new_revocation(alice, target=first.id, reason_code="spam", reason="y" * wire.MAX_REASON_BYTES,
                            created=1_760_000_000),
        wire.new_vouch(alice, subject=bob.verify_key, created=1_760_000_000),
    ]


RECORDS = _records()
ENCODED = [wire.encode(r) for r in RECORDS]


def test_the_c_decoder_is_built_current_and_used():
    c = native_diff.c_module()  # fails (not skips) when it is not built or is stale
    assert c.SOURCE_SHA256 and len(c.SOURCE_SHA256) == 64
    if not os.environ.get("OPENMEMORY_PURE"):
        assert codec._native is c and cbor._fast is c.fast_record
    else:
        assert codec._native is None and cbor._fast is cbor._fast_record


def test_every_valid_record_is_decided_by_the_c_path():
    for data, record in zip(ENCODED, RECORDS):
        assert native_diff.check(data) == "record"
        got, spans = native_diff.c_module().record(data)
        assert got == record and wire.encode(got) is data and got.id == record.id
        assert wire.signing_message(got, spans) == wire.signing_message(record)


def test_the_spec_vectors():
    valid = json.loads((SPEC / "valid.json").read_text())["vectors"]
    invalid = json.loads((SPEC / "invalid.json").read_text())["vectors"]
    kinds = {v["name"]: native_diff.check(bytes.fromhex(v["cbor"])) for v in valid}
    # version 1 in C; version 2 declined by the C decoder, decided by the Python path
    assert {k for n, k in kinds.items() if v2(n)} == {"python"}
    assert {k for n, k in kinds.items() if not v2(n)} == {"record"}
    decoding = {"size", "encoding", "version", "type", "schema"}  # the checks of decoding (the rest after it)
    for vector in invalid:
        kind = native_diff.check(bytes.fromhex(vector["cbor"]))
        accepted = "python" if vector["error"] in ("claim", "unsafe") else "record"
        assert kind == ("refused" if vector["error"] in decoding else accepted), vector["name"]


def v2(name: str) -> bool:
    return "-v2-" in name


# Values of every type the decoder makes, and at and beyond each field's limits.
_ID = b"\x12\x20" + bytes(32)
_VALUES = [
    0, 1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**53 - 1, 2**53, 2**64 - 1,
    wire.MIN_CREATED - 1, wire.MIN_CREATED, wire.MAX_STRENGTH, wire.MAX_STRENGTH + 1,
    wire.MAX_EVIDENCE_COUNT, wire.MAX_EVIDENCE_COUNT + 1, wire.MAX_EVIDENCE_WINDOW, wire.MAX_EVIDENCE_WINDOW + 1,
    True, False, b"", b"\x00" * 31, b"\x00" * 32, b"\x00" * 33, b"\x00" * 64, b"\x01" * 32, _ID, _ID[:33],
    b"\x12\x21" + bytes(32), "", " ", "  ", "a", "x" * 512, "x" * 513, "y" * 280, "y" * 281, "\t", "a\x7f", "\u00e9",
    "caf\u00e9 failed", "a\u200bb", "error", "Error", "e-1", "1e", "-e", "a" * 24, "a" * 25, "a_b",
    "confirmed", "failed", "incorrect", "withdrawn", "nope",
    [], [_ID], [_ID, _ID], [b"\x12\x20" + bytes([1]) * 32, _ID],
    [_ID] * 17, [1], {}, {"sessions": 1, "matched": 1, "window": 1}, {"sessions": 1, "matched": 2, "window": 1},
    {"sessions": 1, "matched": 0, "window": 0}, {"sessions": True, "matched": 0, "window": 1},
    {"sessions": 1, "matched": 0}, {"sessions": 1, "matched": 0, "window": 1, "x": 1}, [[]], {"a": {}},
]


def test_every_field_replaced_by_every_value():
    kinds = []
    for record in RECORDS:
        base = cbor.loads(wire.encode(record))
        for field in [*base, "extra"]:
            for value in [*_VALUES, None]:
                changed = dict(base)
                if value is None:
                    changed.pop(field, None)  # a missing field
                else:
                    changed[field] = value
                for data in (cbor.dumps(changed), wire.encode(record)[:1] + cbor.dumps(changed)[1:]):
                    kinds.append(native_diff.check(data))
        if record.record_type == "vouch":  # the subject must not be the voucher's own key
            kinds.append(native_diff.check(cbor.dumps({**base, "subject": base["signer"]})))
    assert {"record", "refused"} == set(kinds)


def test_every_byte_of_the_texts():
    # The text checks: the C path checks printable ASCII itself, any other text by the table's check
    kinds = []
    for record in (RECORDS[0], RECORDS[3], RECORDS[4], RECORDS[7], RECORDS[8]):
        data = wire.encode(record)
        text = getattr(record, "text", None) or getattr(record, "reason")
        start = data.index(text.encode()) if text else len(data)
        for position in range(start, start + min(len(text), 40)):
            for value in range(256):
                kinds.append(native_diff.check(data[:position] + bytes([value]) + data[position + 1:]))
            for char in ("\u00e9", "\u00ad", "\u0085", "\u200b", "\u4e2d", "\ufffe", "\U0001f600", "\U000e0001"):
                raw = char.encode()  # same length: a character of 2 to 4 bytes in place of as many
                kinds.append(native_diff.check(data[:position] + raw + data[position + len(raw):]))
    assert {"record", "refused"} == set(kinds)


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes(data):
    native_diff.check(data)


@FUZZ
@given(st.sampled_from(ENCODED),
       st.lists(st.tuples(st.sampled_from(("set", "insert", "delete", "cut")), st.integers(0, 2000),
                          st.integers(0, 255)), min_size=1, max_size=4))
def test_mutated_records(data, changes):
    for change, where, value in changes:
        where %= len(data) + 1
        if change == "set" and where < len(data):
            data = data[:where] + bytes([value]) + data[where + 1:]
        elif change == "insert":
            data = data[:where] + bytes([value]) + data[where:]
        elif change == "delete":
            data = data[:where] + data[where + 1:]
        else:
            data = data[:where]
    native_diff.check(data)


def test_its_own_refusals():
    c = native_diff.c_module()
    for call in (c.fast_record, c.record):
        with pytest.raises(TypeError):
            call(bytearray(ENCODED[0]))
    data = ENCODED[0]
    for start, stop in ((0, 3), (3, 2), (3, len(data) + 1), (-1, 3)):
        with pytest.raises(ValueError):
            c.without_entry(b"", data, start, stop)
    with pytest.raises(ValueError):
        c.without_entry(b"", b"\x00\x01", 1, 2)
    for args in ((b"", data, 1), (b"", bytearray(data), 1, 2), ("", data, 1, 2), (b"", data, 1.0, 2)):
        with pytest.raises(TypeError):
            c.without_entry(*args)
    assert c.record(data + bytes(wire.MAX_RECORD_BYTES)) is None  # beyond the size: the Python path says so
    limits = {name: getattr(wire.limits, name) for name in codec._LIMITS}
    try:
        for broken in ({**limits, "KIND_PATTERN": "[a-z]+"}, {**limits, "MAX_NESTING": 3},
                       {k: v for k, v in limits.items() if k != "MAX_STRENGTH"}):
            with pytest.raises(ValueError):
                c.configure(wire.RECORD_CLASSES, wire.Evidence, broken)
            assert c.record(ENCODED[0]) is None  # not configured: every record is the Python path's
        with pytest.raises(ValueError):
            c.configure({**wire.RECORD_CLASSES, "vouch": wire.Lesson}, wire.Evidence, limits)
        with pytest.MonkeyPatch.context() as patch:  # at import: a warning, and the Python code decides
            patch.setattr(codec, "RECORD_CLASSES", {**wire.RECORD_CLASSES, "vouch": wire.Lesson})
            patch.setattr(cbor, "_native", c)
            with pytest.warns(native.StaleAccelerator, match="the vouch table"):
                assert codec._load_native() is None
    finally:
        codec.configure_native(c)
    assert c.record(ENCODED[0]) is not None
