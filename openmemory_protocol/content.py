"""Content identity: the normalised form of a lesson text and its dedup key (PROTOCOL.md, "Content identity").

Two agents that publish the same observation publish two records with one dedup key; the engine
computes the same key before it publishes (to group its own lessons with the commons'), the node
to group what it receives. Pure, standard library only.

    >>> normalise("  The user\u2019s \u201cfix\u201d broke the build...  ")
    'the user\\'s "fix" broke the build'
    >>> dedup_key("`git push` failed.", "error")   # lower-case hex SHA-256
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

__all__ = ["WHITE_SPACE", "DEDUP_DOMAIN", "normalise", "dedup_key"]

#: White_Space code points (Unicode property), each run replaced by one space.
WHITE_SPACE = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u0085\u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
_WHITE_SPACE_RUN = re.compile("[" + WHITE_SPACE + "]+")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})

#: The domain prefix of the dedup key's hash input.
DEDUP_DOMAIN = b"openmemory/dedup/v1\x00"


def normalise(text: str) -> str:
    """The content-identity form of a lesson text (PROTOCOL.md, "Content identity").

    1. NFKC; 2. typographic quotes to ASCII (U+2018, U+2019 to '; U+201C, U+201D to ");
    3. Unicode full case folding; 4. NFKC again; 5. every run of White_Space to one space,
    then leading and trailing spaces removed; 6. trailing full stops and spaces removed.
    """
    if text.isascii():
        # The same steps on ASCII: NFKC leaves it as it is, it holds no typographic quote, its
        # case folding is lower(), and it has no white space but single spaces unless it has
        # two in a row or a control character (tests/protocol/test_content.py compares both).
        text = text.lower()
        if "  " in text or not text.isprintable():
            text = _WHITE_SPACE_RUN.sub(" ", text)
        return text.strip(" ").rstrip(". ")
    return _normalise(text)


def _normalise(text: str) -> str:
    """:func:`normalise`, every step on any text (the reference of its ASCII shortcut)."""
    text = unicodedata.normalize("NFKC", text).translate(_QUOTES)
    text = unicodedata.normalize("NFKC", text.casefold())
    text = _WHITE_SPACE_RUN.sub(" ", text).strip(" ")
    return text.rstrip(". ")


def dedup_key(text: str, kind: str) -> str:
    """Lower-case hex SHA-256 of the dedup domain, ``kind``, a zero byte and ``normalise(text)``.

    ``kind`` is the lesson's kind (``error``, ``correction``, ...): the same text under two kinds is
    two contents. A commons form (the text published for every agent) is keyed the same way.
    """
    digest = hashlib.sha256(DEDUP_DOMAIN + kind.encode("utf-8") + b"\x00" + normalise(text).encode("utf-8"))
    return digest.hexdigest()
