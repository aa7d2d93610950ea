"""The two-agent experiment (paper, section 7.5): does agent B's repeated-error rate fall for
errors that only agent A has met?

    python -m simulations.two_agents --days 30 --seed 1 --out DIR [--attesters 2] [--drill] [--json]

A world of simulated agents (:mod:`simulations.agents`): A, B and ``--attesters`` K more, each
with its own home, Claude Code folder, memory folder and engine data folder. Their task mixes
are drawn from the pitfall catalogue (:mod:`simulations.pitfalls`) with the seed:

* *A-only* pitfalls: A meets them from day 0; B (and the attesters) from day ``--b-from``
  (default: a third of the way in). These are what the experiment measures.
* *shared* pitfalls: everyone meets them from day 0; *B's own*: only B meets them.
* about a fifth of the sessions meet no pitfall at all.

Each simulated day every agent runs its sessions and writes them as Claude Code JSONL; each
night the real engine runs on each agent (``openmemory run --now <23:59:59 of that day>``,
as a process by default, ``--engine in-process`` for the same entry point in this process),
which ingests the day's transcripts, sleeps and renders the lessons into the agent's memory
folder, where the next day's sessions read them (the agent model, :class:`AgentModel`: p and
the matching are a model of an agent, not a measured one; every output says so).

*B's repeated-error rate on A-only pitfalls*, for a day: of B's sessions that day that met an
A-only pitfall A had met before, the share in which B made the error.

ARMS (:mod:`simulations.arm`). The *control* arm connects nothing: each agent learns only from
its own sessions. The *commons* arm (:mod:`simulations.commons_arm`) gives every agent its own
node on the world's clock, all connected, B's included; A's project publishes; every night
publishes, pulls, attests and renders. Both arms run by default, in the same world: the same
seeds, so the same sessions meet the same pitfalls at the same moments (a paired comparison).
``--drill`` adds the poisoned-lesson drill after the last day of the commons arm.

WHERE THE AGENTS LIVE. In this process, their engines and nodes as local processes
(:class:`LocalHosts`, the default), or each in its own container (``--hosts
http://agent-{name}:8470``, :class:`RemoteHosts`: ``docker-compose.yml``), driven through the
same methods (:mod:`simulations.agent_host`).

Writes to DIR: ``summary.json`` (:data:`SUMMARY_FILE`; also on stdout with ``--json``; its keys
are documented in docs/simulations.md and read by ``openmemory eval --experiment DIR``),
``days.jsonl`` (one line per arm and day), ``b_error_rate.png`` (B's rate over days, per arm),
``lessons.png`` (lessons in the memory folders, the A-only pitfalls they match, and the lessons'
statuses in the commons), ``drill_revocation.png`` (with ``--drill``), and
``world/<arm>/<agent>/`` (every agent's folders, left for inspection).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from .agents import ENGINES, Agent, AgentModel, best_match, situation_text
from .lm import LanguageAgentModel
from .arm import CommonsUnavailable
from .pitfalls import CATALOGUE, Pitfall, load

__all__ = ["WorldConfig", "World", "LocalHosts", "RemoteHosts", "Arm", "ControlArm", "CommonsArm",
           "CommonsUnavailable", "ARMS", "SUMMARY_FILE", "run", "main"]

START = datetime(2026, 4, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class WorldConfig:
    days: int = 30
    seed: int = 1
    attesters: int = 2
    sessions_per_day: int = 8
    a_only: int = 8  # pitfalls only A meets at first
    shared: int = 4  # pitfalls everyone meets from day 0
    b_own: int = 4  # pitfalls only B meets
    b_from: int | None = None  # the day B and the attesters start meeting A-only pitfalls
    benign_share: float = 0.2  # sessions that meet no pitfall
    catalogue: Path = CATALOGUE
    model: AgentModel = field(default_factory=AgentModel)
    engine: str = "process"
    #: these pitfall ids, in this order (A-only first, then shared, then B's own), instead of
    #: the catalogue shuffled with the seed
    pitfalls: tuple[str, ...] = ()
    # -- the commons arm (simulations.commons_arm) --
    clock_rate: float = 60.0  # world seconds per wall second on the nodes' clock
    threshold: int = 3  # the nodes' [commons] threshold N
    policy: str = "trusted"  # the nodes' [commons] policy
    drill: bool = False  # the poisoned-lesson drill after the last day (commons arm)
    poison: bool = False  # an attacker and its sybils publish on day 1 (commons arm: simulations.commons_arm.Poison)
    #: the engines' lesson writer (``$OPENMEMORY_LESSON_MODEL_URL``): None, the deterministic texts
    lesson_model_url: str | None = None

    def __post_init__(self) -> None:
        if self.days < 1:
            raise ValueError("--days must be at least 1")
        if self.attesters < 0:
            raise ValueError("--attesters must be 0 or more")
        if self.sessions_per_day < 1:
            raise ValueError("--sessions-per-day must be at least 1")
        if min(self.a_only, self.shared, self.b_own) < 0 or self.a_only < 1:
            raise ValueError("at least one A-only pitfall, and no negative counts")
        if self.b_from is not None and not 0 <= self.b_from < self.days:
            raise ValueError("--b-from must be a day of the run (0 to days - 1)")
        if self.engine not in ENGINES:
            raise ValueError(f"--engine must be one of {', '.join(ENGINES)}")
        if self.pitfalls and len(self.pitfalls) < self.a_only + self.shared + self.b_own:
            raise ValueError(f"--pitfalls names {len(self.pitfalls)} pitfalls; this world needs "
                             f"{self.a_only + self.shared + self.b_own} (A-only, shared, B's own)")
        if not 0 < self.clock_rate <= 1e6:
            raise ValueError("--clock-rate must be positive (world seconds per wall second)")
        if self.threshold < 1:
            raise ValueError("--threshold must be at least 1")
        if self.policy not in ("trusted", "open"):
            raise ValueError("--policy must be trusted or open")

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["catalogue"] = str(self.catalogue)
        out["model"] = {"p_avoid": self.model.p_avoid, "match_cosine": self.model.match_cosine}
        out["pitfalls"] = list(self.pitfalls)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "WorldConfig":
        data = dict(data)
        data["catalogue"] = Path(data.get("catalogue") or CATALOGUE)
        data["model"] = AgentModel(**(data.get("model") or {}))
        data["pitfalls"] = tuple(data.get("pitfalls") or ())
        return cls(**data)

    @property
    def meets_from(self) -> int:
        return self.b_from if self.b_from is not None else self.days // 3


class World:
    """The agents of one arm, on the world's calendar: which pitfalls each meets, from when.
    The agents themselves are made where they live (:meth:`make_agent`: here, or in their
    container, from the same configuration)."""

    def __init__(self, config: WorldConfig, root: Path, pitfalls: list[Pitfall] | None = None):
        self.config = config
        self.root = Path(root)
        pitfalls = load(config.catalogue) if pitfalls is None else pitfalls
        if config.pitfalls:
            by_id = {p.id: p for p in pitfalls}
            unknown = [pid for pid in config.pitfalls if pid not in by_id]
            if unknown:
                raise ValueError(f"no pitfall {', '.join(unknown)} in {config.catalogue}")
            order = [by_id[pid] for pid in config.pitfalls]
        else:
            rng = random.Random(f"world-{config.seed}")
            order = list(pitfalls)
            rng.shuffle(order)
        need = config.a_only + config.shared + config.b_own
        if need > len(order):
            raise ValueError(f"the catalogue has {len(order)} pitfalls; this world needs {need}")
        self.a_only = order[: config.a_only]
        self.shared = order[config.a_only: config.a_only + config.shared]
        self.b_own = order[config.a_only + config.shared: need]
        later = config.meets_from
        self.mixes: dict[str, list[tuple[Pitfall, int]]] = {
            "A": [(p, 0) for p in self.a_only + self.shared],
            "B": [(p, later) for p in self.a_only] + [(p, 0) for p in self.shared + self.b_own],
            **{f"C{k + 1}": [(p, later) for p in self.a_only] + [(p, 0) for p in self.shared]
               for k in range(config.attesters)},
        }
        self.names = list(self.mixes)
        self.agents: list = []  # the handles of the agents (simulations.agent_host), set by the runner

    def make_agent(self, name: str) -> Agent:
        c = self.config
        return Agent(name, self.root, mix=self.mixes[name], seed=c.seed, model=c.model,
                     sessions_per_day=c.sessions_per_day, benign_share=c.benign_share,
                     lesson_model_url=c.lesson_model_url)

    def agent(self, name: str):
        return next(a for a in self.agents if a.name == name)

    @property
    def a(self):
        return self.agent("A")

    @property
    def b(self):
        return self.agent("B")

    def day_start(self, day: int) -> datetime:
        return START + timedelta(days=day)

    def night(self, day: int) -> datetime:
        """The end of the simulated day: when its nightly run happens."""
        return START + timedelta(days=day, hours=23, minutes=59, seconds=59)


class LocalHosts:
    """Every agent in this process (:class:`simulations.agent_host.LocalAgent`)."""

    where = "local processes"

    def handles(self, world: World, arm: "Arm") -> list:
        from .agent_host import LocalAgent

        return [LocalAgent(name, world.make_agent(name), world.config.engine, world.root / name)
                for name in world.names]

    def node_only(self, world: World, arm: "Arm", name: str):
        from .agent_host import LocalAgent

        return LocalAgent(name, None, world.config.engine, world.root / name)


class RemoteHosts:
    """Every agent in its own container: ``template`` names each one's service
    (``http://agent-{name}:8470``, the name in lower case)."""

    where = "containers"

    def __init__(self, template: str):
        if "{name}" not in template:
            raise ValueError("--hosts must contain {name}, e.g. http://agent-{name}:8470")
        self.template = template

    def _remote(self, name: str, **scope):
        from .agent_host import RemoteAgent

        remote = RemoteAgent(self.template.format(name=name.lower()), name)
        remote.wait_ready()
        return remote.attach(**scope)

    def handles(self, world: World, arm: "Arm") -> list:
        return [self._remote(name, world=world.config.to_dict(), arm=arm.name) for name in world.names]

    def node_only(self, world: World, arm: "Arm", name: str):
        return self._remote(name, world=world.config.to_dict(), arm=arm.name, node_only=True)

    def shutdown(self, names: list[str]) -> None:
        """The run is over: every agent's service stops (so that `docker-compose up` ends)."""
        from .agent_host import RemoteAgent

        for name in names:
            RemoteAgent(self.template.format(name=name.lower()), name, timeout=60).shutdown()


from .arm import Arm, ControlArm  # noqa: E402  (the seam: how the agents' memories are connected)
from .commons_arm import CommonsArm, CommonsStrangersArm  # noqa: E402

ARMS: dict[str, type[Arm]] = {"control": ControlArm, "commons": CommonsArm, "commons_strangers": CommonsStrangersArm}
#: The arms run when --arms is not given: the lexical model's two, the language model's three
#: (the commons with A and B as one team, and as strangers).
DEFAULT_ARMS = {"model": "control,commons", "lm": "control,commons,commons_strangers"}


# -- running and measuring ------------------------------------------------------------------------

def _coverage(lessons: list, pitfalls: list[Pitfall]) -> dict[str, float]:
    """For each pitfall, the best cosine of a lesson in a memory folder (-inf: none)."""
    out = {}
    for p in pitfalls:
        cos, lesson = best_match(lessons, situation_text(p))
        out[p.id] = cos if lesson is not None else float("-inf")
    return out


def run_arm(config: WorldConfig, arm: Arm, root: Path, hosts=None, log=None) -> dict:
    hosts = hosts or LocalHosts()
    world = World(config, root)
    a_only = {p.id for p in world.a_only}
    a_first: dict[str, str] = {}  # A-only pitfall -> when A first met it
    covered: dict[str, int] = {}  # A-only pitfall -> first night B's folder had a matching lesson
    days: list[dict] = []
    pool = ThreadPoolExecutor(max_workers=2)
    try:
        world.agents = hosts.handles(world, arm)
        arm.setup(world, hosts)
        for day in range(config.days):
            arm.begin_day(world, day, world.day_start(day))
            plans = dict(zip(world.names, pool.map(lambda agent: agent.run_day(day, world.day_start(day)),
                                                   world.agents)))
            for plan in plans["A"]:
                for enc in plan["encounters"]:
                    if enc["pitfall"] in a_only:
                        a_first.setdefault(enc["pitfall"], plan["started"])
            night = world.night(day)
            results = arm.nights(world, day, night, pool)
            extra = arm.after_nights(world, day, night, results)
            record = {"arm": arm.name, "day": day, "date": night.date().isoformat(), "model": config.model.label()}
            memories = dict(zip(world.names, pool.map(lambda agent: agent.memory(), world.agents)))
            for name in world.names:
                record[name] = _day_counts(plans[name], a_only, a_first)
                record[name]["lessons_rendered"] = len(memories[name])
                record[name]["commons_rendered"] = sum(1 for m in memories[name] if m.commons)
            cover = _coverage(memories["B"], world.a_only)
            for pid, cos in cover.items():
                if cos >= config.model.match_cosine:
                    covered.setdefault(pid, day)
            record["B"]["a_only_covered"] = sum(1 for c in cover.values() if c >= config.model.match_cosine)
            # A's own folder: what A has to share, the ceiling of what a commons could bring B
            record["A"]["a_only_covered"] = sum(1 for c in _coverage(memories["A"], world.a_only).values()
                                                if c >= config.model.match_cosine)
            record["commons"] = extra
            days.append(record)
            if log:
                b = record["B"]["repeated"]
                rate = f"{b['failed']}/{b['met']}" if b["met"] else "-"
                log(f"  {arm.name} day {day + 1:>3}: B failed {rate} A-only encounters; lessons rendered "
                    + ", ".join(f"{n} {record[n]['lessons_rendered']}" for n in world.names)
                    + (f"; {extra['line']}" if extra.get("line") else ""))
        finished = arm.finish(world)
        checks = dict(zip(world.names, pool.map(lambda agent: agent.ingest_check(), world.agents)))
        outcome = {"world": world, "days": days, "a_first": a_first, "covered": covered, "ingest": checks,
                   "finish": finished}
        outcome["arm"] = arm.summary(world, outcome)
    finally:
        pool.shutdown()
        arm.close()
        for agent in world.agents:
            try:
                agent.close()
            except Exception:  # a remote agent already gone: nothing of ours left there
                pass
    return outcome


def _day_counts(plans, a_only: set[str], a_first: dict[str, str]) -> dict:
    out: dict[str, Any] = {"sessions": len(plans), "met": 0, "failed": 0, "matched": 0,
                           "avoided_with_other_lesson": 0, "avoided_with_commons_lesson": 0,
                           "repeated": {"met": 0, "failed": 0}, "a_only": {"met": 0, "failed": 0}}
    for plan in plans:
        for enc in plan["encounters"]:
            if "chose" in enc:  # the language model: what it ran
                ran = out.setdefault("ran", {"fail": 0, "fix": 0, "lesson": 0, "commons_fixes": []})
                ran[enc["chose"]] += 1
                if enc["chose"] == "lesson" and enc.get("chose_commons"):
                    ran["commons_fixes"].append(enc["chose_commons"])
            out["met"] += 1
            out["failed"] += enc["failed"]
            out["matched"] += enc["matched"]
            if not enc["failed"] and enc["lesson_from"] and enc["pitfall"] not in enc["lesson_from"]:
                out["avoided_with_other_lesson"] += 1
            if not enc["failed"] and enc.get("commons"):
                out["avoided_with_commons_lesson"] += 1
            if enc["pitfall"] in a_only:
                out["a_only"]["met"] += 1
                out["a_only"]["failed"] += enc["failed"]
                first = a_first.get(enc["pitfall"])
                if first is not None and first < plan["started"]:  # A had met it before
                    out["repeated"]["met"] += 1
                    out["repeated"]["failed"] += enc["failed"]
                    p_error = _p_error(enc)
                    if p_error is not None:
                        out["repeated"]["p_error"] = out["repeated"].get("p_error", 0.0) + p_error
    return out


def _p_error(enc: dict) -> float | None:
    """The language model's probability of an error at an encounter: of running anything but the
    pitfall's own fix (its answer probabilities, renormalised over the candidates), or None for
    the lexical model (which draws with a fixed p)."""
    options, probs = enc.get("options"), enc.get("p")
    if not options or not probs or "fix" not in options or len(options) != len(probs):
        return None
    total = sum(probs)
    return 1.0 - probs[options.index("fix")] / total if total > 0 else None


def _rate(days: list[dict], agent: str, lo: int, hi: int) -> dict:
    """B's repeated-error rate over days [lo, hi): the encounters as drawn (``rate``) and, with
    the language model, ``expected``: the mean of its probability of an error at each of them
    (the same encounters without the draw's noise; what its answer probabilities say)."""
    chosen = [d[agent]["repeated"] for d in days if lo <= d["day"] < hi]
    met = sum(r["met"] for r in chosen)
    failed = sum(r["failed"] for r in chosen)
    out = {"days": [lo, hi - 1], "met": met, "failed": failed, "rate": round(failed / met, 4) if met else None}
    if met and any("p_error" in r for r in chosen if r["met"]):
        out["expected"] = round(sum(r.get("p_error", 0.0) for r in chosen) / met, 4)
    return out


def summarise(config: WorldConfig, outcome: dict) -> dict:
    days, world = outcome["days"], outcome["world"]
    start = config.meets_from
    week = max(1, min(7, (config.days - start) // 2))
    a_first = outcome["a_first"]
    time_to_lesson = {}
    for p in world.a_only:
        first = a_first.get(p.id)
        night = outcome["covered"].get(p.id)
        if first is None:
            time_to_lesson[p.id] = None
        elif night is None:
            time_to_lesson[p.id] = "never"
        else:
            lag = (world.night(night) - datetime.fromisoformat(first.replace("Z", "+00:00"))).total_seconds()
            time_to_lesson[p.id] = round(lag / 86400, 2)
    totals = {name: {k: sum(d[name][k] for d in days) for k in ("sessions", "met", "failed", "matched",
                                                                "avoided_with_other_lesson",
                                                                "avoided_with_commons_lesson")}
              for name in world.names}
    return {
        "b_repeated_error_rate_by_day": [
            {"day": d["day"], "met": d["B"]["repeated"]["met"], "failed": d["B"]["repeated"]["failed"],
             "rate": (round(d["B"]["repeated"]["failed"] / d["B"]["repeated"]["met"], 4)
                      if d["B"]["repeated"]["met"] else None)} for d in days],
        "b_repeated_error_rate": {
            "first_week_b_meets_them": _rate(days, "B", start, start + week),
            "last_week": _rate(days, "B", config.days - week, config.days),
            "all": _rate(days, "B", 0, config.days),
        },
        "days_from_a_first_meeting_to_a_matching_lesson_in_b_memory": time_to_lesson,
        "a_only_covered_in_b_memory_at_end": days[-1]["B"]["a_only_covered"] if days else 0,
        "a_only_covered_in_a_memory_at_end": days[-1]["A"]["a_only_covered"] if days else 0,
        "totals": totals,
        "ingest_check": {name: {k: v for k, v in c.items()} for name, c in outcome["ingest"].items()},
        "ingest_check_ok": all(c["ok"] for c in outcome["ingest"].values()),
        **({"commons": outcome["arm"]} if outcome.get("arm") else {}),
    }


def plot(out: Path, config: WorldConfig, arms: dict[str, dict]) -> list[str]:
    from .plots import pyplot, save

    plt = pyplot()
    paths = []
    fig, ax = plt.subplots(figsize=(8, 4.6))
    colours = {"control": "#c0392b", "commons": "#2471a3", "commons_strangers": "#27ae60"}
    for name, outcome in arms.items():
        series = [(d["day"] + 1, d["B"]["repeated"]) for d in outcome["days"]]
        xs = [x for x, r in series if r["met"]]
        ys = [r["failed"] / r["met"] for x, r in series if r["met"]]
        ax.plot(xs, ys, "o", ms=4, alpha=0.45, color=colours.get(name))
        smooth = []
        for x, _ in series:  # a 5-day window, pooled
            window = [r for y, r in series if x - 4 <= y <= x]
            met = sum(r["met"] for r in window)
            smooth.append((x, sum(r["failed"] for r in window) / met) if met else (x, None))
        ax.plot([x for x, y in smooth if y is not None], [y for x, y in smooth if y is not None], "-",
                color=colours.get(name), label=f"{name} arm (5-day pooled)")
    ax.axvline(config.meets_from + 1, color="#888888", ls=":", lw=1)
    ax.text(config.meets_from + 1.2, 1.02, "B starts meeting A-only pitfalls", fontsize=8, color="#555555")
    ax.set_ylim(-0.03, 1.1)
    ax.set_xlim(0.5, config.days + 0.5)
    ax.set_xlabel("simulated day")
    ax.set_ylabel("B's repeated-error rate on A-only pitfalls")
    ax.set_title(f"Two agents, seed {config.seed}: B's errors on what only A had met")
    ax.legend(loc="lower left", fontsize=8)
    fig.subplots_adjust(bottom=0.2)
    paths.append(save(fig, out / "b_error_rate.png", config.model.label()
                      + ". Simulated agents; the engine is real (openmemory run each night)."))

    commons = arms.get("commons")
    fig, axes = plt.subplots(1, 3 if commons else 2, figsize=(15 if commons else 10, 4.4))
    ax1, ax2 = axes[0], axes[1]
    for name, outcome in arms.items():
        for agent in ("A", "B"):
            ax1.plot([d["day"] + 1 for d in outcome["days"]], [d[agent]["lessons_rendered"] for d in outcome["days"]],
                     "-" if agent == "B" else "--", color=colours.get(name), label=f"{agent}, {name} arm")
        ax2.plot([d["day"] + 1 for d in outcome["days"]], [d["B"]["a_only_covered"] for d in outcome["days"]],
                 "-", color=colours.get(name), label=f"B's folder, {name} arm")
        ax2.plot([d["day"] + 1 for d in outcome["days"]], [d["A"]["a_only_covered"] for d in outcome["days"]],
                 "--", color=colours.get(name), alpha=0.6, label=f"A's folder, {name} arm")
    if commons:
        ax1.plot([d["day"] + 1 for d in commons["days"]], [d["B"]["commons_rendered"] for d in commons["days"]],
                 ":", color=colours["commons"], label="B, received (commons files)")
    ax1.set_title("lessons in the memory folder (MEMORY.md links)", fontsize=9)
    ax1.set_xlabel("simulated day")
    ax1.legend(fontsize=7)
    ax2.set_title(f"A-only pitfalls with a matching lesson in the folder (of {config.a_only})", fontsize=9)
    ax2.set_xlabel("simulated day")
    ax2.set_ylim(-0.3, config.a_only + 0.3)
    ax2.axvline(config.meets_from + 1, color="#888888", ls=":", lw=1)
    ax2.legend(fontsize=7)
    if commons:
        ax3 = axes[2]
        xs = [d["day"] + 1 for d in commons["days"]]
        for status, colour in (("candidate", "#f39c12"), ("common", "#27ae60"), ("faded", "#7f8c8d"),
                               ("revoked", "#c0392b")):
            ax3.plot(xs, [(d["commons"].get("statuses_on_b_node") or {}).get(status, 0) for d in commons["days"]],
                     "-", color=colour, label=status)
        ax3.set_title("lessons in the commons by status (B's node)", fontsize=9)
        ax3.set_xlabel("simulated day")
        ax3.legend(fontsize=7)
    fig.subplots_adjust(bottom=0.2)
    paths.append(save(fig, out / "lessons.png", config.model.label()
                      + ". Statuses: the real nodes' commons state machine (policy "
                      + f"{config.policy}, N = {config.threshold})."))
    return paths


SUMMARY_FILE = "summary.json"


def run(config: WorldConfig, out: Path, arms: list[str], *, plots: bool = True, log=None, hosts=None) -> dict:
    """Run the arms of one world (the same seeds: a paired comparison) and write DIR's files;
    the summary (also ``DIR/summary.json``). ``hosts``: where the agents live
    (:class:`LocalHosts` by default, :class:`RemoteHosts` for containers)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if config.drill and "commons" not in arms:
        raise ValueError("--drill runs in the commons arm: add it to --arms")
    if config.poison and not {"commons", "commons_strangers"} & set(arms):
        raise ValueError("--poison runs in a commons arm: add commons (or commons_strangers) to --arms")
    for name in arms:
        ARMS[name].check(config)
    hosts = hosts or LocalHosts()
    names = World(config, out / "world").names  # a bad pitfall list is refused before anything runs
    started = time.perf_counter()
    outcomes: dict[str, dict] = {}
    timings: dict[str, float] = {}
    try:
        for name in arms:
            root = out / "world" / name
            if root.exists():
                shutil.rmtree(root)
            t0 = time.perf_counter()
            outcomes[name] = run_arm(config, ARMS[name](), root, hosts, log=log)
            timings[name] = round(time.perf_counter() - t0, 1)
    finally:
        if hasattr(hosts, "shutdown"):
            hosts.shutdown(names + (["Rogue", "Revoker"] if config.drill else []))
    with open(out / "days.jsonl", "w", encoding="utf-8") as f:
        for outcome in outcomes.values():
            for day in outcome["days"]:
                f.write(json.dumps(day, separators=(",", ":")) + "\n")
    world = next(iter(outcomes.values()))["world"]
    summary: dict[str, Any] = {
        "what": "the two-agent experiment, simulated: real Claude Code transcripts and the real engine each night; "
                "the agents' use of their memory is a model",
        "agent_model": config.model.describe(),
        "world": {
            "days": config.days, "seed": config.seed, "start": START.date().isoformat(),
            "agents": list(world.names), "sessions_per_day": config.sessions_per_day,
            "benign_share": config.benign_share, "b_meets_a_only_from_day": config.meets_from,
            "engine": config.engine, "where": hosts.where,
            "pitfalls": {"a_only": [p.id for p in world.a_only], "shared": [p.id for p in world.shared],
                         "b_own": [p.id for p in world.b_own]},
            "catalogue": str(config.catalogue),
        },
        "arms": {name: summarise(config, outcome) for name, outcome in outcomes.items()},
        "not_measured": {} if "commons" in outcomes else {
            "commons arm": "not run (--arms control,commons runs it)",
            "promotions to common, lessons that were wrong": "commons arm only",
        },
        "plots": [],
        "seconds": None,
        "seconds_by_arm": timings,
    }
    if "commons" in outcomes and outcomes["commons"].get("finish"):
        summary["drill"] = outcomes["commons"]["finish"]
    summary["decisions"] = sum(d[n]["met"] for o in outcomes.values() for d in o["days"] for n in world.names)
    if getattr(config.model, "kind", "") == "lm":
        summary["decisions_by_what_ran"] = {
            arm: {k: sum((d[n].get("ran") or {}).get(k, 0) for d in o["days"] for n in world.names)
                  for k in ("fail", "fix", "lesson")} for arm, o in outcomes.items()}
        summary["encounters"] = summary["decisions"]  # every agent's, the lexical model's included
        summary["decisions"] = sum(sum(r.values()) for r in summary["decisions_by_what_ran"].values())
    poisons = {arm: ((summary["arms"][arm].get("commons") or {}).get("poison")) for arm in outcomes}
    for arm, poison in poisons.items():
        if poison is None:
            continue
        if getattr(config.model, "kind", "") == "lm":  # honest decisions that ran an attacker's command
            theirs = set(poison.get("records") or [])
            poison["misled"] = sum(1 for d in outcomes[arm]["days"] for n in world.names
                                   for c in (d[n].get("ran") or {}).get("commons_fixes", []) if c in theirs)
            poison["misled_note"] = "honest decisions (every agent, every day) whose command was an attacker's fix"
        poisons[arm] = {k: v for k, v in poison.items() if k != "nights"}
    poisons = {k: v for k, v in poisons.items() if v is not None}
    if poisons:
        summary["poison"] = poisons.get("commons") or next(iter(poisons.values()))
        summary["poison_by_arm"] = poisons
    if getattr(config.model, "kind", "") == "lm":
        summary["agent_model"] = config.model.describe()  # with the runtime's figures, after the run
    if plots:
        summary["plots"] = plot(out, config, outcomes)
        if summary.get("drill"):
            from .commons_arm import plot_drill

            summary["plots"].append(plot_drill(out, summary["drill"]))
    summary["seconds"] = round(time.perf_counter() - started, 1)
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return summary


def _fmt(x: dict) -> str:
    return f"{x['rate']:.2f} ({x['failed']}/{x['met']})" if x["rate"] is not None else "- (0 met)"


def _print(summary: dict) -> None:
    w = summary["world"]
    print(f"Two agents ({', '.join(w['agents'])}), {w['days']} days, seed {w['seed']}, engine {w['engine']}, "
          f"as {w['where']}: {len(w['pitfalls']['a_only'])} A-only pitfalls (B meets them from day "
          f"{w['b_meets_a_only_from_day'] + 1}), {len(w['pitfalls']['shared'])} shared, "
          f"{len(w['pitfalls']['b_own'])} B's own.")
    m = summary["agent_model"]
    if m["what"] == "language model":
        print(f"Agent: a language model, {m['model']} (sha256 {str(m['sha256'])[:16]}...): {m['is']}; "
              f"{m['choice']}; {summary['decisions']} decisions.")
        for arm, ran in (summary.get("decisions_by_what_ran") or {}).items():
            print(f"  {arm}: ran the failing call {ran['fail']}, the fix {ran['fix']}, a lesson's other fix "
                  f"{ran['lesson']}")
    else:
        print(f"Agent model (a model, not a measured agent): avoids a pitfall with p={m['p_avoid']} when a "
              f"rendered lesson matches it, cosine >= {m['match']['cosine_at_least']} ({m['match']['embedding']}).")
    for name, arm in summary["arms"].items():
        r = arm["b_repeated_error_rate"]
        print(f"\n{name} arm: B's repeated-error rate on A-only pitfalls: first week B meets them "
              f"{_fmt(r['first_week_b_meets_them'])}, last week {_fmt(r['last_week'])}, all {_fmt(r['all'])}")
        lags = arm["days_from_a_first_meeting_to_a_matching_lesson_in_b_memory"]
        print("  days from A's first meeting to a matching lesson in B's memory folder: "
              + ", ".join(f"{k} {v}" for k, v in lags.items()))
        print("  A-only pitfalls a lesson in the memory folder matches, at the end: "
              f"B {arm['a_only_covered_in_b_memory_at_end']}"
              f", A {arm['a_only_covered_in_a_memory_at_end']} (what A has to share) of {len(w['pitfalls']['a_only'])}")
        if arm.get("commons"):
            from .commons_arm import print_commons

            print_commons(arm["commons"])
        print("  ingest check (transcripts give the sessions and error episodes meant): "
              + ("ok" if arm["ingest_check_ok"] else "MISMATCH, see summary.json"))
    if summary.get("poison"):
        p = summary["poison"]
        print(f"\npoison: {p['published']} published ({p['refused_at_source']} refused at the attacker's own node), "
              f"{p['rendered']} honest memory folders ever held any of it, {p['honest_votes_counted']} honest votes "
              f"counted for it, {p['common_anywhere']} common anywhere"
              + (f", {p['misled']} honest decisions ran its command" if p.get("misled") is not None else ""))
    if summary.get("drill"):
        from .commons_arm import print_drill

        print_drill(summary["drill"])
    for what, why in summary["not_measured"].items():
        print(f"not measured: {what}: {why}")
    for path in summary["plots"]:
        print(f"plot: {path}")
    print(f"{summary['seconds']} s ({', '.join(f'{k} {v} s' for k, v in summary['seconds_by_arm'].items())})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simulations.two_agents", description=__doc__.split("\n")[0],
                                     epilog="The agents' use of memory is a model (p, the matching): see "
                                            "docs/simulations.md.")
    parser.add_argument("--days", type=int, default=WorldConfig.days)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="output folder (created; world/ inside is replaced)")
    parser.add_argument("--attesters", type=int, default=WorldConfig.attesters,
                        help="agents beside A and B (attesters in the commons)")
    parser.add_argument("--arms", default=None,
                        help="comma-separated: control, commons (A and B one team), commons_strangers (default: "
                        "control,commons; with --agent lm all three, the same world)")
    parser.add_argument("--agent", choices=["model", "lm"], default="model",
                        help="the agents: model, the lexical model (fast: a matching lesson avoids the pitfall "
                        "with p); lm, a local language model choosing the step's command from what MEMORY.md says "
                        "(pip install -e '.[agent-lm]'; python -m simulations.lm fetch)")
    parser.add_argument("--lm-model", default="", help="--agent lm: the GGUF file (default $OPENMEMORY_LM_MODEL or "
                        "~/.cache/openmemory/models/...; a larger model works the same)")
    parser.add_argument("--lm-cache", default=None, help="--agent lm: the choices' cache file, kept between runs "
                        "(default DIR/lm_choices.jsonl, new each run)")
    parser.add_argument("--lm-threads", type=int, default=0, help="--agent lm: llama.cpp threads (default: cores, "
                        "at most 4)")
    parser.add_argument("--lm-agents", default="",
                        help="--agent lm: the agents the language model plays, comma-separated (default: every "
                        "agent; the others are the lexical model)")
    parser.add_argument("--lm-argmax", action="store_true",
                        help="--agent lm: run the most probable command instead of sampling")
    parser.add_argument("--lesson-model", action="store_true",
                        help="the local model (simulations.lm, the agent-lm extra) writes every engine's lessons, "
                        "served on loopback as $OPENMEMORY_LESSON_MODEL_URL; the observation rule decides what "
                        "is kept")
    parser.add_argument("--drill", action="store_true",
                        help="the poisoned-lesson drill after the last day (commons arm)")
    parser.add_argument("--poison", action="store_true",
                        help="an attacker and its sybils publish wrong fixes and prose on day 1 (commons arm); "
                        "the summary's poison part says what reached the honest agents")
    parser.add_argument("--sessions-per-day", type=int, default=WorldConfig.sessions_per_day)
    parser.add_argument("--a-only", type=int, default=WorldConfig.a_only, help="pitfalls only A meets at first")
    parser.add_argument("--shared", type=int, default=WorldConfig.shared)
    parser.add_argument("--b-own", type=int, default=WorldConfig.b_own)
    parser.add_argument("--b-from", type=int, default=None, help="day B starts meeting A-only pitfalls (0-based)")
    parser.add_argument("--pitfalls", default="",
                        help="comma-separated pitfall ids, A-only first, then shared, then B's own "
                        "(default: the catalogue shuffled with the seed)")
    parser.add_argument("--p-avoid", type=float, default=AgentModel.p_avoid,
                        help="agent model: probability of avoiding a pitfall a lesson matches")
    parser.add_argument("--match-cosine", type=float, default=AgentModel.match_cosine,
                        help="agent model: cosine a lesson's text needs with the situation")
    parser.add_argument("--clock-rate", type=float, default=WorldConfig.clock_rate,
                        help="the nodes' clock: world seconds per wall second (default 60)")
    parser.add_argument("--threshold", type=int, default=WorldConfig.threshold,
                        help="the nodes' [commons] threshold N (default 3)")
    parser.add_argument("--policy", choices=["trusted", "open"], default=WorldConfig.policy)
    parser.add_argument("--engine", choices=sorted(ENGINES), default="process")
    parser.add_argument("--hosts", metavar="URL_TEMPLATE",
                        help="the agents run in containers: each one's service, e.g. http://agent-{name}:8470 "
                        "(docker-compose.yml); default: every agent here, as local processes")
    parser.add_argument("--catalogue", type=Path, default=CATALOGUE)
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def _agent_model(args):
    if args.agent == "lm":
        cache = args.lm_cache if args.lm_cache is not None else str(Path(args.out) / "lm_choices.jsonl")
        if args.lm_cache is None and Path(cache).exists():
            Path(cache).unlink()  # a new run computes its choices (--lm-cache FILE keeps them)
        return LanguageAgentModel(model_path=args.lm_model, cache_path=cache, threads=args.lm_threads,
                                  sample=not args.lm_argmax, match_cosine=args.match_cosine, p_avoid=args.p_avoid,
                                  agents=tuple(a.strip() for a in args.lm_agents.split(",") if a.strip()))
    return AgentModel(p_avoid=args.p_avoid, match_cosine=args.match_cosine)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    arms = [a.strip() for a in (args.arms or DEFAULT_ARMS[args.agent]).split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        parser.error(f"unknown arm(s) {', '.join(unknown) or '(none)'}; known: {', '.join(ARMS)}")
    try:
        config = WorldConfig(days=args.days, seed=args.seed, attesters=args.attesters,
                             sessions_per_day=args.sessions_per_day, a_only=args.a_only, shared=args.shared,
                             b_own=args.b_own, b_from=args.b_from, catalogue=args.catalogue, engine=args.engine,
                             model=_agent_model(args),
                             pitfalls=tuple(p.strip() for p in args.pitfalls.split(",") if p.strip()),
                             clock_rate=args.clock_rate, threshold=args.threshold, policy=args.policy,
                             drill=args.drill, poison=args.poison)
        hosts = RemoteHosts(args.hosts) if args.hosts else None
        if args.hosts and args.agent == "lm":
            raise ValueError("--agent lm runs the model in this process: not with --hosts")
    except ValueError as exc:
        parser.error(str(exc))
    if config.drill and "commons" not in arms:
        parser.error("--drill runs in the commons arm: add it to --arms")
    log = None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    writer = contextlib.nullcontext()
    if args.lesson_model:
        if args.hosts:
            parser.error("--lesson-model serves the model on this machine's loopback: not with --hosts")
        from .lm import ChatServer

        try:
            writer = ChatServer(args.lm_model and Path(args.lm_model), threads=args.lm_threads or None)
        except (ImportError, OSError, ValueError) as exc:
            print(f"two_agents: --lesson-model needs the agent-lm extra and the model (pip install -e "
                  f"'.[agent-lm]'; python -m simulations.lm fetch): {exc}", file=sys.stderr)
            return 2
    try:
        with writer as server:
            if server is not None:
                config = replace(config, lesson_model_url=server.url)
            summary = run(config, args.out, arms, plots=not args.no_plots, log=log, hosts=hosts)
            if server is not None:
                summary["lesson_writer"] = {"url": server.url, "answers": len(server.answers),
                                            "seconds": round(sum(a["seconds"] for a in server.answers), 1)}
                (Path(args.out) / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    except CommonsUnavailable as exc:
        print(f"two_agents: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"two_agents: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        _print(summary)
    ok = all(arm["ingest_check_ok"] for arm in summary["arms"].values())
    return 0 if ok and (summary.get("drill") or {}).get("ok", True) else 1


if __name__ == "__main__":
    sys.exit(main())
