"""The Claude Code adapter on small synthetic transcripts: every record type and failure
shape of the real ones, and the rule that only the person's own words count as the person."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openmemory_local.ingest.adapters.claude_code import ClaudeCodeAdapter
from openmemory_local.ingest.episodes import EpisodeBuilder, session_episode
from openmemory_local.ingest.transcripts import ingest
from openmemory_local.ingest.rawstream import Consumed, LineReader

from .transcripts import SESSION, T

ADAPTER = ClaudeCodeAdapter()


def run(t: T | list[bytes], path: Path, has_subagent=None):
    """Parse a transcript with the adapter and the builder: (episodes, digest, parser)."""
    lines = t.lines() if isinstance(t, T) else t
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(lines))
    parser = ADAPTER.parser(path, None, has_subagent)
    builder = EpisodeBuilder()
    with open(path, "rb") as f:
        for line in LineReader(f, Consumed(), max_line_bytes=1 << 20):
            builder.feed_all(parser.feed(line))
    return builder.take(), builder.digest, parser


def kinds(episodes, kind):
    return [e for e in episodes if e.kind == kind]


# --- the person, and what is not the person ------------------------------------------


NOT_THE_PERSON_OPENING_WITH_CORRECTION_WORDS = [
    # (how it appears, why it is not the person)
    lambda t: t.person("This session is being continued from a previous conversation. No, wrong.",
                       isCompactSummary=True, isVisibleInTranscriptOnly=True),
    lambda t: t.person("<task-notification>\n<status>completed</status>\nNo output</task-notification>"),
    lambda t: t.person("<local-command-stdout>No changes</local-command-stdout>"),
    lambda t: t.person("<local-command-caveat>Caveat: don't respond</local-command-caveat>", isMeta=True),
    lambda t: t.person("<command-name>/model</command-name>\n<command-message>model</command-message>\n"
                       "<command-args>stop</command-args>"),
    lambda t: t.person("Stop hook feedback:\nNo tests were run"),
    lambda t: t.person("Don't enter plan mode. This skill only creates beads.", isMeta=True,
                       sourceToolUseID="toolu_x"),
    lambda t: t.person("Base directory for this skill: /x\n\nNo, never do this"),
    lambda t: t.person("<system-reminder>\nPostToolUse:Edit hook additional context: wrong</system-reminder>"),
    lambda t: t.person("[Request interrupted by user]"),
    lambda t: t.result("toolu_nope", "No such file or directory", True),
    lambda t: t.user_blocks([{"type": "text", "text": "<bash-stdout>no</bash-stdout>"}]),
]


@pytest.mark.parametrize("make", NOT_THE_PERSON_OPENING_WITH_CORRECTION_WORDS)
def test_text_that_is_not_the_person_never_makes_a_correction(make, tmp_path):
    t = T()
    t.person("please fix the build")
    t.says("I changed the config and the build passes now.")
    make(t)
    episodes, digest, _ = run(t, tmp_path / "s.jsonl")
    assert kinds(episodes, "correction") == []
    assert digest["person_messages"] == 1


@pytest.mark.parametrize("message,opening", [
    ("no, use uv instead of pip", "no"),
    ("No. That's the wrong file", "no"),
    ("don't use pip here", "dont"),  # names what the agent just ran
    ("Don\u2019t install with pip", "dont"),
    ("stop, the tests are slow", "stop"),
    ("instead run mix format first", "actually"),
    ("undo that change", "undo"),
    ("wrong branch", "wrong"),
    ("ok, no, revert it", "undo"),  # the cue after the interjection
    ("that's not what I asked", "restated"),
    ("the install still fails", "still"),
])
def test_corrections_by_the_person(message, opening, tmp_path):
    t = T()
    t.person("set up the project")
    t.says("I installed the dependencies with pip.")
    t.call("Bash", {"command": "pip install -r requirements.txt"}, "toolu_1")
    t.result("toolu_1", "installed", False)
    t.person(message)
    line = len(t.records)
    t.says("OK.")  # the agent's answer: a message is decided with what the agent did next
    episodes, digest, _ = run(t, tmp_path / "s.jsonl")
    [c] = kinds(episodes, "correction")
    assert c.fields["opening"] == opening == c.fields["cue"]
    assert c.fields["message"] == message
    assert c.fields["agent_statement"] == "I installed the dependencies with pip."
    assert c.fields["agent_action"]["command"] == "pip install -r requirements.txt"
    assert c.text.startswith("The person corrected the agent")
    assert c.source_line == line
    assert digest["corrections"] == 1


@pytest.mark.parametrize("message", ["nothing else", "now run the tests", "notice the warning",
                                     "stopwatch module is slow", "insteadof is a git option",
                                     "knowing that, continue", "Actually, can you also add a test?",
                                     "Wait for the build", "don't push to main yet"])
def test_words_that_only_start_like_a_correction_are_not_one(message, tmp_path):
    t = T()
    t.person("hello")
    t.says("Hi.")
    t.person(message)
    episodes, _, _ = run(t, tmp_path / "s.jsonl")
    assert kinds(episodes, "correction") == []


def test_actually_is_a_correction_only_about_what_the_agent_did(tmp_path):
    """Issue 32: "actually ..." corrects when it refers to the agent's last work (a word of its
    statement or calls) and the agent does not simply carry on with other work."""
    t = T()
    t.person("set the log level")
    t.call("Edit", {"file_path": "/home/me/app/config/config.exs", "old_string": "a", "new_string": "b"}, "t1")
    t.result("t1", "The file /home/me/app/config/config.exs has been updated.", False)
    t.says("I changed config/config.exs.")
    t.person("actually the config lives in config/dev.exs")
    t.call("Edit", {"file_path": "/home/me/app/config/config.exs", "old_string": "b", "new_string": "a"}, "t2")
    t.result("t2", "The file /home/me/app/config/config.exs has been updated.", False)
    [c] = kinds(run(t, tmp_path / "a.jsonl")[0], "correction")
    assert c.fields["cue"] == "actually" and c.fields["course"] == "redo"
    t = T()
    t.person("set up the project")
    t.bash("pip install -r requirements.txt", "t1", "installed", 0)
    t.says("I installed the dependencies.")
    t.person("actually the release notes live in docs/releases, add today's there")
    t.call("Write", {"file_path": "/home/me/app/docs/releases/2026-12-03.md", "content": "x"}, "t2")
    t.result("t2", "File created", False)
    assert kinds(run(t, tmp_path / "b.jsonl")[0], "correction") == []


def test_a_no_that_answers_the_agents_question_is_not_a_correction(tmp_path):
    t = T()
    t.person("add the bindings")
    t.says("I added the Rust API. Should I add Python bindings too?")
    t.person("No Python bindings needed")
    t.person("no")
    assert kinds(run(t, tmp_path / "s.jsonl")[0], "correction") == []


def test_a_complaint_that_it_still_does_not_work_is_a_correction(tmp_path):
    t = T()
    t.person("fix scrolling")
    t.call("Edit", {"file_path": "/home/me/app/term.js", "old_string": "a", "new_string": "b"}, "t1")
    t.result("t1", "The file /home/me/app/term.js has been updated.", False)
    t.says("Scrolling should work now.")
    t.person("scrolling still does not work")
    t.says("Let me look again.")
    [c] = kinds(run(t, tmp_path / "s.jsonl")[0], "correction")
    assert c.fields["cue"] == "still" and c.fields["agent_action"]["tool"] == "Edit"


def test_a_correction_in_a_subagent_transcript_is_never_the_person(tmp_path):
    t = T(agent="a1b2c3")
    t.person("No, do not read the whole tree; explore lib/ only.")  # the parent agent's prompt
    t.says("Exploring.")
    t.person("Stop after three files.")
    path = tmp_path / SESSION / "subagents" / "agent-a1b2c3.jsonl"
    episodes, digest, parser = run(t, path)
    assert parser.role == "subagent"
    assert kinds(episodes, "correction") == []
    assert digest["person_messages"] == 0
    assert digest["prompt"].startswith("No, do not read")


def test_rejection_feedback_is_a_correction_and_the_call_a_failure(tmp_path):
    t = T()
    t.person("add the dependency")
    t.says("I'll install it with pip.")
    t.call("Bash", {"command": "pip install requests", "description": "Install"}, "toolu_1")
    t.result("toolu_1", "The user doesn't want to proceed with this tool use. The tool use was rejected "
             "(eg. if it was a file edit, the new_string was NOT written to the file). To tell you how "
             "to proceed, the user said:\nuse uv add, this project uses uv", True, "User rejected tool use")
    episodes, digest, _ = run(t, tmp_path / "s.jsonl")
    [error] = kinds(episodes, "error")
    assert error.fields["failure"] == "rejected"
    assert error.text == "Bash `pip install requests` was rejected by the person (Install)."
    [c] = kinds(episodes, "correction")
    assert c.fields["message"] == "use uv add, this project uses uv"
    assert c.fields["opening"] == "rejected"
    assert c.fields["agent_statement"] == "I'll install it with pip."


def test_queued_messages_are_the_person_and_count_once(tmp_path):
    t = T()
    t.person("run the suite")
    t.says("Running.")
    t.raw({"type": "queue-operation", "operation": "enqueue", "timestamp": "2026-02-10T10:00:01.000Z",
           "sessionId": SESSION, "content": "no, only the unit tests"})
    t.raw({"type": "queue-operation", "operation": "enqueue", "timestamp": "2026-02-10T10:00:01.000Z",
           "sessionId": SESSION, "content": "<task-notification>\nstop</task-notification>"})
    t.raw({"type": "queue-operation", "operation": "dequeue", "timestamp": "2026-02-10T10:00:02.000Z",
           "sessionId": SESSION})
    t.person("no, only the unit tests")  # the same message delivered as a turn
    t.says("Running the unit tests only.")
    episodes, digest, _ = run(t, tmp_path / "s.jsonl")
    assert digest["person_messages"] == 2
    [c] = kinds(episodes, "correction")
    assert c.fields["via"] == "queued"


# --- failures ---------------------------------------------------------------------------


def test_failure_shapes(tmp_path):
    t = T()
    t.person("go")
    t.bash("git push 2>&1", "t1", "fatal: The current branch x has no upstream branch.\n", 128, "Push")
    t.call("Edit", {"file_path": "/home/me/app/a.py", "old_string": "x", "new_string": "y"}, "t2")
    t.result("t2", "<tool_use_error>String to replace not found in file.\nString: x</tool_use_error>", True)
    t.call("Read", {"file_path": "/home/me/app/dir"}, "t3")
    t.result("t3", "EISDIR: illegal operation on a directory, read", True)
    t.call("Bash", {"command": "ls"}, "t4")
    t.result("t4", "<tool_use_error>Sibling tool call errored</tool_use_error>", True)
    t.call("Bash", {"command": "sleep 100"}, "t5")
    t.result("t5", "[Request interrupted by user for tool use]", True)
    t.call("Bash", {"command": "make"}, "t6")
    t.result("t6", "Exit code 2\nmake: *** No rule to make target 'all'.  Stop.")  # no is_error
    t.call("Bash", {"command": "true"}, "t7")
    t.result("t7", "Exit code 0\n", False)
    t.call("Bash", {"command": "cat notes"}, "t8")
    t.result("t8", "the word error appears here but the call worked", False)
    t.call("mcp__db__query", {"sql": "select 1"}, "t9")
    t.result("t9", [{"type": "text", "text": "permission denied for table x"}], True)
    episodes, digest, _ = run(t, tmp_path / "s.jsonl")
    errors = {e.key: e for e in kinds(episodes, "error")}
    assert set(errors) == {"t1", "t2", "t3", "t4", "t5", "t6", "t9"}
    assert errors["t1"].fields["exit_code"] == 128
    assert errors["t1"].fields["first_line"] == "fatal: The current branch x has no upstream branch."
    assert errors["t1"].text == ("Bash `git push 2>&1` failed with exit code 128: fatal: The current "
                                 "branch x has no upstream branch. (Push).")
    assert errors["t2"].fields["failure"] == "tool_use_error"
    assert errors["t2"].fields["command"] == "/home/me/app/a.py"
    assert errors["t3"].fields["failure"] == "error"
    assert errors["t4"].fields["failure"] == "cancelled"
    assert errors["t5"].fields["failure"] == "interrupted"
    assert errors["t6"].fields["exit_code"] == 2
    assert errors["t9"].fields["first_line"] == "permission denied for table x"
    assert errors["t9"].fields["command"] == '{"sql": "select 1"}'
    assert digest["failed"] == 7 and digest["tool_calls"] == 9
    assert digest["files_edited"] == ["a.py"]


def test_hook_failures_outside_tool_calls(tmp_path):
    t = T()
    t.person("go")
    t.says("Done.")
    t.system("stop_hook_summary", hookCount=1, hookInfos=[{"command": "check.sh"}],
             hookErrors=["check.sh: tests failed: 3 failures"], preventedContinuation=False)
    episodes, digest, _ = run(t, tmp_path / "s.jsonl")
    [e] = kinds(episodes, "error")
    assert e.fields["failure"] == "hook" and e.fields["tool"] == "hook:Stop"
    assert "tests failed" in e.text


def test_a_result_written_twice_and_a_call_written_twice_count_once(tmp_path):
    t = T()
    t.person("go")
    t.bash("false", "t1", "", 1)
    t.records.append(dict(t.records[-2]))  # the call again
    t.records.append(dict(t.records[-2]))  # the result again
    episodes, digest, _ = run(t, tmp_path / "s.jsonl")
    assert len(kinds(episodes, "error")) == 1
    assert digest["tool_calls"] == 1


def test_one_model_response_over_several_lines_is_one_turn(tmp_path):
    t = T()
    t.person("go")
    t.says("Let me look.", msg_id="msg_A")
    t.call("Read", {"file_path": "/home/me/app/x"}, "t1", msg_id="msg_A")
    t.says("Let me look.", msg_id="msg_A")  # the same block repeated on another line
    t.result("t1", "content", False)
    t.says("Found it.", msg_id="msg_B")
    _, digest, _ = run(t, tmp_path / "s.jsonl")
    assert digest["agent_turns"] == 2
    assert digest["last_agent"]["text"] == "Found it."


def test_a_correction_on_another_branch_quotes_that_branch(tmp_path):
    """parentUuid branches: the person edits an earlier message (a rewind)."""
    t = T()
    t.person("write the parser")
    branch_point = t.says("I'll write it for the JSON format.")
    t.person("ok")
    t.says("I wrote a JSON parser with the json module.")
    # The person rewinds to the plan and corrects it (on the question itself, "no" is an answer).
    t.person("no, YAML", parent=branch_point)
    t.says("Switching to YAML.")
    episodes, _, _ = run(t, tmp_path / "s.jsonl")
    [c] = kinds(episodes, "correction")
    assert c.fields["agent_statement"] == "I'll write it for the JSON format."


def test_compaction_keeps_the_thread(tmp_path):
    t = T()
    t.person("start")
    last = t.says("Step one is done.")
    t.system("compact_boundary", parentUuid=None, logicalParentUuid=last,
             compactMetadata={"trigger": "auto", "preTokens": 1})
    t.person("This session is being continued from a previous conversation that ran out of context.",
             isCompactSummary=True, isVisibleInTranscriptOnly=True)
    t.person("wrong step, redo step one")
    episodes, digest, _ = run(t, tmp_path / "s.jsonl")
    [c] = kinds(episodes, "correction")
    assert c.fields["agent_statement"] == "Step one is done."
    assert digest["compactions"] == 2


def test_unknown_types_summary_snapshots_and_commands(tmp_path):
    t = T()
    t.raw({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}, "isSnapshotUpdate": False})
    t.raw({"type": "summary", "summary": "Fix the flaky test", "leafUuid": "u1"})
    t.person("<command-message>review</command-message>\n<command-name>/review</command-name>\n"
             "<command-args>the parser module</command-args>")
    t.raw({"type": "telemetry-v9", "uuid": "zz", "sessionId": SESSION, "whatever": [1, 2]})
    t.system("local_command", content="<command-name>/model</command-name>\n<command-args></command-args>")
    episodes, digest, parser = run(t, tmp_path / "s.jsonl")
    assert parser.rejects == {}
    assert digest["title"] == "Fix the flaky test"
    assert digest["asked"]["text"] == "/review the parser module"
    assert digest["host_commands"] == ["/review the parser module", "/model"]
    assert digest["person_messages"] == 0


def test_a_missing_subagent_is_read_from_its_parent(tmp_path):
    """agent_progress echoes a subagent's messages: used only when its own file is missing."""
    t = T()
    t.person("plan it")
    t.call("Task", {"description": "Explore", "prompt": "look", "subagent_type": "Explore"}, "toolu_task")
    inner_call = {"type": "assistant", "timestamp": "2026-02-10T10:00:00.500Z", "message": {
        "id": "msg_sub", "role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_sub", "name": "Read", "input": {"file_path": "/home/me/app"}}]}}
    inner_result = {"type": "user", "timestamp": "2026-02-10T10:00:00.600Z", "message": {
        "role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_sub", "is_error": True,
                                     "content": "EISDIR: illegal operation on a directory, read"}]}}
    for inner in (inner_call, inner_result):
        t.progress({"type": "agent_progress", "agentId": "abc1234", "prompt": "look", "message": inner})
    t.result("toolu_task", "done", False)
    path = tmp_path / "p" / f"{SESSION}.jsonl"
    episodes, _, parser = run(t, path, has_subagent=lambda a: False)
    [e] = kinds(episodes, "error")
    assert e.agent_id == "abc1234" and e.fields["tool"] == "Read"
    assert parser.state()["fallback_agents"] == ["abc1234"]
    episodes, _, _ = run(t, path, has_subagent=lambda a: a == "abc1234")
    assert kinds(episodes, "error") == []


def test_subagents_attach_to_their_parent_and_orphans_stay(tmp_path, store, now):
    root = tmp_path / "projects" / "-home-me-app"
    parent = T()
    parent.person("explore and fix")
    parent.call("Task", {"description": "Explore code", "prompt": "explore"}, "toolu_t")
    parent.result("toolu_t", "found it", False)
    parent.says("Fixed.")
    sub = T(agent="a77")
    sub.person("explore the code")
    sub.bash("tree lib", "toolu_s", "(eval):1: command not found: tree", 127)
    orphan = T(session="99999999-0000-0000-0000-000000000000", agent="a88")
    orphan.person("look around")
    orphan.says("Looked.")
    sub.write(root / SESSION / "subagents" / "agent-a77.jsonl")
    orphan.write(root / orphan.session / "subagents" / "agent-a88.jsonl")
    summary = ingest(store, [root], now=now)
    assert summary.problems == []
    sessions = {e["key"]: e for e in store.episodes(kind="session")}
    assert sessions[orphan.session]["fields"]["orphan"] is True
    assert sessions[SESSION]["fields"]["orphan"] is True  # its parent is not written yet
    parent.write(root / f"{SESSION}.jsonl")
    ingest(store, [root], now=now)
    sessions = {e["key"]: e for e in store.episodes(kind="session")}
    s = sessions[SESSION]
    assert s["fields"]["orphan"] is False
    assert [a["agent_id"] for a in s["fields"]["subagents"]] == ["a77"]
    assert s["fields"]["failed"] == 1 and s["fields"]["asked"] == "explore and fix"
    assert s["fields"]["commands"] == {"tree": 1}
    [error] = store.episodes(kind="error")
    assert error["session_id"] == SESSION and error["agent_id"] == "a77"
    assert len(sessions) == 2


def test_session_episode_outcomes(tmp_path):
    def outcome(build) -> str:
        t = T()
        t.person("go")
        build(t)
        _, digest, parser = run(t, tmp_path / "s.jsonl")
        episode = session_episode(SESSION, [{"role": "main", "agent_id": None, "digest": digest}])
        return episode.fields["outcome"]

    assert outcome(lambda t: t.says("All done.")) == "completed"
    assert outcome(lambda t: t.person("[Request interrupted by user]")) == "interrupted"
    assert outcome(lambda t: t.bash("false", "x", "", 1)) == "failed"
    assert outcome(lambda t: (t.says("Done."), t.person("did you push?"))) == "waiting"


def test_bad_records_are_counted_not_fatal(tmp_path):
    t = T()
    t.person("go")
    lines = t.lines()
    lines += [
        b"{not json\n",
        b"[1, 2, 3]\n",
        b'{"no_type": true}\n',
        b'{"type": "assistant", "message": "a string, not an object"}\n',
        b'{"type": "user", "message": {"content": [{"type": "tool_result"}]}}\n',
        b"\xff\xfe\x00garbage\n",
        b"[" * 100000 + b"\n",
        b"\n",
    ]
    lines += T().lines()  # nothing
    t2 = T()
    t2.says("still here")
    lines += t2.lines()
    episodes, digest, parser = run(lines, tmp_path / "s.jsonl")
    assert parser.rejects == {
        "invalid JSON": 2,
        "invalid JSON (nested too deeply)": 1,
        "not a JSON object": 1,
        "no record type": 1,
    }
    assert digest["last_agent"]["text"] == "still here"


def test_a_lone_subagent_file_outside_the_layout_is_still_a_subagent(tmp_path):
    t = T(agent="aq1")
    t.person("do the thing")
    t.says("Done.")
    _, digest, parser = run(t, tmp_path / "some-file.jsonl")
    assert parser.role == "subagent" and parser.agent_id == "aq1"
    assert digest["person_messages"] == 0


def test_json_records_keep_their_key_order_assumption_safe(tmp_path):
    """The byte-level progress skip only skips records whose type really is progress."""
    t = T()
    t.person("go")
    # A tool result whose *text* mentions a progress record (escaped quotes) is parsed.
    t.bash("cat log.jsonl", "t1", '{"type":"progress","data":{}}\nfatal: bad', 1)
    episodes, _, _ = run(t, tmp_path / "s.jsonl")
    assert [e.key for e in kinds(episodes, "error")] == ["t1"]
    raw = (tmp_path / "s.jsonl").read_bytes()
    assert b'\\"type\\":\\"progress\\"' in raw
    json.loads(raw.splitlines()[-1])


def test_what_orjson_refuses_is_read_as_the_standard_library_reads_it_in_a_run_too(tmp_path):
    """A record is decoded from a view of its block: a lone surrogate escape and an integer beyond
    64 bits (orjson refuses both) still fall back to the standard library, as line by line."""
    t = T()
    t.person("go")
    t.says("a lone surrogate \ud800 in the text")
    t.call("Bash", {"command": "ls", "timeout": 10 ** 30}, "toolu_big")
    t.result("toolu_big", "Exit code 2\nls: cannot access 'x': No such file or directory")
    data = b"".join(t.lines())
    assert b"\\ud800" in data and b"1" + b"0" * 30 in data
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    by_line = ADAPTER.parser(path)
    events = [e for line in LineReader(open(path, "rb"), Consumed(), max_line_bytes=1 << 20)
              for e in by_line.feed(line)]
    in_runs = ADAPTER.parser(path)
    from_runs = in_runs.feed_run(data, 0, len(data), 0)
    assert from_runs == events and in_runs.rejects == by_line.rejects == {}
    assert any(getattr(e, "text", None) == "a lone surrogate \ud800 in the text" for e in from_runs)
    assert [type(e).__name__ for e in from_runs if getattr(e, "call_id", None) == "toolu_big"] == [
        "ToolCalled", "ToolReturned"]
