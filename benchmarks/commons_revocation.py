#!/usr/bin/env python3
"""From ``revoke`` on another node to the file gone from this agent's memory folder, and what
the SessionStart hook costs a session's start.

    python benchmarks/commons_revocation.py [--rounds 10] [-n 20] [--lessons 20]

Two openmemory-node processes on loopback, ``a`` (the author) and ``b`` (this agent's), and
this agent's engine (its store, its Claude Code folder) rendering ``--lessons`` received
lessons into one project's memory folder.

1. **Session start.** Wall time of the SessionStart hook process, run as installed
   (``python -P -m openmemory_local.integrations.session_start --home DATA``), over ``-n``
   runs each: nothing changed (the fast path), and no node running (``api.addr`` absent);
   against the bare interpreter (``python -P -c pass``) in the same run.
2. **Revocation to the file gone.** Each round: a lesson published through ``a`` reaches
   ``b``, an engine run renders it (pull, render); then its author revokes it through ``a``. Measured: from the revoke
   call to ``b`` showing it revoked (gossip), the hook's run, and from the revoke call to the
   file gone from the memory folder (the hook started as soon as ``b`` had it: a session
   starting then). p50 and max over the rounds.

On a loaded machine the figures are indicative; the ratios to the bare interpreter, measured
in the same run, are what to compare.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nacl.signing  # noqa: E402

from openmemory_local.commons.receive import pull  # noqa: E402
from openmemory_local.core.config import Config  # noqa: E402
from openmemory_local.core.config import project_dir  # noqa: E402
from openmemory_local.commons.node_link import open_link  # noqa: E402
from openmemory_local.render.memory_folder import render  # noqa: E402
from openmemory_local.core.config import memory_dir_for
from openmemory_local.storage.store import Store  # noqa: E402
from openmemory_node import wire  # noqa: E402
from tests.local.test_sleep import add, session  # noqa: E402
from tests.node.harness import Cluster, wait_until  # noqa: E402

APP = "/home/me/web"
HOOK = [sys.executable, "-P", "-m", "openmemory_local.integrations.session_start"]
PAYLOAD = json.dumps({"session_id": "s", "cwd": APP, "hook_event_name": "SessionStart", "source": "startup"})


def timed(argv: list[str], env: dict, n: int, stdin: str = PAYLOAD) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        subprocess.run(argv, input=stdin, text=True, env=env, stdout=subprocess.DEVNULL, check=True, timeout=60)
        out.append(time.perf_counter() - started)
    return out


def row(name: str, seconds: list[float], base: float | None = None) -> str:
    seconds = sorted(seconds)
    p50 = statistics.median(seconds)
    ratio = f"{p50 / base:10.2f}" if base else f"{'':>10}"
    return f"{name:58} {p50 * 1000:9.1f} {seconds[-1] * 1000:9.1f} {ratio}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("--lessons", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        cluster = Cluster(tmp_path / "nodes")
        try:
            a = cluster.node("a")
            a.init()
            b = cluster.node("b")
            b.init([a.multiaddr])
            a.start()
            b.start()
            cluster.wait_line_meshed([a, b])
            other = nacl.signing.SigningKey.generate()

            def publish(text: str) -> str:
                record = wire.new_lesson(other, text=text, kind="error", strength=1000, provenance=bytes(32),
                                         created=int(time.time()))
                rid = a.post("/v1/records", {"cbor": wire.encode(record).hex()})["id"]
                wait_until(lambda: b.has(rid), 30, 0.01, "the lesson on b")
                return rid

            claude, data = tmp_path / "claude", tmp_path / "om"
            (claude / "projects" / project_dir(APP)).mkdir(parents=True)
            data.mkdir()
            (data / "config.toml").write_text(f'[node]\nhome = "{b.home}"\n')
            config = Config(home=data, claude_dir=claude, node_home=b.home, commons_max_lessons=args.lessons + 1)
            env = dict(os.environ, CLAUDE_CONFIG_DIR=str(claude), HOME=str(tmp_path / "user"))
            env.pop("OPENMEMORY_HOME", None)
            memory = memory_dir_for(claude, APP)
            now = datetime.now(timezone.utc)
            with Store.open(config) as store:
                add(store, session("s1", 0, ["npm test", "npm install"], cwd=APP))
                for i in range(args.lessons):
                    publish(f'`npm test` failed in 2 sessions: "Error: suite {i} timed out after a long wait"')
                pull(store, open_link(config), now)
                render(store, now)
            assert len(list(memory.glob("openmemory-commons-*.md"))) == args.lessons

            base = timed([sys.executable, "-P", "-c", "pass"], env, args.n)
            fast = timed([*HOOK, "--home", str(data)], env, args.n)
            away = tmp_path / "om-away"
            away.mkdir()
            (away / "config.toml").write_text(f'[node]\nhome = "{tmp_path / "no-node"}"\n')
            with Store.open(Config(home=away, claude_dir=claude)):
                pass
            no_node = timed([*HOOK, "--home", str(away)], env, args.n)

            gossip, hook, total = [], [], []
            for i in range(args.rounds):
                rid = publish(f'`npm install` failed in 2 sessions: "npm ERR! round {i} could not resolve"')
                with Store.open(config) as store:
                    pull(store, open_link(config), now)
                    render(store, now)
                path = memory / f"openmemory-commons-{rid[:16]}.md"
                assert path.exists()
                started = time.perf_counter()
                revocation = wire.new_revocation(other, target=rid, reason_code="incorrect", created=int(time.time()))
                a.post("/v1/records", {"cbor": wire.encode(revocation).hex()})  # by its author, through a
                wait_until(lambda: b.status_of(rid) == "revoked", 30, 0.005, "revoked on b")
                arrived = time.perf_counter()
                subprocess.run([*HOOK, "--home", str(data)], input=PAYLOAD, text=True, env=env,
                               stdout=subprocess.DEVNULL, check=True, timeout=60)
                done = time.perf_counter()
                assert not path.exists(), "the hook left the revoked lesson's file"
                gossip.append(arrived - started)
                hook.append(done - arrived)
                total.append(done - started)
        finally:
            cluster.close()
    b50 = statistics.median(base)
    print(f"SessionStart hook with {args.lessons} received lessons rendered; {args.n} runs each, "
          f"{args.rounds} revocation rounds")
    print(f"{'what':58} {'p50 ms':>9} {'max ms':>9} {'x bare':>10}")
    print(row("python -P -c pass (baseline)", base, b50))
    print(row("hook, nothing changed (fast path)", fast, b50))
    print(row("hook, no node running", no_node, b50))
    print(row("revoke on a -> revoked on b (gossip)", gossip))
    print(row("hook run that removes the file (pull, render)", hook, b50))
    print(row("revoke on a -> the file gone from b's memory folder", total))


if __name__ == "__main__":
    main()
