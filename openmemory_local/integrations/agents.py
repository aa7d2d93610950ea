"""``openmemory install codex|gemini`` and ``openmemory uninstall codex|gemini``.

What install adds, and where:

Codex CLI (``$CODEX_HOME``, default ``~/.codex``)
    - the MCP server ``openmemory`` as a ``[mcp_servers.openmemory]`` table in ``config.toml``
      (what ``codex mcp add`` writes), inside a managed block of our own comment lines
      (:mod:`.tomlblock`: appended at the end, every byte of the owner's text kept);
    - a ``Stop`` hook in ``hooks.json`` (its payload has ``transcript_path``: the rollout is
      queued for ingest, :mod:`.session_end`) and a ``SessionStart`` hook (:mod:`.session_start`).
Gemini CLI (``$GEMINI_CLI_HOME/.gemini``, default ``~/.gemini``)
    - ``mcpServers.openmemory`` in ``settings.json``;
    - ``hooks.SessionEnd`` (queues the session for ingest: Gemini CLI deletes sessions after 30
      days by default, so they are ingested as they end) and ``hooks.SessionStart``.

The same rules as ``install claude-code`` (:mod:`.claude_code`): JSON edited in place
(:mod:`.jsonedit`), never a file that does not parse; a backup before each change; idempotent;
a manifest in the data folder (``integrations/codex.json``, ``integrations/gemini.json``) from
which uninstall removes exactly what was added, leaving each file byte for byte as before when
nobody else changed it; ``--dry-run`` prints the diff and changes nothing. The nightly
``openmemory run`` is scheduled by ``openmemory install claude-code`` (one schedule for every
agent); without it, run ``openmemory run`` from cron or by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openmemory_local.integrations import jsonedit, tomlblock
from openmemory_local.integrations.changes import MakeDir, RemoveDir, WriteFile, missing_dirs, read_bytes
from openmemory_local.integrations.claude_code import (
    EXIT_CONFLICT,
    EXIT_MALFORMED,
    EXIT_OK,
    HOOK_TIMEOUT,
    SERVER_NAME,
    START_HOOK_TIMEOUT,
    Context,
    InstallError,
    Plan,
    _backup_path,
    _read_json,
    _stamp,
    add_json_item,
    execute,
    json_writes,
    perform,
    remove_json_item,
)

__all__ = ["AGENTS", "AgentContext", "plan_install", "plan_uninstall", "run"]

MANIFEST_FORMAT = 1
AGENTS = ("codex", "gemini")
LABELS = {"codex": "Codex CLI", "gemini": "Gemini CLI"}


@dataclass
class AgentContext(Context):
    """Where everything is for one agent, one user and one data folder."""

    agent: str = "codex"

    @classmethod
    def for_agent(cls, agent: str, home_arg: str | None, env: dict[str, str] | None = None,
                  executable: str | None = None) -> "AgentContext":
        base = Context.from_env(home_arg, env, executable)
        return cls(base.data, base.env, base.executable, base.python, agent)

    @property
    def agent_dir(self) -> Path:
        if self.agent == "codex":
            from openmemory_local.core.config import codex_home

            return codex_home(self.env)
        from openmemory_local.core.config import gemini_dir

        return gemini_dir(self.env)

    @property
    def manifest_path(self) -> Path:
        return self.data / "integrations" / f"{self.agent}.json"

    def mcp_server(self) -> dict[str, Any]:
        return {"command": self.executable, "args": ["mcp", "--home", str(self.data)]}

    def hook(self, command: str, timeout_seconds: int) -> dict[str, Any]:
        # Codex counts a hook's timeout in seconds, Gemini CLI in milliseconds
        timeout = timeout_seconds if self.agent == "codex" else timeout_seconds * 1000
        return {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}

    def json_items(self) -> dict[str, tuple[Path, list[str], str | None, Any, str]]:
        """name -> (file, JSON path, key, value, label) of every JSON addition."""
        end = self.hook(self.hook_command(), HOOK_TIMEOUT)
        start = self.hook(self.session_start_command(), START_HOOK_TIMEOUT)
        if self.agent == "codex":
            hooks = self.agent_dir / "hooks.json"
            return {
                "stop-hook": (hooks, ["hooks", "Stop"], None, end, "Stop hook (ingests the rollout)"),
                "session-start-hook": (hooks, ["hooks", "SessionStart"], None, start, "SessionStart hook"),
            }
        settings = self.agent_dir / "settings.json"
        return {
            "mcp-server": (settings, ["mcpServers"], SERVER_NAME, self.mcp_server(), "MCP server"),
            "session-end-hook": (settings, ["hooks", "SessionEnd"], None, end, "SessionEnd hook (ingests the session)"),
            "session-start-hook": (settings, ["hooks", "SessionStart"], None, start, "SessionStart hook"),
        }

    def toml_block(self) -> tuple[Path, str] | None:
        """(config.toml, our block's body) for Codex's MCP server; None for Gemini CLI."""
        if self.agent != "codex":
            return None
        server = self.mcp_server()
        body = (f"[mcp_servers.{SERVER_NAME}]\n"
                f"command = {tomlblock.string(server['command'])}\n"
                f"args = [{', '.join(tomlblock.string(a) for a in server['args'])}]\n")
        return self.agent_dir / "config.toml", body


def _load_manifest(ctx: AgentContext) -> tuple[dict[str, Any] | None, bytes | None]:
    raw = read_bytes(ctx.manifest_path)
    if raw is None:
        return None, None
    try:
        manifest = json.loads(raw)
        if not isinstance(manifest, dict) or manifest.get("integration") != ctx.agent:
            raise ValueError(f"not a {ctx.agent} install manifest")
    except ValueError as exc:
        raise InstallError(f"{ctx.manifest_path} is damaged ({exc}); move it away to start afresh") from None
    return manifest, raw


def _read_toml(path: Path) -> bytes | None:
    raw = read_bytes(path)
    if raw is None:
        return None
    try:
        tomlblock.check(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InstallError(f"{path}: {exc}. Nothing was changed; fix the file (Codex cannot read it either) and "
                           f"run again.", EXIT_MALFORMED) from None
    return raw


# --- install -----------------------------------------------------------------------------


def plan_install(ctx: AgentContext) -> Plan:
    manifest, manifest_raw = _load_manifest(ctx)
    old = manifest or {}
    items: dict[str, Any] = dict(old.get("items", {}))
    files: dict[str, Any] = dict(old.get("files", {}))
    created_dirs: list[str] = list(old.get("created_dirs", []))
    notes: list[str] = []
    changes: list = []
    texts: dict[Path, tuple[bytes | None, Any]] = {}
    stamp = _stamp()

    for name, (path, json_path, key, value, label) in ctx.json_items().items():
        if path not in texts:
            texts[path] = _read_json(path)
        record = items.get(name)
        add_json_item(texts, items, files, notes, name, path, json_path, key, value, label,
                      record if record and record.get("file") == str(path) else None)

    planned: list[tuple[Path, bytes | None, bytes, str]] = []
    for path, (raw, doc) in texts.items():
        after = doc.text.encode("utf-8")
        if raw == after or (raw is None and doc.text == "{}\n"):
            continue
        planned.append((path, raw, after, "hooks and MCP server" if ctx.agent == "gemini" else "hooks"))

    block = ctx.toml_block()
    if block is not None:
        path, body = block
        raw = _read_toml(path)
        text = raw.decode("utf-8") if raw is not None else ""
        record = items.get("mcp-server")
        if record and record.get("file") == str(path) and tomlblock.find(text, record["block"]) is not None \
                and record["block"]["body"] == body:
            pass  # installed, unchanged
        else:
            if record and record.get("file") == str(path):
                text = tomlblock.remove(text, record["block"], force=True)
            if tomlblock.has_table(text, ["mcp_servers", SERVER_NAME]):
                raise InstallError(f"{path} already has [mcp_servers.{SERVER_NAME}] that openmemory did not add; "
                                   f"remove it (`codex mcp remove {SERVER_NAME}`) and run again", EXIT_CONFLICT)
            new_text, added = tomlblock.add(text, body, owner=f"openmemory install codex (data folder {ctx.data})")
            try:
                tomlblock.check(new_text)
            except ValueError as exc:
                raise InstallError(f"{path}: adding [mcp_servers.{SERVER_NAME}] would not parse ({exc}); "
                                   f"nothing was changed", EXIT_CONFLICT) from None
            items["mcp-server"] = {"file": str(path), "block": added}
            files.setdefault(str(path), {"created": raw is None, "backups": []})
            planned.append((path, raw, new_text.encode("utf-8"), "MCP server"))

    planned_dirs: set[str] = set()
    for path, raw, after, label in planned:
        for directory in missing_dirs(path.parent, ctx.user_home):
            if str(directory) not in planned_dirs:
                planned_dirs.add(str(directory))
                changes.append(MakeDir(directory, label=f"{LABELS[ctx.agent]}'s folder"))
                created_dirs.append(str(directory))
        backup = None
        if raw is not None:
            backup = _backup_path(ctx, stamp, f"{ctx.agent}-", path)
            files[str(path)]["backups"] = [*files[str(path)].get("backups", []), str(backup)]
        changes.append(WriteFile(path, raw, after, 0o600 if path.name == "config.toml" else 0o644, backup_to=backup,
                                 label=label))

    new_manifest = {"format": MANIFEST_FORMAT, "integration": ctx.agent, "data_home": str(ctx.data), "items": items,
                    "files": files, "created_dirs": created_dirs}
    if manifest is not None and not changes:
        new_manifest = manifest
    if ctx.agent == "codex":
        notes.append("Codex asks you to trust new hooks the first time it sees them (`/hooks`); the nightly "
                     "`openmemory run` is scheduled by `openmemory install claude-code` (or run it from cron).")
    else:
        notes.append("The nightly `openmemory run` is scheduled by `openmemory install claude-code` (or run it from "
                     "cron).")
    return Plan("install", changes, new_manifest, manifest_raw, notes, [], "none")


# --- uninstall ---------------------------------------------------------------------------


def plan_uninstall(ctx: AgentContext, force: bool = False) -> Plan:
    manifest, manifest_raw = _load_manifest(ctx)
    if manifest is None:
        raise InstallError(f"Open Memory is not installed for {LABELS[ctx.agent]} with data folder {ctx.data} "
                           f"(no {ctx.manifest_path}); nothing to do", EXIT_OK)
    items: dict[str, Any] = dict(manifest.get("items", {}))
    files: dict[str, Any] = dict(manifest.get("files", {}))
    warnings: list[str] = []
    changes: list = []
    texts: dict[Path, tuple[bytes | None, Any]] = {}
    tomls: dict[Path, tuple[bytes | None, str]] = {}
    left: dict[str, Any] = {}
    stamp = _stamp()

    for name, record in reversed(list(items.items())):
        path = Path(record["file"])
        if "block" in record:
            if path not in tomls:
                raw = read_bytes(path)
                tomls[path] = (raw, raw.decode("utf-8", "surrogateescape") if raw is not None else "")
            raw, text = tomls[path]
            if raw is None:
                continue
            if tomlblock.find(text, record["block"]) is None and not force:
                if tomlblock.has_markers(text, record["block"]):
                    warnings.append(f"{path}: the openmemory block was changed since install; left in place "
                                    f"(--force removes it)")
                    left[name] = record
                continue
            tomls[path] = (raw, tomlblock.remove(text, record["block"], force=force))
            continue
        remove_json_item(texts, name, record, force, warnings, left)

    for path, raw, after in json_writes(texts, files):
        changes.append(WriteFile(path, raw, after, backup_to=_backup_path(ctx, stamp, f"uninstall-{ctx.agent}-",
                                                                          path), label="hooks"))
    for path, (raw, text) in tomls.items():
        if raw is None:
            continue
        after = text.encode("utf-8", "surrogateescape")
        if files.get(str(path), {}).get("created") and not text:
            after = None
        if after != raw:
            changes.append(WriteFile(path, raw, after, backup_to=_backup_path(ctx, stamp, f"uninstall-{ctx.agent}-",
                                                                              path), label="MCP server"))
    for directory in sorted(manifest.get("created_dirs", []), key=lambda d: len(Path(d).parts), reverse=True):
        if Path(directory).is_dir():
            changes.append(RemoveDir(Path(directory)))
    remaining = dict(manifest, items={n: left[n] for n in items if n in left}) if left else None
    return Plan("uninstall", changes, remaining, manifest_raw, [], warnings, "none", conflict=bool(left))


# --- running ------------------------------------------------------------------------------


def run(agent: str, action: str, home: str | None, *, dry_run: bool, as_json: bool, force: bool = False,
        env: dict[str, str] | None = None, executable: str | None = None, out=None, err=None) -> int:
    return perform(action, agent, LABELS[agent], lambda: AgentContext.for_agent(agent, home, env, executable),
                   lambda ctx: plan_install(ctx) if action == "install" else plan_uninstall(ctx, force),
                   execute, dry_run=dry_run, as_json=as_json, out=out, err=err,
                   report=lambda plan: {"agent": agent})


