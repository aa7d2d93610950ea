"""Constructors that build and sign records. They raise WireError on invalid input."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from nacl.signing import SigningKey, VerifyKey

from .errors import WireError
from .ids import parse_id
from .limits import KEY_BYTES, MAX_STRENGTH, SIGNATURE_BYTES
from .records import Attestation, Evidence, Lesson, Record, Revocation, Vouch, observation_error, signing_message

__all__ = ["new_lesson", "new_attestation", "new_revocation", "new_vouch", "sign", "strength_milli", "public_key"]

_UNSIGNED = bytes(SIGNATURE_BYTES)
_HEX = frozenset("0123456789abcdef")


def _signing_key(key: Any) -> SigningKey:
    if isinstance(key, SigningKey):
        return key
    impl = getattr(key, "impl", None)  # libp2p's Ed25519PrivateKey wraps a SigningKey
    if isinstance(impl, SigningKey):
        return impl
    raise TypeError(
        "signing_key must be a nacl.signing.SigningKey (or a libp2p Ed25519PrivateKey), "
        f"not {type(key).__name__}"
    )


def public_key(signing_key: Any) -> bytes:
    """The 32-byte Ed25519 public key of a signing key: the signer field of its records."""
    return bytes(_signing_key(signing_key).verify_key)


def _bytes_arg(value: Any, size: int, field: str) -> bytes:
    """bytes, or lower-case hex text, of exactly ``size`` bytes."""
    if isinstance(value, VerifyKey):
        value = bytes(value)
    if type(value) is str:
        if len(value) != 2 * size or not _HEX.issuperset(value):
            raise WireError("schema", f"{field} must be {size} bytes or {2 * size} lower-case hex characters", field=field)
        value = bytes.fromhex(value)
    if type(value) is not bytes or len(value) != size:
        raise WireError("schema", f"{field} must be {size} bytes", field=field)
    return value


def strength_milli(strength: float) -> int:
    """A strength as the wire carries it: thousandths, rounded half to even, clamped to range."""
    if isinstance(strength, bool) or not isinstance(strength, (int, float)) or strength != strength:
        raise WireError("schema", "strength must be a number", field="strength")
    return max(0, min(MAX_STRENGTH, round(strength * 1000)))


def _observed(record: Record) -> Record:
    """Constructors refuse what validation would refuse: a text that instructs."""
    error = observation_error(record)
    if error is not None:
        raise error
    return record


def sign(record: Record, signing_key: Any) -> Record:
    """Return ``record`` signed by ``signing_key`` (its signer field must be that key).

    Low level: it signs whatever it is given, an instruction-shaped text included (the
    constructors below check that first). Tests use it to build invalid records."""
    key = _signing_key(signing_key)
    if record.signer != bytes(key.verify_key):
        raise WireError("signature", "the record's signer is not the signing key's public key", field="signer")
    signature = key.sign(signing_message(record)).signature
    return dataclasses.replace(record, signature=signature)


def new_lesson(
    signing_key: Any,
    *,
    text: str,
    kind: str,
    strength: int,
    provenance: bytes | str,
    derived_from: Iterable[bytes | str] = (),
    created: int,
) -> Lesson:
    """A signed lesson. ``strength`` is in thousandths (see strength_milli); ``derived_from``
    ids (bytes or text) are sorted and deduplicated."""
    key = _signing_key(signing_key)
    if isinstance(derived_from, (str, bytes)):
        raise WireError("schema", "derived_from must be a collection of ids", field="derived_from")
    parents = tuple(sorted({parse_id(item, "derived_from") for item in derived_from}))
    lesson = Lesson(
        text=text,
        kind=kind,
        strength=strength,
        provenance=_bytes_arg(provenance, 32, "provenance"),
        derived_from=parents,
        signer=bytes(key.verify_key),
        created=created,
        signature=_UNSIGNED,
    )
    return sign(_observed(lesson), key)


def new_attestation(
    signing_key: Any,
    *,
    lesson_id: bytes | str,
    verdict: str,
    met_before: bool,
    evidence: Evidence | Mapping[str, int],
    created: int,
) -> Attestation:
    """A signed attestation. ``evidence`` is an Evidence or a mapping with sessions, matched
    and window (seconds)."""
    key = _signing_key(signing_key)
    if not isinstance(evidence, Evidence):
        if not isinstance(evidence, Mapping) or set(evidence) != {"sessions", "matched", "window"}:
            raise WireError("schema", "evidence must have exactly sessions, matched and window", field="evidence")
        evidence = Evidence(sessions=evidence["sessions"], matched=evidence["matched"], window=evidence["window"])
    attestation = Attestation(
        lesson_id=parse_id(lesson_id, "lesson_id"),
        verdict=verdict,
        met_before=met_before,
        evidence=evidence,
        signer=bytes(key.verify_key),
        created=created,
        signature=_UNSIGNED,
    )
    return sign(attestation, key)


def new_revocation(
    signing_key: Any, *, target: bytes | str, reason_code: str, reason: str = "", created: int
) -> Revocation:
    """A signed revocation of the record ``target``."""
    key = _signing_key(signing_key)
    revocation = Revocation(
        target=parse_id(target, "target"),
        reason_code=reason_code,
        reason=reason,
        signer=bytes(key.verify_key),
        created=created,
        signature=_UNSIGNED,
    )
    return sign(_observed(revocation), key)


def new_vouch(signing_key: Any, *, subject: bytes | str | VerifyKey, created: int) -> Vouch:
    """A signed vouch by the signing key for the public key ``subject``."""
    key = _signing_key(signing_key)
    vouch = Vouch(
        subject=_bytes_arg(subject, KEY_BYTES, "subject"),
        signer=bytes(key.verify_key),
        created=created,
        signature=_UNSIGNED,
    )
    return sign(vouch, key)
