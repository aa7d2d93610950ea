"""What the local page (:mod:`openmemory_local.ui.data`) reads: the store's counts, and everything
behind one lesson, one received lesson, one episode or one report. Reads only; each returns rows
(tuples) in the order its docstring names, for the page to shape.
"""

from __future__ import annotations

from openmemory_local.storage.store import rows_by_ids

# --- the header --------------------------------------------------------------------


def lesson_states(store) -> dict[str, int]:
    """Lesson state -> how many."""
    return dict(store.conn.execute("SELECT state, COUNT(*) FROM lessons GROUP BY state").fetchall())


def vetoed_lesson_count(store) -> int:
    """Lessons (not groups still forming) the owner vetoed."""
    return store.conn.execute("SELECT COUNT(*) FROM lessons WHERE vetoed_at IS NOT NULL AND state != 'forming'"
                              ).fetchone()[0]


def live_episode_count(store) -> int:
    return store.conn.execute("SELECT COUNT(*) FROM episodes WHERE archived = 0").fetchone()[0]


def latest_report_made(store) -> tuple | None:
    """(id, made) of the latest report, or None."""
    return store.conn.execute("SELECT id, made FROM reports ORDER BY id DESC LIMIT 1").fetchone()


# --- one lesson ----------------------------------------------------------------------


def lesson_predictions(store, lesson_id: int) -> list[tuple]:
    """(id, made, text, state, resolved, episode_id, similarity, facet), newest first."""
    return store.conn.execute(
        "SELECT id, made, text, state, resolved, episode_id, similarity, facet FROM predictions "
        "WHERE lesson_id = ? ORDER BY id DESC", (lesson_id,)).fetchall()


def lesson_events(store, lesson_id: int) -> list[tuple]:
    """(id, at, kind, prediction_id, detail JSON) of a lesson's events, in order."""
    return store.conn.execute("SELECT id, at, kind, prediction_id, detail FROM events WHERE lesson_id = ? ORDER BY id",
                              (lesson_id,)).fetchall()


def lesson_members_shown(store, lesson_id: int, limit: int) -> list[tuple]:
    """(id, kind, created, session_id, text, archived, source_path, source_line, joined) of a
    lesson's first ``limit`` member episodes, oldest first."""
    return store.conn.execute(
        "SELECT e.id, e.kind, e.created, e.session_id, e.text, e.archived, e.source_path, e.source_line, "
        "m.joined FROM lesson_members m JOIN episodes e ON e.id = m.episode_id WHERE m.lesson_id = ? "
        "ORDER BY e.created, e.id LIMIT ?", (lesson_id, limit)).fetchall()


def lesson_member_count(store, lesson_id: int) -> int:
    return store.conn.execute("SELECT COUNT(*) FROM lesson_members WHERE lesson_id = ?", (lesson_id,)).fetchone()[0]


def files_of(store, lesson_id: int, role: str = "lesson") -> list[tuple]:
    """(path, state, written) of the files of a lesson (``role`` ``lesson``) or of a received
    lesson (``commons``) in memory folders, by path."""
    return store.conn.execute("SELECT path, state, written FROM rendered_files WHERE role = ? AND lesson_id = ? "
                              "ORDER BY path", (role, lesson_id)).fetchall()


def lesson_state_strength(store, lesson_id: int) -> tuple | None:
    """(state, strength) of a lesson, or None."""
    return store.conn.execute("SELECT state, strength FROM lessons WHERE id = ?", (lesson_id,)).fetchone()


# --- one received lesson ---------------------------------------------------------------


def commons_lesson_predictions(store, commons_id: int) -> list[tuple]:
    """(id, family, made, text, state, resolved, sessions, matched, episode_id, facet, similarity), newest first."""
    return store.conn.execute(
        "SELECT id, family, made, text, state, resolved, sessions, matched, episode_id, facet, similarity "
        "FROM commons_predictions WHERE commons_id = ? ORDER BY id DESC", (commons_id,)).fetchall()


def commons_lesson_events(store, commons_id: int) -> list[tuple]:
    """(at, kind, detail JSON) of the events about a received lesson, in order."""
    return store.conn.execute(
        "SELECT at, kind, detail FROM events WHERE lesson_id IS NULL AND json_extract(detail, '$.commons') = ? "
        "ORDER BY id", (commons_id,)).fetchall()


def received_record_ids(store, among: list[str] | None = None) -> set[str]:
    """The record ids of the received lessons held (those of ``among`` only, if given)."""
    if among is None:
        return {rid for (rid,) in store.conn.execute("SELECT record_id FROM commons_lessons")}
    return {rid for (rid,) in rows_by_ids(store, "SELECT record_id FROM commons_lessons WHERE record_id IN ({ids})",
                                          among)}


def own_lesson_of_record(store, record_id: str) -> int | None:
    """The lesson of this engine a published record is, if it is one."""
    row = store.conn.execute("SELECT lesson_id FROM published WHERE record_id = ?", (record_id,)).fetchone()
    return row[0] if row else None


def received_chain_rows(store) -> list[tuple]:
    """(record_id, status, text, derived_from JSON) of every received lesson."""
    return store.conn.execute("SELECT record_id, status, text, derived_from FROM commons_lessons").fetchall()


# --- publishing ----------------------------------------------------------------------


def outbox_rows(store) -> list[tuple]:
    """(lesson_id, family, state, text, kind, strength, reasons, queued, attempts, last_error)
    of the outbox, oldest first."""
    return store.conn.execute(
        "SELECT q.lesson_id, q.family, q.state, q.text, q.kind, q.strength, q.reasons, q.queued, q.attempts, "
        "q.last_error FROM publish_queue q ORDER BY q.id").fetchall()


def local_texts_of_published(store) -> dict[int, str]:
    """Lesson id -> its local text, for the lessons queued or published."""
    return dict(store.conn.execute(
        "SELECT id, COALESCE(text, rule_text) FROM lessons WHERE id IN (SELECT lesson_id FROM publish_queue "
        "UNION SELECT lesson_id FROM published)"))


# --- episodes ----------------------------------------------------------------------------


def lessons_of_episode(store, episode_id: int) -> list[tuple]:
    """(id, text, state, vetoed_at) of the lessons an episode is in."""
    return store.conn.execute(
        "SELECT l.id, COALESCE(l.text, l.rule_text), l.state, l.vetoed_at FROM lesson_members m "
        "JOIN lessons l ON l.id = m.lesson_id WHERE m.episode_id = ?", (episode_id,)).fetchall()


def lessons_of_episodes(store, ids: list[int]) -> list[tuple]:
    """(episode_id, lesson_id) of the memberships of these episodes."""
    return rows_by_ids(store, "SELECT episode_id, lesson_id FROM lesson_members WHERE episode_id IN ({ids})", ids)


# --- reports -------------------------------------------------------------------------------


def report_list(store, limit: int) -> list[tuple]:
    """(id, made, data JSON, file) of the latest ``limit`` reports, newest first."""
    return store.conn.execute("SELECT id, made, data, file FROM reports ORDER BY id DESC LIMIT ?", (limit,)).fetchall()


def report_row(store, report_id: int | None = None) -> tuple | None:
    """(id, made, data JSON, markdown, file) of one report (the latest without ``report_id``)."""
    columns = "SELECT id, made, data, markdown, file FROM reports"
    if report_id is None:
        return store.conn.execute(f"{columns} ORDER BY id DESC LIMIT 1").fetchone()
    return store.conn.execute(f"{columns} WHERE id = ?", (report_id,)).fetchone()
