"""Schedule ``openmemory run`` nightly: a systemd user timer, else a cron entry, else instructions.

systemd is used when a user manager answers (``systemctl --user show-environment`` succeeds:
the binary alone proves nothing, containers and WSL often have it without a running user
instance). The timer is ``Persistent=true``, so a night the machine was off is caught up at
the next login. Without systemd, ``crontab`` is used when it exists; without either, the
installer prints what to add by hand and changes nothing.

Every function here plans (returns :mod:`changes`) and records in the install manifest what
it added, so that uninstalling removes exactly that.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openmemory_local.integrations.changes import Change, MakeDir, RemoveDir, RunCommand, WriteCrontab, WriteFile, missing_dirs, read_bytes, sha256

__all__ = ["Scheduler", "SCHEDULE_KINDS", "detect", "UNIT", "TIMER"]

#: How ``openmemory install`` schedules the nightly run (the parser in :mod:`.register` offers these).
SCHEDULE_KINDS = ("auto", "systemd", "cron", "none")
UNIT = "openmemory-run.service"
TIMER = "openmemory-run.timer"
_MARK = "# Open Memory: nightly ingest, sleep, render and report (added by `openmemory install claude-code`)"


def _which(name: str, env: dict[str, str]) -> str | None:
    return shutil.which(name, path=env.get("PATH", os.defpath))


def detect(env: dict[str, str]) -> str:
    """``systemd`` if a user manager answers, else ``cron`` if ``crontab`` exists, else ``none``."""
    systemctl = _which("systemctl", env)
    if systemctl:
        try:
            result = subprocess.run(
                [systemctl, "--user", "show-environment"], capture_output=True, env=env, timeout=5
            )
            if result.returncode == 0:
                return "systemd"
        except (OSError, subprocess.TimeoutExpired):
            pass
    if _which("crontab", env):
        return "cron"
    return "none"


def _systemd_quote(arg: str) -> str:
    """Quote one ExecStart argument for systemd (which also expands ``%`` specifiers)."""
    arg = arg.replace("%", "%%")
    if arg and not re.search(r"[\s\"'\\;$]", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _cron_escape(command: str) -> str:
    return command.replace("%", "\\%")  # an unescaped % ends a cron command


@dataclass
class Scheduler:
    """The nightly job for one data folder, and how to add it or take it away."""

    command: list[str]  # e.g. ["/venv/bin/openmemory", "run", "--home", "/data"]
    log_file: Path  # where cron's output goes (systemd has the journal)
    env: dict[str, str]
    home: Path
    at: str = "03:17"

    # --- systemd ---------------------------------------------------------------------

    @property
    def unit_dir(self) -> Path:
        config = self.env.get("XDG_CONFIG_HOME") or str(self.home / ".config")
        return Path(config) / "systemd" / "user"

    def _systemctl(self) -> str:
        return _which("systemctl", self.env) or "systemctl"

    def unit_files(self) -> dict[Path, bytes]:
        hour, minute = self.at.split(":")
        service = (
            "# Written by `openmemory install claude-code`; `openmemory uninstall claude-code` removes it.\n"
            "[Unit]\n"
            "Description=Open Memory nightly run (ingest, sleep, render, report)\n"
            "\n"
            "[Service]\n"
            "Type=oneshot\n"
            f"ExecStart={' '.join(_systemd_quote(a) for a in self.command)}\n"
            "Nice=10\n"
            "IOSchedulingClass=idle\n"
            "TimeoutStartSec=2h\n"
        )
        timer = (
            "# Written by `openmemory install claude-code`; `openmemory uninstall claude-code` removes it.\n"
            "[Unit]\n"
            "Description=Open Memory nightly run\n"
            "\n"
            "[Timer]\n"
            f"OnCalendar=*-*-* {int(hour):02d}:{int(minute):02d}:00\n"
            "Persistent=true\n"
            "RandomizedDelaySec=10min\n"
            "\n"
            "[Install]\n"
            "WantedBy=timers.target\n"
        )
        return {self.unit_dir / UNIT: service.encode(), self.unit_dir / TIMER: timer.encode()}

    def _wants_link(self) -> Path:
        return self.unit_dir / "timers.target.wants" / TIMER

    def _plan_systemd(self, record: dict[str, Any] | None) -> tuple[list[Change], dict[str, Any]]:
        files = self.unit_files()
        current = {path: read_bytes(path) for path in files}
        enabled = os.path.lexists(self._wants_link())
        if all(current[p] == data for p, data in files.items()) and enabled:
            return [], record or {"kind": "systemd", "files": {}, "created_dirs": [], "wants_dir_existed": True}
        changes: list[Change] = []
        created = missing_dirs(self.unit_dir, self.home)
        changes += [MakeDir(d, label="systemd user units") for d in created]
        for path, data in files.items():
            if current[path] != data:
                changes.append(WriteFile(path, current[path], data, 0o644, label="systemd user unit"))
        systemctl = self._systemctl()
        changes.append(RunCommand([systemctl, "--user", "daemon-reload"]))
        changes.append(RunCommand([systemctl, "--user", "enable", "--now", TIMER], label="nightly at " + self.at))
        old = record if record and record.get("kind") == "systemd" else None
        new = {
            "kind": "systemd",
            "files": {str(p): sha256(d) for p, d in files.items()},
            "created_dirs": sorted(set((old or {}).get("created_dirs", [])) | {str(d) for d in created}),
            "wants_dir_existed": (old or {}).get(
                "wants_dir_existed", self._wants_link().parent.exists()
            ),
        }
        return changes, new

    def _unplan_systemd(self, record: dict[str, Any]) -> tuple[list[Change], list[str]]:
        changes: list[Change] = []
        warnings: list[str] = []
        systemctl = self._systemctl()
        recorded = {Path(p): h for p, h in record.get("files", {}).items()}
        present = {p: read_bytes(p) for p in recorded}
        if os.path.lexists(self._wants_link()) or any(v is not None for v in present.values()):
            changes.append(RunCommand([systemctl, "--user", "disable", "--now", TIMER], check=False))
        for path, digest in recorded.items():
            data = present[path]
            if data is None:
                continue
            if sha256(data) != digest:
                warnings.append(f"{path} was changed since install; left in place")
                continue
            changes.append(WriteFile(path, data, None, label="systemd user unit"))
        changes.append(RunCommand([systemctl, "--user", "daemon-reload"], check=False))
        dirs = [Path(d) for d in record.get("created_dirs", [])]
        if not record.get("wants_dir_existed", True):
            dirs.append(self._wants_link().parent)
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            changes.append(RemoveDir(d))
        return changes, warnings

    # --- cron ------------------------------------------------------------------------

    def _crontab(self) -> str:
        return _which("crontab", self.env) or "crontab"

    def cron_block(self) -> str:
        hour, minute = self.at.split(":")
        command = shlex.join(self.command) + f" >> {shlex.quote(str(self.log_file))} 2>&1"
        return f"{_MARK}\n{int(minute)} {int(hour)} * * * {_cron_escape(command)}\n"

    def read_crontab(self) -> str | None:
        """The user's crontab, or None when there is none."""
        result = subprocess.run([self._crontab(), "-l"], capture_output=True, text=True, env=self.env, timeout=30)
        if result.returncode == 0:
            return result.stdout
        if "no crontab" in result.stderr.lower():
            return None
        raise RuntimeError(f"`crontab -l` failed ({result.returncode}): {result.stderr.strip()}")

    def _plan_cron(self, record: dict[str, Any] | None) -> tuple[list[Change], dict[str, Any]]:
        block = self.cron_block()
        before = self.read_crontab()
        old = record if record and record.get("kind") == "cron" else None
        if before is not None and block in before:
            return [], old or {"kind": "cron", "block": block, "had_crontab": True, "added_newline": False}
        text = before or ""
        if old and old.get("block") and old["block"] in text:  # an older entry of ours: replace it
            text = text.replace(old["block"], "", 1)
        added_newline = bool(text) and not text.endswith("\n")
        after = text + ("\n" if added_newline else "") + block
        record_new = {
            "kind": "cron",
            "block": block,
            "had_crontab": old["had_crontab"] if old else before is not None,
            "added_newline": old["added_newline"] if old else added_newline,
        }
        return [WriteCrontab(before, after, self._crontab(), label="nightly at " + self.at)], record_new

    def _unplan_cron(self, record: dict[str, Any]) -> tuple[list[Change], list[str]]:
        block = record.get("block", "")
        before = self.read_crontab()
        if before is None or not block or block not in before:
            return [], []
        index = before.rindex(block)
        after = before[:index] + before[index + len(block) :]
        if record.get("added_newline") and index == len(after) and after.endswith("\n"):
            after = after[:-1]
        final = None if (after == "" and not record.get("had_crontab")) else after
        return [WriteCrontab(before, final, self._crontab())], []

    # --- the three kinds ---------------------------------------------------------------

    def instructions(self) -> str:
        units = self.unit_files()
        lines = [
            "No systemd user manager and no `crontab` here: schedule the nightly run yourself.",
            "With cron (`crontab -e`), add:",
            "",
            "    " + self.cron_block().splitlines()[1],
            "",
            "Or with a systemd user timer, write these two files, then run",
            f"`systemctl --user daemon-reload && systemctl --user enable --now {TIMER}`:",
        ]
        for path, data in units.items():
            body = [line for line in data.decode().splitlines() if not line.startswith("# Written by")]
            lines += ["", f"    # {path}"] + ["    " + line for line in body]
        return "\n".join(lines) + "\n"

    def plan_install(self, kind: str, record: dict[str, Any] | None) -> tuple[list[Change], dict[str, Any], list[str]]:
        """Changes to schedule the nightly run with ``kind``; the manifest record; notes."""
        if kind == "auto":
            kind = detect(self.env)
        changes: list[Change] = []
        notes: list[str] = []
        if record and record.get("kind") not in (kind, "none", None):
            # scheduled another way before (say cron, now systemd runs): take the old one away
            old_changes, warnings = self.plan_uninstall(record)
            changes += old_changes
            notes += warnings
            record = None
        if kind == "systemd":
            more, new = self._plan_systemd(record)
            notes.append(
                "systemd runs user timers while you are logged in (and catches up a missed night "
                "at the next login); `loginctl enable-linger` runs them when you are logged out."
            )
        elif kind == "cron":
            more, new = self._plan_cron(record)
        else:
            more, new = [], {"kind": "none"}
            notes.append(self.instructions())
        return changes + more, new, notes

    def plan_uninstall(self, record: dict[str, Any] | None) -> tuple[list[Change], list[str]]:
        kind = (record or {}).get("kind")
        if kind == "systemd":
            return self._unplan_systemd(record or {})
        if kind == "cron":
            return self._unplan_cron(record or {})
        return [], []
