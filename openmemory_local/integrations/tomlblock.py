"""A minimal, careful editor of one managed block in a TOML file (Codex's ``config.toml``).

No TOML library is a dependency and none writes TOML without reformatting the owner's file, so
we never rewrite it: our table goes in a block of its own, appended at the end between two
comment lines of ours, and the owner's bytes are kept as they are::

    <the owner's text, untouched>
    <a newline if the file did not end with one, and a blank line>
    # >>> openmemory: managed by openmemory install codex (...)
    [mcp_servers.openmemory]
    command = "/usr/local/bin/openmemory"
    args = ["mcp", "--home", "/home/me/.local/share/openmemory"]
    # <<< openmemory

The record kept in the install manifest (``prefix``, ``block``, ``body``) is exactly what was
added, so removing it gives the file back byte for byte. A TOML table can always be appended
at the end of a document (tables after it are none), unless the owner defined the same table
or an inline ``mcp_servers = {...}``: :func:`has_table` and :func:`check` (``tomllib``, the
standard library's reader) find both before anything is written.
"""

from __future__ import annotations

import json
import tomllib

__all__ = ["BEGIN", "END", "string", "check", "has_table", "add", "find", "remove", "has_markers"]

BEGIN = "# >>> openmemory"
END = "# <<< openmemory"


def string(value: str) -> str:
    """A TOML basic string (JSON's escapes are all TOML escapes)."""
    return json.dumps(value, ensure_ascii=False)


def check(text: str) -> dict:
    """The parsed document; ValueError (``tomllib.TOMLDecodeError``) when it is not TOML."""
    return tomllib.loads(text)


def has_table(text: str, path: list[str]) -> bool:
    node = check(text)
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


def add(text: str, body: str, *, owner: str) -> tuple[str, dict]:
    """``text`` with our block appended, and the record of what was added."""
    prefix = ""
    if text and not text.endswith("\n"):
        prefix += "\n"
    if text:
        prefix += "\n"
    block = f"{BEGIN}: managed by {owner}; `openmemory uninstall codex` removes it\n{body}{END}\n"
    return text + prefix + block, {"prefix": prefix, "block": block, "body": body}


def find(text: str, record: dict) -> int | None:
    """Where our block (as added) starts in ``text``; None if it is gone or was changed."""
    at = text.rfind(record["block"])
    return at if at >= 0 else None


def has_markers(text: str, record: dict) -> bool:
    first = record["block"].split("\n", 1)[0]
    return any(line.rstrip() == first.rstrip() for line in text.splitlines())


def remove(text: str, record: dict, *, force: bool = False) -> str:
    """``text`` without our block (and the separator we added before it); with ``force``, a
    block that was changed is removed from its begin line to its end line."""
    whole = record["prefix"] + record["block"]
    at = text.rfind(whole)
    if at >= 0 and (record["prefix"] or at == 0):
        return text[:at] + text[at + len(whole):]
    at = find(text, record)
    if at is not None:
        return text[:at] + text[at + len(record["block"]):]
    if not force:
        return text
    lines = text.splitlines(keepends=True)
    first = record["block"].split("\n", 1)[0].rstrip()
    for i, line in enumerate(lines):
        if line.rstrip() == first:
            for j in range(i, len(lines)):
                if lines[j].rstrip() == END:
                    return "".join(lines[:i] + lines[j + 1:])
    return text
