"""The Open Memory wire format: signed, content-addressed records. Pure: no I/O, no clock.

Four records (:class:`Lesson`, :class:`Attestation`, :class:`Revocation`, :class:`Vouch`; a
lesson and an attestation also in version 2: a typed claim, and an answer per part of it),
encoded as deterministic CBOR, named by the multihash of their bytes, signed with Ed25519 over
a per-type domain. PROTOCOL.md is the specification; spec/ holds the CDDL and test vectors.

    >>> record = validate(data, now=int(time.time()))   # bytes from a peer: all checks
    >>> record.id, record.record_type, record.signer
    >>> encode(record) == data
"""

from .build import claim_of, new_attestation, new_lesson, new_revocation, new_vouch, public_key, sign, strength_milli
from .codec import check_size, decode, validate, verify, verify_signature, verify_signatures, verify_unsigned
from .errors import ERROR_CODES, WireError
from .ids import id_text, is_id, parse_id, provenance_commitment, record_id
from .jsonform import (
    dumps_jsonl,
    from_json,
    from_json_line,
    read_jsonl,
    read_jsonl_file,
    to_json,
    to_json_line,
)
from .limits import (
    DEFAULT_MAX_SKEW,
    ID_BYTES,
    KEY_BYTES,
    KIND_PATTERN,
    KNOWN_KINDS,
    MAX_CREATED,
    MIN_CREATED,
    MAX_DERIVED_FROM,
    MAX_EVIDENCE_COUNT,
    MAX_EVIDENCE_WINDOW,
    MAX_JSON_LINE_BYTES,
    MAX_KIND_BYTES,
    MAX_NESTING,
    MAX_REASON_BYTES,
    MAX_RECORD_BYTES,
    MAX_STRENGTH,
    MAX_TEXT_BYTES,
    PROVENANCE_BYTES,
    REASON_CODES,
    RECORD_TYPES,
    SIGNATURE_BYTES,
    VERDICTS,
    VERSION,
    VERSION_2,
    VERSIONS,
    KNOWN_VERSIONS,
    PART_VERDICTS,
    CLAIM_KINDS,
)
from .records import (
    DOMAINS,
    DOMAINS_BY_VERSION,
    Attestation,
    Evidence,
    Lesson,
    Record,
    RECORD_CLASSES,
    Revocation,
    Vouch,
    dedup_key,
    domain,
    encode,
    signing_message,
)
from .text import dedup_key_for, normalise_text

__all__ = [
    # errors
    "WireError", "ERROR_CODES",
    # records
    "Lesson", "Attestation", "Revocation", "Vouch", "Evidence", "Record", "RECORD_CLASSES", "RECORD_TYPES",
    # encoding, decoding, validation
    "encode", "decode", "validate", "verify", "check_size", "signing_message", "DOMAINS",
    "DOMAINS_BY_VERSION", "domain",
    # constructors
    "new_lesson", "new_attestation", "new_revocation", "new_vouch", "sign", "public_key", "strength_milli",
    "claim_of",
    # ids and content identity
    "record_id", "id_text", "parse_id", "is_id", "dedup_key", "dedup_key_for", "normalise_text",
    "provenance_commitment",
    # JSON
    "to_json", "from_json", "to_json_line", "from_json_line", "dumps_jsonl", "read_jsonl", "read_jsonl_file",
    # limits
    "VERSION", "VERSION_2", "VERSIONS", "KNOWN_VERSIONS", "PART_VERDICTS", "CLAIM_KINDS", "MAX_RECORD_BYTES", "MAX_JSON_LINE_BYTES", "MAX_NESTING", "MAX_TEXT_BYTES", "MAX_REASON_BYTES",
    "MAX_KIND_BYTES", "KIND_PATTERN", "KNOWN_KINDS", "MAX_STRENGTH", "MAX_DERIVED_FROM", "MAX_EVIDENCE_COUNT",
    "MAX_EVIDENCE_WINDOW", "MAX_CREATED", "MIN_CREATED", "DEFAULT_MAX_SKEW", "KEY_BYTES", "SIGNATURE_BYTES",
    "PROVENANCE_BYTES", "ID_BYTES", "VERDICTS", "REASON_CODES",
]
