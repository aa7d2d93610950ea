"""Record ids (multihash sha2-256) and their text form, and the provenance commitment."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from .errors import WireError
from .limits import ID_BYTES, ID_TEXT_LENGTH, MULTIHASH_SHA2_256, PROVENANCE_BYTES

__all__ = ["record_id", "id_text", "parse_id", "is_id", "provenance_commitment", "PROVENANCE_DOMAIN"]

_HEX = frozenset("0123456789abcdef")


def record_id(encoded: bytes) -> bytes:
    """The id of a record: the multihash (0x12 0x20 + SHA-256) of its full encoded bytes."""
    return MULTIHASH_SHA2_256 + hashlib.sha256(encoded).digest()


def is_id(value: object) -> bool:
    """True for 34 bytes that are a sha2-256 multihash."""
    return type(value) is bytes and len(value) == ID_BYTES and value[:2] == MULTIHASH_SHA2_256


def id_text(id_bytes: bytes) -> str:
    """The text form of an id: lower-case hex of the 34 multihash bytes (68 characters)."""
    return id_bytes.hex()


def parse_id(value: str | bytes, field: str = "id") -> bytes:
    """Accept an id as its 34 bytes or its text form; return the bytes or raise WireError."""
    if type(value) is bytes:
        raw = value
    elif type(value) is str:
        if len(value) != ID_TEXT_LENGTH or not _HEX.issuperset(value):
            raise WireError(
                "schema",
                f"{field} must be {ID_TEXT_LENGTH} lower-case hex characters (a sha2-256 multihash)",
                field=field,
            )
        raw = bytes.fromhex(value)
    else:
        raise WireError("schema", f"{field} must be an id (bytes or hex text), not {type(value).__name__}", field=field)
    if not is_id(raw):
        raise WireError("schema", f"{field} must be 34 bytes starting 0x12 0x20 (a sha2-256 multihash)", field=field)
    return raw


PROVENANCE_DOMAIN = b"openmemory/provenance/v1\x00"


def provenance_commitment(episode_hashes: Iterable[bytes], salt: bytes) -> bytes:
    """A 32-byte commitment to a lesson's source episodes that reveals nothing about them.

    SHA-256 of the provenance domain, the 32-byte salt (random, kept by the author), then the
    distinct 32-byte episode hashes in ascending bytewise order. Whoever holds the salt and the
    episodes can open it; nobody else learns anything, not even how many episodes there were.
    """
    if type(salt) is not bytes or len(salt) != 32:
        raise WireError("schema", "the provenance salt must be 32 bytes", field="provenance")
    hashes = set()
    for h in episode_hashes:
        if type(h) is not bytes or len(h) != 32:
            raise WireError("schema", "each episode hash must be 32 bytes", field="provenance")
        hashes.add(h)
    if not hashes:
        raise WireError("schema", "a provenance commitment needs at least one episode hash", field="provenance")
    digest = hashlib.sha256(PROVENANCE_DOMAIN + salt + b"".join(sorted(hashes))).digest()
    assert len(digest) == PROVENANCE_BYTES
    return digest
