"""Render lessons into the memory files of Codex CLI (``AGENTS.md``) and Gemini CLI
(``GEMINI.md``): one managed section in the file each agent loads at the start of a session,
at the root of the project (the git root of the session's folder, else the folder itself).

Which projects: those where the agent had sessions (a Codex rollout whose ``cwd`` is in the
project gives ``AGENTS.md``; a Gemini CLI session whose project folder is known gives
``GEMINI.md``). Which lessons: every lesson of the project's family, whichever agent's sessions
taught it (the same choice as ``MEMORY.md``, :func:`openmemory_local.render.memory_folder._targets`): a
lesson learned in Claude Code reaches Codex's ``AGENTS.md`` and Gemini's ``GEMINI.md`` of the
same project, and the other way round.

The same rules as ``MEMORY.md``'s managed section (:mod:`openmemory_local.render.memory_folder`), with its
markers, its escaping (:func:`render.escape_text`) and its observation check:

* only the text between ``<!-- openmemory:begin -->`` and ``<!-- openmemory:end -->`` is ours;
  every byte outside it stays as it was (a new section is appended after a blank line);
* a section the owner removed is not added again; markers that are damaged leave the file
  alone (reported);
* no lesson files beside it (a project's root is the owner's repository): each line of the
  section is the whole observation, tagged ``(Open Memory lesson N, ...)``; a line the owner
  deleted from the section is a *veto* of that lesson (never rendered again anywhere, as when a
  lesson file is deleted; ``openmemory unveto N`` undoes it); vetoed lessons are never listed;
* budgets: Codex loads ``AGENTS.md`` files from the git root down to the working folder, plus
  ``$CODEX_HOME/AGENTS.md``, and stops at 32 KiB in all (``project_doc_max_bytes``): the section
  fits in what the other files and the owner's text leave, and never takes more than
  ``Config.agent_section_max_bytes``; Gemini CLI has no cap: the same section limit applies;
* never ``AGENTS.override.md`` (it would shadow the owner's ``AGENTS.md``); a folder that has
  one is skipped, said so (Codex would not read our section there); never under Gemini's own
  ``## Gemini Added Memories`` heading: a file that has it gets our section just before it (its
  ``save_memory`` appends below that heading up to the next ``##`` heading, which must not be
  ours).

Writes are atomic and checked (the file must still hold what we read just before the rename).
Nothing is written when nothing changed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from openmemory_local.core.clock import iso
from openmemory_local.sleep.lesson_text import clip
from openmemory_local.sleep.lessons import lesson_rows, project_families, veto
from openmemory_protocol.observation import is_observation
from openmemory_local.text.markdown import one_line
from openmemory_local.render.files import BEGIN, END, atomic_write, fit_lines, read_bytes, sha256_hex
from openmemory_local.render.memory_folder import escape_text, owner_removed_section, split_index
from openmemory_local.storage import rendered
from openmemory_local.storage.episodes import agent_projects

__all__ = ["AGENT_FILES", "AgentRenderResult", "render_agents", "section", "project_root", "codex_budget"]

#: adapter name -> the memory file its agent loads from a project's root.
AGENT_FILES = {"codex": "AGENTS.md", "gemini": "GEMINI.md"}
CODEX_PROJECT_DOC_MAX_BYTES = 32 * 1024
_HEADING = "## Lessons from earlier sessions (Open Memory)"
#: Gemini CLI's own section (its ``save_memory`` tool, up to v0.43): never ours, never above ours.
GEMINI_HEADING = "## Gemini Added Memories"
_INTRO = ("Observations from earlier sessions in this project (any coding agent), kept by Open Memory, strongest "
          "first. They record what happened; they are not instructions. This section is rewritten by "
          "`openmemory run`; text outside it is never changed; deleting a line vetoes that lesson.")
_TAG = re.compile(r"\(Open Memory lesson (\d+), strength [0-9.]+, seen \d+\)\s*$")
_ROLE = "agent-index"
_LINE_TEXT = 400


@dataclass
class AgentRenderResult:
    targets: list[dict] = field(default_factory=list)
    vetoed: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.vetoed or any(t["index"] in ("written", "created") for t in self.targets))

    def to_dict(self) -> dict:
        return {"targets": self.targets, "vetoed": self.vetoed, "problems": self.problems, "skipped": self.skipped,
                "changed": self.changed}


def project_root(cwd: str) -> Path | None:
    """The folder whose memory file the agent loads for a session in ``cwd``: its git root
    (the nearest folder up with a ``.git``), else ``cwd`` itself; None if ``cwd`` is gone."""
    start = Path(cwd)
    if not start.is_dir():
        return None
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def _line(lesson: dict) -> str:
    text = clip(one_line(lesson["text"]), _LINE_TEXT)
    tag = f"(Open Memory lesson {lesson['id']}, strength {lesson['strength']:.1f}, seen {lesson['seen']})"
    if is_observation(text):
        return f"- {escape_text(text)} {tag}"
    return f"- {tag}"


def section(lessons: list[dict], room: int) -> tuple[str, int]:
    """The managed section (markers included, no final newline) listing ``lessons`` (ranked) in
    at most ``room`` bytes; and how many it lists."""
    head = [BEGIN, _HEADING, "", _INTRO, ""]
    tail = [END]
    left = room - len("\n".join(head + tail).encode()) - 1
    body, left = fit_lines((_line(lesson) for lesson in lessons), None, left)
    if not lessons:
        body = ["No lessons at the moment."]
    elif len(body) < len(lessons):
        note = f"{len(lessons) - len(body)} more lesson(s) not listed: no room left within the file's budget."
        while body and len(note.encode()) + 1 > left:
            left += len(body.pop().encode()) + 1
        body.append(note)
    return "\n".join(head + body + tail), len([b for b in body if b.startswith("- ")])


def codex_budget(root: Path, cwd: str, environ=None) -> int:
    """Bytes Codex leaves for ``root/AGENTS.md``: 32 KiB less the global file and every other
    folder's file from ``root`` down to ``cwd`` (one per folder: the override if present)."""
    from openmemory_local.core.config import codex_home

    used = 0
    home = codex_home(environ)
    for name in ("AGENTS.override.md", "AGENTS.md"):
        data = read_bytes(home / name)
        if data is not None:
            used += len(data)
            break
    folder = Path(cwd)
    chain = []
    while True:
        chain.append(folder)
        if folder == root or folder.parent == folder:
            break
        folder = folder.parent
    for folder in chain:
        if folder == root:
            continue
        for name in ("AGENTS.override.md", "AGENTS.md"):
            data = read_bytes(folder / name)
            if data is not None:
                used += len(data)
                break
    return CODEX_PROJECT_DOC_MAX_BYTES - used


def _agent_projects(store) -> dict[str, set[str]]:
    """adapter name -> the working folders of its sessions (Codex, Gemini CLI)."""
    out: dict[str, set[str]] = {}
    for adapter, project in agent_projects(store):
        if adapter in AGENT_FILES:
            out.setdefault(adapter, set()).add(project)
    return out


def render_agents(store, now: datetime, *, environ=None) -> AgentRenderResult:
    """Render the current lessons into every known Codex / Gemini CLI project's memory file."""
    result = AgentRenderResult()
    now_iso = iso(now)
    families_of = project_families(store)
    lessons = lesson_rows(store, include_vetoed=True)
    env = os.environ if environ is None else environ
    for adapter, cwds in sorted(_agent_projects(store).items()):
        done: set[str] = set()
        for cwd in sorted(cwds):
            root = project_root(cwd)
            if root is None:
                result.skipped.append(f"{adapter}: {cwd} no longer exists")
                continue
            path = root / AGENT_FILES[adapter]
            if str(path) in done:
                continue
            done.add(str(path))
            if adapter == "codex" and (root / "AGENTS.override.md").exists():
                result.skipped.append(f"{root}: AGENTS.override.md shadows AGENTS.md there (Codex would not read "
                                      f"our section): not rendered")
                continue
            families = families_of.get(cwd, set())
            chosen = [lesson for lesson in lessons
                      if lesson["family"] in families or cwd in lesson["projects"]]
            _observe(store, path, now, result)
            vetoed = rendered.vetoed_lesson_ids(store)
            ranked = [lesson for lesson in chosen if lesson["id"] not in vetoed
                      and lesson["strength"] >= store.config.render_min_strength]
            ranked = ranked[: store.config.render_max_lessons]
            budget = store.config.agent_section_max_bytes
            if adapter == "codex":
                budget = min(budget, codex_budget(root, cwd, env))
            result.targets.append(_write(store, adapter, path, ranked, budget, now_iso, result))
    return result


def _gemini_heading(text: str) -> int | None:
    """Where the line ``## Gemini Added Memories`` starts in ``text``, if it has one."""
    start = 0
    for line in text.splitlines(keepends=True):
        if line.strip() == GEMINI_HEADING:
            return start
        start += len(line)
    return None


def _ids_in(block: str) -> set[int]:
    return {int(m.group(1)) for line in block.splitlines() if (m := _TAG.search(line))}


def _observe(store, path: Path, now: datetime, result: AgentRenderResult) -> None:
    """A line of ours the owner deleted from the section vetoes its lesson."""
    row = rendered.rendered_record_state(store, str(path), _ROLE)
    if row is None or row[1] != "ours":
        return
    data = read_bytes(path)
    if data is None or sha256_hex(data) == row[0]:
        return
    parts = split_index(data.decode("utf-8", "surrogateescape"))
    if not isinstance(parts, tuple):
        return  # removed or damaged: handled when writing
    present = _ids_in(parts[1])
    for lesson_id in rendered.lines_listed(store, str(path)):
        if lesson_id not in present and veto(store, lesson_id, now, why=f"its line was deleted from {path}"):
            result.vetoed.append(lesson_id)


def _write(store, adapter: str, path: Path, lessons: list[dict], budget: int, now_iso: str,
           result: AgentRenderResult) -> dict:
    out = {"agent": adapter, "file": str(path), "lessons": [lesson["id"] for lesson in lessons], "index": "unchanged",
           "listed": 0}
    record = rendered.rendered_index_record(store, str(path), _ROLE)
    original = read_bytes(path)
    text = original.decode("utf-8", "surrogateescape") if original is not None else ""
    parts = split_index(text)
    if parts == "damaged":
        result.problems.append(f"{path}: the Open Memory markers are damaged (each must appear once, begin before "
                               f"end): left alone")
        out["index"] = "damaged"
        return out
    if parts is None:
        if record is not None:
            owner_removed_section(store, record, path, now_iso)
            out["index"] = "removed by the owner"
            return out
        if not lessons:
            out["index"] = "none"
            return out
        created = True
        at = _gemini_heading(text) if adapter == "gemini" else None
        if at is not None:
            # before Gemini CLI's own heading, never after it: its save_memory appends below
            # that heading up to the next "## ", which would be ours, inside our markers
            before, after = text[:at], "\n\n" + text[at:]
        else:
            before = text
            if before and not before.endswith("\n"):
                before += "\n"
            if before:
                before += "\n"
            after = "\n"
    else:
        before, _, after = parts
        created = False
    room = budget - len((before + after).encode())
    if room < 400:
        result.skipped.append(f"{path}: no room left within the agent's budget ({budget} bytes with the owner's text)")
        out["index"] = "no room"
        return out
    block, listed = section(lessons, room)
    out["listed"] = listed
    new = (before + block + after).encode("utf-8", "surrogateescape")
    shown = sorted(_ids_in(block))
    if new == original:
        return out
    mode = os.stat(path).st_mode if original is not None else None
    if not atomic_write(path, new, expect=original, mode=mode):
        result.problems.append(f"{path}: changed while being rendered: left for the next run")
        out["index"] = "busy"
        return out
    with store.write():
        rendered.record_agent_section(store, str(path), str(path.parent), _ROLE, sha256_hex(new), shown, now_iso)
    out["index"] = "created" if created else "written"
    return out
