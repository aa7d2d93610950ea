"""Publishing's tables: ``publish_projects`` (the owner's opt-ins), ``publish_queue`` (the
outbox) and ``published`` (every record this engine's lessons became on the commons); see
:mod:`openmemory_local.storage.store` (schema version 3) for the columns and
:mod:`openmemory_local.commons.publish` for what decides them. And the reads of lessons and
episodes publishing plans from (the families known, a lesson's members).

Plain SQL over ``store.conn``; writers run inside the caller's ``store.write()``.
"""

from __future__ import annotations

from openmemory_local.storage.store import rows_by_ids

from openmemory_local.core.jsonio import dumps

QUEUE_COLUMNS = ("id", "lesson_id", "family", "state", "text", "kind", "strength", "created", "provenance", "salt",
                 "episodes", "derived_from", "attempts")

PUBLISHED_COLUMNS = ("record_id", "lesson_id", "family", "text", "kind", "strength", "created", "provenance", "salt",
                     "episodes", "derived_from", "author", "dedup_key", "published_at", "superseded_by",
                     "revoked_at", "revocation_id", "revoke_code", "revoke_reason")


# --- what the store knows of projects -------------------------------------------------


def session_branches(store, *, with_branch_only: bool = False) -> list[tuple]:
    """The distinct (working folder, branch) of the session episodes (branch None when unknown,
    unless ``with_branch_only``)."""
    sql = ("SELECT DISTINCT project, json_extract(fields, '$.branch') FROM episodes WHERE kind = 'session' "
           "AND project IS NOT NULL")
    if with_branch_only:
        sql += " AND json_extract(fields, '$.branch') IS NOT NULL"
    return store.conn.execute(sql).fetchall()


def lesson_families(store, *, with_null: bool = False) -> set:
    """The project families of the lessons (None among them with ``with_null``)."""
    sql = "SELECT DISTINCT family FROM lessons" + ("" if with_null else " WHERE family IS NOT NULL")
    return {f for (f,) in store.conn.execute(sql)}


def active_lesson_count(store, family: str) -> int:
    return store.conn.execute("SELECT COUNT(*) FROM lessons WHERE family = ? AND state = 'active'",
                              (family,)).fetchone()[0]


def family_counts(store, family: str, threshold: float) -> dict[str, int]:
    """What a family has: active lessons, eligible ones (not vetoed, strength >= ``threshold``),
    records published and their lessons, records revoked, rows waiting and held."""
    count = lambda sql, *a: store.conn.execute(sql, (family, *a)).fetchone()[0]  # noqa: E731
    return {
        "lessons": count("SELECT COUNT(*) FROM lessons WHERE family = ? AND state = 'active'"),
        "eligible": count("SELECT COUNT(*) FROM lessons WHERE family = ? AND state = 'active' "
                          "AND vetoed_at IS NULL AND strength >= ?", threshold),
        "published_records": count("SELECT COUNT(*) FROM published WHERE family = ? AND revoked_at IS NULL"),
        "published_lessons": count("SELECT COUNT(DISTINCT lesson_id) FROM published WHERE family = ? "
                                   "AND revoked_at IS NULL"),
        "revoked_records": count("SELECT COUNT(*) FROM published WHERE family = ? AND revoked_at IS NOT NULL"),
        "pending": count("SELECT COUNT(*) FROM publish_queue WHERE family = ? AND state IN ('pending', "
                         "'withdrawn')"),
        "held": count("SELECT COUNT(*) FROM publish_queue WHERE family = ? AND state = 'held'"),
    }


def publishable_lessons(store, families: list[str], min_strength: float) -> list[tuple]:
    """(id, family, kind, strength, details, text) of the active, unvetoed lessons of these
    families with strength >= ``min_strength``, strongest first."""
    marks = ",".join("?" * len(families))
    return store.conn.execute(
        f"SELECT id, family, kind, strength, details, text FROM lessons WHERE state = 'active' AND vetoed_at IS NULL "
        f"AND strength >= ? AND family IN ({marks}) ORDER BY strength DESC, id", [min_strength, *families]).fetchall()


def lesson_member_keys(store, lesson_id: int) -> list[tuple]:
    """(id, kind, key) of a lesson's member episodes, by id."""
    return store.conn.execute(
        "SELECT e.id, e.kind, e.key FROM lesson_members m JOIN episodes e ON e.id = m.episode_id "
        "WHERE m.lesson_id = ? ORDER BY e.id", (lesson_id,)).fetchall()


def episode_sources(store, ids: list[int]) -> dict[int, tuple]:
    """Episode id -> (session_id, created, source_path, source_line), for these ids."""
    return {eid: (session, created, path, line) for eid, session, created, path, line in rows_by_ids(
        store, "SELECT id, session_id, created, source_path, source_line FROM episodes WHERE id IN ({ids})", ids)}


# --- publish_projects --------------------------------------------------------------------


def project_enabled(store, family: str) -> bool:
    row = store.conn.execute("SELECT enabled FROM publish_projects WHERE family = ?", (family,)).fetchone()
    return bool(row and row[0])


def enable_project(store, family: str, path: str, at: str) -> None:
    store.conn.execute(
        "INSERT INTO publish_projects (family, enabled, path, enabled_at) VALUES (?, 1, ?, ?) "
        "ON CONFLICT (family) DO UPDATE SET enabled = 1, path = excluded.path, "
        "enabled_at = excluded.enabled_at, disabled_at = NULL", (family, path, at))


def disable_project(store, family: str, at: str) -> int:
    """Opt a family out; 1 if it was opted in, else 0."""
    return store.conn.execute("UPDATE publish_projects SET enabled = 0, disabled_at = ? WHERE family = ? "
                              "AND enabled = 1", (at, family)).rowcount


def project_rows(store) -> list[tuple]:
    """(family, enabled, path, enabled_at, disabled_at) of every opt-in row, by family."""
    return store.conn.execute(
        "SELECT family, enabled, path, enabled_at, disabled_at FROM publish_projects ORDER BY family").fetchall()


def enabled_folders(store) -> list[tuple]:
    """(family, path) of the opted-in rows with a path, by family."""
    return store.conn.execute("SELECT family, path FROM publish_projects WHERE enabled = 1 "
                              "AND path IS NOT NULL ORDER BY family").fetchall()


def enabled_families(store) -> set[str]:
    return {f for (f,) in store.conn.execute("SELECT family FROM publish_projects WHERE enabled = 1")}


# --- publish_queue ---------------------------------------------------------------------------


def queue_rows(store, state: str) -> list[dict]:
    """The outbox rows in ``state`` (:data:`QUEUE_COLUMNS`), oldest first."""
    return [dict(zip(QUEUE_COLUMNS, r)) for r in store.conn.execute(
        f"SELECT {', '.join(QUEUE_COLUMNS)} FROM publish_queue WHERE state = ? ORDER BY id", (state,))]


def queued_by_lesson(store) -> dict[int, tuple]:
    """Lesson id -> (lesson_id, state, text, kind, strength, derived_from) of its outbox row."""
    return {r[0]: r for r in store.conn.execute(
        "SELECT lesson_id, state, text, kind, strength, derived_from FROM publish_queue")}


def held_rows(store) -> dict[int, tuple[str, str]]:
    """Lesson id -> (text, reasons JSON) of the held rows."""
    return {lid: (text, reasons) for lid, text, reasons in store.conn.execute(
        "SELECT lesson_id, text, reasons FROM publish_queue WHERE state = 'held'")}


def pending_of_gone_lessons(store) -> list[tuple]:
    """(row id, lesson id, attempts) of the pending rows whose lesson was vetoed or archived meanwhile."""
    return store.conn.execute(
        "SELECT q.id, q.lesson_id, q.attempts FROM publish_queue q JOIN lessons l ON l.id = q.lesson_id "
        "WHERE q.state = 'pending' AND (l.vetoed_at IS NOT NULL OR l.state != 'active')").fetchall()


def set_queue_withdrawn(store, row_id: int) -> None:
    store.conn.execute("UPDATE publish_queue SET state = 'withdrawn' WHERE id = ?", (row_id,))


def withdraw_pending_of_lesson(store, lesson_id: int) -> None:
    store.conn.execute("UPDATE publish_queue SET state = 'withdrawn' WHERE lesson_id = ? AND state = 'pending'",
                       (lesson_id,))


def delete_queue_row(store, row_id: int) -> None:
    store.conn.execute("DELETE FROM publish_queue WHERE id = ?", (row_id,))


def release_held(store, lesson_id: int) -> None:
    store.conn.execute("DELETE FROM publish_queue WHERE lesson_id = ? AND state = 'held'", (lesson_id,))


def drop_family_unsent(store, family: str) -> int:
    """Drop a family's held rows and its pending rows never tried; how many."""
    return store.conn.execute("DELETE FROM publish_queue WHERE family = ? AND (state = 'held' OR (state = 'pending' "
                              "AND attempts = 0))", (family,)).rowcount


def withdraw_family_pending(store, family: str) -> int:
    """A family's pending rows (a send was tried) wait as withdrawn; how many."""
    return store.conn.execute("UPDATE publish_queue SET state = 'withdrawn' WHERE family = ? AND state = 'pending'",
                              (family,)).rowcount


def drop_untried_of_lesson(store, lesson_id: int) -> None:
    store.conn.execute("DELETE FROM publish_queue WHERE lesson_id = ? AND attempts = 0", (lesson_id,))


def tried_sends_of_lesson(store, lesson_id: int) -> int:
    """How many of a lesson's waiting rows had a send tried."""
    return store.conn.execute("SELECT COUNT(*) FROM publish_queue WHERE lesson_id = ? AND state IN ('pending', "
                              "'withdrawn') AND attempts > 0", (lesson_id,)).fetchone()[0]


def hold(store, lesson_id: int, family: str, text: str, kind: str, strength: float, reasons: list, at: str) -> None:
    store.conn.execute(
        "INSERT INTO publish_queue (lesson_id, family, state, text, kind, strength, reasons, queued) "
        "VALUES (?, ?, 'held', ?, ?, ?, ?, ?) ON CONFLICT (lesson_id) DO UPDATE SET state = 'held', "
        "text = excluded.text, reasons = excluded.reasons, queued = excluded.queued",
        (lesson_id, family, text, kind, strength, dumps(reasons), at))


def enqueue(store, lesson_id: int, family: str, text: str, kind: str, strength: float, created: int,
            provenance: str, salt: str, episodes: list, derived_from: list, at: str) -> None:
    """A pending row, every field of the record fixed (a retry sends the same record)."""
    store.conn.execute(
        "INSERT INTO publish_queue (lesson_id, family, state, text, kind, strength, created, provenance, "
        "salt, episodes, derived_from, queued) VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (lesson_id) DO UPDATE SET state = 'pending', text = excluded.text, "
        "kind = excluded.kind, strength = excluded.strength, created = excluded.created, "
        "provenance = excluded.provenance, salt = excluded.salt, episodes = excluded.episodes, "
        "derived_from = excluded.derived_from, reasons = '[]', queued = excluded.queued, attempts = 0",
        (lesson_id, family, text, kind, strength, created, provenance, salt, dumps(episodes), dumps(derived_from), at))


def note_attempt(store, row_id: int, at: str) -> None:
    store.conn.execute("UPDATE publish_queue SET attempts = attempts + 1, last_attempt = ? WHERE id = ?", (at, row_id))


def hold_queued(store, row_id: int, reason: str) -> None:
    """A queued row held back, with its reason (the node refused it; a kind with no commons form)."""
    store.conn.execute("UPDATE publish_queue SET state = 'held', reasons = ?, last_error = ? WHERE id = ?",
                       (dumps([reason]), reason, row_id))


def note_waiting_error(store, error: str) -> None:
    store.conn.execute("UPDATE publish_queue SET last_error = ? WHERE state IN ('pending', 'withdrawn')", (error,))


def waiting_count(store) -> int:
    return store.conn.execute("SELECT COUNT(*) FROM publish_queue WHERE state IN ('pending', 'withdrawn')"
                              ).fetchone()[0]


# --- published -------------------------------------------------------------------------------


def record_published(store, row: dict, record_id: str, author: str | None, at: str, parents: list[str]) -> None:
    """A queued row became ``record_id`` on the commons: recorded (once), its parents superseded
    by it, its outbox row gone."""
    store.conn.execute(
        "INSERT OR IGNORE INTO published (record_id, lesson_id, family, text, kind, strength, created, provenance, "
        "salt, episodes, derived_from, author, published_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (record_id, row["lesson_id"], row["family"], row["text"], row["kind"], row["strength"], row["created"],
         row["provenance"], row["salt"], row["episodes"], row["derived_from"], author, at))
    store.conn.executemany("UPDATE published SET superseded_by = ? WHERE record_id = ? AND lesson_id = ?",
                           [(record_id, parent, row["lesson_id"]) for parent in parents])
    delete_queue_row(store, row["id"])


def published_rows(store, *, lesson_id: int | None = None, record_id: str | None = None,
                   active_only: bool = False) -> list[dict]:
    """The published records (:data:`PUBLISHED_COLUMNS`) of a lesson, or the one of a record id,
    or all; oldest first."""
    sql = f"SELECT {', '.join(PUBLISHED_COLUMNS)} FROM published"
    where, params = [], []
    if lesson_id is not None:
        where.append("lesson_id = ?")
        params.append(lesson_id)
    if record_id is not None:
        where.append("record_id = ?")
        params.append(record_id)
    if active_only:
        where.append("revoked_at IS NULL")
    if where:
        sql += " WHERE " + " AND ".join(where)
    return [dict(zip(PUBLISHED_COLUMNS, r)) for r in store.conn.execute(sql + " ORDER BY published_at, rowid",
                                                                        params)]


def published_of_families(store, families: list[str]) -> list[tuple]:
    """(record_id, lesson_id) of the unrevoked records of these families, oldest first."""
    marks = ",".join("?" * len(families))
    return store.conn.execute(
        f"SELECT record_id, lesson_id FROM published WHERE family IN ({marks}) AND revoked_at IS NULL "
        "ORDER BY published_at, record_id", families).fetchall()


def records_without_dedup_key(store) -> list[str]:
    return [r for (r,) in store.conn.execute("SELECT record_id FROM published WHERE dedup_key IS NULL").fetchall()]


def set_dedup_key(store, record_id: str, key: str) -> None:
    store.conn.execute("UPDATE published SET dedup_key = ? WHERE record_id = ?", (key, record_id))


def set_revoked(store, record_id: str, at: str, revocation_id, code: str, reason: str) -> None:
    store.conn.execute("UPDATE published SET revoked_at = ?, revocation_id = ?, revoke_code = ?, "
                       "revoke_reason = ? WHERE record_id = ?", (at, revocation_id, code, reason, record_id))
