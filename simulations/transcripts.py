"""Real transcripts, replicated: many distinct sessions made from a few real ones.

Each copy gets its own session ids (the first 8 hex digits of every session UUID replaced)
and its own tool-use ids, in a project folder of its own, so the copies ingest as distinct
sessions, not as rewrites of the same ones. Used by ``benchmarks/ingest.py`` (>= 200 MB of
input) and by the tests that need an ingest long enough to interrupt.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

__all__ = ["replicate"]

UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def replicate(source: Path, target: Path, megabytes: float) -> tuple[int, int]:
    """Write copies of ``source`` under ``target`` until at least ``megabytes``; return (bytes, copies)."""
    files = sorted(p for p in source.rglob("*.jsonl"))
    session_ids = sorted({p.name[:36].encode() for p in source.glob("*.jsonl") if UUID.fullmatch(p.name[:36].encode())}
                         | {p.parent.parent.name.encode() for p in source.glob("*/subagents/*.jsonl")})
    contents = {p: p.read_bytes() for p in files}
    for data in contents.values():
        for line in data.splitlines()[:3]:
            try:
                sid = json.loads(line).get("sessionId")
            except ValueError:
                continue
            if sid:
                session_ids.append(sid.encode())
    session_ids = sorted(set(session_ids))
    total, copies = 0, 0
    while total < megabytes * 1_000_000:
        prefix = b"%08x" % (0xC0000000 + copies)
        for path, data in contents.items():
            for sid in session_ids:
                data = data.replace(sid, prefix + sid[8:])
            data = data.replace(b'"toolu_', b'"toolu_c%04d' % copies)
            rel = str(path.relative_to(source))
            for sid in session_ids:
                rel = rel.replace(sid.decode(), (prefix + sid[8:]).decode())
            out = target / f"-home-user-project-{copies:03d}" / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            total += len(data)
        copies += 1
    return total, copies
