#!/usr/bin/env python3
"""A flood of records from fresh keys against a line of node processes, on loopback.

    python benchmarks/flood.py [--records 2000] [--seconds 20] [--json]

Three nodes in a line, x - y - z, and a rogue libp2p host (tests/node/rogue.py) connected to
x. Every record of a flood is a valid lesson signed by a key made for it (2,000 keys for 2,000
records), published at ``records / seconds`` per second. Meanwhile z publishes an honest lesson
every 0.5 s, and y runs a sync session with x every 4 s. Four phases:

* ``baseline``: no flood (the same honest lessons and sync sessions): the reference;
* ``as itself``: the rogue publishes the flood under its own peer id: past its fresh-key
  budget every record costs it a penalty, and it is graylisted and cut off;
* ``relayed``: the rogue sends the flood as if relaying, each message under another libp2p
  key: x ignores what is past the rogue's budget, without penalty (an honest relay must not be
  punished for others' records), for the whole flood;
* ``bounded store``: x admits every fresh key (a budget of 100,000) but keeps at most 500
  records from keys without standing: the store's bound, not the budget, is what holds (z,
  the honest author, is trusted there: a key without standing would see its own records
  dropped with the flood's, oldest first);
* ``by sync``: a fourth node w, the attacker's own, holds records of ``--records`` fresh keys,
  put there through its local API (no admission: it is its operator's store), connects to x
  and is synced with every 2 s: sync passes the same fresh-key budget as gossip (one admission
  for every way in), so x stores at most the budget's bound of them and w, which served the
  excess, is charged for it as their origin.

For each phase: what x received, stored, refused (by code) and dropped before validation,
and whether that adds up (``unaccounted`` 0); what y and z stored of the flood; the penalty
and graylisting of the rogue; the honest lessons' delivery (the time from their arrival at z
to their arrival at the last of x and y: median, p90, max); the sync sessions (done of run,
longest). PROTOCOL.md ("Admission of new authors") documents the bounds: at most
``fresh_key_burst + fresh_key_rate * t`` records of never-seen keys from one peer in t seconds,
and at most ``max_without_standing`` records from keys without standing in the store.
Every phase reports ``honest_evicted``: the honest lessons (z's) missing from x or y at the end
(delivered, then dropped), which must be 0.

The machine is shared and busy: figures are indicative; compare the phases of one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import nacl.signing
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from openmemory_node import wire  # noqa: E402
from tests.node.harness import Cluster, Node  # noqa: E402
from tests.node.rogue import rogue_peer  # noqa: E402

QUIET = '[log]\nlevel = "warning"'
BOUNDED = QUIET + "\n[limits]\nfresh_key_burst = 100000.0\nmax_without_standing = 500"


def flood_records(count: int) -> list[bytes]:
    now = int(time.time())
    return [wire.encode(wire.new_lesson(
        nacl.signing.SigningKey.generate(), text=f"The flaky integration test failed on run {i}.",
        kind="error", strength=1000, provenance=bytes(32), created=now)) for i in range(count)]


class Honest:
    """z publishes a lesson every 1.5 s; y syncs with x every 4 s (threads: blocking API calls)."""

    def __init__(self, x: Node, y: Node, z: Node, tag: str):
        self.x, self.y, self.z, self.tag = x, y, z, tag
        self.ids: list[str] = []
        self.syncs: list[dict] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._publish), threading.Thread(target=self._sync)]

    def _publish(self) -> None:
        while not self.stop.is_set():
            self.ids.append(self.z.publish(f'`make release` failed: "the signing key {self.tag} {len(self.ids)} '
                                           'was missing".', kind="error")["id"])  # (a claim's sentence)
            self.stop.wait(1.5)

    def _sync(self) -> None:
        while not self.stop.wait(4.0):
            try:
                self.syncs.extend(self.y.post("/v1/sync", {"peer": self.x.peer_id})["sessions"])
            except Exception as exc:  # counted as a failed session
                self.syncs.append({"outcome": f"error: {exc}", "seconds": None})

    def __enter__(self) -> "Honest":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join()

    def delivery(self) -> dict:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(n.has(r) for n in (self.x, self.y) for r in self.ids):
            time.sleep(0.2)
        arrived = [n.records() for n in (self.x, self.y, self.z)]
        delays = sorted(max(arrived[0][r]["arrived"], arrived[1][r]["arrived"]) - arrived[2][r]["arrived"]
                        for r in self.ids if r in arrived[0] and r in arrived[1])
        by_gossip = sum(1 for r in self.ids if arrived[0].get(r, {}).get("via") == "gossip")
        return {"lessons": len(self.ids), "delivered": len(delays), "to_x_by_gossip": by_gossip,
                "median_s": round(statistics.median(delays), 3) if delays else None,
                "p90_s": round(delays[int(0.9 * (len(delays) - 1))], 3) if delays else None,
                "max_s": round(delays[-1], 3) if delays else None}

    def sync_summary(self) -> dict:
        done = [s for s in self.syncs if s.get("outcome") == "done"]
        seconds = [s["seconds"] for s in self.syncs if s.get("seconds") is not None]
        return {"sessions": len(self.syncs), "done": len(done), "longest_s": max(seconds) if seconds else None}


def _sync_from(x: Node, w: Node, seconds: float) -> int:
    """x syncs with w every 2 s for ``seconds``: how many sessions ran."""
    x.post("/v1/peers", {"addr": w.multiaddr})
    deadline, sessions = time.monotonic() + seconds, 0
    while time.monotonic() < deadline:
        try:
            sessions += len(x.post("/v1/sync", {"peer": w.peer_id}).get("sessions") or [])
        except Exception:  # not connected yet, or a session refused: the next try
            pass
        time.sleep(2.0)
    return sessions


async def phase(name: str, nodes: list[Node], records: list[bytes], seconds: float, mode: str | None,
                flooder: Node | None = None) -> dict:
    x, y, z = nodes
    before = x.status()["gossip"]["inbound"]
    ids = {wire.record_id(d).hex() for d in records}
    if mode == "sync":  # the attacker's own node holds the flood, put there through its local API
        for data in records:
            flooder.post("/v1/records", {"cbor": data.hex()})
    honest = Honest(x, y, z, name)
    rogue_id = None
    started = time.monotonic()
    with honest:
        if mode is None:
            await trio.sleep(seconds)
        elif mode == "sync":
            await trio.to_thread.run_sync(_sync_from, x, flooder, seconds)
            rogue_id = flooder.peer_id
            elapsed = time.monotonic() - started
            await trio.sleep(1.0)
        else:
            async with rogue_peer(x.multiaddr) as rogue:
                rogue_id = rogue.peer_id
                for i, data in enumerate(records):
                    if mode == "self":
                        await rogue.pubsub.publish("/openmemory/1/lesson", data)
                    else:
                        await rogue.relay_as_stranger(data)
                    await trio.sleep(max(0.0, started + (i + 1) * seconds / len(records) - time.monotonic()))
                elapsed = time.monotonic() - started
                await trio.sleep(1.0)
    elapsed = time.monotonic() - started if mode is None else elapsed

    def settled() -> dict:
        deadline = time.monotonic() + 30
        while True:
            inbound = x.status()["gossip"]["inbound"]
            if inbound["unaccounted"] == 0 or time.monotonic() > deadline:
                return inbound
            time.sleep(0.2)

    inbound = await trio.to_thread.run_sync(settled)
    delivery = await trio.to_thread.run_sync(honest.delivery)
    status = x.status()
    stored = [len(ids & set(n.records())) for n in nodes]
    diff = {k: inbound["outcomes"].get(k, 0) - before["outcomes"].get(k, 0)
            for k in set(inbound["outcomes"]) | set(before["outcomes"])}
    dropped = {k: inbound["dropped"].get(k, 0) - before["dropped"].get(k, 0)
               for k in set(inbound["dropped"]) | set(before["dropped"])}
    peer = next((p for p in x.get("/v1/peers")["peers"] if p["peer_id"] == rogue_id), None) if rogue_id else None
    limits = status["admission"]
    final = [n.records() for n in (x, y)]
    return {
        "phase": name, "sent": len(records) if mode else 0, "seconds": round(elapsed, 1),
        "honest_evicted": sum(1 for r in honest.ids if r not in final[0] or r not in final[1]),
        "x_received": inbound["received"] - before["received"],
        "outcomes": {k: v for k, v in sorted(diff.items()) if v},
        "dropped": {k: v for k, v in sorted(dropped.items()) if v},
        "unaccounted": inbound["unaccounted"],
        "stored_x_y_z": stored,
        "budget_bound": round(limits["fresh_key_budget"]["burst"] + limits["fresh_key_budget"]["rate"] * elapsed),
        "without_standing": limits["without_standing"], "evicted": limits["evicted"],
        "rogue": {"penalty": peer["penalty"], "graylisted": peer["graylisted"], "connected": peer["connected"]}
        if peer else None,
        "honest_delivery": delivery, "sync": honest.sync_summary(),
    }


async def run(args: argparse.Namespace) -> list[dict]:
    results = []
    count, seconds = args.records, args.seconds
    with tempfile.TemporaryDirectory(prefix="om-flood-") as tmp:
        cluster = Cluster(Path(tmp) / "line")
        try:
            nodes = await trio.to_thread.run_sync(lambda: cluster.line(3, extra_config=QUIET))
            await trio.to_thread.run_sync(cluster.wait_line_meshed, nodes, 60)
            for name, mode in (("baseline", None), ("as itself", "self"), ("relayed", "relay")):
                records = [] if mode is None else flood_records(count)
                result = await phase(name, nodes, records, seconds, mode)
                print(f"  {json.dumps(result)}", file=sys.stderr)
                results.append(result)
        finally:
            cluster.close()
        cluster = Cluster(Path(tmp) / "bounded")
        try:
            nodes = await trio.to_thread.run_sync(lambda: cluster.line(3, extra_config=BOUNDED))
            await trio.to_thread.run_sync(cluster.wait_line_meshed, nodes, 60)
            for node in nodes[:2]:  # z, the honest author, has standing on x and y: never dropped
                node.post("/v1/trust", {"key": nodes[2].public_key, "note": "the honest author"})
            result = await phase("bounded store", nodes, flood_records(count), seconds, "relay")
            print(f"  {json.dumps(result)}", file=sys.stderr)
            results.append(result)
        finally:
            cluster.close()
        cluster = Cluster(Path(tmp) / "sync")
        try:
            nodes = await trio.to_thread.run_sync(lambda: cluster.line(3, extra_config=QUIET))
            await trio.to_thread.run_sync(cluster.wait_line_meshed, nodes, 60)
            flooder = cluster.node("w")
            await trio.to_thread.run_sync(lambda: flooder.init().start())
            result = await phase("by sync", nodes, flood_records(count), seconds, "sync", flooder)
            print(f"  {json.dumps(result)}", file=sys.stderr)
            results.append(result)
        finally:
            cluster.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = trio.run(run, args)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'phase':<14} {'sent':>5} {'x got':>6} {'stored x/y/z':>14} {'bound':>6} {'unacc.':>6} "
          f"{'honest median/p90/max s':>24} {'sync done':>10} {'rogue':>22}  refused and dropped at x")
    base = results[0]["honest_delivery"]["median_s"] or 0
    for r in results:
        d, s = r["honest_delivery"], r["sync"]
        bound = r["budget_bound"] if r["phase"] != "bounded store" else r["without_standing"]["bound"]
        print(f"{r['phase']}: honest_evicted {r['honest_evicted']}", file=sys.stderr)
        rogue = (f"penalty {r['rogue']['penalty']:.0f}{', graylisted' if r['rogue']['graylisted'] else ''}"
                 if r["rogue"] else "-")
        refused = {k: v for k, v in r["outcomes"].items() if k not in ("accept", "duplicate")}
        print(f"{r['phase']:<14} {r['sent']:>5} {r['x_received']:>6} {'/'.join(map(str, r['stored_x_y_z'])):>14} "
              f"{bound:>6} {r['unaccounted']:>6} {str(d['median_s']):>10}/{d['p90_s']}/{str(d['max_s']):<8} "
              f"{s['done']:>4}/{s['sessions']:<5} {rogue:>22}  {refused} {r['dropped']}")
    for r in results[1:]:
        median = r["honest_delivery"]["median_s"]
        if base and median:
            print(f"{r['phase']}: honest delivery median {median:.3f} s, {median / base:.2f}x the baseline "
                  f"({base:.3f} s)")


if __name__ == "__main__":
    main()
