"""Recall at 100k and 1M memories: exact against the HNSW index, p50/p95, recall@10, memory, disk.

For each size a store is written directly (synthetic memories whose texts are drawn from the
words of the real transcripts, embedded with the hashed embedding, in bulk: the point is
recall, not ingest), then the same queries go through the public ``recall(store, query,
k=10, now, touch=False)`` twice in a warm process: with the index off (``recall_index_min_rows
= 0``: every vector scored, the baseline) and with it (built by :func:`openmemory_local.ann.update`,
what an ingest does). Printed per size: p50/p95 of each, recall@10 of the indexed answers
against the exact ones (same queries, same scores), the process's resident memory after
each, the index's build time, and the disk the store takes (database, vectors, index).
Targets: p50 under 20 ms at 1M with recall@10 >= 0.98.

    python benchmarks/recall_scale.py [--sizes 100000 1000000] [--queries 200]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from openmemory_local.ann import update  # noqa: E402
from openmemory_local.clock import iso  # noqa: E402
from openmemory_local.config import Config  # noqa: E402
from openmemory_local.embed import embed_many  # noqa: E402
from openmemory_local.recall import recall  # noqa: E402
from openmemory_local.store import Store  # noqa: E402
from openmemory_local.vectors import VectorFile  # noqa: E402
from recall import NOW, vocabulary  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_store(home: Path, n: int, words: list[str], rng: random.Random) -> float:
    """n episodes and their vectors, written in bulk (one transaction per 50k)."""
    started = time.perf_counter()
    store = Store.open(Config(home=home))
    kinds = ["error"] * 6 + ["session"] * 3 + ["correction"]
    vectors = VectorFile(store)
    for start in range(0, n, 50_000):
        rows = []
        texts = [" ".join(rng.choices(words, k=rng.randint(10, 40))) for _ in range(min(50_000, n - start))]
        matrix = embed_many(texts)
        with store.write():
            first = vectors.append(matrix)
            for i, text in enumerate(texts):
                created = iso(NOW - timedelta(days=rng.uniform(0, 365)))
                rows.append((rng.choice(kinds), f"bench-{start + i}", f"s{(start + i) // 50}",
                             f"/home/me/project{(start + i) % 20}", text, created, created, first + i,
                             "hash-wb-256-v1", created, created))
            store.conn.executemany(
                "INSERT INTO episodes (kind, key, session_id, project, text, created, last_touched, vec_row, embedder, "
                "ingested, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    store.close()
    return time.perf_counter() - started


def timed_recall(store: Store, queries: list[str]) -> tuple[list[float], list[list[int]]]:
    recall(store, queries[0], 10, NOW, touch=False)  # warm: the index loaded once per process
    times, answers = [], []
    for q in queries:
        t = time.perf_counter()
        results = recall(store, q, 10, NOW, touch=False)
        times.append((time.perf_counter() - t) * 1000)
        answers.append([(r.id, r.score) for r in results])
    return times, answers


def disk(home: Path) -> dict:
    out = {"db": 0, "vectors": 0, "index": 0}
    for path in home.rglob("*"):
        if path.is_file():
            size = path.stat().st_size
            key = "index" if ".usearch" in path.name else "vectors" if path.suffix == ".f32" else "db"
            out[key] += size
    return out


def bench(n: int, words: list[str], queries: int, work: Path) -> None:
    rng = random.Random(n)
    home = work / f"home-{n}"
    write_s = write_store(home, n, words, rng)
    qs = [" ".join(rng.choices(words[:3000], k=rng.randint(2, 8))) for _ in range(queries)]
    config = Config(home=home, recall_index_min_rows=1)
    with Store.open(config.with_(recall_index_min_rows=0)) as store:
        base = rss_mb()
        exact_t, exact = timed_recall(store, qs)
        exact_rss = rss_mb() - base
    with Store.open(config) as store:
        started = time.perf_counter()
        built = update(store, force=True)
        build_s = time.perf_counter() - started
    with Store.open(config) as store:
        base = rss_mb()
        ann_t, ann = timed_recall(store, qs)
        ann_rss = rss_mb() - base
    # recall@10: an indexed answer counts when it is among the exact top 10, or ties the exact
    # 10th score (random texts share no word with most queries: many memories score alike)
    hits = total = same = 0
    for a, e in zip(ann, exact):
        ids, kth = {i for i, _ in e}, (e[-1][1] if e else 0.0)
        hits += sum(1 for i, score in a if i in ids or score >= kth - 1e-6)
        total += len(e)
        same += [i for i, _ in a] == [i for i, _ in e]
    sizes = disk(home)
    print(f"{n:>9,} memories (written in {write_s:.0f} s; index of {built['indexed']:,} rows built in {build_s:.0f} s)")
    for name, values, rss in (("exact (every vector)", exact_t, exact_rss), ("HNSW index + exact rescoring", ann_t,
                                                                             ann_rss)):
        values = sorted(values)
        p50, p95 = np.percentile(values, 50), np.percentile(values, 95)
        print(f"   {name:30} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  (x exact p50 "
              f"{p50 / np.percentile(exact_t, 50):.2f})  memory +{rss:.0f} MB")
    print(f"   recall@10 against exact: {hits / max(1, total):.4f} ({same} of {len(qs)} answers identical)")
    print(f"   disk: database {sizes['db'] / 1e6:.0f} MB, vectors {sizes['vectors'] / 1e6:.0f} MB, "
          f"index {sizes['index'] / 1e6:.0f} MB")
    shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("OPENMEMORY_TEST_DATA", "/work/shared/data"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    words = vocabulary(Path(args.data))
    work = Path(tempfile.mkdtemp(prefix="om-bench-recall-scale-"))
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    try:
        for n in args.sizes:
            bench(n, words, args.queries, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
