"""Simulated agents that write real Claude Code transcripts and run the real engine each night.

An agent is a folder that holds everything a real one has on its own machine::

    <root>/<name>/
      home/                         its $HOME
        .claude/projects/<project>/ Claude Code's folder: <session>.jsonl transcripts, and
          memory/                   its memory folder (MEMORY.md and the lesson files the
                                    engine renders), read before every session
      openmemory/                   its engine's data folder ($OPENMEMORY_HOME)
      node/                         its commons node's data folder (the commons arm: simulations.commons_arm)
      sessions.jsonl                what it meant to write: one line per session (the ground
                                    truth the ingest check compares with)

Each simulated day it runs sessions on tasks drawn from its own mix of pitfalls
(:mod:`simulations.pitfalls`); each night the engine runs on it, as a real ``openmemory run
--now <end of the day>`` process (:class:`ProcessEngine`) or through the same entry point in
this process (:class:`InProcessEngine`: ``load_config`` with the agent's environment, then
``run_job``).

THE AGENT MODEL. What a real agent does with its memory cannot run here (it is a hosted
model), so this is a *model of an agent*, named as such wherever its results appear
(:class:`AgentModel`):

* Before a session the agent reads its memory folder from disk as Claude Code does: the first
  200 lines and 25,000 bytes of ``MEMORY.md``, and the files it links to (:func:`read_memory`).
* When the session meets a pitfall, the agent *recognises* a lesson as relevant when the
  lesson's text (the quoted observation of its file, or its line in the index) resembles the
  pitfall's situation: cosine >= ``match_cosine`` with the engine's own embedder
  (``openmemory_local.text.embed``). A lesson worded badly (a quote that says nothing about the
  situation) is not recognised and does not help.
* Recognised, it avoids the pitfall with probability ``p_avoid``: the transcript then shows the
  resolving call directly, no failure. Otherwise it shows the failing call, its output as the
  tool prints it, and then the resolution.

With ``--agent lm`` a local language model plays the agent instead (:mod:`simulations.lm`,
:meth:`Agent._decide`): it reads MEMORY.md and picks one of the step's commands (the failing
call, the fix, a lesson's stated fix); a lesson's other fix runs, then the failure follows.
"""

from __future__ import annotations

import json
import os
import random
import re
import sqlite3
import subprocess
import sys
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from openmemory_local.core.clock import iso
from openmemory_local.core.config import Config
from openmemory_local.text.embed import EMBEDDING, embed
from openmemory_local.core.config import project_dir

from .lm import loaded_index
from .pitfalls import Call, Pitfall, placeholder_values
from .transcripts import T

__all__ = ["AgentModel", "MemoryLesson", "read_memory", "situation_text", "best_match", "ingest_check", "Agent",
           "SessionPlan", "ProcessEngine", "InProcessEngine", "ENGINES", "session_start"]

ROOT = Path(__file__).resolve().parent.parent
INDEX = "MEMORY.md"
_ESCAPED = re.compile(r"\\(.)")
_SESSION_FILE = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\.jsonl")
_COMMONS_FILE = re.compile(r"openmemory-commons-([0-9a-f]{16})\.md")
_LINK = re.compile(r"\[((?:\\.|[^\]\\])*)\]\(([^)\s]+\.md)\)")  # [title](file.md), \] escaped in titles


@dataclass(frozen=True)
class AgentModel:
    """A model of an agent's use of its memory (not a measured agent: see the module docstring)."""

    #: probability that the agent avoids a pitfall when a lesson it read matches the situation
    p_avoid: float = 0.8
    #: a lesson matches a pitfall when cosine(lesson text, situation) >= this (engine's embedder)
    match_cosine: float = 0.3
    #: what Claude Code loads of MEMORY.md at session start (the limits render keeps to)
    index_max_lines: int = Config.memory_index_max_lines
    index_max_bytes: int = Config.memory_index_max_bytes

    def __post_init__(self) -> None:
        if not 0.0 <= self.p_avoid <= 1.0:
            raise ValueError("p_avoid must be between 0 and 1")
        if not -1.0 <= self.match_cosine <= 1.0:
            raise ValueError("match_cosine must be between -1 and 1")

    def describe(self) -> dict[str, Any]:
        return {
            "what": "a model of an agent, not a measured agent",
            "p_avoid": self.p_avoid,
            "match": {"embedding": EMBEDDING, "cosine_at_least": self.match_cosine,
                      "lesson_text": "the quoted observation of each lesson file MEMORY.md links, or its index line",
                      "against": "the pitfall's situation (pitfalls.toml)"},
            "reads": f"MEMORY.md's first {self.index_max_lines} lines and {self.index_max_bytes:,} bytes, "
                     "and the files it links",
        }

    def label(self) -> str:
        return (f"agent model: avoids a pitfall with p={self.p_avoid:g} when a rendered lesson matches it "
                f"(cosine >= {self.match_cosine:g}, {EMBEDDING})")


# -- the memory folder, as Claude Code reads it ---------------------------------------------------

@dataclass(frozen=True)
class MemoryLesson:
    file: str
    texts: tuple[str, ...]  # the observation(s) quoted in the file, and its line in the index
    #: the sessions its provenance names (transcript file names in the lesson file): for the
    #: simulation's bookkeeping only (which pitfall taught it), never for matching
    sessions: tuple[str, ...] = ()
    #: a received lesson (``openmemory-commons-<short id>.md``): its short record id, for the
    #: same bookkeeping
    commons: str | None = None


def read_memory(folder: Path, model: AgentModel = AgentModel()) -> list[MemoryLesson]:
    """The lessons an agent has in mind at session start: what ``MEMORY.md`` links to within
    what Claude Code loads of it (its first lines and bytes), each file read from disk."""
    try:
        data = (Path(folder) / INDEX).read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return []
    loaded = loaded_index(data, model.index_max_lines, model.index_max_bytes)
    out: list[MemoryLesson] = []
    seen: set[str] = set()
    for match in _LINK.finditer(loaded):
        title, target = match.group(1).strip(), match.group(2)
        if "/" in target or target in seen or target == INDEX:
            continue
        seen.add(target)
        try:
            body = (Path(folder) / target).read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, IsADirectoryError):
            continue  # a dangling link: nothing to read
        quoted = [line[1:].strip() for line in _body(body).splitlines() if line.startswith(">")]
        texts = tuple(dict.fromkeys(t for t in (" ".join(quoted), _ESCAPED.sub(r"\1", title)) if t))
        if texts:
            received = _COMMONS_FILE.fullmatch(target)
            out.append(MemoryLesson(target, texts, tuple(dict.fromkeys(_SESSION_FILE.findall(body))),
                                    received.group(1) if received else None))
    return out


def _body(text: str) -> str:
    """A markdown file without its front matter."""
    if text.startswith("---\n"):
        end = text.find("\n---", 4)
        if end > 0:
            return text[end + 4:]
    return text


_VECTORS: dict[str, Any] = {}


def _vector(text: str):
    vec = _VECTORS.get(text)
    if vec is None:
        if len(_VECTORS) > 50_000:
            _VECTORS.clear()
        vec = _VECTORS[text] = embed(text)
    return vec


def situation_text(pitfall: Pitfall) -> str:
    """What a lesson is matched against: the pitfall's situation and the call it leads to (what
    the agent is about to run), as the agent would have them in mind."""
    return f"{pitfall.situation} {pitfall.fail.command}"


def best_match(lessons: list[MemoryLesson], situation: str) -> tuple[float, MemoryLesson | None]:
    """The lesson that best resembles a situation, and its cosine (engine's embedder)."""
    target = _vector(situation)
    best, chosen = -1.0, None
    for lesson in lessons:
        for text in lesson.texts:
            cos = float(_vector(text) @ target)
            if cos > best:
                best, chosen = cos, lesson
    return best, chosen


# -- sessions --------------------------------------------------------------------------------------

_BENIGN = [
    ("Explain what the importer module does.", [("Bash", {"command": "git status", "description": "Status"},
                                                  "On branch {branch}\nnothing to commit, working tree clean"),
                                                 ("Read", {"file_path": "{cwd}/README.md"},
                                                  "     1→# {project}\n     2→\n     3→The shop's services.")]),
    ("Add a docstring to the cart module.", [("Read", {"file_path": "{cwd}/lib/cart.ex"},
                                              "     1→defmodule Cart do\n     2→  def total(items), do: 0"),
                                             ("Edit", {"file_path": "{cwd}/lib/cart.ex",
                                                       "old_string": "defmodule Cart do",
                                                       "new_string": "defmodule Cart do\n  @moduledoc \"The cart.\""},
                                              "The file {cwd}/lib/cart.ex has been updated.")]),
    ("Where is the retry logic?", [("Grep", {"pattern": "retry", "path": "{cwd}"}, "Found 3 files\nlib/retry.ex"),
                                   ("Read", {"file_path": "{cwd}/lib/retry.ex"},
                                    "     1→defmodule Retry do\n     2→  @max 5")]),
]


@dataclass
class SessionPlan:
    """One session as the agent meant it: the ground truth the ingest check compares with."""

    session_id: str
    day: int
    started: str
    task: str
    branch: str
    path: str
    encounters: list[dict] = field(default_factory=list)  # pitfall, failed, matched, cosine, lesson
    failures: list[dict] = field(default_factory=list)  # tool, command, exit_code: one error episode each

    def to_dict(self) -> dict:
        return asdict(self)


class Agent:
    """One simulated agent: its folders, its mix of pitfalls, its sessions and nights."""

    def __init__(self, name: str, root: Path, *, seed: int, model: AgentModel,
                 mix: list[tuple[Pitfall, int]], sessions_per_day: int = 5, benign_share: float = 0.2,
                 cwd: str | None = None, lesson_model_url: str | None = None):
        self.name = name
        #: an OpenAI-compatible endpoint that rephrases this agent's lessons (the engine's
        #: ``$OPENMEMORY_LESSON_MODEL_URL``); None: the engine's deterministic texts
        self.lesson_model_url = lesson_model_url
        self.root = Path(root) / name
        self.home = self.root / "home"
        self.data = self.root / "openmemory"
        self.node_home = self.root / "node"
        self.cwd = cwd or f"/home/{name.lower()}/src/shop"
        self.claude_dir = self.home / ".claude"
        self.project_dir = self.claude_dir / "projects" / project_dir(self.cwd)
        self.memory_dir = self.project_dir / "memory"
        self.model = model
        # Three streams, so that two arms of one world meet the same pitfalls at the same times:
        # what the sessions are (plan), how the transcripts look (text), what the agent does (avoid).
        self.rng = random.Random(f"{seed}-{name}-plan")
        self.text_rng = random.Random(f"{seed}-{name}-text")
        self.avoid_rng = random.Random(f"{seed}-{name}-avoid")
        self.mix = mix  # (pitfall, first day it can be met)
        self.sessions_per_day = sessions_per_day
        self.benign_share = benign_share
        self.plans: list[SessionPlan] = []
        self.failed_in: dict[str, str] = {}  # session id -> the pitfall it failed on
        for folder in (self.project_dir, self.data):
            folder.mkdir(parents=True, exist_ok=True)
        if lesson_model_url:  # a local model on busy cores: minutes an answer, not the default 20 s
            (self.data / "config.toml").write_text("[lessons]\nmodel_timeout = 600.0\nmodel_budget = 7200.0\n")

    # -- the environment a real process of this agent has --------------------------------------
    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENMEMORY_", "CLAUDE_"))}
        env.update(HOME=str(self.home), OPENMEMORY_HOME=str(self.data), XDG_DATA_HOME=str(self.home / ".local/share"))
        if self.lesson_model_url:
            env["OPENMEMORY_LESSON_MODEL_URL"] = self.lesson_model_url
        return env

    def memory(self) -> list[MemoryLesson]:
        return read_memory(self.memory_dir, self.model)

    def _choose(self, day: int) -> Pitfall | None:
        if self.rng.random() < self.benign_share:
            return None
        open_ = [p for p, first_day in self.mix if first_day <= day]
        return self.rng.choice(open_) if open_ else None

    def run_day(self, day: int, date: datetime) -> list[SessionPlan]:
        """Write this day's sessions as Claude Code transcripts; return what they were meant to be."""
        plans = []
        start = date.replace(hour=9, minute=0, second=0, microsecond=0)
        for k in range(self.sessions_per_day):
            begin = start + timedelta(minutes=k * (540 // max(1, self.sessions_per_day)) + self.rng.randint(0, 30))
            plans.append(self._session(day, begin, self._choose(day)))
        self.plans.extend(plans)
        with open(self.root / "sessions.jsonl", "a", encoding="utf-8") as log:
            for plan in plans:
                log.write(json.dumps(plan.to_dict(), separators=(",", ":")) + "\n")
        return plans

    def _session(self, day: int, begin: datetime, pitfall: Pitfall | None) -> SessionPlan:
        plan_rng, rng = self.rng, self.text_rng
        sid = str(uuid.UUID(int=plan_rng.getrandbits(128), version=4))
        encounter = pitfall.encounter(plan_rng, self.cwd, str(self.home)) if pitfall else None
        benign_task, benign_calls = plan_rng.choice(_BENIGN)
        values = encounter.values if encounter else placeholder_values(plan_rng, self.cwd, str(self.home))
        task = encounter.task if encounter else benign_task
        t = T(session=sid, cwd=self.cwd, clock=begin, branch=values["branch"])
        path = self.project_dir / f"{sid}.jsonl"
        plan = SessionPlan(sid, day, iso(begin), task, values["branch"], str(path))
        t.person(task)
        t.advance(rng.uniform(3, 20))
        t.says("Let me look at the project first.")
        for tool, args, output in benign_calls[:1] if encounter else benign_calls:
            call = Call(tool, args, output).filled(values)
            self._ok(t, call)
        if encounter:
            lessons = self.memory()
            cosine, lesson = best_match(lessons, situation_text(encounter.pitfall))
            matched = lesson is not None and cosine >= self.model.match_cosine
            roll = self.avoid_rng.random()  # drawn at every encounter: both arms draw alike
            record: dict[str, Any] = {}
            if getattr(self.model, "kind", "lexical") == "lm" and self.model.decides_for(self.name):
                # the language model reads MEMORY.md and chooses among the step's commands;
                # the lesson that counts is the one whose stated fix it ran (if any)
                chosen, record = self._decide(encounter, sid, lessons, roll)
                avoided = chosen.kind == "fix"
                lesson = next((m for m in lessons if m.file == chosen.lesson), None) if chosen.lesson else \
                    (lesson if avoided and matched else None)
            else:
                avoided = matched and roll < self.model.p_avoid
            taught = sorted({self.failed_in[s] for s in lesson.sessions if s in self.failed_in}) if lesson else []
            plan.encounters.append({"pitfall": encounter.pitfall.id, "failed": not avoided, "matched": matched,
                                    "cosine": round(cosine, 4), "lesson": lesson.file if lesson else None,
                                    "lesson_from": taught, "commons": lesson.commons if lesson else None,
                                    **record})
            if record.get("chose") == "lesson":  # a lesson's fix that is not this pitfall's: it runs, then
                self._ok(t, Call("Bash", {"command": record["ran"], "description": "Apply the known fix"}, ""))
                t.advance(rng.uniform(3, 20))  # the task still needs doing
            if not avoided:
                self.failed_in[sid] = encounter.pitfall.id
                self._fail(t, encounter.fail)
                plan.failures.append({"tool": encounter.fail.tool, "command": encounter.fail.command,
                                      "exit_code": encounter.fail.exit_code})
                t.advance(rng.uniform(5, 40))
                t.says("That failed; the output says why. Doing it the way that works here.")
            for call in encounter.resolve:
                self._ok(t, call)
        t.advance(rng.uniform(5, 60))
        t.says("Done: " + task.rstrip(".?") + ".")
        t.write(path)
        return plan

    def _decide(self, encounter, sid: str, lessons: list[MemoryLesson], roll: float):
        """The language-model agent's choice at an encounter (:mod:`simulations.lm`): the
        candidates (the failing call, the fix, each relevant lesson's stated fix), the memory
        index as Claude Code loads it, the choice sampled with this encounter's draw."""
        from .lm import candidates

        target = _vector(situation_text(encounter.pitfall))
        scored = sorted(((max(float(_vector(t) @ target) for t in m.texts), k, m) for k, m in enumerate(lessons)),
                        key=lambda x: (-x[0], x[1]))
        resembles = {m.file for cos, _, m in scored if cos >= self.model.match_cosine}
        program = encounter.fail.tool if encounter.fail.tool != "Bash" else \
            (encounter.fail.command.split() or [""])[0]

        def relevant(m: MemoryLesson) -> bool:
            from .lm import failing_label

            label = failing_label(m.texts[0]) or ""
            return m.file in resembles or (bool(label) and label.split()[0] == program)

        options = candidates(encounter, [m for _, _, m in scored], relevant=relevant)
        try:
            index = (self.memory_dir / INDEX).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            index = b""
        decision = self.model.decide(memory_index=loaded_index(index, self.model.index_max_lines,
                                                               self.model.index_max_bytes),
                                     task=encounter.task, options=options,
                                     order_key=f"{sid}-{encounter.pitfall.id}", roll=roll)
        chosen = decision["chosen"]
        record = {"chose": chosen.kind, "ran": chosen.text, "chose_commons": chosen.commons,
                  "options": [o.kind for o in options], "p": [round(x, 4) for x in decision["probabilities"]],
                  "shown": decision["shown"]}
        return chosen, record

    def _call_id(self) -> str:
        return "toolu_01" + "".join(self.text_rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz123456789",
                                                     k=22))

    def _ok(self, t: T, call: Call) -> None:
        cid = self._call_id()
        t.advance(self.text_rng.uniform(2, 30))
        t.call(call.tool, call.input, cid)
        t.advance(self.text_rng.uniform(0.2, 8))
        tur: Any = {"stdout": call.output, "stderr": "", "interrupted": False, "isImage": False} \
            if call.tool == "Bash" else None
        t.result(cid, call.output, False, tur)

    def _fail(self, t: T, call: Call) -> None:
        cid = self._call_id()
        t.advance(self.text_rng.uniform(2, 30))
        t.call(call.tool, call.input, cid)
        t.advance(self.text_rng.uniform(0.2, 8))
        if call.form == "exit":
            content = f"Exit code {call.exit_code}\n{call.output}"
        elif call.form == "tool_use_error":
            content = f"<tool_use_error>{call.output}</tool_use_error>"
        else:
            content = call.output
        t.result(cid, content, True, "Error: " + content.removeprefix("<tool_use_error>")
                 .removesuffix("</tool_use_error>"))


def ingest_check(agent: "Agent") -> dict:
    """Compare what the agent meant to write (its session plans) with what the engine made of
    the transcripts: one session episode per session, one error episode per failing call with
    its tool, command and exit code. Read from the engine's store (read-only)."""
    db = agent.data / "openmemory.db"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        rows = con.execute("SELECT kind, session_id, fields FROM episodes "
                           "WHERE kind IN ('session', 'error')").fetchall()
    finally:
        con.close()
    sessions = {sid for kind, sid, _ in rows if kind == "session"}
    errors: dict[str, list[tuple]] = {}
    for kind, sid, fields in rows:
        if kind == "error":
            f = json.loads(fields)
            errors.setdefault(sid, []).append((f.get("tool"), f.get("command"), f.get("exit_code")))
    mismatches = []
    meant_errors = 0
    for plan in agent.plans:
        meant = sorted((x["tool"], x["command"], x["exit_code"]) for x in plan.failures)
        meant_errors += len(meant)
        got = sorted(errors.get(plan.session_id, []))
        if plan.session_id not in sessions:
            mismatches.append({"session": plan.session_id, "problem": "no session episode"})
        elif meant != got:
            mismatches.append({"session": plan.session_id, "meant": meant, "ingested": got})
    return {"sessions": {"meant": len(agent.plans), "ingested": len(sessions)},
            "errors": {"meant": meant_errors, "ingested": sum(len(v) for v in errors.values())},
            "ok": not mismatches and len(sessions) == len(agent.plans), "mismatches": mismatches[:10]}


# -- the nightly engine run --------------------------------------------------------------------------

class ProcessEngine:
    """The engine as real processes with the agent's environment: ``openmemory run --now TIME
    --json`` each night, and the few other commands the commons arm needs."""

    name = "process"

    def __init__(self, timeout: float = 600.0):
        self.timeout = timeout

    @staticmethod
    def argv(*args: str) -> list[str]:
        """The engine's command line: the one place it is built (an option every call of the
        simulation needs goes here)."""
        return [sys.executable, "-m", "openmemory_local.cli.main", *args]

    def cli(self, agent: Agent, *args: str, ok=(0,)) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.argv(*args), env=agent.environ(), cwd=ROOT, capture_output=True, text=True,
                              timeout=self.timeout)
        if proc.returncode not in ok:
            raise RuntimeError(f"openmemory {args[0]} for {agent.name} exited {proc.returncode}:\n"
                               f"{proc.stderr[-2000:]}")
        return proc

    def run(self, agent: Agent, now: datetime) -> dict:
        return json.loads(self.cli(agent, "run", "--now", iso(now), "--json", ok=(0, 3)).stdout)

    def publish_enable(self, agent: Agent, now: datetime) -> dict:
        """Opt the agent's project in to publishing (``openmemory publish enable CWD``)."""
        return json.loads(self.cli(agent, "publish", "enable", agent.cwd, "--now", iso(now), "--json").stdout)

    def install(self, agent: Agent, now: datetime) -> None:
        """``openmemory install claude-code --schedule none``: the hooks in the agent's
        ``~/.claude/settings.json`` (the simulation runs the SessionStart hook itself)."""
        self.cli(agent, "install", "claude-code", "--schedule", "none", "--now", iso(now))


class InProcessEngine(ProcessEngine):
    """The engine's Python entry point (what ``openmemory run`` calls), in this process:
    the configuration loaded from the agent's environment, then ``run_job``. The other
    commands (opting in, installing the hooks) run as processes."""

    name = "in-process"

    def run(self, agent: Agent, now: datetime) -> dict:
        from openmemory_local.core.config import load_config
        from openmemory_local.run import run_job
        from openmemory_local.storage.store import Store

        with Store.open(load_config(environ=agent.environ())) as store:
            report = run_job(store, now)
        return json.loads(json.dumps(report, default=str))  # the JSON the process prints


def session_start(agent: Agent, now: datetime, timeout: float = 120.0) -> dict:
    """A session starts: the SessionStart hook runs as Claude Code runs it (the command that
    ``openmemory install claude-code`` wrote into the agent's settings.json, the payload on
    stdin); ``{"seconds", "stdout"}``."""
    import shlex
    import time

    settings = json.loads((agent.claude_dir / "settings.json").read_text(encoding="utf-8"))
    commands = [h["command"] for group in settings["hooks"]["SessionStart"] for h in group["hooks"]]
    if len(commands) != 1:
        raise RuntimeError(f"{agent.name}: {len(commands)} SessionStart hooks in settings.json, expected 1")
    payload = json.dumps({"session_id": str(uuid.uuid4()), "transcript_path": "", "cwd": agent.cwd,
                          "hook_event_name": "SessionStart", "source": "startup"})
    env = agent.environ()
    env.pop("OPENMEMORY_HOME", None)  # the command names its data folder itself
    env["OPENMEMORY_NOW"] = iso(now)
    started = time.monotonic()
    done = subprocess.run(shlex.split(commands[0]), input=payload, capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{agent.name}'s SessionStart hook exited {done.returncode}: {done.stderr[-1000:]}")
    return {"seconds": round(time.monotonic() - started, 3), "stdout": done.stdout}


ENGINES = {"process": ProcessEngine, "in-process": InProcessEngine}
