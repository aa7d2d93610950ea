"""Recall latency at 10k and 100k memories, against a bare numpy matrix-vector product.

For each size: a store is filled with synthetic memories (texts drawn from the words of
the real transcripts), then random queries are timed through the public API
``recall(store, query, k=5, now)`` in a warm process (what an MCP server does): embed the
query, score every active memory (relevance, recency, strength), take the top 5, read
them, and touch them (a write). The baseline is ``matrix @ query`` alone over the same
memory-mapped matrix. Also shown: the first recall of a fresh process (index load).
Target: p50 under 20 ms at 100k.

    python benchmarks/recall.py [--sizes 10000 100000] [--queries 300]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmemory_local.core.clock import iso  # noqa: E402
from openmemory_local.core.config import Config  # noqa: E402
from openmemory_local.text.embed import embed  # noqa: E402
from openmemory_local.ingest.episodes import Episode  # noqa: E402
from openmemory_local.ingest.transcripts import add_episodes  # noqa: E402
from openmemory_local.recall.query import index_for, recall  # noqa: E402
from openmemory_local.storage.store import Store  # noqa: E402

NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)


def vocabulary(data: Path) -> list[str]:
    words: dict[str, int] = {}
    for path in (data / "claude-code" / "spotter").rglob("*.jsonl"):
        for word in re.findall(rb"[a-z][a-z_]{2,14}", path.read_bytes()[:2_000_000]):
            words[word.decode()] = words.get(word.decode(), 0) + 1
    return [w for w, n in sorted(words.items(), key=lambda kv: -kv[1])[:6000]]


def fill(store: Store, n: int, words: list[str], rng: random.Random) -> float:
    started = time.perf_counter()
    kinds = ["error"] * 6 + ["session"] * 3 + ["correction"]
    batch = []
    for i in range(n):
        text = " ".join(rng.choices(words, k=rng.randint(10, 40)))
        created = NOW - timedelta(days=rng.uniform(0, 365))
        batch.append(Episode(rng.choice(kinds), f"bench-{i}", text, {}, f"s{i // 50}", None,
                             f"/home/me/project{i % 20}", iso(created), 1))
        if len(batch) == 10_000:
            add_episodes(store, batch, now=NOW)
            batch = []
    if batch:
        add_episodes(store, batch, now=NOW)
    return time.perf_counter() - started


def percentiles(samples: list[float]) -> tuple[float, float]:
    arr = np.array(samples) * 1000
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def bench(size: int, words: list[str], queries: int, work: Path) -> None:
    rng = random.Random(size)
    home = work / f"home-{size}"
    store = Store.open(Config(home=home))
    fill_s = fill(store, size, words, rng)
    qs = [" ".join(rng.choices(words[:2000], k=rng.randint(2, 6))) for _ in range(queries)]
    store.close()

    # A fresh process's first recall: open the store, load the index, map the matrix.
    code = (
        "import sys, time; t = time.perf_counter(); "
        "from datetime import datetime, timezone; "
        "from openmemory_local.core.config import Config; from openmemory_local.storage.store import Store; "
        "from openmemory_local.recall.query import recall; "
        f"s = Store.open(Config(home={str(home)!r})); t1 = time.perf_counter(); "
        f"recall(s, {qs[0]!r}, 5, datetime(2026, 3, 1, tzinfo=timezone.utc)); t2 = time.perf_counter(); "
        "print(f'{(t1 - t) * 1000:.0f} {(t2 - t1) * 1000:.0f}')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)
    if done.returncode:
        raise SystemExit(done.stderr)
    out = done.stdout.split()

    store = Store.open(Config(home=home))
    recall(store, qs[0], 5, NOW)  # warm: index loaded once per process
    matrix = index_for(store).matrix
    touched, untouched, bare = [], [], []
    for q in qs:
        t = time.perf_counter()
        recall(store, q, 5, NOW)
        touched.append(time.perf_counter() - t)
        t = time.perf_counter()
        recall(store, q, 5, NOW, touch=False)
        untouched.append(time.perf_counter() - t)
        vec = embed(q)
        t = time.perf_counter()
        _ = matrix @ vec
        bare.append(time.perf_counter() - t)
    p50, p99 = percentiles(touched)
    u50, u99 = percentiles(untouched)
    b50, b99 = percentiles(bare)
    print(f"{size:>7,} memories (filled in {fill_s:.1f} s; matrix {matrix.shape[0]:,} x {matrix.shape[1]}, "
          f"{matrix.nbytes / 1e6:.0f} MB)")
    print(f"   recall, touching:      p50 {p50:6.2f} ms   p99 {p99:6.2f} ms")
    print(f"   recall, no touch:      p50 {u50:6.2f} ms   p99 {u99:6.2f} ms")
    print(f"   bare numpy M @ q:      p50 {b50:6.2f} ms   p99 {b99:6.2f} ms   "
          f"(recall p50 = {p50 / b50:.1f}x the bare product)")
    print(f"   fresh process: open store {out[0]} ms, first recall (index load) {out[1]} ms")
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("OPENMEMORY_TEST_DATA", "/work/shared/data"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    words = vocabulary(Path(args.data))
    work = Path(tempfile.mkdtemp(prefix="om-bench-recall-"))
    try:
        for size in args.sizes:
            bench(size, words, args.queries, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
