"""The files a renderer writes, written safely: atomic replacement that never overwrites a file
someone changed since it was read, the managed section's markers, and the bookkeeping of which
files Open Memory wrote (table ``rendered_files``) so that an owner's edit or deletion is seen
and respected. Shared by every render target (the Claude Code memory folder, its commons part,
AGENTS.md and GEMINI.md).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from openmemory_local.storage import rendered

BEGIN = "<!-- openmemory:begin -->"
END = "<!-- openmemory:end -->"
_TMP_SUFFIX = ".openmemory-tmp"
_ANY = object()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def atomic_write(path: Path, data: bytes, *, expect=_ANY, mode: int | None = None) -> bool:
    """Write ``data`` to ``path`` through a temporary file and a rename. With ``expect``
    (bytes, or None for "no file"), give up (False) if the file no longer holds it just
    before the rename: the owner (or Claude Code) wrote it meanwhile."""
    tmp = path.with_name("." + path.name + _TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644 if mode is None else mode & 0o7777)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode & 0o7777)
        if expect is not _ANY and read_bytes(path) != expect:
            tmp.unlink()
            return False
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    return True


def line_count(text: str) -> int:
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def observe_files(store, key: str, role: str, result, deleted, edited) -> None:
    """What the owner did to the files of ``role`` we wrote in one folder (real path ``key``):
    finish an interrupted removal, call ``deleted(lesson_id, path)`` for a file gone (a veto)
    and ``edited(lesson_id, path)`` once for a file whose bytes are no longer ours."""
    for path, lesson_id, sha, pending, state in rendered.rendered_records(store, key, role):
        data = read_bytes(Path(path))
        if state == "removing":
            if data is not None and sha256_hex(data) in (sha, pending):
                Path(path).unlink()
            rendered.forget_rendered(store, [path])
        elif data is None:
            rendered.forget_rendered(store, [path])
            if sha is None:
                continue  # a first write that was interrupted: not the owner's doing
            deleted(lesson_id, path)
        else:
            digest = sha256_hex(data)
            if digest in (sha, pending):
                if pending is not None or state != "ours" or digest != sha:
                    rendered.mark_ours(store, path, digest)
            elif state != "edited":
                rendered.mark_edited(store, path)
                edited(lesson_id, path)
                result.edited.append(path)


def sync_files(store, key: str, role: str, planned: list[tuple[str, int, bytes]], now_iso: str, out: dict,
               result) -> None:
    """Make the files of ``role`` in one folder (real path ``key``) those ``planned``
    (file name, lesson id, bytes): write what changed, remove ours that are no longer
    planned, leave edited and foreign files alone. Recorded as pending, done, then recorded
    as done, so a render killed midway is finished by the next one."""
    real = Path(key)
    records = {path: (lesson_id, sha, state)
               for path, lesson_id, sha, _pending, state in rendered.rendered_records(store, key, role)}
    writes, removals = [], []
    wanted = set()
    for name, lesson_id, data in planned:
        path = str(real / name)
        wanted.add(path)
        known = records.get(path)
        if known is not None and known[2] == "edited":
            out["left_alone"].append(path)
            continue
        current = read_bytes(Path(path))
        if known is None and current is not None:
            result.problems.append(f"{path}: a file with this name exists and is not Open Memory's: left alone")
            out["left_alone"].append(path)
            continue
        if current == data and known is not None:
            out["unchanged"].append(path)
            continue
        writes.append((path, lesson_id, data))
    for path, (lesson_id, sha, state) in records.items():
        if path not in wanted and state == "ours":
            removals.append((path, lesson_id, sha))
    # 1. record what we are about to do, 2. do it, 3. record that it is done
    if writes or removals:
        with store.write():
            rendered.record_pending_writes(
                store, key, role, [(path, lesson_id, sha256_hex(data)) for path, lesson_id, data in writes], now_iso)
            rendered.mark_removing(store, [path for path, _, _ in removals])
        for path, lesson_id, data in writes:
            atomic_write(Path(path), data)
            out["written"].append(path)
        for path, _, sha in removals:
            data = read_bytes(Path(path))
            if data is not None and sha256_hex(data) == sha:
                Path(path).unlink()
            out["removed"].append(path)
        with store.write():
            rendered.record_written(store, [(path, sha256_hex(data)) for path, _, data in writes], now_iso)
            rendered.forget_rendered(store, [path for path, _, _ in removals])


def fit_lines(lines, room_lines: int | None, room_bytes: int) -> tuple[list[str], int]:
    """The leading ``lines`` that fit within ``room_lines`` lines (None: no bound on lines) and
    ``room_bytes`` bytes, each line costing its UTF-8 length and a newline; and the bytes left.
    The budget every managed section is cut to (MEMORY.md's, its commons part's, AGENTS.md's)."""
    kept: list[str] = []
    for line in lines:
        cost = len(line.encode()) + 1
        if (room_lines is not None and len(kept) + 1 > room_lines) or cost > room_bytes:
            break
        kept.append(line)
        room_bytes -= cost
    return kept, room_bytes
