"""Lessons as the rest of the program sees them: listing, per-project views, veto, unveto.

Python API (what the MCP server of ``openmemory mcp`` calls, in-process)::

    from openmemory_local.sleep.lessons import lessons_for_project
    from openmemory_local.render.report import latest_report

    lessons = lessons_for_project(store, "/home/me/src/app", now)   # strongest first, or None
    found = latest_report(store.config.home)                        # (path, markdown) or None

:func:`lessons_for_project` returns None while the store has never slept (no lesson can
exist yet), else a list (maybe empty) of dicts, strongest first, with: ``id``, ``kind``
(``error``, ``correction``), ``text`` (the observation), ``strength``, ``seen``,
``sessions``, ``first_seen``, ``last_seen``, ``family``, ``projects``, ``prediction``
(the open prediction's text, or None), ``prediction_made``, ``record``
(``{"confirmed": n, "failed": n}``), ``provenance`` (one line: the lesson and the
episodes it was learned from) and ``episodes`` (those episodes: id, session, created,
archive path and line). Only active, unvetoed lessons of the project's family are
listed: the same lessons ``openmemory render`` writes into that project's memory folder.
"""

from __future__ import annotations

import os
from datetime import datetime

from openmemory_local.core.clock import iso
from openmemory_local.core.jsonio import loads
from openmemory_local.sleep import lifecycle
from openmemory_local.storage import episodes as episode_store
from openmemory_local.storage import lessons as lesson_store
from openmemory_local.storage.store import record_event
from openmemory_local.text.normalize import family, family_matches

__all__ = [
    "LessonNotFound",
    "lesson_rows",
    "lesson_view",
    "lessons_for_project",
    "applies_to",
    "veto",
    "unveto",
    "has_slept",
]

_PROVENANCE_EPISODES = 10
_COLUMNS = ("id", "state", "kind", "family", "text", "text_source", "rule_text", "signature", "strength", "seen",
            "sessions", "first_seen", "last_seen", "formed", "learned", "reinforced", "archived_at", "vetoed_at",
            "file_name", "details", "updated")


class LessonNotFound(LookupError):
    pass


def has_slept(store) -> bool:
    return store.get_meta("decayed_until") is not None


def applies_to(lesson_family: str, projects: list[str], path: str) -> bool:
    """Whether a lesson belongs to the project at ``path`` (a working directory or a folder in it)."""
    path = path.rstrip("/") or "/"
    if family_matches(lesson_family, path):
        return True
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in projects)


def lesson_rows(store, *, states: tuple[str, ...] = ("active",), include_vetoed: bool = True,
                ids: list[int] | None = None) -> list[dict]:
    """Lessons as dicts (see :func:`lesson_view`), strongest first."""
    rows = lesson_store.select_lessons(store, _COLUMNS, states, include_vetoed, ids)
    out = []
    for row in rows:
        lesson = dict(zip(_COLUMNS, row))
        lesson["details"] = loads(lesson["details"], {})
        out.append(lesson_view(store, lesson))
    return out


def lesson_view(store, lesson: dict) -> dict:
    """A lesson row completed with its prediction, record and provenance."""
    lid = lesson["id"]
    details = lesson.pop("details")
    lesson["projects"] = details.get("projects") or []
    lesson["vetoed"] = lesson["vetoed_at"] is not None
    lesson["strength"] = round(float(lesson["strength"]), 6)
    record = {"confirmed": 0, "failed": 0, "withdrawn": 0}
    for state, n in lesson_store.prediction_record(store, lid):
        record[state] = n
    lesson["record"] = record
    row = lesson_store.open_prediction(store, lid)
    lesson["prediction"] = row[1] if row else None
    lesson["prediction_made"] = row[2] if row else None
    lesson["prediction_id"] = row[0] if row else None
    episodes = []
    for eid, session_id, created, source_path, source_line, archived in lesson_store.provenance_episodes(
            store, lid, _PROVENANCE_EPISODES):
        episodes.append({"id": eid, "session_id": session_id, "created": created, "source_path": source_path,
                         "source_line": source_line, "archived": bool(archived)})
    episodes.reverse()
    lesson["episodes"] = episodes
    shown = ", ".join(f"#{e['id']}" for e in episodes)
    more = max(0, int(lesson["seen"] or 0) - len(episodes))
    lesson["provenance"] = (f"Open Memory lesson {lid}, learned from episodes {shown}"
                            + (f" and {more} more" if more else "")
                            + f" in {lesson['sessions']} session{'s' if lesson['sessions'] != 1 else ''}")
    lesson["branches"] = details.get("branches") or []
    lesson["subject"] = details.get("subject")
    return lesson


def lessons_for_project(store, project: str, now: datetime | None = None) -> list[dict] | None:
    """The active, unvetoed lessons of ``project`` (a working directory), strongest first;
    None while the store has never slept. ``now`` is accepted for symmetry with the
    other passes (lessons are read as the last sleep left them)."""
    if not has_slept(store):
        return None
    path = str(project)
    return [lesson for lesson in lesson_rows(store, include_vetoed=False)
            if applies_to(lesson["family"], lesson["projects"], path)]


def _lesson(store, lesson_id: int) -> lifecycle.Lesson:
    found = lesson_store.lesson_state(store, lesson_id)
    if found is None or found[0] not in lifecycle.VETOABLE:
        raise LessonNotFound(f"no lesson #{lesson_id}")
    state, vetoed_at, strength, kind = found
    return lifecycle.Lesson(state, strength, vetoed_at is not None, kind)


def veto(store, lesson_id: int, now: datetime | str, *, why: str = "openmemory veto", **detail) -> bool:
    """Veto a lesson (L7): never rendered again, no more predictions (its open one withdrawn, P5).
    False if it already was. The one function that writes a veto of the agent's own lessons, whichever
    way it came (``openmemory veto``, the page, a lesson file deleted from a memory folder: ``why``
    and ``detail`` say which, in the ``vetoed`` event). ``now``: a time, or a stored one (``iso``)."""
    now_iso = now if isinstance(now, str) else iso(now)
    with store.write():
        change = lifecycle.veto(_lesson(store, lesson_id))
        if not change.after.vetoed or change.before.vetoed:
            return False
        lesson_store.set_veto(store, lesson_id, now_iso, now_iso)
        record_event(store, now_iso, "vetoed", lesson_id, why=why, **detail)
    return True


def unveto(store, lesson_id: int, now: datetime) -> bool:
    """Undo a veto (L7): the lesson renders again at the next render. False if it was not vetoed."""
    now_iso = iso(now)
    with store.write():
        change = lifecycle.unveto(_lesson(store, lesson_id))
        if change.after.vetoed or not change.before.vetoed:
            return False
        lesson_store.set_veto(store, lesson_id, None, now_iso)
        record_event(store, now_iso, "unvetoed", lesson_id)
    return True


def project_families(store) -> dict[str, set[str]]:
    """Every working directory with a session in the store -> its project families."""
    out: dict[str, set[str]] = {}
    for cwd, branch in episode_store.session_projects_and_branches(store):
        out.setdefault(cwd, set()).add(family(cwd, branch))
    return out
