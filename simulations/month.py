"""Six months of an agent's life in seconds: lessons that keep predicting stay, lessons that
stop predicting fade.

Every simulated day, a few sessions happen in one project (``simulations/workload.py``
supplies one-off failures around them), then the nightly job runs at 23:00 with the
injected clock: sleep, render into a memory folder, morning report. Three stories run
through the noise:

* ``git push`` fails for want of an upstream branch every few days, all along, and is
  pushed with ``--set-upstream`` (its resolution) every time: its lesson is learned,
  predicted, confirmed again and again, and stays strong;
* ``docker compose up`` fails on a taken port during the first ten days, then runs fine
  (the owner fixed it): its situation keeps recurring without the failure, so its
  predictions fail, its strength decays, it leaves the memory folder and is archived;
* the person corrects the agent once (``pip`` vs ``uv``): one correction is a lesson, and
  every later session that runs ``uv`` confirms its prediction (the situation it names).

    python simulations/month.py [--days 180] [--quiet]

Prints one line per day and the memory folder's index at the end; exits non-zero if the
stories did not end as described. With the default thresholds a lesson at full strength
(5) that stops predicting leaves the memory folder after about two months (failed
predictions, then decay below ``render_min_strength``) and is archived after about five.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmemory_local.core.clock import iso  # noqa: E402
from openmemory_local.core.config import Config  # noqa: E402
from openmemory_local.ingest.episodes import Episode  # noqa: E402
from openmemory_local.ingest.transcripts import add_episodes  # noqa: E402
from openmemory_local.sleep.lessons import lesson_rows  # noqa: E402
from openmemory_local.render.memory_folder import render  # noqa: E402
from openmemory_local.render.report import make_report  # noqa: E402
from openmemory_local.sleep.passes import sleep  # noqa: E402
from openmemory_local.storage.store import Store  # noqa: E402
from simulations.workload import Workload  # noqa: E402

START = datetime(2026, 4, 1, tzinfo=timezone.utc)
CWD = "/home/dev/src/shop"
#: What made the push failure go away in its session (openmemory_local.ingest.resolutions).
UPSTREAM = {"kind": "changed", "tool": "Bash", "command": "git push --set-upstream origin <branch>",
            "norm": "git push --set-upstream origin {branch}", "delta": ["--set-upstream"], "calls_after": 0,
            "after": [], "line": 3}


def _error(key, sid, when, command, first, branch, resolution=None) -> Episode:
    fields = {"tool": "Bash", "command": command, "description": "", "failure": "exit_code", "exit_code": 1,
              "first_line": first, "output": first, "cwd": CWD, "branch": branch, "resolution": resolution}
    return Episode("error", key, f"Bash `{command}` failed: {first}", fields, sid, None, CWD, iso(when), 2)


def day_of_life(day: int, rng: random.Random, noise: Workload) -> list[Episode]:
    out = []
    base = START + timedelta(days=day, hours=9)
    for n in range(rng.randint(2, 4)):
        sid = f"day{day:02d}-s{n}"
        when = base + timedelta(hours=2 * n)
        branch = f"feature-{day}-{n}"
        commands = {"mix test": 1, "git commit": 1, "uv sync": 1}
        lines = list(commands)
        if day % 3 == n % 3:  # pushing a new branch, every few days
            commands["git push"] = 1
            lines.append(f"git push --set-upstream origin {branch}")  # how the push went through
            if rng.random() < 0.5:  # half the time without setting the upstream first
                out.append(_error(f"{sid}-push", sid, when + timedelta(minutes=30), "git push 2>&1",
                                  f"fatal: The current branch {branch} has no upstream branch.", branch, UPSTREAM))
        if n == 0 and day % 2 == 0:  # the database started every other day
            commands["docker compose"] = 1
            lines.append("docker compose up -d db")
            if day < 10:  # a port clash, until it was fixed on day 10: afterwards it just works
                out.append(_error(f"{sid}-docker", sid, when + timedelta(minutes=5), "docker compose up -d db",
                                  f"Error response from daemon: port is already allocated: 0.0.0.0:{5432 + day}",
                                  branch))
        if day == 3 and n == 0:
            said = "no, this project uses uv, not pip"
            fields = {"message": said, "opening": "no", "agent_statement": "I'll install it with pip.",
                      "agent_action": {"tool": "Bash", "command": "pip install httpx", "line": 9},
                      "cwd": CWD, "branch": branch}
            out.append(Episode("correction", f"{sid}-c", f'The person corrected the agent: "{said}".', fields, sid,
                               None, CWD, iso(when + timedelta(minutes=12)), 9))
        for k, ep in enumerate(e for e in noise.session(when) if e.kind == "error"):
            fields = dict(ep.fields, cwd=CWD, branch=branch)
            out.append(Episode("error", f"{sid}-noise{k}", ep.text, fields, sid, None, CWD, ep.created, 3))
        fields = {"commands": commands, "command_lines": lines, "files_edited": ["lib/shop.ex"],
                  "files_read": [], "cwd": CWD, "branch": branch}
        out.append(Episode("session", sid, f"Session in shop on branch {branch}. Ran {', '.join(commands)}.",
                           fields, sid, None, CWD, iso(when), 1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=180)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    rng = random.Random(11)
    noise = Workload(seed=11, errors_per_session=2, one_off=1.0)  # one-off failures only
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="om-month-") as tmp:
        memory = Path(tmp) / "memory"
        store = Store.open(Config(home=Path(tmp) / "home"))
        for day in range(args.days):
            night = START + timedelta(days=day, hours=23)
            add_episodes(store, day_of_life(day, rng, noise), now=night)
            result = sleep(store, night)
            render(store, night, memory_dir=memory)
            make_report(store, night)
            if not args.quiet:
                shown = ", ".join(f"#{l['id']} {l['strength']:.2f}" for l in lesson_rows(store)[:4])
                print(f"day {day + 1:>2}: {result.learn['surprises']:>2} surprises, "
                      f"{len(result.learn['learned'])} learned, {len(result.verify['confirmed'])} confirmed, "
                      f"{len(result.verify['failed'])} failed, {result.decay['episodes_archived']:>2} episodes "
                      f"archived; lessons {shown}")
        everything = lesson_rows(store, states=("active", "archived"))
        index = (memory / "MEMORY.md").read_text()
        store.close()
    seconds = time.perf_counter() - started
    push = next(l for l in everything if "`git push`" in l["text"])
    docker = next(l for l in everything if "`docker compose`" in l["text"])
    fix = next(l for l in everything if l["kind"] == "correction")
    print(f"\n{args.days} days in {seconds:.1f} s.\n")
    for lesson in (push, docker, fix):
        print(f"lesson {lesson['id']} [{lesson['state']}] strength {lesson['strength']:.2f}, predictions "
              f"{lesson['record']['confirmed']} confirmed / {lesson['record']['failed']} failed: {lesson['text']}")
    print("\nMEMORY.md at the end:\n" + index)
    checks = {
        "the recurring failure stays strong and keeps being confirmed":
            push["state"] == "active" and push["strength"] >= 2 and push["record"]["confirmed"] >= 3,
        "the fixed failure's predictions failed and it faded out of the memory folder":
            docker["record"]["failed"] >= 2 and docker["file_name"] not in index,
        "the fixed failure is archived within six months": args.days < 180 or docker["state"] == "archived",
        "one correction is a lesson, kept alive by the sessions that use uv":
            fix["seen"] == 1 and fix["state"] == "active" and fix["record"]["confirmed"] >= 3,
    }
    for name, ok in checks.items():
        print(("ok    " if ok else "FAILED ") + name)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
