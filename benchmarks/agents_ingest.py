"""Ingest throughput of Codex CLI rollouts and Gemini CLI sessions (the synthetic fixtures of
tests/agents/data, replicated with fresh ids to about --mb MB per agent), against reading and
orjson-parsing the same bytes line by line (the floor any JSONL reader pays).

    python benchmarks/agents_ingest.py [--mb 40]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmemory_local.core.config import Config  # noqa: E402
from openmemory_local.ingest.transcripts import ingest  # noqa: E402
from openmemory_local.storage.store import Store  # noqa: E402

_IDS = re.compile(r'"(call_(?!id")|run_shell_command-|read_file-|a7f0c1d2-)([^"]*)"')
DATA = Path(__file__).resolve().parent.parent / "tests" / "agents" / "data"


def replicate(agent: str, root: Path, megabytes: float) -> list[Path]:
    """Files of ``agent`` under ``root``: the fixture's body repeated, ids made unique per copy."""
    if agent == "codex":
        source = next((DATA / "codex").rglob("rollout-*.jsonl"))
    else:
        source = next((DATA / "gemini").rglob("session-*.jsonl"))
    head, *body = source.read_text().splitlines(keepends=True)
    files, total, n = [], 0, 0
    while total < megabytes * 1e6:
        n += 1
        chunk = "".join(body)
        text = head + "".join(_IDS.sub(lambda m, tag=f"{n}-{r}": f'"{m.group(1)}{tag}-{m.group(2)}"', chunk)
                              for r in range(20))
        text = text.replace("0199a1b2-7c3d-7e4f-9a0b-1c2d3e4f5a6b", f"0199a1b2-7c3d-7e4f-9a0b-{n:012d}")
        text = text.replace("5f2c8e1a-3b4d-4c6e-8f0a-1b2c3d4e5f6a", f"5f2c8e1a-3b4d-4c6e-8f0a-{n:012d}")
        if agent == "codex":
            path = root / "sessions" / "2026" / "11" / "20" / f"rollout-2026-11-20T10-00-00-{n:06d}.jsonl"
        else:
            path = root / "tmp" / "webapp" / "chats" / f"session-2026-11-21T09-00-{n:08d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files.append(path)
        total += len(text.encode())
    return files


def floor(files: list[Path]) -> float:
    started = time.perf_counter()
    for path in files:
        with open(path, "rb") as f:
            for line in f:
                orjson.loads(line)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=40.0)
    args = parser.parse_args()
    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    print(f"{'agent':8} {'MB':>6} {'files':>6} {'ingest s':>9} {'MB/s':>7} {'floor s':>8} {'x floor':>8} {'errors':>7}")
    for agent in ("codex", "gemini"):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            files = replicate(agent, root / "in", args.mb)
            size = sum(p.stat().st_size for p in files) / 1e6
            base = floor(files)
            with Store.open(Config(home=root / "home")) as store:
                started = time.perf_counter()
                summary = ingest(store, [root / "in"], now=now)
                took = time.perf_counter() - started
                errors = store.conn.execute("SELECT COUNT(*) FROM episodes WHERE kind = 'error'").fetchone()[0]
            assert not summary.problems, summary.problems
            print(f"{agent:8} {size:6.1f} {len(files):6d} {took:9.2f} {size / took:7.1f} {base:8.2f} "
                  f"{took / base:8.1f} {errors:7d}")


if __name__ == "__main__":
    main()
