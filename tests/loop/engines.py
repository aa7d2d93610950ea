"""Engines for the loop tests: each one an Open Memory data folder, a Claude Code folder
(transcripts in, memory folders out) and the node it talks to.

The engine runs in this process (``openmemory_local.cli.main.main``: the real command, its real
store), with its environment set for the call; the nodes are real processes
(``tests/node/harness.py``); the SessionStart hook runs as Claude Code runs it, a process
started from the command ``openmemory install claude-code`` wrote into settings.json.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import subprocess
import time
from datetime import datetime, timedelta, timezone
from itertools import count
from pathlib import Path

from openmemory_local.cli.main import main
from openmemory_local.core.clock import iso
from openmemory_local.core.config import load_config
from openmemory_local.core.config import project_dir
from openmemory_local.storage.store import Store
from tests.local.transcripts import T

_ids = count(1)


def stamp(moment: datetime) -> str:
    """A transcript's ``start`` (whole seconds, no zone: the writer adds milliseconds and Z)."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")


@contextlib.contextmanager
def environment(**values: str):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class Engine:
    def __init__(self, root: Path, name: str, node, cwd: str, *, config: str = ""):
        self.name = name
        self.root = Path(root) / name
        self.home = self.root / "openmemory"
        self.claude = self.root / "claude"
        self.user = self.root / "user"
        self.node = node
        self.cwd = cwd
        for path in (self.home, self.claude / "projects" / project_dir(cwd), self.user):
            path.mkdir(parents=True, exist_ok=True)
        (self.home / "config.toml").write_text(f'[node]\nhome = "{node.home}"\n{config}')

    @property
    def env(self) -> dict[str, str]:
        return {"HOME": str(self.user), "CLAUDE_CONFIG_DIR": str(self.claude), "OPENMEMORY_HOME": str(self.home),
                "XDG_DATA_HOME": str(self.user / ".local" / "share")}

    @property
    def memory(self) -> Path:
        return self.claude / "projects" / project_dir(self.cwd) / "memory"

    def cli(self, *argv: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        with environment(**self.env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*argv, "--home", str(self.home)])
        self.last_stderr = err.getvalue()
        return code, out.getvalue()

    def run(self, now: datetime) -> dict:
        code, out = self.cli("run", "--json", "--now", iso(now))
        assert code == 0, (code, self.last_stderr, out[-2000:])
        return json.loads(out)

    def store(self) -> Store:
        with environment(**self.env):
            return Store.open(load_config(self.home))

    def session(self, start: datetime, commands: list[tuple[str, str, int]], *, ask: str = "ship it",
                branch: str = "main") -> Path:
        """A Claude Code transcript of one session in the engine's project: ``commands`` are
        (shell command, output, exit code)."""
        sid = f"{next(_ids):08d}-0000-4000-8000-{self.name.encode().hex()[:12]:0>12}"
        t = T(sid, self.cwd, start=stamp(start), branch=branch)
        t.person(ask)
        for i, (command, output, code) in enumerate(commands):
            t.bash(command, f"toolu_{sid[:8]}_{i}", output=output, exit_code=code)
        t.says("Done.")
        return t.write(self.claude / "projects" / project_dir(self.cwd) / f"{sid}.jsonl")

    def commons_files(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted(self.memory.glob("openmemory-commons-*.md"))}

    def index(self) -> str:
        path = self.memory / "MEMORY.md"
        return path.read_text() if path.exists() else ""

    # --- Claude Code's side --------------------------------------------------------------------

    def install(self) -> None:
        code, out = self.cli("install", "claude-code", "--schedule", "none")
        assert code == 0, out

    def session_start_command(self) -> list[str]:
        settings = json.loads((self.claude / "settings.json").read_text())
        commands = [h["command"] for group in settings["hooks"]["SessionStart"] for h in group["hooks"]]
        assert len(commands) == 1, commands
        return shlex.split(commands[0])

    def session_start(self, now: datetime | None = None, timeout: float = 60.0) -> tuple[float, str]:
        """Run the installed SessionStart hook as Claude Code does; (seconds it took, stdout)."""
        payload = json.dumps({"session_id": "x", "transcript_path": "", "cwd": self.cwd,
                              "hook_event_name": "SessionStart", "source": "startup"})
        env = dict(os.environ, **self.env)
        env.pop("OPENMEMORY_HOME", None)  # the command names its data folder itself
        if now is not None:
            env["OPENMEMORY_NOW"] = iso(now)
        started = time.monotonic()
        done = subprocess.run(self.session_start_command(), input=payload, capture_output=True, text=True,
                              env=env, timeout=timeout)
        assert done.returncode == 0, done.stderr
        return time.monotonic() - started, done.stdout

    def hook_log(self) -> str:
        path = self.home / "logs" / "claude-code-hook.log"
        return path.read_text() if path.exists() else ""


def past(days: float = 3) -> datetime:
    """09:00 UTC on the day ``days`` ago (engine clocks run in the past of the nodes'): the
    few hours a test runs its engines through after it stay within that day whatever the hour
    the test runs at (a nightly run replays each past day and sleeps at its end: across
    midnight a lesson learned an hour before has decayed a little when the run publishes)."""
    return (datetime.now(timezone.utc) - timedelta(days=days)).replace(hour=9, minute=0, second=0, microsecond=0)
