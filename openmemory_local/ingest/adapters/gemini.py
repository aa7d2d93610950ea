"""The Gemini CLI transcript adapter: chat recordings in, agent-neutral events out.

Layout on disk: ``$GEMINI_CLI_HOME/.gemini/tmp/<project id>/chats/`` (``GEMINI_CLI_HOME``
defaults to the home folder), one file per session:

* since v0.39, ``session-<time>-<id8>.jsonl``: line 1 the session's metadata (``sessionId``,
  ``projectHash``, ``startTime``, ``lastUpdated``, ``kind``), then message records. A record
  appended again with the same ``id`` *updates* the earlier one (a model message is written
  first, then again with its tool calls' results); ``{"$set": {...}}`` updates the metadata;
  ``{"$rewindTo": id}`` rewinds the conversation (what happened before stays a fact: counted);
* before, ``session-*.json``: one ``ConversationRecord`` (the same metadata and
  ``messages: [...]``), rewritten whole as the session goes: read whole when it changes.

Messages: ``{id, timestamp, type: user | gemini | info | error | warning, content}`` (content a
string or a list of parts); ``gemini`` ones carry ``toolCalls: [{id, name, args, result:
[{functionResponse: {response: {output | error}}}], status, resultDisplay}]``. A tool call is
taken once, when its status is final (``success``, ``error``, ``cancelled``): an ``error``
status is a failure (source ``status``), ``cancelled`` a rejection by the person, and a
``run_shell_command`` whose status is ``success`` but whose report says ``Exit Code: N`` (N != 0)
failed with that code (source ``output``): Gemini CLI keeps ``success`` for a command that ran.

The files hold no working folder and no branch, only a hash of the project's root: the folder
is read from ``<project id>/.project_root`` or ``~/.gemini/projects.json`` when they exist, else
found by that hash (SHA-256 of the path: the older versions' folder name too) among the
registry's paths and the working folders of the other agents' transcripts. Gemini CLI deletes sessions after 30 days by
default: ingest them from its hooks (``openmemory install gemini``).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from openmemory_local.core.config import gemini_dir
from openmemory_local.ingest.episodes import AgentSaid, CommandRun, Meta, PersonSaid, Titled, ToolCalled, ToolReturned
from openmemory_local.core.jsonio import loads
from openmemory_local.ingest.adapters.base import JsonLinesParser, exit_code_in, is_injected, shell_text, text_of

__all__ = ["GeminiAdapter", "GeminiParser", "gemini_dir"]

NAME = "gemini"
_FINAL = frozenset({"success", "error", "cancelled"})
_MAX_DONE = 4096


def summarise_call(name: str, args) -> dict:
    """``ToolCalled`` fields of a Gemini CLI tool call (shell commands as the neutral ``Bash``)."""
    args = args if isinstance(args, dict) else {}

    def s(*keys: str) -> str:
        for key in keys:
            if isinstance(args.get(key), str):
                return args[key]
        return ""

    if name == "run_shell_command":
        return {"tool": "Bash", "command": s("command"), "description": s("description"), "shell": True}
    if name in ("read_file", "read_many_files"):
        path = s("absolute_path", "file_path", "path")
        return {"tool": "Read", "command": path, "files_read": (path,) if path else ()}
    if name in ("write_file", "replace", "edit"):
        path = s("file_path", "absolute_path", "path")
        return {"tool": "Write" if name == "write_file" else "Edit", "command": path,
                "files_edited": (path,) if path else ()}
    if name in ("glob", "search_file_content", "grep"):
        where = s("path", "dir_path")
        return {"tool": "Grep" if name != "glob" else "Glob", "command": s("pattern") + (f" in {where}" if where else "")}
    if name == "list_directory":
        return {"tool": "LS", "command": s("path", "dir_path")}
    command = s("command", "path", "url", "query", "prompt")
    if not command and args:
        command = json.dumps(args, ensure_ascii=False, sort_keys=True)[:300]
    return {"tool": name, "command": command}


def _result_text(call: dict) -> tuple[str, bool]:
    """(the text a tool call returned, whether it is an error response)."""
    texts, error = [], False
    result = call.get("result")
    if isinstance(result, str):  # a PartListUnion may be a bare string
        return result, False
    for part in result if isinstance(result, list) else [result] if isinstance(result, dict) else []:
        response = part.get("functionResponse", {}).get("response") if isinstance(part, dict) else None
        if isinstance(response, dict):
            if "error" in response:
                error = True
                texts.append(text_of(response["error"]) or json.dumps(response["error"], ensure_ascii=False))
            elif "output" in response:
                texts.append(text_of(response["output"]) if not isinstance(response["output"], str)
                             else response["output"])
    if not texts and isinstance(call.get("resultDisplay"), str):
        texts.append(call["resultDisplay"])
    return "\n".join(texts), error


def _digest(value) -> str:
    return hashlib.blake2b(json.dumps(value, sort_keys=True, default=str).encode(), digest_size=8).hexdigest()


class GeminiParser(JsonLinesParser):
    """Parses one Gemini CLI session (``.jsonl`` line by line, resumably; ``.json`` whole)."""

    KIND = "gemini"

    def __init__(self, path: Path, state: dict | None = None, has_subagent=None):
        state = dict(state) if state else None
        # the working folders other transcripts named (ingest's hint): used once, never stored
        self._known_cwds = state.pop("known_cwds", None) if state else None
        super().__init__(path, state, has_subagent)

    def _initial(self) -> dict:
        folder = self.path.parent
        role, agent = "main", None
        if folder.name != "chats" and folder.parent.name == "chats":  # chats/<parent>/<id>.jsonl
            role, agent = "subagent", self.path.stem
        # said: message id -> digest of the text taken; done: tool call ids taken
        return {"role": role, "agent_id": agent, "said": {}, "done": [], "meta": False, "rewinds": 0}

    # --- whole files (the .json format) -------------------------------------------------

    def feed_document(self, data: bytes) -> list:
        out: list = []
        try:
            record = loads(data)
        except (ValueError, RecursionError):
            self._reject("invalid JSON")
            return out
        if not isinstance(record, dict) or not isinstance(record.get("sessionId"), str):
            self._reject("not a gemini chat")
            return out
        messages = record.get("messages")
        if not isinstance(messages, list):
            version = record.get("version") or record.get("kind") or "unknown"
            self.s["skip"] = f"gemini chat (.json), version {version}: not supported yet"
            return out
        self._metadata(record, 1, out)
        for message in messages:
            mark = len(out)
            try:
                if isinstance(message, dict):
                    self._message(message, 1, out)
                else:
                    self._reject("not a JSON object")
            except (AttributeError, TypeError, KeyError, ValueError):
                del out[mark:]
                self._reject("malformed gemini record")
        return out

    # --- JSON lines -------------------------------------------------------------------

    def _record(self, r: dict, n: int, out: list) -> None:
        if not self.s["meta"]:
            if isinstance(r.get("sessionId"), str) and ("projectHash" in r or "startTime" in r):
                if isinstance(r.get("messages"), list):  # a whole ConversationRecord on one line
                    self._metadata(r, n, out)
                    for message in r["messages"]:
                        if isinstance(message, dict):
                            self._message(message, n, out)
                    return
                self._metadata(r, n, out)
                return
            if self.s["records"] == 0:
                self._reject("no gemini session metadata first")
                return
        self.s["records"] += 1
        if "$set" in r:
            update = r["$set"]
            if isinstance(update, dict) and isinstance(update.get("summary"), str):
                out.append(Titled(n, None, update["summary"]))
            return
        if "$rewindTo" in r:
            self.s["rewinds"] += 1
            return
        if not isinstance(r.get("id"), str) or not isinstance(r.get("type"), str):
            self._reject("not a gemini message record")
            return
        self._message(r, n, out)

    def _metadata(self, r: dict, n: int, out: list) -> None:
        self.s["meta"] = True
        self.s["transcript_like"] = True
        self.s["records"] += 1
        ts = r.get("startTime") if isinstance(r.get("startTime"), str) else None
        sid = r["sessionId"]
        agent = self.s["agent_id"]
        if self.s["role"] == "subagent":
            sid = self.path.parent.name
        out.append(Meta(n, ts, session_id=sid, agent_id=agent, cwd=self._cwd(r.get("projectHash")),
                        version="gemini"))

    def _cwd(self, project_hash) -> str | None:
        """The project's folder: ``<project id>/.project_root``, else ``projects.json``, else the
        folder found when the file was first read (``cwd_hint``: a rebuild from the archive)."""
        found = self._find_cwd(project_hash)
        return found or self.s.get("cwd_hint")

    def _find_cwd(self, project_hash) -> str | None:
        chats = self.path.parent if self.path.parent.name == "chats" else self.path.parent.parent
        project = chats.parent
        try:
            root = (project / ".project_root").read_text("utf-8").strip()
            if root.startswith("/"):
                return root
        except (OSError, UnicodeDecodeError):
            pass
        registry = project.parent.parent / "projects.json"  # <gemini dir>/tmp/<id> -> <gemini dir>
        try:
            data = json.loads(registry.read_text("utf-8"))
        except (OSError, ValueError):
            data = {}
        mapping = data.get("projects", data) if isinstance(data, dict) else {}
        if isinstance(mapping, dict):
            for key, value in mapping.items():
                if value == project.name and isinstance(key, str) and key.startswith("/"):
                    return key
                if key == project.name and isinstance(value, str) and value.startswith("/"):
                    return value
        return self._by_hash(project_hash, mapping if isinstance(mapping, dict) else {})

    def _by_hash(self, project_hash, mapping: dict) -> str | None:
        """Older versions name the project folder by the SHA-256 of its path: matched against the
        registry's paths and the working folders of the other agents' transcripts."""
        if not isinstance(project_hash, str):
            return None
        for candidate in [*mapping, *(self._known_cwds or ())]:
            if isinstance(candidate, str) and hashlib.sha256(candidate.encode()).hexdigest() == project_hash:
                return candidate
        return None

    def _message(self, m: dict, n: int, out: list) -> None:
        mid = m.get("id")
        mtype = m.get("type")
        ts = m.get("timestamp") if isinstance(m.get("timestamp"), str) else None
        text = text_of(m.get("content"))
        said = self.s["said"]
        if text.strip() and mtype in ("user", "gemini") and isinstance(mid, str):
            digest = _digest(text)
            if said.get(mid) != digest:
                first = mid not in said
                said[mid] = digest
                if len(said) > _MAX_DONE:
                    del said[next(iter(said))]
                if first:  # an update of a message already taken adds nothing new
                    if mtype == "user":
                        stripped = text.strip()
                        if stripped.startswith("/"):
                            name, _, args = stripped.partition(" ")
                            out.append(CommandRun(n, ts, name, args.strip()))
                        elif not is_injected(stripped):
                            out.append(PersonSaid(n, ts, stripped, None, None, "message"))
                    else:
                        out.append(AgentSaid(n, ts, text, None, None, mid))
        calls = m.get("toolCalls")
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict):
                self._call(call, n, ts, out)

    def _call(self, call: dict, n: int, ts, out: list) -> None:
        call_id = call.get("id")
        status = call.get("status")
        if not isinstance(call_id, str) or status not in _FINAL:
            return  # not finished yet: taken when it is written again, finished
        done = self.s["done"]
        if call_id in done:
            return
        done.append(call_id)
        del done[:-_MAX_DONE]
        name = call.get("name") if isinstance(call.get("name"), str) else "unknown"
        when = call.get("timestamp") if isinstance(call.get("timestamp"), str) else ts
        out.append(ToolCalled(n, when, call_id, **summarise_call(name, call.get("args"))))
        text, error = _result_text(call)
        if status == "cancelled":
            out.append(ToolReturned(n, when, call_id, "rejected", text, None, exit_source="status"))
            return
        if status == "error" or error:
            code, _source, _ = exit_code_in(text)
            out.append(ToolReturned(n, when, call_id, "error", shell_text(text) if code is not None else text,
                                    code, exit_source="status"))
            return
        code, source, body = exit_code_in(text)
        if code is not None and code != 0:
            out.append(ToolReturned(n, when, call_id, "exit_code", body, code, exit_source=source))
        else:
            out.append(ToolReturned(n, when, call_id, None, "", code, exit_source=source))


class GeminiAdapter:
    """Finds Gemini CLI chat recordings and makes their parsers."""

    name = NAME
    label = "Gemini CLI"
    needs_cwd_hint = True  # its files do not hold the session's folder (see _cwd)

    def default_roots(self, environ=None) -> list[Path]:
        return [gemini_dir(environ) / "tmp"]

    @staticmethod
    def claims(path: Path) -> bool:
        """A ``.jsonl`` under a ``chats`` folder, or a ``session-*.json``/``.jsonl`` anywhere (the
        names Gemini CLI gives its sessions; Claude Code's are session ids, Codex's ``rollout-*``)."""
        name = path.name
        if name.startswith("session-") and (name.endswith(".json") or name.endswith(".jsonl")):
            return True
        return "chats" in path.parts[-3:-1] and name.endswith(".jsonl")

    def discover(self, root: Path) -> list[Path]:
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            found += [Path(dirpath) / name for name in filenames if self.claims(Path(dirpath) / name)]
        return sorted(found)

    def related(self, path: Path) -> list[Path]:
        return []

    @staticmethod
    def subagent_path(path: Path, agent_id: str) -> Path:
        return path.parent / path.stem / f"{agent_id}.jsonl"

    @staticmethod
    def whole_file(path: Path) -> bool:
        return path.name.endswith(".json") or path.name.endswith(".zst")

    def parser(self, path: Path, state: dict | None = None, has_subagent=None) -> GeminiParser:
        return GeminiParser(path, state, has_subagent)
