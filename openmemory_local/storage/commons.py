"""The commons layer's tables: ``commons_lessons`` (what the node received), ``commons_predictions``
and ``commons_attestations`` (see :mod:`openmemory_local.storage.store`, schema versions 4 and 7,
for the columns; :mod:`openmemory_local.commons.receive` and :mod:`openmemory_local.commons.verify`
for what decides them).

Plain SQL over ``store.conn``; writers run inside the caller's ``store.write()``. Reads of many
lessons are one query (or one per 500 ids), never one per row.
"""

from __future__ import annotations

from openmemory_local.storage.store import insert_row, rows_by_ids, update_row

from openmemory_local.core.jsonio import dumps

#: SQLite's bound on the parameters of one statement, with room to spare.


# --- received lessons --------------------------------------------------------------

def received_lesson_rows(store, columns: tuple[str, ...], where: str = "1", params=()) -> list[tuple]:
    """The ``columns`` of the received lessons matching ``where`` (SQL over ``commons_lessons``
    with its ``params``), by id."""
    return store.conn.execute(f"SELECT {', '.join(columns)} FROM commons_lessons WHERE {where} ORDER BY id",
                              list(params)).fetchall()


def received_by_record(store, record_id: str) -> tuple | None:
    """(id, status, mine) of the received lesson of a record id, or None."""
    return store.conn.execute("SELECT id, status, mine FROM commons_lessons WHERE record_id = ?",
                              (record_id,)).fetchone()


def insert_received(store, values: dict) -> int:
    """A newly received lesson (column -> value); its id."""
    return insert_row(store, "commons_lessons", values)


def update_received(store, commons_id: int, values: dict) -> None:
    """Set these columns (column -> value) of one received lesson."""
    update_row(store, "commons_lessons", commons_id, values)


def set_group_tally(store, group: dict, now_iso: str) -> None:
    """The node's tally of a group (confirmers, threshold, policy, votes, counted) on its lessons."""
    store.conn.execute("UPDATE commons_lessons SET confirmers = ?, threshold = ?, policy = ?, votes = ?, "
                       "counted = ?, updated = ? WHERE group_head = ?",
                       (group["confirmers"], group["threshold"], group["policy"], group["votes"],
                        group["counted"], now_iso, group["group_head"]))


def mark_authored_by(store, node_key: str) -> None:
    """Lessons this node's key authored are its own (``mine``): never rendered as received."""
    store.conn.execute("UPDATE commons_lessons SET mine = 1 WHERE author = ?", (node_key,))


def set_layers(store, team: list[str]) -> None:
    """``layer`` = ``team`` for the lessons of these authors, ``commons`` for the others."""
    store.conn.execute("UPDATE commons_lessons SET layer = CASE WHEN author IN (SELECT value FROM "
                       "json_each(?)) THEN 'team' ELSE 'commons' END", (dumps(sorted(set(team))),))


def set_refused_authors(store, blocked: list[str], reason: str) -> None:
    """Refuse (``refused`` = ``reason``) the lessons of these authors; lift it from the others."""
    store.conn.execute("UPDATE commons_lessons SET refused = NULL WHERE refused = ?", (reason,))
    store.conn.execute("UPDATE commons_lessons SET refused = ? WHERE refused IS NULL AND author IN "
                       "(SELECT value FROM json_each(?))", (reason, dumps(sorted(set(blocked)))))


def set_received_veto(store, commons_id: int, vetoed_at: str | None, now_iso: str) -> None:
    """Veto (``vetoed_at`` a time) or unveto (None) a received lesson."""
    store.conn.execute("UPDATE commons_lessons SET vetoed_at = ?, updated = ? WHERE id = ?",
                       (vetoed_at, now_iso, commons_id))


def veto_received_once(store, commons_id: int, now_iso: str) -> tuple[str, str] | None:
    """Veto a received lesson unless it is vetoed already: its (record id, text) if vetoed now."""
    row = store.conn.execute("SELECT vetoed_at, record_id, text FROM commons_lessons WHERE id = ?",
                             (commons_id,)).fetchone()
    if row is None or row[0] is not None:
        return None
    set_received_veto(store, commons_id, now_iso, now_iso)
    return row[1], row[2]


def vetoed_received_ids(store, ids: list[int]) -> set[int]:
    """Those of ``ids`` vetoed."""
    return {lid for (lid,) in rows_by_ids(
        store, "SELECT id FROM commons_lessons WHERE vetoed_at IS NOT NULL AND id IN ({ids})", ids)}


def folders_rendering(store, commons_id: int) -> list[str]:
    """The memory folders holding a commons file of this received lesson."""
    return [d for (d,) in store.conn.execute(
        "SELECT DISTINCT memory_dir FROM rendered_files WHERE role = 'commons' AND lesson_id = ? ORDER BY memory_dir",
        (commons_id,))]


def commons_files(store) -> list[tuple]:
    """(lesson id, path, state) of every commons file in memory folders, by path."""
    return store.conn.execute(
        "SELECT lesson_id, path, state FROM rendered_files WHERE role = 'commons' ORDER BY path").fetchall()


# --- commons predictions and attestations ---------------------------------------------

def withdraw_received(store, commons_id: int, at: str) -> None:
    """Close a received lesson's open predictions and drop its unsent attestations."""
    store.conn.execute("UPDATE commons_predictions SET state = 'withdrawn', resolved = ? WHERE commons_id = ? "
                       "AND state = 'open'", (at, commons_id))
    store.conn.execute("UPDATE commons_attestations SET state = 'dropped' WHERE commons_id = ? AND state = 'pending'",
                       (commons_id,))


def prediction_counts(store) -> list[tuple]:
    """(commons id, state, count) of the commons predictions."""
    return store.conn.execute(
        "SELECT commons_id, state, COUNT(*) FROM commons_predictions GROUP BY commons_id, state").fetchall()


def attestation_rows(store, ids: list[int]) -> list[tuple]:
    """(commons_id, verdict, met_before, sessions, matched, window, made, state, record_id,
    node_status, failure, fix, exposed) of the attestations of these received lessons, by id."""
    return rows_by_ids(
        store, "SELECT commons_id, verdict, met_before, sessions, matched, window, made, state, record_id, node_status, "
        "failure, fix, exposed FROM commons_attestations WHERE commons_id IN ({ids}) ORDER BY id", ids)


def set_attestation_node_status(store, record_id: str, status) -> None:
    """What the node says of an attestation this engine sent (``counted``, ``not-counted``)."""
    store.conn.execute("UPDATE commons_attestations SET node_status = ? WHERE record_id = ?", (status, record_id))


def commons_files_shown(store) -> list[tuple]:
    """(lesson id, memory folder) of the commons files in memory folders now (ours or edited)."""
    return store.conn.execute(
        "SELECT lesson_id, memory_dir FROM rendered_files WHERE role = 'commons' AND state IN ('ours', 'edited')"
    ).fetchall()


def open_commons_predictions(store) -> list[tuple]:
    """(id, commons_id, family, made, probes JSON, exposed_at) of the open commons predictions, by id."""
    return store.conn.execute("SELECT id, commons_id, family, made, probes, exposed_at FROM commons_predictions "
                              "WHERE state = 'open' ORDER BY id").fetchall()


def set_prediction_exposed(store, prediction_id: int, at: str) -> None:
    """A commons prediction whose lesson is shown in its family's memory folder from ``at`` on."""
    store.conn.execute("UPDATE commons_predictions SET exposed_at = ? WHERE id = ?", (at, prediction_id))


def insert_commons_prediction(store, commons_id: int, family: str, made: str, text: str, probes: list,
                              exposed_at: str | None) -> int:
    return store.conn.execute(
        "INSERT INTO commons_predictions (commons_id, family, made, text, probes, exposed_at) VALUES (?, ?, ?, ?, ?, ?)",
        (commons_id, family, made, text, dumps(probes), exposed_at)).lastrowid


def confirm_commons_prediction(store, prediction_id: int, at: str, sessions: int, matched: int, episode_id: int,
                               fix: str, exposed: bool) -> None:
    """Its failure met by ``episode_id``; ``exposed_at`` kept only when that evidence was exposed."""
    store.conn.execute(
        "UPDATE commons_predictions SET state = 'confirmed', resolved = ?, sessions = ?, matched = ?, "
        "episode_id = ?, failure = 'confirmed', fix = ?, facet = NULL, similarity = NULL, "
        "exposed_at = CASE WHEN ? THEN exposed_at ELSE NULL END WHERE id = ?",
        (at, sessions, matched, episode_id, fix, int(exposed), prediction_id))


def fail_commons_prediction(store, prediction_id: int, at: str, sessions: int) -> None:
    store.conn.execute("UPDATE commons_predictions SET state = 'failed', resolved = ?, sessions = ?, "
                       "matched = 0, failure = 'failed', fix = 'untested' WHERE id = ?", (at, sessions, prediction_id))


def resolved_unattested(store) -> list[tuple]:
    """(commons_id, id, state, sessions, matched, made, exposed, fix) of the resolved commons
    predictions no attestation took yet, by id."""
    return store.conn.execute(
        "SELECT commons_id, id, state, sessions, matched, made, exposed_at IS NOT NULL, fix FROM commons_predictions "
        "WHERE state IN ('confirmed', 'failed') AND attestation_id IS NULL ORDER BY id").fetchall()


def set_predictions_attestation(store, prediction_ids: list[int], attestation_id: int) -> None:
    """These predictions went into ``attestation_id`` (0: into none, never to be attested)."""
    store.conn.executemany("UPDATE commons_predictions SET attestation_id = ? WHERE id = ?",
                           [(attestation_id, pid) for pid in prediction_ids])


def last_live_attestation(store, commons_id: int) -> tuple | None:
    """(id, failure, fix, exposed, made, verdict) of a lesson's latest pending or sent attestation."""
    return store.conn.execute(
        "SELECT id, failure, fix, exposed, made, verdict FROM commons_attestations WHERE commons_id = ? "
        "AND state IN ('pending', 'sent') ORDER BY id DESC LIMIT 1", (commons_id,)).fetchone()


def insert_attestation(store, commons_id: int, lesson_record: str, verdict: str, met_before: bool, sessions: int,
                       matched: int, window: int, made: str, failure: str, fix: str, exposed: bool) -> int:
    return store.conn.execute(
        "INSERT INTO commons_attestations (commons_id, lesson_record, verdict, met_before, sessions, matched, "
        "window, made, failure, fix, exposed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (commons_id, lesson_record, verdict, int(met_before), sessions, matched, window, made, failure, fix,
         int(exposed))).lastrowid


ATTESTATION_FIELDS = ("id", "commons_id", "lesson_record", "verdict", "met_before", "sessions", "matched", "window",
                      "failure", "fix", "exposed")


def pending_attestations(store) -> list[dict]:
    """The attestations the node has not taken yet (:data:`ATTESTATION_FIELDS`), by id."""
    return [dict(zip(ATTESTATION_FIELDS, values)) for values in store.conn.execute(
        f"SELECT {', '.join(ATTESTATION_FIELDS)} FROM commons_attestations WHERE state = 'pending' ORDER BY id")]


def set_attestation_dropped(store, attestation_id: int) -> None:
    store.conn.execute("UPDATE commons_attestations SET state = 'dropped' WHERE id = ?", (attestation_id,))


def set_attestation_refused(store, attestation_id: int, error: str) -> None:
    store.conn.execute("UPDATE commons_attestations SET state = 'refused', error = ? WHERE id = ?",
                       (error, attestation_id))


def set_attestation_sent(store, attestation_id: int, at: str, record_id, node_status) -> None:
    store.conn.execute("UPDATE commons_attestations SET state = 'sent', sent = ?, record_id = ?, "
                       "node_status = ? WHERE id = ?", (at, record_id, node_status, attestation_id))
