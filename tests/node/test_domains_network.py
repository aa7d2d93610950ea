"""Domains between real node processes on loopback (issue 33): a node that follows only
``python`` takes no ``npm`` lesson, by gossip or by sync; it takes a ``python`` one; a
revocation of a lesson it holds reaches it; after the engine reports ``node`` too
(``PUT /v1/domains``), sync brings the ``npm`` lesson. A peer that puts a lesson on another
domain's topic is refused (``wrong-topic``). The claims are synthetic (written for the test).
"""

from __future__ import annotations

import time

import pytest

from openmemory_node import wire
from openmemory_node.client import ApiError
from openmemory_protocol.claims import Claim

from .harness import wait_until
from .rogue import rogue_peer
from .test_attacks import refused, wait_for

pytestmark = pytest.mark.slow

PYTHON = {"situation": "pytest", "failure": "ModuleNotFoundError: No module named 'requests'"}
PYTHON_2 = {"situation": "uv sync", "failure": "error: No project table found in pyproject.toml"}
NPM = {"situation": "npm test", "failure": "npm ERR! missing script: test"}



def claim_lesson(node, parts: dict) -> str:
    return node.post("/v1/lessons", {"claim": parts, "kind": "error", "strength": 1.0})["id"]


def sync_with(node, peer: str) -> dict:
    (session,) = node.post("/v1/sync", {"peer": peer})["sessions"]
    return session


def test_a_node_following_python_takes_python_lessons_not_npm_ones_and_every_revocation(cluster):
    # (sync only when the test asks for it, so that what gossip brings is seen as gossip's)
    quiet = "[sync]\nconnect_delay = 3600.0\ninterval = 3600.0\n"
    a = cluster.node("a", extra_config=quiet)  # follows every domain (told nothing)
    a.init()
    b = cluster.node("b", extra_config=quiet + '[domains]\nfollow = ["python"]')
    b.init([a.multiaddr])
    a.start(wait=False), b.start(wait=False)
    a.wait_ready(), b.wait_ready()
    assert b.get("/v1/domains")["following"] == ["general", "python"]
    assert a.get("/v1/domains")["following"] == "every domain"
    wait_until(lambda: b.mesh("/openmemory/1/lesson/python") >= 1 and a.mesh("/openmemory/1/lesson/python") >= 1,
               30.0, what="a and b meshed on python")

    npm = claim_lesson(a, NPM)
    python = claim_lesson(a, PYTHON)
    # gossip: the python lesson reaches b; b's topics are python's and general's only
    wait_until(lambda: b.has(python), 30.0, what="the python lesson on b")
    assert b.has(python)["via"] == "gossip"
    topics = b.get("/v1/domains")["topics"]
    assert "/openmemory/1/lesson/python" in topics and "/openmemory/1/lesson/node" not in topics
    assert "/openmemory/1/revocation" in topics and "/openmemory/1/lesson" in topics
    # sync: b reconciles lessons per followed domain, and is never offered the npm lesson
    session = sync_with(b, a.peer_id)
    assert session["outcome"] == "done", session
    assert "lesson/python" in session["rounds"] and "lesson" not in session["rounds"]
    assert b.has(npm) is None
    assert a.has(npm) is not None

    # a revocation of the python lesson reaches b (the revocation topic is everyone's)
    revocation = a.post("/v1/revoke", {"id": python, "reason": "wrong", "reason_code": "incorrect"})["id"]
    wait_until(lambda: b.has(revocation), 30.0, what="the revocation on b")
    wait_until(lambda: b.status_of(python) == "revoked", 30.0, what="the python lesson revoked on b")
    assert b.has(npm) is None
    assert "unfollowed-domain" not in refused(b) and "wrong-topic" not in refused(b)

    # the engine reports node too: b joins node's topics, and a sync soon brings the npm lesson
    answer = b.client().request("PUT", "/v1/domains", {"domains": ["node", "python"]})
    assert answer["changed"] and "/openmemory/1/lesson/node" in answer["joined"]
    assert answer["following"] == ["general", "node", "python"]
    session = sync_with(b, a.peer_id)
    assert session["outcome"] == "done" and "lesson/node" in session["rounds"], session
    assert b.has(npm)["via"] in ("sync", "gossip")  # (gossip too: a's message cache, announced to b's new topic)
    # and kept across a restart (domains.json)
    b.stop()
    b.start()
    assert b.get("/v1/domains")["following"] == ["general", "node", "python"]


def test_put_domains_refuses_an_unknown_domain(cluster):
    (a,) = cluster.line(1)
    with pytest.raises(ApiError) as exc:
        a.client().request("PUT", "/v1/domains", {"domains": ["python", "cobol"]})
    assert exc.value.status == 400 and exc.value.code == "bad-domain"
    with pytest.raises(ApiError) as exc:
        a.client().request("PUT", "/v1/domains", {"domains": "python"})
    assert exc.value.status == 400
    assert a.get("/v1/domains")["following"] == "every domain"  # nothing changed


async def test_a_lesson_on_another_domains_topic_is_refused(cluster):
    b = cluster.node("b", extra_config='[domains]\nfollow = ["python"]')
    b.init()
    b.start()
    async with rogue_peer(b.multiaddr) as rogue:
        now = int(time.time())

        def lesson(parts: dict) -> bytes:
            return wire.encode(wire.new_lesson(rogue.key, claim=Claim(**parts), kind="error", strength=1000,
                                               provenance=bytes(32), created=now))

        npm_on_python, python_ok = lesson(NPM), lesson(PYTHON_2)
        # (the rogue joined no domain topic: it sends by fanout, to b, which joined python's)
        await rogue.send(npm_on_python, topic="/openmemory/1/lesson/python")
        await rogue.send(python_ok, topic="/openmemory/1/lesson/python")
        await wait_for(lambda: b.has(wire.decode(python_ok).id), 30, "the python lesson on b")
        await wait_for(lambda: refused(b).get("wrong-topic", 0) >= 1, 30, "the npm lesson on python's topic refused")
        assert b.has(wire.decode(npm_on_python).id) is None


def test_a_node_follows_the_domains_of_its_own_lessons_so_their_attestations_come_back(cluster):
    (a,) = cluster.line(1)
    a.client().request("PUT", "/v1/domains", {"domains": ["python"]})
    assert "/openmemory/1/attestation/node" not in a.get("/v1/domains")["topics"]
    claim_lesson(a, NPM)
    wait_until(lambda: "/openmemory/1/attestation/node" in a.get("/v1/domains")["topics"], 30,
               what="a joined node's topics after writing an npm lesson")
    assert a.get("/v1/domains")["authored"] == ["node"]
    a.stop()
    a.start()  # (rebuilt from its store at start)
    assert a.get("/v1/domains")["following"] == ["general", "node", "python"]


def test_status_names_the_domains_followed(cluster):
    from .harness import cli

    node = cluster.node("s", extra_config='[domains]\nfollow = ["rust"]')
    node.init()
    node.start()
    assert "domains    following general, rust" in cli(node.home, "status").stdout
