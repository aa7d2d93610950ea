"""The pitfall world: a catalogue of recurring failures of real tools (``pitfalls.toml``).

Each pitfall is a situation an agent meets (pushing a new branch, reading a huge fixture,
installing with pip on a PEP 668 system), the call that fails there with its output as the tool
prints it, and the call(s) that succeed after. The outputs are taken from the real Claude Code
transcripts in ``../shared/data/claude-code`` (``source = "real: ..."``) or are well-known
failures of git, npm, pip/uv, pytest, docker, cargo, make, mix and go (``source = "known:
..."``); the catalogue's header documents every field.

:func:`load` reads and checks the catalogue (a malformed entry is a :class:`CatalogueError`
naming the entry and the field); :meth:`Pitfall.encounter` fills its placeholders for one
meeting (a fresh branch name, number, hash, the agent's own directory), so that two meetings
differ the way two real ones do while the engine's normalisation still sees one failure.
"""

from __future__ import annotations

import random
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CATALOGUE", "FORMS", "Call", "Pitfall", "Encounter", "CatalogueError", "load", "fill"]

CATALOGUE = Path(__file__).with_name("pitfalls.toml")
#: How Claude Code reports a failed call: "exit" ("Exit code N" then the output, as Bash
#: results are), "tool_use_error" (wrapped in <tool_use_error>), "plain" (the text alone).
FORMS = ("exit", "tool_use_error", "plain")
TOOLS = ("Bash", "Read", "Edit", "Write", "Task", "Glob", "Grep")
PLACEHOLDERS = ("branch", "n", "sha", "stamp", "cwd", "project", "home")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
_WORDS = ("cache", "login", "search", "export", "retry", "upload", "billing", "audit", "theme", "queue",
          "router", "session", "invoice", "filter", "import", "metrics", "webhook", "profile")


class CatalogueError(ValueError):
    """A catalogue entry that cannot be used."""


@dataclass(frozen=True)
class Call:
    tool: str
    input: dict[str, Any]
    output: str
    form: str = ""  # failing calls only
    exit_code: int | None = None

    def filled(self, values: dict[str, str]) -> "Call":
        return Call(self.tool, _fill_value(self.input, values), fill(self.output, values), self.form, self.exit_code)

    @property
    def command(self) -> str:
        """What the engine sees as the call's command (Bash: the command; file tools: the path)."""
        return str(self.input.get("command") or self.input.get("file_path") or self.input.get("description") or "")


@dataclass(frozen=True)
class Pitfall:
    id: str
    program: str
    source: str
    situation: str
    tasks: tuple[str, ...]
    fail: Call
    resolve: tuple[Call, ...]

    @property
    def real(self) -> bool:
        return self.source.startswith("real:")

    def encounter(self, rng: random.Random, cwd: str, home: str) -> "Encounter":
        """The pitfall as met once: placeholders filled with fresh volatile values."""
        values = placeholder_values(rng, cwd, home)
        return Encounter(self, rng.choice(self.tasks), self.fail.filled(values),
                         tuple(c.filled(values) for c in self.resolve), values)


@dataclass(frozen=True)
class Encounter:
    pitfall: Pitfall
    task: str
    fail: Call
    resolve: tuple[Call, ...]
    values: dict[str, str] = field(default_factory=dict)


def placeholder_values(rng: random.Random, cwd: str, home: str) -> dict[str, str]:
    return {
        "branch": f"{rng.choice(_WORDS)}-{rng.randint(100, 999)}",
        "n": str(rng.randint(10, 99999)),
        "sha": "".join(rng.choices("0123456789abcdef", k=7)),
        "stamp": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}_"
                 f"{rng.randint(0, 59):02d}_{rng.randint(0, 59):02d}_{rng.randint(0, 999):03d}Z",
        "cwd": cwd,
        "project": cwd.rstrip("/").rsplit("/", 1)[-1],
        "home": home,
    }


def fill(text: str, values: dict[str, str]) -> str:
    """Replace the known ``{placeholder}`` names; any other brace is left as it is."""
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def _fill_value(value: Any, values: dict[str, str]) -> Any:
    if isinstance(value, str):
        return fill(value, values)
    if isinstance(value, dict):
        return {k: _fill_value(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill_value(v, values) for v in value]
    return value


def _text(entry: dict, key: str, where: str, *, empty: bool = False) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise CatalogueError(f"{where}: {key!r} must be a{'' if empty else ' non-empty'} string")
    return value.strip("\n")


def _call(entry: Any, where: str, failing: bool) -> Call:
    if not isinstance(entry, dict):
        raise CatalogueError(f"{where}: must be a table")
    tool = _text(entry, "tool", where)
    if tool not in TOOLS:
        raise CatalogueError(f"{where}: unknown tool {tool!r} (known: {', '.join(TOOLS)})")
    args = entry.get("input")
    if not isinstance(args, dict) or not args:
        raise CatalogueError(f"{where}: 'input' must be a non-empty table")
    if tool == "Bash" and not isinstance(args.get("command"), str):
        raise CatalogueError(f"{where}: a Bash call needs input.command")
    if tool in ("Read", "Edit", "Write") and not isinstance(args.get("file_path"), str):
        raise CatalogueError(f"{where}: a {tool} call needs input.file_path")
    output = _text(entry, "output", where, empty=not failing)
    form, code = "", None
    if failing:
        form = entry.get("form")
        if form not in FORMS:
            raise CatalogueError(f"{where}: 'form' must be one of {', '.join(FORMS)}")
        code = entry.get("exit_code")
        if form == "exit" and (not isinstance(code, int) or code <= 0 or code > 255):
            raise CatalogueError(f"{where}: an 'exit' failure needs an exit_code from 1 to 255")
        if form != "exit" and code is not None:
            raise CatalogueError(f"{where}: only an 'exit' failure has an exit_code")
    unknown = set(entry) - {"tool", "input", "output", "form", "exit_code"}
    if unknown:
        raise CatalogueError(f"{where}: unknown keys {sorted(unknown)}")
    return Call(tool, args, output, form, code)


def load(path: Path | str = CATALOGUE) -> list[Pitfall]:
    """Read and check the catalogue; raise :class:`CatalogueError` for a bad entry."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{path}: not valid TOML: {exc}") from None
    entries = data.get("pitfall")
    if not isinstance(entries, list) or not entries:
        raise CatalogueError(f"{path}: no [[pitfall]] entries")
    out: list[Pitfall] = []
    seen: set[str] = set()
    for k, entry in enumerate(entries):
        where = f"{path}: pitfall {k + 1}"
        ident = _text(entry, "id", where)
        where = f"{path}: pitfall {ident!r}"
        if ident in seen:
            raise CatalogueError(f"{where}: duplicate id")
        seen.add(ident)
        source = _text(entry, "source", where)
        if not source.startswith(("real:", "known:")):
            raise CatalogueError(f"{where}: 'source' must start with 'real:' or 'known:'")
        tasks = entry.get("tasks")
        if not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) and t.strip() for t in tasks):
            raise CatalogueError(f"{where}: 'tasks' must be a non-empty list of strings")
        resolve = entry.get("resolve")
        if not isinstance(resolve, list) or not resolve:
            raise CatalogueError(f"{where}: needs at least one [[pitfall.resolve]] call")
        unknown = set(entry) - {"id", "program", "source", "situation", "tasks", "fail", "resolve"}
        if unknown:
            raise CatalogueError(f"{where}: unknown keys {sorted(unknown)}")
        out.append(Pitfall(
            id=ident, program=_text(entry, "program", where), source=source,
            situation=_text(entry, "situation", where), tasks=tuple(tasks),
            fail=_call(entry.get("fail"), f"{where} [fail]", True),
            resolve=tuple(_call(c, f"{where} [resolve {i + 1}]", False) for i, c in enumerate(resolve)),
        ))
    return out


# -- the catalogue against the real engine ---------------------------------------------------------

def check(root: Path, pitfalls: list[Pitfall] | None = None, *, match_cosine: float | None = None,
          group: int = 20) -> dict:
    """Meet every pitfall in two sessions (in separate agents of ``group`` pitfalls, so that no
    memory folder reaches its 30-lesson limit), run the real engine on them, and report per
    pitfall: whether the transcripts ingested as meant, the lesson the engine made of it, and how
    that lesson's text matches its own situation and the others' (the agent model's matching)."""
    from datetime import datetime, timedelta, timezone

    from .agents import Agent, AgentModel, InProcessEngine, _vector, best_match, ingest_check, situation_text

    pitfalls = load() if pitfalls is None else pitfalls
    model = AgentModel(p_avoid=0.0, **({} if match_cosine is None else {"match_cosine": match_cosine}))
    day0 = datetime(2026, 4, 1, tzinfo=timezone.utc)
    rows: dict[str, dict] = {}
    checks = []
    for g in range(0, len(pitfalls), group):
        part = pitfalls[g:g + group]
        agent = Agent(f"check{g // group}", root, seed=1, model=model, mix=[], sessions_per_day=1, benign_share=0.0)
        taught: dict[str, str] = {}
        for rep in range(2):
            for i, pitfall in enumerate(part):
                plan = agent._session(rep, day0 + timedelta(days=rep, minutes=7 * i), pitfall)
                agent.plans.append(plan)
                taught[plan.session_id] = pitfall.id
        night = day0 + timedelta(days=1, hours=23, minutes=59)
        InProcessEngine().run(agent, night)
        checks.append(ingest_check(agent))
        lessons = agent.memory()
        commons = _commons_forms(agent, night)
        for pitfall in part:
            own = [l for l in lessons if any(taught.get(s) == pitfall.id for s in l.sessions)]
            own_cos, own_lesson = best_match(own, situation_text(pitfall)) if own else (None, None)
            others = [(best_match([l], situation_text(p))[0], p.id) for l in own for p in part if p is not pitfall]
            rows[pitfall.id] = {
                "lesson": own_lesson.texts[0] if own_lesson else None,
                "merged_with": sorted({taught[s] for l in own for s in l.sessions if s in taught} - {pitfall.id}),
                "cosine_own_situation": round(own_cos, 3) if own_cos is not None else None,
                "best_other": max(others) if others else None,
                "matched": own_cos is not None and own_cos >= model.match_cosine,
            }
            # the lesson's commons form (what A would publish, what B would read): its cosine too
            forms = [commons[lid] for lid, sessions in commons["_sessions"].items()
                     if any(taught.get(sid) == pitfall.id for sid in sessions) and commons.get(lid)]
            if forms:
                cos = max(float(_vector(t) @ _vector(situation_text(pitfall))) for t in forms)
                rows[pitfall.id].update(commons_text=forms[0], cosine_commons=round(cos, 3),
                                        commons_matched=cos >= model.match_cosine)
            else:
                rows[pitfall.id].update(commons_text=None, cosine_commons=None, commons_matched=False)
        # Cross-matches: every lesson of this agent against every other pitfall's situation.
        for pitfall in part:
            wrong = [l for l in lessons if not any(taught.get(s) == pitfall.id for s in l.sessions)]
            cos, lesson = best_match(wrong, situation_text(pitfall))
            rows[pitfall.id]["best_wrong_lesson_cosine"] = round(cos, 3) if lesson else None
    learned = [r for r in rows.values() if r["lesson"]]
    return {
        "pitfalls": len(pitfalls), "real": sum(p.real for p in pitfalls), "match_cosine": model.match_cosine,
        "ingest_ok": all(c["ok"] for c in checks), "ingest": checks,
        "with_a_lesson": len(learned),
        "own_lesson_matches": sum(r["matched"] for r in rows.values()),
        "commons_form_matches": sum(r["commons_matched"] for r in rows.values()),
        "a_wrong_lesson_matches": sum((r["best_wrong_lesson_cosine"] or -1) >= model.match_cosine
                                      for r in rows.values()),
        "rows": rows,
    }


def _commons_forms(agent, now) -> dict:
    """Each lesson's commons form, as ``openmemory publish --dry-run`` shows it for a project
    opted in with no strength threshold (nothing is sent): lesson id -> text, and
    ``_sessions``: lesson id -> the sessions of its episodes."""
    import sqlite3

    from openmemory_local.core.config import load_config
    from openmemory_local.commons.publish import dry_run, enable
    from openmemory_local.storage.store import Store

    (agent.data / "config.toml").write_text("[publish]\nmin_strength = 0.001\n", encoding="utf-8")
    with Store.open(load_config(environ=agent.environ())) as store:
        enable(store, agent.cwd, now)
        report = dry_run(store, now)
    out: dict = {r["lesson"]: r["text"] for r in report["records"]}
    con = sqlite3.connect(f"file:{agent.data / 'openmemory.db'}?mode=ro", uri=True)
    try:
        sessions: dict[int, set[str]] = {}
        for lid, sid in con.execute("SELECT m.lesson_id, e.session_id FROM lesson_members m JOIN episodes e "
                                    "ON e.id = m.episode_id WHERE e.session_id IS NOT NULL"):
            sessions.setdefault(lid, set()).add(sid)
    finally:
        con.close()
    out["_sessions"] = sessions
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json
    import tempfile
    from collections import Counter

    parser = argparse.ArgumentParser(prog="python -m simulations.pitfalls", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="meet every pitfall twice through the real engine")
    parser.add_argument("--match-cosine", type=float, default=None, help="the agent model's threshold")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    pitfalls = load()
    if not args.check:
        by = Counter(p.program for p in pitfalls)
        print(f"{len(pitfalls)} pitfalls ({sum(p.real for p in pitfalls)} from the real transcripts): "
              + ", ".join(f"{k} {v}" for k, v in by.most_common()))
        for p in pitfalls:
            print(f"  {p.id:30} {p.program:12} {p.source[:80]}")
        return 0
    with tempfile.TemporaryDirectory(prefix="om-pitfalls-") as tmp:
        report = check(Path(tmp), pitfalls, match_cosine=args.match_cosine)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["ingest_ok"] else 1
    print(f"{report['pitfalls']} pitfalls, each met in 2 sessions, through the real engine; agent model's "
          f"matching at cosine >= {report['match_cosine']}:")
    for pid, r in report["rows"].items():
        mark = "match" if r["matched"] else "     "
        other = f"{r['best_wrong_lesson_cosine']:.2f}" if r["best_wrong_lesson_cosine"] is not None else "-"
        own = f"{r['cosine_own_situation']:.2f}" if r["cosine_own_situation"] is not None else "-"
        print(f"  {mark} {pid:30} own {own}  best wrong lesson {other}  {(r['lesson'] or '(no lesson)')[:90]}")
        if r["commons_text"]:
            print(f"  {'match' if r['commons_matched'] else '     '} {'':30} commons form {r['cosine_commons']:.2f}  "
                  f"{r['commons_text'][:90]}")
    print(f"transcripts ingested as meant: {'yes' if report['ingest_ok'] else 'NO'}; "
          f"{report['with_a_lesson']} of {report['pitfalls']} made a lesson; its own lesson matches "
          f"{report['own_lesson_matches']} (its commons form {report['commons_form_matches']}); a lesson of another "
          f"pitfall matches {report['a_wrong_lesson_matches']}")
    return 0 if report["ingest_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
