"""Real node processes on loopback: propagation, restart after SIGKILL, clean shutdown."""

from __future__ import annotations

import signal
import sqlite3
import threading
import time

import pytest

from .harness import Node, wait_until

pytestmark = pytest.mark.slow

LESSON = "The user corrected the agent for using pip; this project uses uv."


def test_five_nodes_in_a_line_every_node_gets_a_lesson_validated(cluster):
    nodes = cluster.line(5)
    cluster.wait_line_meshed(nodes)
    published = nodes[0].publish(LESSON)
    rid = published["id"]
    assert published["status"] == "candidate" and published["via"] == "local"

    views = wait_until(lambda: [n.has(rid) for n in nodes] if all(n.has(rid) for n in nodes) else None,
                       timeout=20.0, what="the lesson on all five nodes")
    for i, view in enumerate(views[1:], start=1):
        # Each node got it from its neighbour up the line, by gossip, and stored it validated.
        assert view["via"] == "gossip"
        assert view["from_peer"] == nodes[i - 1].peer_id
        assert view["status"] == "candidate"
        assert view["record"]["text"] == LESSON
        assert view["record"]["signer"] == published["record"]["signer"]
        assert view["author"] == published["author"]
    for node in nodes:
        status = node.status()
        assert status["records"] == {"lesson": {"candidate": 1}}
        assert status["gossip"]["dropped"] == 0
        assert status["rejections"] == {}


def test_sigkill_and_restart_keeps_identity_and_records_and_reconnects(cluster):
    a, b, c = cluster.line(3)
    cluster.wait_line_meshed([a, b, c])
    first = a.publish(LESSON)["id"]
    wait_until(lambda: b.has(first) and c.has(first), 20, what="first lesson everywhere")
    b_id = b.peer_id

    # A burst from a, and b killed while it relays it: whatever c got from b, b had committed.
    burst: list[str] = []
    publisher = threading.Thread(target=lambda: burst.extend(
        a.publish(f'`make ci` failed: "The test suite failed {i} times on the CI runner.".', kind="error")["id"]
        for i in range(40)))
    publisher.start()

    def relayed_by_b() -> set[str]:
        return {r["id"] for r in c.get("/v1/records?limit=1000")["records"]
                if r["from_peer"] == b_id and r["id"] != first}

    wait_until(lambda: len(relayed_by_b()) >= 5, 30, 0.01, "c receiving the burst through b")
    b.kill(signal.SIGKILL)
    publisher.join(timeout=30)
    relayed = relayed_by_b()

    db = sqlite3.connect(b.home / "node.db")
    stored_at_b = {row[0] for row in db.execute("SELECT id FROM records")}
    db.close()
    assert first in stored_at_b
    assert len(relayed) >= 5
    assert relayed <= stored_at_b, "b forwarded a record it had not committed"

    # Published while b is down: a has no mesh peer, holds it, and gossips it once b is back.
    wait_until(lambda: not a.connected(), 20, what="a noticing that b is gone")
    while_down = a.publish('`make build` failed: "The build broke when the lock file was regenerated.".', kind="error")["id"]
    assert a.status()["gossip"]["outbox"] >= 1
    b.start()
    assert b.get("/v1/node")["peer_id"] == b_id  # same key, same peer id
    # b re-dials a (its bootstrap peer); c re-dials b (its own bootstrap peer, with backoff).
    wait_until(lambda: {a.peer_id, c.peer_id} <= b.connected(), 15, what="b reconnected to a and c")
    kept = {r["id"] for r in b.get("/v1/records?limit=1000")["records"]}
    assert stored_at_b <= kept, "records lost across SIGKILL"
    wait_until(lambda: b.has(while_down) and c.has(while_down), 30, what="record published while b was down")
    after = c.publish('`make deploy` failed: "The deploy script needs the staging credentials file.".', kind="error")["id"]
    wait_until(lambda: b.has(after) and a.has(after), 20, what="record published after the restart")
    for node in (a, b, c):
        assert node.status()["gossip"]["dropped"] == 0


STOP_WITHIN = 2.0  # README: "Ctrl-C (or SIGTERM) stops a node within two seconds"


def test_sigterm_and_sigint_stop_the_daemon_within_two_seconds(cluster):
    a, b = cluster.line(2)
    cluster.wait_line_meshed([a, b])
    assert a.stop() < STOP_WITHIN
    assert a.proc.returncode == 0
    assert not (a.home / "api.addr").exists()
    b.proc.send_signal(signal.SIGINT)
    started = time.monotonic()
    b.proc.wait(timeout=20)
    assert time.monotonic() - started < STOP_WITHIN
    assert b.proc.returncode == 0
    # The listener is closed: the port is free again (host.close() ran).
    import socket

    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        s.bind(("127.0.0.1", b.port))
