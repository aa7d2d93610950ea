"""Kill the node, or the engine, in the middle of publishing: after a restart every lesson is
published exactly once (the queue fixes every field of a record, signatures are
deterministic, so a retry of a record that landed is a duplicate, never a second one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

import pytest

from openmemory_local.commons.publish import ENV_FAULT, publish

from .publish_helpers import NOW, WORKTREE, build_home, copy_home, lesson_texts, now, om, open_store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def low_home(spotter, tmp_path_factory):
    home = build_home(tmp_path_factory.mktemp("engine") / "home", spotter, min_strength=0.9)
    assert om("publish", "enable", WORKTREE, "--home", home)[0] == 0
    return home


def _published(home) -> list[tuple[int, str]]:
    with open_store(home) as store:
        return store.conn.execute("SELECT lesson_id, record_id FROM published ORDER BY lesson_id").fetchall()


def _exactly_once(node, home) -> None:
    texts = lesson_texts(node)
    assert len(texts) >= 3
    assert max(Counter(texts).values()) == 1, Counter(texts)
    published = _published(home)
    assert len(published) == len(texts) == len({lid for lid, _ in published})
    assert set(node.records()) == {rid for _, rid in published}
    with open_store(home) as store:
        assert store.conn.execute("SELECT COUNT(*) FROM publish_queue").fetchone()[0] == 0


def test_node_killed_mid_publish(cluster, low_home, tmp_path):
    node = cluster.node("a").init().start()
    home = copy_home(low_home, tmp_path / "home")

    def kill_after_second(row, answer):
        if len(_published(home)) == 2:
            node.kill(signal.SIGKILL)

    with open_store(home, node.home) as store:
        first = publish(store, now(), on_sent=kill_after_second)
    assert len(first["sent"]) == 2 and first["waiting"] >= 3 and first["unavailable"]
    node.start()
    with open_store(home, node.home) as store:
        second = publish(store, now())
    assert not any(s["duplicate"] for s in second["sent"])
    assert len(first["sent"]) + len(second["sent"]) == len(lesson_texts(node))
    _exactly_once(node, home)


def test_engine_killed_after_the_node_accepted_and_before_it_recorded(cluster, low_home, tmp_path):
    node = cluster.node("a").init().start()
    home = copy_home(low_home, tmp_path / "home")
    command = [sys.executable, "-m", "openmemory_local.cli.main", "publish", "--home", str(home),
               "--node-home", str(node.home), "--now", NOW, "--json"]
    env = {**os.environ, ENV_FAULT: "publish-kill-after:3"}
    killed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(lesson_texts(node)) == 3  # the node has the third record ...
    assert len(_published(home)) == 2  # ... the engine never recorded it
    env.pop(ENV_FAULT)
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    duplicates = [s for s in result["sent"] if s["duplicate"]]
    assert len(duplicates) == 1  # the retry of the third record: the same record, answered 200
    _exactly_once(node, home)
