"""The Codex CLI transcript adapter: rollout JSONL in, agent-neutral events out.

Layout on disk: ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`` (``CODEX_HOME``
defaults to ``~/.codex``; ended sessions may move to ``archived_sessions/``; newer versions also
write ``.jsonl.zst``, read here when the ``zstandard`` module is importable, else a named skip).

Every line is ``{"timestamp", "type", "payload"}``:

=================  ==================================================================
``session_meta``   ``id`` (the session), ``cwd``, ``cli_version``, ``git.branch``;
                   ``source`` naming a parent thread makes this file a sub-agent's
``turn_context``   ``cwd`` of the turn (it can change)
``response_item``  ``message`` (role ``user``: the person, unless it is injected context:
                   AGENTS.md, ``<environment_context>``, ...; ``assistant``: the agent;
                   ``developer``/``system``: neither), ``function_call`` (``name``,
                   ``arguments`` as a JSON *string*, ``call_id``), ``custom_tool_call``
                   (``input``, ``call_id``: ``apply_patch``), ``local_shell_call``,
                   ``function_call_output`` / ``custom_tool_call_output`` (``call_id``,
                   ``output``: no success flag; see :func:`.base.exit_code_in`; "exec
                   command rejected by user" is the person's rejection, a sandbox denial or
                   arguments that do not parse an error); others
                   (``reasoning``, ``ghost_snapshot``, ``web_search_call``, ...) ignored
``event_msg``      ``user_message`` / ``agent_message`` duplicate the messages above (a
                   message is counted once, whichever comes first); ``exec_command_end``
                   (``exit_code``: a structured field, preferred when present),
                   ``patch_apply_end`` (``success``: a status), ``turn_aborted``
                   (an interrupt), ``hook_completed`` of a Stop hook whose run is
                   ``blocked`` (a hook-blocked stop: a surprise, also seen as the user-role
                   ``<hook_prompt hook_run_id=...>`` continuation it adds: counted once);
                   others ignored
``compacted``      a compaction
other types        counted ("unknown codex record type 'x' (ignored)"), never fatal
=================  ==================================================================

Shell calls (``shell``, ``shell_command``, ``exec_command``, ``local_shell``) become the
neutral shell tool ``Bash`` (what the episode model, situations and lessons know as a shell
command), so that a failure met in Codex and in Claude Code has the same signature.

A file whose first record has no ``{timestamp, type, payload}`` envelope (the rollouts of
2025's first versions) is a named skip: "codex rollout, version X: not supported yet".
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import os
import shlex
from pathlib import Path

from openmemory_local.core.config import codex_home
from openmemory_local.ingest.episodes import (
    AgentSaid,
    Compacted,
    HookFailed,
    Interrupted,
    Meta,
    PersonSaid,
    ToolCalled,
    ToolReturned,
)
from openmemory_local.ingest.adapters.base import STOP_HOOK_FEEDBACK, JsonLinesParser, exit_code_in, is_injected, text_of

__all__ = ["CodexAdapter", "CodexParser", "codex_home"]

NAME = "codex"
KNOWN_TYPES = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
_IGNORED_ITEMS = frozenset({"reasoning", "ghost_snapshot", "web_search_call", "compaction", "compaction_summary",
                            "image_generation_call", "other"})
_SHELL_TOOLS = frozenset({"shell", "shell_command", "exec_command", "local_shell", "container.exec", "unified_exec"})
_RECENT = 16
_HOOK_PROMPT = re.compile(r'<hook_prompt\s+hook_run_id="([^"]*)"\s*>(.*?)</hook_prompt>', re.DOTALL)
#: How Codex words a call the person declined (normalised so by Codex), and calls that failed
#: before any exit code (a sandbox denial, arguments that do not parse, the guardian's refusal).
_REJECTED = ("exec command rejected by user", "patch rejected by user")
_TOOL_ERRORS = ("failed to parse function arguments", "unsupported call", "sandbox denied exec error",
                "failed in sandbox", "This action was rejected due to unacceptable risk", "execution error:")


def _command_line(argv) -> str:
    """A command given as argv, as the shell line it runs (``bash -lc "x"`` is ``x``)."""
    if isinstance(argv, str):
        return argv
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        return ""
    if len(argv) >= 3 and os.path.basename(argv[0]) in ("bash", "sh", "zsh") and argv[1] in ("-lc", "-c"):
        return argv[2]
    return shlex.join(argv)


def _patch_files(patch: str) -> tuple[str, ...]:
    files = []
    for line in patch.splitlines():
        for marker in ("*** Update File: ", "*** Add File: ", "*** Delete File: "):
            if line.startswith(marker):
                files.append(line[len(marker):].strip())
    return tuple(dict.fromkeys(files))


def summarise_call(name: str, args) -> dict:
    """``ToolCalled`` fields (tool, command, description, files, shell) of a Codex tool call."""
    args = args if isinstance(args, dict) else {}
    if name in _SHELL_TOOLS:
        command = _command_line(args.get("command") if "command" in args else args.get("cmd"))
        return {"tool": "Bash", "command": command, "description": "", "shell": True}
    if name == "apply_patch":
        patch = args.get("input") if isinstance(args.get("input"), str) else ""
        files = _patch_files(patch)
        return {"tool": "apply_patch", "command": ", ".join(files), "files_edited": files}
    if name in ("read_file", "view_image"):
        path = args.get("path") or args.get("file_path") or ""
        path = path if isinstance(path, str) else ""
        return {"tool": "Read", "command": path, "files_read": (path,) if path else ()}
    for key in ("command", "path", "url", "query", "name"):
        if isinstance(args.get(key), str):
            return {"tool": name, "command": args[key]}
    return {"tool": name, "command": json.dumps(args, ensure_ascii=False, sort_keys=True)[:300] if args else ""}


def _digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=8).hexdigest()


class CodexParser(JsonLinesParser):
    """Parses one Codex rollout, line by line, resumably."""

    KIND = "codex"

    def _initial(self) -> dict:
        # recent: digests of messages already counted, by role (response_item and event_msg
        # duplicate each other); ends: exit codes known from events before the output arrives
        return {"recent": {"user": [], "assistant": []}, "ends": {}, "version": None, "cwd": None}

    def _record(self, r: dict, n: int, out: list) -> None:
        kind = r.get("type")
        payload = r.get("payload")
        if self.s["records"] == 0 and not (isinstance(kind, str) and isinstance(payload, dict)):
            if not self.s["transcript_like"] and ("id" in r and "timestamp" in r or "record_type" in r):
                version = r.get("cli_version") or r.get("version") or "before 0.30 (no record envelope)"
                self.s["skip"] = f"codex rollout, version {version}: not supported yet"
                return
            self._reject("not a codex record")
            return
        if not isinstance(kind, str):
            self._reject("no record type")
            return
        self.s["records"] += 1
        ts = r.get("timestamp") if isinstance(r.get("timestamp"), str) else None
        if kind not in KNOWN_TYPES:
            self._reject(f"unknown codex record type {kind[:40]!r} (ignored)")
            return
        if not isinstance(payload, dict):
            raise TypeError("payload is not an object")
        if kind == "session_meta":
            self._session_meta(payload, n, ts, out)
        elif kind == "turn_context":
            cwd = payload.get("cwd")
            if isinstance(cwd, str) and cwd != self.s["cwd"]:
                self.s["cwd"] = cwd
                out.append(Meta(n, ts, cwd=cwd))
        elif kind == "response_item":
            self._item(payload, n, ts, out)
        elif kind == "event_msg":
            self._event(payload, n, ts, out)
        elif kind == "compacted":
            out.append(Compacted(n, ts, "compacted"))

    def _session_meta(self, p: dict, n: int, ts, out: list) -> None:
        meta = p.get("meta") if isinstance(p.get("meta"), dict) else p  # some versions nest it
        sid = meta.get("id") if isinstance(meta.get("id"), str) else None
        if not sid:
            raise ValueError("session_meta without id")
        self.s["transcript_like"] = True
        git = meta.get("git") if isinstance(meta.get("git"), dict) else (p.get("git") if isinstance(p.get("git"), dict) else {})
        version = meta.get("cli_version") if isinstance(meta.get("cli_version"), str) else None
        self.s["version"] = version
        self.s["session"] = sid
        parent = _parent_thread(meta.get("source"))
        if parent and self.s["records"] <= 2:
            self.s["role"], self.s["agent_id"] = "subagent", sid
            sid = parent
        cwd = meta.get("cwd") if isinstance(meta.get("cwd"), str) else None
        self.s["cwd"] = cwd or self.s["cwd"]
        branch = git.get("branch") if isinstance(git.get("branch"), str) else None
        out.append(Meta(n, ts, session_id=sid, agent_id=self.s["agent_id"], cwd=cwd, branch=branch,
                        version=f"codex {version}" if version else "codex"))

    def _seen(self, role: str, text: str) -> bool:
        """A message already counted from its duplicate (response_item / event_msg)."""
        recent = self.s["recent"].setdefault(role, [])
        key = _digest(text.strip())
        if key in recent:
            recent.remove(key)
            return True
        recent.append(key)
        del recent[:-_RECENT]
        return False

    def _message(self, role: str, text: str, n: int, ts, out: list) -> None:
        if not text.strip():
            return
        if role == "user":
            stripped = text.lstrip()
            if stripped.startswith("<hook_prompt"):
                # a Stop hook's continuation: the turn's end was blocked (a surprise)
                for run_id, reason in _HOOK_PROMPT.findall(stripped):
                    self._blocked(html.unescape(run_id), html.unescape(reason).strip(), n, ts, out)
                return
            if stripped.startswith(STOP_HOOK_FEEDBACK):
                if not self._seen(role, text):
                    out.append(HookFailed(n, ts, f"{n}:stop-hook", "Stop", stripped))
                return
            if is_injected(text) or self._seen(role, text):
                return
            out.append(PersonSaid(n, ts, stripped, None, None, "message"))
        elif role == "assistant":
            if not self._seen(role, text):
                out.append(AgentSaid(n, ts, text))

    def _item(self, p: dict, n: int, ts, out: list) -> None:
        itype = p.get("type")
        if itype == "message":
            role = p.get("role")
            if role in ("user", "assistant"):
                self._message(role, text_of(p.get("content")), n, ts, out)
        elif itype == "function_call":
            call_id = p.get("call_id")
            name = p.get("name") if isinstance(p.get("name"), str) else "unknown"
            if not isinstance(call_id, str):
                raise ValueError("function_call without call_id")
            raw = p.get("arguments")
            try:
                args = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                args = {"arguments": raw}
            out.append(ToolCalled(n, ts, call_id, **summarise_call(name, args)))
        elif itype == "custom_tool_call":
            call_id = p.get("call_id")
            if not isinstance(call_id, str):
                raise ValueError("custom_tool_call without call_id")
            name = p.get("name") if isinstance(p.get("name"), str) else "unknown"
            out.append(ToolCalled(n, ts, call_id, **summarise_call(name, {"input": p.get("input")})))
        elif itype == "local_shell_call":
            call_id = p.get("call_id") or p.get("id")
            action = p.get("action") if isinstance(p.get("action"), dict) else {}
            if isinstance(call_id, str):
                out.append(ToolCalled(n, ts, call_id, **summarise_call("local_shell", action)))
        elif itype in ("function_call_output", "custom_tool_call_output"):
            call_id = p.get("call_id")
            if not isinstance(call_id, str):
                raise ValueError(f"{itype} without call_id")
            out.append(self._result(call_id, p.get("output"), n, ts))
        elif itype is not None and itype not in _IGNORED_ITEMS:
            self._reject(f"unknown codex item {str(itype)[:40]!r} (ignored)")

    def _result(self, call_id: str, output, n: int, ts) -> ToolReturned:
        code, source, text = exit_code_in(output)
        known = self.s["ends"].pop(call_id, None)
        if known is not None:
            if known[1] == "field" or code is None:
                code, source = known[0], known[1]
        head = text.lstrip()[:200]
        if code is None and head.startswith(_REJECTED):
            return ToolReturned(n, ts, call_id, "rejected", text, None)  # the person said no
        if code is None and head.startswith("aborted"):
            return ToolReturned(n, ts, call_id, "interrupted", text, None)
        if code is None and head.startswith(_TOOL_ERRORS):
            return ToolReturned(n, ts, call_id, "error", text, None)
        if code is not None and code != 0:
            return _with_source(ToolReturned(n, ts, call_id, "exit_code", text, code), source)
        if known is not None and known[0] is None and known[1] == "status":  # a patch that failed
            return _with_source(ToolReturned(n, ts, call_id, "error", text, None), "status")
        return _with_source(ToolReturned(n, ts, call_id, None, "", code), source)

    def _event(self, p: dict, n: int, ts, out: list) -> None:
        etype = p.get("type")
        if etype == "user_message":
            self._message("user", p.get("message") if isinstance(p.get("message"), str) else "", n, ts, out)
        elif etype == "agent_message":
            self._message("assistant", p.get("message") if isinstance(p.get("message"), str) else "", n, ts, out)
        elif etype == "exec_command_end":
            call_id, code = p.get("call_id"), p.get("exit_code")
            if isinstance(call_id, str) and isinstance(code, int):
                self._end(call_id, [code, "field"])
        elif etype == "patch_apply_end":
            call_id = p.get("call_id")
            if isinstance(call_id, str) and p.get("success") is False:
                self._end(call_id, [None, "status"])
        elif etype == "hook_completed":
            self._hook(p, n, ts, out)
        elif etype == "turn_aborted":
            if p.get("reason") in (None, "interrupted"):
                out.append(Interrupted(n, ts))

    def _hook(self, p: dict, n: int, ts, out: list) -> None:
        """A Stop hook that blocked the end of a turn (``hook_completed`` with a run whose status
        is ``blocked``, its feedback the reason): a surprise, counted as a hook failure."""
        run = p.get("run") if isinstance(p.get("run"), dict) else p
        event = str(run.get("event_name") or run.get("hook_event_name") or "").lower()
        if str(run.get("status") or "").lower() != "blocked" or "stop" not in event:
            return
        entries = run.get("entries") if isinstance(run.get("entries"), list) else []
        text = "\n".join(e["text"] for e in entries if isinstance(e, dict) and isinstance(e.get("text"), str))
        self._blocked(str(run.get("id") or f"line-{n}"), text, n, ts, out)

    def _blocked(self, run_id: str, reason: str, n: int, ts, out: list) -> None:
        """One blocked stop, counted once whether Codex wrote its run (``hook_completed``), its
        continuation prompt (``<hook_prompt hook_run_id=...>``) or both."""
        seen = self.s.setdefault("blocked", [])
        if run_id in seen:
            return
        seen.append(run_id)
        del seen[:-64]
        out.append(HookFailed(n, ts, f"{self.s.get('session') or ''}:{run_id}:stop-blocked", "Stop",
                              f"Stop hook feedback: {reason}" if reason else "Stop hook blocked"))

    def _end(self, call_id: str, value: list) -> None:
        ends = self.s["ends"]
        ends[call_id] = value
        while len(ends) > 64:
            del ends[next(iter(ends))]


def _with_source(ev: ToolReturned, source: str | None) -> ToolReturned:
    ev.exit_source = source
    return ev


def _parent_thread(source) -> str | None:
    """The parent thread of a sub-agent's rollout (``source`` = ``{"subagent": {"thread_spawn":
    {"parent_thread_id": ...}}}`` in its JSON form, whatever the nesting)."""
    if not isinstance(source, dict):
        return None
    stack, seen = [source], 0
    while stack and seen < 32:
        item = stack.pop()
        seen += 1
        for key, value in item.items():
            if key == "parent_thread_id" and isinstance(value, str):
                return value
            if isinstance(value, dict):
                stack.append(value)
    return None


class CodexAdapter:
    """Finds Codex rollouts and makes their parsers."""

    name = NAME
    label = "Codex CLI"

    def default_roots(self, environ=None) -> list[Path]:
        home = codex_home(environ)
        return [home / "sessions", home / "archived_sessions"]  # as config.agent_sources

    @staticmethod
    def claims(path: Path) -> bool:
        name = path.name
        return name.startswith("rollout-") and (name.endswith(".jsonl") or name.endswith(".jsonl.zst"))

    def discover(self, root: Path) -> list[Path]:
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            found += [Path(dirpath) / name for name in filenames if self.claims(Path(name))]
        return sorted(found)

    def related(self, path: Path) -> list[Path]:
        return []

    @staticmethod
    def subagent_path(path: Path, agent_id: str) -> Path:
        return path.parent / f"rollout-subagent-{agent_id}.jsonl"

    @staticmethod
    def whole_file(path: Path) -> bool:
        """Read whole each time it changes (compressed: never appended to)."""
        return path.name.endswith(".zst")

    def parser(self, path: Path, state: dict | None = None, has_subagent=None) -> CodexParser:
        return CodexParser(path, state, has_subagent)
