"""Hashed word and bigram embeddings: 256 dimensions, no model, identical everywhere.

The default embedding (``EMBEDDING = "hash-wb-256-v1"``) is feature hashing over the
words and adjacent-word pairs of a text:

1. The text is NFKC-normalised and lower-cased; tokens are runs of letters and digits
   (``[^\\W_]+``), so ``git push --set-upstream`` gives ``git push set upstream``.
2. Each token is lightly stemmed (``fails``/``failed``/``failing`` -> ``fail``, see
   :func:`stem`), so a question and a transcript meet across inflections.
3. Features: every token whose unstemmed form is not in ``STOP_WORDS`` (weight 1.0), and
   every pair of adjacent tokens unless both are stop words (weight 0.5: ``has no`` and
   ``no upstream`` count, ``of the`` does not).
4. A feature's bucket and sign come from ``blake2b(feature, digest_size=8)`` (UTF-8),
   read as a little-endian unsigned 64-bit integer ``h``: bucket ``h % 256``, sign ``+1``
   if bit 63 of ``h`` is 0 else ``-1``. Python's ``hash()`` is salted per process and is
   never used.
5. Weights are summed in float64 in feature order, the vector is divided by its L2 norm
   (computed with ``math.fsum``, exactly rounded) and cast to float32; a text without
   features gives the zero vector.

Cosine similarity is then a dot product. Changing any of these rules changes
``EMBEDDING``; the store records which embedding its vectors use and re-embeds when it
differs.

When the C accelerator ``openmemory_local._sleep_c`` is built (``setup.py``; loaded through
:func:`openmemory_protocol.native.load`, off with ``OPENMEMORY_PURE=1``), the features of an
ASCII text, the vectors, the norms and the exact cosines are made in C: the same dicts in the
same order and the same bits (sums in the same order; BLAKE2b; an exactly rounded ``fsum``).
The Python functions here are the reference and take everything else (a non-ASCII text, odd
weights).
"""

from __future__ import annotations

import math
import re
import unicodedata
from functools import lru_cache
try:  # what hashlib.blake2b is, without hashlib loading OpenSSL (3 ms of every recall's start)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy is imported where vectors are made: the tokenizer alone needs none
    import numpy as np

__all__ = ["EMBEDDING", "DIMS", "STOP_WORDS", "tokens", "stem", "features", "embed", "embed_features", "feature_cosine",
           "feature_norm", "embed_many"]

EMBEDDING = "hash-wb-256-v1"
DIMS = 256
_BIGRAM_WEIGHT = 0.5

STOP_WORDS: frozenset[str] = frozenset(
    """
    a an the and or but if then so of to in on at by for with from into onto as is are was
    were be been being am it its this that these those there here i me my we our you your
    he she they them their his her what which who whom when where why how do does did done
    has have had having will would shall should can could may might must just also very too
    than about over under up out off again further once all any both each few more most
    other some such only own same s t
    """.split()
)

_TOKEN = re.compile(r"[^\W_]+")


@lru_cache(maxsize=1 << 16)  # a pure function of a token: memoised (sleep tokenises many texts of few words)
def stem(token: str) -> str:
    """A small, fixed suffix stripper (part of the embedding's definition).

    ``ies`` -> ``y``; ``ing``/``ed`` removed when at least 3 letters remain (a doubled
    final consonant is undone: ``stopped`` -> ``stop``); ``es`` removed after s, x, z, ch,
    sh; a final ``s`` removed unless the word ends in ``ss``/``us``/``is``. Tokens of 3
    characters or fewer, and tokens with digits, are kept as they are.
    """
    if len(token) <= 3 or not token.isalpha():
        return token
    if token.endswith("ies") and len(token) > 4:
        return token[:-3] + "y"
    for suffix in ("ing", "ed"):
        if token.endswith(suffix) and len(token) - len(suffix) >= 3:
            base = token[: -len(suffix)]
            if len(base) >= 4 and base[-1] == base[-2] and base[-1] not in "lsz":
                base = base[:-1]
            return base
    if token.endswith("es") and token[:-2].endswith(("s", "x", "z", "ch", "sh")):
        return token[:-2]
    if token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def _raw_tokens(text: str) -> list[str]:
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())


def tokens(text: str) -> list[str]:
    """The stemmed tokens of ``text``, in order."""
    return [stem(t) for t in _raw_tokens(text)]


@lru_cache(maxsize=1 << 16)
def _features_cached(text: str):
    return tuple(_features_python(text).items())


def features(text: str) -> dict[str, float]:
    """Feature name -> weight (words, then ``a b`` pairs), before hashing.

    Stop words are recognised before stemming (``does`` is a stop word, ``doe`` is not).
    """
    native = _native()
    if native is not None:  # in C, an ASCII text is made again faster than the memo copies it
        out = native.features(text, STOP_WORDS)
        if out is not None:
            return out
    # memoised: a pure function of its arguments, which sleep asks again and again (the C code,
    # asked above, took this text only if it could: the Python code's, not asked twice)
    if len(text) > 512:
        return _features_python(text)
    return dict(_features_cached(text))


def _native():
    """The C accelerator (``openmemory_local._sleep_c``), or None: asked once, on first use (a command
    that never tokenises loads nothing)."""
    global _NATIVE
    if _NATIVE is _UNASKED:
        from openmemory_protocol.native import load

        _NATIVE = load("openmemory_local._sleep_c")
    return _NATIVE


_UNASKED = object()
_NATIVE = _UNASKED


def _features_uncached(text: str) -> dict[str, float]:
    """The work of :func:`features` (uncached): in C for an ASCII text when the accelerator is
    built (the same dict, in the same order: ``tests/local/test_sleep_c.py``), else
    :func:`_features_python`."""
    native = _native()
    if native is not None:
        out = native.features(text, STOP_WORDS)
        if out is not None:
            return out
    return _features_python(text)


def _features_python(text: str) -> dict[str, float]:
    """:func:`features` in Python (the reference; any text)."""
    raw = _raw_tokens(text)
    toks = list(map(stem, raw))
    stop = [word in STOP_WORDS for word in raw]
    out: dict[str, float] = {}
    get = out.get
    for tok, is_stop in zip(toks, stop):
        if not is_stop:
            out[tok] = get(tok, 0.0) + 1.0
    for left, right, stop_left, stop_right in zip(toks, toks[1:], stop, stop[1:]):
        if stop_left and stop_right:
            continue
        pair = f"{left} {right}"
        out[pair] = get(pair, 0.0) + _BIGRAM_WEIGHT
    return out


@lru_cache(maxsize=1 << 18)
def _slot(feature: str) -> tuple[int, float]:
    h = int.from_bytes(blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
    return h % DIMS, (-1.0 if h >> 63 else 1.0)


#: feature -> its slot, for :func:`embed_features` (a plain dict: cheaper to ask than the lru_cache)
_SLOTS: dict[str, tuple[int, float]] = {}
_SLOTS_MAX = 1 << 18


def embed(text: str) -> np.ndarray:
    """The L2-normalised ``float32`` vector of ``text`` (shape ``(256,)``)."""
    return embed_features(features(text))


def embed_features(feats: dict[str, float]) -> np.ndarray:
    """The vector of a :func:`features` dict (what :func:`embed` does after step 3): in C when the
    accelerator is built (the same bits), else :func:`_embed_features_python`."""
    import numpy as np

    native = _native()
    if native is not None:
        vec = np.empty(DIMS, dtype=np.float32)
        if native.embed_into(feats, vec):
            return vec
    return _embed_features_python(feats)


def _embed_features_python(feats: dict[str, float]) -> np.ndarray:
    """:func:`embed_features` in Python (the reference; any weights)."""
    import numpy as np

    # each slot's sum in Python floats (float64, added in the features' order: what adding into the
    # array one by one gives), written into the array at once
    slots: dict[int, float] = {}
    get = slots.get
    known = _SLOTS
    for feature, weight in feats.items():
        hit = known.get(feature)
        if hit is None:
            if len(known) >= _SLOTS_MAX:
                known.clear()
            hit = known[feature] = _slot(feature)
        index, sign = hit
        slots[index] = get(index, 0.0) + sign * weight
    vec = np.zeros(DIMS, dtype=np.float64)
    if slots:
        vec[list(slots)] = list(slots.values())
    # math.fsum is exactly rounded: the norm does not depend on a BLAS summation order (nor on the zeros).
    norm = math.sqrt(math.fsum([v * v for v in slots.values()]))
    if norm > 0.0:
        vec /= norm
    return vec.astype(np.float32)


def feature_norm(feats: dict[str, float]) -> float:
    """The L2 norm of a :func:`features` dict (exactly rounded sum): what :func:`feature_cosine`
    divides by, for callers that compare one dict with many. In C when the accelerator is built
    (an exactly rounded sum is one value, whichever code makes it)."""
    native = _native()
    if native is not None:
        out = native.feature_norm(feats)
        if out is not None:
            return out
    return _feature_norm_python(feats)


def _feature_norm_python(feats: dict[str, float]) -> float:
    return math.sqrt(math.fsum(w * w for w in feats.values()))


def feature_cosine(a: dict[str, float], b: dict[str, float], norm_a: float | None = None,
                   norm_b: float | None = None) -> float:
    """The cosine of two :func:`features` dicts, exactly (before hashing: no collisions).

    The hashed embedding approximates this; for short texts (a command, ``git push``)
    two or three colliding features can make unrelated texts look alike, so sleep's
    verify pass, which compares such short texts, uses this instead. In C when the accelerator
    is built (the same value: every sum exactly rounded), else :func:`_feature_cosine_python`.
    """
    native = _native()
    if native is not None:
        out = native.feature_cosine(a, b, norm_a, norm_b)
        if out is not None:
            return out
    return _feature_cosine_python(a, b, norm_a, norm_b)


def _feature_cosine_python(a: dict[str, float], b: dict[str, float], norm_a: float | None = None,
                           norm_b: float | None = None) -> float:
    """:func:`feature_cosine` in Python (the reference; any weights)."""
    small, big = (b, a) if len(a) > len(b) else (a, b)
    dot = math.fsum(w * big[f] for f, w in small.items() if f in big)
    if dot == 0.0:
        return 0.0
    norm_a = _feature_norm_python(a) if norm_a is None else norm_a
    norm_b = _feature_norm_python(b) if norm_b is None else norm_b
    return dot / (norm_a * norm_b)


def embed_many(texts) -> np.ndarray:
    """Vectors of several texts as one ``(n, 256)`` ``float32`` matrix."""
    import numpy as np

    texts = list(texts)
    out = np.zeros((len(texts), DIMS), dtype=np.float32)
    for i, text in enumerate(texts):
        out[i] = embed(text)
    return out
