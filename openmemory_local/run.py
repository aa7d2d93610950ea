"""``openmemory run``: the job a user schedules (nightly, or from a hook).

A run is a list of steps, each a function ``(store, now, report) -> dict`` whose result is
stored under its name in the run's report (later steps can read earlier ones):

1. ``ingest``: the default transcript sources (Claude Code's ``projects`` folder, Codex's
   ``sessions``, Gemini CLI's ``tmp``);
2. ``replay``: a history brought in is slept on as it happened, one sleep at the end of each
   past day that holds activity (:mod:`openmemory_local.sleep.replay`; nothing on a store slept
   every night);
3. ``sleep``: decay, lessons, verify, predict (:mod:`openmemory_local.sleep.passes`);
4. ``publish``: for opted-in projects, the lessons strong enough go to the commons node
   (:mod:`openmemory_local.commons.publish`); no project opted in, nothing happens; no node
   running, nothing fails: the records wait in the queue and the report says so;
5. ``commons``: pull what the node received, verify the received lessons' predictions, send
   the attestations (:mod:`openmemory_local.commons.receive`; a node that is down only delays the
   pull and the attestations);
6. ``render``: the lessons into the projects' memory folders (:mod:`openmemory_local.render.memory_folder`),
   the received ones as their own layer, and into the ``AGENTS.md`` / ``GEMINI.md`` of the
   projects Codex and Gemini CLI worked in (:mod:`openmemory_local.render.agents`);
7. ``commons_predict``: a prediction for each received lesson newly rendered in a project;
8. ``report``: the morning report of what changed (:mod:`openmemory_local.render.report`).

A run with nothing new changes nothing on disk: ingest opens no unchanged file, sleep and
render write only what changed, and no events means no report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from openmemory_local.ingest.transcripts import ingest
from openmemory_local.storage.store import Store

__all__ = ["Step", "STEPS", "run_job", "ingest_step", "replay_step", "sleep_step", "publish_step", "commons_step",
           "render_step", "commons_predict_step", "report_step"]


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[Store, datetime, dict], dict]


def ingest_step(store: Store, now: datetime, report: dict) -> dict:
    """Ingest every default source (``Config.sources``: Claude Code's projects folder)."""
    summary = ingest(store, None, now=now, progress=report.get("_progress"))
    out = summary.to_dict()
    out["problems"] = len(summary.problems)
    return out


def replay_step(store: Store, now: datetime, report: dict) -> dict:
    """Sleep at the end of each past day not slept yet (a history just brought in)."""
    from openmemory_local.sleep.replay import replay

    return replay(store, now, progress=report.get("_replay_progress"))


def sleep_step(store: Store, now: datetime, report: dict) -> dict:
    from openmemory_local.sleep.passes import sleep

    return sleep(store, now).to_dict()


def publish_step(store: Store, now: datetime, report: dict) -> dict:
    """Publish the opted-in projects' lessons to the commons node (see :mod:`openmemory_local.commons.publish`)."""
    from openmemory_local.commons.publish import publish

    return publish(store, now)


def commons_step(store: Store, now: datetime, report: dict) -> dict:
    """Pull from the node, verify the received lessons' predictions, attest."""
    from openmemory_local.commons.receive import pull, report_domains
    from openmemory_local.commons.verify import attest, verify_commons
    from openmemory_local.commons.node_link import NodeError, NodeUnavailable, open_link

    if not store.config.commons_receive:
        return {"skipped": "[commons] receive = false"}
    out: dict = {"node": "ok"}
    link = None
    try:
        link = open_link(store.config)
        out["pull"] = pull(store, link, now)
    except (NodeUnavailable, NodeError) as exc:
        out["node"] = f"unavailable: {exc}"
        link = None
    if link is not None:
        try:  # (a node without domains answers 404: it takes every domain, nothing lost)
            out["domains"] = report_domains(store, link)
        except (NodeUnavailable, NodeError) as exc:
            out["domains"] = f"not reported: {exc}"
    out["verify"] = verify_commons(store, now)
    if link is not None:
        try:
            out["attest"] = attest(store, link, now)
        except (NodeUnavailable, NodeError) as exc:
            out["node"] = f"unavailable: {exc}"
    return out


def commons_predict_step(store: Store, now: datetime, report: dict) -> dict:
    from openmemory_local.commons.verify import predict_commons

    return predict_commons(store, now)


def render_step(store: Store, now: datetime, report: dict) -> dict:
    """Render into Claude Code's memory folders (nothing when no Claude Code folder is known), then
    into the ``AGENTS.md`` / ``GEMINI.md`` of the projects Codex and Gemini CLI worked in
    (:mod:`openmemory_local.render.agents`)."""
    from openmemory_local.render.agents import render_agents
    from openmemory_local.render.memory_folder import RenderResult, nothing_rendered, render
    from openmemory_local.sleep.passes import sleep_lock

    if store.config.claude_dir is None:
        out = RenderResult(skipped=["no Claude Code folder"]).to_dict()
    else:
        out = render(store, now).to_dict()
    with sleep_lock(store.config):
        agents = render_agents(store, now).to_dict()
    out["agents"] = agents
    out["changed"] = out["changed"] or agents["changed"]
    out["nothing_rendered"] = nothing_rendered(out)
    return out


def report_step(store: Store, now: datetime, report: dict) -> dict:
    """The morning report of the events since the last one; ``{"report": None}`` if none."""
    from openmemory_local.render.report import make_report

    return {"report": make_report(store, now)}


#: The steps of ``openmemory run``, in order.
STEPS: list[Step] = [
    Step("ingest", ingest_step),
    Step("replay", replay_step),
    Step("sleep", sleep_step),
    Step("publish", publish_step),
    Step("commons", commons_step),
    Step("render", render_step),
    Step("commons_predict", commons_predict_step),
    Step("report", report_step),
]


def run_job(store: Store, now: datetime, steps: list[Step] | None = None, progress=None,
            replay_progress=None) -> dict:
    """Run the steps in order; return ``{step name: step result}``."""
    report: dict = {"_progress": progress, "_replay_progress": replay_progress}
    for step in steps if steps is not None else STEPS:
        report[step.name] = step.run(store, now, report)
    report.pop("_progress", None)
    report.pop("_replay_progress", None)
    return report
