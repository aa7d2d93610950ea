"""JSON in and out: orjson when installed (several times faster), the standard library
otherwise and for what orjson refuses (lone surrogate escapes, integers beyond 64 bits).
Both produce the same text for what both accept, so stored JSON compares equal across
installations."""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a dependency; json is the fallback
    _orjson = None

__all__ = ["dumps", "loads"]


def dumps(value: Any) -> str:
    """Compact JSON text with sorted keys (non-ASCII kept as is)."""
    if _orjson is not None:
        try:
            return _orjson.dumps(value, option=_orjson.OPT_SORT_KEYS).decode("utf-8")
        except TypeError:
            pass
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def loads(text: str | bytes | None, default: Any = None) -> Any:
    """Parse JSON; ``default`` for None or empty input; ValueError for invalid JSON
    (RecursionError for nesting too deep for the standard library)."""
    if text is None or text == "" or text == b"":
        return default
    if _orjson is not None:
        try:
            return _orjson.loads(text)
        except _orjson.JSONDecodeError:
            pass
    return json.loads(text)
