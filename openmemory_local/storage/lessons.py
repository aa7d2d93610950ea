"""The lessons' tables behind functions: ``lessons`` (groups and lessons), ``lesson_members`` and
``predictions`` (store.py's module docstring describes their columns).

What to write is decided elsewhere (:mod:`openmemory_local.sleep.lifecycle`, the pure rules;
:mod:`openmemory_local.sleep.passes`, which asks them); this module only reads and writes rows.
Plain SQL over ``store.conn``; every function runs inside the caller's transaction
(``store.write()``). The passes' hot paths read and write many rows at once: the functions that
serve them take or return lists (``IN (...)`` a chunk at a time, ``executemany``), never one
round trip per row.
"""

from __future__ import annotations

from openmemory_local.storage.store import rows_by_ids

from typing import Callable, Iterable

__all__ = [
    "per_id",
    "archive_lesson",
    "withdraw_predictions",
    "set_veto",
    "lesson_state",
    "lessons_in_state",
    "decay_active_lessons",
    "forming_groups",
    "delete_groups",
    "group_rows",
    "member_signatures",
    "all_members",
    "next_lesson_id",
    "set_centroids",
    "all_lesson_ids",
    "insert_members",
    "member_sessions",
    "member_counts",
    "text_sources",
    "latest_members",
    "member_commands",
    "defer_foreign_keys",
    "write_groups",
    "group_statement",
    "open_predictions",
    "strengths",
    "set_strength",
    "resolve_prediction",
    "all_groups",
    "with_open_prediction",
    "details_of",
    "insert_prediction",
    "select_lessons",
    "prediction_record",
    "open_prediction",
    "provenance_episodes",
]


def per_id(store, sql: str, ids: list) -> dict[int, list[tuple]]:
    """Rows of ``sql`` (``IN ({ids})`` filled with ``ids``: :func:`rows_by_ids`) by their first column."""
    out: dict[int, list[tuple]] = {}
    for row in rows_by_ids(store, sql, ids):
        out.setdefault(row[0], []).append(row)
    return out


# --- states: archive, veto, withdraw -----------------------------------------------------------


def archive_lesson(store, lesson_id: int, at: str) -> None:
    """Write a lesson's archiving (L4, L5) and withdraw its open prediction (P5)."""
    store.conn.execute("UPDATE lessons SET state = 'archived', archived_at = ?, updated = ? WHERE id = ?",
                 (at, at, lesson_id))
    withdraw_predictions(store, lesson_id, at)


def withdraw_predictions(store, lesson_id: int, at: str) -> int:
    """Close a lesson's open prediction without counting it (P5: its lesson was archived or vetoed)."""
    return store.conn.execute(
        "UPDATE predictions SET state = 'withdrawn', resolved = ? WHERE lesson_id = ? AND state = 'open'",
        (at, lesson_id),
    ).rowcount


def set_veto(store, lesson_id: int, vetoed_at: str | None, at: str) -> None:
    """Write a lesson's veto flag (L7: ``vetoed_at`` None lifts it); a veto withdraws its open
    prediction (P5). Only :func:`openmemory_local.sleep.lessons.veto` and ``unveto`` call this."""
    store.conn.execute("UPDATE lessons SET vetoed_at = ?, updated = ? WHERE id = ?", (vetoed_at, at, lesson_id))
    if vetoed_at is not None:
        withdraw_predictions(store, lesson_id, at)


def lesson_state(store, lesson_id: int) -> tuple[str, str | None, float, str] | None:
    """(state, vetoed_at, strength, kind) of a row of ``lessons``, or None."""
    row = store.conn.execute("SELECT state, vetoed_at, strength, kind FROM lessons WHERE id = ?",
                             (lesson_id,)).fetchone()
    return None if row is None else (row[0], row[1], float(row[2]), row[3])


def lessons_in_state(store, state: str) -> list[tuple[int, float, bool, str]]:
    """(id, strength, vetoed, kind) of every lesson in ``state``, by id."""
    return [(lid, float(s), bool(v), kind) for lid, s, v, kind in store.conn.execute(
        "SELECT id, strength, vetoed_at IS NOT NULL, kind FROM lessons WHERE state = ? ORDER BY id", (state,))]


# --- decay -------------------------------------------------------------------------------------


def decay_active_lessons(store, floor: str, day: str,
                         active_days: Callable[[str | None, str | None], float],
                         decayed: Callable[[float, float], float]) -> int:
    """Decay every active lesson not reinforced since ``day`` (from the later of its last
    reinforcement and ``floor``), in one statement: ``active_days(family, since)`` counts its
    family's days of activity, ``decayed(strength, days)`` is its strength after them (the
    lifecycle's rule, called by SQLite row by row). Lessons with no day to count are left alone.
    Returns how many changed."""
    store.conn.create_function("om_family_days", 2, active_days, deterministic=True)
    store.conn.create_function("om_decayed", 2, decayed, deterministic=True)
    return store.conn.execute(
        "UPDATE lessons SET strength = om_decayed(strength, om_family_days(family, MAX(reinforced, ?))) "
        "WHERE state = 'active' AND strength > 0 AND MAX(reinforced, ?) < ? "
        "AND om_family_days(family, MAX(reinforced, ?)) > 0",
        (floor, floor, day, floor),
    ).rowcount


def forming_groups(store) -> list[tuple[int, str, bool]]:
    """(id, kind, has an unarchived surprise) of every group still forming (L6 reads it)."""
    return [(gid, kind, bool(live)) for gid, kind, live in store.conn.execute(
        "SELECT id, kind, EXISTS (SELECT 1 FROM lesson_members m JOIN episodes e ON e.id = m.episode_id "
        "WHERE m.lesson_id = lessons.id AND e.archived = 0) FROM lessons WHERE state = 'forming' ORDER BY id")]


def delete_groups(store, ids: list[int]) -> int:
    """Delete these groups (their members and predictions go with them)."""
    dropped = 0
    for start in range(0, len(ids), 500):
        part = ids[start:start + 500]
        dropped += store.conn.execute(f"DELETE FROM lessons WHERE id IN ({','.join('?' * len(part))})", part).rowcount
    return dropped


# --- learn -------------------------------------------------------------------------------------


def group_rows(store) -> Iterable[tuple]:
    """(id, state, kind, family, strength, reinforced, vetoed, centroid) of every group, by id."""
    return store.conn.execute("SELECT id, state, kind, family, strength, reinforced, vetoed_at IS NOT NULL, centroid "
                        "FROM lessons ORDER BY id")


def member_signatures(store) -> Iterable[tuple[int, str]]:
    """(group id, signature) of each group's distinct signatures, the group's oldest first."""
    return store.conn.execute("SELECT lesson_id, signature FROM lesson_members GROUP BY lesson_id, signature "
                        "ORDER BY lesson_id, MIN(created), signature")


def all_members(store) -> list[tuple[int, int, str]]:
    """(group id, episode id, signature) of every member."""
    return store.conn.execute("SELECT lesson_id, episode_id, signature FROM lesson_members").fetchall()


def all_lesson_ids(store) -> list[int]:
    return [gid for (gid,) in store.conn.execute("SELECT id FROM lessons").fetchall()]


def next_lesson_id(store) -> int:
    """The id SQLite would give the next group (the largest plus one)."""
    return store.conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM lessons").fetchone()[0]


def set_centroids(store, rows: list[tuple[bytes, int]]) -> None:
    """Write groups' centroids: ``(blob, group id)`` each."""
    store.conn.executemany("UPDATE lessons SET centroid = ? WHERE id = ?", rows)


def insert_members(store, members: list[tuple]) -> None:
    """``(episode id, group id, session id, created, signature, joined)`` each."""
    store.conn.executemany("INSERT INTO lesson_members (episode_id, lesson_id, session_id, created, signature, joined) "
                     "VALUES (?, ?, ?, ?, ?, ?)", members)


def member_sessions(store, ids: list[int]) -> dict[int, list[tuple]]:
    """Each group's members' ``(group id, session id)``."""
    return per_id(store, "SELECT lesson_id, session_id FROM lesson_members WHERE lesson_id IN ({ids})", ids)


def member_counts(store, ids: list[int]) -> dict[int, list[tuple]]:
    """Each group's ``(group id, members, distinct sessions, first, last)``."""
    return per_id(store, "SELECT lesson_id, COUNT(*), COUNT(DISTINCT session_id), MIN(created), MAX(created) "
                        "FROM lesson_members WHERE lesson_id IN ({ids}) GROUP BY lesson_id", ids)


def text_sources(store, ids: list[int]) -> dict[int, list[tuple]]:
    """Each group's ``(group id, text_source, rule_text)``."""
    return per_id(store, "SELECT id, text_source, rule_text FROM lessons WHERE id IN ({ids})", ids)


def latest_members(store, gid: int, limit: int) -> list[tuple]:
    """A group's latest ``limit`` members: (session id, created, signature, project, fields JSON),
    latest first."""
    return store.conn.execute(
        "SELECT m.session_id, m.created, m.signature, e.project, e.fields FROM lesson_members m "
        "JOIN episodes e ON e.id = m.episode_id WHERE m.lesson_id = ? ORDER BY m.created DESC, m.episode_id DESC "
        "LIMIT ?", (gid, limit)).fetchall()


def member_commands(store, gid: int, limit: int = 20) -> Iterable[tuple[str, str | None]]:
    """(fields JSON, project) of a group's latest ``limit`` members, latest first."""
    return store.conn.execute(
        "SELECT e.fields, e.project FROM lesson_members m JOIN episodes e ON e.id = m.episode_id "
        "WHERE m.lesson_id = ? ORDER BY m.created DESC LIMIT ?", (gid, limit))


def defer_foreign_keys(store, on: bool) -> None:
    """Check the members' references to their groups when the transaction ends (``on``), so that
    the groups made in a sleep can be written after their members; or at once again."""
    store.conn.execute(f"PRAGMA defer_foreign_keys = {'ON' if on else 'OFF'}")


def write_groups(store, statements: dict[str, list]) -> None:
    """Run the statements the settling of groups collected (by statement: ``executemany``)."""
    for sql, values in statements.items():
        store.conn.executemany(sql, values)


def group_statement(columns: Iterable[str], new: bool) -> str:
    """The statement that writes these columns of a group: its INSERT (``new``: the row made in this
    sleep, in one write) or its UPDATE; the group's id is the last value."""
    columns = list(columns)
    if new:
        return f"INSERT INTO lessons ({', '.join(columns)}, id) VALUES ({', '.join('?' * (len(columns) + 1))})"
    return f"UPDATE lessons SET {', '.join(f'{k} = ?' for k in columns)} WHERE id = ?"


# --- verify and predict ------------------------------------------------------------------------


def open_predictions(store) -> list[tuple]:
    """(id, lesson id, made, probes JSON, family) of every open prediction, by id."""
    return store.conn.execute("SELECT p.id, p.lesson_id, p.made, p.probes, p.family FROM predictions p "
                        "WHERE p.state = 'open' ORDER BY p.id").fetchall()


def strengths(store, ids: list[int]) -> dict[int, tuple]:
    """Each lesson's ``(state, strength, reinforced, vetoed, kind)``."""
    return {row[0]: (row[1], float(row[2]), row[3], bool(row[4]), row[5]) for rows in per_id(
        store, "SELECT id, state, strength, reinforced, vetoed_at IS NOT NULL, kind FROM lessons WHERE id IN ({ids})",
        list(dict.fromkeys(ids))).values() for row in rows}


def set_strength(store, lesson_id: int, strength: float, reinforced: str | None) -> None:
    store.conn.execute("UPDATE lessons SET strength = ?, reinforced = ? WHERE id = ?",
                       (strength, reinforced, lesson_id))


def resolve_prediction(store, pid: int, state: str, at: str, episode_id: int,
                       similarity: float, facet: str) -> None:
    """Write a prediction's verdict (P2, P3) and what decided it."""
    store.conn.execute("UPDATE predictions SET state = ?, resolved = ?, episode_id = ?, similarity = ?, facet = ? "
                 "WHERE id = ?", (state, at, episode_id, similarity, facet, pid))


def all_groups(store) -> list[tuple[int, str, float, bool, str]]:
    """(id, state, strength, vetoed, kind) of every group and lesson, by id."""
    return [(lid, state, float(s), bool(v), kind) for lid, state, s, v, kind in store.conn.execute(
        "SELECT id, state, strength, vetoed_at IS NOT NULL, kind FROM lessons ORDER BY id")]


def with_open_prediction(store) -> set[int]:
    """The lessons that have an open prediction."""
    return {lid for (lid,) in store.conn.execute("SELECT DISTINCT lesson_id FROM predictions WHERE state = 'open'")}


def details_of(store, ids: list[int]) -> dict[int, tuple[str, str]]:
    """Each lesson's ``(family, details JSON)``."""
    return {rows[0][0]: rows[0][1:] for rows in per_id(
        store, "SELECT id, family, details FROM lessons WHERE id IN ({ids})", ids).values()}


def insert_prediction(store, lesson_id: int, made: str, text: str, probes: str,
                      family: str) -> int:
    """Write a new open prediction (P1); its id."""
    return store.conn.execute("INSERT INTO predictions (lesson_id, made, text, probes, family) VALUES (?, ?, ?, ?, ?)",
                        (lesson_id, made, text, probes, family)).lastrowid


# --- reading lessons (sleep/lessons.py) ------------------------------------------------------------


def select_lessons(store, columns: tuple[str, ...], states: tuple[str, ...],
                   include_vetoed: bool, ids: list[int] | None) -> list[tuple]:
    """``columns`` of the lessons in ``states`` (and of ``ids`` if given), strongest first."""
    where = [f"state IN ({','.join('?' * len(states))})"]
    params: list = list(states)
    if not include_vetoed:
        where.append("vetoed_at IS NULL")
    if ids is not None:
        if not ids:
            return []
        where.append(f"id IN ({','.join('?' * len(ids))})")
        params += list(ids)
    return store.conn.execute(f"SELECT {', '.join(columns)} FROM lessons WHERE {' AND '.join(where)} "
                        "ORDER BY strength DESC, seen DESC, id", params).fetchall()


def prediction_record(store, lesson_id: int) -> Iterable[tuple[str, int]]:
    """(state, count) of a lesson's decided and withdrawn predictions."""
    return store.conn.execute("SELECT state, COUNT(*) FROM predictions WHERE lesson_id = ? AND state != 'open' "
                        "GROUP BY state", (lesson_id,))


def open_prediction(store, lesson_id: int) -> tuple | None:
    """(id, text, made) of a lesson's open prediction (the latest), or None."""
    return store.conn.execute("SELECT id, text, made FROM predictions WHERE lesson_id = ? AND state = 'open' "
                        "ORDER BY id DESC LIMIT 1", (lesson_id,)).fetchone()


def provenance_episodes(store, lesson_id: int, limit: int) -> Iterable[tuple]:
    """(id, session id, created, source path, source line, archived) of a lesson's latest ``limit``
    episodes, latest first."""
    return store.conn.execute(
        "SELECT e.id, e.session_id, e.created, e.source_path, e.source_line, e.archived FROM lesson_members m "
        "JOIN episodes e ON e.id = m.episode_id WHERE m.lesson_id = ? ORDER BY m.created DESC, e.id DESC LIMIT ?",
        (lesson_id, limit))
