"""Recall at 100k and 1M memories: exact, the 8-bit slot-major copy, the HNSW index; p50/p95, recall@10.

For each size a store is written directly (synthetic memories whose texts are drawn from the
words of the real transcripts, embedded with the hashed embedding, in bulk: the point is
recall, not ingest), then the same queries go through the public ``recall(store, query,
k=10, now, touch=False)`` in a warm process: with the big-store indexes off
(``recall_copy_min_rows = recall_index_min_rows = 0``: every vector scored, the baseline),
with the slot-major copy (:mod:`openmemory_local.recall.columns`, built by its ``update`` as an
ingest does), and with ``--hnsw`` with the HNSW index alone (:func:`openmemory_local.recall.ann.update`;
the copy off). The copy is timed with its C column pass (``openmemory_local._columns_c``, when
built) and with numpy's. Queries are short (2 to 8 words, what an agent asks) and, apart, long
(40 to 80 words: more coordinates than numpy's column pass serves, so without the C pass they take
the HNSW index or the exact pass).
Printed per size: p50/p95 of each, recall@10 against the exact answers (same queries, same
scores), the process's resident memory after each, build times, and the disk the store takes.
Targets: p50 under 20 ms at 1M with recall@10 >= 0.98.

    python benchmarks/recall_scale.py [--sizes 100000 1000000] [--queries 200] [--hnsw] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gc
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

from openmemory_local.recall import columns  # noqa: E402
from openmemory_local.recall.ann import update  # noqa: E402
from openmemory_local.recall.columns import update as update_columns  # noqa: E402
from openmemory_local.core.clock import iso  # noqa: E402
from openmemory_local.core.config import Config  # noqa: E402
from openmemory_local.text.embed import embed_many  # noqa: E402
from openmemory_local.recall.query import recall  # noqa: E402
from openmemory_local.storage.store import Store  # noqa: E402
from openmemory_local.storage.vectors import VectorFile  # noqa: E402
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


def timed_recall(store: Store, queries: list[str]) -> tuple[list[float], list[list[int]], list[float]]:
    """(wall ms, answers, CPU ms of the process: every thread's) of each query."""
    recall(store, queries[0], 10, NOW, touch=False)  # warm: the index loaded once per process
    times, answers, cpu = [], [], []
    for q in queries:
        t, c = time.perf_counter(), time.process_time()
        results = recall(store, q, 10, NOW, touch=False)
        times.append((time.perf_counter() - t) * 1000)
        cpu.append((time.process_time() - c) * 1000)
        answers.append([(r.id, r.score) for r in results])
    return times, answers, cpu


def disk(home: Path) -> dict:
    out = {"db": 0, "vectors": 0, "copy": 0, "index": 0}
    for path in home.rglob("*"):
        if path.is_file():
            size = path.stat().st_size
            key = ("index" if ".usearch" in path.name else "copy" if ".cols" in path.name
                   else "vectors" if path.suffix == ".f32" else "db")
            out[key] += size
    return out


def recall_at_10(found, exact) -> tuple[float, int]:
    """(recall@10, answers identical): an answer counts when it is among the exact top 10, or
    ties the exact 10th score (random texts share no word with most queries: many score alike)."""
    hits = total = same = 0
    for a, e in zip(found, exact):
        ids, kth = {i for i, _ in e}, (e[-1][1] if e else 0.0)
        hits += sum(1 for i, score in a if i in ids or score >= kth - 1e-6)
        total += len(e)
        same += [i for i, _ in a] == [i for i, _ in e]
    return hits / max(1, total), same


def measured(config: Config, queries: list[str]) -> tuple[list[float], list, float, list[float]]:
    gc.collect()  # the maps of an earlier measurement released (else they count in this one's memory)
    with Store.open(config) as store:
        base = rss_mb()
        times, answers, cpu = timed_recall(store, queries)
        return times, answers, rss_mb() - base, cpu


def bench(n: int, words: list[str], queries: int, work: Path, hnsw: bool, keep: bool = False) -> None:
    rng = random.Random(n)
    home = work / f"home-{n}"
    marker = home / "bench-complete"
    if marker.exists():  # --keep: the store of an earlier run, without its derived indexes
        write_s = None
        for path in (home / "vectors").glob("*"):
            if ".cols" in path.name or ".usearch" in path.name:
                path.unlink()
    else:
        write_s = write_store(home, n, words, rng)
        marker.touch()
    rng = random.Random(n + 1)
    short = [" ".join(rng.choices(words[:3000], k=rng.randint(2, 8))) for _ in range(queries)]
    long = [" ".join(rng.choices(words, k=rng.randint(40, 80))) for _ in range(max(20, queries // 5))]
    exact_config = Config(home=home, recall_index_min_rows=0, recall_copy_min_rows=0)
    exact = {name: measured(exact_config, qs) for name, qs in (("short", short), ("long", long))}
    rows = []
    copy_config = exact_config.with_(recall_copy_min_rows=1)
    with Store.open(copy_config) as store:
        started = time.perf_counter()
        built = update_columns(store)
        builds = [f"the copy of {built['covered']:,} rows written in {time.perf_counter() - started:.1f} s"]
    both = (("short", short), ("long", long))
    if columns._native() is not None:  # the C column pass, then numpy's beside it (the same copy)
        rows.append(("8-bit copy, C pass", {name: measured(copy_config, qs) for name, qs in both}))
        with_c, columns._native = columns._native, lambda: None
        try:
            rows.append(("8-bit copy, numpy pass", {name: measured(copy_config, qs) for name, qs in both}))
        finally:
            columns._native = with_c
    else:
        rows.append(("8-bit copy, numpy pass", {name: measured(copy_config, qs) for name, qs in both}))
    if hnsw:
        hnsw_config = exact_config.with_(recall_index_min_rows=1)
        with Store.open(hnsw_config) as store:
            started = time.perf_counter()
            built = update(store, force=True)
            builds.append(f"the HNSW index of {built['indexed']:,} rows built in {time.perf_counter() - started:.0f} s")
        rows.append(("HNSW index (no copy)", {name: measured(hnsw_config, qs) for name, qs in (("short", short),
                                                                                            ("long", long))}))
    sizes = disk(home)
    written = "kept from an earlier run" if write_s is None else f"written in {write_s:.0f} s"
    print(f"{n:>9,} memories ({written}; {'; '.join(builds)})")
    for kind, qs in (("short", short), ("long", long)):
        base_t, base_answers, base_rss, base_cpu = exact[kind]
        base_p50 = np.percentile(base_t, 50)
        print(f"  {len(qs)} {kind} queries (CPU: the process's, every thread's)")
        print(f"   {'exact (every vector)':30} p50 {base_p50:7.2f} ms  p95 {np.percentile(base_t, 95):7.2f} ms"
              f"  CPU p50 {np.percentile(base_cpu, 50):7.2f} ms  memory +{base_rss:.0f} MB")
        for name, results in rows:
            values, answers, rss, cpu = results[kind]
            p50, p95 = np.percentile(values, 50), np.percentile(values, 95)
            score, same = recall_at_10(answers, base_answers)
            print(f"   {name:30} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  CPU p50 {np.percentile(cpu, 50):7.2f} ms"
                  f"  (x exact p50 {p50 / base_p50:.2f})  memory +{rss:.0f} MB"
                  f"  recall@10 {score:.4f} ({same} of {len(qs)} identical)")
    print(f"   disk: database {sizes['db'] / 1e6:.0f} MB, vectors {sizes['vectors'] / 1e6:.0f} MB, "
          f"copy {sizes['copy'] / 1e6:.0f} MB, HNSW index {sizes['index'] / 1e6:.0f} MB")
    if not keep:
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("OPENMEMORY_TEST_DATA", "/work/shared/data"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--keep", metavar="DIR", help="write the stores under DIR and keep them; reuse them next time")
    parser.add_argument("--hnsw", action="store_true", help="also build and time the HNSW index (30 min at 1M)")
    args = parser.parse_args()
    words = vocabulary(Path(args.data))
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="om-bench-recall-scale-"))
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    try:
        for n in args.sizes:
            bench(n, words, args.queries, work, args.hnsw, bool(args.keep))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
