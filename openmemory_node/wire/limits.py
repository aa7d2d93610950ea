"""Sizes and limits of the v1 wire format. PROTOCOL.md lists the same numbers."""

from __future__ import annotations

#: Version 1: every record type.
VERSION = 1
#: Version 2: a lesson is a typed claim, an attestation says which parts it confirms
#: (PROTOCOL.md, "Claims" and "Versions"). Version 1 records stay valid, unchanged, forever.
VERSION_2 = 2
#: The versions each record type has. A version another type has (a version 2 revocation) is
#: ``version``, like a version nobody has.
VERSIONS: dict[str, tuple[int, ...]] = {"lesson": (1, 2), "attestation": (1, 2), "revocation": (1,), "vouch": (1,)}
KNOWN_VERSIONS = (1, 2)

#: Longest encoded record, in bytes. The largest lesson the field limits below allow encodes
#: to 1,356 bytes (tests/wire check it), so this leaves room, and bounds what a peer can send.
MAX_RECORD_BYTES = 2048
#: Longest line of the JSON Lines form, in bytes (UTF-8) without the line break.
MAX_JSON_LINE_BYTES = 16384
#: Containers nest at most this deep (the record map is depth 1; evidence and derived_from 2).
MAX_NESTING = 2

#: Lesson text: 1 to 512 bytes of UTF-8 (one or two sentences).
MAX_TEXT_BYTES = 512
#: Revocation reason: 0 to 280 bytes of UTF-8.
MAX_REASON_BYTES = 280
#: Lesson kind: 1 to 24 ASCII characters, a lower-case letter then letters, digits or '-'.
MAX_KIND_BYTES = 24
KIND_PATTERN = r"[a-z][a-z0-9-]{0,23}"
#: Kinds the local engine produces today. Any kind matching KIND_PATTERN is valid on the wire.
KNOWN_KINDS = ("correction", "error", "session")
#: Strength at publication, in thousandths (1500 is 1.5): 0 to 1,000,000.
MAX_STRENGTH = 1_000_000
#: derived_from holds at most this many lesson ids.
MAX_DERIVED_FROM = 16
#: Attestation evidence: session counts up to 1,000,000; window 1 s to 366 days.
MAX_EVIDENCE_COUNT = 1_000_000
MAX_EVIDENCE_WINDOW = 366 * 86400
#: created, Unix seconds UTC: from the protocol epoch, 2025-01-01T00:00:00Z (no record is older
#: than the protocol, and a record dated 0 would head its group forever), to 2**53 - 1 (exact in
#: every JSON implementation).
MIN_CREATED = 1_735_689_600
MAX_CREATED = 2**53 - 1

#: Default tolerance, in seconds, for a creation time in the future.
DEFAULT_MAX_SKEW = 300

KEY_BYTES = 32
SIGNATURE_BYTES = 64
PROVENANCE_BYTES = 32
#: A record id is a multihash: 0x12 (sha2-256), 0x20 (32 bytes), then the digest.
MULTIHASH_SHA2_256 = b"\x12\x20"
ID_BYTES = 34
ID_TEXT_LENGTH = 68

VERDICTS = ("confirmed", "failed")
#: A version 2 attestation's answer per part of the claim (its ``failure`` and its ``fix``).
PART_VERDICTS = ("confirmed", "failed", "untested")
#: The kinds of a version 2 lesson: only errors are claims about the world (a correction is a
#: person's preference and stays personal).
CLAIM_KINDS = ("error",)
REASON_CODES = ("incorrect", "harmful", "instruction", "private", "spam", "withdrawn", "other")
RECORD_TYPES = ("lesson", "attestation", "revocation", "vouch")
