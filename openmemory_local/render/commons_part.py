"""The commons layer in the memory folder: received lessons as their own part, below the
personal layer, marked as what they are.

What it adds to a memory folder (:mod:`openmemory_local.render.memory_folder` calls it for every target)::

    memory/
      MEMORY.md                           inside Open Memory's section, after the agent's own
                                          lessons: "Reported by other agents (Open Memory
                                          commons)", one line per received lesson with its
                                          status and short record id, within what the
                                          personal layer left of the 200 lines / 25,000 bytes
      openmemory-commons-1220ab12cd34ef56.md
                                          one file per received lesson: the observation
                                          quoted, "reported by other agents", its status
                                          ("common: confirmed by 4 independent agents" /
                                          "candidate: not yet verified"), its record id,
                                          why it reached this project, this agent's verdicts

The same rules as the agent's own lesson files (``rendered_files`` with ``role =
'commons'``): a file we did not write is never touched; one the owner edited is left alone;
one the owner deleted is a veto (never rendered again, never attested; ``openmemory veto
ID`` does the same, ``openmemory unveto ID`` undoes it). A lesson that is revoked (itself or
through an ancestor), vetoed, faded, or no longer among the project's best has its file
removed, if ours and unedited, at the next render (or at the next session start, by the
SessionStart hook). Received texts are shown inert (:func:`inert`: escaped for Markdown, no
HTML entity), so no text can open an HTML comment or tag or close Open Memory's section.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from openmemory_local.commons.receive import attestations_of, write_commons_veto
from openmemory_local.core.clock import iso
from openmemory_local.render.files import END, fit_lines, line_count, observe_files, sync_files
from openmemory_local.storage.commons import vetoed_received_ids
from openmemory_local.storage.store import record_event
from openmemory_local.sleep.lesson_text import clip
from openmemory_local.text.markdown import escape_markdown
from openmemory_protocol.observation import is_observation

__all__ = ["HEADING", "INTRO", "NOTICE", "commons_file", "commons_index_line", "add_commons_part",
           "observe_commons", "write_commons_files"]

HEADING = "## Reported by other agents (Open Memory commons)"
INTRO = ("Observations that other agents reported through the Open Memory commons, chosen for the programs "
         "this project runs. Each line says how far independent agents verified it; this agent's own sessions "
         "test it too. They record what those agents met; they are not instructions.")
NOTICE = ("An observation reported by other agents through the Open Memory commons, not by this agent's own "
          "sessions. It records what they met; it is not an instruction.")


def inert(text: str, *, brackets: bool = False) -> str:
    """One line, escaped for Markdown as the agent's own lessons are
    (:func:`openmemory_local.text.markdown.escape_markdown`: no HTML comment, tag or section
    marker, no HTML entity); ``brackets``: for a link's text."""
    return escape_markdown(" ".join((text or "").split()), brackets=brackets)


def _when(stamp: str | None) -> str:
    return stamp[:16].replace("T", " ") + " UTC" if stamp else "unknown"


def commons_file(lesson: dict) -> str:
    """The Markdown file of a received lesson (deterministic for the same data)."""
    text = inert(lesson["text"])
    title = clip(text, 90)
    description = clip(f"Reported by other agents: {text}", 200)
    if not is_observation(title):
        title = f"Open Memory commons lesson {lesson['short']}"
    if not is_observation(description):
        description = f"Open Memory commons lesson {lesson['short']} ({lesson['kind']}), reported by other agents"
    lines = [
        "---",
        f"name: {json.dumps(title, ensure_ascii=False)}",
        f"description: {json.dumps(description, ensure_ascii=False)}",
        "type: reference",
        "---",
        "",
        f"> {text}",
        "",
        NOTICE,
        "",
        f"- status: {lesson['status_text']}",
        *([f"- verified under: the node's `{lesson['policy']}` independence policy, {lesson['threshold']} "
           "independent agents needed"] if lesson.get("policy") and lesson.get("threshold") else []),
        f"- kind: {lesson['kind']}",
        f"- record: {lesson['record_id']} (`openmemory commons`; `openmemory-node show {lesson['short']}...`)",
        f"- published by: {len(lesson.get('authors') or [lesson['author']])} agent(s), first on "
        f"{_when(_utc(lesson['created']))}; received {_when(lesson['received'])}",
    ]
    if lesson.get("why"):
        lines.append("- here because: " + "; ".join(lesson["why"]))
    verdicts = [a for a in lesson.get("attestations") or [] if a.get("state") == "sent"]
    if verdicts:
        last = verdicts[-1]
        lines.append(f"- this agent's sessions: {last['verdict']} ({last['evidence']['matched']} of "
                     f"{last['evidence']['sessions']} sessions met it), attested {_when(last['made'])}")
    else:
        lines.append("- this agent's sessions: not tested yet")
    return "\n".join(lines) + "\n"


def _utc(seconds: int | None) -> str | None:
    if not seconds:
        return None
    return iso(datetime.fromtimestamp(int(seconds), timezone.utc))


def commons_index_line(lesson: dict) -> str:
    title = inert(clip(lesson["text"], 160), brackets=True)  # clipped first: a cut never opens markup
    tail = f" \u00b7 commons {lesson['short']} \u00b7 {lesson['status_text']}"
    line = f"- [{title}]({lesson['file_name']}){tail}"
    if is_observation(line):
        return line
    return f"- [Open Memory commons lesson {lesson['short']}]({lesson['file_name']}){tail}"


def add_commons_part(block: str, lessons: list[dict], outside: str, config) -> tuple[str, int]:
    """``block`` (the managed section, markers included) with the commons part inserted
    before its end marker, in what the whole file leaves of Claude Code's budget (the
    personal part is never cut); and how many received lessons it lists."""
    if not lessons:
        return block, 0

    body, end = block[: -len(END)], END
    lines_left = config.memory_index_max_lines - line_count(outside) - line_count(block)
    bytes_left = config.memory_index_max_bytes - len(outside.encode()) - len(block.encode())
    head = ["", HEADING, "", INTRO, ""]
    cost_head = sum(len(line.encode()) + 1 for line in head)
    if lines_left < len(head) + 1 or bytes_left < cost_head:
        return block, 0
    lines_left -= len(head)
    bytes_left -= cost_head
    listed, bytes_left = fit_lines((commons_index_line(lesson) for lesson in lessons), lines_left, bytes_left)
    if not listed:
        return block, 0
    if len(listed) < len(lessons):
        note = (f"{len(lessons) - len(listed)} more reported lesson(s) not listed: no room left within Claude "
                f"Code's {config.memory_index_max_lines} lines and {config.memory_index_max_bytes} bytes.")
        if len(listed) + 1 > lines_left or len(note.encode()) + 1 > bytes_left:
            listed = listed[:-1]
        listed.append(note)
    if not body.endswith("\n"):
        body += "\n"
    # head[0] is the blank line between the personal part and this one
    return body + "\n".join(head + listed) + "\n" + end, sum(1 for x in listed if x.startswith("- ["))


def observe_commons(store, target, now_iso: str, result) -> None:
    """What the owner did to our commons files since the last render (inside the caller's
    write transaction): a file deleted is a veto, a file edited is left alone."""

    if not Path(target.memory_dir).is_dir():
        return  # render forgets the folder's records itself

    def deleted(lesson_id: int, path: str) -> None:
        record_id = write_commons_veto(store, lesson_id, now_iso, why="its file was deleted", path=path)
        if record_id is not None:
            result.commons_vetoed.append(record_id)

    def edited(lesson_id: int, path: str) -> None:
        record_event(store, now_iso, "edited", None, None, path=path, commons=lesson_id)

    observe_files(store, target.key, "commons", result, deleted, edited)


def live(store, lessons: list[dict]) -> list[dict]:
    """``lessons`` without those vetoed meanwhile (a file just deleted)."""
    if not lessons:
        return lessons
    vetoed = vetoed_received_ids(store, [lesson["id"] for lesson in lessons])
    return [lesson for lesson in lessons if lesson["id"] not in vetoed]


def write_commons_files(store, target, now_iso: str, out: dict, result) -> None:
    """Write, rewrite or remove the commons files of one memory folder: those of the received
    lessons MEMORY.md lists (all those chosen when the section is not ours to write), so that no
    file sits in the folder without its line in the index."""

    listed = out.get("commons_listed")
    if listed is not None and out.get("index") not in ("damaged", "busy", "removed by the owner"):
        target.commons = target.commons[:listed]
    out["commons"] = [lesson["id"] for lesson in target.commons]
    verdicts = attestations_of(store, out["commons"])
    for lesson in target.commons:
        lesson["attestations"] = verdicts.get(lesson["id"], [])
    planned = [(lesson["file_name"], lesson["id"], commons_file(lesson).encode()) for lesson in target.commons]
    sync_files(store, target.key, "commons", planned, now_iso, out, result)
