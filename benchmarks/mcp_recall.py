"""What the MCP server adds to a recall, and how long it takes to start.

On a store ingested from the shared real transcripts (or ``--home`` for an existing one),
measures in the same run:

- baseline: ``recall()`` in process, on an open store (what the server does per call);
- ``recall`` through a real MCP session (the SDK's stdio client, ``openmemory mcp``): the
  round trip an agent's tool call pays;
- server start: spawn ``openmemory mcp``, initialise the session, list the tools.

    python benchmarks/mcp_recall.py [--home DIR] [-n 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from openmemory_local.core.config import load_config
from openmemory_local.recall.query import recall
from openmemory_local.storage.store import Store

OPENMEMORY = Path(sys.executable).parent / "openmemory"
QUERIES = [
    "git push fails because the branch has no upstream",
    "pre-commit formatting check failed",
    "file is ignored by one of your .gitignore files",
    "mix test failed",
    "the user rejected the tool use",
]


def _stats(times: list[float]) -> tuple[float, float]:
    times = sorted(times)
    return statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.95))]


async def _through_mcp(home: Path, n: int) -> tuple[list[float], list[float]]:
    starts, calls = [], []
    for _ in range(3):
        t0 = time.perf_counter()
        async with Client(StdioServerParameters(command=str(OPENMEMORY), args=["mcp", "--home", str(home)])) as client:
            await client.list_tools()
            starts.append((time.perf_counter() - t0) * 1000)
    async with Client(StdioServerParameters(command=str(OPENMEMORY), args=["mcp", "--home", str(home)])) as client:
        await client.call_tool("recall", {"query": QUERIES[0]})  # warm: store opened, index loaded
        for i in range(n):
            t0 = time.perf_counter()
            result = await client.call_tool("recall", {"query": QUERIES[i % len(QUERIES)], "k": 5})
            calls.append((time.perf_counter() - t0) * 1000)
            assert not result.is_error
    return starts, calls


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", type=Path, help="an existing data folder (default: ingest the shared transcripts)")
    parser.add_argument("-n", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = args.home
        if home is None:
            data = Path(os.environ.get("OPENMEMORY_TEST_DATA", Path(__file__).resolve().parents[1] / "../shared/data"))
            home = Path(tmp) / "data"
            subprocess.run([str(OPENMEMORY), "ingest", str(data / "claude-code"), "--home", str(home), "-q"],
                           check=True)
        store = Store.open(load_config(home), create=False)
        episodes = store.stats()["episodes"]["active"]
        recall(store, QUERIES[0], 5)
        direct = []
        for i in range(args.n):
            t0 = time.perf_counter()
            recall(store, QUERIES[i % len(QUERIES)], 5)
            direct.append((time.perf_counter() - t0) * 1000)
        store.close()
        starts, calls = trio.run(_through_mcp, home, args.n)
    base, _ = _stats(direct)
    print(f"store: {episodes} active memories; {args.n} recalls of k=5 each way")
    print(f"{'what':42} {'p50 ms':>8} {'p95 ms':>8} {'x baseline':>10}")
    for name, times in (("recall() in process (baseline)", direct), ("recall through MCP (stdio round trip)", calls),
                        ("server start: spawn, initialise, list", starts)):
        p50, p95 = _stats(times)
        print(f"{name:42} {p50:8.1f} {p95:8.1f} {p50 / base:10.1f}")


if __name__ == "__main__":
    main()
