"""What every transcript adapter shares: the parser protocol ingest drives, a JSON-lines parser
to build on, and the rules that read an exit code out of a tool's output.

The protocol (what :mod:`openmemory_local.ingest.transcripts` calls; :class:`~.claude_code.ClaudeCodeParser`
is the reference):

``feed(line)`` / ``feed_run(block, start, end, number, out)``
    the events of one line / of a run of complete lines (``number``: the line before the first);
``finish()``
    events that only the end of the read can give (a whole-file format); ``[]`` for JSON lines;
``transcript_like``, ``role``, ``agent_id``, ``rejects`` (reason -> lines), ``state()``
    what ingest stores with the transcript (the state is plain JSON, so a later run resumes);
``skip_reason``
    None, or why this file is one the adapter knows but cannot read ("codex rollout, version X:
    not supported yet"): ingest records a named skip instead of "not a transcript".

Exit codes (:func:`exit_code_in`): agents that record no success flag put the code in the
output's text (Codex ``Exit code: N`` as the first line; Gemini CLI ``Exit Code: N`` as a line of
its shell tool's report; Codex's unified ``exec_command`` says ``Process exited with code N``
in its header) or in a JSON envelope (Codex ``{"output": ..., "metadata":
{"exit_code": N}}``). Each result says where its code came from (``exit_source``): ``field`` (a
structured field of the record), ``metadata`` (the JSON envelope), ``output`` (parsed from the
text), ``status`` (the tool call's status).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from openmemory_local.core.jsonio import loads
from openmemory_local.ingest.rawstream import Line

try:
    from orjson import JSONDecodeError as _JSONDecodeError, loads as _fast_loads
except ImportError:  # pragma: no cover - orjson is a dependency
    _JSONDecodeError, _fast_loads = ValueError, loads

__all__ = ["JsonLinesParser", "exit_code_in", "shell_text", "text_of", "is_injected", "STOP_HOOK_FEEDBACK"]

#: How agents report a Stop hook that blocked the agent from ending its turn (Claude Code's
#: "Stop hook feedback:" message): a surprise, counted as a hook failure.
STOP_HOOK_FEEDBACK = ("Stop hook feedback", "Stop hook blocked", "Stop hook error")

_CODEX_EXIT = re.compile(r"\AExit code: (-?\d+)[ \t]*\r?\n?")
_HEADER_CODE = re.compile(r"^(?:Exit code: (-?\d+)|Process exited with code (-?\d+))\s*$")
_GEMINI_EXIT = re.compile(r"(?m)^Exit Code: (-?\d+)[ \t]*\r?$")
_OUTPUT_AFTER = re.compile(r"(?m)^Output:[ \t]?")
_WRAPPED = re.compile(r"^\s*<([a-zA-Z][\w-]*)(?:\s[^>]*)?>")
_INJECTED_PREFIXES = ("# AGENTS.md instructions", "# GEMINI.md", "<environment_context>", "<user_instructions>",
                      "<permissions instructions>", "<turn_aborted>", "<user_shell_command>")


def text_of(content) -> str:
    """The text of a message: a string, or a list of parts (``{"text": ...}`` of any type)."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return content.get("text") if isinstance(content.get("text"), str) else ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return ""


def is_injected(text: str) -> bool:
    """Text an agent's host put in a user message (instructions files, environment context,
    tag-wrapped notices): never the person's words, and never ingested as them (our own memory
    files come back this way)."""
    stripped = text.lstrip()
    return stripped.startswith(_INJECTED_PREFIXES) or _WRAPPED.match(stripped) is not None


def exit_code_in(output) -> tuple[int | None, str | None, str]:
    """``(exit code, where it came from, the output's text)`` of a tool output that has no
    success flag: a JSON envelope with ``metadata.exit_code`` (source ``metadata``), a first line
    ``Exit code: N`` (Codex) or a line ``Exit Code: N`` (Gemini CLI's shell report), both source
    ``output``; ``(None, None, text)`` when it says nothing of one."""
    if isinstance(output, dict):
        envelope = output
        text = text_of(output.get("output") if "output" in output else output.get("content"))
    else:
        text = output if isinstance(output, str) else text_of(output)
        envelope = None
        head = text.lstrip()[:1]
        if head == "{" and '"metadata"' in text[:200000]:
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                envelope = parsed
                text = text_of(parsed.get("output"))
    if envelope is not None:
        meta = envelope.get("metadata")
        code = meta.get("exit_code") if isinstance(meta, dict) else None
        if isinstance(code, int) and not isinstance(code, bool):
            return code, "metadata", text
    code = _header_code(text)
    if code is not None:
        after = _OUTPUT_AFTER.search(text)
        body = text[after.end():] if after else _CODEX_EXIT.sub("", text, count=1)
        return code, "output", body[1:] if body.startswith("\n") else body
    found = _GEMINI_EXIT.findall(text)
    if found:
        return int(found[-1]), "output", shell_text(text)
    return None, None, text


def _header_code(text: str) -> int | None:
    """The exit code in the header of a Codex shell output: the lines before ``Output:``
    (``Exit code: N`` of ``shell``/``shell_command``; ``Process exited with code N`` of the
    unified ``exec_command``, after ``Chunk ID:`` and ``Wall time:`` lines), at most 8 lines."""
    for number, line in enumerate(text[:2048].splitlines()):
        if number >= 8 or line.startswith("Output:"):
            return None
        match = _HEADER_CODE.match(line)
        if match:
            return int(match.group(1) or match.group(2))
    return None


_REPORT_HEADS = frozenset({"Command", "Directory", "Output", "Stdout", "Stderr", "Error", "Exit Code", "Signal",
                           "Background PIDs", "Process Group PGID"})
_PRINTED = frozenset({"Output", "Stdout", "Stderr", "Error"})


def shell_text(report: str) -> str:
    """What a shell report (``Command: ...\\nOutput: ...\\nError: ...\\nExit Code: N``; older
    Gemini CLI versions: ``Stdout:``/``Stderr:``) printed: its output and error parts, without
    the report's own lines."""
    keep = []
    section = None
    for line in report.splitlines():
        head, sep, rest = line.partition(": ")
        if sep and head in _REPORT_HEADS:
            section = head
            if head in _PRINTED and rest.strip() not in ("", "(empty)", "(none)"):
                keep.append(rest)
            continue
        if section in _PRINTED:
            keep.append(line)
    return "\n".join(keep) if keep else report


class JsonLinesParser:
    """A resumable parser of a JSON-lines transcript: decodes each line, counts the bad ones by
    reason, and hands each record (a dict) to :meth:`_record`. Subclasses set ``KIND`` (the
    format's name in messages) and implement :meth:`_record`."""

    KIND = "transcript"

    def __init__(self, path: Path, state: dict | None = None, has_subagent=None):
        self.path = Path(path)
        self.s = {"role": "main", "agent_id": None, "transcript_like": False, "records": 0, "rejects": {},
                  "skip": None}
        self.s.update(self._initial())
        if state:
            self.s.update(state)

    def _initial(self) -> dict:
        return {}

    # --- the protocol ---------------------------------------------------------------

    @property
    def role(self) -> str:
        return self.s["role"]

    @property
    def agent_id(self) -> str | None:
        return self.s["agent_id"]

    @property
    def transcript_like(self) -> bool:
        return self.s["transcript_like"] and not self.s["skip"]

    @property
    def skip_reason(self) -> str | None:
        return self.s["skip"]

    @property
    def rejects(self) -> dict:
        return self.s["rejects"]

    def state(self) -> dict:
        return dict(self.s)

    def _reject(self, reason: str) -> None:
        self.s["rejects"][reason] = self.s["rejects"].get(reason, 0) + 1

    def feed(self, line: Line) -> list:
        if line.data is None:
            self._reject("oversized line")
            return []
        out: list = []
        self._decode(line.data, line.number, out)
        return out

    def feed_run(self, block: bytes, start: int, end: int, number: int, out: list | None = None, *,
                 single: bool = False) -> list:
        if out is None:
            out = []
        view = memoryview(block)
        pos = start
        while pos < end:
            nl = end if single else (block.find(b"\n", pos, end) + 1 or end)
            number += 1
            if nl - pos > 8 or block[pos:nl].strip():
                self._decode(view[pos:nl], number, out)
            pos = nl
        return out

    def finish(self) -> list:
        return []

    # --- records ----------------------------------------------------------------------

    def _decode(self, data, number: int, out: list) -> None:
        if self.s["skip"]:
            return
        try:
            try:
                record = _fast_loads(data)
            except _JSONDecodeError:
                record = loads(bytes(data))
        except RecursionError:
            self._reject("invalid JSON (nested too deeply)")
            return
        except ValueError:
            self._reject("invalid JSON")
            return
        if not isinstance(record, dict):
            self._reject("not a JSON object")
            return
        mark = len(out)
        try:
            self._record(record, number, out)
        except (AttributeError, TypeError, KeyError, ValueError):
            del out[mark:]
            self._reject(f"malformed {self.KIND} record")

    def _record(self, record: dict, number: int, out: list) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
