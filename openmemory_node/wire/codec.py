"""Decoding, verification and validation of records: the checks, in the protocol's order.

Validation order (PROTOCOL.md, "Validation"): size, encoding, version, type, schema, id (when
one is expected), clock skew, observation rule (for a version 2 lesson: the claim rules, codes
``claim`` and ``unsafe``), signature. Cheap checks first, so that the
one expensive step, the Ed25519 verification, only runs on records that pass everything else.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError
from nacl.exceptions import ValueError as NaclValueError

from openmemory_protocol import native

from . import cbor, limits
from .errors import WireError
from .ids import parse_id
from .limits import DEFAULT_MAX_SKEW, MAX_RECORD_BYTES
from .records import RECORD_CLASSES, Evidence, Record, _RecordBase, record_from_map, signing_message, text_error

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
    if _native is not None and type(data) is bytes:
        # the size, the decoder and the field checks in C (a text outside printable ASCII by the
        # table's own check) for a valid record; None for anything else, which the Python code decides
        got = _native.record(data)
        if got is not None:
            return got
    return _decode_python(check_size(data))


def _decode_python(data: bytes, loads: Callable[[bytes], tuple] = cbor.loads_record) -> tuple[Record, dict | None]:
    """The reference of :func:`_decode` after the size (``_cbor_c.record`` is tested equal to it;
    the tests pass ``cbor.loads_record_python``)."""
    value, spans = loads(data)
    record = record_from_map(value)
    record.__dict__["_cbor"] = data  # the bytes are canonical: they are the record's encoding
    # Where each field lies in those bytes: verify() cuts the signed message out of them
    # rather than encoding the record again (signing_message with spans).
    record.__dict__["_spans"] = (data, spans)
    return record, spans


_LIMITS = ("MAX_RECORD_BYTES", "MIN_CREATED", "MAX_CREATED", "MAX_STRENGTH", "MAX_EVIDENCE_COUNT",
           "MAX_EVIDENCE_WINDOW", "VERSION", "MAX_NESTING", "MAX_TEXT_BYTES", "MAX_REASON_BYTES", "MAX_DERIVED_FROM",
           "KEY_BYTES", "SIGNATURE_BYTES", "PROVENANCE_BYTES", "ID_BYTES", "KIND_PATTERN", "VERDICTS", "REASON_CODES")


def configure_native(module: Any) -> Any:
    """Give the C decoder (``_cbor_c``) the tables it checks by (the record classes, Evidence, the
    limits); it refuses (ValueError) tables other than those it was written for. Returns it."""
    if module is not None:
        module.configure(RECORD_CLASSES, Evidence, {name: getattr(limits, name) for name in _LIMITS})
    return module


def _load_native() -> Any:
    try:
        return configure_native(cbor._native)
    except ValueError as exc:  # tables it was not written for: the Python code decides every record
        warnings.warn(f"{exc}; the Python code runs instead", native.StaleAccelerator, stacklevel=2)
        return None


#: The C accelerator (openmemory_node/wire/_cbor_c.c), or None: then the Python code runs.
_native = _load_native()


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


def _load_verifier() -> Any:
    """The C verifier (``_verify_c``) on PyNaCl's own libsodium, or None (the Python loop)."""
    module = native.load("openmemory_node.wire._verify_c")
    if module is None:
        return None
    try:
        import nacl._sodium as sodium

        module.configure(sodium.__file__, int(sodium.ffi.cast("uintptr_t", sodium.ffi.addressof(
            sodium.lib, "crypto_sign_open"))))
    except (ImportError, AttributeError, OSError) as exc:  # another PyNaCl build: the Python loop
        warnings.warn(f"the C verifier is not used ({exc})", native.StaleAccelerator, stacklevel=2)
        return None
    return module


_verifier = _load_verifier()


def verify_signatures(items: list[tuple[Record, bytes]]) -> list[Exception | None]:
    """:func:`verify_signature` of each (record, message): None where it verifies, else what it
    raises (a WireError for a signature that does not verify). With the C verifier
    (``_verify_c``: PyNaCl's libsodium, called without the GIL for the whole list) the
    signatures that verify are decided in C, and every other one by :func:`verify_signature`,
    which words the refusal."""
    verified = bytes(len(items))
    if _verifier is not None and items:
        try:
            verified = _verifier.verify([(record.signature, message, record.signer) for record, message in items])
        except (AttributeError, TypeError):  # not records of bytes: verify_signature says what is wrong
            pass
    out: list[Exception | None] = []
    for (record, message), ok in zip(items, verified):
        if ok:
            out.append(None)
            continue
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
