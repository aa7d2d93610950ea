"""The SessionEnd hook: fast, never failing, detached from Claude Code's exit.

Here the hook's ``--openmemory`` points at a recorder (a fake ``openmemory`` that logs its
arguments, optionally sleeping), so that the mechanics can be observed: what is passed, that
it survives the hook's process group being killed, that a hanging ingest is stopped. The
test that the hook really ingests a real transcript, end to end, is in test_hook_ingest.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cc_helpers import write_script

HOOK = [sys.executable, "-P", "-m", "openmemory_local.integrations.session_end"]

RECORDER = r"""
import json, os, sys, time
out = os.environ["RECORDER_OUT"]
with open(out + ".pid", "w") as f:
    f.write(str(os.getpid()))
time.sleep(float(os.environ.get("RECORDER_SLEEP", "0")))
with open(out, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
"""


@pytest.fixture
def recorder(tmp_path: Path) -> Path:
    path = tmp_path / "fake-openmemory"
    write_script(path, RECORDER)
    return path


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    folder = tmp_path / "projects" / "-home-dev-app"
    (folder / "abc" / "subagents").mkdir(parents=True)
    path = folder / "abc.jsonl"
    path.write_text('{"type": "user"}\n')
    (folder / "abc" / "subagents" / "agent-1.jsonl").write_text('{"type": "user"}\n')
    return path


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, RECORDER_OUT=str(tmp_path / "calls.jsonl"), **extra)


def _wait_for(predicate, timeout: float = 30.0, step: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def _calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _payload(transcript: Path, **extra) -> bytes:
    payload = {
        "session_id": "abc",
        "transcript_path": str(transcript),
        "cwd": "/home/dev/app",
        "hook_event_name": "SessionEnd",
        "reason": "prompt_input_exit",
    }
    payload.update(extra)
    return json.dumps(payload).encode()


def test_a_valid_payload_queues_the_transcript_and_its_subagents(tmp_path, recorder, transcript):
    data = tmp_path / "data"
    result = subprocess.run(
        [*HOOK, "--home", str(data), "--openmemory", str(recorder)],
        input=_payload(transcript), capture_output=True, env=_env(tmp_path), timeout=30,
    )
    assert result.returncode == 0 and result.stdout == b"" and result.stderr == b""
    assert _wait_for(lambda: _calls(tmp_path))
    (call,) = _calls(tmp_path)
    assert call == ["ingest", str(transcript), str(transcript.with_suffix("") / "subagents"), "--home", str(data)]
    log = (data / "logs" / "claude-code-hook.log").read_text()
    assert "session_id=abc reason=prompt_input_exit" in log
    assert _wait_for(lambda: "ingest exited 0" in (data / "logs" / "claude-code-hook.log").read_text())


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\xfe garbage \x00",
        b"[]",
        b'{"session_id": "x"}',
        b'{"transcript_path": 5}',
        b'{"transcript_path": "/nonexistent/session.jsonl"}',
        b'{"transcript_path": "/"}',
        b"{" * 2_000_000,
    ],
    ids=["empty", "binary", "array", "no-path", "path-not-string", "missing-file", "a-directory", "huge"],
)
def test_a_broken_payload_exits_0_at_once_and_ingests_nothing(tmp_path, recorder, raw):
    data = tmp_path / "data"
    result = subprocess.run(
        [*HOOK, "--home", str(data), "--openmemory", str(recorder)],
        input=raw, capture_output=True, env=_env(tmp_path), timeout=30,
    )
    assert result.returncode == 0 and result.stderr == b""
    assert "nothing to ingest" in (data / "logs" / "claude-code-hook.log").read_text()
    time.sleep(0.2)
    assert _calls(tmp_path) == []


def test_a_stdin_that_never_closes_cannot_hold_the_hook(tmp_path, recorder, transcript):
    data = tmp_path / "data"
    for written, ingests in ((b'{"transcript_path": ', False), (_payload(transcript), True)):
        process = subprocess.Popen(
            [*HOOK, "--home", str(data), "--openmemory", str(recorder)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(tmp_path),
        )
        try:
            process.stdin.write(written)
            process.stdin.flush()  # and never closed while the hook runs
            assert process.wait(timeout=30) == 0
        finally:
            process.kill()
            process.stdin.close()
            process.wait()
        if ingests:
            assert _wait_for(lambda: _calls(tmp_path))
        else:
            assert _calls(tmp_path) == []


def test_the_ingest_outlives_the_hooks_process_group(tmp_path, recorder, transcript):
    """Claude Code kills what its hook left behind when it exits: the ingest runs elsewhere."""
    data = tmp_path / "data"
    hook = subprocess.Popen(
        [*HOOK, "--home", str(data), "--openmemory", str(recorder)],
        stdin=subprocess.PIPE, env=_env(tmp_path, RECORDER_SLEEP="1"), start_new_session=True,
    )
    hook.communicate(_payload(transcript), timeout=30)
    assert hook.returncode == 0
    assert _wait_for(lambda: (tmp_path / "calls.jsonl.pid").exists())
    try:
        os.killpg(hook.pid, signal.SIGKILL)  # what a parent tearing down its hook does
    except ProcessLookupError:
        pass  # nothing at all was left in the hook's group
    assert _wait_for(lambda: _calls(tmp_path))  # the ingest finished anyway


def test_a_hanging_ingest_is_stopped_after_the_timeout(tmp_path, recorder, transcript):
    data = tmp_path / "data"
    subprocess.run(
        [*HOOK, "--home", str(data), "--openmemory", str(recorder), "--timeout", "1"],
        input=_payload(transcript), capture_output=True, env=_env(tmp_path, RECORDER_SLEEP="3600"), timeout=30,
    )
    log = data / "logs" / "claude-code-hook.log"
    assert _wait_for(lambda: "timeout" in log.read_text(), timeout=30)
    assert "ingest stopped after the 1s timeout" in log.read_text()
    pid = int((tmp_path / "calls.jsonl.pid").read_text())
    assert _wait_for(lambda: not _alive(pid))
    assert _calls(tmp_path) == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its (detached) parent counts as gone
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_an_unwritable_data_folder_still_exits_0(tmp_path, recorder, transcript):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = subprocess.run(
        [*HOOK, "--home", str(blocker / "data"), "--openmemory", str(recorder)],
        input=_payload(transcript), capture_output=True, env=_env(tmp_path), timeout=30,
    )
    assert result.returncode == 0 and result.stderr == b""
