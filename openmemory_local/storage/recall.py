"""What recall reads, in bulk: the episode columns its index holds (all of them, as one row of
concatenated columns, or those changed since a ``seq``), the active lessons, and the members
that are each lesson's evidence (see :mod:`openmemory_local.recall.query`).

One query each, never one per row: recall is a path a person waits for.
"""

from __future__ import annotations

#: The columns of an episode recall's index keeps, in the order :func:`episodes_changed_after` gives them.
INDEX_COLUMNS = "id, vec_row, kind, project, last_touched, strength, archived"


def episodes_changed_after(store, seq: int) -> list[tuple]:
    """(id, vec_row, kind, project, last_touched, strength, archived) of the episodes changed after ``seq``."""
    return store.conn.execute(f"SELECT {INDEX_COLUMNS} FROM episodes WHERE seq > ?", (seq,)).fetchall()


def episode_index_columns(store, rows: int) -> tuple:
    """Every episode with a vector row below ``rows``, as one row of seven concatenated columns:
    vec_row, id, last_touched (Unix seconds), strength, archived (comma-separated), kind, project
    (separated by ``char(31)``, a missing project empty); all None when there is none."""
    return store.conn.execute(
        "SELECT group_concat(vec_row), group_concat(id), "
        "group_concat((julianday(last_touched) - 2440587.5) * 86400.0), "
        "group_concat(strength), group_concat(archived), "
        "group_concat(kind, char(31)), group_concat(ifnull(project, ''), char(31)) "
        "FROM episodes WHERE vec_row IS NOT NULL AND vec_row < ?", (rows,)
    ).fetchone()


def lesson_member_rows(store, rows: int, latest: int | None = None) -> tuple:
    """The members of the active, unvetoed lessons whose episode has a vector row below ``rows``,
    as one row of three comma-separated columns (lesson ids, episode ids, vector rows); with
    ``latest``, each lesson's latest ``latest`` members only. All None when there is none."""
    sql = ("SELECT group_concat(m.lesson_id), group_concat(m.episode_id), group_concat(e.vec_row) "
           "FROM lesson_members m JOIN lessons l ON l.id = m.lesson_id JOIN episodes e ON e.id = m.episode_id "
           "WHERE l.state = 'active' AND l.vetoed_at IS NULL AND e.vec_row IS NOT NULL AND e.vec_row < ?")
    if latest is not None:
        sql = ("SELECT group_concat(lesson_id), group_concat(episode_id), group_concat(vec_row) FROM ("
               "SELECT m.lesson_id, m.episode_id, e.vec_row, ROW_NUMBER() OVER (PARTITION BY m.lesson_id "
               "ORDER BY m.created DESC) AS n " + sql[sql.index("FROM"):] + ") WHERE n <= " + str(int(latest)))
    return store.conn.execute(sql, (rows,)).fetchone()


def recallable_lessons(store) -> list[tuple]:
    """(id, kind, family, text, strength, seen, sessions, last_seen, reinforced, details, file_name)
    of the active lessons not vetoed."""
    return store.conn.execute(
        "SELECT id, kind, family, text, strength, seen, sessions, last_seen, reinforced, details, file_name "
        "FROM lessons WHERE state = 'active' AND vetoed_at IS NULL").fetchall()
