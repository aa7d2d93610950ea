"""Which received lessons may be in a memory folder, as SQL over the store: standard library
only, so that the SessionStart hook's fast path (:mod:`openmemory_local.integrations.session_start`)
can ask it without importing the engine.

A received lesson may be rendered when its status is ``common`` (or ``candidate``, with
``Config.commons_candidates``), it is not this agent's own (``mine``), this engine's
observation check accepts its text, and the owner did not veto it. A memory folder holding
one of our commons files of any other lesson is *stale*: the next render removes the file.
"""

from __future__ import annotations

import sqlite3

__all__ = ["eligible_sql", "stale_folders", "cursor"]


def eligible_sql(candidates: bool, table: str = "") -> tuple[str, list[str]]:
    """The condition (and its parameters) of a received lesson that may be rendered."""
    statuses = ["common"] + (["candidate"] if candidates else [])
    t = f"{table}." if table else ""
    return (f"{t}status IN ({','.join('?' * len(statuses))}) AND {t}mine = 0 AND {t}observation = 1 "
            f"AND {t}vetoed_at IS NULL", statuses)


def stale_folders(conn: sqlite3.Connection, candidates: bool) -> list[str]:
    """Memory folders (real paths) holding a commons file of a lesson that may not be rendered."""
    where, params = eligible_sql(candidates, "c")
    return [d for (d,) in conn.execute(
        "SELECT DISTINCT f.memory_dir FROM rendered_files f JOIN commons_lessons c ON c.id = f.lesson_id "
        f"WHERE f.role = 'commons' AND f.state = 'ours' AND NOT ({where}) ORDER BY f.memory_dir", params)]


def cursor(conn: sqlite3.Connection) -> tuple[int, str | None]:
    """The node change number pulled up to, and the key of the node it was pulled from."""
    rows = dict(conn.execute("SELECT key, value FROM meta WHERE key IN ('commons_cursor', 'commons_node')"))
    try:
        after = int(rows.get("commons_cursor") or 0)
    except ValueError:
        after = 0
    return after, rows.get("commons_node")
