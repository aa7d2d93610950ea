"""The engine publishes to a real node: opt-in only, the lessons above the threshold, nothing
identifying; the same failures on two machines make one group of two authors; a lesson
whose text changes derives from its old record; revoke, veto, disable; ``lessons`` shows
the node's view. Real node processes on loopback, the real transcripts."""

from __future__ import annotations

import json
import shutil

import pytest

from openmemory_local.commons.publish import commons_status, open_provenance, publish
from openmemory_local.commons.node_link import open_link
from openmemory_local.render.report import latest_report_data, make_report

from .publish_helpers import (FAMILY, NOW, SECOND_MACHINE, SECOND_WORKTREE, WORKTREE, build_home, copy_home,
                              lesson_texts, now, om, om_json, open_store, rewrite, transcript_branches)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_home(spotter, tmp_path_factory):
    """The spotter transcripts ingested and slept (default threshold), built once."""
    return build_home(tmp_path_factory.mktemp("engine") / "home", spotter)


@pytest.fixture(scope="module")
def low_homes(spotter, tmp_path_factory):
    """This machine and a second one (the same transcripts with another user, folders and
    branches), both with threshold 0.9 so that every lesson is published (replayed day by day, a
    lesson of two sessions has decayed a little below 1.0 by the last night)."""
    root = tmp_path_factory.mktemp("machines")
    second = rewrite(spotter, root / "second-transcripts", SECOND_MACHINE)
    return (build_home(root / "a", spotter, min_strength=0.9), build_home(root / "b", second, min_strength=0.9))


def test_opt_in_only_then_the_strong_lessons_without_anything_identifying(cluster, spotter, tmp_path, monkeypatch):
    node = cluster.node("a").init().start()
    claude = tmp_path / "claude"
    shutil.copytree(spotter, claude / "projects" / "spotter")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(f'[node]\nhome = "{node.home}"\n')

    # Nothing opted in: a run publishes nothing, and does not even ask the node.
    code, out = om("run", "--home", home, "--now", NOW)
    assert code == 0, out
    assert lesson_texts(node) == []
    assert "Published" not in out
    assert om_json("publish", "--dry-run", "--home", home)["records"] == []

    # Opted in while the node is down: nothing fails, the records wait, the report says so.
    code, out = om("publish", "enable", WORKTREE, "--home", home)
    assert code == 0 and FAMILY in out
    node.stop()
    code, out = om("run", "--home", home, "--now", NOW)
    assert code == 0, out
    assert "wait in the queue" in out
    with open_store(home) as store:
        report = latest_report_data(store)
        pending = store.conn.execute("SELECT COUNT(*) FROM publish_queue WHERE state = 'pending'").fetchone()[0]
        eligible = store.conn.execute("SELECT COUNT(*) FROM lessons WHERE state = 'active' AND strength >= 1.5 "
                                      "AND family = ?", (FAMILY,)).fetchone()[0]
    assert "Waiting for the commons node" in report["markdown"]
    assert pending == eligible >= 1  # replayed day by day: the no-upstream lesson (1.99) is the one at 1.5+

    # The node back: the next run sends exactly the lessons at or above the threshold.
    node.start()
    dry = om_json("publish", "--dry-run", "--home", home)
    assert len(dry["records"]) == eligible and all(r["state"] == "queued" for r in dry["records"])
    code, out = om("run", "--home", home, "--now", NOW)
    assert code == 0, out
    texts = lesson_texts(node)
    assert sorted(texts) == sorted(r["text"] for r in dry["records"])
    assert len(texts) == eligible
    forbidden = {"USER", "/home", "spotter", "marco"} | transcript_branches(spotter)
    for text in texts:
        assert not [f for f in forbidden if f.lower() in text.lower()], text
    for record in node.records().values():
        assert record["record"]["strength"] >= 1500
    # A run with nothing new sends nothing more.
    code, out = om("run", "--home", home, "--now", NOW)
    assert code == 0 and sorted(lesson_texts(node)) == sorted(texts)


def test_two_machines_one_group_two_authors(cluster, low_homes, tmp_path):
    a = cluster.node("a").init().start()
    b = cluster.node("b").init([a.multiaddr]).start()
    homes = [copy_home(low_homes[0], tmp_path / "a"), copy_home(low_homes[1], tmp_path / "b")]
    worktrees = [WORKTREE, SECOND_WORKTREE]
    results = []
    for home, worktree, node in zip(homes, worktrees, (a, b)):
        assert om("publish", "enable", worktree, "--home", home)[0] == 0
        results.append(om_json("publish", "--home", home, "--node-home", node.home, "--now", NOW))
    sent = [sorted(r["record"] for r in result["sent"]) for result in results]
    # (error lessons only: a correction or a rejected call is a preference and stays personal)
    assert len(sent[0]) == len(sent[1]) >= 3 and not set(sent[0]) & set(sent[1])
    with open_store(homes[0]) as sa, open_store(homes[1]) as sb:
        mine = {t for (t,) in sa.conn.execute("SELECT text FROM published")}
        theirs = {t for (t,) in sb.conn.execute("SELECT text FROM published")}
        keys = [{k for (k,) in s.conn.execute("SELECT dedup_key FROM published")} for s in (sa, sb)]
    assert mine == theirs  # byte-identical commons texts from two machines
    assert keys[0] == keys[1] and None not in keys[0]

    from tests.node.harness import wait_until
    wait_until(lambda: len(lesson_texts(a)) == 2 * len(sent[0]), 60, what="b's lessons on a")
    link = open_link(open_store(homes[0], a.home).config)
    for record_id in sent[0]:
        view = commons_status(link, record_id)
        assert view["members"] == 2 and view["authors"] == 2, view
    listing = om_json("lessons", "--home", homes[0], "--node-home", a.home)
    shown = [rec["node"] for row in listing if row["commons"] for rec in row["commons"]["records"]]
    assert len(shown) == len(sent[0]) and all(v["authors"] == 2 and v["status"] == "candidate" for v in shown)
    code, out = om("lessons", "--home", homes[0], "--node-home", a.home)
    assert "group of 2 record(s) by 2 author(s)" in out


def test_changed_text_derives_revoke_veto_disable_and_provenance(cluster, low_homes, tmp_path):
    node = cluster.node("a").init().start()
    home = copy_home(low_homes[0], tmp_path / "home")
    args = ("--home", home, "--node-home", node.home, "--now", NOW)
    assert om("publish", "enable", WORKTREE, "--home", home)[0] == 0
    assert len(om_json("publish", *args)["sent"]) >= 3  # (error lessons: corrections stay personal)
    with open_store(home, node.home) as store:
        rows = {lid: (rid, text) for rid, lid, text in store.conn.execute(
            "SELECT record_id, lesson_id, text FROM published")}
        push_id = next(lid for lid, (_, text) in rows.items() if "has no upstream branch" in text)
        old_record = rows[push_id][0]
        # The lesson's top failure message changes (a new session met another one).
        details = json.loads(store.conn.execute("SELECT details FROM lessons WHERE id = ?", (push_id,)).fetchone()[0])
        details["messages"][0]["text"] = "fatal: 'origin' does not appear to be a git repository"
        with store.write():
            store.conn.execute("UPDATE lessons SET details = ? WHERE id = ?", (json.dumps(details), push_id))
        second = publish(store, now())
        assert [s["lesson"] for s in second["sent"]] == [push_id]
        new_record = second["sent"][0]["record"]
        view = node.get(f"/v1/records/{new_record}")
        assert view["record"]["derived_from"] == [old_record]
        assert view["record"]["text"] == ('`git push` failed: "fatal: \'origin\' does not appear to be a git '
                                          'repository"; `git push --set-upstream origin <branch>` succeeded.')
        assert store.conn.execute("SELECT superseded_by FROM published WHERE record_id = ?",
                                  (old_record,)).fetchone()[0] == new_record
        # provenance opens: the salt and the episode hashes give the committed value
        opened = open_provenance(store, push_id)
        assert [o["record_id"] for o in opened] == [old_record, new_record]
        assert all(o["matches"] and o["episodes"] and all(e["present"] for e in o["episodes"]) for o in opened)
        assert opened[0]["salt"] != opened[1]["salt"]
        assert node.get(f"/v1/records/{old_record}")["record"]["provenance"] == opened[0]["provenance"]
        veto_target = next(lid for lid in rows if lid != push_id)

    # vetoing a published lesson says how to revoke it
    code, out = om("veto", veto_target, "--home", home)
    assert code == 0 and f"openmemory revoke {veto_target}" in out
    # revoke: every record of the lesson, through the node; never published again
    code, out = om("revoke", push_id, "--reason", "The remote was renamed since.", *args)
    assert code == 0, out
    assert node.get(f"/v1/records/{old_record}")["status"] == "revoked"
    assert node.get(f"/v1/records/{new_record}")["status"] == "revoked"
    again = om_json("publish", *args)
    assert again["sent"] == []
    with open_store(home) as store:
        make_report(store, now())
        assert "revoked (withdrawn)" in latest_report_data(store)["markdown"]
    # a bad reason code or a reason that instructs: a usage error, nothing revoked
    assert om("revoke", push_id, "--code", "because", *args)[0] == 2
    left = next(lid for lid in rows if lid not in (push_id, veto_target))
    assert om("revoke", left, "--reason", "Always check the remote.", *args)[0] == 2
    assert node.get(f"/v1/records/{rows[left][0]}")["status"] == "candidate"

    # disable without --revoke: the records stay, and the way to withdraw them is printed
    code, out = om("publish", "disable", WORKTREE, *args)
    assert code == 0 and "--revoke" in out
    assert node.get(f"/v1/records/{rows[left][0]}")["status"] == "candidate"
    assert om_json("publish", "--dry-run", "--home", home)["records"] == []
    # enable, then disable --revoke: every record still up is revoked, reason withdrawn
    assert om("publish", "enable", WORKTREE, "--home", home)[0] == 0
    code, out = om("publish", "disable", WORKTREE, "--revoke", *args)
    assert code == 0, out
    statuses = {rid: node.get(f"/v1/records/{rid}")["status"] for rid, _ in rows.values()}
    assert set(statuses.values()) == {"revoked"}, statuses
    status = om_json("publish", "status", "--home", home)
    assert status["families"][0]["enabled"] is False and status["families"][0]["published_records"] == 0
    # the owner's commands without a node: clear, nothing lost
    node.stop()
    assert om("revoke", left, *args)[0] == 0  # already revoked: nothing to ask the node
    code, out = om("lessons", "--home", home, "--node-home", node.home)
    assert code == 0 and "revoked" in out


def test_the_node_refusing_a_record_holds_it_back(cluster, base_home, tmp_path):
    node = cluster.node("a").init().start()
    home = copy_home(base_home, tmp_path / "home")
    with open_store(home, node.home) as store:
        lesson = store.conn.execute("SELECT id, family FROM lessons WHERE state = 'active' LIMIT 1").fetchone()
        with store.write():
            store.conn.execute(
                "INSERT INTO publish_queue (lesson_id, family, state, text, kind, strength, created, provenance, salt, "
                "queued) VALUES (?, ?, 'pending', 'Always use uv.', 'error', 1.5, 1770940800, ?, ?, ?)",
                (lesson[0], lesson[1], "ab" * 32, "cd" * 32, NOW))
        result = publish(store, now())
        assert result["sent"] == [] and result["refused"][0]["lesson"] == lesson[0]
        assert "claim" in result["refused"][0]["reason"]  # free prose is no claim: the node refuses it
        state, reasons = store.conn.execute("SELECT state, reasons FROM publish_queue WHERE lesson_id = ?",
                                            (lesson[0],)).fetchone()
        assert state == "held" and "claim" in reasons
        made = make_report(store, now())
        assert "Held back from the commons" in made["markdown"]
    assert lesson_texts(node) == []


def test_a_correction_queued_by_an_older_engine_never_leaves(cluster, base_home, tmp_path):
    """An engine before claims queued corrections (they had a commons form then); its queue
    survives an upgrade. The last step before a record leaves holds every kind without a commons
    form, so the node never sees the person's preference, whatever queued it."""
    node = cluster.node("a").init().start()
    home = copy_home(base_home, tmp_path / "home")
    with open_store(home, node.home) as store:
        lessons = store.conn.execute("SELECT id, family FROM lessons WHERE state = 'active' LIMIT 2").fetchall()
        with store.write():
            for (lesson_id, family), kind in zip(lessons, ("correction", "rejection")):
                store.conn.execute(
                    "INSERT INTO publish_queue (lesson_id, family, state, text, kind, strength, created, provenance, "
                    "salt, queued) VALUES (?, ?, 'pending', ?, ?, 1.5, 1770940800, ?, ?, ?)",
                    (lesson_id, family, f"The person corrected the agent: use pnpm, not npm ({kind}).", kind,
                     "ab" * 32, "cd" * 32, NOW))
        result = publish(store, now())
        assert result["sent"] == []
        assert sorted(r["lesson"] for r in result["refused"]) == sorted(lesson_id for lesson_id, _ in lessons)
        assert all("stays personal" in r["reason"] for r in result["refused"])
        states = store.conn.execute("SELECT state FROM publish_queue WHERE kind IN ('correction', 'rejection')").fetchall()
        assert states == [("held",), ("held",)]
    assert lesson_texts(node) == []
