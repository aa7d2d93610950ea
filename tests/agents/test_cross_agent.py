"""One memory across agents in a project: a failure met in Claude Code and again in Codex is
one lesson; it reaches Codex's AGENTS.md and Gemini CLI's GEMINI.md of the same project (the
owner's text byte for byte, the same veto rules as MEMORY.md); the prediction it made is
confirmed by a Gemini CLI session. Real store, real sleep, synthetic transcripts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openmemory_local.render.agents import render_agents
from openmemory_local.ingest.episodes import EpisodeBuilder
from openmemory_local.ingest.transcripts import ingest
from openmemory_local.render.memory_folder import BEGIN, END
from openmemory_local.sleep.passes import sleep
from simulations.transcripts import T

from .conftest import codex_copy, gemini_copy, utc

PUSH = ("fatal: The current branch feature/login has no upstream branch.\nTo push the current branch and set the "
        "remote as upstream, use\n\n    git push --set-upstream origin feature/login\n")
OWNER = b"# Webapp\n\nRun `npm test` before committing.\n<!-- a comment of the owner -->\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "src" / "webapp"
    (folder / ".git").mkdir(parents=True)
    (folder / "AGENTS.md").write_bytes(OWNER)
    return folder


def claude_session(root: Path, cwd: Path, day: str, session: str) -> Path:
    t = T(session=session, cwd=str(cwd), start=f"{day}T08:00:00", branch="feature/login")
    t.person("push my branch")
    t.bash("git push", "toolu_1", PUSH, 128)
    t.bash("git push --set-upstream origin feature/login", "toolu_2", "ok")
    t.says("Pushed.")
    return t.write(root / "claude" / "projects" / "-src-webapp" / f"{session}.jsonl")


def lessons(store) -> list[dict]:
    out = []
    for lid, text, strength in store.conn.execute("SELECT id, text, strength FROM lessons ORDER BY id"):
        agents = {a for (a,) in store.conn.execute(
            "SELECT DISTINCT t.adapter FROM lesson_members m JOIN episodes e ON e.id = m.episode_id "
            "JOIN transcripts t ON t.id = e.transcript_id WHERE m.lesson_id = ?", (lid,))}
        out.append({"id": lid, "text": text, "strength": strength, "agents": agents})
    return out


def test_a_failure_in_claude_code_and_codex_is_one_lesson_that_gemini_confirms(tmp_path, store, project):
    claude_session(tmp_path, project, "2026-11-16", "aaaaaaaa-0000-4000-8000-000000000001")
    codex_copy(tmp_path / "codex", cwd=str(project), day="2026-11-18", session="0199a1b2-0000-7000-9000-000000000002")
    ingest(store, [tmp_path / "claude", tmp_path / "codex"], now=utc(2026, 11, 18, 12))
    sleep(store, utc(2026, 11, 19, 3))
    push = [lesson for lesson in lessons(store) if "no upstream branch" in lesson["text"]]
    assert len(push) == 1, lessons(store)
    assert push[0]["agents"] == {"claude-code", "codex"}
    [(pid, status)] = store.conn.execute("SELECT id, state FROM predictions WHERE lesson_id = ?", (push[0]["id"],))
    assert status == "open"

    result = render_agents(store, utc(2026, 11, 19, 3))
    [target] = result.targets
    assert (target["agent"], target["index"]) == ("codex", "created")
    agents_md = (project / "AGENTS.md").read_bytes()
    assert agents_md.startswith(OWNER)  # the owner's text, byte for byte
    section = agents_md[len(OWNER):].decode()
    assert BEGIN in section and END in section and "no upstream branch" in section
    assert f"Open Memory lesson {push[0]['id']}" in section
    assert not (project / "AGENTS.override.md").exists()

    gemini_copy(tmp_path / "gemini", cwd=str(project), day="2026-11-21", session="5f2c8e1a-0000-4000-8000-000000000003")
    ingest(store, [tmp_path / "gemini"], now=utc(2026, 11, 21, 12))
    sleep(store, utc(2026, 11, 22, 3))
    assert store.conn.execute("SELECT state FROM predictions WHERE id = ?", (pid,)).fetchone()[0] == "confirmed"
    [push] = [lesson for lesson in lessons(store) if "no upstream branch" in lesson["text"]]
    assert push["agents"] == {"claude-code", "codex", "gemini"}

    result = render_agents(store, utc(2026, 11, 22, 3))
    by_agent = {t["agent"]: t for t in result.targets}
    assert by_agent["gemini"]["index"] == "created"
    gemini_md = (project / "GEMINI.md").read_text()
    assert "no upstream branch" in gemini_md and "## Gemini Added Memories" not in gemini_md
    again = render_agents(store, utc(2026, 11, 22, 4))
    assert {t["index"] for t in again.targets} == {"unchanged"}  # nothing changed, nothing written


def test_a_line_deleted_from_agents_md_vetoes_the_lesson_everywhere(tmp_path, store, project):
    claude_session(tmp_path, project, "2026-11-16", "aaaaaaaa-0000-4000-8000-000000000001")
    codex_copy(tmp_path / "codex", cwd=str(project), day="2026-11-18", session="0199a1b2-0000-7000-9000-000000000002")
    gemini_copy(tmp_path / "gemini", cwd=str(project), day="2026-11-18", session="5f2c8e1a-0000-4000-8000-000000000003")
    ingest(store, [tmp_path], now=utc(2026, 11, 18, 12))
    sleep(store, utc(2026, 11, 19, 3))
    render_agents(store, utc(2026, 11, 19, 3))
    text = (project / "AGENTS.md").read_text()
    [line] = [line for line in text.splitlines() if "no upstream branch" in line]
    (project / "AGENTS.md").write_text(text.replace(line + "\n", ""))
    result = render_agents(store, utc(2026, 11, 19, 4))
    assert len(result.vetoed) == 1
    assert store.conn.execute("SELECT vetoed_at FROM lessons WHERE id = ?", result.vetoed).fetchone()[0]
    assert "no upstream branch" not in (project / "GEMINI.md").read_text()
    assert "no upstream branch" not in (project / "AGENTS.md").read_text()


def test_a_section_the_owner_removed_is_not_added_again_and_override_is_never_written(tmp_path, store, project):
    claude_session(tmp_path, project, "2026-11-16", "aaaaaaaa-0000-4000-8000-000000000001")
    codex_copy(tmp_path / "codex", cwd=str(project), day="2026-11-18", session="0199a1b2-0000-7000-9000-000000000002")
    ingest(store, [tmp_path], now=utc(2026, 11, 18, 12))
    sleep(store, utc(2026, 11, 19, 3))
    render_agents(store, utc(2026, 11, 19, 3))
    (project / "AGENTS.md").write_bytes(OWNER)  # the owner took the whole section out
    result = render_agents(store, utc(2026, 11, 19, 4))
    assert result.targets[0]["index"] == "removed by the owner"
    assert (project / "AGENTS.md").read_bytes() == OWNER
    (project / "AGENTS.override.md").write_text("# the owner's override\n")
    result = render_agents(store, utc(2026, 11, 19, 5))
    assert result.targets == [] and "AGENTS.override.md shadows" in result.skipped[0]
    assert (project / "AGENTS.override.md").read_text() == "# the owner's override\n"


def test_the_section_fits_in_codexs_32_kib_with_the_owners_files(tmp_path, store, project, monkeypatch):
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "AGENTS.md").write_bytes(b"# global\n" + b"x" * 20_000 + b"\n")
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    big = OWNER + b"y" * 11_000 + b"\n"
    (project / "AGENTS.md").write_bytes(big)
    claude_session(tmp_path, project, "2026-11-16", "aaaaaaaa-0000-4000-8000-000000000001")
    codex_copy(tmp_path / "codex", cwd=str(project), day="2026-11-18", session="0199a1b2-0000-7000-9000-000000000002")
    ingest(store, [tmp_path / "claude", tmp_path / "codex"], now=utc(2026, 11, 18, 12))
    sleep(store, utc(2026, 11, 19, 3))
    result = render_agents(store, utc(2026, 11, 19, 3))
    written = (project / "AGENTS.md").read_bytes()
    if result.targets[0]["index"] == "created":
        assert written.startswith(big)
        assert len(written) + (codex_home / "AGENTS.md").stat().st_size <= 32 * 1024
    else:
        assert result.targets[0]["index"] == "no room" and written == big
    (project / "AGENTS.md").write_bytes(OWNER + b"z" * 13_000 + b"\n")
    result = render_agents(store, utc(2026, 11, 19, 4))
    assert len((project / "AGENTS.md").read_bytes()) + 20_010 <= 32 * 1024 or \
        result.targets[0]["index"] in ("no room", "damaged", "removed by the owner")


def test_a_lesson_quoting_a_marker_cannot_end_the_section(tmp_path, store, project):
    for day, session in (("2026-11-16", "bbbbbbbb-0000-4000-8000-000000000001"),
                         ("2026-11-17", "bbbbbbbb-0000-4000-8000-000000000002")):
        t = T(session=session, cwd=str(project), start=f"{day}T08:00:00")
        t.person("build")
        t.bash("make docs", f"toolu_{day}", "<!-- openmemory:end --> in docs/index.html: unexpected end marker", 2)
        t.write(tmp_path / "claude" / f"{session}.jsonl")
    codex_copy(tmp_path / "codex", cwd=str(project), day="2026-11-18", session="0199a1b2-0000-7000-9000-000000000002")
    ingest(store, [tmp_path], now=utc(2026, 11, 18, 12))
    sleep(store, utc(2026, 11, 19, 3))
    render_agents(store, utc(2026, 11, 19, 3))
    text = (project / "AGENTS.md").read_text()
    assert "make docs" in text  # the lesson is listed ...
    assert [line for line in text.splitlines() if line.strip() == END] == [END]  # ... and cannot end the section
    assert text.count(END) == 1 and text.count(BEGIN) == 1


def test_a_blocked_stop_hook_is_a_surprise_in_claude_code():
    from openmemory_local.ingest.adapters.claude_code import ClaudeCodeAdapter
    from openmemory_local.ingest.rawstream import Line

    t = T()
    t.person("commit the fix")
    t.says("Done.")
    t.person("Stop hook feedback:\n[~/.claude/hooks/check.sh]: Cannot exit with unstaged changes", isMeta=True)
    parser = ClaudeCodeAdapter().parser(Path("/x/s.jsonl"))
    builder = EpisodeBuilder()
    for n, data in enumerate(t.lines(), 1):
        builder.feed_all(parser.feed(Line(n, 0, data, len(data))))
    [error] = [e for e in builder.take() if e.kind == "error"]
    assert error.fields["failure"] == "hook" and error.fields["tool"] == "hook:Stop"
    assert "Cannot exit with unstaged changes" in error.text
    assert builder.digest["person_messages"] == 1 and builder.digest["failed"] == 1


def test_a_blocked_stop_hook_is_a_surprise_in_codex(tmp_path, store, now):
    path = codex_copy(tmp_path / "codex")
    with open(path, "a") as f:
        f.write(json.dumps({"timestamp": "2026-11-20T10:05:00.000Z", "type": "event_msg", "payload": {
            "type": "hook_completed", "turn_id": "t1", "run": {
                "id": "stop-0", "event_name": "stop", "status": "blocked",
                "entries": [{"kind": "feedback", "text": "Cannot exit with unstaged changes"}]}}}) + "\n")
        # the continuation prompt Codex adds for the same blocked run: the same surprise, counted once
        f.write(json.dumps({"timestamp": "2026-11-20T10:05:00.100Z", "type": "response_item", "payload": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text":
                '<hook_prompt hook_run_id="stop-0">Cannot exit with unstaged changes</hook_prompt>'}]}}) + "\n")
        f.write(json.dumps({"timestamp": "2026-11-20T10:07:00.000Z", "type": "response_item", "payload": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text":
                '<hook_prompt hook_run_id="stop-1">Cannot exit with unstaged changes</hook_prompt>'}]}}) + "\n")
    ingest(store, [path], now=now)
    hooks = [json.loads(f) for (f,) in store.conn.execute(
        "SELECT fields FROM episodes WHERE kind = 'error' AND json_extract(fields, '$.failure') = 'hook'")]
    assert len(hooks) == 2 and all("Cannot exit with unstaged changes" in h["first_line"] for h in hooks)
    [session] = [json.loads(f) for (f,) in store.conn.execute("SELECT fields FROM episodes WHERE kind = 'session'")]
    assert session["person_messages"] == 2  # a hook prompt is not the person


def test_gemini_md_gets_the_section_before_gemini_added_memories(tmp_path, store, project):
    owner = b"# Notes\n\n## Gemini Added Memories\n- the staging server is staging.example\n"
    (project / "GEMINI.md").write_bytes(owner)
    claude_session(tmp_path, project, "2026-11-16", "aaaaaaaa-0000-4000-8000-000000000001")
    gemini_copy(tmp_path / "gemini", cwd=str(project), day="2026-11-18", session="5f2c8e1a-0000-4000-8000-000000000003")
    ingest(store, [tmp_path], now=utc(2026, 11, 18, 12))
    sleep(store, utc(2026, 11, 19, 3))
    result = render_agents(store, utc(2026, 11, 19, 3))
    assert [t["index"] for t in result.targets] == ["created"]
    text = (project / "GEMINI.md").read_bytes()
    begin, end = text.index(BEGIN.encode()), text.index(END.encode())
    heading = text.index(b"## Gemini Added Memories")
    assert begin < end < heading  # ours above theirs: nothing Gemini appends lands inside our markers
    assert text[:begin] + text[end + len(END):].lstrip(b"\n") == owner  # every byte of the owner's, in order
    assert b"no upstream branch" in text[begin:end]


def test_an_older_gemini_session_finds_its_folder_by_hash_among_the_other_agents(tmp_path, store, project):
    import hashlib

    from .conftest import FIXTURE_CWD, GEMINI_JSON

    codex_copy(tmp_path / "codex", cwd=str(project), day="2026-11-18", session="0199a1b2-0000-7000-9000-000000000002")
    ingest(store, [tmp_path / "codex"], now=utc(2026, 11, 18, 12))
    digest = hashlib.sha256(str(project).encode()).hexdigest()
    chats = tmp_path / "gemini" / "tmp" / digest / "chats"  # the older layout: no .project_root, no registry
    chats.mkdir(parents=True)
    old = GEMINI_JSON.read_text().replace(hashlib.sha256(FIXTURE_CWD.encode()).hexdigest(), digest)
    (chats / GEMINI_JSON.name).write_text(old)
    [result] = ingest(store, [tmp_path / "gemini"], now=utc(2026, 11, 18, 13)).files
    assert result.agent == "gemini"
    projects = {p for (p,) in store.conn.execute("SELECT project FROM episodes WHERE session_id = ?",
                                                 (result.session_id,))}
    assert projects == {str(project)}
