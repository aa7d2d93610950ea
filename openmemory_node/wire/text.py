"""Text on the wire: which characters a text field may hold, and the dedup normalisation.

Both rules are written out in PROTOCOL.md ("Text fields", "Content identity") with the exact
code points, so that another implementation reproduces them.
"""

from __future__ import annotations

import re

from openmemory_protocol import content as _content
from openmemory_protocol.unicode14 import UNASSIGNED_RE, UNICODE_VERSION

from .errors import WireError

__all__ = ["FORBIDDEN_RANGES", "check_text", "normalise_text", "dedup_key_for"]

#: Code points a text field must not contain (inclusive ranges). Controls (C0, DEL, C1; so no
#: line breaks or tabs: a lesson is one or two sentences on one line), the line and paragraph
#: separators, and the invisible format characters (zero-width characters, bidirectional
#: controls, soft hyphen, variation selectors, tag characters, byte order mark, interlinear
#: annotation), which would let a text read differently to a person than to a check, e.g.
#: "Al<U+200B>ways" slipping past the observation rule: every code point the observation rule
#: removes as ignorable (Default_Ignorable_Code_Point or General_Category Cf in Unicode 14.0,
#: spec/observation/ignorable.txt) is here. Also the noncharacters.
FORBIDDEN_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F),
    (0x007F, 0x009F),
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFDD0, 0xFDEF),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFFB),
    (0xFFFE, 0xFFFF),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x13438),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
) + tuple((plane + 0xFFFE, plane + 0xFFFF) for plane in range(0x10000, 0x110000, 0x10000))


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    parts = []
    for low, high in ranges:
        parts.append(re.escape(chr(low)) if low == high else f"{re.escape(chr(low))}-{re.escape(chr(high))}")
    return "[" + "".join(parts) + "]"


_FORBIDDEN_RE = re.compile(_char_class(FORBIDDEN_RANGES))
# A code point a text field refuses: a forbidden one, or one not assigned in Unicode 14.0 (the
# version the protocol pins, so that no answer depends on the Unicode tables an implementation
# has). One search over the text; the message then says which rule it broke.
_REFUSED_RE = re.compile(_FORBIDDEN_RE.pattern[:-1] + UNASSIGNED_RE.pattern[1:-1] + "]")


def check_text(value: object, field: str, *, min_bytes: int, max_bytes: int) -> str:
    """Return ``value`` if it is a valid text field, else raise WireError("schema")."""
    if type(value) is not str:
        raise WireError("schema", f"{field} must be a text string, not {type(value).__name__}", field=field)
    if value.isascii() and value.isprintable():
        # The common case, quickly: printable ASCII (U+0020..U+007E) holds no forbidden code
        # point, and its UTF-8 length is its length.
        if len(value) > max_bytes:
            raise WireError("schema", f"{field} is {len(value)} bytes of UTF-8; the limit is {max_bytes}", field=field)
        if len(value) < min_bytes or (min_bytes and value.isspace()):
            raise WireError("schema", f"{field} must not be empty", field=field)
        return value
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise WireError("schema", f"{field} holds a lone surrogate: not encodable as UTF-8", field=field) from None
    if size > max_bytes:
        raise WireError("schema", f"{field} is {size} bytes of UTF-8; the limit is {max_bytes}", field=field)
    if size < min_bytes or (min_bytes and value.isspace()):
        raise WireError("schema", f"{field} must not be empty", field=field)
    bad = _REFUSED_RE.search(value)
    if bad is not None:
        where = f"{field} holds U+{ord(bad.group()):04X} at index {bad.start()}"
        if _FORBIDDEN_RE.match(bad.group()):
            why = "a forbidden character (controls, line breaks and invisible format characters are not allowed)"
        else:
            why = f"a code point not assigned in Unicode {UNICODE_VERSION}, the version the protocol pins"
        raise WireError("schema", f"{where}: {why}", field=field)
    return value


#: The content-identity functions live in the protocol package (the engine computes the same keys).
WHITE_SPACE = _content.WHITE_SPACE
DEDUP_DOMAIN = _content.DEDUP_DOMAIN


def normalise_text(text: str) -> str:
    """The content-identity form of a lesson text: :func:`openmemory_protocol.normalise`."""
    return _content.normalise(text)


def dedup_key_for(text: str, kind: str) -> str:
    """Lower-case hex SHA-256 of the dedup domain, the kind, a zero byte, the normalised text:
    :func:`openmemory_protocol.dedup_key`."""
    return _content.dedup_key(text, kind)
