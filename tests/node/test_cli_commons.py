"""The commons commands of openmemory-node, run as a user runs them, on two node processes."""

from __future__ import annotations

import json

import pytest

from .harness import cli, wait_until

pytestmark = pytest.mark.slow

TEXT = "The user corrected the agent for using pip; this project uses uv."
CHILD = "The agent ran pip install twice; the project has a uv.lock file."


def js(home, *args):
    out = cli(home, *args, "--json")
    return json.loads(out.stdout)


def test_attest_trust_revoke_vouch_show_and_peers_from_the_command_line(cluster):
    a, b = cluster.line(2)
    cluster.wait_line_meshed([a, b])
    lesson = cli(a.home, "publish", "--text", TEXT, "--kind", "correction").stdout.split()[0]
    child = cli(a.home, "publish", "--text", CHILD, "--kind", "correction",
                "--derived-from", lesson).stdout.split()[0]
    wait_until(lambda: b.has(lesson) and b.has(child), 30, what="the lessons on b")

    # b attests; b trusts its own key (trust_self) so it counts there, not yet on a.
    out = js(b.home, "attest", lesson, "--confirmed", "--sessions", "4", "--matched", "3")
    assert out["status"] == "counted" and out["record"]["evidence"] == {
        "sessions": 4, "matched": 3, "window": 14 * 86400}
    wait_until(lambda: a.has(out["id"]), 30, what="the attestation on a")
    assert a.status_of(out["id"]) == "not-counted"
    added = js(a.home, "trust", "add", b.peer_id, "--note", "my laptop")
    assert added["added"] and added["changed"] >= 1
    assert a.status_of(out["id"]) == "counted"
    listed = js(a.home, "trust", "list")["trust"]
    assert [(r["source"], r["peer_id"]) for r in listed] == [("self", a.peer_id), ("store", b.peer_id)]
    assert "my laptop" in cli(a.home, "trust").stdout
    assert cli(a.home, "trust", "remove", a.public_key, check=False).returncode == 1  # own key: config
    assert cli(a.home, "trust", "add", "not-a-key", check=False).returncode == 2
    js(a.home, "trust", "remove", b.public_key)
    assert a.status_of(out["id"]) == "not-counted"
    assert js(a.home, "revokers", "add", b.peer_id)["revokers"][0]["peer_id"] == b.peer_id
    vouch = js(a.home, "vouch", b.peer_id)
    assert vouch["type"] == "vouch" and vouch["status"] == "effective"  # a's own key vouches

    # Exit codes: an unknown id is 4; attesting a record that is not a lesson is refused (5).
    assert cli(b.home, "attest", "1220" + "00" * 32, "--failed", check=False).returncode == 4
    assert cli(b.home, "attest", out["id"], "--failed", check=False).returncode == 5

    # A local revocation on b: revoked there with its child, nothing published; then lifted.
    local = js(b.home, "revoke", lesson, "--local", "--reason", "poisoned here")
    assert local["status"] == "revoked" and local["changed"] >= 2
    assert b.status_of(child) == "revoked" and a.status_of(lesson) == "candidate"
    assert b.status()["records"].get("revocation") is None
    assert js(b.home, "revoke", lesson, "--undo")["status"] == "candidate"
    assert cli(b.home, "revoke", lesson, "--undo", check=False).returncode == 4

    # b is not the author: its revocation is published but has no effect on b... while on a,
    # where b was made a revoker above, it revokes the lesson and its child.
    stranger = cli(b.home, "revoke", lesson, "--reason", "it was wrong", "--code", "incorrect")
    assert stranger.returncode == 0 and "no effect" in stranger.stderr
    assert b.status_of(lesson) == "candidate"
    wait_until(lambda: a.status_of(child) == "revoked", 30, what="b's revocation effective on a")

    # show draws the chain, text and JSON.
    shown = cli(a.home, "show", lesson).stdout
    assert "provenance chain" in shown and "derived into" in shown and CHILD[:40] in shown
    assert "revocation" in shown and "effective, by a revoker" in shown
    view = js(a.home, "show", child)
    assert view["commons"]["revoked_because"]["ancestor"] == lesson
    parent = view["chain"]["parents"][0]
    assert (parent["id"], parent["status"], parent["text"]) == (lesson, "revoked", TEXT)

    # sync now, peers block and unblock.
    sessions = js(a.home, "sync")["sessions"]
    assert [s["peer"] for s in sessions] == [b.peer_id] and sessions[0]["outcome"] == "done"
    assert "blocked" in cli(a.home, "peers", "block", b.peer_id).stdout
    wait_until(lambda: b.peer_id not in a.connected(), 20, what="b disconnected")
    assert cli(a.home, "peers", "unblock", b.peer_id).returncode == 0
    wait_until(lambda: b.peer_id in a.connected(), 30, what="b reconnected")
    assert "sync" in cli(a.home, "status").stdout

    # With the daemon stopped, show still explains from the store.
    a.stop()
    offline = cli(a.home, "show", child).stdout
    assert "revoked" in offline and "derived from" in offline
