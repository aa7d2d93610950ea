"""Property tests of the wire format (hypothesis, bounded so the suite stays fast)."""

from __future__ import annotations

import dataclasses
import random

import cbor2
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from nacl.signing import SigningKey

from openmemory_protocol.observation import is_observation
from openmemory_node import wire
from openmemory_node.wire import cbor

from . import native_diff
from .conftest import NOW

KEYS = [SigningKey(bytes([i]) * 32) for i in range(1, 5)]
FAST = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])

# Texts that pass the text rules and the observation rule: a fixed subject, then free words.
words = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x2FF, blacklist_characters="\x7f"),
                min_size=0, max_size=60)
lesson_text = st.builds(lambda w: "`make` failed: " + w, words).filter(
    lambda t: len(t.encode()) <= wire.MAX_TEXT_BYTES and is_observation(t)
    and not any(0x7F <= ord(c) <= 0x9F or c == "\xad" or 0x34F == ord(c) for c in t)
)
ids = st.binary(min_size=32, max_size=32).map(lambda d: b"\x12\x20" + d)
created = st.integers(min_value=wire.MIN_CREATED, max_value=NOW)
key = st.sampled_from(KEYS)


@st.composite
def lessons(draw):
    return wire.new_lesson(
        draw(key), text=draw(lesson_text), kind=draw(st.from_regex(r"[a-z][a-z0-9-]{0,23}", fullmatch=True)),
        strength=draw(st.integers(0, wire.MAX_STRENGTH)), provenance=draw(st.binary(min_size=32, max_size=32)),
        derived_from=draw(st.lists(ids, max_size=wire.MAX_DERIVED_FROM)), created=draw(created),
    )


@st.composite
def attestations(draw):
    sessions = draw(st.integers(0, wire.MAX_EVIDENCE_COUNT))
    verdict = draw(st.sampled_from(wire.VERDICTS))
    low = 1 if verdict == "confirmed" else 0
    assume(sessions >= low)
    return wire.new_attestation(
        draw(key), lesson_id=draw(ids), verdict=verdict, met_before=draw(st.booleans()),
        evidence={"sessions": sessions, "matched": draw(st.integers(low, sessions)),
                  "window": draw(st.integers(1, wire.MAX_EVIDENCE_WINDOW))},
        created=draw(created),
    )


@st.composite
def revocations(draw):
    return wire.new_revocation(
        draw(key), target=draw(ids), reason_code=draw(st.sampled_from(wire.REASON_CODES)),
        reason=draw(st.one_of(st.just(""), lesson_text.filter(lambda t: len(t.encode()) <= wire.MAX_REASON_BYTES))),
        created=draw(created),
    )


@st.composite
def vouches(draw):
    voucher, subject = draw(st.permutations(KEYS))[:2]
    return wire.new_vouch(voucher, subject=subject.verify_key, created=draw(created))


records = st.one_of(lessons(), attestations(), revocations(), vouches())


@FAST
@given(records)
def test_decode_encode_round_trip(record):
    data = wire.encode(record)
    again = wire.decode(data)
    assert again == record and wire.encode(again) == data and again.id == record.id
    assert wire.validate(data, now=NOW) == record
    assert wire.from_json(wire.to_json(record)) == record


@settings(max_examples=8, deadline=None, derandomize=True)
@given(records, st.data())
def test_every_single_byte_mutation_is_rejected_or_changes_the_id(record, data):
    # Every position, and at each a few replacement values (always including a bit flip):
    # the mutated bytes are refused, or they are a valid record with another id.
    original = wire.encode(record)
    for position in range(len(original)):
        values = {original[position] ^ 0x01, data.draw(st.integers(0, 255), label="byte")}
        values.discard(original[position])
        for value in values:
            mutated = original[:position] + bytes([value]) + original[position + 1 :]
            try:
                accepted = wire.validate(mutated, now=NOW)
            except wire.WireError:
                continue
            assert accepted.id != record.id  # pragma: no cover - a valid mutation needs a forged signature


def _opaque_ranges(data: bytes) -> list[range]:
    """Where byte-string contents and free texts lie in an encoded record: mutating them only
    changes content the signature covers, so the sampled test above is enough there."""
    value = cbor2.loads(data)
    out = []
    for name, item in value.items():
        if type(item) is bytes or name in ("text", "reason"):
            content = item if type(item) is bytes else item.encode()
            encoded = cbor.dumps(name) + cbor.dumps(item)
            start = data.index(encoded) + len(encoded) - len(content)
            out.append(range(start, start + len(content)))
    return out


def test_every_value_at_every_structural_byte_is_rejected(records):
    # Heads, keys, integers, enums, booleans: all 255 other values at each of those positions.
    for record in records.values():
        original = wire.encode(record)
        opaque = _opaque_ranges(original)
        positions = [p for p in range(len(original)) if not any(p in r for r in opaque)]
        assert len(positions) > 60
        for position in positions:
            for value in range(256):
                if value == original[position]:
                    continue
                mutated = original[:position] + bytes([value]) + original[position + 1 :]
                try:
                    wire.validate(mutated, now=NOW)
                except wire.WireError:
                    continue
                raise AssertionError(f"{record.record_type}: byte {position} = {value:#04x} accepted")


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(max_size=wire.MAX_RECORD_BYTES + 8))
def test_arbitrary_bytes_raise_only_wire_error(data):
    try:
        wire.validate(data, now=NOW)
    except wire.WireError as error:
        assert error.code in wire.ERROR_CODES


# CBOR-shaped garbage reaches deeper than random bytes: well-formed items of every kind.
cbor_values = st.recursive(
    st.one_of(st.integers(-(2**64), 2**64 - 1), st.binary(max_size=40), st.text(max_size=40), st.booleans(),
              st.none(), st.floats(allow_nan=False)),
    lambda children: st.one_of(st.lists(children, max_size=5),
                               st.dictionaries(st.one_of(st.text(max_size=12), st.integers(0, 30)), children, max_size=6)),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(cbor_values)
def test_arbitrary_cbor_raises_only_wire_error(value):
    data = cbor2.dumps(value)
    try:
        wire.validate(data, now=NOW)
    except wire.WireError as error:
        assert error.code in wire.ERROR_CODES


@settings(max_examples=200, deadline=None, derandomize=True)
@given(records, st.sampled_from(["version", "type", "signer", "created", "signature"]), cbor_values)
def test_replacing_a_field_with_anything_raises_only_wire_error(record, field, value):
    body = cbor2.loads(wire.encode(record))
    body[field] = value
    try:
        wire.validate(cbor2.dumps(body, canonical=True), now=NOW)
    except wire.WireError as error:
        assert error.code in wire.ERROR_CODES


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.dictionaries(st.sampled_from(["version", "type", "text", "kind", "strength", "provenance",
                                        "derived_from", "signer", "created", "signature", "id", "x"]),
                       st.one_of(st.integers(-5, 2**60), st.text(max_size=80), st.booleans(), st.none(),
                                 st.lists(st.text(max_size=70), max_size=3), st.floats(allow_nan=False)),
                       max_size=12))
def test_arbitrary_json_objects_raise_only_wire_error(obj):
    try:
        wire.from_json(obj)
    except wire.WireError as error:
        assert error.code in wire.ERROR_CODES


@FAST
@given(records)
def test_scan_spans_cut_matches_re_encoding(record):
    data = wire.encode(record)
    value, spans = cbor.loads_with_spans(data)
    body = dict(value)
    del body["signature"]
    assert cbor.without_entry(data, spans, cbor.dumps("signature")) == cbor.dumps(body)


@FAST
@given(lessons(), key)
def test_resigning_by_another_key_keeps_the_dedup_key_and_changes_the_id(lesson, other):
    theirs = wire.sign(dataclasses.replace(lesson, signer=bytes(other.verify_key)), other)
    assert wire.dedup_key(theirs) == wire.dedup_key(lesson)
    assert (theirs.id == lesson.id) == (theirs.signer == lesson.signer)


@FAST
@given(st.text(max_size=200))
def test_normalisation_is_idempotent_on_its_output_key(text):
    once = wire.normalise_text(text)
    assert wire.normalise_text(once) == once


def _typed(value):
    """A value with the type of every item in it (``True == 1`` in Python; here they differ)."""
    if type(value) is dict:
        return ("dict", [(_typed(k), _typed(v)) for k, v in value.items()])
    if type(value) is list:
        return ("list", [_typed(v) for v in value])
    return (type(value).__name__, value)


def _outcome(decode, data: bytes):
    try:
        value, spans = decode(data)
    except wire.WireError as exc:
        return "refused", str(exc)
    return "value", _typed(value), spans


def _once(decode, data: bytes):
    """``decode`` run once on ``data``: a function that gives its answer (or raises its error) again."""
    try:
        answer, error = decode(data), None
    except wire.WireError as exc:
        answer, error = None, exc

    def again(_data):
        if error is not None:
            raise error
        return answer

    return again


def _both_paths(data: bytes):
    """The one-pass decoder's outcome, asserted the general path's, and the C decoder's the same
    (native_diff.check: fast_record, and record with the field checks, as the Python code);
    returns the outcome and the kind of the C answer."""
    fast = cbor._fast_record(data)  # (cbor.loads_record_python, its two steps apart: each run once)
    general = _once(cbor.loads_with_spans, data)
    python = general if fast is None else (lambda _data: fast)
    outcome = _outcome(python, data)
    assert outcome == _outcome(general, data), data.hex()
    kind = native_diff.check(data, python, fast)
    assert (kind == "record") <= (outcome[0] == "value")
    return outcome, kind


def test_the_fast_record_decoder_answers_as_the_general_path(records):
    # loads_record decodes record-shaped bytes in one pass and hands anything else to
    # loads_with_spans: at every structural byte, every value, the two give the same value and
    # spans, or the same refusal; the C decoder (fast_record, and record with the field checks)
    # the Python one's, byte for byte
    kinds = []
    for record in records.values():
        original = wire.encode(record)
        assert _both_paths(original)[1] == "record"
        opaque = _opaque_ranges(original)
        for position in (p for p in range(len(original)) if not any(p in r for r in opaque)):
            for value in range(256):
                mutated = original[:position] + bytes([value]) + original[position + 1:]
                kinds.append(_both_paths(mutated)[1])
        for cut in range(len(original)):
            _both_paths(original[:cut])
    assert {"record", "refused"} <= set(kinds)


# Record-shaped maps of every kind of value, encoded canonically, by cbor2 in insertion order, or
# loosely (one head longer than the shortest, one map's entries shuffled), then a byte changed, a
# byte inserted or the bytes cut: the fast decoder (which does not re-encode to compare) gives
# the general path's value, types included, spans or refusal.
def _head(major: int, arg: int, wider: int) -> bytes:
    """A CBOR head, ``wider`` steps longer than the shortest (0: the shortest)."""
    widths = [w for w in (0, 1, 2, 4, 8) if (arg < 24 if w == 0 else arg < 1 << (8 * w))]
    width = widths[min(wider, len(widths) - 1)]
    if width == 0:
        return bytes([major << 5 | arg])
    return bytes([major << 5 | {1: 24, 2: 25, 4: 26, 8: 27}[width]]) + arg.to_bytes(width, "big")


def _loose(value, state: dict) -> bytes:
    """An encoding of ``value`` in which the ``state["target"]``-th item (if there are so many)
    has a head longer than the shortest, and its entries shuffled if it is a map."""
    state["seen"] += 1
    wider = state["wider"] if state["seen"] == state["target"] else 0
    if type(value) is bool:
        return b"\xf5" if value else b"\xf4"
    if type(value) is int and 0 <= value < 2**64:
        return _head(0, value, wider)
    if type(value) is bytes:
        return _head(2, len(value), wider) + value
    if type(value) is str:
        raw = value.encode("utf-8")
        return _head(3, len(raw), wider) + raw
    if type(value) is list:
        return _head(4, len(value), wider) + b"".join(_loose(v, state) for v in value)
    if type(value) is dict:
        entries = sorted((_loose(k, state), _loose(v, state)) for k, v in value.items())
        if wider:
            state["rng"].shuffle(entries)
        return _head(5, len(entries), wider) + b"".join(k + v for k, v in entries)
    return cbor2.dumps(value)


_LENGTHS = (0, 1, 22, 23, 24, 25, 31, 32, 33, 64, 130, 255, 256, 300)


def _random_value(rng, depth: int = 0):
    pick = rng.random()
    if pick < 0.3:
        return rng.choice((0, 1, 23, 24, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1,
                           rng.randrange(2 ** rng.randrange(1, 64))))
    if pick < 0.45:
        return rng.randbytes(rng.choice(_LENGTHS))
    if pick < 0.6:
        return "".join(rng.choice("ab \u00e9\u4e2d\U0001f600") for _ in range(rng.choice(_LENGTHS)))
    if pick < 0.7:
        return rng.random() < 0.5
    if pick < 0.8 and depth < 3:
        return [_random_value(rng, depth + 1) for _ in range(rng.choice((0, 1, 2, 5, 23, 24)))]
    if pick < 0.9 and depth < 3:
        return _random_map(rng, depth + 1)
    return rng.choice((None, -1, -(2**40), 1.5, 0.0, 2**64, "x" * 70000 if rng.random() < 0.01 else "x"))


def _random_map(rng, depth: int = 0) -> dict:
    keys = {rng.choice(("version", "type", "text", "kind", "signer", "created", "a", "b" * 23, "c" * 24, "\u00e9"))
            for _ in range(rng.randrange(12))}
    return {key: _random_value(rng, depth) for key in keys}


def test_the_fast_record_decoder_needs_no_re_encoding():
    rng = random.Random(16)
    accepted = 0
    for _ in range(4000):
        value = _random_map(rng)
        encoding = rng.choice(("canonical", "cbor2", "loose", "loose"))
        if encoding == "loose":
            data = _loose(value, {"seen": 0, "target": rng.randrange(1, 12), "wider": rng.choice((1, 2)), "rng": rng})
        else:
            data = cbor2.dumps(value, canonical=encoding == "canonical")
        change = rng.choice(("as is", "as is", "set", "insert", "cut"))
        where = rng.randrange(len(data))
        if change == "set":
            data = data[:where] + bytes([rng.randrange(256)]) + data[where + 1:]
        elif change == "insert":
            data = data[:where] + bytes([rng.randrange(256)]) + data[where:]
        elif change == "cut":
            data = data[:where]
        outcome = _both_paths(data)[0]
        accepted += outcome[0] == "value"
    assert 500 < accepted < 3500  # both answers, in numbers
