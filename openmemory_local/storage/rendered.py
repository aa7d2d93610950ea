"""The table ``rendered_files``: every file (and index section, and AGENTS.md line) Open Memory
wrote into a memory folder, with the SHA-256 of what it wrote (see :mod:`openmemory_local.storage.store`
for the columns, :mod:`openmemory_local.render.files` for how a render uses them).

Plain SQL over ``store.conn``; writers run inside the caller's ``store.write()``.
"""

from __future__ import annotations

__all__ = [
    "rendered_records", "rendered_record_state", "rendered_index_record", "folder_has_records",
    "folder_has_lesson_records", "lines_listed", "forget_rendered", "forget_folder", "mark_ours",
    "mark_edited", "mark_removed", "record_pending_writes", "mark_removing", "record_written",
    "record_index", "record_index_if_missing", "record_agent_section", "vetoed_lesson_ids",
    "lesson_file_name", "kept_edited_count",
]


# --- reads -------------------------------------------------------------------------

def rendered_records(store, memory_dir: str, role: str) -> list[tuple]:
    """(path, lesson_id, sha256, pending_sha256, state) of the files of ``role`` in a folder, by path."""
    return store.conn.execute(
        "SELECT path, lesson_id, sha256, pending_sha256, state FROM rendered_files WHERE memory_dir = ? "
        "AND role = ? ORDER BY path", (memory_dir, role)).fetchall()


def rendered_record_state(store, path: str, role: str) -> tuple | None:
    """(sha256, state) of the record of one file of ``role``, or None."""
    return store.conn.execute("SELECT sha256, state FROM rendered_files WHERE path = ? AND role = ?",
                              (path, role)).fetchone()


def rendered_index_record(store, path: str, role: str = "index") -> tuple | None:
    """(state,) of the record of an index file (``MEMORY.md``, ``AGENTS.md``), or None."""
    return store.conn.execute("SELECT state FROM rendered_files WHERE path = ? AND role = ?",
                              (path, role)).fetchone()


def folder_has_records(store, memory_dir: str) -> bool:
    return store.conn.execute("SELECT 1 FROM rendered_files WHERE memory_dir = ? LIMIT 1",
                              (memory_dir,)).fetchone() is not None


def folder_has_lesson_records(store, memory_dir: str) -> bool:
    """Open Memory wrote a lesson file or a commons file into this folder."""
    return store.conn.execute("SELECT 1 FROM rendered_files WHERE memory_dir = ? AND role IN ('lesson', 'commons') "
                              "LIMIT 1", (memory_dir,)).fetchone() is not None


def lines_listed(store, path: str) -> list[int]:
    """The lessons whose lines we wrote into an agent file's section (``agent-line`` records)."""
    return [lid for (lid,) in store.conn.execute(
        "SELECT lesson_id FROM rendered_files WHERE memory_dir = ? AND role = 'agent-line'", (path,))]


def kept_edited_count(store, lesson_id: int) -> int:
    """How many files of a lesson its owner edited (left alone by a veto)."""
    return store.conn.execute("SELECT COUNT(*) FROM rendered_files WHERE lesson_id = ? AND role = 'lesson' "
                              "AND state = 'edited'", (lesson_id,)).fetchone()[0]


def vetoed_lesson_ids(store) -> set[int]:
    """The agent's own lessons its owner vetoed (never rendered)."""
    return {lid for (lid,) in store.conn.execute("SELECT id FROM lessons WHERE vetoed_at IS NOT NULL")}


def lesson_file_name(store, lesson_id: int) -> str | None:
    """The file name of a lesson in memory folders."""
    row = store.conn.execute("SELECT file_name FROM lessons WHERE id = ?", (lesson_id,)).fetchone()
    return row[0] if row else None


# --- writes (inside store.write()) -------------------------------------------------

def forget_rendered(store, paths) -> None:
    """Drop the records of these files (gone, or removed by us)."""
    store.conn.executemany("DELETE FROM rendered_files WHERE path = ?", [(p,) for p in paths])


def forget_folder(store, memory_dir: str) -> None:
    """Drop every record of a folder that is gone altogether."""
    store.conn.execute("DELETE FROM rendered_files WHERE memory_dir = ?", (memory_dir,))


def mark_ours(store, path: str, digest: str) -> None:
    """The file holds what we wrote (``digest``): no write pending, ours."""
    store.conn.execute("UPDATE rendered_files SET sha256 = ?, pending_sha256 = NULL, state = 'ours' WHERE path = ?",
                       (digest, path))


def mark_edited(store, path: str) -> None:
    store.conn.execute("UPDATE rendered_files SET state = 'edited', pending_sha256 = NULL WHERE path = ?", (path,))


def mark_removed(store, path: str) -> None:
    """The owner took our section out of an index file: never written back."""
    store.conn.execute("UPDATE rendered_files SET state = 'removed' WHERE path = ?", (path,))


def record_pending_writes(store, memory_dir: str, role: str, writes: list[tuple[str, int, str]], now_iso: str) -> None:
    """Before writing: (path, lesson id, sha256 of the bytes about to be written) as pending."""
    store.conn.executemany(
        "INSERT INTO rendered_files (path, memory_dir, lesson_id, role, sha256, pending_sha256, state, "
        "written) VALUES (?, ?, ?, ?, NULL, ?, 'ours', ?) ON CONFLICT (path) DO UPDATE SET "
        "pending_sha256 = excluded.pending_sha256",
        [(path, memory_dir, lesson_id, role, digest, now_iso) for path, lesson_id, digest in writes])


def mark_removing(store, paths) -> None:
    store.conn.executemany("UPDATE rendered_files SET state = 'removing' WHERE path = ?", [(p,) for p in paths])


def record_written(store, written: list[tuple[str, str]], now_iso: str) -> None:
    """After writing: (path, sha256) are done."""
    store.conn.executemany("UPDATE rendered_files SET sha256 = ?, pending_sha256 = NULL, written = ? WHERE path = ?",
                           [(digest, now_iso, path) for path, digest in written])


def record_index(store, path: str, memory_dir: str, role: str, digest: str, now_iso: str) -> None:
    """An index file (or agent file) whose section we wrote, ours."""
    store.conn.execute(
        "INSERT INTO rendered_files (path, memory_dir, lesson_id, role, sha256, pending_sha256, state, written) "
        "VALUES (?, ?, NULL, ?, ?, NULL, 'ours', ?) ON CONFLICT (path) DO UPDATE SET "
        "sha256 = excluded.sha256, state = 'ours', written = excluded.written",
        (path, memory_dir, role, digest, now_iso))


def record_index_if_missing(store, path: str, memory_dir: str, digest: str, now_iso: str) -> None:
    """Our section, written by a render killed before it could record it."""
    store.conn.execute("INSERT INTO rendered_files (path, memory_dir, lesson_id, role, sha256, state, written) "
                       "VALUES (?, ?, NULL, 'index', ?, 'ours', ?)", (path, memory_dir, digest, now_iso))


def record_agent_section(store, path: str, folder: str, role: str, digest: str, shown: list[int],
                         now_iso: str) -> None:
    """An agent file's section (AGENTS.md, GEMINI.md, in ``folder``) and the lessons listed in it,
    one ``agent-line`` record each (a line the owner deletes is then seen)."""
    record_index(store, path, folder, role, digest, now_iso)
    store.conn.execute("DELETE FROM rendered_files WHERE memory_dir = ? AND role = 'agent-line'", (path,))
    store.conn.executemany(
        "INSERT INTO rendered_files (path, memory_dir, lesson_id, role, sha256, pending_sha256, state, written) "
        "VALUES (?, ?, ?, 'agent-line', NULL, NULL, 'ours', ?)",
        [(f"{path}#lesson-{lid}", path, lid, now_iso) for lid in shown])
