"""What the paper's measures read (:mod:`openmemory_local.eval.measures`), and the reset of a
scratch copy of the store they learn on. Reads are whole-table scans, once per evaluation.
"""

from __future__ import annotations

from openmemory_local.storage.store import rows_by_ids

from pathlib import Path


def session_starts(store, after: str | None) -> list[tuple]:
    """(session_id, created) of the session episodes created after ``after``."""
    return store.conn.execute("SELECT session_id, created FROM episodes WHERE kind = 'session' AND created > ?",
                              (after or "",)).fetchall()


def surprise_rows(store, after: str | None, failures: list[str]) -> list[tuple]:
    """(episode id, kind, session, created, lesson id or None) of the corrections and of the
    errors whose failure is one of ``failures``, created after ``after``, in time order."""
    marks = ",".join("?" * len(failures))
    return store.conn.execute(
        "SELECT e.id, e.kind, e.session_id, e.created, m.lesson_id FROM episodes e "
        "LEFT JOIN lesson_members m ON m.episode_id = e.id WHERE e.created > ? AND (e.kind = 'correction' OR "
        f"(e.kind = 'error' AND json_extract(e.fields, '$.failure') IN ({marks}))) ORDER BY e.created, e.id",
        [after or "", *failures]).fetchall()


def correction_rows(store) -> list[tuple]:
    """(id, session_id, created, project, fields JSON) of every correction, oldest first."""
    return store.conn.execute("SELECT id, session_id, created, project, fields FROM episodes WHERE kind = 'correction' "
                              "ORDER BY created, id").fetchall()


def learned_times(store, *, formed_only: bool = False) -> dict[int, str]:
    """Lesson id -> when it was learned (those learned; not groups still forming with ``formed_only``)."""
    sql = "SELECT id, learned FROM lessons WHERE learned IS NOT NULL"
    if formed_only:
        sql += " AND state != 'forming'"
    return dict(store.conn.execute(sql).fetchall())


def prediction_outcomes(store, ids: list[int] | None = None) -> list[tuple]:
    """(state, resolved) of every prediction, or of those of ``ids``."""
    sql = "SELECT state, resolved FROM predictions"
    if ids is None:
        return store.conn.execute(sql).fetchall()
    return rows_by_ids(store, sql + " WHERE id IN ({ids})", ids)


def open_prediction_ids(store) -> list[int]:
    return [pid for (pid,) in store.conn.execute("SELECT id FROM predictions WHERE state = 'open'")]


def episode_corpus(store) -> list[tuple]:
    """(id, session_id, created, text) of every episode, by id."""
    return store.conn.execute("SELECT id, session_id, created, text FROM episodes ORDER BY id").fetchall()


def memberships(store) -> list[tuple]:
    """(lesson_id, episode_id) of every lesson member."""
    return store.conn.execute("SELECT lesson_id, episode_id FROM lesson_members").fetchall()


def episode_count(store, *, created_before: str | None = None, created_after: str | None = None) -> int:
    """How many episodes (created at or before ``created_before``, or after ``created_after``)."""
    if created_before is not None:
        return store.conn.execute("SELECT COUNT(*) FROM episodes WHERE created <= ?", (created_before,)).fetchone()[0]
    if created_after is not None:
        return store.conn.execute("SELECT COUNT(*) FROM episodes WHERE created > ?", (created_after,)).fetchone()[0]
    return store.conn.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]


def last_times(store) -> tuple:
    """(the latest episode's creation, the latest session end)."""
    return store.conn.execute("SELECT MAX(created), MAX(json_extract(fields, '$.ended')) FROM episodes").fetchone()


def copy_database(store, path: Path) -> None:
    """A consistent copy of the store's database at ``path`` (SQLite's online backup)."""
    import sqlite3

    target = sqlite3.connect(path)
    try:
        with target:
            store.conn.backup(target)
    finally:
        target.close()


def forget_learning(store) -> None:
    """A scratch copy back to its episodes only: no lessons, predictions, events, reports or
    rendered files, every episode at full strength, never decayed nor slept."""
    with store.write():
        for table in ("events", "reports", "predictions", "lesson_members", "lessons", "rendered_files"):
            store.conn.execute(f"DELETE FROM {table}")
        store.conn.execute("DELETE FROM meta WHERE key IN ('decayed_until', 'last_sleep')")
        store.conn.execute("UPDATE episodes SET strength = 1.0, archived = 0, touches = 0")
