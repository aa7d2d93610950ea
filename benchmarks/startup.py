"""Whole processes, timed where people wait: the CLI and the MCP server on a 100k store.

Every figure is a median of interleaved runs, beside a baseline measured in the same run:

- ``python -c pass`` (the interpreter alone) for ``openmemory --version``, ``report`` and
  ``lessons`` (target: ``--version`` within 2x);
- the floor for ``openmemory recall``: ``python -c 'import sqlite3, numpy'`` mapping the
  same 100k matrix and multiplying it by a vector (target: recall within 1.5x);
- the MCP server: spawn to the answer of ``tools/list`` (target: under 300 ms), then its
  first ``recall`` right away (the store and index still loading) and once warm (the server
  loads them in the background after ``tools/list``: what the agent's first call meets when
  it comes a moment after the session starts; target: under 100 ms).

Also printed: which heavy modules (numpy, sqlite_utils, mcp) each quick command imported.

    python benchmarks/startup.py [--size 100000] [-n 15]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from openmemory_local.core.config import Config  # noqa: E402
from openmemory_local.storage.store import Store  # noqa: E402
from recall import NOW, fill, vocabulary  # noqa: E402

OPENMEMORY = str(Path(sys.executable).parent / "openmemory")
QUERY = "git push fails because the branch has no upstream"


def timed(argv: list[str], n: int, env: dict) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
        out.append((time.perf_counter() - t) * 1000)
    return out


def heavy_imports(argv: list[str], env: dict) -> list[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-c",
                           "import sys; from openmemory_local.cli.main import main; sys.exit(main(sys.argv[1:]))", *argv],
                          capture_output=True, text=True, env=env)
    names = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    return [m for m in ("numpy", "sqlite_utils", "mcp", "usearch") if m in names]


class Server:
    """``openmemory mcp`` spoken to over its pipes (newline-delimited JSON-RPC)."""

    def __init__(self, home: Path, env: dict):
        self.started = time.perf_counter()
        self.proc = subprocess.Popen([OPENMEMORY, "mcp", "--home", str(home)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, text=True, bufsize=1)
        self.ids = 0

    def ask(self, method: str, params: dict | None = None) -> dict:
        self.ids += 1
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method,
                                          "params": params or {}}) + "\n")
        self.proc.stdin.flush()
        while True:
            answer = json.loads(self.proc.stdout.readline())
            if answer.get("id") == self.ids:
                return answer

    def tell(self, method: str) -> None:
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", "method": method}) + "\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def mcp_runs(home: Path, n: int, env: dict) -> dict:
    listed, first, warm = [], [], []
    for i in range(n):
        server = Server(home, env)
        server.ask("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                  "clientInfo": {"name": "bench", "version": "1"}})
        server.tell("notifications/initialized")
        assert server.ask("tools/list")["result"]["tools"]
        listed.append((time.perf_counter() - server.started) * 1000)
        if i % 2 == 0:  # at once: the recall waits for what the background load has not finished
            t = time.perf_counter()
            answer = server.ask("tools/call", {"name": "recall", "arguments": {"query": QUERY}})
            first.append((time.perf_counter() - t) * 1000)
        else:  # a moment later, as an agent's first call comes: the store and index are loaded
            time.sleep(3.0)
            t = time.perf_counter()
            answer = server.ask("tools/call", {"name": "recall", "arguments": {"query": QUERY}})
            warm.append((time.perf_counter() - t) * 1000)
        assert not answer["result"]["isError"], answer
        server.close()
    return {"listed": listed, "first": first, "warm": warm}


def p50(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("OPENMEMORY_TEST_DATA", "/work/shared/data"))
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("-n", type=int, default=15)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="om-bench-startup-"))
    try:
        home = work / "home"
        store = Store.open(Config(home=home))
        fill_s = fill(store, args.size, vocabulary(Path(args.data)), random.Random(1))
        matrix = store.config.vectors_dir / store.get_meta("vectors_file")
        rows = store.counter("vec_rows")
        store.close()
        # PYTHONDONTWRITEBYTECODE would leave every command compiling its modules from source at
        # each run (pip compiled numpy's at install; an editable install's own are compiled on first
        # use): the warm-up below writes the bytecode a user's second run finds.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(OPENMEMORY_NOW=NOW.isoformat(), OPENMEMORY_HOME=str(home))
        floor = ("import sqlite3, numpy as np; "
                 f"m = np.memmap({str(matrix)!r}, dtype='<f4', mode='r', shape=({rows}, 256)); "
                 "q = np.ones(256, dtype=np.float32) / 16; r = m @ q")
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "floor: python + numpy + 100k M @ q": [sys.executable, "-c", floor],
            "openmemory --version": [OPENMEMORY, "--version"],
            "openmemory report": [OPENMEMORY, "report"],
            "openmemory lessons": [OPENMEMORY, "lessons"],
            "openmemory recall (touching)": [OPENMEMORY, "recall", QUERY],
            "openmemory recall --no-touch": [OPENMEMORY, "recall", QUERY, "--no-touch"],
        }
        for argv in commands.values():  # warm the page cache and the bytecode
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.n):  # interleaved: a busy machine slows every command alike
            for name, argv in commands.items():
                times[name] += timed(argv, 1, env)
        mcp = mcp_runs(home, max(4, args.n // 2 * 2), env)
        imports = {name: heavy_imports(argv[1:], env) for name, argv in commands.items()
                   if argv[0] == OPENMEMORY and "recall" not in name}
        load = os.getloadavg()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    bare, floor_ms = p50(times["python -c pass"]), p50(times["floor: python + numpy + 100k M @ q"])
    print(f"store: {args.size:,} memories (filled in {fill_s:.0f} s); {args.n} interleaved runs each; "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} on {os.cpu_count()} cores")
    print(f"{'what':40} {'p50 ms':>8} {'p95 ms':>8} {'x pass':>7} {'x floor':>8}  target")
    targets = {"openmemory --version": ("pass", 2.0), "openmemory recall (touching)": ("floor", 1.5),
               "openmemory recall --no-touch": ("floor", 1.5)}
    for name, values in times.items():
        values.sort()
        value = p50(values)
        p95 = values[min(len(values) - 1, int(len(values) * 0.95))]
        target = targets.get(name)
        verdict = ""
        if target:
            ratio = value / (bare if target[0] == "pass" else floor_ms)
            verdict = f"<= {target[1]}x {target[0]}: {'yes' if ratio <= target[1] else 'NO'}"
        print(f"{name:40} {value:8.1f} {p95:8.1f} {value / bare:7.2f} {value / floor_ms:8.2f}  {verdict}")
    listed = p50(mcp["listed"])
    print(f"{'mcp: spawn to tools/list':40} {listed:8.1f} {max(mcp['listed']):8.1f} {listed / bare:7.2f} "
          f"{listed / floor_ms:8.2f}  < 300 ms: {'yes' if listed < 300 else 'NO'}")
    for key, label in (("first", "mcp: first recall, right after the list"),
                       ("warm", "mcp: first recall, 3 s after the list")):
        value = p50(mcp[key])
        print(f"{label:40} {value:8.1f} {max(mcp[key]):8.1f} {value / bare:7.2f} {value / floor_ms:8.2f}  "
              f"< 100 ms: {'yes' if value < 100 else 'NO'}")
    for name, found in imports.items():
        print(f"heavy imports of {name:22}: {', '.join(found) or 'none'}")


if __name__ == "__main__":
    main()
