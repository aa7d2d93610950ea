"""What the page shows, read from the store: plain dicts, no HTTP, no HTML.

Each function takes an open :class:`~openmemory_local.store.Store` and returns data for one
view; the server renders it with a template. Everything here reads, except
:func:`open_result` (a search result the person opened is *used*: touched, as recall
touches) and the actions, which are the engine's own functions
(:func:`openmemory_local.lessons.set_veto`, the same code as ``openmemory veto``).

Layers. :func:`lesson_layers` returns the lessons in layers: ``own`` (what this agent
learned, by project family) and ``commons`` (lessons received from the commons: None until
the engine has a commons layer; its view goes there).

Search. :func:`search` is the one adapter between the engine's recall and the page: recall
with ``touch=False`` (looking is not using), its results turned into rows. When recall also
returns lessons, they are merged here, and nowhere else.
"""

from __future__ import annotations

import json
import os
from datetime import datetime

from ..archive import ArchiveFile, original_path, read_lines
from ..clock import iso, parse_time
from ..jsonio import loads
from ..lessons import lesson_rows
from ..normalize import family_label

__all__ = [
    "summary",
    "lesson_layers",
    "lesson_page",
    "strength_history",
    "episode_page",
    "reports",
    "report",
    "search",
    "open_result",
    "LAYERS",
]

#: The layers of lessons the page shows, in order: (key, title).
LAYERS = (("own", "Your lessons"), ("commons", "From the commons"))

RAW_LIMIT = 100_000  # characters of a transcript line shown in full
CONTEXT_LINES = 3  # transcript lines shown around the one an episode points to
_MEMBERS_SHOWN = 200


def summary(store) -> dict:
    """The header's counts: episodes, lessons, last sleep, last report."""
    c = store.conn
    lessons = dict(c.execute("SELECT state, COUNT(*) FROM lessons GROUP BY state").fetchall())
    vetoed = c.execute("SELECT COUNT(*) FROM lessons WHERE vetoed_at IS NOT NULL AND state != 'forming'").fetchone()[0]
    episodes = c.execute("SELECT COUNT(*) FROM episodes WHERE archived = 0").fetchone()[0]
    report_row = c.execute("SELECT id, made FROM reports ORDER BY id DESC LIMIT 1").fetchone()
    return {
        "home": str(store.config.home),
        "episodes": episodes,
        "lessons": lessons.get("active", 0),
        "forming": lessons.get("forming", 0),
        "archived": lessons.get("archived", 0),
        "vetoed": vetoed,
        "last_sleep": store.get_meta("last_sleep"),
        "last_report": {"id": report_row[0], "made": report_row[1]} if report_row else None,
    }


# --- lessons -------------------------------------------------------------------------------


def lesson_layers(store, *, include: str = "current") -> dict:
    """Lessons by layer, then by project family, strongest first.

    ``include``: ``current`` (active lessons, vetoed ones too, marked), ``all`` (also
    archived ones and groups still forming)."""
    states = ("active", "archived", "forming") if include == "all" else ("active",)
    families: dict[str, list[dict]] = {}
    for lesson in lesson_rows(store, states=states, include_vetoed=True):
        families.setdefault(lesson["family"] or "", []).append(lesson)
    own = [{"family": fam, "label": family_label(fam) if fam else "an unknown project", "lessons": rows}
           for fam, rows in sorted(families.items(), key=lambda item: (family_label(item[0]), item[0]))]
    return {"own": own, "commons": commons_layer(store)}


def commons_layer(store) -> list[dict] | None:
    """Lessons received from the commons, by project family, as :func:`lesson_layers` gives
    its own; None: this engine has no commons layer yet (the page says so)."""
    return None


def lesson_page(store, lesson_id: int) -> dict | None:
    """One lesson with everything behind it: its record, predictions, events, the episodes it
    was learned from, and the files it has in memory folders; None if there is none."""
    rows = lesson_rows(store, states=("active", "archived", "forming"), include_vetoed=True, ids=[lesson_id])
    if not rows:
        return None
    lesson = rows[0]
    c = store.conn
    lesson["predictions"] = [
        {"id": pid, "made": made, "text": text, "state": state, "resolved": resolved, "episode_id": eid,
         "similarity": sim, "facet": facet}
        for pid, made, text, state, resolved, eid, sim, facet in c.execute(
            "SELECT id, made, text, state, resolved, episode_id, similarity, facet FROM predictions "
            "WHERE lesson_id = ? ORDER BY id DESC", (lesson_id,))]
    lesson["events"] = [
        {"id": eid, "at": at, "kind": kind, "prediction": pid, "detail": loads(detail, {})}
        for eid, at, kind, pid, detail in c.execute(
            "SELECT id, at, kind, prediction_id, detail FROM events WHERE lesson_id = ? ORDER BY id", (lesson_id,))]
    lesson["members"] = [
        {"id": eid, "kind": kind, "created": created, "session_id": sid, "text": text, "archived": bool(archived),
         "source_path": path, "source_line": line, "joined": joined}
        for eid, kind, created, sid, text, archived, path, line, joined in c.execute(
            "SELECT e.id, e.kind, e.created, e.session_id, e.text, e.archived, e.source_path, e.source_line, "
            "m.joined FROM lesson_members m JOIN episodes e ON e.id = m.episode_id WHERE m.lesson_id = ? "
            "ORDER BY e.created, e.id LIMIT ?", (lesson_id, _MEMBERS_SHOWN))]
    lesson["members_total"] = c.execute("SELECT COUNT(*) FROM lesson_members WHERE lesson_id = ?",
                                        (lesson_id,)).fetchone()[0]
    lesson["files"] = [
        {"path": path, "state": state, "written": written, "exists": os.path.exists(path)}
        for path, state, written in c.execute(
            "SELECT path, state, written FROM rendered_files WHERE lesson_id = ? AND role = 'lesson' ORDER BY path",
            (lesson_id,))]
    lesson["history"] = strength_history(store, lesson_id)
    return lesson


def strength_history(store, lesson_id: int) -> list[tuple[datetime, float, str]]:
    """A lesson's strength over time, ``(when, strength, kind)`` oldest first, from its events:
    what it was learned at, each change (its value before, then after: between two events it
    decayed), vetoes on the curve, and where it stands now (kind ``now``). Empty for a
    group still forming."""
    points: list[tuple[datetime, float, str]] = []
    last = None
    rows = store.conn.execute("SELECT at, kind, detail FROM events WHERE lesson_id = ? ORDER BY id",
                              (lesson_id,)).fetchall()
    for at, kind, detail_json in rows:
        detail = loads(detail_json, {})
        when = parse_time(at)
        if "before" in detail and "after" in detail:
            points.append((when, float(detail["before"]), ""))
            points.append((when, float(detail["after"]), kind))
            last = float(detail["after"])
        elif "strength" in detail:
            points.append((when, float(detail["strength"]), kind))
            last = float(detail["strength"])
        elif kind in ("vetoed", "unvetoed", "edited") and last is not None:
            points.append((when, last, kind))
    row = store.conn.execute("SELECT state, strength FROM lessons WHERE id = ?", (lesson_id,)).fetchone()
    if points and row is not None and row[0] == "active":
        decayed = store.get_meta("decayed_until")
        when = max(points[-1][0], parse_time(decayed)) if decayed else points[-1][0]
        points.append((when, float(row[1]), "now"))
    return points


# --- episodes and the raw stream ---------------------------------------------------------------


def episode_page(store, episode_id: int, *, context: int = CONTEXT_LINES) -> dict | None:
    """One episode, the lessons it is in, and the transcript lines it points to (read from
    the archive: the line itself in full, and ``context`` lines either side, summarised)."""
    episode = store.episode(episode_id)
    if episode is None:
        return None
    episode["lessons"] = [
        {"id": lid, "text": text, "state": state, "vetoed": vetoed is not None}
        for lid, text, state, vetoed in store.conn.execute(
            "SELECT l.id, COALESCE(l.text, l.rule_text), l.state, l.vetoed_at FROM lesson_members m "
            "JOIN lessons l ON l.id = m.lesson_id WHERE m.episode_id = ?", (episode_id,))]
    episode["fields_json"] = json.dumps(episode["fields"], ensure_ascii=False, indent=2)
    episode["transcript"] = transcript_lines(store, episode.get("source_path"), episode.get("source_line"),
                                             context=context)
    return episode


def transcript_lines(store, source_path: str | None, line: int | None, *, context: int = CONTEXT_LINES) -> dict:
    """The archived transcript lines around ``line``: ``{"archive", "original", "line",
    "raw", "pretty", "truncated", "lines": [{"number", "summary", "target"}], "missing"}``."""
    out = {"archive": source_path, "original": None, "line": line, "raw": None, "pretty": None, "truncated": False,
           "lines": [], "missing": None}
    if not source_path or not line:
        out["missing"] = "this episode points to no transcript line"
        return out
    try:
        out["original"] = str(original_path(source_path))
    except ValueError:
        pass
    archive = ArchiveFile(store.config.home, source_path)
    if not archive.exists():
        out["missing"] = f"the archive {source_path} is gone"
        return out
    found = read_lines(archive, max(1, line - context), line + context)
    if line not in found:
        out["missing"] = f"the archive {source_path} has no line {line}"
        return out
    raw = found[line]
    out["truncated"] = len(raw) > RAW_LIMIT
    out["raw"] = raw[:RAW_LIMIT]
    try:
        out["pretty"] = json.dumps(json.loads(raw), ensure_ascii=False, indent=2)[:RAW_LIMIT]
    except ValueError:
        out["pretty"] = None
    out["lines"] = [{"number": n, "summary": line_summary(text), "target": n == line} for n, text in found.items()]
    return out


def line_summary(raw: str, limit: int = 240) -> str:
    """One transcript line in a few words: its type, role, and the start of what it says."""
    try:
        record = json.loads(raw)
    except ValueError:
        return raw[:limit]
    if not isinstance(record, dict):
        return raw[:limit]
    kind = record.get("type", "?")
    message = record.get("message") if isinstance(record.get("message"), dict) else {}
    role = message.get("role")
    content = message.get("content")
    said = ""
    if isinstance(content, str):
        said = content
    elif isinstance(content, list):
        parts = []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                parts.append(block.get("text") or "")
            elif block.get("type") == "tool_use":
                tool_input = block.get("input") if isinstance(block.get("input"), dict) else {}
                parts.append(f"[{block.get('name')}] " + str(tool_input.get("command") or tool_input.get("file_path")
                                                            or tool_input.get("description") or ""))
            elif block.get("type") == "tool_result":
                result = block.get("content")
                if isinstance(result, list):
                    result = " ".join(b.get("text", "") for b in result if isinstance(b, dict))
                parts.append(("[error] " if block.get("is_error") else "[result] ") + str(result or ""))
        said = " ".join(parts)
    elif record.get("summary"):
        said = str(record["summary"])
    head = kind + (f"/{role}" if role and role != kind else "")
    said = " ".join(said.split())
    return f"{head}: {said[:limit]}" if said else head


# --- morning reports ---------------------------------------------------------------------------


def reports(store, limit: int = 100) -> list[dict]:
    """The morning reports, newest first: id, when, counts, file."""
    out = []
    for rid, made, data, file in store.conn.execute(
            "SELECT id, made, data, file FROM reports ORDER BY id DESC LIMIT ?", (limit,)):
        out.append({"id": rid, "made": made, "counts": loads(data, {}).get("counts", {}), "file": file})
    return out


def report(store, report_id: int | None = None) -> dict | None:
    """One morning report (the latest without ``report_id``): its data and Markdown."""
    columns = "SELECT id, made, data, markdown, file FROM reports"
    if report_id is None:
        row = store.conn.execute(f"{columns} ORDER BY id DESC LIMIT 1").fetchone()
    else:
        row = store.conn.execute(f"{columns} WHERE id = ?", (report_id,)).fetchone()
    if row is None:
        return None
    rid, made, data, markdown, file = row
    return {"id": rid, "made": made, "counts": loads(data, {}).get("counts", {}), "markdown": markdown, "file": file,
            "path": str(store.config.home / file)}


# --- search (the engine's recall) --------------------------------------------------------------


def search(store, query: str, k: int, now: datetime, *, kinds: list[str] | None = None) -> list[dict]:
    """Recall ``query`` (:func:`openmemory_local.recall.recall`, ``touch=False``) as rows:
    ``kind``, ``id``, ``text``, ``created``, ``project``, ``score``, ``components``, ``url``
    and ``lessons`` (the lessons the memory is in). Raises ``EmptyQuery``."""
    from ..recall import recall

    results = recall(store, query, k, now, kinds=kinds, touch=False)
    ids = [r.id for r in results]
    in_lessons: dict[int, list[int]] = {}
    if ids:
        for eid, lid in store.conn.execute(
                f"SELECT episode_id, lesson_id FROM lesson_members WHERE episode_id IN ({','.join('?' * len(ids))})",
                ids):
            in_lessons.setdefault(eid, []).append(lid)
    rows = []
    for r in results:
        e = r.episode
        rows.append({
            "type": "episode", "kind": e["kind"], "id": e["id"], "text": e["text"], "created": e["created"],
            "project": e.get("project"), "strength": float(e["strength"]), "score": r.score,
            "components": {"relevance": r.relevance, "recency": r.recency, "strength": r.strength},
            "url": f"/episodes/{e['id']}", "lessons": in_lessons.get(e["id"], []),
        })
    return rows


def open_result(store, episode_id: int, now: datetime) -> bool:
    """The person opened a search result: touch it, as a recall that used it would
    (``last_touched``, ``touches + 1``). False if there is no such episode or the store
    stayed locked."""
    from ..recall import index_for

    if store.episode(episode_id) is None:
        return False
    if not store.touch([episode_id], iso(now), timeout=store.config.touch_timeout):
        return False
    index_for(store).note_touched([episode_id], now)
    return True
