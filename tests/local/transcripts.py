"""Builders for small synthetic Claude Code transcripts (the shapes seen in the real ones)."""

from __future__ import annotations

import json
from itertools import count
from pathlib import Path

SESSION = "11111111-2222-3333-4444-555555555555"
CWD = "/home/me/app"


class T:
    """A transcript being written: each method appends one record and returns its uuid."""

    def __init__(self, session: str = SESSION, cwd: str = CWD, *, agent: str | None = None,
                 start: str = "2026-02-10T10:00:00"):
        self.session = session
        self.cwd = cwd
        self.agent = agent
        self.records: list[dict] = []
        self._n = count(1)
        self._msg = count(1)
        self._last: str | None = None
        self._t = count(0)
        self._start = start

    def _ts(self) -> str:
        i = next(self._t)
        return f"{self._start}.{i % 1000:03d}Z" if i < 1000 else f"{self._start}.999Z"

    def _base(self, type_: str, parent: str | None = "last", **extra) -> dict:
        uid = f"u{next(self._n):04d}-{self.session[:4]}"
        rec = {
            "parentUuid": self._last if parent == "last" else parent,
            "isSidechain": self.agent is not None,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session,
            "version": "2.1.39",
            "gitBranch": "main",
            "type": type_,
            "uuid": uid,
            "timestamp": self._ts(),
        }
        if self.agent:
            rec["agentId"] = self.agent
        rec.update(extra)
        self.records.append(rec)
        self._last = uid
        return rec

    def person(self, text: str, parent: str | None = "last", **extra) -> str:
        return self._base("user", parent, message={"role": "user", "content": text}, **extra)["uuid"]

    def user_blocks(self, blocks: list, parent: str | None = "last", **extra) -> str:
        return self._base("user", parent, message={"role": "user", "content": blocks}, **extra)["uuid"]

    def says(self, text: str, msg_id: str | None = None, parent: str | None = "last") -> str:
        msg_id = msg_id or f"msg_{next(self._msg)}"
        return self._base("assistant", parent, message={
            "id": msg_id, "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "text", "text": text}]})["uuid"]

    def call(self, tool: str, args: dict, call_id: str, msg_id: str | None = None) -> str:
        msg_id = msg_id or f"msg_{next(self._msg)}"
        return self._base("assistant", message={
            "id": msg_id, "type": "message", "role": "assistant", "model": "m",
            "content": [{"type": "tool_use", "id": call_id, "name": tool, "input": args}]})["uuid"]

    def result(self, call_id: str, content, is_error: bool | None = None, tur=None) -> str:
        block = {"type": "tool_result", "tool_use_id": call_id, "content": content}
        if is_error is not None:
            block["is_error"] = is_error
        extra = {"toolUseResult": tur} if tur is not None else {}
        return self._base("user", message={"role": "user", "content": [block]}, **extra)["uuid"]

    def bash(self, command: str, call_id: str, output: str = "ok", exit_code: int | None = None,
             description: str = "") -> None:
        args = {"command": command}
        if description:
            args["description"] = description
        self.call("Bash", args, call_id)
        if exit_code:
            self.result(call_id, f"Exit code {exit_code}\n{output}", True, f"Error: Exit code {exit_code}")
        else:
            self.result(call_id, output, False)

    def raw(self, record: dict) -> None:
        self.records.append(record)

    def progress(self, data: dict) -> str:
        return self._base("progress", data=data, toolUseID="t", parentToolUseID="t")["uuid"]

    def system(self, subtype: str, **extra) -> str:
        return self._base("system", subtype=subtype, level="info", **extra)["uuid"]

    def lines(self) -> list[bytes]:
        return [json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in self.records]

    def write(self, path: Path, *, append_from: int = 0) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab" if append_from else "wb") as f:
            for line in self.lines()[append_from:]:
                f.write(line)
        return path
