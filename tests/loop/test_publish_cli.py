"""The publishing commands' edges: opt-in resolution, usage errors, no node, the outbox rows
of a project opted out mid-send, and the store tables issue 13 reads."""

from __future__ import annotations

import json

import pytest

from openmemory_local.commons.publish import (disable, enable, opted_in, plan, publish, queue, resolve_families)
from openmemory_local.storage.store import SCHEMA_VERSION

from .publish_helpers import FAMILY, NOW, WORKTREE, build_home, copy_home, lesson_texts, now, om, om_json, open_store


@pytest.fixture(scope="module")
def low_home(spotter, tmp_path_factory):
    return build_home(tmp_path_factory.mktemp("engine") / "home", spotter, min_strength=0.9)


def test_opt_in_resolution_and_idempotence(low_home, tmp_path):
    home = copy_home(low_home, tmp_path / "home")
    with open_store(home) as store:
        assert store.schema_version() == SCHEMA_VERSION and opted_in(store) == []
        assert resolve_families(store, WORKTREE) == [FAMILY]
        assert resolve_families(store, "/home/USER/projects/spotter-worktrees") == [FAMILY]  # the worktrees folder
        assert resolve_families(store, WORKTREE + "/lib") == [FAMILY]  # a folder inside
        assert resolve_families(store, FAMILY) == [FAMILY]
        # a directory the store never saw: its own family, a worktree's family from .git/HEAD
        repo = tmp_path / "src" / "app-worktrees" / "feature-x"
        (repo / ".git").mkdir(parents=True)
        (repo / ".git" / "HEAD").write_text("ref: refs/heads/feature-x\n")
        assert resolve_families(store, repo) == [str(tmp_path / "src" / "app-worktrees") + "/*"]
        assert resolve_families(store, tmp_path / "plain") == [str(tmp_path / "plain")]
        first = enable(store, WORKTREE, now())
        again = enable(store, WORKTREE, now())
        assert first["changed"] == [FAMILY] and again["changed"] == []
        assert opted_in(store) == [FAMILY]
    status = om_json("publish", "status", "--home", home)
    assert status["threshold"] == 0.9 and status["families"][0]["eligible"] >= 5
    code, out = om("publish", "status", "--home", home)
    assert code == 0 and FAMILY in out and "opted in since" in out


@pytest.mark.parametrize("args", [
    ("publish", "frobnicate"), ("publish", "enable", "--dry-run"), ("publish", "--revoke"),
    ("publish", "provenance"), ("publish", "provenance", "99999"), ("revoke", "99999"), ("revoke", "x"),
])
def test_usage_errors_are_clear(low_home, tmp_path, args, capsys):
    home = copy_home(low_home, tmp_path / "home")
    code, _ = om(*args, "--home", home)
    assert code == 2
    assert capsys.readouterr().err.strip()


def test_no_node_nothing_fails_and_the_owner_is_told(low_home, tmp_path):
    home = copy_home(low_home, tmp_path / "home")
    absent = tmp_path / "no-node"
    assert om("publish", "enable", WORKTREE, "--home", home)[0] == 0
    result = om_json("publish", "--home", home, "--node-home", absent, "--now", NOW)
    assert result["sent"] == [] and result["waiting"] == len(result["queued"]) >= 3 and result["unavailable"]
    assert "openmemory-node init" in result["error"]
    # a second try does not queue again: the rows wait with their fields fixed
    with open_store(home) as store:
        fixed = store.conn.execute("SELECT lesson_id, created, salt, provenance FROM publish_queue "
                                   "ORDER BY id").fetchall()
    later = om_json("publish", "--home", home, "--node-home", absent, "--now", "2026-02-20T00:00:00Z")
    assert later["queued"] == [] and later["waiting"] == len(fixed)
    with open_store(home) as store:
        assert store.conn.execute("SELECT lesson_id, created, salt, provenance FROM publish_queue "
                                  "ORDER BY id").fetchall() == fixed
    # `lessons` works, and says it could not ask the node
    code, out = om("lessons", "--home", home, "--node-home", absent)
    assert code == 0 and "#" in out
    # revoking needs the node: exit 8, nothing changed (nothing was published yet: a usage error)
    assert om("revoke", fixed[0][0], "--home", home, "--node-home", absent)[0] == 2


@pytest.mark.slow
def test_opting_out_mid_send_asks_the_node_what_landed(cluster, low_home, tmp_path):
    node = cluster.node("a").init().start()
    home = copy_home(low_home, tmp_path / "home")
    with open_store(home, node.home) as store:
        enable(store, WORKTREE, now())
        queue(store, now(), plan(store, now()))
        rows = store.conn.execute("SELECT id, text, kind, strength, provenance, derived_from, created, lesson_id "
                                  "FROM publish_queue ORDER BY id").fetchall()
        assert len(rows) >= 3
        # The first row was sent and landed, the second was tried and did not; then the
        # process died before recording either.
        landed = rows[0]
        answer = node.post("/v1/lessons", {"text": landed[1], "kind": landed[2], "strength": landed[3],
                                           "provenance": landed[4], "derived_from": json.loads(landed[5]),
                                           "created": landed[6]})
        with store.write():
            store.conn.execute("UPDATE publish_queue SET attempts = 1 WHERE id IN (?, ?)", (rows[0][0], rows[1][0]))
        result = disable(store, WORKTREE, now())
        assert result["withdrawn"] == 2 and result["dropped"] == len(rows) - 2
        sent = publish(store, now())
        assert sent["sent"] == [] and sent["waiting"] == 0
        published = store.conn.execute("SELECT record_id, lesson_id FROM published").fetchall()
        assert published == [(answer["id"], landed[7])]
        assert store.conn.execute("SELECT COUNT(*) FROM publish_queue").fetchone()[0] == 0
    assert lesson_texts(node) == [landed[1]]
    # ... and it can be withdrawn like any published record
    code, out = om("publish", "disable", WORKTREE, "--revoke", "--home", home, "--node-home", node.home)
    assert code == 0 and "Revoked 1 record(s)" in out
    assert node.get(f"/v1/records/{answer['id']}")["status"] == "revoked"
    node.stop()
    assert om("publish", "disable", WORKTREE, "--revoke", "--home", home, "--node-home", node.home)[0] == 0


@pytest.mark.slow
def test_revoke_without_a_node_exits_8(cluster, low_home, tmp_path):
    node = cluster.node("a").init().start()
    home = copy_home(low_home, tmp_path / "home")
    assert om("publish", "enable", WORKTREE, "--home", home)[0] == 0
    sent = om_json("publish", "--home", home, "--node-home", node.home, "--now", NOW)["sent"]
    node.stop()
    code, out = om("revoke", sent[0]["lesson"], "--home", home, "--node-home", node.home)
    assert code == 8
    code, out = om("lessons", "--home", home, "--node-home", node.home)
    assert code == 0 and "Commons status unknown" in out and sent[0]["record"] in out
    code, out = om("publish", "provenance", sent[0]["lesson"], "--home", home)
    assert code == 0 and "matches" in out and "DOES NOT" not in out


def test_options_may_stand_between_the_action_and_its_project(low_home, tmp_path, capsys):
    # argparse alone would refuse the project after an option (its optional positionals are
    # filled from the words before the first option)
    home = copy_home(low_home, tmp_path / "home")
    assert om("publish", "enable", "--home", home, WORKTREE)[0] == 0
    with open_store(home) as store:
        assert opted_in(store) == [FAMILY]
    assert om("publish", "disable", "--home", home, WORKTREE)[0] == 0
    with open_store(home) as store:
        assert opted_in(store) == []
    capsys.readouterr()
    assert om("publish", "enable", "--home", home, WORKTREE, "extra")[0] == 2
    assert "unrecognized arguments: extra" in capsys.readouterr().err
