"""What changed and what was said of it: tables ``events`` (written by
:func:`openmemory_local.storage.store.record_event`) and ``reports`` (the morning reports,
:mod:`openmemory_local.render.report`); and the texts a report quotes.

Plain SQL over ``store.conn``; writers run inside the caller's ``store.write()``.
"""

from __future__ import annotations

from openmemory_local.storage.store import rows_by_ids

from openmemory_local.core.jsonio import dumps





def events_after(store, event_id: int) -> list[tuple]:
    """(id, at, kind, lesson_id, prediction_id, detail) of the events after ``event_id``, in order."""
    return store.conn.execute(
        "SELECT id, at, kind, lesson_id, prediction_id, detail FROM events WHERE id > ? ORDER BY id",
        (event_id,)).fetchall()


def lesson_summaries(store, ids) -> dict[int, tuple[str, float, int, int]]:
    """Lesson id -> (text, strength, seen, sessions), for these ids."""
    return {lid: (text, strength, seen, sessions) for lid, text, strength, seen, sessions in rows_by_ids(
        store, "SELECT id, text, strength, seen, sessions FROM lessons WHERE id IN ({ids})", ids)}


def prediction_texts(store, ids) -> dict[int, str]:
    """Prediction id -> its text, for these ids."""
    return dict(rows_by_ids(store, "SELECT id, text FROM predictions WHERE id IN ({ids})", ids))


def last_reported(store) -> tuple[int, str | None]:
    """(the last event a report covered, 0 if none; when the last report was made)."""
    row = store.conn.execute("SELECT MAX(last_event), MAX(made) FROM reports").fetchone()
    return row[0] or 0, row[1]


def next_report_id(store) -> int:
    return store.conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM reports").fetchone()[0]


def insert_report(store, report_id: int, made: str, data: dict, markdown: str) -> None:
    """A report: its data (with ``first_event``, ``last_event``, ``file``) and Markdown."""
    store.conn.execute(
        "INSERT INTO reports (id, made, first_event, last_event, file, data, markdown) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (report_id, made, data["first_event"], data["last_event"], data["file"], dumps(data), markdown))


def latest_report(store) -> tuple | None:
    """(data JSON, markdown, file) of the latest report, or None."""
    return store.conn.execute("SELECT data, markdown, file FROM reports ORDER BY id DESC LIMIT 1").fetchone()
