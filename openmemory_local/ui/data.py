"""What the page shows, read from the store: plain dicts, no HTTP, no HTML.

Each function takes an open :class:`~openmemory_local.storage.store.Store` and returns data for one
view; the server renders it with a template. Everything here reads, except
:func:`open_result` (a search result the person opened is *used*: touched, as recall
touches) and the actions, which are the engine's own functions
(:func:`openmemory_local.render.refresh.set_veto`, the same code as ``openmemory veto``).

Layers. :func:`lesson_layers` returns the lessons in layers: ``own`` (what this agent
learned, by project family) and ``commons`` (lessons received from the commons, by the
project families they are rendered in: :func:`commons_layer`); :func:`commons_page` is one
received lesson. :func:`publishing` is what each project family shares. What the node says
(statuses, votes, the provenance chain, peers) is asked by :mod:`.nodeview`.

Search. :func:`search` is the one adapter between the engine's recall and the page: recall
with ``touch=False`` (looking is not using), its results turned into rows, with the lessons
recalled beside them (this agent's, :func:`openmemory_local.recall.query.recall_lessons`, and
received ones, :func:`openmemory_local.commons.choose.recall_commons`), as ``openmemory recall``
shows them.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from datetime import datetime

from openmemory_local.ingest.archive import ArchiveFile, original_path, read_lines
from openmemory_local.core.clock import iso, parse_time
from openmemory_local.core.jsonio import loads
from openmemory_local.sleep.lessons import lesson_rows
from openmemory_local.text.normalize import family_label
from openmemory_local.storage import views

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
    "commons_layer",
    "commons_page",
    "commons_ids",
    "local_chain",
    "publishing",
    "family_known",
    "LAYERS",
]

#: The layers of lessons the page shows, in order: (key, title).
LAYERS = (("own", "Your lessons"), ("commons", "From the commons"))

RAW_LIMIT = 100_000  # characters of a transcript line shown in full
CONTEXT_LINES = 3  # transcript lines shown around the one an episode points to
_MEMBERS_SHOWN = 200


def summary(store) -> dict:
    """The header's counts: episodes, lessons, last sleep, last report."""
    lessons = views.lesson_states(store)
    vetoed = views.vetoed_lesson_count(store)
    episodes = views.live_episode_count(store)
    report_row = views.latest_report_made(store)
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
    return {"own": own, "commons": commons_layer(store, include=include)}


def commons_layer(store, *, include: str = "current") -> list[dict]:
    """Lessons received from the commons (:func:`openmemory_local.commons.receive.commons_rows`), by
    the project family whose memory folders they are rendered in (one lesson may be in
    several), then those rendered nowhere; newest first. ``include="all"`` adds revoked ones
    and this agent's own publications as its node received them."""
    from openmemory_local.commons.receive import commons_rows
    from openmemory_local.commons.verify import memory_folders
    from openmemory_local.sleep.lessons import project_families

    rows = commons_rows(store, include_all=include == "all")
    cwd_of = memory_folders(store)
    families_of = project_families(store)
    groups: dict[str, list[dict]] = {}
    for row in rows:
        fams = set()
        for f in row["rendered"]:
            cwd = cwd_of.get(os.path.realpath(os.path.dirname(f["path"])))
            fams |= families_of.get(cwd, set()) if cwd else set()
        row["families"] = sorted(fams)
        for fam in fams or {""}:
            groups.setdefault(fam, []).append(row)
    out = [{"family": fam, "label": family_label(fam), "lessons": rows}
           for fam, rows in sorted(groups.items(), key=lambda item: (not item[0], family_label(item[0] or "~"),
                                                                   item[0])) if fam]
    if "" in groups:
        out.append({"family": "", "label": "in no memory folder", "lessons": groups[""]})
    return out


def commons_page(store, record_id: str) -> dict | None:
    """One received lesson, as the store holds it: its row, the files it has in memory
    folders, its predictions in this agent's projects, this agent's attestations, its
    history (``events``), and which lessons it derives from are held here. None if absent."""
    from openmemory_local.commons.receive import CommonsNotFound, attestations_of, find_commons

    try:
        row = find_commons(store, record_id)
    except CommonsNotFound:
        return None
    cid = row["id"]
    row["files"] = [{"path": path, "state": state, "written": written, "exists": os.path.exists(path)}
                    for path, state, written in views.files_of(store, cid, "commons")]
    row["predictions"] = [
        {"id": pid, "family": fam, "label": family_label(fam), "made": made, "text": text, "state": state,
         "resolved": resolved, "sessions": sessions, "matched": matched, "episode_id": eid, "facet": facet,
         "similarity": sim}
        for pid, fam, made, text, state, resolved, sessions, matched, eid, facet, sim
        in views.commons_lesson_predictions(store, cid)]
    row["attestations"] = attestations_of(store, [cid]).get(cid, [])
    row["events"] = [{"at": at, "kind": kind, "detail": loads(detail, {})}
                     for at, kind, detail in views.commons_lesson_events(store, cid)]
    held = views.received_record_ids(store, row["derived_from"]) if row["derived_from"] else set()
    row["parents"] = [{"id": rid, "held": rid in held} for rid in row["derived_from"]]
    row["own_lesson"] = views.own_lesson_of_record(store, row["record_id"])
    return row


def local_chain(store, record_id: str, max_nodes: int = 200) -> dict:
    """A received lesson's provenance chain as this engine's store has it (each lesson's
    ``derived_from``), in the shape of the node's ``chain``: what the page draws when the
    node is not running."""
    rows = {rid: (status, text, loads(derived, [])) for rid, status, text, derived in views.received_chain_rows(store)}
    children: dict[str, list[str]] = defaultdict(list)
    for rid, (_, _, derived) in rows.items():
        for parent in derived:
            children[parent].append(rid)

    def walk(rid: str, name: str, seen: set[str]) -> dict:
        status, text, derived = rows.get(rid, ("absent", None, []))
        entry = {"id": rid, "status": status, "text": text, "type": "lesson" if rid in rows else None}
        if rid in seen or len(seen) >= max_nodes:
            entry["repeated"] = True
            return entry
        seen.add(rid)
        entry[name] = [walk(other, name, seen) for other in sorted(derived if name == "parents" else children[rid])]
        return entry

    chain = walk(record_id, "parents", set())
    chain["children"] = walk(record_id, "children", set())["children"]
    return chain


def commons_ids(store) -> set[str]:
    """The record ids of every received lesson the store holds (for links)."""
    return views.received_record_ids(store)


# --- publishing ---------------------------------------------------------------------------------


def publishing(store, on_node: dict | None = None) -> dict:
    """Publishing, by project family: every family the store knows, opted in or not, with its
    counts (:func:`openmemory_local.commons.publish.status`); the records each published (oldest
    first; ``on_node``: record id -> its status as the node reports it,
    :func:`openmemory_local.commons.publish.commons_views`); what the redaction gate (or the node)
    held back, and why; what waits for the node."""
    from openmemory_local.commons.publish import published_records, status

    state = status(store, known=True)
    held, waiting = defaultdict(list), defaultdict(list)
    for lesson_id, fam, qstate, text, kind, strength, reasons, queued, attempts, last_error in views.outbox_rows(store):
        entry = {"lesson": lesson_id, "text": text, "kind": kind, "strength": strength, "queued": queued,
                 "reasons": loads(reasons, []), "attempts": attempts, "last_error": last_error, "state": qstate}
        (held if qstate == "held" else waiting)[fam].append(entry)
    local = views.local_texts_of_published(store)
    published = defaultdict(list)
    for lesson_id, records in published_records(store).items():
        fam = records[-1]["family"]
        for rec in records:
            rec["node"] = (on_node or {}).get(rec["record_id"])
        published[fam].append({"lesson": lesson_id, "local_text": local.get(lesson_id), "records": records,
                               "revoked": all(r["revoked_at"] for r in records)})
    for fam in state["families"]:
        fam["label"] = family_label(fam["family"])
        fam["held_back"] = held.get(fam["family"], [])
        for entry in fam["held_back"]:
            entry["local_text"] = local.get(entry["lesson"])
        fam["waiting"] = waiting.get(fam["family"], [])
        fam["published"] = published.get(fam["family"], [])
    state["families"].sort(key=lambda f: (not f["enabled"], f["label"], f["family"]))
    return state


def family_known(store, fam: str) -> bool:
    """Whether ``fam`` is a project family the publishing view lists (actions take no other)."""
    from openmemory_local.commons.publish import status

    return any(f["family"] == fam for f in status(store, known=True)["families"])


def lesson_page(store, lesson_id: int) -> dict | None:
    """One lesson with everything behind it: its record, predictions, events, the episodes it
    was learned from, and the files it has in memory folders; None if there is none."""
    rows = lesson_rows(store, states=("active", "archived", "forming"), include_vetoed=True, ids=[lesson_id])
    if not rows:
        return None
    lesson = rows[0]
    lesson["predictions"] = [
        {"id": pid, "made": made, "text": text, "state": state, "resolved": resolved, "episode_id": eid,
         "similarity": sim, "facet": facet}
        for pid, made, text, state, resolved, eid, sim, facet in views.lesson_predictions(store, lesson_id)]
    lesson["events"] = [
        {"id": eid, "at": at, "kind": kind, "prediction": pid, "detail": loads(detail, {})}
        for eid, at, kind, pid, detail in views.lesson_events(store, lesson_id)]
    lesson["members"] = [
        {"id": eid, "kind": kind, "created": created, "session_id": sid, "text": text, "archived": bool(archived),
         "source_path": path, "source_line": line, "joined": joined}
        for eid, kind, created, sid, text, archived, path, line, joined
        in views.lesson_members_shown(store, lesson_id, _MEMBERS_SHOWN)]
    lesson["members_total"] = views.lesson_member_count(store, lesson_id)
    lesson["files"] = [
        {"path": path, "state": state, "written": written, "exists": os.path.exists(path)}
        for path, state, written in views.files_of(store, lesson_id, "lesson")]
    lesson["history"] = strength_history(store, lesson_id)
    return lesson


def strength_history(store, lesson_id: int) -> list[tuple[datetime, float, str]]:
    """A lesson's strength over time, ``(when, strength, kind)`` oldest first, from its events:
    what it was learned at, each change (its value before, then after: between two events it
    decayed), vetoes on the curve, and where it stands now (kind ``now``). Empty for a
    group still forming."""
    points: list[tuple[datetime, float, str]] = []
    last = None
    for _eid, at, kind, _pid, detail_json in views.lesson_events(store, lesson_id):
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
    row = views.lesson_state_strength(store, lesson_id)
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
        for lid, text, state, vetoed in views.lessons_of_episode(store, episode_id)]
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
    for rid, made, data, file in views.report_list(store, limit):
        out.append({"id": rid, "made": made, "counts": loads(data, {}).get("counts", {}), "file": file})
    return out


def report(store, report_id: int | None = None) -> dict | None:
    """One morning report (the latest without ``report_id``): its data and Markdown."""
    row = views.report_row(store, report_id)
    if row is None:
        return None
    rid, made, data, markdown, file = row
    return {"id": rid, "made": made, "counts": loads(data, {}).get("counts", {}), "markdown": markdown, "file": file,
            "path": str(store.config.home / file)}


# --- search (the engine's recall) --------------------------------------------------------------


#: Lessons (own, and received) shown beside the episodes a search recalls, at most.
SEARCH_LESSONS = 3


def search(store, query: str, k: int, now: datetime, *, kinds: list[str] | None = None) -> dict:
    """Recall ``query`` as the engine does, touching nothing: ``{"episodes", "lessons",
    "commons"}``. Episodes are :func:`openmemory_local.recall.query.recall` (``touch=False``) as
    rows: ``kind``, ``id``, ``text``, ``created``, ``project``, ``score``, ``components``,
    ``url`` and ``lessons`` (the lessons the memory is in). Beside them, as ``openmemory
    recall`` and the MCP ``recall`` tool show them: this agent's lessons
    (:func:`openmemory_local.recall.query.recall_lessons`) and the received lessons resembling the
    query (:func:`openmemory_local.commons.choose.recall_commons`); none of either when a kind of
    episode is asked for. Raises ``EmptyQuery``."""
    from openmemory_local.commons.choose import recall_commons
    from openmemory_local.recall.query import recall, recall_lessons

    lesson_hits = [] if kinds else recall_lessons(store, query, SEARCH_LESSONS, now)
    results = recall(store, query, k, now, kinds=kinds, touch=False)
    ids = [r.id for r in results]
    in_lessons: dict[int, list[int]] = {}
    if ids:
        for eid, lid in views.lessons_of_episodes(store, ids):
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
    lessons = [{"type": "lesson", **h.to_dict(), "url": f"/lessons/{h.lesson['id']}"} for h in lesson_hits]
    received = [] if kinds else [
        {"type": "commons", "lesson": row, "similarity": row["similarity"], "url": f"/commons/{row['record_id']}"}
        for row in recall_commons(store, query, SEARCH_LESSONS)]
    return {"episodes": rows, "lessons": lessons, "commons": received}


def open_result(store, episode_id: int, now: datetime) -> bool:
    """The person opened a search result: touch it, as a recall that used it would
    (``last_touched``, ``touches + 1``). False if there is no such episode or the store
    stayed locked."""
    from openmemory_local.recall.query import index_for

    if store.episode(episode_id) is None:
        return False
    if not store.touch([episode_id], iso(now), timeout=store.config.touch_timeout):
        return False
    index_for(store).note_touched([episode_id], now)
    return True
