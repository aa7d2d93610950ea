"""Same episodes as another revision: ingest the real transcripts with this tree's code and with
``--base`` (a git revision, default the merge-base with ``main``) into two stores, and diff them.

    python benchmarks/ingest_compare.py [--base REV] [--data DIR] [--mb 0]

Compared, row by row: every episode (kind, key, ids, session, agent, project, text, fields,
created, last touched, source path and line, vector row, seq), every transcript (status, role,
consumed bytes and lines, hashes, digest, resumable state, rejected lines by reason), the
store's counters and the run's summary totals. Three ways in: the whole set in one run; the same
files grown in three steps (cut at arbitrary byte offsets, mid-line included: the resumable
state must carry over the same); and, with ``--mb N``, the real transcripts replicated to N MB
as ``benchmarks/ingest.py`` does. Prints the differences (none: exit 0) and the time of each
side. Each side runs in its own process (``--side``), so the two never share a module.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_EPISODE_COLUMNS = ("id", "kind", "key", "session_id", "agent_id", "project", "text", "fields", "strength",
                    "touches", "created", "last_touched", "archived", "transcript_id", "source_path",
                    "source_line", "vec_row", "seq", "ingested", "updated")
_TRANSCRIPT_COLUMNS = ("id", "path", "status", "session_id", "agent_id", "role", "project", "size",
                       "consumed_bytes", "consumed_lines", "head_hash", "tail_hash", "content_hash", "archive_bytes",
                       "state", "digest", "rejected_lines", "rejects")


def _side(code: Path, data: Path, home: Path, out: Path, steps: int) -> None:
    """Ingest ``data`` into a store at ``home`` with the code at ``code``; dump the tables to ``out``."""
    sys.path.insert(0, str(code))
    from datetime import datetime, timezone

    from openmemory_local.core.config import Config
    from openmemory_local.ingest.transcripts import ingest
    from openmemory_local.storage.store import Store

    now = datetime(2026, 3, 1, tzinfo=timezone.utc)
    store = Store.open(Config(home=home))
    runs, seconds = [], 0.0
    if steps <= 1:
        started = time.perf_counter()
        runs.append(ingest(store, [data], now=now).totals())
        seconds += time.perf_counter() - started
    else:
        # Grow copies of the files in ``steps`` cuts at arbitrary byte offsets (the same on both sides).
        grown = data.parent / f"{data.name}-grown"  # the same folder for both sides, rewritten by each
        originals = sorted(p for p in data.rglob("*.jsonl"))
        for step in range(1, steps + 1):
            for path in originals:
                body = path.read_bytes()
                cut = len(body) if step == steps else (len(body) * step) // steps + (len(body) % 97)
                target = grown / path.relative_to(data)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(body[: min(cut, len(body))])
            started = time.perf_counter()
            runs.append(ingest(store, [grown], now=now).totals())
            seconds += time.perf_counter() - started
    conn = store.conn
    dump = {
        "episodes": [list(r) for r in conn.execute(
            f"SELECT {', '.join(_EPISODE_COLUMNS)} FROM episodes ORDER BY kind, key")],
        "transcripts": [list(r) for r in conn.execute(
            f"SELECT {', '.join(_TRANSCRIPT_COLUMNS)} FROM transcripts ORDER BY path")],
        "counters": [list(r) for r in conn.execute("SELECT name, value FROM counters ORDER BY name")],
        "runs": runs,
        "seconds": seconds,
    }
    store.close()
    out.write_text(json.dumps(dump))


def _bad_inputs(folder: Path) -> None:
    """Files that are not (quite) transcripts, made from a real record: the probe that gives up,
    garbage before and after records, binary data, blank and CRLF lines, a line still being written."""
    folder.mkdir(parents=True)
    record = b'{"parentUuid":null,"type":"user","sessionId":"5e55-bad","uuid":"u1","timestamp":"2026-02-10T10:00:00Z",' \
             b'"cwd":"/x","message":{"role":"user","content":"no, not like that"}}'
    (folder / "not-a-transcript.jsonl").write_bytes(b'{"a":1}\n' * 200)
    (folder / "garbage-around.jsonl").write_bytes(b"garbage\n" * 10 + record + b"\n" + b"{\"type\":\"user\",\n" * 50
                                                  + b"[1,2]\n{\"type\":3}\n\xff\xfe\n")
    (folder / "binary.jsonl").write_bytes(bytes(range(256)) * 8)
    (folder / "blank-and-crlf.jsonl").write_bytes(b"\n   \n" + record.replace(b"u1", b"u2") + b"\r\n\t\n")
    (folder / "being-written.jsonl").write_bytes(record.replace(b"u1", b"u3") + b"\n" + record[:40])


def _diff(name: str, base: list, ours: list, columns: tuple | None) -> list[str]:
    problems = []
    if len(base) != len(ours):
        problems.append(f"{name}: {len(base)} rows in base, {len(ours)} in ours")
    for i, (a, b) in enumerate(zip(base, ours)):
        if a == b:
            continue
        if columns is None:
            problems.append(f"{name}[{i}]: base {a!r} ours {b!r}")
            continue
        for col, x, y in zip(columns, a, b):
            if x != y:
                problems.append(f"{name} {a[1]}/{a[2]} {col}: base {str(x)[:300]!r} ours {str(y)[:300]!r}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=None, help="git revision to compare with (default: merge-base with main)")
    parser.add_argument("--data", default=os.environ.get("OPENMEMORY_TEST_DATA", str(ROOT.parent / "shared" / "data")))
    parser.add_argument("--mb", type=float, default=0, help="also compare on the transcripts replicated to N MB")
    parser.add_argument("--side", nargs=5, metavar=("CODE", "DATA", "HOME", "OUT", "STEPS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        code, data, home, out, steps = args.side
        _side(Path(code), Path(data), Path(home), Path(out), int(steps))
        return
    rev = args.base or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, check=True,
                                      capture_output=True, text=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="om-ingest-compare-"))
    try:
        base_code = work / "base"
        base_code.mkdir()
        archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(base_code)], input=archive, check=True)
        # The inputs: one folder with the real transcripts (spotter and public), copied once, read by both.
        data = work / "data"
        shutil.copytree(Path(args.data) / "claude-code", data, ignore=shutil.ignore_patterns("*.md", "LICENSE*"))
        _bad_inputs(data / "bad-input")
        cases = [("whole", data, 1), ("grown in 3 steps", data, 3)]
        if args.mb:
            sys.path.insert(0, str(ROOT))
            from simulations.transcripts import replicate

            replicated = work / "replicated"
            replicate(Path(args.data) / "claude-code" / "spotter", replicated, args.mb)
            cases.append((f"replicated {args.mb:g} MB", replicated, 1))
        failed = False
        for label, source, steps in cases:
            dumps = {}
            for side, code in (("base", base_code), ("ours", ROOT)):
                home = work / f"{side}-{label.replace(' ', '-')}"
                out = work / f"{side}-{label.replace(' ', '-')}.json"
                subprocess.run([sys.executable, str(Path(__file__).resolve()), "--side", str(code), str(source),
                                str(home), str(out), str(steps)], check=True, cwd=str(code))
                dumps[side] = json.loads(out.read_text())
            base, ours = dumps["base"], dumps["ours"]
            problems = (_diff("episodes", base["episodes"], ours["episodes"], _EPISODE_COLUMNS)
                        + _diff("transcripts", base["transcripts"], ours["transcripts"], _TRANSCRIPT_COLUMNS)
                        + _diff("counters", base["counters"], ours["counters"], None)
                        + _diff("run totals", base["runs"], ours["runs"], None))
            kinds: dict = {}
            for row in ours["episodes"]:
                kinds[row[1]] = kinds.get(row[1], 0) + 1
            rejected = sum(r[16] for r in ours["transcripts"])
            print(f"{label}: {len(ours['episodes'])} episodes {kinds}, {len(ours['transcripts'])} transcripts, "
                  f"{rejected} rejected lines; base {base['seconds']:.2f} s, ours {ours['seconds']:.2f} s: "
                  + ("identical" if not problems else f"{len(problems)} DIFFERENCES"))
            for problem in problems[:40]:
                print("   ", problem)
            failed = failed or bool(problems)
        sys.exit(1 if failed else 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
