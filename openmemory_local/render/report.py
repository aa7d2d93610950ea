"""The morning report: what sleep, render and the owner changed since the previous report.

A report gathers the events (table ``events``) recorded since the last report: lessons
learned, strengthened (a failure recurred in a new session), predictions confirmed and
failed, lessons and episodes archived, lessons vetoed (a deleted file, or ``openmemory
veto``) and unvetoed, files the owner edited (left alone), new predictions. It is stored
in the ``reports`` table and written as Markdown to ``<home>/reports/<time>-<id>.md``
(``<time>`` is the sleep's ``now``, ``2026-02-12T23-59-59Z``); ``openmemory run`` prints
it, ``openmemory report`` shows the latest. No events, no report: a run with nothing new
writes nothing.

Python API: :func:`latest_report` (``(path, markdown)`` or None, from the files alone, so
it needs no open store) and :func:`latest_report_data` (the stored report as data).
"""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

from openmemory_local.core.clock import iso
from openmemory_local.core.jsonio import loads
from openmemory_local.sleep.lesson_text import clip
from openmemory_local.storage import events as events_table

__all__ = ["make_report", "latest_report", "latest_report_data", "report_markdown", "SECTIONS"]

#: Report sections, in order: (key, title, event kinds).
SECTIONS = (
    ("learned", "Learned", ("learned",)),
    ("strengthened", "Strengthened", ("strengthened", "revived")),
    ("confirmed", "Predictions confirmed", ("confirmed",)),
    ("failed", "Predictions failed", ("failed",)),
    ("archived", "Archived", ("archived", "episodes_archived")),
    ("vetoed", "Vetoed", ("vetoed", "unvetoed")),
    ("edited", "Left alone (edited by their owner)", ("edited", "index_removed")),
    ("predicted", "New predictions", ("predicted",)),
    ("published", "Published to the commons", ("published", "published_revoked")),
    ("held", "Held back from the commons", ("held",)),
    ("waiting", "Waiting for the commons node", ("publish_waiting",)),
    # the commons layer (openmemory_local.commons.receive)
    ("commons_received", "Received from the commons", ("commons_received",)),
    ("commons_status", "Received lessons whose status changed", ("commons_status",)),
    ("commons_attested", "Attested to the commons", ("commons_attested",)),
    ("commons_removed", "Received lessons removed", ("commons_revoked", "commons_vetoed", "commons_unvetoed")),
    ("model_refused", "Model answers refused", ("model_refused",)),
)
_NAME = re.compile(r"^(?P<stamp>\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}Z)-(?P<id>\d+)\.md$")


def _stamp(moment: str) -> str:
    return moment[:19].replace(":", "-") + "Z"


def _lesson_texts(store, ids: set[int]) -> dict[int, tuple[str, float, int, int]]:
    return events_table.lesson_summaries(store, ids)


def _collect(store, events: list[tuple]) -> dict:
    lessons = _lesson_texts(store, {e[3] for e in events if e[3] is not None})
    predictions = events_table.prediction_texts(store, {e[4] for e in events if e[4] is not None})
    sections: dict[str, list] = {key: [] for key, _, _ in SECTIONS}
    kind_to_section = {kind: key for key, _, kinds in SECTIONS for kind in kinds}
    for eid, at, kind, lesson_id, prediction_id, detail_json in events:
        detail = loads(detail_json, {})
        item = {"event": eid, "at": at, "kind": kind, "lesson": lesson_id, "prediction": prediction_id, **detail}
        if lesson_id in lessons:
            text, strength, seen, sessions = lessons[lesson_id]
            item.setdefault("text", text)
            item["lesson_text"] = text
            item["strength_now"] = round(strength, 4)
            item["seen"], item["sessions"] = seen, sessions
        if prediction_id in predictions:
            item["prediction_text"] = predictions[prediction_id]
        section = kind_to_section.get(kind)
        if section:
            sections[section].append(item)
    counts = {
        "learned": len(sections["learned"]),
        "strengthened": len({i["lesson"] for i in sections["strengthened"]}),
        "confirmed": len(sections["confirmed"]),
        "failed": len(sections["failed"]),
        "archived_lessons": sum(1 for i in sections["archived"] if i["kind"] == "archived"),
        "archived_episodes": sum(i.get("count", 0) for i in sections["archived"] if i["kind"] == "episodes_archived"),
        "vetoed": sum(1 for i in sections["vetoed"] if i["kind"] == "vetoed"),
        "published": sum(1 for i in sections["published"] if i["kind"] == "published"),
        "held": len(sections["held"]),
        "model_refused": len(sections["model_refused"]),
    }
    return {"counts": counts, "sections": sections}


def make_report(store, now: datetime) -> dict | None:
    """Write the report of the events since the previous one; None if there are none."""
    now_iso = iso(now)
    ensure_report_files(store)
    with store.write():
        last_event, previous = events_table.last_reported(store)
        events = events_table.events_after(store, last_event)
        if not events:
            return None
        data = _collect(store, events)
        data.update({"made": now_iso, "since": previous, "first_event": events[0][0], "last_event": events[-1][0]})
        report_id = events_table.next_report_id(store)
        name = f"{_stamp(now_iso)}-{report_id}.md"
        data["id"] = report_id
        data["file"] = f"reports/{name}"
        markdown = report_markdown(data)
        events_table.insert_report(store, report_id, now_iso, data, markdown)
    _write_file(store.config.reports_dir / name, markdown)
    data["markdown"] = markdown
    return data


def _write_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _when(stamp: str | None) -> str:
    return (stamp or "")[:16].replace("T", " ") + " UTC" if stamp else "the beginning"


def _q(text: str | None, n: int = 240) -> str:
    return clip(text or "", n)


def report_markdown(data: dict) -> str:
    """The report as Markdown (deterministic for the same data)."""
    c = data["counts"]
    s = data["sections"]
    lines = [
        "# Open Memory: morning report",
        "",
        f"Made {_when(data['made'])}, covering what changed since {_when(data.get('since'))}: "
        f"{c['learned']} learned, {c['strengthened']} strengthened, {c['confirmed']} confirmed, "
        f"{c['failed']} failed, {c['archived_lessons']} lessons and {c['archived_episodes']} episodes archived, "
        f"{c['vetoed']} vetoed.",
        "",
        "Lessons are observations of what happened in earlier sessions; they are not instructions.",
    ]

    def _sessions(n) -> str:
        return f"{n} session" if n == 1 else f"{'?' if n is None else n} sessions"

    def section(title: str, items: list[str]) -> None:
        if items:
            lines.extend(["", f"## {title}", ""])
            lines.extend(items)

    section("Learned", [
        f"- lesson {i['lesson']} ({_sessions(i.get('sessions'))}, strength {i.get('strength', 0):.2f}): "
        f"{_q(i.get('lesson_text') or i.get('text'))}" for i in s["learned"]])
    section("Strengthened", [
        (f"- lesson {i['lesson']}: strength {i.get('before', 0):.2f} to {i.get('after', 0):.2f}, "
         f"met again in {i.get('new_sessions', 0)} new session(s): {_q(i.get('lesson_text'))}")
        if i["kind"] == "strengthened" else
        f"- lesson {i['lesson']} revived at strength {i.get('strength', 0):.2f}: {_q(i.get('lesson_text'))}"
        for i in s["strengthened"]])
    section("Predictions confirmed", [
        f"- lesson {i['lesson']}: \"{_q(i.get('prediction_text'), 160)}\" met by episode #{i.get('episode')} "
        f"(`{_q(i.get('facet'), 80)}`, similarity {i.get('similarity', 0):.2f}); strength "
        f"{i.get('before', 0):.2f} to {i.get('after', 0):.2f}" for i in s["confirmed"]])
    section("Predictions failed", [
        (f"- lesson {i['lesson']}: \"{_q(i.get('prediction_text'), 160)}\": {i['why']} (`{_q(i.get('facet'), 80)}`, "
         f"episode #{i.get('episode')}); strength {i.get('before', 0):.2f} to {i.get('after', 0):.2f}")
        if i.get("why") else
        f"- lesson {i['lesson']}: \"{_q(i.get('prediction_text'), 160)}\" unmet after {i.get('days', '?')} days; "
        f"strength {i.get('before', 0):.2f} to {i.get('after', 0):.2f}" for i in s["failed"]])
    section("Archived", [
        (f"- {i.get('count', 0)} episodes faded below the archive threshold (kept, no longer recalled)"
         if i["kind"] == "episodes_archived" else
         f"- lesson {i['lesson']} ({i.get('why', 'faded')}, strength {i.get('strength', 0):.2f}): "
         f"{_q(i.get('lesson_text'))}") for i in s["archived"]])
    section("Vetoed", [
        (f"- lesson {i['lesson']} vetoed ({i.get('why', '')}): {_q(i.get('lesson_text'))}"
         if i["kind"] == "vetoed" else f"- lesson {i['lesson']} unvetoed: {_q(i.get('lesson_text'))}")
        for i in s["vetoed"]])
    section("Left alone (edited by their owner)", [
        (f"- {i.get('path')}: lesson {i['lesson']}'s file was edited; it is no longer rewritten"
         if i["kind"] == "edited" else f"- {i.get('path')}: the Open Memory section was removed; it is not added again")
        for i in s["edited"]])
    section("New predictions", [
        f"- lesson {i['lesson']}: {_q(i.get('text'), 200)}" for i in s["predicted"]])
    section("Published to the commons", [
        (f"- lesson {i['lesson']} as record {str(i.get('record', ''))[:16]}…"
         + (" (already on the node: a retry)" if i.get("duplicate") else "")
         + (f", replacing {str(i['derived_from'][0])[:16]}…" if i.get("derived_from") else "")
         + f": {_q(i.get('text'))}")
        if i["kind"] == "published" else
        f"- lesson {i['lesson']}: record {str(i.get('record', ''))[:16]}… revoked ({i.get('code', '')})"
        for i in s.get("published", [])])
    section("Held back from the commons", [
        f"- lesson {i['lesson']}: " + "; ".join(str(r) for r in i.get("reasons") or [])
        + f" ({_q(i.get('lesson_text'), 160)})"
        for i in s.get("held", [])])
    section("Waiting for the commons node", [
        f"- {i.get('count', 0)} record(s) wait in the queue: {_q(i.get('why') or 'the node did not answer', 200)}; "
        "they are sent by the next run that finds the node" for i in s.get("waiting", [])])
    _commons_sections(s, section)
    section("Model answers refused", [
        f"- lesson {i['lesson']}: the lesson model's answer broke the observation rule ({i.get('rule', '?')}); "
        f"the deterministic text was kept" for i in s.get("model_refused", [])])
    return "\n".join(lines) + "\n"


_SHOWN = 20  # received lessons listed by name per section; the rest are counted


def _commons_sections(s: dict, section) -> None:
    """What the commons layer received, attested and removed (events of openmemory_local.commons.receive)."""

    def listed(items: list, line) -> list[str]:
        out = [line(i) for i in items[:_SHOWN]]
        if len(items) > _SHOWN:
            out.append(f"- and {len(items) - _SHOWN} more (`openmemory commons` lists them)")
        return out

    def rid(i: dict) -> str:
        return (i.get("record") or "?")[:16]

    received = s.get("commons_received", [])
    section("Received from the commons", ([f"{len(received)} lesson(s) other agents reported, "
                                           f"{sum(1 for i in received if i.get('status') == 'common')} of them common. "
                                           "They are observations of other agents, not this agent's own."]
                                          if received else []) + listed(received, lambda i: (
        f"- {rid(i)} ({i.get('status')}): {_q(i.get('text'), 200)}")))
    section("Received lessons whose status changed", listed(s.get("commons_status", []), lambda i: (
        f"- {rid(i)}: {i.get('before')} to {i.get('after')}"
        + (f" ({i['confirmers']} independent confirmer(s))" if i.get("confirmers") is not None else "")
        + f": {_q(i.get('text'), 160)}")))
    section("Attested to the commons", listed(s.get("commons_attested", []), lambda i: (
        f"- {rid(i)}: {i.get('verdict')} ({i.get('matched', 0)} of {i.get('sessions', 0)} sessions met it"
        + ("; met before it was received, so it does not count" if i.get("met_before") else "")
        + f"; the node: {i.get('node_status') or '?'}): {_q(i.get('text'), 160)}")))

    def removed(i: dict) -> str:
        if i["kind"] == "commons_revoked":
            where = len(i.get("rendered_in") or [])
            return (f"- {rid(i)} revoked (was {i.get('before')}); removed from {where} memory folder(s): "
                    f"{_q(i.get('text'), 160)}")
        if i["kind"] == "commons_vetoed":
            return f"- {rid(i)} vetoed ({i.get('why', '')}): {_q(i.get('text'), 160)}"
        return f"- {rid(i)} unvetoed: {_q(i.get('text'), 160)}"

    section("Received lessons removed", listed(s.get("commons_removed", []), removed))


def latest_report(home: str | os.PathLike) -> tuple[Path, str] | None:
    """The latest morning report under ``<home>/reports``: (its file, its Markdown), or None."""
    folder = Path(home) / "reports"
    try:
        names = [(int(m.group("id")), entry) for entry in folder.iterdir()
                 if (m := _NAME.match(entry.name)) and entry.is_file()]
    except FileNotFoundError:
        return None
    if not names:
        return None
    _, path = max(names)
    try:
        return path, path.read_text(encoding="utf-8")
    except OSError:
        return None


def latest_report_data(store) -> dict | None:
    """The latest stored report as data (``counts``, ``sections``, ``markdown``, ...), or None."""
    row = events_table.latest_report(store)
    if row is None:
        return None
    data = loads(row[0], {})
    data["markdown"] = row[1]
    return data


def ensure_report_files(store) -> int:
    """Write the Markdown of the latest stored report if its file is missing (a run killed
    between the commit and the file). Returns how many were written."""
    written = 0
    latest = events_table.latest_report(store)
    for _data, markdown, file in [latest] if latest else []:
        path = store.config.home / file
        if not path.exists():
            _write_file(path, markdown)
            written += 1
    return written
