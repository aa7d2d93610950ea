"""Decoding, verification and validation of records: the checks, in the protocol's order.

Validation order (PROTOCOL.md, "Validation"): size, encoding, version, type, schema, id (when
one is expected), clock skew, observation rule (for a version 2 lesson: the claim rules, codes
``claim`` and ``unsafe``), signature. Cheap checks first, so that the
one expensive step, the Ed25519 verification, only runs on records that pass everything else.
"""

from __future__ import annotations

from typing import Any

from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError
from nacl.exceptions import ValueError as NaclValueError

from . import cbor
from .errors import WireError
from .ids import parse_id
from .limits import DEFAULT_MAX_SKEW, MAX_RECORD_BYTES
from .records import Record, _RecordBase, record_from_map, signing_message, text_error

__all__ = ["decode", "validate", "verify", "verify_unsigned", "verify_signature", "verify_signatures", "check_size"]


def check_size(data: Any) -> bytes:
    """Return ``data`` as bytes if its length is within the limit, else raise WireError."""
    if type(data) is not bytes:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"a record is bytes, not {type(data).__name__}")
        data = bytes(data)
    if not data:
        raise WireError("size", "no bytes: an empty record")
    if len(data) > MAX_RECORD_BYTES:
        raise WireError("size", f"{len(data)} bytes; the limit is {MAX_RECORD_BYTES}")
    return data


def _decode(data: Any) -> tuple[Record, dict | None]:
    """(the record, where each field lies in its bytes): size, encoding, version, type, schema."""
    data = check_size(data)
    value, spans = cbor.loads_record(data)
    record = record_from_map(value)
    record.__dict__["_cbor"] = data  # the bytes are canonical: they are the record's encoding
    # Where each field lies in those bytes: verify() cuts the signed message out of them
    # rather than encoding the record again (signing_message with spans).
    record.__dict__["_spans"] = (data, spans)
    return record, spans


def decode(data: bytes) -> Record:
    """Decode one record strictly (size, encoding, version, type, schema); no signature check."""
    return _decode(data)[0]


def _verify(record: Record, now: int, max_skew: int, spans: dict | None) -> Record:
    verify_signature(record, _check_unsigned(record, now, max_skew, spans))
    return record


def _check_unsigned(record: Record, now: int, max_skew: int, spans: dict | None) -> bytes:
    """Clock skew and step 8 (the observation rule; a version 2 lesson's claim rules); returns
    the signed message."""
    if type(now) is not int or type(max_skew) is not int or max_skew < 0:
        raise TypeError("now and max_skew are integer seconds (max_skew >= 0)")
    if record.created > now + max_skew:
        raise WireError(
            "clock-skew",
            f"created {record.created - now} s in the future (tolerance {max_skew} s)",
            field="created",
        )
    error = text_error(record)
    if error is not None:
        raise error
    return signing_message(record, spans)


def verify_signature(record: Record, message: bytes) -> None:
    """The last step of :func:`verify`: WireError("signature") unless ``record``'s signature
    verifies ``message`` (from :func:`verify_unsigned`) under its signer's key."""
    try:
        crypto_sign_open(record.signature + message, record.signer)
    except (BadSignatureError, NaclValueError):
        raise WireError(
            "signature",
            f"the signature does not verify for this {record.record_type} under the signer's key",
            field="signature",
        ) from None


def verify_signatures(items: list[tuple[Record, bytes]]) -> list[Exception | None]:
    """:func:`verify_signature` of each (record, message): None where it verifies, else what it
    raises (a WireError for a signature that does not verify). PyNaCl releases the GIL in each
    libsodium call, so a batch checked on another thread runs beside the caller's."""
    out: list[Exception | None] = []
    for record, message in items:
        try:
            verify_signature(record, message)
            out.append(None)
        except Exception as exc:  # (raised by the caller at that record's step)
            out.append(exc)
    return out


def _spans_of(record: Record) -> dict | None:
    if not isinstance(record, _RecordBase):
        raise TypeError(f"verify() takes a record, not {type(record).__name__}")
    kept = record.__dict__.get("_spans")
    spans = kept[1] if kept is not None and record.__dict__.get("_cbor") is kept[0] else None
    return spans


def verify(record: Record, *, now: int, max_skew: int = DEFAULT_MAX_SKEW) -> Record:
    """Check an already-decoded record: clock skew, observation rule, signature.

    Returns the record, or raises WireError. ``now`` is the current time in Unix seconds
    (injected: the wire format never reads a clock).
    """
    return _verify(record, now, max_skew, _spans_of(record))


def verify_unsigned(record: Record, *, now: int, max_skew: int = DEFAULT_MAX_SKEW) -> bytes:
    """:func:`verify` up to the signature (clock skew, observation rule): returns the signed
    message, for :func:`verify_signature`. The two, in this order, are :func:`verify`; apart,
    the signature (libsodium, without the GIL) can be checked on another thread."""
    return _check_unsigned(record, now, max_skew, _spans_of(record))


def validate(
    data: bytes, *, now: int, max_skew: int = DEFAULT_MAX_SKEW, expect_id: str | bytes | None = None
) -> Record:
    """Everything a node checks before it stores or forwards bytes claimed to be a record.

    Size, encoding, version, type, schema, then the id (when ``expect_id`` is given, e.g. for
    a record fetched by id), clock skew, the observation rule, the signature. Returns the
    record or raises WireError with the code of the first check that failed.
    """
    record, spans = _decode(data)
    if expect_id is not None and parse_id(expect_id, "expect_id") != record.id_bytes:
        raise WireError("id", f"the record's id is {record.id}, not the id asked for", field="id")
    verify_signature(record, _check_unsigned(record, now, max_skew, spans))  # (_verify, one call less)
    return record
