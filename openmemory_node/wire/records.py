"""The four records, their fields and every rule about a field's value, in versions 1 and 2.

Everything that decides whether a decoded map is a record lives at the top of this file, as a
table: record type -> version -> field -> check. Version 2 exists for lessons (a typed claim,
:mod:`openmemory_protocol.claims`) and attestations (per part of the claim, and whether the
lesson was shown); one class per type holds both versions (``record.version`` says which). PROTOCOL.md ("Records") and spec/records.cddl say the
same thing in prose and CDDL; spec/vectors holds examples of each rule broken.

A record object is schema-valid by construction: building one directly runs the same checks
as decoding (``__post_init__``), so a ``Lesson`` in memory always encodes to a valid record. It
is not necessarily *signed* correctly: :func:`openmemory_node.wire.verify` checks that.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, ClassVar, Union

from openmemory_protocol import claims as _claims
from openmemory_protocol.observation import observation_violation

from . import cbor
from .errors import WireError
from .ids import id_text, is_id, record_id
from .limits import (
    KEY_BYTES,
    CLAIM_KINDS,
    KIND_PATTERN,
    KNOWN_VERSIONS,
    MAX_CREATED,
    MIN_CREATED,
    MAX_DERIVED_FROM,
    MAX_EVIDENCE_COUNT,
    MAX_EVIDENCE_WINDOW,
    MAX_REASON_BYTES,
    MAX_RECORD_BYTES,
    MAX_STRENGTH,
    MAX_TEXT_BYTES,
    PART_VERDICTS,
    PROVENANCE_BYTES,
    REASON_CODES,
    SIGNATURE_BYTES,
    VERDICTS,
    VERSION,
    VERSIONS,
)
from .text import check_text, dedup_key_for

__all__ = [
    "Evidence",
    "Lesson",
    "Attestation",
    "Revocation",
    "Vouch",
    "Record",
    "RECORD_CLASSES",
    "record_from_map",
    "record_class",
    "encode",
    "signing_message",
    "DOMAINS",
    "domain",
    "dedup_key",
    "text_error",
    "text_fields",
]

Check = Callable[[Any], Any]

# ----------------------------------------------------------------------------------------
# Field checks: each takes the decoded CBOR value (int, str, bytes, bool, list, dict) and
# returns the Python value the record holds, or raises WireError("schema").
# ----------------------------------------------------------------------------------------


def _schema(field: str, message: str) -> WireError:
    return WireError("schema", f"{field} {message}", field=field)


def _uint(field: str, maximum: int, minimum: int = 0) -> Check:
    def check(value: Any) -> int:
        # type() and not isinstance(): a bool is not an integer here, nor is a float.
        if type(value) is not int:
            raise _schema(field, f"must be an unsigned integer, not {type(value).__name__}")
        if not minimum <= value <= maximum:
            raise _schema(field, f"must be between {minimum} and {maximum}, not {value}")
        return value

    return check


def _fixed_bytes(field: str, size: int) -> Check:
    def check(value: Any) -> bytes:
        if type(value) is not bytes:
            raise _schema(field, f"must be a byte string, not {type(value).__name__}")
        if len(value) != size:
            raise _schema(field, f"must be {size} bytes, not {len(value)}")
        return value

    return check


def _id(field: str) -> Check:
    def check(value: Any) -> bytes:
        if not is_id(value):
            raise _schema(field, "must be a record id: 34 bytes, 0x12 0x20 then a SHA-256 digest")
        return value

    return check


def _one_of(field: str, allowed: tuple[str, ...]) -> Check:
    allowed_set = frozenset(allowed)

    def check(value: Any) -> str:
        if type(value) is not str or value not in allowed_set:
            raise _schema(field, f"must be one of {', '.join(allowed)}, not {value!r:.40}")
        return value

    return check


def _boolean(field: str) -> Check:
    def check(value: Any) -> bool:
        if type(value) is not bool:
            raise _schema(field, f"must be true or false, not {type(value).__name__}")
        return value

    return check


def _text(field: str, min_bytes: int, max_bytes: int) -> Check:
    def check(value: Any) -> str:
        return check_text(value, field, min_bytes=min_bytes, max_bytes=max_bytes)

    return check


_KIND_RE = re.compile(KIND_PATTERN)


def _kind(value: Any) -> str:
    if type(value) is not str or _KIND_RE.fullmatch(value) is None:
        raise _schema("kind", f"must match {KIND_PATTERN} (e.g. correction, error), not {value!r:.40}")
    return value


_check_parent_id = _id("derived_from")


def _id_list(value: Any) -> tuple[bytes, ...]:
    field = "derived_from"
    if type(value) is not list:
        raise _schema(field, f"must be an array of record ids, not {type(value).__name__}")
    if len(value) > MAX_DERIVED_FROM:
        raise _schema(field, f"holds {len(value)} ids; the limit is {MAX_DERIVED_FROM}")
    previous = b""
    for item in value:
        _check_parent_id(item)
        if item <= previous:
            raise _schema(field, "must be sorted in ascending bytewise order with no duplicates")
        previous = item
    return tuple(value)


_CLAIM_REQUIRED = ("situation", "failure")


def _claim(value: Any) -> "_claims.Claim":
    """A version 2 lesson's ``claim`` map, as CBOR shapes it (schema): a map whose keys are
    among the parts, situation and failure present, each value a text string by the text rules.
    What the parts say (C1 to C5 of the claims) is step 8's ``claim`` and ``unsafe``."""
    field = "claim"
    if type(value) is not dict:
        raise _schema(field, f"must be a map of the claim's parts, not {type(value).__name__}")
    unknown = sorted(repr(k)[:40] for k in value if k not in _claims.PARTS)
    if unknown:
        raise _schema(field, f"has unknown part(s) {', '.join(unknown)} (the parts: {', '.join(_claims.PARTS)})")
    missing = [k for k in _CLAIM_REQUIRED if k not in value]
    if missing:
        raise _schema(field, f"has no {' and no '.join(missing)}")
    parts = {name: check_text(item, f"claim.{name}", min_bytes=0, max_bytes=MAX_TEXT_BYTES)
             for name, item in value.items()}
    return _claims.Claim(kind="error", **parts)


# ----------------------------------------------------------------------------------------
# The table. Common fields first; then per record type, in the order the records show them.
# ----------------------------------------------------------------------------------------

COMMON_FIELDS: dict[str, Check] = {
    "signer": _fixed_bytes("signer", KEY_BYTES),
    "created": _uint("created", MAX_CREATED, MIN_CREATED),
    "signature": _fixed_bytes("signature", SIGNATURE_BYTES),
}

EVIDENCE_FIELDS: dict[str, Check] = {
    "sessions": _uint("evidence.sessions", MAX_EVIDENCE_COUNT),
    "matched": _uint("evidence.matched", MAX_EVIDENCE_COUNT),
    "window": _uint("evidence.window", MAX_EVIDENCE_WINDOW, minimum=1),
}

TYPE_FIELDS: dict[str, dict[str, Check]] = {
    "lesson": {
        "text": _text("text", 1, MAX_TEXT_BYTES),
        "kind": _kind,
        "strength": _uint("strength", MAX_STRENGTH),
        "provenance": _fixed_bytes("provenance", PROVENANCE_BYTES),
        "derived_from": _id_list,
    },
    "attestation": {
        "lesson_id": _id("lesson_id"),
        "verdict": _one_of("verdict", VERDICTS),
        "met_before": _boolean("met_before"),
        "evidence": lambda value: _evidence(value),
    },
    "revocation": {
        "target": _id("target"),
        "reason_code": _one_of("reason_code", REASON_CODES),
        "reason": _text("reason", 0, MAX_REASON_BYTES),
    },
    "vouch": {
        "subject": _fixed_bytes("subject", KEY_BYTES),
    },
}

#: Version 2 (PROTOCOL.md, "Claims"): a lesson is a typed claim whose ``text`` is the rendering of
#: its parts; an attestation answers per part and says whether the lesson was shown (exposed).
TYPE_FIELDS_V2: dict[str, dict[str, Check]] = {
    "lesson": {
        "text": _text("text", 1, MAX_TEXT_BYTES),
        "kind": _one_of("kind", CLAIM_KINDS),
        "claim": _claim,
        "strength": TYPE_FIELDS["lesson"]["strength"],
        "provenance": TYPE_FIELDS["lesson"]["provenance"],
        "derived_from": _id_list,
    },
    "attestation": {
        "lesson_id": _id("lesson_id"),
        "failure": _one_of("failure", PART_VERDICTS),
        "fix": _one_of("fix", PART_VERDICTS),
        "exposed": _boolean("exposed"),
        "met_before": _boolean("met_before"),
        "evidence": lambda value: _evidence(value),
    },
}

#: Text fields the observation rule applies to, per record type (version 1; a version 2 lesson's
#: text is the rendering of its claim, which the claim rules check instead).
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "lesson": ("text",),
    "attestation": (),
    "revocation": ("reason",),
    "vouch": (),
}

#: Signature domains (version 1): the signed message is the domain followed by the encoded
#: unsigned record.
DOMAINS: dict[str, bytes] = {t: f"openmemory/{t}/v1\x00".encode() for t in TYPE_FIELDS}
#: Signature domains by (type, version): version 2 signs under ``openmemory/<type>/v2\0``.
DOMAINS_BY_VERSION: dict[tuple[str, int], bytes] = {
    (t, v): f"openmemory/{t}/v{v}\x00".encode() for t, versions in VERSIONS.items() for v in versions}


def domain(record: "Record") -> bytes:
    """The signature domain of a record: its type's, in its version."""
    return DOMAINS_BY_VERSION[record.record_type, record.version]


def _verdict_of(failure: str, fix: str) -> str:
    """A version 2 attestation's overall verdict: failed if a part failed, else confirmed."""
    return "failed" if "failed" in (failure, fix) else "confirmed"


def _cross_checks(record_type: str, values: dict[str, Any], version: int = VERSION) -> None:
    """Rules that involve more than one field."""
    if record_type == "attestation" and version == 2:
        failure, fix = values["failure"], values["fix"]
        if failure == "untested" and fix == "untested":
            raise _schema("fix", "and failure are both untested: an attestation tests at least one part")
        if fix == "confirmed" and failure != "confirmed":
            raise _schema("fix", "is confirmed only where the failure is confirmed (the fix of a failure not met)")
        if "confirmed" in (failure, fix) and values["evidence"].matched < 1:
            raise _schema("evidence", "of an attestation that confirms a part must have matched >= 1")
        values["verdict"] = _verdict_of(failure, fix)
    elif record_type == "attestation":
        if values["verdict"] == "confirmed" and values["evidence"].matched < 1:
            raise _schema("evidence", "of a confirmed attestation must have matched >= 1")
    elif record_type == "vouch":
        if values["subject"] == values["signer"]:
            raise _schema("subject", "must not be the voucher's own key")


_ENVELOPE = frozenset({"version", "type"})
_EVIDENCE_KEYS = frozenset(EVIDENCE_FIELDS)


def _fields_of(value: dict, table: dict[str, Check], what: str, keys: frozenset) -> dict[str, Any]:
    """Check that ``value`` has exactly ``keys`` and run the table's check on each field."""
    if value.keys() != keys:
        missing = [k for k in table if k not in value]
        extra = sorted(repr(k)[:40] for k in value if k not in keys)
        parts = []
        if missing:
            parts.append("missing " + ", ".join(missing))
        if extra:
            parts.append("unknown " + ", ".join(extra))
        field = missing[0] if missing else None
        raise WireError("schema", f"{what}: {'; '.join(parts)}", field=field)
    return {name: check(value[name]) for name, check in table.items()}


def _evidence(value: Any) -> "Evidence":
    if type(value) is not dict:
        raise _schema("evidence", f"must be a map, not {type(value).__name__}")
    values = _fields_of(value, EVIDENCE_FIELDS, "evidence", _EVIDENCE_KEYS)
    if values["matched"] > values["sessions"]:
        raise _schema("evidence", "matched must not exceed sessions")
    return _bare(Evidence, values)


def _bare(cls: type, values: dict[str, Any]) -> Any:
    """Build a frozen dataclass from values that were already checked (no second check)."""
    obj = object.__new__(cls)
    obj.__dict__.update(values)
    return obj


def record_class(value: Any) -> type:
    """Steps 3 and 4 of validation (PROTOCOL.md): the version, then the type, before any other
    field is looked at. Returns the record class; raises WireError (version, type or schema)."""
    if type(value) is not dict:
        raise WireError("schema", f"a record is a CBOR map, not {type(value).__name__}")
    version = value.get("version")
    if version is None:
        raise WireError("schema", "the record has no version field", field="version")
    if type(version) is not int:
        raise _schema("version", f"must be an unsigned integer, not {type(version).__name__}")
    if version not in KNOWN_VERSIONS:
        raise WireError(
            "version", f"version {version} is not supported (this implementation reads versions "
            f"{' and '.join(map(str, KNOWN_VERSIONS))})", field="version",
        )
    record_type = value.get("type")
    if type(record_type) is not str:
        raise _schema("type", "must be present and a text string")
    cls = RECORD_CLASSES.get(record_type)
    if cls is None:
        raise WireError("type", f"unknown record type {record_type!r:.40}", field="type")
    if version not in VERSIONS[record_type]:
        raise WireError("version", f"a {record_type} has no version {version} (only "
                        f"{' and '.join(map(str, VERSIONS[record_type]))})", field="version")
    return cls


def record_from_map(value: Any) -> "Record":
    """Check a decoded map against the table and build its record (no signature check)."""
    cls = record_class(value)
    record_type = cls.record_type
    version = value["version"]
    if version == VERSION:
        values = _fields_of(value, cls._table, f"a {record_type} record", cls._keys)
        _cross_checks(record_type, values)
        return _bare(cls, values)
    table = cls._tables[version]
    values = _fields_of(value, table, f"a version {version} {record_type} record", cls._keys_by_version[version])
    _cross_checks(record_type, values, version)
    values["version"] = version
    return _bare(cls, values)


# ----------------------------------------------------------------------------------------
# The records.
# ----------------------------------------------------------------------------------------


def _wire_value(value: Any) -> Any:
    if type(value) is tuple:
        return list(value)
    if type(value) is Evidence:
        return {"sessions": value.sessions, "matched": value.matched, "window": value.window}
    if type(value) is _claims.Claim:
        return value.parts()
    return value


@dataclass(frozen=True, kw_only=True)
class _RecordBase:
    """What every record shares: the common fields (keyword-only, after the type's own fields),
    the id, the encoding, the map form, and the field checks on construction."""

    signer: bytes  # the Ed25519 public key of the author, attester, revoker or voucher
    created: int  # Unix seconds, UTC
    signature: bytes
    version: int = VERSION

    record_type: ClassVar[str]
    _table: ClassVar[dict[str, Check]]  # version 1's
    _keys: ClassVar[frozenset]
    _tables: ClassVar[dict[int, dict[str, Check]]]  # by version
    _keys_by_version: ClassVar[dict[int, frozenset]]

    def __post_init__(self) -> None:
        checked = record_from_map(self._to_map())
        for f in fields(self):
            if f.name != "version":
                object.__setattr__(self, f.name, getattr(checked, f.name))

    def _to_map(self) -> dict[str, Any]:
        """The record as the CBOR data model: bytes, ints, text, lists, dicts."""
        out: dict[str, Any] = {"version": self.version, "type": self.record_type}
        for name in self._tables.get(self.version, self._table):
            out[name] = _wire_value(getattr(self, name))
        return out

    @cached_property
    def _cbor(self) -> bytes:
        data = cbor.dumps(self._to_map())
        if len(data) > MAX_RECORD_BYTES:  # pragma: no cover - the field limits keep records smaller
            raise WireError("size", f"the record encodes to {len(data)} bytes; the limit is {MAX_RECORD_BYTES}")
        return data

    @cached_property
    def id_bytes(self) -> bytes:
        """The record id: multihash sha2-256 of the full encoded record, signature included."""
        return record_id(self._cbor)

    @cached_property
    def id(self) -> str:
        """The id's text form: lower-case hex of the 34 multihash bytes."""
        return id_text(self.id_bytes)

    @property
    def size(self) -> int:
        return len(self._cbor)


@dataclass(frozen=True)
class Evidence:
    """What an attester observed, in counts only: never an episode.

    ``sessions``: the attester's sessions in the window; ``matched``: how many of them met
    what the lesson predicted; ``window``: the window's length in seconds, ending at the
    attestation's creation time.
    """

    sessions: int
    matched: int
    window: int

    def __post_init__(self) -> None:
        _evidence({"sessions": self.sessions, "matched": self.matched, "window": self.window})


@dataclass(frozen=True, kw_only=True)
class Lesson(_RecordBase):
    """An observation one agent learned, offered to the commons.

    Version 1: a text. Version 2 (``version=2``): a typed claim (``claim``, a
    :class:`openmemory_protocol.claims.Claim`, or a map of its parts when building one) whose
    ``text`` is exactly ``claims.render(claim)``; ``claim`` is None in version 1."""

    text: str
    kind: str
    strength: int  # thousandths: 1500 is 1.5
    provenance: bytes  # 32-byte commitment to the source episodes
    derived_from: tuple[bytes, ...]  # ids of the lessons it merges or refines, sorted
    claim: _claims.Claim | None = None  # version 2 only

    record_type: ClassVar[str] = "lesson"

    @property
    def author(self) -> bytes:
        return self.signer

    @property
    def dedup_key(self) -> str:
        return dedup_key(self)


@dataclass(frozen=True, kw_only=True)
class Attestation(_RecordBase):
    """An agent's report on a lesson's prediction in its own sessions.

    Version 1: one ``verdict``. Version 2 (``version=2``): a verdict per part of the claim,
    ``failure`` and ``fix`` (confirmed, failed, untested), and ``exposed`` (the lesson was
    rendered where the evidence came from); ``verdict`` is then derived (failed if a part failed,
    else confirmed) and not on the wire. In version 1 failure and fix are None, exposed False."""

    lesson_id: bytes
    verdict: str | None = None  # version 1: "confirmed" or "failed"; version 2: derived
    met_before: bool  # had the attester met the surprise before receiving the lesson?
    evidence: Evidence
    failure: str | None = None  # version 2: "confirmed", "failed" or "untested"
    fix: str | None = None  # version 2: "confirmed", "failed" or "untested"
    exposed: bool = False  # version 2: the lesson was shown where the evidence came from

    record_type: ClassVar[str] = "attestation"

    @property
    def attester(self) -> bytes:
        return self.signer

    @property
    def parts(self) -> dict[str, str]:
        """What it says per part: version 1 ``{"claim": verdict}``; version 2 failure and fix."""
        if self.version == 1:
            return {"claim": self.verdict}
        return {"failure": self.failure, "fix": self.fix}


@dataclass(frozen=True)
class Revocation(_RecordBase):
    """A permanent, signed withdrawal of a record, by its id."""

    target: bytes
    reason_code: str
    reason: str

    record_type: ClassVar[str] = "revocation"

    @property
    def revoker(self) -> bytes:
        return self.signer


@dataclass(frozen=True)
class Vouch(_RecordBase):
    """A key vouching for another key (trust lists, PROTOCOL.md)."""

    subject: bytes  # the vouched-for Ed25519 public key

    record_type: ClassVar[str] = "vouch"

    @property
    def voucher(self) -> bytes:
        return self.signer


Record = Union[Lesson, Attestation, Revocation, Vouch]

RECORD_CLASSES: dict[str, type] = {cls.record_type: cls for cls in (Lesson, Attestation, Revocation, Vouch)}
for _cls in RECORD_CLASSES.values():
    _cls._table = {**TYPE_FIELDS[_cls.record_type], **COMMON_FIELDS}
    _cls._keys = frozenset(_cls._table) | _ENVELOPE
    _cls._tables = {1: _cls._table}
    if _cls.record_type in TYPE_FIELDS_V2:
        _cls._tables[2] = {**TYPE_FIELDS_V2[_cls.record_type], **COMMON_FIELDS}
    _cls._keys_by_version = {v: frozenset(t) | _ENVELOPE for v, t in _cls._tables.items()}
del _cls


def encode(record: Record) -> bytes:
    """The record's deterministic CBOR bytes: what is sent, stored and hashed into its id."""
    if not isinstance(record, _RecordBase):
        raise TypeError(f"encode() takes a record, not {type(record).__name__}")
    return record._cbor


_SIGNATURE_KEY = cbor.dumps("signature")


def signing_message(record: Record, spans: dict[bytes, tuple[int, int]] | None = None) -> bytes:
    """The exact bytes signed: the type's domain, then the encoded record without signature.

    ``spans`` (from decoding the record's bytes) lets the body be cut out of the received bytes
    instead of encoded again; both give the same bytes (tests/wire check it).
    """
    prefix = DOMAINS[record.record_type] if record.version == VERSION else domain(record)
    if spans is not None:
        return cbor.without_entry(record._cbor, spans, _SIGNATURE_KEY, prefix)
    unsigned = record._to_map()
    del unsigned["signature"]
    return prefix + cbor.dumps(unsigned)


def text_fields(record: Record) -> tuple[tuple[str, str], ...]:
    """(field, text) pairs the observation rule applies to (none in a version 2 lesson)."""
    if record.version != VERSION:
        return ()
    return tuple((name, getattr(record, name)) for name in TEXT_FIELDS[record.record_type])


def claim_error(lesson: Lesson) -> WireError | None:
    """Step 8 for a version 2 lesson (PROTOCOL.md, "Claims"): the claim's first broken rule, C2
    to C5 in :func:`openmemory_protocol.claims.check_claim`'s order (``claim``, or ``unsafe`` for
    a command of the unsafe-command table), then its text, which must be the claim's rendering
    byte for byte (``claim``)."""
    claim = lesson.claim
    violation = _claims.claim_violation(claim)
    if violation is not None:
        where = f"claim.{violation.part}" if violation.part else "claim"
        return WireError(violation.code, f"{where}: {violation}", field=where)
    rendered = _claims.render(claim)
    if lesson.text != rendered:
        return WireError("claim", f"text is not the rendering of its claim's parts: expected {rendered!r:.600}",
                         field="text")
    return None


def text_error(record: Record) -> WireError | None:
    """Step 8 of validation: a version 2 lesson's claim rules (:func:`claim_error`), else the
    observation rule on the record's text fields (:func:`observation_error`)."""
    if record.version != VERSION and record.record_type == "lesson":
        return claim_error(record)
    return observation_error(record)


def observation_error(record: Record) -> WireError | None:
    """The observation rule on a record's text fields (a version 1 lesson's text, a
    revocation's reason), or None."""
    if record.version != VERSION:
        return None
    for name in TEXT_FIELDS[record.record_type]:  # (text_fields without its tuple: once per record)
        value = getattr(record, name)
        if value:
            violation = observation_violation(value)
            if violation is not None:
                return WireError("observation", f"{name}: {violation}", field=name)
    return None


def dedup_key(lesson: Lesson) -> str:
    """The content identity of a lesson: version 1, same normalised text and kind, same key;
    version 2, the same claim (:func:`openmemory_protocol.claims.dedup_key`)."""
    if type(lesson) is not Lesson:
        raise TypeError(f"dedup_key() takes a Lesson, not {type(lesson).__name__}")
    if lesson.version != VERSION:
        return _claims.dedup_key(lesson.claim)
    return dedup_key_for(lesson.text, lesson.kind)
