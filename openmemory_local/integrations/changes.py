"""Planned changes to the user's machine: shown by ``--dry-run``, applied otherwise.

An install or uninstall is first computed as a list of changes, without touching anything;
``--dry-run`` prints them as a diff-like listing, a real run applies them in order. Keeping
the plan as data is what makes the dry run exact: it is the same list that would be applied.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Change",
    "WriteFile",
    "MakeDir",
    "RemoveDir",
    "RunCommand",
    "WriteCrontab",
    "ConcurrentChange",
    "CommandFailed",
    "sha256",
    "missing_dirs",
    "read_bytes",
    "atomic_write",
    "render",
    "apply",
]


class ConcurrentChange(RuntimeError):
    """A file changed between planning and writing (someone else wrote it): plan again."""


class CommandFailed(RuntimeError):
    pass


def sha256(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def missing_dirs(path: Path, stop: Path) -> list[Path]:
    """The directories that creating ``path`` would create, outermost first (none above ``stop``)."""
    missing = []
    while not path.exists() and path != stop and path != path.parent:
        missing.append(path)
        path = path.parent
    return list(reversed(missing))


def read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


@dataclass
class Change:
    label: str = field(default="", kw_only=True)


@dataclass
class WriteFile(Change):
    """Create, modify or (``after`` None) delete one file; ``before`` is what it holds now."""

    path: Path
    before: bytes | None
    after: bytes | None
    mode: int = 0o644
    backup_to: Path | None = None  # copy ``before`` there first
    show_diff: bool = True

    @property
    def verb(self) -> str:
        if self.before is None:
            return "create"
        return "delete" if self.after is None else "modify"


@dataclass
class MakeDir(Change):
    path: Path


@dataclass
class RemoveDir(Change):
    """Remove a directory if it is empty (a directory someone else filled stays)."""

    path: Path


@dataclass
class RunCommand(Change):
    argv: list[str]
    check: bool = True


@dataclass
class WriteCrontab(Change):
    """Replace the user's crontab (``after`` None: remove it), through the ``crontab`` command."""

    before: str | None
    after: str | None
    crontab: str = "crontab"


def _diff(name: str, before: str | None, after: str | None) -> list[str]:
    old = [] if before is None else before.splitlines(keepends=True)
    new = [] if after is None else after.splitlines(keepends=True)
    lines = list(
        difflib.unified_diff(
            old,
            new,
            fromfile="/dev/null" if before is None else f"a/{name}",
            tofile="/dev/null" if after is None else f"b/{name}",
            n=2,
        )
    )
    out = []
    for line in lines:
        if not line.endswith("\n"):
            line += "\n\\ No newline at end of file\n"
        out.append(line)
    return out


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def render(changes: list[Change]) -> str:
    """The changes as a listing: one header line each, file contents as unified diffs."""
    out: list[str] = []
    for change in changes:
        note = f"  ({change.label})" if change.label else ""
        if isinstance(change, WriteFile):
            out.append(f"{change.verb} {change.path}{note}\n")
            if change.backup_to is not None:
                out.append(f"  backup of the current file to {change.backup_to}\n")
            if change.show_diff:
                out.extend(_diff(str(change.path).lstrip("/"), _text(change.before), _text(change.after)))
        elif isinstance(change, MakeDir):
            out.append(f"mkdir {change.path}{note}\n")
        elif isinstance(change, RemoveDir):
            out.append(f"rmdir {change.path} (if empty){note}\n")
        elif isinstance(change, RunCommand):
            out.append(f"run: {shlex.join(change.argv)}{note}\n")
        elif isinstance(change, WriteCrontab):
            verb = "remove" if change.after is None else "install"
            out.append(f"{verb} the user's crontab with `{change.crontab}`{note}\n")
            out.extend(_diff("crontab", change.before, change.after))
        out.append("\n")
    return "".join(out).rstrip("\n") + "\n" if out else ""


def atomic_write(path: Path, data: bytes, mode: int, expect: bytes | None) -> None:
    """Write ``data`` to ``path`` by rename, if the file still holds ``expect`` (None: absent).

    A symlink is followed (a dotfiles manager's link stays a link); the file keeps its
    permission bits when it exists.
    """
    target = Path(os.path.realpath(path))
    current = read_bytes(target)
    if current != expect:
        raise ConcurrentChange(f"{path} changed while it was being edited")
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".openmemory-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if read_bytes(target) != expect:  # last look before the rename
            raise ConcurrentChange(f"{path} changed while it was being edited")
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _apply_one(change: Change, env: dict[str, str] | None) -> None:
    if isinstance(change, WriteFile):
        if change.backup_to is not None and change.before is not None:
            change.backup_to.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(change.backup_to, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(change.before)
        if change.after is None:
            target = Path(os.path.realpath(change.path))
            if read_bytes(target) != change.before:
                raise ConcurrentChange(f"{change.path} changed while it was being edited")
            target.unlink()
        else:
            atomic_write(change.path, change.after, change.mode, change.before)
    elif isinstance(change, MakeDir):
        change.path.mkdir(exist_ok=True)
    elif isinstance(change, RemoveDir):
        try:
            change.path.rmdir()
        except (FileNotFoundError, OSError):
            pass  # not empty (someone else's files are in it) or already gone
    elif isinstance(change, RunCommand):
        result = subprocess.run(change.argv, capture_output=True, text=True, env=env, timeout=60)
        if change.check and result.returncode != 0:
            detail = (result.stderr or result.stdout).strip()
            raise CommandFailed(f"`{shlex.join(change.argv)}` failed ({result.returncode}): {detail}")
    elif isinstance(change, WriteCrontab):
        if change.after is None:
            argv = [change.crontab, "-r"]
            result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
        else:
            argv = [change.crontab, "-"]
            result = subprocess.run(argv, input=change.after, capture_output=True, text=True, env=env, timeout=60)
        if result.returncode != 0:
            raise CommandFailed(f"`{shlex.join(argv)}` failed ({result.returncode}): {result.stderr.strip()}")
    else:  # pragma: no cover - every change type is handled above
        raise TypeError(change)


def apply(changes: list[Change], env: dict[str, str] | None = None) -> None:
    for change in changes:
        _apply_one(change, env)
