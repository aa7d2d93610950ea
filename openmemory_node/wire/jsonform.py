"""The JSON rendering of records, for people and tools, and JSON Lines files.

A record's JSON object has the same field names as its CBOR map, plus ``id`` first. Byte
strings (keys, signatures, ids, provenance) are lower-case hex; integers stay integers; text
stays text. The mapping is one-to-one, so ``from_json(to_json(r))`` re-encodes to exactly the
bytes of ``r``: JSON is a view of the record, never a second format with its own signatures.
``from_json`` is as strict as ``decode`` (it runs the same checks) and also checks a given
``id`` against the content. Like ``decode``, it does not check the signature.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from .errors import WireError
from .limits import MAX_JSON_LINE_BYTES
from .records import Record, _RecordBase, encode, record_from_map

__all__ = [
    "to_json",
    "from_json",
    "to_json_line",
    "from_json_line",
    "dumps_jsonl",
    "read_jsonl",
    "read_jsonl_file",
]

#: Fields holding one byte string, and the one holding a list of them.
BYTES_FIELDS = frozenset({"signer", "signature", "provenance", "lesson_id", "target", "subject"})
BYTES_LIST_FIELDS = frozenset({"derived_from"})
_HEX = frozenset("0123456789abcdef")


def _to_json_value(name: str, value: Any) -> Any:
    if name in BYTES_FIELDS:
        return value.hex()
    if name in BYTES_LIST_FIELDS:
        return [item.hex() for item in value]
    return value


def to_json(record: Record) -> dict[str, Any]:
    """The record as a JSON-ready dict: id first, then the CBOR map's fields, bytes as hex."""
    if not isinstance(record, _RecordBase):
        raise TypeError(f"to_json() takes a record, not {type(record).__name__}")
    out: dict[str, Any] = {"id": record.id}
    for name, value in record._to_map().items():
        out[name] = _to_json_value(name, value)
    return out


def _unhex(value: Any, field: str) -> Any:
    if type(value) is not str:
        raise WireError("schema", f"{field} must be lower-case hex text in JSON, not {type(value).__name__}", field=field)
    if len(value) % 2 or not _HEX.issuperset(value):
        raise WireError("schema", f"{field} must be lower-case hex text with an even number of digits", field=field)
    return bytes.fromhex(value)


def from_json(obj: Any) -> Record:
    """The record a JSON object (as ``to_json`` makes) stands for. Raises WireError."""
    if type(obj) is not dict:
        raise WireError("schema", f"a record in JSON is an object, not {type(obj).__name__}")
    claimed = obj.get("id")
    value: dict[str, Any] = {}
    for name, item in obj.items():
        if name == "id":
            continue
        if name in BYTES_FIELDS:
            value[name] = _unhex(item, name)
        elif name in BYTES_LIST_FIELDS and type(item) is list:
            value[name] = [_unhex(x, name) for x in item]
        else:
            value[name] = item
    record = record_from_map(value)
    encode(record)
    if claimed is not None and claimed != record.id:
        raise WireError("id", f"the JSON claims id {claimed!r:.80} but the record's id is {record.id}", field="id")
    return record


def to_json_line(record: Record) -> str:
    """One line of JSON (no line break): compact, UTF-8 text kept as is."""
    return json.dumps(to_json(record), ensure_ascii=False, separators=(",", ":"))


def dumps_jsonl(records: Iterable[Record]) -> str:
    """JSON Lines text: one record per line, each line ending in a line break."""
    return "".join(to_json_line(record) + "\n" for record in records)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise WireError("encoding", f"duplicate key {key!r:.40} in a JSON object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise WireError("encoding", f"{name} is not JSON")


def from_json_line(line: str | bytes) -> Record:
    """Parse one JSON line strictly (size bound, no duplicate keys, no NaN) into a record."""
    if isinstance(line, (bytes, bytearray)):
        size = len(line)
    elif isinstance(line, str):
        size = len(line.encode("utf-8", "surrogatepass"))
    else:
        raise TypeError(f"a JSON line is str or bytes, not {type(line).__name__}")
    if size > MAX_JSON_LINE_BYTES + 2:  # + 2: a line break left on the line
        raise WireError("size", f"a JSON line of {size} bytes; the limit is {MAX_JSON_LINE_BYTES}")
    try:
        obj = json.loads(line, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except WireError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise WireError("encoding", f"not JSON: {exc}") from None
    return from_json(obj)


def read_jsonl(
    lines: Iterable[str | bytes], *, on_error: Callable[[WireError], None] | None = None
) -> Iterator[Record]:
    """Yield the records of JSON Lines; blank lines are skipped.

    A bad line raises WireError with ``.line`` set (1-based), unless ``on_error`` is given: then
    it is called with that error and reading goes on, so one bad line loses nothing else.
    """
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield from_json_line(line)
        except WireError as error:
            error.line = number
            if on_error is None:
                raise
            on_error(error)


def _bounded_lines(fp: IO[bytes]) -> Iterator[bytes]:
    """Lines of a binary stream, never holding more than the line limit in memory: an over-long
    line is yielded as a marker (its first bytes) and the rest of it is skipped."""
    limit = MAX_JSON_LINE_BYTES + 2
    while True:
        line = fp.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            while True:  # skip to the end of the over-long line
                rest = fp.readline(65536)
                if not rest or rest.endswith(b"\n"):
                    break
        yield line


def read_jsonl_file(fp: IO[bytes], *, on_error: Callable[[WireError], None] | None = None) -> Iterator[Record]:
    """``read_jsonl`` over a binary file object, with memory bounded by the line limit."""
    return read_jsonl(_bounded_lines(fp), on_error=on_error)
