"""The JSON rendering of records, for people and tools, and JSON Lines files.

A record's JSON object has the same field names as its CBOR map, plus ``id`` first. Byte
strings (keys, signatures, ids, provenance) are lower-case hex; integers stay integers; text
stays text. The mapping is one-to-one, so ``from_json(to_json(r))`` re-encodes to exactly the
bytes of ``r``: JSON is a view of the record, never a second format with its own signatures.
``from_json`` is as strict as ``decode`` (it runs the same checks, in the same order: version,
type, then the fields) and also checks a given ``id`` against the content. Like ``decode``, it
does not check the signature.

PROTOCOL.md ("JSON form") defines the form exactly; spec/vectors/json.json holds valid and
invalid lines. Writers emit one spelling (compact, fields in order, UTF-8 as is); readers accept
any JSON (RFC 8259) spelling of the object, in any key order, except: not UTF-8, a duplicate
name, NaN or Infinity, a lone surrogate escape, or nesting deeper than 2 (``encoding``); a
number that is not an integer spelled without fraction or exponent, or ``-0``, where an
integer belongs (``schema``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from .errors import WireError
from .limits import MAX_JSON_LINE_BYTES
from .records import Record, _RecordBase, encode, record_class, record_from_map

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


_ABSENT = object()


def from_json(obj: Any) -> Record:
    """The record a JSON object (as ``to_json`` makes) stands for. Raises WireError."""
    if type(obj) is not dict:
        raise WireError("schema", f"a record in JSON is an object, not {type(obj).__name__}")
    record_class(obj)  # steps 3 and 4 first: version, then type (PROTOCOL.md, "Validation")
    claimed = obj.get("id", _ABSENT)
    if claimed is not _ABSENT and type(claimed) is not str:
        raise WireError("schema", f"id must be the record id as text, not {type(claimed).__name__}", field="id")
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
    if claimed is not _ABSENT and claimed != record.id:
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


def _integer(text: str) -> Any:
    """A JSON number without fraction or exponent. ``-0`` is no integer of the JSON form: it is
    read as the float -0.0, which every integer field refuses (schema). Past 24 digits every
    limit is exceeded, so the value is capped there (Python refuses to parse 4,300 digits)."""
    if text == "-0":
        return -0.0
    if len(text.lstrip("-")) > 24:
        return -(10**24) if text.startswith("-") else 10**24
    return int(text)


def _json_checks(value: Any, depth: int = 0) -> None:
    """What Python's json accepts and the JSON form does not (encoding): nesting deeper than 2
    (the record object is depth 1), and lone surrogates (from escapes such as "\\ud800")."""
    if type(value) is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise WireError("encoding", "a string escape that is a lone surrogate: not Unicode text") from None
    elif type(value) in (dict, list):
        if depth >= 2:
            raise WireError("encoding", "objects and arrays nested deeper than 2")
        for item in value.items() if type(value) is dict else value:
            if type(item) is tuple:
                _json_checks(item[0], depth + 1)
                item = item[1]
            _json_checks(item, depth + 1)


def _line_content(line: str | bytes) -> bytes:
    """The bytes of one line without its line break (a final LF, and a CR before it)."""
    if isinstance(line, str):
        data = line.encode("utf-8", "surrogatepass")
    elif isinstance(line, (bytes, bytearray, memoryview)):
        data = bytes(line)
    else:
        raise TypeError(f"a JSON line is str or bytes, not {type(line).__name__}")
    if data.endswith(b"\n"):
        data = data[:-2] if data.endswith(b"\r\n") else data[:-1]
    return data


def from_json_line(line: str | bytes) -> Record:
    """Parse one line of JSON Lines strictly into a record (PROTOCOL.md, "JSON form").

    The line may end with its line break (LF, or CR LF), which the 16,384-byte limit does not
    count. Then: UTF-8 (no byte order mark), one JSON object, no duplicate name, no NaN or
    Infinity, no lone surrogate, nesting at most 2 (else ``encoding``), and the record's rules.
    """
    data = _line_content(line)
    if len(data) > MAX_JSON_LINE_BYTES:
        raise WireError("size", f"a JSON line of {len(data)} bytes; the limit is {MAX_JSON_LINE_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireError("encoding", f"a JSON line is UTF-8: {exc.reason} at byte {exc.start}") from None
    if "\n" in text:
        raise WireError("encoding", "a line break inside a JSON line")
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_int=_integer)
    except WireError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise WireError("encoding", f"not JSON: {exc}") from None
    _json_checks(obj)
    return from_json(obj)


def _blank(line: str | bytes) -> bool:
    """A line of nothing but JSON white space (space, tab, CR, LF): skipped by readers."""
    return not line.strip(" \t\r\n" if isinstance(line, str) else b" \t\r\n")


def read_jsonl(
    lines: Iterable[str | bytes], *, on_error: Callable[[WireError], None] | None = None
) -> Iterator[Record]:
    """Yield the records of JSON Lines; blank lines (JSON white space only) are skipped.

    A bad line raises WireError with ``.line`` set (1-based), unless ``on_error`` is given: then
    it is called with that error and reading goes on, so one bad line loses nothing else.
    """
    for number, line in enumerate(lines, 1):
        if _blank(line):
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
