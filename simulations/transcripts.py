"""Claude Code transcripts for tests, benchmarks and simulations: written, or replicated.

* :class:`T` writes a transcript record by record, in the shapes the real ones have (a person's
  message, the agent's text, a tool call and its result, ``Exit code N`` failures, progress and
  system records). The tests build their small transcripts with it; the simulated agents of
  ``simulations/agents.py`` write every session of their simulated days with it. Timestamps are
  either a fixed second with a millisecond counter (``start="2026-02-10T10:00:00"``, the
  tests' default) or a real clock (``clock=datetime``) that :meth:`T.advance` moves on.
* :func:`replicate` makes many distinct sessions from a few real ones: each copy gets its own
  session ids (the first 8 hex digits of every session UUID replaced) and its own tool-use ids,
  in a project folder of its own, so the copies ingest as distinct sessions, not as rewrites of
  the same ones. Used by ``benchmarks/ingest.py`` (>= 200 MB of input) and by the tests that
  need an ingest long enough to interrupt.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from itertools import count
from pathlib import Path

__all__ = ["T", "SESSION", "CWD", "replicate"]

UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def replicate(source: Path, target: Path, megabytes: float) -> tuple[int, int]:
    """Write copies of ``source`` under ``target`` until at least ``megabytes``; return (bytes, copies)."""
    files = sorted(p for p in source.rglob("*.jsonl"))
    session_ids = sorted({p.name[:36].encode() for p in source.glob("*.jsonl") if UUID.fullmatch(p.name[:36].encode())}
                         | {p.parent.parent.name.encode() for p in source.glob("*/subagents/*.jsonl")})
    contents = {p: p.read_bytes() for p in files}
    for data in contents.values():
        for line in data.splitlines()[:3]:
            try:
                sid = json.loads(line).get("sessionId")
            except ValueError:
                continue
            if sid:
                session_ids.append(sid.encode())
    session_ids = sorted(set(session_ids))
    total, copies = 0, 0
    while total < megabytes * 1_000_000:
        prefix = b"%08x" % (0xC0000000 + copies)
        for path, data in contents.items():
            for sid in session_ids:
                data = data.replace(sid, prefix + sid[8:])
            data = data.replace(b'"toolu_', b'"toolu_c%04d' % copies)
            rel = str(path.relative_to(source))
            for sid in session_ids:
                rel = rel.replace(sid.decode(), (prefix + sid[8:]).decode())
            out = target / f"-home-user-project-{copies:03d}" / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            total += len(data)
        copies += 1
    return total, copies


SESSION = "11111111-2222-3333-4444-555555555555"
CWD = "/home/me/app"


class T:
    """A transcript being written: each method appends one record and returns its uuid."""

    def __init__(self, session: str = SESSION, cwd: str = CWD, *, agent: str | None = None,
                 start: str = "2026-02-10T10:00:00", clock: datetime | None = None, branch: str = "main",
                 version: str = "2.1.39"):
        self.session = session
        self.cwd = cwd
        self.agent = agent
        self.branch = branch
        self.version = version
        self.records: list[dict] = []
        self._n = count(1)
        self._msg = count(1)
        self._last: str | None = None
        self._t = count(0)
        self._start = start
        self.clock = clock.astimezone(timezone.utc) if clock is not None else None

    def advance(self, seconds: float) -> datetime:
        """Move the clock on (only with ``clock=``); returns the new time."""
        assert self.clock is not None, "advance() needs a transcript made with clock="
        self.clock += timedelta(seconds=seconds)
        return self.clock

    def _ts(self) -> str:
        if self.clock is not None:
            self.clock += timedelta(milliseconds=7)  # records of one step are milliseconds apart
            return self.clock.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.clock.microsecond // 1000:03d}Z"
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
            "version": self.version,
            "gitBranch": self.branch,
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
