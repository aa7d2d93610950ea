"""Which received lessons may be in a memory folder: the trust boundary, as SQL over the store.

Standard library only, so that the SessionStart hook's fast path
(:mod:`openmemory_local.integrations.session_start`) can ask it without importing the engine.
This is the one implementation of the rule; :class:`openmemory_local.commons.choose.Chooser` reads the
lessons it lets through and ranks them by relevance.

A received lesson may be rendered when all of these hold:

=============================  ===============================================================
who vouches for it (layer)     ``team`` (its author is a key the owner added: ``openmemory team
                               add``): when ``common``, or a ``candidate`` with
                               ``[commons] team_candidates`` (default on, marked as the
                               team's, not yet verified); ``commons`` (everyone else): only a
                               claim (a version 2 record, whose failure and fix independent
                               agents' own sessions confirmed) that is ``common``, or a
                               ``candidate`` with ``[commons] candidates`` (default off)
not this agent's own           ``mine`` = 0 (this node's key authored it or its group)
this engine accepts it         ``observation`` = 1 and ``refused`` is null (no unsafe command,
                               no failure carrying a prompt, checked again at receipt)
the owner did not refuse it    not vetoed; and no lesson of the same claim (``claim_key``: case,
                               punctuation, spacing, quoting, a re-ordered command) is vetoed
                               or revoked: a veto or a revocation covers the claim, not the bytes
=============================  ===============================================================

A blocked author's lessons are revoked by the node (and near-copies by other keys fall under the
same-claim rule). A memory folder holding one of our commons files of any other lesson is
*stale*: the next render removes the file.
"""

from __future__ import annotations

import sqlite3

__all__ = ["eligible_sql", "stale_folders", "cursor"]


def eligible_sql(candidates: bool, table: str = "", team_candidates: bool = True) -> tuple[str, list[str]]:
    """The condition (and its parameters) of a received lesson that may be rendered.
    ``candidates``: strangers' candidates too; ``team_candidates``: the team's."""
    t = f"{table}." if table else "commons_lessons."  # (qualified: the sub-query has its own rows)
    team = ["common"] + (["candidate"] if team_candidates else [])
    strangers = ["common"] + (["candidate"] if candidates else [])
    where = (f"(({t}layer = 'team' AND {t}status IN ({','.join('?' * len(team))})) "
             f"OR ({t}layer = 'commons' AND {t}version >= 2 AND {t}status IN ({','.join('?' * len(strangers))}))) "
             f"AND {t}mine = 0 AND {t}observation = 1 AND {t}refused IS NULL AND {t}vetoed_at IS NULL "
             f"AND NOT EXISTS (SELECT 1 FROM commons_lessons same WHERE same.claim_key = {t}claim_key "
             "AND (same.vetoed_at IS NOT NULL OR same.status = 'revoked'))")
    return where, team + strangers


def stale_folders(conn: sqlite3.Connection, candidates: bool, team_candidates: bool = True) -> list[str]:
    """Memory folders (real paths) holding a commons file of a lesson that may not be rendered."""
    where, params = eligible_sql(candidates, "c", team_candidates)
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
