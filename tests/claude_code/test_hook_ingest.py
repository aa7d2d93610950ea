"""End to end: the hook that `install` writes, given a real SessionEnd payload, ingests the session.

The hook command is read from the installed ``settings.json`` and run through ``sh -c`` with
the payload on stdin, as Claude Code runs it; the transcript is a copy of a real one (with its
subagents) under the temporary HOME's ``~/.claude/projects``. The detached ingest is awaited
with a bounded poll on ``openmemory episodes``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

from cc_helpers import OPENMEMORY, load, openmemory

SESSION = "fa812bfe-b295-4cca-9c2f-fdf01028cb46"


def _poll(predicate, timeout: float = 120.0, step: float = 0.25):
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > end:
            return value
        time.sleep(step)


def test_the_installed_hook_ingests_the_ended_session(claude_home, data, env, spotter):
    project = claude_home / ".claude" / "projects" / "-home-USER-projects-spotter-worktrees-spotter-a0y"
    project.mkdir(parents=True)
    transcript = project / f"{SESSION}.jsonl"
    shutil.copyfile(spotter / f"{SESSION}.jsonl", transcript)
    shutil.copytree(spotter / SESSION, project / SESSION)

    openmemory("install", "claude-code", "--home", str(data), "--schedule", "none", env=env, check=True)
    (group,) = [g for g in load(claude_home / ".claude" / "settings.json")["hooks"]["SessionEnd"]
                if "session_end" in json.dumps(g)]
    command = group["hooks"][0]["command"]

    payload = {
        "session_id": SESSION,
        "transcript_path": str(transcript),
        "cwd": "/home/USER/projects/spotter-worktrees/spotter-a0y",
        "hook_event_name": "SessionEnd",
        "reason": "prompt_input_exit",
        "permission_mode": "default",
    }
    started = time.monotonic()
    result = subprocess.run(["/bin/sh", "-c", command], input=json.dumps(payload), capture_output=True, text=True,
                            env=env, timeout=group["hooks"][0]["timeout"])
    hook_seconds = time.monotonic() - started
    assert result.returncode == 0 and result.stdout == "" and result.stderr == ""

    def episodes():
        listed = openmemory("episodes", "--session", SESSION, "--home", str(data), "--json", env=env)
        if listed.returncode != 0:
            return None
        rows = json.loads(listed.stdout)
        kinds = [row["kind"] for row in rows]
        return rows if "session" in kinds and kinds.count("error") >= 8 else None

    rows = _poll(episodes)
    assert rows, (data / "logs" / "claude-code-hook.log").read_text()
    errors = [row for row in rows if row["kind"] == "error"]
    assert len(errors) >= 8
    assert any("has no upstream branch" in row["text"] for row in errors)
    (session,) = [row for row in rows if row["kind"] == "session"]
    assert session["fields"]["subagents"], "the subagents' transcripts were ingested with the session"

    log = (data / "logs" / "claude-code-hook.log").read_text()
    assert f"session_id={SESSION} reason=prompt_input_exit" in log
    assert _poll(lambda: "ingest exited 0" in (data / "logs" / "claude-code-hook.log").read_text())
    # the exit was not held up by the ingest (a generous bound: it only guards against waiting)
    assert hook_seconds < group["hooks"][0]["timeout"]

    # the session ends again (a resumed session grew): the hook ingests only what is new
    with transcript.open("a") as handle:
        handle.write("{not json\n")
    result = subprocess.run(["/bin/sh", "-c", command], input=json.dumps(payload), capture_output=True, text=True,
                            env=env, timeout=30)
    assert result.returncode == 0
    assert _poll(lambda: (data / "logs" / "claude-code-hook.log").read_text().count("ingest exited 0") == 2)
    assert len(json.loads(openmemory("episodes", "--session", SESSION, "--home", str(data), "--json",
                                     env=env).stdout)) == len(rows)


def test_openmemory_hook_session_end_never_fails(data, env):
    """`openmemory hook session-end` (the same hook, for people and scripts) exits 0 on any payload."""
    for raw in ("", "{broken", json.dumps({"transcript_path": "/nowhere.jsonl"}), json.dumps([1, 2])):
        done = subprocess.run([str(OPENMEMORY), "hook", "session-end", "--home", str(data)], input=raw,
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0 and done.stderr == "", done.stderr
    assert (data / "logs" / "claude-code-hook.log").read_text().count("nothing to ingest") == 4
