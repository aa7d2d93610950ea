"""The layer budget with 500 received lessons, through a real node: the personal layer is
rendered whole, the commons layer takes what it leaves, MEMORY.md stays within what Claude Code
reads (200 lines, 25,000 bytes)."""

from __future__ import annotations

import random
import time

import nacl.signing
import pytest

from openmemory_local.commons.receive import pull
from openmemory_local.core.config import Config
from openmemory_local.core.config import project_dir
from openmemory_local.commons.node_link import open_link
from openmemory_local.render.memory_folder import BEGIN, END, render
from openmemory_local.core.config import memory_dir_for
from openmemory_local.sleep.passes import sleep
from openmemory_local.storage.store import Store
from openmemory_node import wire
from openmemory_protocol import claims
from tests.local.test_sleep import add, at, error, session
from tests.node.harness import Cluster

pytestmark = pytest.mark.slow

APP = "/home/me/app"
RECEIVED = 500
OWN = 30


def words(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choice("bcdfghjklmnpqrstvwxz") + rng.choice("aeiou") for _ in range(3)) for _ in range(n)]


def publish_many(node, count: int) -> list[str]:
    """``count`` claims by five other agents of the owner's team (shown before they are
    verified), each naming `git push` and its own failure."""
    rng = random.Random(13)
    keys = [nacl.signing.SigningKey.generate() for _ in range(5)]
    for key in keys:
        node.post("/v1/team", {"key": key.verify_key.encode().hex()})
    ids = []
    for i in range(count):
        first, second = words(rng, 2)
        claim = claims.Claim(situation="git push", failure=f"remote: {first} hook declined the {second} ref")
        lesson = wire.new_lesson(keys[i % 5], claim=claim, kind="error", strength=1000,
                                 provenance=bytes(32), created=int(time.time()))
        ids.append(node.post("/v1/records", {"cbor": wire.encode(lesson).hex()})["id"])
    return ids


def index_lines(text: str) -> tuple[list[str], list[str]]:
    block = text[text.index(BEGIN):text.index(END)]
    personal, _, received = block.partition("## Reported by other agents (Open Memory commons)")
    return ([line for line in personal.splitlines() if line.startswith("- [")],
            [line for line in received.splitlines() if line.startswith("- [")])


def test_500_received_lessons_never_crowd_out_the_personal_layer(cluster: Cluster, tmp_path):
    node = cluster.node("n")
    node.init()
    node.start()
    published = publish_many(node, RECEIVED)

    claude = tmp_path / "claude"
    (claude / "projects" / project_dir(APP)).mkdir(parents=True)
    config = Config(home=tmp_path / "home", claude_dir=claude, node_home=node.home, commons_page=120)
    rng = random.Random(5)
    with Store.open(config) as store:
        # the personal layer: 30 lessons of this agent's own (30 failures, each in 2 sessions)
        episodes = [session("s1", 0, ["git push"], cwd=APP), session("s2", 0, ["git push"], cwd=APP)]
        for i in range(OWN):
            program, a, b = words(rng, 3)
            for s in ("s1", "s2"):
                episodes.append(error(f"e{i}{s}", s, 0, cwd=APP, command=f"{program} {a}",
                                      first=f"{program}: {a} {b} not found"))
        add(store, *episodes)
        assert len(sleep(store, at(0, 23)).learn["learned"]) == OWN

        pulled = pull(store, open_link(config), at(1))
        assert pulled["received"] == RECEIVED and pulled["pages"] >= RECEIVED // 120
        assert {r for (r,) in store.conn.execute("SELECT record_id FROM commons_lessons")} == set(published)

        memory = memory_dir_for(claude, APP)
        memory.mkdir()
        owner = "".join(f"- my note {i}: the staging database is reset on Mondays\n" for i in range(120))
        (memory / "MEMORY.md").write_text("# My notes\n\n" + owner)

        for limit in (config.commons_max_lessons, RECEIVED):  # the default, then no cap but the budget
            store.config = config.with_(commons_max_lessons=limit)
            render(store, at(1))
            text = (memory / "MEMORY.md").read_text()
            personal, received = index_lines(text)
            assert len(personal) == OWN  # whole
            assert text.count("\n") <= 200 and len(text.encode()) <= 25_000
            assert text.startswith("# My notes\n\n" + owner)  # the owner's text untouched
            files = list(memory.glob("openmemory-commons-*.md"))
            if limit == config.commons_max_lessons:
                assert len(received) == limit == 10
            else:  # the budget decides: as many as fit, and a note of the rest
                assert 10 < len(received) < RECEIVED and "more reported lesson(s) not listed" in text
                assert 200 - text.count("\n") <= 1 or 25_000 - len(text.encode()) < 300
            assert len(files) == len(received)  # a file for each line, none beyond what the index lists
        print(f"\n{RECEIVED} received: {len(received)} listed in MEMORY.md beside {OWN} own lessons and 122 lines "
              f"of the owner's ({text.count(chr(10))} lines, {len(text.encode())} bytes)")
