"""The owner's hand on received lessons, against a real node: a local revocation on the node
takes a lesson out at the next session start and lifting it brings it back at the next run; a
revocation by the author takes what derives from the lesson out with it."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import nacl.signing
import pytest

from openmemory_node import wire
from tests.node.harness import Cluster, wait_until

from .engines import Engine, past

pytestmark = pytest.mark.slow

PARENT = '`npm install` failed in 2 sessions: "npm ERR! ERESOLVE unable to resolve dependency tree"'
CHILD = '`npm ci` failed in 3 sessions: "npm ERR! ERESOLVE unable to resolve dependency tree"'
OTHER = '`npm test` failed in 2 sessions: "Error: Cannot find module \'jest-environment-jsdom\'"'


def post(node, record) -> str:
    return node.post("/v1/records", {"cbor": wire.encode(record).hex()})["id"]


def test_local_revocation_lift_and_revocation_along_the_chain(cluster: Cluster, tmp_path):
    node = cluster.node("n")
    node.init()
    node.start()
    other = nacl.signing.SigningKey.generate()  # another agent, whose lessons this node received
    node.post("/v1/team", {"key": other.verify_key.encode().hex(), "note": "a teammate"})  # shown unverified
    now = int(time.time())

    def lesson(text: str, derived=()) -> str:
        return post(node, wire.new_lesson(other, text=text, kind="error", strength=1000, provenance=bytes(32),
                                          derived_from=derived, created=now))

    parent = lesson(PARENT)
    child = lesson(CHILD, [parent])
    unrelated = lesson(OTHER)
    engine = Engine(tmp_path, "e", node, "/home/e/src/web")
    t0 = past(days=2)
    engine.session(t0, [("npm install", "added 3 packages", 0), ("npm ci", "ok", 0), ("npm test", "ok", 0)])
    engine.install()
    engine.run(t0 + timedelta(hours=1))
    names = {f"openmemory-commons-{rid[:16]}.md": rid for rid in (parent, child, unrelated)}
    assert set(engine.commons_files()) == set(names)

    # the owner revokes one locally on the node: the next session start takes it out
    node.post("/v1/revoke", {"id": unrelated, "local": True, "reason": "not for this machine"})
    engine.session_start()
    assert f"openmemory-commons-{unrelated[:16]}.md" not in engine.commons_files()
    assert unrelated[:16] not in engine.index()
    # lifted: back at the next run
    node.client().request("DELETE", f"/v1/revoke/{unrelated}")
    report = engine.run(t0 + timedelta(hours=2))["report"]["report"]["markdown"]
    assert f"openmemory-commons-{unrelated[:16]}.md" in engine.commons_files()
    assert f"{unrelated[:16]} revoked (was candidate)" in report and f"{unrelated[:16]}: revoked to candidate" in report

    # the author revokes the parent: the child, derived from it, goes too
    post(node, wire.new_revocation(other, target=parent, reason_code="incorrect", created=now))
    wait_until(lambda: node.status_of(child) == "revoked", 30, what="the child revoked with its parent")
    engine.session_start()
    assert set(engine.commons_files()) == {f"openmemory-commons-{unrelated[:16]}.md"}
    code, out = engine.cli("commons", "--all", "--json")
    statuses = {r["record_id"]: (r["status"], r["rendered"]) for r in json.loads(out)["lessons"]}
    assert statuses[parent] == ("revoked", []) and statuses[child] == ("revoked", [])
    report = engine.run(t0 + timedelta(hours=3))["report"]["report"]["markdown"]
    assert report.count(" revoked (was candidate)") == 2  # the parent and the child
