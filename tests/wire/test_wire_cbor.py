"""The strict CBOR layer: what the scan refuses, and that it agrees with cbor2's re-encoding."""

from __future__ import annotations

import time

import cbor2
import pytest

from openmemory_node import wire
from openmemory_node.wire import cbor

from .conftest import NOW


def encoding_error(data: bytes) -> str:
    with pytest.raises(wire.WireError) as exc:
        cbor.loads(data)
    assert exc.value.code == "encoding"
    return str(exc.value)


@pytest.mark.parametrize(
    "hex_data, why",
    [
        ("", "no bytes"),
        ("1817", "non-shortest"),  # 23 in one extra byte
        ("190017", "non-shortest"),
        ("1a000000ff", "non-shortest"),
        ("1b00000000ffffffff", "non-shortest"),
        ("3817", "non-shortest"),  # negative
        ("5801ff", "non-shortest"),  # byte string length
        ("780161", "non-shortest"),  # text string length
        ("980100", "non-shortest"),  # array length
        ("b80100", "non-shortest"),  # (the entry is then missing too)
        ("5f41ff", "indefinite"),
        ("7f6161ff", "indefinite"),
        ("9f01ff", "indefinite"),
        ("bf616101ff", "indefinite"),
        ("1f", "indefinite"),  # malformed for an integer: also reported as indefinite
        ("1c", "reserved"),
        ("f93c00", "float"),
        ("fa3fc00000", "float"),
        ("fb3ff8000000000000", "float"),
        ("f6", "null"),
        ("f7", "undefined"),
        ("f0", "simple"),
        ("f820", "simple"),
        ("ff", "break"),
        ("c11a5f5e1000", "tag"),
        ("c249010000000000000000", "tag"),
        ("d8184101", "tag"),
        ("0100", "trailing"),
        ("a2616201616102", "unsorted"),
        ("a2616101616102", "duplicate"),
        ("a3616101616102616101", "duplicate"),
        ("8181818100", "deeper"),
        ("5b8000000000000000", "truncated"),
        ("9b8000000000000000", "truncated"),
        ("bb8000000000000000", "truncated"),
        ("62c3", "truncated"),
        ("a1", "truncated"),
    ],
)
def test_scan_refuses(hex_data, why):
    assert why in encoding_error(bytes.fromhex(hex_data))


def test_invalid_utf8_is_refused_after_the_scan():
    assert "undecodable" in encoding_error(bytes.fromhex("62c328"))
    assert "undecodable" in encoding_error(bytes.fromhex("63eda080"))  # a surrogate


def test_accepted_data_model():
    for value in [0, 23, 24, 255, 256, 65535, 65536, 2**32, 2**64 - 1, -1, -(2**64), b"", b"x" * 300, "", "\u00e9",
                  [], [1, [2]], {}, {"a": [1]}, {"b": 1, "aa": 2}, True, False, {1: 2, "a": b"b"}]:
        data = cbor.dumps(value)
        assert cbor.loads(data) == value


def test_key_order_is_bytewise_on_encodings():
    # Shorter encodings first ("b" before "aa"), as RFC 8949 4.2.1 orders them.
    assert cbor.dumps({"aa": 1, "b": 2}).hex() == "a261620262616101"
    assert "unsorted" in encoding_error(bytes.fromhex("a262616101616202"))


def test_spans_cut_equals_re_encoding(records):
    for record in records.values():
        data = wire.encode(record)
        value, spans = cbor.loads_with_spans(data)
        assert spans is not None and len(spans) == len(value)
        for key in value:
            body = dict(value)
            del body[key]
            assert cbor.without_entry(data, spans, cbor.dumps(key)) == cbor.dumps(body)


def test_decoding_hostile_lengths_is_fast():
    # Heads that claim enormous containers or strings never allocate or loop for them.
    hostile = [
        bytes.fromhex("9bffffffffffffffff"),
        bytes.fromhex("bbffffffffffffffff"),
        bytes.fromhex("5bffffffffffffffff"),
        bytes.fromhex("7bffffffffffffffff"),
        b"\x81" * 2048,
        b"\xa1\x61a" * 600,
        b"\x9a\x7f\xff\xff\xff" + b"\x00" * 2000,
    ]
    start = time.perf_counter()
    for data in hostile:
        for _ in range(100):
            with pytest.raises(wire.WireError):
                wire.decode(data[: wire.MAX_RECORD_BYTES])
    assert time.perf_counter() - start < 5  # generous: this is a hang guard, not a benchmark


def test_cbor2_alone_would_accept_what_we_refuse():
    # The reason for the scan: cbor2's decoder is lenient on each of these.
    for hex_data in ["1817", "9f01ff", "a2616101616102", "0100", "c11a5f5e1000", "f93c00"]:
        cbor2.loads(bytes.fromhex(hex_data))
        with pytest.raises(wire.WireError):
            cbor.loads(bytes.fromhex(hex_data))


def test_noncanonical_record_with_a_valid_signature_is_refused(records):
    # Same values, signature valid for them, but created encoded in 9 bytes instead of 5.
    record = records["lesson"]
    data = wire.encode(record)
    short = cbor.dumps(record.created)
    long = b"\x1b" + record.created.to_bytes(8, "big")
    at = data.index(cbor.dumps("created")) + len(cbor.dumps("created"))
    assert data[at : at + len(short)] == short
    lax = data[:at] + long + data[at + len(short) :]
    assert cbor2.loads(lax) == cbor2.loads(data)
    with pytest.raises(wire.WireError) as exc:
        wire.validate(lax, now=NOW)
    assert exc.value.code == "encoding"
