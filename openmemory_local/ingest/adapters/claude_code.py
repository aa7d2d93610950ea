"""The Claude Code transcript adapter: JSONL records in, agent-neutral events out.

Layout on disk (``~/.claude/projects/<project>/``): ``<session-id>.jsonl`` for a session,
``<session-id>/subagents/agent-<id>.jsonl`` for each subagent it launched
(``agent-acompact-*`` are the compaction helpers). The session id comes from the
records (``sessionId``), not the file name; a subagent's records carry its parent's
session id, which is how it is attached to its parent.

Record types and what they become (every line is one JSON object with a ``type``):

=====================  ==============================================================
``user``               tool results (``tool_result`` blocks, paired with their call by
                       ``tool_use_id``); the person's messages; interrupts; slash
                       commands; everything else a user record can carry (meta records,
                       skill texts, compaction summaries, notifications, hook output,
                       command output) is *not* the person and becomes a Link only
``assistant``          the agent's text (one model response can span several lines that
                       share ``message.id``: counted once) and its ``tool_use`` calls
``progress``           ``agent_progress`` carries a subagent's messages: used only when
                       that subagent's own transcript does not exist; other progress
                       (hooks, bash output) is skipped without a full parse
``system``             ``compact_boundary`` (a compaction), ``local_command`` (a slash
                       command and its output), ``stop_hook_summary`` (its ``hookErrors``
                       are hook failures), others kept in the conversation tree
``summary``            the session's title
``file-history-snapshot``, ``queue-operation``  (an ``enqueue`` is a message the person
                       typed while the agent worked: it counts as the person)
anything else          an unknown (future) type: accepted, kept in the conversation tree,
                       not interpreted, never rejected
=====================  ==============================================================

A Stop hook that blocked the end of a turn ("Stop hook feedback:" and its reason, such as
"Cannot exit with unstaged changes") is a hook failure (a surprise), never the person.

Failures of a tool call: ``is_error`` results, ``<tool_use_error>`` text, ``Exit code N``
(N != 0), the person's rejection of the call ("The user doesn't want to proceed ...", with
the person's feedback after "the user said:" becoming a correction), an interrupt during
the call, a call cancelled because a parallel one failed, and hook failures.

In a subagent transcript no message is the person's: its first message is the task it
was given by the parent agent (a TaskGiven event).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Callable, Iterator

from openmemory_local.ingest.episodes import (
    AgentSaid,
    CommandRun,
    Compacted,
    HookFailed,
    Interrupted,
    Link,
    Meta,
    PersonSaid,
    TaskGiven,
    Titled,
    ToolCalled,
    ToolReturned,
)
from openmemory_local.core.jsonio import loads

try:
    from orjson import JSONDecodeError as _JSONDecodeError, loads as _fast_loads
except ImportError:  # pragma: no cover - orjson is a dependency
    _JSONDecodeError, _fast_loads = ValueError, loads
from openmemory_local.ingest.rawstream import Line

__all__ = ["ClaudeCodeAdapter", "ClaudeCodeParser", "KNOWN_TYPES"]

NAME = "claude-code"

KNOWN_TYPES = frozenset(
    {"user", "assistant", "progress", "system", "summary", "file-history-snapshot", "queue-operation"}
)

# A progress record other than a subagent's (hook and command output: two thirds of the lines
# of a transcript) is recognised on its bytes and not parsed (``ClaudeCodeParser.feed_run``).
# Inside JSON strings every quote is escaped, so ``"type":"`` can only be a key of the
# record; Claude Code writes the record's own ``type`` before its nested objects, so the
# first ``"type":"`` of the line is the record's type. Its ``uuid`` and ``parentUuid`` are read
# off the bytes too: Claude Code writes ``parentUuid`` first and ``uuid`` near the end;
# anything else falls back to a search of the whole line.
_TYPE_KEY = b'"type":"'
_PROGRESS_VALUE = b'progress"'
_AGENT_PROGRESS = b'"agent_progress"'
_TYPE_WITHIN = 2048 - len(_TYPE_KEY)  # the first ``"type":"`` within the line's first 2 KiB
_SNAPSHOT = b'{"type":"file-history-snapshot"'
_MAX_ALIASES = 512
_ALIASES_TRIM_AT = _MAX_ALIASES + _MAX_ALIASES // 4  # trim in batches: amortised O(1)
_PARENT_FIRST = b'{"parentUuid":"'
_PARENT_NULL = b'{"parentUuid":null'
_UUID_KEY = b'"uuid":"'
_MESSAGE_KEY = b'"message":'
_PARENT = re.compile(rb'"parentUuid":"([^"\\]+)"')


_REJECTED = (
    "The user doesn't want to proceed with this tool use",
    "The user doesn't want to take this action",
)
_FEEDBACK = re.compile(r"the user said:\s*\n?(.*)", re.IGNORECASE | re.DOTALL)
_EXIT = re.compile(r"^Exit code (-?\d+)\s*\n?")
_TOOL_USE_ERROR = re.compile(r"^\s*<tool_use_error>(.*?)(?:</tool_use_error>\s*)?$", re.DOTALL)
_WRAPPED = re.compile(r"^\s*<([a-zA-Z][\w-]*)(?:\s[^>]*)?>")
_COMMAND_NAME = re.compile(r"<command-name>\s*(.*?)\s*</command-name>", re.DOTALL)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
_NOT_PERSON_PREFIXES = (
    "Caveat:",
    "This session is being continued",
    "Stop hook feedback",
    "Base directory for this skill",
    "PreToolUse:",
    "PostToolUse:",
    "UserPromptSubmit",
    "SessionStart:",
    "SessionEnd:",
    "SubagentStop",
    "Notification:",
    "PreCompact",
    "API Error",
)
_INTERRUPT = "[Request interrupted by user"
_STOP_BLOCKED = "Stop hook feedback"


def _role_from_path(path: Path) -> tuple[str, str | None]:
    """("main" | "subagent" | "compaction", agent id) from the file's place in the layout."""
    name = path.name
    if path.parent.name == "subagents" and name.startswith("agent-"):
        agent = name[len("agent-"):]
        agent = agent[: -len(".jsonl")] if agent.endswith(".jsonl") else agent
        return ("compaction" if agent.startswith("acompact") else "subagent"), agent
    return "main", None


def _text_of(content) -> str:
    """The text of a message or tool result content (a string or a list of blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict):
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif block.get("type") == "image":
                    parts.append("[image]")
            elif isinstance(block, str):
                parts.append(block)
        return "\n".join(parts)
    return ""


def _is_machine_text(text: str) -> bool:
    """Text a person did not type: tag-wrapped (``<task-notification>…</task-notification>``,
    ``<local-command-stdout>``, ``<system-reminder>``, ...) or a known host prefix."""
    stripped = text.lstrip()
    match = _WRAPPED.match(stripped)
    if match and f"</{match.group(1)}>" in stripped:
        return True
    return stripped.startswith(_NOT_PERSON_PREFIXES)


def _str(value) -> str:
    return value if isinstance(value, str) else ""


def _summarise_call(name: str, args) -> dict:
    """command / description / files for a tool call, by Claude Code tool name."""
    args = args if isinstance(args, dict) else {}
    out = {"command": "", "description": "", "files_read": (), "files_edited": (), "shell": False}
    if name == "Bash":
        out.update(command=_str(args.get("command")), description=_str(args.get("description")), shell=True)
    elif name == "Read":
        path = _str(args.get("file_path"))
        window = ", ".join(f"{key} {args[key]}" for key in ("offset", "limit") if isinstance(args.get(key), int))
        out.update(command=path, files_read=(path,) if path else (), description=window)
    elif name in ("Edit", "MultiEdit", "Write", "NotebookEdit"):
        path = _str(args.get("file_path")) or _str(args.get("notebook_path"))
        out.update(command=path, files_edited=(path,) if path else ())
    elif name in ("Glob", "Grep"):
        where = _str(args.get("path")) or _str(args.get("glob"))
        out.update(command=_str(args.get("pattern")) + (f" in {where}" if where else ""))
    elif name == "WebFetch":
        out.update(command=_str(args.get("url")), description=_str(args.get("prompt"))[:200])
    elif name == "WebSearch":
        out.update(command=_str(args.get("query")))
    elif name in ("Task", "Agent"):
        out.update(command=_str(args.get("description")), description=_str(args.get("description")))
    elif name == "Skill":
        out.update(command=_str(args.get("skill")) or _str(args.get("command")))
    elif name == "SlashCommand":
        out.update(command=_str(args.get("command")))
    else:
        for key in ("command", "task_id", "bash_id", "shell_id", "path", "url", "query", "name"):
            if isinstance(args.get(key), str):
                out["command"] = args[key]
                break
        else:
            if args:
                out["command"] = json.dumps(args, ensure_ascii=False, sort_keys=True)[:300]
    return out


def _classify_result(block: dict, record: dict) -> tuple[str | None, str, int | None, str | None]:
    """(failure kind or None, failure text, exit code, the person's rejection feedback)."""
    text = _text_of(block.get("content"))
    is_error = block.get("is_error") is True
    head = text[:256].lstrip()  # every marker is at the start: never copy a big output
    if head.startswith(_REJECTED) or record.get("toolUseResult") == "User rejected tool use":
        match = _FEEDBACK.search(text)
        feedback = match.group(1).strip() if match else None
        return "rejected", text, None, feedback or None
    if head.startswith(_INTERRUPT):
        return "interrupted", text, None, None
    if head.startswith("<tool_use_error>"):
        match = _TOOL_USE_ERROR.match(text)
        inner = match.group(1).strip() if match else text
        if inner.startswith("Sibling tool call errored"):
            return "cancelled", inner, None, None
        return "tool_use_error", inner, None, None
    if head.startswith("Sibling tool call errored") and is_error:
        return "cancelled", head, None, None
    if head.startswith("Exit code "):
        full = text.lstrip()
        match = _EXIT.match(full)
        if match and (is_error or int(match.group(1)) != 0):
            return "exit_code", full[match.end():], int(match.group(1)), None
    if is_error:
        return "error", text, None, None
    return None, "", None, None


class ClaudeCodeParser:
    """Parses one Claude Code transcript, line by line, resumably.

    ``has_subagent(agent_id)`` says whether that subagent's own transcript exists (then
    its messages echoed in this file's progress records are ignored).
    """

    def __init__(self, path: Path, state: dict | None = None,
                 has_subagent: Callable[[str], bool] | None = None):
        role, agent = _role_from_path(path)
        self.s = {
            "role": role,
            "agent_id": agent,
            "transcript_like": False,
            "records": 0,
            "meta": None,
            "turn": None,
            "turn_blocks": [],
            "queued": [],
            "prompted": False,
            "fallback_agents": [],
            "alias": {},
            "rejects": {},
        }
        if state:
            self.s.update(state)
        self._has_subagent = has_subagent or (lambda agent_id: False)
        self._last_meta: tuple | None = None
        self._subagent_known: dict[str, bool] = {}

    # --- public -------------------------------------------------------------------

    @property
    def role(self) -> str:
        return self.s["role"]

    @property
    def agent_id(self) -> str | None:
        return self.s["agent_id"]

    @property
    def transcript_like(self) -> bool:
        return self.s["transcript_like"]

    @property
    def rejects(self) -> dict:
        return self.s["rejects"]

    def state(self) -> dict:
        return dict(self.s)

    def _reject(self, reason: str) -> None:
        self.s["rejects"][reason] = self.s["rejects"].get(reason, 0) + 1

    def feed(self, line: Line) -> list:
        """The events of one line (an empty list for a line that says nothing new)."""
        data = line.data
        if data is None:
            self._reject("oversized line")
            return []
        out: list = []
        self.feed_run(data, 0, len(data), line.number - 1, out, single=True)
        return out

    def feed_run(self, block: bytes, start: int, end: int, number: int, out: list | None = None, *,
                 single: bool = False) -> list:
        """The events of the lines of ``block[start:end]`` (complete lines, the first numbered
        ``number + 1``), appended to ``out``; the same as :meth:`feed` line by line
        (``single``: ``block[start:end]`` is one line, whatever it holds).

        Each line is first classified on its bytes, where it lies in the block: a snapshot or a
        progress record we never use is counted (and its ids kept) without a copy or a parse;
        only the other records are decoded (:meth:`_decode`)."""
        if out is None:
            out = []
        s = self.s
        find = block.find
        rfind = block.rfind
        startswith = block.startswith
        alias = s["alias"]
        view = memoryview(block)  # a record to decode is handed over as a view: never copied
        counted = 0  # records settled on their bytes, not yet added to s["records"]
        pos = start
        while pos < end:
            nl = end if single else (find(b"\n", pos, end) + 1 or end)
            number += 1
            # A progress record other than a subagent's, on its bytes (see _TYPE_KEY); its type
            # key within the first 2 KiB.
            at = find(_TYPE_KEY, pos, nl)
            if (0 <= at <= pos + _TYPE_WITHIN and startswith(_PROGRESS_VALUE, at + 8)
                    and find(_AGENT_PROGRESS, pos, nl) < 0 and find(_MESSAGE_KEY, pos, at) < 0):
                counted += 1
                at = rfind(_UUID_KEY, pos, nl)
                if at >= 0:
                    q = find(b'"', at + 8, nl)
                    uid = block[at + 8 : q if q >= 0 else nl - 1].decode("utf-8", "replace")
                    if uid:
                        if startswith(_PARENT_FIRST, pos):
                            q = find(b'"', pos + 15, nl)
                            parent = block[pos + 15 : q if q >= 0 else nl - 1].decode("utf-8", "replace")
                            alias[uid] = alias.get(parent, parent) if parent else None  # _alias, inlined
                        elif startswith(_PARENT_NULL, pos):
                            alias[uid] = None
                        else:
                            match = _PARENT.search(block, pos, nl)
                            parent = match.group(1).decode("utf-8", "replace") if match else None
                            alias[uid] = alias.get(parent, parent) if parent else None
                        if len(alias) > _ALIASES_TRIM_AT:
                            for key in list(alias)[: len(alias) - _MAX_ALIASES]:
                                del alias[key]
            elif startswith(_SNAPSHOT, pos):  # file-history-snapshot: nothing for us in it
                counted += 1
            elif nl - pos < 8 and not block[pos:nl].strip():
                pass  # blank line
            else:
                if counted:
                    s["records"] += counted
                    s["transcript_like"] = True
                    counted = 0
                self._decode(view[pos:nl], number, out)
            pos = nl
        if counted:
            s["records"] += counted
            s["transcript_like"] = True
        return out

    def _decode(self, data: bytes | memoryview, number: int, out: list) -> None:
        """Parse one record that the byte tests did not settle, and interpret it."""
        try:
            try:
                record = _fast_loads(data)
            except _JSONDecodeError:  # what orjson refuses, as jsonio.loads reads it
                record = loads(bytes(data))
        except RecursionError:
            self._reject("invalid JSON (nested too deeply)")
            return
        except ValueError:  # includes UnicodeDecodeError
            self._reject("invalid JSON")
            return
        if not isinstance(record, dict):
            self._reject("not a JSON object")
            return
        kind = record.get("type")
        if not isinstance(kind, str):
            self._reject("no record type")
            return
        self.s["records"] += 1
        if not self.s["transcript_like"] and any(k in record for k in ("sessionId", "uuid", "messageId", "leafUuid")):
            self.s["transcript_like"] = True
        mark = len(out)
        try:
            self._record(kind, record, number, out)
        except (AttributeError, TypeError, KeyError, ValueError):
            # A record of a known type with an unexpected shape.
            del out[mark:]
            self._reject(f"malformed {kind} record")

    # --- records ------------------------------------------------------------------

    def _record(self, kind: str, r: dict, n: int, out: list) -> None:
        ts = r.get("timestamp") if isinstance(r.get("timestamp"), str) else None
        self._meta(r, n, ts, out)
        uid = r.get("uuid") if isinstance(r.get("uuid"), str) else None
        parent = r.get("parentUuid") or r.get("logicalParentUuid")
        parent = self._resolve(parent) if isinstance(parent, str) else None
        if kind == "user":
            self._user(r, n, ts, uid, parent, out)
        elif kind == "assistant":
            self._assistant(r, n, ts, uid, parent, out)
        elif kind == "progress":
            self._progress(r, n, ts, uid, parent, out)
        elif kind == "system":
            self._system(r, n, ts, uid, parent, out)
        elif kind == "summary":
            if isinstance(r.get("summary"), str):
                out.append(Titled(n, ts, r["summary"]))
        elif kind == "queue-operation":
            self._queue(r, n, ts, out)
        elif kind == "file-history-snapshot":
            pass
        else:
            # An unknown (future) record type: accepted, kept in the tree, not interpreted.
            if uid:
                out.append(Link(n, ts, uid, parent))

    def _meta(self, r: dict, n: int, ts: str | None, out: list) -> None:
        quick = (r.get("sessionId"), r.get("agentId"), r.get("cwd"), r.get("gitBranch"), r.get("version"))
        if quick == self._last_meta:
            return
        self._last_meta = quick
        meta = (
            r.get("sessionId") if isinstance(r.get("sessionId"), str) else None,
            r.get("agentId") if isinstance(r.get("agentId"), str) else None,
            r.get("cwd") if isinstance(r.get("cwd"), str) else None,
            r.get("gitBranch") if isinstance(r.get("gitBranch"), str) else None,
            r.get("version") if isinstance(r.get("version"), str) else None,
        )
        if not any(meta[:4]):
            return
        if (
            self.s["role"] == "main"
            and r.get("isSidechain") is True
            and meta[1]
            and self.s["records"] <= 3
            and r.get("type") in ("user", "assistant")
        ):
            # A lone subagent transcript outside the subagents folder.
            self.s["role"] = "compaction" if meta[1].startswith("acompact") else "subagent"
            self.s["agent_id"] = meta[1]
        if self.s["meta"] is not None and list(meta) == self.s["meta"]:
            return
        self.s["meta"] = list(meta)
        agent = self.s["agent_id"] if self.s["role"] != "main" else None
        out.append(Meta(n, ts, session_id=meta[0], agent_id=agent, cwd=meta[2], branch=meta[3],
                        version=meta[4]))

    def _is_person(self, r: dict) -> bool:
        return (
            self.s["role"] == "main"
            and r.get("isSidechain") is not True
            and r.get("isMeta") is not True
            and r.get("isCompactSummary") is not True
            and r.get("isVisibleInTranscriptOnly") is not True
            and r.get("userType", "external") == "external"
        )

    def _user(self, r, n, ts, uid, parent, out) -> None:
        message = r.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if r.get("isCompactSummary") is True:
            out.append(Compacted(n, ts, "summary"))
            if uid:
                out.append(Link(n, ts, uid, parent))
            return
        texts: list[str] = []
        blocks = content if isinstance(content, list) else [content] if isinstance(content, str) else []
        for block in blocks:
            if isinstance(block, str):
                texts.append(block)
                continue
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_result":
                self._tool_result(block, r, n, ts, uid, parent, out)
            elif block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
        linked = False
        for text in texts:
            if not text.strip():
                continue
            stripped = text.lstrip()
            if stripped.startswith(_INTERRUPT):
                if self._is_person(r):
                    out.append(Interrupted(n, ts, uid, parent))
                    linked = True
                continue
            if "<command-name>" in stripped[:400] and stripped.startswith("<command-"):
                if self._is_person(r):
                    self._command(stripped, n, ts, out)
                continue
            if stripped.startswith(_STOP_BLOCKED) and self.s["role"] == "main":
                # A Stop hook that blocked the end of the turn ("Cannot exit with unstaged
                # changes"): a surprise, counted as a hook failure; never the person.
                out.append(HookFailed(n, ts, f"{uid or n}:stop-blocked", "Stop", stripped))
                continue
            if _is_machine_text(stripped):
                continue
            if self._is_person(r):
                if self._dequeued(stripped):
                    continue
                out.append(PersonSaid(n, ts, stripped, uid, parent, "message"))
                linked = True
            elif self.s["role"] != "main" and not self.s["prompted"] and r.get("isMeta") is not True:
                self.s["prompted"] = True
                out.append(TaskGiven(n, ts, stripped))
        if uid and not linked:
            out.append(Link(n, ts, uid, parent))

    def _command(self, text: str, n: int, ts, out: list) -> None:
        name = _COMMAND_NAME.search(text)
        args = _COMMAND_ARGS.search(text)
        if name:
            out.append(CommandRun(n, ts, name.group(1).strip(), (args.group(1).strip() if args else "")))

    def _dequeued(self, text: str) -> bool:
        """True if this message was already counted when it was queued."""
        queued = self.s["queued"]
        if text in queued:
            queued.remove(text)
            return True
        return False

    def _tool_result(self, block, r, n, ts, uid, parent, out, agent: str | None = None) -> None:
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str):
            return
        failure, text, code, feedback = _classify_result(block, r)
        out.append(ToolReturned(n, ts, call_id, failure, text if failure else "", code, uid, parent, agent))
        if feedback and agent is None and self._is_person(r):
            out.append(PersonSaid(n, ts, feedback, None, uid or parent, "rejection"))

    def _assistant(self, r, n, ts, uid, parent, out, agent: str | None = None) -> None:
        message = r.get("message")
        if not isinstance(message, dict):
            return
        turn = message.get("id") if isinstance(message.get("id"), str) else None
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}] if isinstance(content, str) else []
        emitted = False
        if r.get("isApiErrorMessage") is True:
            blocks = []  # the host's error text, not the agent's statement
        for block in blocks:
            if not isinstance(block, dict):
                continue
            btype = block.get("type")
            if btype == "text" and isinstance(block.get("text"), str):
                if agent is not None or self._seen_in_turn(turn, block["text"]):
                    continue
                out.append(AgentSaid(n, ts, block["text"], uid, parent, turn))
                emitted = True
            elif btype == "tool_use" and isinstance(block.get("id"), str):
                name = block.get("name") if isinstance(block.get("name"), str) else "unknown"
                summary = _summarise_call(name, block.get("input"))
                out.append(ToolCalled(n, ts, block["id"], name, uid=uid, parent=parent,
                                      turn=turn if agent is None else None, agent=agent, **summary))
                emitted = True
        if uid and not emitted:
            out.append(Link(n, ts, uid, parent))

    def _seen_in_turn(self, turn: str | None, text: str) -> bool:
        """A text block repeated on another line of the same model response."""
        digest = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()
        if turn != self.s["turn"]:
            self.s["turn"] = turn
            self.s["turn_blocks"] = []
        if digest in self.s["turn_blocks"]:
            return True
        self.s["turn_blocks"] = (self.s["turn_blocks"] + [digest])[-32:]
        return False

    def _alias(self, uid: str, parent: str | None) -> None:
        """Progress records are not events: a record whose parent is one is linked to the
        progress record's own parent instead (the conversation tree without progress)."""
        alias = self.s["alias"]
        alias[uid] = alias.get(parent, parent) if parent else None  # _resolve, inlined
        if len(alias) > _ALIASES_TRIM_AT:
            for key in list(alias)[: len(alias) - _MAX_ALIASES]:
                del alias[key]

    def _resolve(self, parent: str) -> str | None:
        alias = self.s["alias"]
        return alias[parent] if parent in alias else parent

    def _progress(self, r, n, ts, uid, parent, out) -> None:
        data = r.get("data")
        if isinstance(data, dict) and data.get("type") == "agent_progress":
            agent = data.get("agentId")
            inner = data.get("message")
            if isinstance(agent, str) and isinstance(inner, dict) and not self._subagent_exists(agent):
                if agent not in self.s["fallback_agents"]:
                    self.s["fallback_agents"].append(agent)
                itype = inner.get("type")
                if itype == "assistant":
                    self._assistant(inner, n, ts, None, None, out, agent=agent)
                elif itype == "user":
                    msg = inner.get("message")
                    content = msg.get("content") if isinstance(msg, dict) else None
                    for block in content if isinstance(content, list) else []:
                        if isinstance(block, dict) and block.get("type") == "tool_result":
                            self._tool_result(block, inner, n, ts, None, None, out, agent=agent)
        if uid:
            self._alias(uid, parent)

    def _subagent_exists(self, agent: str) -> bool:
        known = self._subagent_known.get(agent)
        if known is None:
            known = bool(self._has_subagent(agent))
            self._subagent_known[agent] = known
        return known

    def _system(self, r, n, ts, uid, parent, out) -> None:
        subtype = r.get("subtype")
        if subtype == "compact_boundary":
            meta = r.get("compactMetadata")
            trigger = meta.get("trigger") if isinstance(meta, dict) else None
            out.append(Compacted(n, ts, trigger if isinstance(trigger, str) else ""))
        elif subtype == "local_command":
            text = _str(r.get("content")).lstrip()
            if text.startswith("<command-") and "<command-name>" in text[:400]:
                self._command(text, n, ts, out)
        elif subtype == "stop_hook_summary":
            errors = r.get("hookErrors")
            for i, error in enumerate(errors if isinstance(errors, list) else []):
                text = error if isinstance(error, str) else json.dumps(error, ensure_ascii=False)
                key = f"{uid or n}:hook:{i}"
                out.append(HookFailed(n, ts, key, "Stop", text))
        if uid:
            out.append(Link(n, ts, uid, parent))

    def _queue(self, r, n, ts, out) -> None:
        if r.get("operation") != "enqueue":
            return
        text = _str(r.get("content")).strip()
        if not text or self.s["role"] != "main":
            return
        if text.startswith("/"):
            name, _, args = text.partition(" ")
            out.append(CommandRun(n, ts, name, args.strip()))
            self._remember_queued(text)
            return
        if _is_machine_text(text) or text.startswith(_INTERRUPT):
            self._remember_queued(text)
            return
        self._remember_queued(text)
        out.append(PersonSaid(n, ts, text, None, None, "queued"))

    def _remember_queued(self, text: str) -> None:
        self.s["queued"] = (self.s["queued"] + [text])[-16:]


class ClaudeCodeAdapter:
    """Finds Claude Code transcripts and makes their parsers."""

    name = NAME
    label = "Claude Code"

    def default_roots(self, environ=None) -> list[Path]:
        from openmemory_local.core.config import default_sources

        return list(default_sources(environ))

    @staticmethod
    def claims(path: Path) -> bool:
        return path.name.endswith(".jsonl")

    @staticmethod
    def whole_file(path: Path) -> bool:
        return False

    def discover(self, root: Path) -> list[Path]:
        """Every ``*.jsonl`` file under ``root`` (symbolic links to folders not followed)."""
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in filenames:
                if name.endswith(".jsonl"):
                    found.append(Path(dirpath) / name)
        return sorted(found)

    def related(self, path: Path) -> list[Path]:
        """The subagent transcripts that belong with a session transcript given alone."""
        folder = path.parent / path.stem / "subagents"
        if path.suffix == ".jsonl" and folder.is_dir():
            return sorted(p for p in folder.iterdir() if p.name.endswith(".jsonl"))
        return []

    @staticmethod
    def subagent_path(path: Path, agent_id: str) -> Path:
        """Where the transcript of subagent ``agent_id`` of session file ``path`` lives."""
        return path.parent / path.stem / "subagents" / f"agent-{agent_id}.jsonl"

    def parser(self, path: Path, state: dict | None = None,
               has_subagent: Callable[[str], bool] | None = None) -> ClaudeCodeParser:
        return ClaudeCodeParser(path, state, has_subagent)

    def events(self, path: Path, lines: Iterator[Line]) -> Iterator:
        """All events of ``lines`` (a convenience for tests and tools)."""
        parser = self.parser(path)
        for line in lines:
            yield from parser.feed(line)
