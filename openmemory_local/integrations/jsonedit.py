"""Formatting-preserving edits of a user's JSON file: add one item, later remove exactly it.

Claude Code keeps its settings in JSON files that the user (and Claude Code itself) also
edit. Loading them and dumping them again would reorder nothing in Python but would reformat
everything: indentation, spacing, escapes, a final newline. Here the text is edited in place
instead, by character spans, so that every byte outside the item we add stays as it was:

- :func:`add_item` inserts one member into an object, or appends one element to an array,
  at a path of object keys (``["mcpServers"]``, ``["hooks", "SessionEnd"]``), creating the
  missing containers on the way, and formats the new text like its neighbours (indent unit,
  new line style, ``": "`` or ``":"``).
- :func:`remove_item` removes it again from the current text (which may have changed in the
  meantime, as Claude Code rewrites ``~/.claude.json`` all the time), then removes the
  containers that the addition created and that are empty again. On an unchanged text it is
  the exact inverse of :func:`add_item`: the result is byte-for-byte the original.

Both work from an :class:`Addition` record (plain JSON data, kept in the install manifest).
Only the containers on the path are scanned; every other value is skipped with the C
decoder, so a multi-megabyte ``~/.claude.json`` is edited in milliseconds.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "MalformedJSON",
    "Addition",
    "Document",
    "parse",
    "add_item",
    "remove_item",
    "find_item",
]

_WS = " \t\n\r"
_decoder = json.JSONDecoder()
_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]


class MalformedJSON(ValueError):
    """The file is not a JSON object we can edit safely (it is left untouched)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        where = f" (line {line}, column {column})" if line is not None else ""
        super().__init__(message + where)
        self.line = line
        self.column = column


@dataclass
class Document:
    """A JSON text: an optional byte-order mark, then one object."""

    text: str
    bom: str = ""

    @property
    def body(self) -> str:
        return self.text[len(self.bom):]


def parse(text: str) -> Document:
    """Check that ``text`` is one JSON object; raise :class:`MalformedJSON` if not."""
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    body = text[len(bom):]
    if not body.strip(_WS):
        raise MalformedJSON("the file is empty; expected a JSON object such as {}")
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise MalformedJSON(f"not valid JSON: {exc.msg}", exc.lineno, exc.colno) from None
    except RecursionError:
        raise MalformedJSON("not valid JSON: nested too deeply") from None
    if not isinstance(value, dict):
        raise MalformedJSON(f"expected a JSON object at the top level, found {type(value).__name__}")
    return Document(text, bom)


# --- spans -------------------------------------------------------------------------------


@dataclass
class _Item:
    key: str | None  # None for an array element
    start: int  # where the key (member) or the value (element) starts
    value_start: int
    value_end: int


@dataclass
class _Container:
    kind: str  # "object" or "array"
    start: int  # index of the opening bracket
    end: int  # index just after the closing bracket
    items: list[_Item]

    def member(self, key: str) -> _Item | None:
        found = None
        for item in self.items:  # the last duplicate wins, as in JSON.parse
            if item.key == key:
                found = item
        return found


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _value_end(text: str, pos: int) -> int:
    _, end = _decoder.raw_decode(text, pos)
    return end


def _scan(text: str, start: int) -> _Container:
    """Scan the object or array whose opening bracket is at ``start`` (text already valid)."""
    opening = text[start]
    kind = "object" if opening == "{" else "array"
    closing = "}" if kind == "object" else "]"
    items: list[_Item] = []
    pos = _skip_ws(text, start + 1)
    if text[pos] == closing:
        return _Container(kind, start, pos + 1, items)
    while True:
        item_start = pos
        key = None
        if kind == "object":
            key, pos = _scanstring(text, pos + 1)
            pos = _skip_ws(text, pos)
            pos = _skip_ws(text, pos + 1)  # the colon
        value_start = pos
        value_end = _value_end(text, pos)
        items.append(_Item(key, item_start, value_start, value_end))
        pos = _skip_ws(text, value_end)
        if text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
            continue
        return _Container(kind, start, pos + 1, items)


def _walk(doc: Document, path: list[str]) -> list[_Container]:
    """The containers from the root down along ``path``, as far as they exist as objects or arrays.

    Every step but the last must be an object (a key is looked up in it); the result has one
    container per existing level: ``len(result) - 1`` keys of ``path`` were found.
    """
    root = _scan(doc.text, _skip_ws(doc.text, len(doc.bom)))
    chain = [root]
    for key in path:
        current = chain[-1]
        if current.kind != "object":
            break
        item = current.member(key)
        if item is None or doc.text[item.value_start] not in "{[":
            break
        chain.append(_scan(doc.text, item.value_start))
    return chain


# --- formatting --------------------------------------------------------------------------


@dataclass
class _Style:
    newline: str
    unit: str  # one level of indentation
    colon: str  # between a key and its value
    comma_space: str  # after a comma on one line


def _style(doc: Document, container: _Container) -> _Style:
    text = doc.text
    newline = "\r\n" if "\r\n" in text else "\n"
    root = _scan(text, _skip_ws(text, len(doc.bom)))
    unit = "  "  # Claude Code writes JSON.stringify(value, null, 2)
    if root.items:
        indent = _line_indent(text, root.items[0].start)
        if indent and _starts_line(text, root.items[0].start):
            unit = indent
    colon = ": "
    for source in (container, root):
        members = [i for i in source.items if i.key is not None]
        if members:
            gap = text[_key_end(text, members[0]) : members[0].value_start]
            colon = ": " if ("\n" in gap or "\r" in gap) else gap
            break
    comma_space = " " if colon.endswith(" ") else ""
    if len(container.items) > 1:
        between = text[container.items[-2].value_end : container.items[-1].start]
        if "\n" not in between and "\r" not in between:
            comma_space = between.split(",", 1)[1]
    return _Style(newline, unit, colon, comma_space)


def _key_end(text: str, item: _Item) -> int:
    _, end = _scanstring(text, item.start + 1)
    return end


def _line_indent(text: str, pos: int) -> str:
    line_start = max(text.rfind("\n", 0, pos), text.rfind("\r", 0, pos)) + 1
    match = re.match(r"[ \t]*", text[line_start:pos])
    return match.group(0) if match else ""


def _starts_line(text: str, pos: int) -> bool:
    line_start = max(text.rfind("\n", 0, pos), text.rfind("\r", 0, pos)) + 1
    return not text[line_start:pos].strip(" \t")


def _multiline(doc: Document) -> bool:
    """Whether the document is laid out on several lines (an empty ``{}`` is taken as yes)."""
    body = doc.body.strip(_WS)
    return body == "{}" or "\n" in body or "\r" in body


def _render(value: Any, indent: str | None, style: _Style) -> str:
    """``value`` as JSON text; on several lines at ``indent`` when ``indent`` is not None."""
    if indent is None:
        return json.dumps(value, ensure_ascii=False, separators=("," + style.comma_space, style.colon))
    lines = json.dumps(value, ensure_ascii=False, indent=style.unit, separators=(",", style.colon)).split("\n")
    return (style.newline + indent).join(lines)


def _render_item(key: str | None, value: Any, indent: str | None, style: _Style) -> str:
    rendered = _render(value, indent, style)
    if key is None:
        return rendered
    return json.dumps(key, ensure_ascii=False) + style.colon + rendered


# --- the addition record -----------------------------------------------------------------


@dataclass
class Addition:
    """What :func:`add_item` added, enough for :func:`remove_item` to take exactly it away.

    ``path`` leads to the container holding the item (an object when ``key`` is set, an
    array when it is None); the first ``existed`` keys of ``path`` were there before the
    addition, the rest were created by it. ``interior`` is the text that was inside the
    brackets of the deepest existing container when it was empty (restored when it becomes
    empty again), else None.
    """

    path: list[str]
    key: str | None
    value: Any
    existed: int = 0
    interior: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Addition":
        return cls(
            path=list(data["path"]),
            key=data.get("key"),
            value=data["value"],
            existed=int(data.get("existed", 0)),
            interior=data.get("interior"),
        )


def _nest(path: list[str], key: str | None, value: Any) -> tuple[str | None, Any]:
    """The item to insert at the deepest existing container for the remaining ``path``."""
    inner: Any = {key: value} if key is not None else [value]
    for name in reversed(path[1:]):
        inner = {name: inner}
    if not path:
        return key, value
    return path[0], inner


def _insert(doc: Document, container: _Container, key: str | None, value: Any) -> tuple[str, str | None]:
    """Insert one item at the end of ``container``; return the new text and the old interior."""
    text = doc.text
    style = _style(doc, container)
    if container.items:
        last = container.items[-1]
        delimiter = last.start - 1
        while text[delimiter] in _WS:
            delimiter -= 1
        separator = text[delimiter + 1 : last.start]
        indent = _line_indent(text, last.start) if "\n" in separator or "\r" in separator else None
        if indent is None:
            separator = style.comma_space
        new = "," + separator + _render_item(key, value, indent, style)
        return text[: last.value_end] + new + text[last.value_end :], None
    interior = text[container.start + 1 : container.end - 1]
    if _multiline(doc):
        base = _line_indent(text, container.start)
        indent = base + style.unit
        new = style.newline + indent + _render_item(key, value, indent, style) + style.newline + base
    else:
        new = _render_item(key, value, None, style)
    return text[: container.start + 1] + new + text[container.end - 1 :], interior


def add_item(doc: Document, path: list[str], key: str | None, value: Any) -> tuple[str, Addition]:
    """Add ``key: value`` to the object at ``path`` (or append ``value`` to the array there).

    Missing containers along ``path`` are created. Raise :class:`MalformedJSON` when a key
    of the path holds something that is not a container (a string where an object belongs):
    that is the user's data, and it is not replaced.
    """
    chain = _walk(doc, path)
    existed = len(chain) - 1
    deepest = chain[-1]
    if existed < len(path):
        expected = "object"
        if deepest.kind != "object" or deepest.member(path[existed]) is not None:
            at = ".".join(path[: existed + 1])
            raise MalformedJSON(f"`{at}` holds something other than a JSON {expected} or array; not changed")
    else:
        want = "object" if key is not None else "array"
        if deepest.kind != want:
            raise MalformedJSON(f"`{'.'.join(path)}` is a JSON {deepest.kind}, expected an {want}; not changed")
    item_key, item_value = _nest(path[existed:], key, value)
    new_text, interior = _insert(doc, deepest, item_key, item_value)
    return new_text, Addition(list(path), key, value, existed, interior)


def find_item(doc: Document, addition: Addition) -> tuple[str, Any]:
    """Where the addition's item stands in ``doc``: ("present" | "absent" | "modified", current value)."""
    chain = _walk(doc, addition.path)
    if len(chain) - 1 < len(addition.path):
        return "absent", None
    container = chain[-1]
    if addition.key is not None:
        if container.kind != "object":
            return "absent", None
        item = container.member(addition.key)
        if item is None:
            return "absent", None
        current = json.loads(doc.text[item.value_start : item.value_end])
        return ("present" if current == addition.value else "modified"), current
    if container.kind != "array":
        return "absent", None
    for item in container.items:
        if json.loads(doc.text[item.value_start : item.value_end]) == addition.value:
            return "present", addition.value
    return "absent", None


def _delete(text: str, container: _Container, index: int, interior: str) -> str:
    items = container.items
    if len(items) == 1:
        return text[: container.start + 1] + interior + text[container.end - 1 :]
    if index > 0:
        return text[: items[index - 1].value_end] + text[items[index].value_end :]
    return text[: items[0].start] + text[items[1].start :]


def remove_item(doc: Document, addition: Addition, *, force: bool = False) -> tuple[str, str]:
    """Remove the addition's item from ``doc``; return (new text, status).

    Status is "removed", "absent" (nothing to remove: the text is returned unchanged) or
    "modified" (the item is there with another value than the one added: left in place
    unless ``force``). Containers the addition created are removed when they are empty
    again; a container that existed and was empty gets its original interior back.
    """
    status, _ = find_item(doc, addition)
    if status == "absent" or (status == "modified" and not force):
        return doc.text, status
    text = doc.text
    depth = len(addition.path)
    chain = _walk(Document(text, doc.bom), addition.path)
    container = chain[-1]
    if addition.key is not None:
        index = max(i for i, item in enumerate(container.items) if item.key == addition.key)
    else:
        index = max(
            i
            for i, item in enumerate(container.items)
            if json.loads(text[item.value_start : item.value_end]) == addition.value
        )
    while True:
        interior = addition.interior if depth == addition.existed and addition.interior is not None else ""
        text = _delete(text, container, index, interior)
        if depth <= addition.existed:
            break
        chain = _walk(Document(text, doc.bom), addition.path[:depth])
        container = chain[depth]
        if container.items:
            break
        # the container we created is empty again: remove it from its parent
        depth -= 1
        parent = chain[depth]
        key = addition.path[depth]
        index = max(i for i, item in enumerate(parent.items) if item.key == key)
        container = parent
    return text, "removed"
