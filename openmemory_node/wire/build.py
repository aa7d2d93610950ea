"""Constructors that build and sign records. They raise WireError on invalid input."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from nacl.signing import SigningKey, VerifyKey

from .errors import WireError
from .ids import parse_id
from .limits import KEY_BYTES, MAX_STRENGTH, SIGNATURE_BYTES
from openmemory_protocol import claims as _claims

from .limits import CLAIM_KINDS, VERSION_2
from .records import Attestation, Evidence, Lesson, Record, Revocation, Vouch, signing_message, text_error

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
    """Constructors refuse what validation would refuse: a text that instructs, a claim that
    is not one (step 8 of validation)."""
    error = text_error(record)
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


def claim_of(claim: Any) -> _claims.Claim:
    """A claim from a :class:`~openmemory_protocol.claims.Claim` or a map of its parts (as the
    wire's ``claim`` map and the local API's body name them); WireError ``schema`` for a map
    that is not one (unknown part, a part that is not text, no situation or failure)."""
    if isinstance(claim, _claims.Claim):
        return claim
    try:
        return _claims.Claim.from_parts(claim)
    except _claims.ClaimError as exc:
        raise WireError("schema", f"claim: {exc}", field="claim") from None


def new_lesson(
    signing_key: Any,
    *,
    text: str | None = None,
    kind: str,
    strength: int,
    provenance: bytes | str,
    derived_from: Iterable[bytes | str] = (),
    created: int,
    claim: Any = None,
) -> Lesson:
    """A signed lesson. ``strength`` is in thousandths (see strength_milli); ``derived_from``
    ids (bytes or text) are sorted and deduplicated.

    With ``claim`` (a Claim or a map of its parts) it is a version 2 lesson whose text is the
    claim's rendering (a ``text`` given too must be that rendering); without, version 1 with
    ``text``. Either way the record is refused (WireError) where validation would refuse it."""
    key = _signing_key(signing_key)
    if isinstance(derived_from, (str, bytes)):
        raise WireError("schema", "derived_from must be a collection of ids", field="derived_from")
    parents = tuple(sorted({parse_id(item, "derived_from") for item in derived_from}))
    if claim is not None:
        if kind not in CLAIM_KINDS:
            raise WireError("schema", f"a claim's kind is {' or '.join(CLAIM_KINDS)}, not {kind!r:.40}", field="kind")
        claim = dataclasses.replace(claim_of(claim), kind=kind)
        violation = _claims.claim_violation(claim)
        if violation is not None:
            where = f"claim.{violation.part}" if violation.part else "claim"
            raise WireError(violation.code, f"{where}: {violation}", field=where)
        rendered = _claims.render(claim)
        if text is not None and text != rendered:
            raise WireError("claim", f"text is not the rendering of the claim: expected {rendered!r:.600}",
                            field="text")
        text = rendered
        lesson = Lesson(version=VERSION_2, text=text, kind=kind, claim=claim, strength=strength,
                        provenance=_bytes_arg(provenance, 32, "provenance"), derived_from=parents,
                        signer=bytes(key.verify_key), created=created, signature=_UNSIGNED)
        return sign(_observed(lesson), key)
    if text is None:
        raise WireError("schema", "a lesson has a text (version 1) or a claim (version 2)", field="text")
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
    verdict: str | None = None,
    met_before: bool,
    evidence: Evidence | Mapping[str, int],
    created: int,
    failure: str | None = None,
    fix: str | None = None,
    exposed: bool | None = None,
) -> Attestation:
    """A signed attestation. ``evidence`` is an Evidence or a mapping with sessions, matched
    and window (seconds).

    With ``failure`` and ``fix`` (each confirmed, failed or untested) and ``exposed``, a
    version 2 attestation (of a version 2 lesson's parts); with ``verdict``, version 1."""
    key = _signing_key(signing_key)
    if not isinstance(evidence, Evidence):
        if not isinstance(evidence, Mapping) or set(evidence) != {"sessions", "matched", "window"}:
            raise WireError("schema", "evidence must have exactly sessions, matched and window", field="evidence")
        evidence = Evidence(sessions=evidence["sessions"], matched=evidence["matched"], window=evidence["window"])
    if failure is not None or fix is not None or exposed is not None:
        if verdict is not None:
            raise WireError("schema", "an attestation has a verdict (version 1) or failure and fix (version 2), "
                            "not both", field="verdict")
        attestation = Attestation(
            version=VERSION_2,
            lesson_id=parse_id(lesson_id, "lesson_id"),
            failure=failure,
            fix=fix,
            exposed=False if exposed is None else exposed,
            met_before=met_before,
            evidence=evidence,
            signer=bytes(key.verify_key),
            created=created,
            signature=_UNSIGNED,
        )
        return sign(attestation, key)
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
