"""The raw stream's bookkeeping and what ingest makes of it: tables ``transcripts``,
``dirty_sessions`` and ``episodes`` (see :mod:`openmemory_local.storage.store` for the columns,
:mod:`openmemory_local.ingest.transcripts` for how ingest fills them).

Plain SQL over ``store.conn``; writers run inside the caller's ``store.write()``.
"""

from __future__ import annotations

from openmemory_local.storage.store import insert_row, rows_by_ids, update_row

# --- transcripts -------------------------------------------------------------------


def transcript_row(store, path: str) -> dict | None:
    """Every column of the transcript of ``path`` (the original's absolute path), or None."""
    cur = store.conn.execute("SELECT * FROM transcripts WHERE path = ?", (path,))
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip([c[0] for c in cur.description], row))


def insert_transcript(store, values: dict) -> int:
    return insert_row(store, "transcripts", values)


def update_transcript(store, transcript_id: int, values: dict) -> None:
    update_row(store, "transcripts", transcript_id, values)


def known_projects(store) -> list[str]:
    """Every working folder a transcript was read in, sorted."""
    return [cwd for (cwd,) in store.conn.execute(
        "SELECT DISTINCT project FROM transcripts WHERE project IS NOT NULL ORDER BY project")]


def agent_projects(store) -> list[tuple[str, str]]:
    """(adapter, working folder) of the active transcripts."""
    return store.conn.execute(
        "SELECT DISTINCT adapter, project FROM transcripts WHERE status = 'active' AND project IS NOT NULL").fetchall()


def session_transcripts(store, session_id: str) -> list[tuple]:
    """(id, role, agent_id, digest, archive_path) of a session's active transcripts, by id."""
    return store.conn.execute(
        "SELECT id, role, agent_id, digest, archive_path FROM transcripts "
        "WHERE session_id = ? AND status = 'active' ORDER BY id", (session_id,)).fetchall()


# --- dirty sessions ------------------------------------------------------------------


def mark_sessions_dirty(store, session_ids) -> None:
    """Queue sessions for re-merging their session episode."""
    store.conn.executemany("INSERT OR IGNORE INTO dirty_sessions (session_id) VALUES (?)",
                           [(sid,) for sid in session_ids])


def a_dirty_session(store) -> str | None:
    row = store.conn.execute("SELECT session_id FROM dirty_sessions LIMIT 1").fetchone()
    return row[0] if row else None


def take_dirty_session(store, session_id: str) -> bool:
    """Take a session off the queue: False if a concurrent run took it first."""
    return store.conn.execute("DELETE FROM dirty_sessions WHERE session_id = ?", (session_id,)).rowcount > 0


# --- episodes ------------------------------------------------------------------------


def transcript_episode_keys(store, transcript_id: int) -> list[tuple]:
    """(id, kind, key) of a transcript's episodes other than its session's."""
    return store.conn.execute("SELECT id, kind, key FROM episodes WHERE transcript_id = ? AND kind != 'session'",
                              (transcript_id,)).fetchall()


def delete_episodes(store, ids) -> None:
    store.conn.executemany("DELETE FROM episodes WHERE id = ?", [(eid,) for eid in ids])


def episode_by_key(store, kind: str, key: str) -> tuple | None:
    """(id, transcript_id, text, fields) of the episode of ``(kind, key)``, or None."""
    return store.conn.execute("SELECT id, transcript_id, text, fields FROM episodes WHERE kind = ? AND key = ?",
                              (kind, key)).fetchone()


def session_episode_row(store, session_id: str) -> tuple | None:
    """(id, text, fields, transcript_id, source_path, source_line) of a session's episode, or None."""
    return store.conn.execute(
        "SELECT id, text, fields, transcript_id, source_path, source_line FROM episodes "
        "WHERE kind = 'session' AND key = ?", (session_id,)).fetchone()


_EPISODE_INSERT = ("INSERT INTO episodes (kind, key, session_id, agent_id, project, text, fields, embedder, "
                   "created, last_touched, transcript_id, source_path, source_line, vec_row, ingested, updated) "
                   "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")


def insert_episode(store, values: tuple) -> None:
    """One episode: (kind, key, session_id, agent_id, project, text, fields, embedder, created,
    last_touched, transcript_id, source_path, source_line, vec_row, ingested, updated)."""
    store.conn.execute(_EPISODE_INSERT, values)


def update_episode(store, episode_id: int, assignments: list[str], params: list) -> None:
    """Set ``assignments`` (``column = ?`` SQL, with ``params``) of one episode."""
    store.conn.execute(f"UPDATE episodes SET {', '.join(assignments)} WHERE id = ?", [*params, episode_id])


def session_profiles(store) -> list[tuple]:
    """(project, branch, commands, tools, files_edited, files_read) of every session episode with a
    project (the JSON fields as stored)."""
    return store.conn.execute(
        "SELECT project, json_extract(fields, '$.branch'), json_extract(fields, '$.commands'), "
        "json_extract(fields, '$.tools'), json_extract(fields, '$.files_edited'), "
        "json_extract(fields, '$.files_read') FROM episodes WHERE kind = 'session' AND project IS NOT NULL"
    ).fetchall()


def episode_days_between(store, after: str, before: str) -> list[str]:
    """The UTC days (``YYYY-MM-DD``) strictly between ``after`` and ``before`` on which an episode
    happened or a session ended, in order."""
    return [day for (day,) in store.conn.execute(
        "SELECT substr(created, 1, 10) AS day FROM episodes WHERE day > ? AND day < ? UNION "
        "SELECT substr(json_extract(fields, '$.ended'), 1, 10) AS day FROM episodes WHERE kind = 'session' "
        "AND day > ? AND day < ? ORDER BY day", (after, before, after, before))]


def episodes_changed_since(store, seq: int) -> int:
    """How many episodes changed (``seq``) after ``seq``."""
    return store.conn.execute("SELECT COUNT(*) FROM episodes WHERE seq > ?", (seq,)).fetchone()[0]


def episodes_between(store, after: str, until: str) -> list[tuple]:
    """(id, kind, session_id, project, created, fields) of the episodes created in (after, until],
    by time then id."""
    return store.conn.execute(
        "SELECT id, kind, session_id, project, created, fields FROM episodes WHERE created > ? "
        "AND created <= ? ORDER BY created, id", (after, until)).fetchall()


def errors_before(store, before: str):
    """(id, kind, project, fields) of the error episodes created before ``before``, latest first
    (a cursor: the caller stops at the first that matters)."""
    return store.conn.execute("SELECT id, kind, project, fields FROM episodes WHERE kind = 'error' AND created < ? "
                              "ORDER BY created DESC", (before,))


def session_command_heads(store) -> list[str]:
    """Every command head (``git push``, ``npm``) any session episode ran, archived or not:
    what the domains this agent's projects touch are derived from."""
    return [row[0] for row in store.conn.execute(
        "SELECT DISTINCT j.key FROM episodes AS e, json_each(e.fields, '$.commands') AS j "
        "WHERE e.kind = 'session' AND json_type(e.fields, '$.commands') = 'object'")]


# --- what sleep reads and writes of episodes (openmemory_local.sleep.passes) ---------------------


def holds_episodes_or_lessons(store) -> bool:
    """Whether the store holds an episode or a lesson: something a sleep consolidates."""
    return bool(store.conn.execute(
        "SELECT EXISTS (SELECT 1 FROM episodes) OR EXISTS (SELECT 1 FROM lessons)").fetchone()[0])


def decay_scan(store, floor: str, day: str):
    """Every episode, by id, as decay reads it in one scan: (id, whether it decays (unarchived, strength
    above 0, untouched since the later of ``floor`` and its last touch, before ``day``), strength,
    project, cwd, branch, the later of ``floor`` and its last touch, created, a session's ``ended``)."""
    return store.conn.execute(
        "SELECT id, archived = 0 AND strength > 0 AND MAX(last_touched, ?) < ?, strength, project, "
        "json_extract(fields, '$.cwd'), json_extract(fields, '$.branch'), MAX(last_touched, ?), created, "
        "CASE WHEN kind = 'session' THEN json_extract(fields, '$.ended') END FROM episodes ORDER BY id",
        (floor, day, floor))


def set_strengths(store, rows: list[tuple[int, float, int]]) -> None:
    """Set each episode's (id, strength, seq) of ``rows``: the values go to a temporary table in
    one pass, then one ``UPDATE ... FROM`` writes them (the same rows as an UPDATE by id per row, whose
    statement and update trigger's program are set up again for every row)."""
    conn = store.conn
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS om_strengths "
                 "(id INTEGER PRIMARY KEY, strength REAL NOT NULL, seq INTEGER NOT NULL)")
    conn.execute("DELETE FROM temp.om_strengths")
    conn.executemany("INSERT INTO temp.om_strengths (id, strength, seq) VALUES (?, ?, ?)", rows)
    conn.execute("UPDATE episodes SET strength = s.strength, seq = s.seq FROM temp.om_strengths s "
                 "WHERE episodes.id = s.id")
    conn.execute("DELETE FROM temp.om_strengths")


def archive_weaker_than(store, below: float) -> list[int]:
    """Archive the unarchived episodes weaker than ``below``; their ids."""
    archived = [row[0] for row in store.conn.execute(
        "SELECT id FROM episodes WHERE archived = 0 AND strength < ? ORDER BY id", (below,))]
    if archived:
        store.conn.execute("UPDATE episodes SET archived = 1 WHERE archived = 0 AND strength < ?", (below,))
    return archived


def active_days_since(store, start: str):
    """(project, cwd, branch, day) of each day from ``start`` (``YYYY-MM-DD``) on which an episode
    happened or a session ended."""
    return store.conn.execute(
        "SELECT DISTINCT project, json_extract(fields, '$.cwd'), json_extract(fields, '$.branch'), "
        "substr(created, 1, 10) FROM episodes WHERE created >= ? UNION "
        "SELECT DISTINCT project, json_extract(fields, '$.cwd'), json_extract(fields, '$.branch'), "
        "substr(json_extract(fields, '$.ended'), 1, 10) FROM episodes WHERE kind = 'session' "
        "AND json_extract(fields, '$.ended') >= ?", (start, start))


def vector_rows(store, ids: list[int]) -> list[tuple[int, int]]:
    """(id, vec_row) of those of ``ids`` that have a row in the vectors file."""
    return rows_by_ids(store, "SELECT id, vec_row FROM episodes WHERE id IN ({ids}) AND vec_row IS NOT NULL", ids)


def unclustered_surprises(store, until: str, failures: list[str]) -> list[tuple]:
    """(id, kind, session_id, project, created, fields, text) of the unarchived surprises created up
    to ``until`` and in no group yet (corrections, and errors whose failure is one of ``failures``),
    by time then id."""
    marks = ",".join("?" * len(failures))
    return store.conn.execute(
        "SELECT e.id, e.kind, e.session_id, e.project, e.created, e.fields, e.text FROM episodes e "
        "LEFT JOIN lesson_members m ON m.episode_id = e.id "
        "WHERE m.episode_id IS NULL AND e.archived = 0 AND e.created <= ? AND "
        f"(e.kind = 'correction' OR (e.kind = 'error' AND json_extract(e.fields, '$.failure') IN ({marks}))) "
        "ORDER BY e.created, e.id", [until, *failures]).fetchall()


def episodes_met_after(store, since: str, until: str) -> list[tuple]:
    """(id, kind, project, created, fields, session_id) of the episodes created in (since, until],
    and of the sessions created by ``until`` that ended after ``since``, by time then id."""
    return store.conn.execute(
        "SELECT id, kind, project, created, fields, session_id FROM episodes WHERE created <= ? AND "
        "(created > ? OR (kind = 'session' AND json_extract(fields, '$.ended') > ?)) "
        "ORDER BY created, id", (until, since, since)).fetchall()


def latest_session_commands(store, projects: list[str], sessions: int):
    """The ``commands`` (JSON) of the latest ``sessions`` session episodes of these projects."""
    marks = ",".join("?" * len(projects))
    return store.conn.execute(
        f"SELECT json_extract(fields, '$.commands') FROM episodes WHERE kind = 'session' AND project IN ({marks}) "
        "ORDER BY created DESC LIMIT ?", [*projects, sessions])


def session_times(store):
    """(id, project, created) of every session episode with a project."""
    return store.conn.execute(
        "SELECT id, project, created FROM episodes WHERE kind = 'session' AND project IS NOT NULL")


def session_commands(store, ids: list[int]) -> dict[int, str | None]:
    """Each of these session episodes' ``commands`` (JSON)."""
    return dict(rows_by_ids(store, "SELECT id, json_extract(fields, '$.commands') FROM episodes WHERE id IN ({ids})",
                            ids))


def session_projects_and_branches(store):
    """(project, branch) of the session episodes with a project, each pair once, by project."""
    return store.conn.execute(
        "SELECT DISTINCT project, json_extract(fields, '$.branch') FROM episodes WHERE kind = 'session' "
        "AND project IS NOT NULL ORDER BY project")
