"""The one error type of the wire format, and its stable codes.

Every way a record can be wrong raises :class:`WireError` with a ``code`` from
:data:`ERROR_CODES`. The codes are part of the protocol (PROTOCOL.md, "Error codes"; the
invalid test vectors in spec/ name them): a node counts rejections by code and scores peers by
them, so a code never changes meaning. Messages are for people and may change.
"""

from __future__ import annotations

__all__ = ["WireError", "ERROR_CODES"]

#: code -> what it means. Checks run in this order (PROTOCOL.md, "Validation order"), so a
#: record with several faults reports the first one in this list.
ERROR_CODES: dict[str, str] = {
    "size": "the record (or JSON line) is empty or longer than the limit",
    "encoding": "not well-formed, deterministic CBOR in the v1 data model (tags, floats, null, "
    "indefinite lengths, non-shortest heads, unsorted or duplicate map keys, trailing bytes, "
    "invalid UTF-8, nesting deeper than 2), or not valid JSON for the JSON form",
    "version": "the record's version is not one this implementation knows for its type (lessons and "
    "attestations: 1 and 2; revocations and vouches: 1)",
    "type": "the record's type is not lesson, attestation, revocation or vouch",
    "schema": "a field is missing, unknown, of the wrong type or outside its limits",
    "id": "the record's id is not the id that was claimed or asked for",
    "clock-skew": "the record was created too far in the future",
    "observation": "a text field instructs instead of observing (the observation rule)",
    "claim": "a version 2 lesson's claim is malformed (a part's shape, a quoted failure that carries what "
    "only a prompt carries) or its text is not the rendering of its parts",
    "unsafe": "a part of a version 2 lesson's claim is a command that never arrives from strangers "
    "(runs downloaded code, disables verification, escalates privileges, force-pushes a default branch, "
    "deletes outside the project, sends data out)",
    "signature": "the signature does not verify under the signer's key and the record type's domain",
}


class WireError(Exception):
    """A record, or bytes claimed to be one, is invalid.

    ``code`` is one of :data:`ERROR_CODES`; ``field`` names the offending field where there is
    one (``None`` otherwise); ``line`` is set by the JSON Lines reader.
    """

    def __init__(self, code: str, message: str, *, field: str | None = None):
        if code not in ERROR_CODES:  # pragma: no cover - a programming error in this package
            raise ValueError(f"unknown wire error code {code!r}")
        self.code = code
        self.field = field
        self.line: int | None = None
        super().__init__(message)

    @property
    def message(self) -> str:
        return self.args[0]

    def __str__(self) -> str:
        where = f" (line {self.line})" if self.line is not None else ""
        return f"{self.code}: {self.args[0]}{where}"

    def __repr__(self) -> str:
        return f"WireError({self.code!r}, {self.args[0]!r}, field={self.field!r})"

    def __reduce__(self):  # picklable across processes, code and field kept
        return (_rebuild, (self.code, self.args[0], self.field, self.line))


def _rebuild(code: str, message: str, field: str | None, line: int | None) -> WireError:
    error = WireError(code, message, field=field)
    error.line = line
    return error
