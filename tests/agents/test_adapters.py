"""Codex CLI and Gemini CLI transcripts through the real ingest (real SQLite, the synthetic
files of ``data/``): failures with their exit codes and where each came from, resumable reading,
bad lines counted, formats not supported skipped by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from openmemory_local.ingest.adapters import adapter_for
from openmemory_local.core.config import load_config
from openmemory_local.ingest.transcripts import ingest, rebuild_from_archive

from .conftest import CODEX_ROLLOUT, FIXTURE_CWD, GEMINI_JSON, GEMINI_JSONL, codex_copy, gemini_copy


def episodes(store, kind: str | None = None) -> list[dict]:
    rows = store.conn.execute("SELECT kind, key, session_id, project, text, fields FROM episodes ORDER BY id")
    out = [{"kind": k, "key": key, "session_id": s, "project": p, "text": t, "fields": json.loads(f)}
           for k, key, s, p, t, f in rows]
    return [e for e in out if kind is None or e["kind"] == kind]


def snapshot(store) -> list[tuple]:
    return sorted(store.conn.execute("SELECT kind, key, text, fields FROM episodes").fetchall())


def test_the_codex_rollout_gives_its_failures_with_exit_codes_and_their_source(store, now):
    summary = ingest(store, [CODEX_ROLLOUT], now=now)
    [result] = summary.files
    assert (result.status, result.agent) == ("new", "codex")
    errors = {e["fields"]["command"]: e for e in episodes(store, "error")}
    assert len(errors) >= 2
    push, test = errors["git push"], errors["npm test"]
    assert (push["fields"]["exit_code"], push["fields"]["exit_source"]) == (128, "output")
    assert push["fields"]["tool"] == "Bash" and "no upstream branch" in push["fields"]["first_line"]
    assert (test["fields"]["exit_code"], test["fields"]["exit_source"]) == (1, "metadata")
    assert push["project"] == FIXTURE_CWD and push["fields"]["branch"] == "feature/login"
    # the unknown record type is counted by name, nothing else is rejected
    assert result.rejected == {"unknown codex record type 'session_fork_marker' (ignored)": 1}
    [session] = episodes(store, "session")
    f = session["fields"]
    # injected context (AGENTS.md, <environment_context>, developer) is not the person; the
    # message duplicated as event_msg counts once
    assert f["asked"] == "push my branch, then run the tests and fix what fails"
    assert f["person_messages"] == 2
    assert f["compactions"] == 1
    assert f["tools"]["Bash"] == 4 and f["tools"]["apply_patch"] == 1
    assert "src/login.js" in f["files_edited"]


def test_the_gemini_session_gives_a_failure_whose_status_says_success(store, now):
    summary = ingest(store, [GEMINI_JSONL], now=now)
    [result] = summary.files
    assert (result.status, result.agent) == ("new", "gemini")
    errors = episodes(store, "error")
    shell = [e for e in errors if e["fields"]["tool"] == "Bash"]
    assert len(shell) == 1
    assert (shell[0]["fields"]["exit_code"], shell[0]["fields"]["exit_source"]) == (128, "output")
    assert shell[0]["fields"]["first_line"].startswith("fatal: The current branch")
    read = [e for e in errors if e["fields"]["tool"] == "Read"]
    assert read and read[0]["fields"]["exit_source"] == "status"
    [session] = episodes(store, "session")
    f = session["fields"]
    assert session["project"] == FIXTURE_CWD  # from <project id>/.project_root
    assert f["tool_calls"] == 3  # the message written twice counts once, its call when finished
    assert f["person_messages"] == 2


def test_the_older_gemini_json_file_is_read_whole(store, now):
    [result] = ingest(store, [GEMINI_JSON], now=now).files
    assert (result.status, result.agent) == ("new", "gemini")
    [error] = episodes(store, "error")
    assert (error["fields"]["exit_code"], error["fields"]["command"]) == (1, "npm run build")
    assert "vite: not found" in error["fields"]["first_line"]


def test_cursors_make_reingest_idempotent_and_incremental(tmp_path, now):
    from openmemory_local.core.config import Config
    from openmemory_local.storage.store import Store

    def ingest_in_parts(cut_codex: int | None, cut_gemini: int | None) -> list[tuple]:
        root = tmp_path / f"run-{cut_codex}"
        codex = codex_copy(root / "codex")
        gemini = gemini_copy(root / "gemini")
        whole = {codex: codex.read_bytes(), gemini: gemini.read_bytes()}
        with Store.open(Config(home=root / "home")) as store:
            for path, cut in ((codex, cut_codex), (gemini, cut_gemini)):
                if cut is not None:
                    lines = whole[path].splitlines(keepends=True)
                    path.write_bytes(b"".join(lines[:cut]))
            first = ingest(store, [root], now=now)
            assert not first.problems
            for path in whole:
                path.write_bytes(whole[path])
            second = ingest(store, [root], now=now)
            assert {f.status for f in second.files} <= {"grown", "unchanged"}
            third = ingest(store, [root], now=now)
            assert {f.status for f in third.files} == {"unchanged"}
            assert sum(sum(f.added.values()) for f in third.files) == 0
            return snapshot(store)

    at_once = ingest_in_parts(None, None)
    # cut the Gemini session just after its tool call was written "executing" (finished later)
    assert ingest_in_parts(10, 3) == at_once
    assert ingest_in_parts(9, 4) == at_once


def test_truncated_and_garbage_lines_are_counted_not_fatal(tmp_path, store, now):
    codex = codex_copy(tmp_path / "codex")
    gemini = gemini_copy(tmp_path / "gemini")
    for path in (codex, gemini):
        lines = path.read_bytes().splitlines(keepends=True)
        lines.insert(3, b'{"timestamp":"2026-11-20T10:00:01.000Z","type":"response_item","payl\n')  # truncated
        lines.insert(5, b"\x00\xff\xfe binary garbage\n")
        lines.insert(7, b"[1, 2, 3]\n")
        path.write_bytes(b"".join(lines))
    summary = ingest(store, [tmp_path], now=now)
    assert not summary.problems
    by_agent = {f.agent: f for f in summary.files}
    for agent in ("codex", "gemini"):
        assert by_agent[agent].status == "new"
        assert by_agent[agent].rejected.get("invalid JSON") == 2
        assert by_agent[agent].rejected.get("not a JSON object") == 1
    assert len(episodes(store, "error")) == 4  # 2 + 2, as without the garbage


def test_formats_not_supported_get_a_named_skip(tmp_path, store, now):
    legacy = tmp_path / "sessions" / "2025" / "05" / "01" / "rollout-2025-05-01T10-00-00-abc.jsonl"
    legacy.parent.mkdir(parents=True)
    legacy.write_text(json.dumps({"id": "abc", "timestamp": "2025-05-01T10:00:00Z", "instructions": None}) + "\n"
                      + json.dumps({"type": "message", "role": "user", "content": []}) + "\n")
    zst = CODEX_ROLLOUT.name.replace(".jsonl", ".jsonl.zst")
    (legacy.parent / zst).write_bytes(b"(\xb5/\xfd synthetic, not a real zstd frame")
    chats = tmp_path / "gemini" / "tmp" / "p" / "chats"
    chats.mkdir(parents=True)
    (chats / "session-2026-01-01T00-00-aaaa.json").write_text(json.dumps({"sessionId": "aaaa", "version": 9}))
    summary = ingest(store, [tmp_path], now=now)
    skipped = {Path(f.path).name: f for f in summary.files}
    assert {f.status for f in skipped.values()} == {"unsupported"}
    assert skipped[legacy.name].reason.startswith("codex rollout, version ")
    assert skipped[legacy.name].reason.endswith(": not supported yet")
    assert "zstandard" in skipped[zst].reason or "zstd" in skipped[zst].reason
    assert skipped["session-2026-01-01T00-00-aaaa.json"].reason == \
        "gemini chat (.json), version 9: not supported yet"
    again = ingest(store, [tmp_path], now=now)
    assert {f.status for f in again.files} == {"unsupported"}  # still named, without reading again
    assert all(f.reason.endswith("(unchanged)") for f in again.files)
    assert episodes(store) == []


def test_a_zst_rollout_is_read_when_zstandard_is_there(tmp_path, store, now):
    import pytest

    zstandard = pytest.importorskip("zstandard", reason="the optional zstandard module is not installed here")
    path = tmp_path / CODEX_ROLLOUT.name.replace(".jsonl", ".jsonl.zst")
    path.write_bytes(zstandard.ZstdCompressor().compress(CODEX_ROLLOUT.read_bytes()))
    [result] = ingest(store, [path], now=now).files
    assert result.status == "new" and result.added.get("error") == 2


def test_a_file_given_by_name_is_read_by_its_own_adapter(tmp_path, store, now):
    renamed = tmp_path / "some-name.jsonl"
    shutil.copy(CODEX_ROLLOUT, renamed)
    assert adapter_for(renamed, sniff=True).name == "codex"
    [result] = ingest(store, [renamed], now=now).files
    assert (result.agent, result.added.get("error")) == ("codex", 2)


def test_rebuild_from_the_archive_gives_the_same_episodes(tmp_path, store, now):
    root = tmp_path / "in"
    codex_copy(root / "codex")
    gemini_copy(root / "gemini")
    shutil.copy(GEMINI_JSON, root / "gemini" / "tmp" / "webapp" / "chats")
    ingest(store, [root], now=now)
    before = snapshot(store)
    shutil.rmtree(root)  # the originals are gone: the archive has them
    summary = rebuild_from_archive(store, now=now)
    assert {f.status for f in summary.files} == {"rebuilt"}
    assert snapshot(store) == before


def test_the_default_sources_include_codex_and_gemini_folders(tmp_path, now):
    from openmemory_local.storage.store import Store

    env = {"HOME": str(tmp_path / "user"), "CODEX_HOME": str(tmp_path / "codex-home"),
           "GEMINI_CLI_HOME": str(tmp_path / "gemini-home")}
    config = load_config(str(tmp_path / "data"), env)
    assert tmp_path / "codex-home" / "sessions" in config.agent_sources
    assert tmp_path / "gemini-home" / ".gemini" / "tmp" in config.agent_sources
    codex_copy(tmp_path / "codex-home")
    gemini_copy(tmp_path / "gemini-home" / ".gemini")
    with Store.open(config) as store:
        summary = ingest(store, None, now=now)
        assert sorted(f.agent for f in summary.files) == ["codex", "gemini"]
        assert summary.missing_sources == [str(tmp_path / "user" / ".claude" / "projects")]


def test_a_zst_rollout_without_zstandard_is_a_named_skip(tmp_path, store, now, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "zstandard", None)  # as if it were not installed
    path = tmp_path / CODEX_ROLLOUT.name.replace(".jsonl", ".jsonl.zst")
    path.write_bytes(b"(\xb5/\xfd synthetic")
    [result] = ingest(store, [path], now=now).files
    assert result.status == "unsupported"
    assert "needs the zstandard module" in result.reason


def test_exit_codes_are_read_from_every_shape_the_agents_write():
    from openmemory_local.ingest.adapters.base import exit_code_in

    cases = [
        ("Exit code: 128\nWall time: 0.4 seconds\nOutput:\nfatal: x\n", (128, "output", "fatal: x\n")),
        ("Chunk ID: 3f2a\nWall time: 0.05 seconds\nProcess exited with code 2\nOriginal token count: 5\nOutput:\nboom\n",
         (2, "output", "boom\n")),
        ('{"output":"x","metadata":{"exit_code":3,"duration_seconds":1}}', (3, "metadata", "x")),
        ({"output": "y", "metadata": {"exit_code": 0}}, (0, "metadata", "y")),
        ("Command: ls\nDirectory: (root)\nOutput: nope\nError: (none)\nExit Code: 2\nSignal: (none)", (2, "output", "nope")),
        ("Process running with session ID 73\n\nOutput:\nstill", (None, None, "Process running with session ID 73\n\nOutput:\nstill")),
        ("the program printed Exit code: 5 in its output", (None, None, "the program printed Exit code: 5 in its output")),
        ('{"output": "not an envelope"', (None, None, '{"output": "not an envelope"')),
    ]
    for output, expected in cases:
        assert exit_code_in(output) == expected, output


def test_codex_rejections_and_tool_errors_without_an_exit_code(tmp_path, store, now):
    path = codex_copy(tmp_path / "codex")
    extra = [
        {"type": "function_call", "name": "shell", "arguments": json.dumps({"command": ["bash", "-lc", "rm -rf build"]}),
         "call_id": "call_rej"},
        {"type": "function_call_output", "call_id": "call_rej", "output": "exec command rejected by user"},
        {"type": "function_call", "name": "shell", "arguments": "{not json", "call_id": "call_bad"},
        {"type": "function_call_output", "call_id": "call_bad",
         "output": "failed to parse function arguments: key must be a string at line 1 column 2"},
    ]
    with open(path, "a") as f:
        for payload in extra:
            f.write(json.dumps({"timestamp": "2026-11-20T10:06:00.000Z", "type": "response_item",
                                "payload": payload}) + "\n")
    ingest(store, [path], now=now)
    failures = {e["fields"]["call_id"]: e["fields"]["failure"] for e in episodes(store, "error")}
    assert failures["call_rej"] == "rejected" and failures["call_bad"] == "error"


def test_a_gemini_session_outside_its_layout_is_still_found_and_read(tmp_path, store, now):
    loose = tmp_path / "held-out"
    loose.mkdir()
    shutil.copy(GEMINI_JSON, loose)  # a .json session in a folder of no particular name
    report = GEMINI_JSON.read_text().replace("Output: \\nError: sh: 1: vite: not found",
                                             "Stdout: (empty)\\nStderr: sh: 1: vite: not found")
    assert report != GEMINI_JSON.read_text()
    (loose / "session-2026-10-21T14-00-0e9d8c7c.json").write_text(
        report.replace("0e9d8c7b-6a5f-4e3d-2c1b-0a9f8e7d6c5b", "0e9d8c7c-6a5f-4e3d-2c1b-0a9f8e7d6c5b")
        .replace("ffee01", "ffee02"))
    summary = ingest(store, [loose], now=now)
    assert [f.agent for f in summary.files] == ["gemini", "gemini"]
    lines = sorted(e["fields"]["first_line"] for e in episodes(store, "error"))
    assert lines == ["sh: 1: vite: not found", "sh: 1: vite: not found"]  # older Stdout/Stderr reports too
