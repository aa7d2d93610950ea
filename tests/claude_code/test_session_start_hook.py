"""The SessionStart hook: installed and removed with the rest, prints nothing (Claude Code adds
a SessionStart hook's output to the session's context), never fails and never holds a session:
no store, no node, a node that accepts and never answers, a broken payload. With the node away,
what the store already knows is revoked still leaves the memory folder. (Against real nodes:
tests/loop/test_commons_loop.py and test_commons_hook.py.)"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from cc_helpers import load, openmemory, snapshot

from openmemory_local.commons.receive import apply_changes
from openmemory_local.core.config import Config
from openmemory_local.core.config import project_dir
from openmemory_local.render.memory_folder import render
from openmemory_local.core.config import memory_dir_for
from openmemory_local.storage.store import Store
from tests.local.test_commons import NODE, PYTEST, TEAM, entry, rid, take
from tests.local.test_sleep import add, at, session

HOOK = [sys.executable, "-P", "-m", "openmemory_local.integrations.session_start"]
APP = "/home/me/app"
PAYLOAD = json.dumps({"session_id": "s", "transcript_path": "/nowhere.jsonl", "cwd": APP,
                      "hook_event_name": "SessionStart", "source": "startup"})


def _starts(settings: dict) -> list[str]:
    return [h["command"] for group in settings["hooks"].get("SessionStart", []) for h in group["hooks"]]


def test_install_adds_the_session_start_hook_and_uninstall_takes_it_away(claude_home, data, env):
    before = snapshot(claude_home)
    openmemory("install", "claude-code", "--home", str(data), "--schedule", "none", env=env, check=True)
    settings = load(claude_home / ".claude" / "settings.json")
    (command,) = _starts(settings)
    assert "openmemory_local.integrations.session_start" in command and str(data) in command
    assert len(settings["hooks"]["SessionEnd"]) == 2  # the user's and ours, beside it
    again = openmemory("install", "claude-code", "--home", str(data), "--schedule", "none", "--json", env=env,
                       check=True)
    assert json.loads(again.stdout)["changed"] is False
    openmemory("uninstall", "claude-code", "--home", str(data), env=env, check=True)
    assert snapshot(claude_home) == before


def _hook(data: Path, env: dict, stdin: str = PAYLOAD, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*HOOK, "--home", str(data)], input=stdin, capture_output=True, text=True, env=env,
                          timeout=timeout)


def _log(data: Path) -> str:
    path = data / "logs" / "claude-code-hook.log"
    return path.read_text() if path.exists() else ""


def _engine(tmp_path: Path, node_home: Path, extra: str = "") -> tuple[Path, dict, Path]:
    """A data folder whose store rendered two received lessons into a project's memory folder."""
    data, claude = tmp_path / "om", tmp_path / "claude"
    (claude / "projects" / project_dir(APP)).mkdir(parents=True)
    data.mkdir()
    (data / "config.toml").write_text(f'[node]\nhome = "{node_home}"\n{extra}')
    with Store.open(Config(home=data, claude_dir=claude)) as store:
        add(store, session("s1", 0, ["git push", "pytest"], cwd=APP))
        take(store, [entry(1, author=TEAM), entry(2, PYTEST, author=TEAM)])  # the team's: shown unverified
        render(store, at(1))
        # the store learns that lesson 1 was revoked, but no render ran since
        apply_changes(store, [dict(entry(1, status="revoked", author=TEAM), change=5)], NODE, at(2))
    env = dict(os.environ, HOME=str(tmp_path / "user"), CLAUDE_CONFIG_DIR=str(claude))
    env.pop("OPENMEMORY_HOME", None)
    return data, env, memory_dir_for(claude, APP)


def test_without_a_node_what_the_store_knows_is_revoked_still_leaves(tmp_path):
    data, env, memory = _engine(tmp_path, tmp_path / "no-node-here")
    revoked = memory / f"openmemory-commons-{rid(1)[:16]}.md"
    assert revoked.exists()
    done = _hook(data, env)
    assert (done.returncode, done.stdout) == (0, "")
    assert not revoked.exists() and rid(1)[:16] not in (memory / "MEMORY.md").read_text()
    assert (memory / f"openmemory-commons-{rid(2)[:16]}.md").exists()
    assert "node not asked" in _log(data) and "re-rendered ['/home/me/app']" in _log(data)
    # the next start: nothing stale, nothing new (the node is still away): the fast path
    assert _hook(data, env).stdout == ""
    assert _log(data).splitlines()[-1].split(" ", 1)[1].startswith("session-start: node not asked")
    assert "memory folders unchanged" in _log(data).splitlines()[-1]


def test_a_node_that_never_answers_does_not_hold_the_session(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:  # accept and say nothing
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        node_home = tmp_path / "node"
        node_home.mkdir()
        (node_home / "api.addr").write_text(f"127.0.0.1:{listener.getsockname()[1]}\n")
        (node_home / "api.token").write_text("token\n")
        data, env, memory = _engine(tmp_path, node_home, "[commons]\nhook_timeout = 0.5\n")
        done = _hook(data, env, timeout=30)  # the timeout here only keeps a broken hook from hanging the suite
        assert (done.returncode, done.stdout) == (0, "")
        assert "does not answer" in _log(data) and held  # it asked, gave up, and went on
        assert not (memory / f"openmemory-commons-{rid(1)[:16]}.md").exists()
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def test_no_store_a_broken_payload_or_an_older_store_exit_0_and_print_nothing(tmp_path):
    env = dict(os.environ, HOME=str(tmp_path / "user"))
    env.pop("OPENMEMORY_HOME", None)
    for stdin in (PAYLOAD, "", "not json {", "\x00\xff" * 100):
        done = _hook(tmp_path / "nothing-here", env, stdin)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    old = tmp_path / "old"
    old.mkdir()
    import sqlite3

    sqlite3.connect(old / "openmemory.db").execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    done = _hook(old, env)
    assert (done.returncode, done.stdout) == (0, "") and "no commons layer" in _log(old)
