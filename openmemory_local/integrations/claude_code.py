"""``openmemory install claude-code`` and ``openmemory uninstall claude-code``.

What install adds, and where (the same places ``claude mcp add --scope user`` and the
``/hooks`` menu write to):

- the MCP server ``openmemory`` under ``mcpServers`` at the top level of ``~/.claude.json``
  (user scope: every project), as ``{"type": "stdio", "command": ..., "args": [...], "env": {}}``;
- a ``SessionEnd`` hook in ``~/.claude/settings.json`` (``hooks.SessionEnd[]``) that queues the
  ended session's transcript for ingest (:mod:`.session_end`);
- a ``SessionStart`` hook there too (``hooks.SessionStart[]``) that takes revoked received
  lessons out of the memory folders before the session reads them (:mod:`.session_start`);
- a nightly ``openmemory run``: a systemd user timer, else a cron entry, else instructions
  (:mod:`.schedule`).

With ``$CLAUDE_CONFIG_DIR`` set, Claude Code keeps both files there (``.claude.json`` and
``settings.json``), and so do we.

Rules: the user's JSON is edited in place (:mod:`.jsonedit`: key order, indentation and
every byte outside our item kept), never rewritten, never overwritten when it does not
parse; a backup of each file is copied to the data folder before it is changed; install is
idempotent (a second run changes nothing, not even a timestamp); everything added is recorded
in a manifest in the data folder (``integrations/claude-code.json``) and uninstall removes
exactly that, leaving each file as it was before install (byte for byte when nobody else
changed it; with the other changes kept when someone did). ``--dry-run`` prints the plan.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openmemory_local.core.config import resolve_home
from openmemory_local.integrations import jsonedit
from openmemory_local.integrations.changes import (
    Change,
    CommandFailed,
    ConcurrentChange,
    MakeDir,
    RemoveDir,
    WriteFile,
    apply,
    missing_dirs,
    read_bytes,
    render,
)
from openmemory_local.integrations.schedule import SCHEDULE_KINDS, Scheduler

__all__ = [
    "EXIT_OK",
    "EXIT_ERROR",
    "EXIT_MALFORMED",
    "EXIT_CONFLICT",
    "InstallError",
    "Context",
    "Plan",
    "plan_install",
    "plan_uninstall",
    "execute",
]

EXIT_OK = 0
EXIT_ERROR = 1  # a step failed (a command, a file we could not write)
EXIT_MALFORMED = 6  # a settings file does not parse: nothing was changed
EXIT_CONFLICT = 7  # something in the way that we did not put there, or changed since: see the message

SERVER_NAME = "openmemory"
HOOK_MODULE = "openmemory_local.integrations.session_end"
HOOK_TIMEOUT = 15  # seconds Claude Code may wait for the hook; it returns in a fraction of one
START_HOOK_MODULE = "openmemory_local.integrations.session_start"
START_HOOK_TIMEOUT = 15  # a fraction of a second when nothing changed; the node is given 2 s at most
MANIFEST_FORMAT = 1

MCP_ITEM = "mcp-server"
HOOK_ITEM = "session-end-hook"
START_HOOK_ITEM = "session-start-hook"


class InstallError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


def find_executable() -> str:
    """The absolute path of the ``openmemory`` command that is running (or installed beside it)."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "openmemory" and argv0.is_file():
        return str(argv0.absolute())
    beside = Path(sys.executable).parent / "openmemory"
    if beside.is_file():
        return str(beside)
    found = shutil.which("openmemory")
    if found:
        return str(Path(found).absolute())
    raise InstallError("cannot find the `openmemory` executable (is the package installed?)")


@dataclass
class Context:
    """Where everything is, for one user and one data folder."""

    data: Path
    env: dict[str, str]
    executable: str
    python: str = sys.executable

    @classmethod
    def from_env(cls, home_arg: str | None, env: dict[str, str] | None = None, executable: str | None = None):
        env = dict(os.environ if env is None else env)
        data = resolve_home(home_arg, env)
        return cls(Path(os.path.abspath(data)), env, executable or find_executable())

    @property
    def user_home(self) -> Path:
        return Path(self.env.get("HOME") or Path.home())

    @property
    def claude_dir(self) -> Path:
        configured = self.env.get("CLAUDE_CONFIG_DIR")
        return Path(configured).expanduser() if configured else self.user_home / ".claude"

    @property
    def claude_json(self) -> Path:
        configured = self.env.get("CLAUDE_CONFIG_DIR")
        return self.claude_dir / ".claude.json" if configured else self.user_home / ".claude.json"

    @property
    def settings_json(self) -> Path:
        return self.claude_dir / "settings.json"

    @property
    def manifest_path(self) -> Path:
        return self.data / "integrations" / "claude-code.json"

    @property
    def backup_dir(self) -> Path:
        return self.data / "integrations" / "backups"

    def mcp_server(self) -> dict[str, Any]:
        """What ``claude mcp add --scope user openmemory -- EXE mcp --home DATA`` writes."""
        return {"type": "stdio", "command": self.executable, "args": ["mcp", "--home", str(self.data)], "env": {}}

    def hook_command(self) -> str:
        argv = [self.python, "-P", "-m", HOOK_MODULE, "--home", str(self.data), "--openmemory", self.executable]
        return shlex.join(argv)

    def session_end_hook(self) -> dict[str, Any]:
        return {"hooks": [{"type": "command", "command": self.hook_command(), "timeout": HOOK_TIMEOUT}]}

    def session_start_command(self) -> str:
        return shlex.join([self.python, "-P", "-m", START_HOOK_MODULE, "--home", str(self.data)])

    def session_start_hook(self) -> dict[str, Any]:
        return {"hooks": [{"type": "command", "command": self.session_start_command(), "timeout": START_HOOK_TIMEOUT}]}

    def scheduler(self, at: str = "03:17") -> Scheduler:
        return Scheduler(
            command=[self.executable, "run", "--home", str(self.data)],
            log_file=self.data / "logs" / "nightly.log",
            env=self.env,
            home=self.user_home,
            at=at,
        )


@dataclass
class Plan:
    """Changes to apply, the manifest after them, and what to tell the user."""

    action: str
    changes: list[Change]
    manifest: dict[str, Any] | None  # None: delete the manifest
    manifest_before: bytes | None
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    schedule: str = "none"
    conflict: bool = False

    @property
    def manifest_after(self) -> bytes | None:
        if self.manifest is None:
            return None
        return (json.dumps(self.manifest, indent=2, ensure_ascii=False) + "\n").encode()

    def all_changes(self, ctx: Context) -> list[Change]:
        """The user-visible changes plus our own manifest (last on install, last on uninstall)."""
        if self.manifest_after == self.manifest_before:
            return list(self.changes)
        mine = WriteFile(
            ctx.manifest_path,
            self.manifest_before,
            self.manifest_after,
            0o644,
            label="openmemory's record of these changes, for uninstall",
            show_diff=False,
        )
        return [*self.changes, mine]


# --- reading the user's files ------------------------------------------------------------


def _load_manifest(ctx: Context) -> tuple[dict[str, Any] | None, bytes | None]:
    raw = read_bytes(ctx.manifest_path)
    if raw is None:
        return None, None
    try:
        manifest = json.loads(raw)
        if not isinstance(manifest, dict) or manifest.get("integration") != "claude-code":
            raise ValueError("not a claude-code install manifest")
    except ValueError as exc:
        raise InstallError(f"{ctx.manifest_path} is damaged ({exc}); move it away to start afresh") from None
    return manifest, raw


_EMPTY = "{}\n"  # what a file we create starts from (and goes back to)


def _read_json(path: Path) -> tuple[bytes | None, jsonedit.Document]:
    raw = read_bytes(path)
    if raw is None:
        return None, jsonedit.parse(_EMPTY)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InstallError(f"{path}: not UTF-8 text ({exc}); nothing was changed", EXIT_MALFORMED) from None
    try:
        return raw, jsonedit.parse(text)
    except jsonedit.MalformedJSON as exc:
        raise InstallError(
            f"{path}: {exc}. Nothing was changed; fix the file (Claude Code cannot read it either) and run again.",
            EXIT_MALFORMED,
        ) from None


def _stamp() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _backup_path(ctx: Context, stamp: str, what: str, path: Path) -> Path:
    """A backup file name in the data folder that no earlier backup uses."""
    base = f"{stamp}-{what}{path.name.lstrip('.')}"
    candidate = ctx.backup_dir / base
    counter = 1
    while candidate.exists():
        candidate = ctx.backup_dir / f"{base}.{counter}"
        counter += 1
    return candidate


# --- install -----------------------------------------------------------------------------


def _desired(ctx: Context) -> dict[str, tuple[Path, list[str], str | None, Any, str]]:
    return {
        MCP_ITEM: (ctx.claude_json, ["mcpServers"], SERVER_NAME, ctx.mcp_server(), "MCP server, user scope"),
        HOOK_ITEM: (ctx.settings_json, ["hooks", "SessionEnd"], None, ctx.session_end_hook(), "SessionEnd hook"),
        START_HOOK_ITEM: (ctx.settings_json, ["hooks", "SessionStart"], None, ctx.session_start_hook(),
                          "SessionStart hook"),
    }


def add_json_item(texts: dict, items: dict, files: dict, notes: list[str], name: str, path: Path, json_path,
                  key, value, label: str, record: dict | None, remedy: str = "") -> None:
    """Put one of our JSON items (an MCP server, a hook) into its file's text in ``texts``:
    nothing if ours is there unchanged; an older value of ours (another data folder, a moved
    venv) taken out first; an equal item someone else added is left (a note); a different one
    under our name is a conflict. ``record``: the manifest's record of it in this file, if any."""
    raw, doc = texts[path]
    ours = jsonedit.Addition.from_json(record["addition"]) if record else None
    if ours is not None and ours.value == value and jsonedit.find_item(doc, ours)[0] == "present":
        return  # installed, unchanged
    if ours is not None:
        text, _ = jsonedit.remove_item(doc, ours, force=True)
        doc = jsonedit.parse(text)
    wanted = jsonedit.Addition(json_path, key, value)
    status, current = jsonedit.find_item(doc, wanted)
    if status == "present":
        notes.append(f"{label}: already in {path} (not added by openmemory; uninstall will leave it)")
        texts[path] = (raw, doc)
        return
    if status == "modified":
        raise InstallError(f"{path} already has an MCP server named {SERVER_NAME!r} that openmemory did not add "
                           f"({json.dumps(current)}); remove it{remedy} and run again", EXIT_CONFLICT)
    try:
        text, addition = jsonedit.add_item(doc, json_path, key, value)
    except jsonedit.MalformedJSON as exc:
        raise InstallError(f"{path}: {exc}", EXIT_MALFORMED) from None
    texts[path] = (raw, jsonedit.parse(text))
    items[name] = {"file": str(path), "addition": addition.to_json()}
    files.setdefault(str(path), {"created": raw is None, "backups": []})


def plan_install(ctx: Context, schedule: str = "auto", at: str = "03:17") -> Plan:
    manifest, manifest_raw = _load_manifest(ctx)
    old = manifest or {}
    items: dict[str, Any] = dict(old.get("items", {}))
    files: dict[str, Any] = dict(old.get("files", {}))
    created_dirs: list[str] = list(old.get("created_dirs", []))
    notes: list[str] = []
    changes: list[Change] = []
    texts: dict[Path, tuple[bytes | None, jsonedit.Document]] = {}
    stamp = _stamp()

    for name, (path, json_path, key, value, label) in _desired(ctx).items():
        if path not in texts:
            texts[path] = _read_json(path)
        record = items.get(name)
        if record and record.get("file") != str(path):
            # installed into another file before (``$CLAUDE_CONFIG_DIR`` changed since): move it
            moved_from = Path(record["file"])
            if moved_from not in texts:
                texts[moved_from] = _read_json(moved_from)
            old_raw, old_doc = texts[moved_from]
            if old_raw is not None:
                text, _ = jsonedit.remove_item(old_doc, jsonedit.Addition.from_json(record["addition"]), force=True)
                texts[moved_from] = (old_raw, jsonedit.parse(text))
            record = None
        add_json_item(texts, items, files, notes, name, path, json_path, key, value, label, record,
                      remedy=f" (`claude mcp remove {SERVER_NAME} -s user`)")

    planned_dirs: set[str] = set()
    for path, (raw, doc) in texts.items():
        after = doc.text.encode("utf-8")
        if raw == after or (raw is None and doc.text == _EMPTY):
            continue
        for directory in missing_dirs(path.parent, ctx.user_home):
            if str(directory) not in planned_dirs:
                planned_dirs.add(str(directory))
                changes.append(MakeDir(directory, label="Claude Code's folder"))
                created_dirs.append(str(directory))
        backup = None
        if raw is not None:
            backup = _backup_path(ctx, stamp, "", path)
            files[str(path)]["backups"] = [*files[str(path)].get("backups", []), str(backup)]
        mode = 0o600 if path == ctx.claude_json else 0o644
        label = "MCP server, user scope" if path.name == ".claude.json" else "SessionEnd and SessionStart hooks"
        changes.append(WriteFile(path, raw, after, mode, backup_to=backup, label=label))

    scheduler = ctx.scheduler(at)
    try:
        schedule_changes, schedule_record, schedule_notes = scheduler.plan_install(schedule, old.get("schedule"))
    except (OSError, RuntimeError) as exc:
        raise InstallError(f"cannot schedule the nightly run: {exc}") from None
    changes += schedule_changes
    notes += schedule_notes

    new_manifest = {
        "format": MANIFEST_FORMAT,
        "integration": "claude-code",
        "data_home": str(ctx.data),
        "items": items,
        "files": files,
        "created_dirs": created_dirs,
        "schedule": schedule_record,
    }
    if manifest is not None and not changes:
        new_manifest = manifest  # nothing to do: leave the manifest byte for byte
    return Plan("install", changes, new_manifest, manifest_raw, notes, [], schedule_record.get("kind", "none"))


# --- uninstall ---------------------------------------------------------------------------


def remove_json_item(texts: dict, name: str, record: dict, force: bool, warnings: list[str], left: dict) -> None:
    """Take one installed JSON item (a manifest record) out of its file's text in ``texts``
    (read on first use); an item changed since install is left (in ``left``), with a warning."""
    path = Path(record["file"])
    if path not in texts:
        texts[path] = _read_json(path)
    raw, doc = texts[path]
    if raw is None:
        return  # the file is gone, and our item with it
    addition = jsonedit.Addition.from_json(record["addition"])
    text, status = jsonedit.remove_item(doc, addition, force=force)
    if status == "modified":
        where = ".".join(addition.path + ([addition.key] if addition.key else []))
        warnings.append(f"{path}: `{where}` was changed since install; left in place (--force removes it)")
        left[name] = record
        return
    texts[path] = (raw, jsonedit.parse(text))


def json_writes(texts: dict, files: dict):
    """(path, bytes before, bytes after or None to remove it) for each JSON file ``texts`` changed:
    a file the install created that holds nothing else is removed."""
    for path, (raw, doc) in texts.items():
        if raw is None:
            continue
        after: bytes | None = doc.text.encode("utf-8")
        if files.get(str(path), {}).get("created") and json.loads(doc.body) == {}:
            after = None
        if after != raw:
            yield path, raw, after


def plan_uninstall(ctx: Context, force: bool = False) -> Plan:
    manifest, manifest_raw = _load_manifest(ctx)
    if manifest is None:
        raise InstallError(
            f"Open Memory is not installed for Claude Code with data folder {ctx.data} "
            f"(no {ctx.manifest_path}); nothing to do",
            EXIT_OK,
        )
    items: dict[str, Any] = dict(manifest.get("items", {}))
    files: dict[str, Any] = dict(manifest.get("files", {}))
    warnings: list[str] = []
    changes: list[Change] = []
    texts: dict[Path, tuple[bytes | None, jsonedit.Document]] = {}
    left: dict[str, Any] = {}
    stamp = _stamp()

    # last added, first removed: an item added into a container an earlier one created must go
    # before it, so that the container is empty again and goes too
    for name, record in reversed(list(items.items())):
        remove_json_item(texts, name, record, force, warnings, left)

    for path, raw, after in json_writes(texts, files):
        label = "MCP server, user scope" if path.name == ".claude.json" else "SessionEnd and SessionStart hooks"
        backup = _backup_path(ctx, stamp, "uninstall-", path)
        changes.append(WriteFile(path, raw, after, backup_to=backup, label=label))

    for directory in sorted(manifest.get("created_dirs", []), key=lambda d: len(Path(d).parts), reverse=True):
        if Path(directory).is_dir():
            changes.append(RemoveDir(Path(directory)))

    scheduler = ctx.scheduler()
    try:
        schedule_changes, schedule_warnings = scheduler.plan_uninstall(manifest.get("schedule"))
    except (OSError, RuntimeError) as exc:
        raise InstallError(f"cannot remove the nightly run: {exc}") from None
    changes += schedule_changes
    warnings += schedule_warnings

    remaining = None
    left = {name: left[name] for name in items if name in left}
    if left:
        remaining = dict(manifest, items=left, schedule={"kind": "none"})
    return Plan(
        "uninstall",
        changes,
        remaining,
        manifest_raw,
        [],
        warnings,
        (manifest.get("schedule") or {}).get("kind", "none"),
        conflict=bool(left),
    )


# --- running a plan ----------------------------------------------------------------------


def execute(ctx: Context, plan: Plan) -> None:
    """Apply the plan: the manifest is written first on install (so a crash leaves a record of
    what may have been added) and last on uninstall (so a crash leaves a record of what may
    remain)."""
    everything = plan.all_changes(ctx)
    own = [c for c in everything if isinstance(c, WriteFile) and c.path == ctx.manifest_path]
    rest = [c for c in everything if c not in own]
    if own and own[0].after is not None:
        ctx.manifest_path.parent.mkdir(parents=True, exist_ok=True)
    ordered = own + rest if plan.action == "install" else rest + own
    apply(ordered, env=ctx.env)
    if plan.action == "uninstall" and plan.manifest is None:
        for directory in (ctx.manifest_path.parent,):
            try:
                directory.rmdir()  # only if empty: the backups stay
            except OSError:
                pass


def _describe(change: Change) -> dict[str, Any]:
    data: dict[str, Any] = {"type": type(change).__name__, "label": change.label}
    for name in ("path", "argv", "verb"):
        if hasattr(change, name):
            value = getattr(change, name)
            data[name] = str(value) if isinstance(value, Path) else value
    return data


def run(action: str, home: str | None, *, dry_run: bool, as_json: bool, schedule: str = "auto",
        at: str = "03:17", force: bool = False, env: dict[str, str] | None = None, out=None, err=None) -> int:
    return perform(action, "claude-code", "Claude Code", lambda: Context.from_env(home, env),
                   lambda ctx: plan_install(ctx, schedule, at) if action == "install" else plan_uninstall(ctx, force),
                   execute, dry_run=dry_run, as_json=as_json, out=out, err=err,
                   report=lambda plan: {"schedule": plan.schedule}, notes_always=True)


def perform(action: str, name: str, label: str, context, make_plan, execute_plan, *, dry_run: bool, as_json: bool,
            out=None, err=None, report=None, notes_always: bool = False) -> int:
    """``openmemory install|uninstall NAME`` for any agent: make the context, plan, execute the
    plan (planned again, up to three times, if a settings file changed while it was edited),
    and say what was done (``--json``: one report; ``--dry-run``: the diff, nothing changed).
    ``report(plan)``: more fields of the JSON report; ``notes_always``: the plan's notes after a
    dry run or an uninstall too."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        ctx = context()
        for attempt in range(3):
            plan = make_plan(ctx)
            changes = plan.all_changes(ctx)
            if dry_run or not changes:
                break
            try:
                execute_plan(ctx, plan)
                break
            except ConcurrentChange:
                if attempt == 2:
                    raise InstallError("the settings files kept changing while being edited; try again")
    except InstallError as exc:
        if as_json:
            json.dump({"action": action, "ok": exc.code == EXIT_OK, "error": str(exc), "exit_code": exc.code}, out)
            out.write("\n")
        else:
            print(("" if exc.code == EXIT_OK else "error: ") + str(exc), file=err if exc.code else out)
        return exc.code
    except (CommandFailed, OSError) as exc:
        message = f"{action} {name} failed: {exc}"
        if as_json:
            json.dump({"action": action, "ok": False, "error": message, "exit_code": EXIT_ERROR}, out)
            out.write("\n")
        else:
            print("error: " + message, file=err)
        return EXIT_ERROR

    code = EXIT_CONFLICT if plan.conflict else EXIT_OK
    if as_json:
        data = {"action": action, "ok": code == EXIT_OK, "dry_run": dry_run, "changed": bool(changes) and not dry_run,
                **(report(plan) if report else {}), "changes": [_describe(c) for c in changes],
                "notes": plan.notes, "warnings": plan.warnings, "exit_code": code}
        if dry_run:
            data["diff"] = render(changes)
        json.dump(data, out, indent=2)
        out.write("\n")
        return code
    if not changes:
        done = "already installed; nothing to change" if action == "install" else "nothing to remove"
        print(f"Open Memory for {label}: {done}.", file=out)
    elif dry_run:
        print(f"openmemory {action} {name} --dry-run: these changes would be made (nothing was changed):\n", file=out)
        out.write(render(changes))
    else:
        print(f"Open Memory for {label}: {action}ed.", file=out)
        for change in changes:
            print("  " + render([change]).splitlines()[0], file=out)
        if action == "install":
            print(f"  record of these changes: {ctx.manifest_path} (`openmemory uninstall {name}` undoes them)",
                  file=out)
    if notes_always or (action == "install" and not dry_run):
        for note in plan.notes:
            print("\n" + note.rstrip("\n"), file=out)
    for warning in plan.warnings:
        print("warning: " + warning, file=err)
    return code


# --- command line --------------------------------------------------------------------------


def _cmd_install(args: argparse.Namespace) -> int:
    return run("install", getattr(args, "home", None), dry_run=args.dry_run, as_json=getattr(args, "json", False),
               schedule=args.schedule, at=args.at)


def _cmd_uninstall(args: argparse.Namespace) -> int:
    return run("uninstall", getattr(args, "home", None), dry_run=args.dry_run, as_json=getattr(args, "json", False),
               force=args.force)


def _cmd_hook(args: argparse.Namespace) -> int:
    if args.event == "session-start":
        from openmemory_local.integrations import session_start

        argv = ["--home", args.home] if getattr(args, "home", None) else []
        if getattr(args, "node_home", None):
            argv += ["--node-home", args.node_home]
        return session_start.hook(argv)
    from openmemory_local.integrations import session_end

    argv = ["--openmemory", find_executable()]
    if getattr(args, "home", None):
        argv += ["--home", args.home]
    return session_end.hook(argv)
