"""A synthetic agent's life: sessions, failed tool calls and corrections, day after day.

Used by ``benchmarks/sleep.py`` (sleep at 1k, 10k and 50k episodes), by
``simulations/month.py`` (a month of sleeps in a minute) and by the kill test of sleep.
Deterministic for a seed. What it makes, per day and per session:

* a session episode (the programs run, the command lines, the files edited) in one of a
  few projects; some projects are git worktrees named after their branch
  (``/home/dev/src/app-worktrees/<branch>``), whose family is one project;
* failed tool calls: some drawn from a fixed set of *recurring* failures (the same
  failure with volatile tokens that change each time: branch names, hashes, numbers,
  paths with ids, seeds), the rest *one-off* failures made of random words;
* now and then a correction by the person.
"""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from datetime import datetime, timedelta

from openmemory_local.core.clock import iso
from openmemory_local.ingest.episodes import Episode

__all__ = ["Workload", "RECURRING"]

#: (tool, command template, failure template). ``{branch}``, ``{hash}``, ``{n}``, ``{id}`` and
#: ``{seed}`` are filled differently at each occurrence.
RECURRING = [
    ("Bash", "git push 2>&1", "fatal: The current branch {branch} has no upstream branch."),
    ("Bash", "git add priv/static/assets/app.css && git commit -m 'wip {n}'",
     "The following paths are ignored by one of your .gitignore files: priv/static/assets"),
    ("Bash", "git add -A && git commit -m 'feat: {n}'",
     "Pre-commit validation failed: [FORMAT] Code is not formatted."),
    ("Bash", "mix test --seed {seed}", "** (RuntimeError) no :secret_key_base configuration found in AppWeb.Endpoint."),
    ("Bash", "npm run build", "Error: Cannot find module './dist/chunk-{hash}.js'"),
    ("Bash", "pytest -x tests/test_{n}.py", "ModuleNotFoundError: No module named 'app_settings'"),
    ("Bash", "docker compose up -d db", "Error response from daemon: port is already allocated: 0.0.0.0:{n}"),
    ("Read", "/home/dev/src/app/tmp/cache/{id}/state.json", "File does not exist."),
    ("Bash", "cargo build --release", "error[E0432]: unresolved import `crate::config::Settings` ({n} errors)"),
    ("Bash", "uv run ruff check .", "F401 `os` imported but unused in src/app/{n}.py"),
]


@dataclass
class Workload:
    seed: int = 1
    #: distinct recurring failures beyond :data:`RECURRING` (random words, fixed per seed)
    extra_recurring: int = 300
    #: share of failed tool calls that are one-off (never recur)
    one_off: float = 0.4
    families: int = 5
    errors_per_session: int = 6
    correction_rate: float = 0.05

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 9))) for _ in range(4000)]
        self._words = words
        self._rng = rng
        self._templates = list(RECURRING)
        for _ in range(self.extra_recurring):
            head = rng.choice(["make", "mix", "npm run", "go", "python -m", "bundle exec"]) + " " + rng.choice(words)
            failure = (f"{rng.choice(['error', 'fatal', 'Error', 'failed'])}: {' '.join(rng.sample(words, 5))} "
                       f"{{id}} {' '.join(rng.sample(words, 2))}")
            self._templates.append(("Bash", head + " {n}", failure))
        self._roots = []
        for f in range(self.families):
            name = rng.choice(words)
            worktrees = f % 2 == 0
            self._roots.append((f"/home/dev/src/{name}-worktrees" if worktrees else f"/home/dev/src/{name}", worktrees))
        self._session = 0

    def _fill(self, text: str, branch: str) -> str:
        rng = self._rng
        return (text.replace("{branch}", branch)
                .replace("{hash}", "".join(rng.choices("0123456789abcdef", k=10)))
                .replace("{n}", str(rng.randint(1, 99999)))
                .replace("{seed}", str(rng.randint(1, 999999)))
                .replace("{id}", f"{rng.randint(10000, 99999)}{rng.choice(self._words)}"))

    def session(self, start: datetime) -> list[Episode]:
        """One session's episodes: its failures, maybe a correction, and the session itself."""
        rng = self._rng
        self._session += 1
        sid = f"sim-{self.seed}-{self._session:07d}"
        root, worktrees = rng.choice(self._roots)
        branch = f"{root.rsplit('/', 1)[-1].split('-')[0]}-{rng.randint(100, 999)}" if worktrees else "main"
        cwd = f"{root}/{branch}" if worktrees else root
        episodes = []
        commands: dict[str, int] = {}
        lines = []
        t = start
        for k in range(rng.randint(1, 2 * self.errors_per_session - 1)):
            t += timedelta(minutes=rng.uniform(1, 9))
            if rng.random() < self.one_off:
                tool, command = "Bash", f"{rng.choice(self._words)} {rng.choice(self._words)}"
                failure = f"{rng.choice(['error', 'failed'])}: {' '.join(rng.sample(self._words, 6))}"
            else:
                # a Zipf-like choice: a few failures recur a lot, most rarely
                tool, command, failure = self._templates[min(int(rng.paretovariate(1.1)) - 1, len(self._templates) - 1)
                                                         if rng.random() < 0.6 else rng.randrange(len(self._templates))]
                command, failure = self._fill(command, branch), self._fill(failure, branch)
            head = " ".join(command.split()[:2])
            commands[head] = commands.get(head, 0) + 1
            lines.append(command)
            fields = {"tool": tool, "command": command if tool == "Bash" else f"{cwd}/{command.split('/', 4)[-1]}",
                      "description": "", "failure": "exit_code", "exit_code": 1, "first_line": failure,
                      "output": failure, "cwd": cwd, "branch": branch}
            episodes.append(Episode("error", f"{sid}-e{k}", f"{tool} `{command}` failed: {failure}", fields, sid,
                                    None, cwd, iso(t), k + 2))
        if rng.random() < self.correction_rate:
            t += timedelta(minutes=2)
            said = f"no, {rng.choice(['use', 'we use', 'this project uses'])} {rng.choice(self._words)} here"
            fields = {"message": said, "opening": "no", "agent_statement": "I'll run the installer.",
                      "agent_action": {"tool": "Bash", "command": f"{rng.choice(self._words)} install", "line": 3},
                      "cwd": cwd, "branch": branch}
            episodes.append(Episode("correction", f"{sid}-c", f'The person corrected the agent: "{said}".', fields,
                                    sid, None, cwd, iso(t), 3))
        for _ in range(rng.randint(2, 8)):
            head = rng.choice(["git status", "git push", "mix test", "npm test", "git commit", "ls", "rg"])
            commands[head] = commands.get(head, 0) + 1
            lines.append(head)
        fields = {"commands": commands, "command_lines": lines[:40], "files_edited": [], "files_read": [],
                  "cwd": cwd, "branch": branch, "started": iso(start), "ended": iso(t)}
        text = f"Session in {cwd.rsplit('/', 1)[-1]} on branch {branch}. Ran " + ", ".join(commands) + "."
        episodes.append(Episode("session", sid, text, fields, sid, None, cwd, iso(start), 1))
        return episodes

    def episodes(self, n: int, start: datetime, days: float) -> list[Episode]:
        """About ``n`` episodes (whole sessions), spread evenly over ``days`` from ``start``."""
        out: list[Episode] = []
        per_session = self.errors_per_session + 1
        sessions = max(1, n // per_session)
        step = timedelta(days=days) / sessions
        t = start
        while len(out) < n:
            out.extend(self.session(t))
            t += step
        return out
