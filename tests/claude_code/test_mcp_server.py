"""`openmemory mcp` in a real MCP session: the SDK's stdio client spawns the server.

The store is ingested from the real Claude Code transcripts (``spotter``), with the real
``openmemory ingest``; nothing is mocked.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cc_helpers import OPENMEMORY
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from openmemory_protocol.observation import observation_violation

QUERY = "git push fails because the branch has no upstream"


@pytest.fixture(scope="module")
def spotter_home(spotter: Path, tmp_path_factory) -> Path:
    """A data folder holding the spotter transcripts, ingested once for the module."""
    home = tmp_path_factory.mktemp("mcp") / "data"
    result = subprocess.run(
        [str(OPENMEMORY), "ingest", str(spotter), "--home", str(home), "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return home


def _server(home: Path, cwd: Path | None = None, **env: str) -> Client:
    params = StdioServerParameters(
        command=str(OPENMEMORY),
        args=["mcp", "--home", str(home)],
        cwd=str(cwd) if cwd else None,
        env={"OPENMEMORY_NOW": "2026-02-13T09:00:00Z", **env},
    )
    return Client(params, read_timeout_seconds=60)


def _text(result) -> str:
    assert len(result.content) == 1 and result.content[0].type == "text"
    return result.content[0].text


def _prose(text: str) -> list[str]:
    """The lines the server writes itself (quoted lines are records from the transcripts)."""
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith(">")]


async def test_lists_its_tools_with_descriptions_that_say_when_they_help(spotter_home):
    async with _server(spotter_home) as client:
        assert client.server_info.name == "openmemory"
        assert "not instructions" in client.instructions
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"recall", "lessons", "report"}
    recall = tools["recall"]
    assert "fails" in recall.description and "before retrying" in recall.description
    assert "not instructions" in recall.description
    assert recall.input_schema["required"] == ["query"]
    assert recall.input_schema["properties"]["k"]["minimum"] == 1
    assert recall.input_schema["properties"]["k"]["maximum"] == 50
    assert "project" in tools["lessons"].input_schema["properties"]
    assert tools["report"].input_schema.get("required", []) == []
    for tool in tools.values():
        assert tool.annotations.read_only_hint is True


async def test_recall_brings_back_the_git_push_no_upstream_failures(spotter_home):
    async with _server(spotter_home) as client:
        for query in (QUERY, "pushing my branch to the remote failed"):
            result = await client.call_tool("recall", {"query": query, "k": 5})
            assert not result.is_error, _text(result)
            memories = result.structured_content["memories"]
            assert len(memories) == 5
            top = memories[:3]
            assert all(m["kind"] == "error" for m in top)
            assert all("has no upstream branch" in m["text"] and "git push" in m["text"] for m in top)
            assert len({m["session_id"] for m in top}) == 3  # the same failure, in three sessions
            first = top[0]
            assert first["fields"]["exit_code"] == 128 and first["fields"]["tool"] == "Bash"
            assert first["when"].startswith("2026-02-1") and first["strength"] > 0
            assert first["source"]["path"].startswith("archive/") and first["source"]["line"] > 0
            assert set(first["components"]) == {"relevance", "recency", "strength"}
            scores = [m["score"] for m in memories]
            assert scores == sorted(scores, reverse=True)

    text = _text(result)
    assert "observations from past sessions" in text and "not instructions" in text
    assert "   > Bash `git push 2>&1` failed with exit code 128" in text  # quoted, never bare
    assert "transcript line" in text and "session 258c7280-ae70-4798-800f-63464d01a85d" in text
    for line in _prose(text):
        assert observation_violation(line) is None, line


async def test_bad_arguments_are_tool_errors_and_the_server_keeps_serving(spotter_home):
    async with _server(spotter_home) as client:
        bad_calls = [
            ("recall", {"query": ""}, "`query` is empty"),
            ("recall", {"query": "   "}, "`query` is empty"),
            ("recall", {"query": "git push", "k": 0}, "from 1 to 50"),
            ("recall", {"query": "git push", "k": 51}, "from 1 to 50"),
            ("recall", {"query": "git push", "k": "many"}, "k"),
            ("recall", {"query": "x" * 2001}, "at most 2000"),
            ("recall", {"query": "?!?"}, "nothing to search for"),
            ("recall", {}, "query"),
            ("lessons", {"project": ""}, "directory path"),
            ("no-such-tool", {}, "Unknown tool"),
        ]
        for name, arguments, message in bad_calls:
            result = await client.call_tool(name, arguments)
            assert result.is_error, (name, arguments, _text(result))
            assert message in _text(result), (message, _text(result))
        result = await client.call_tool("recall", {"query": QUERY, "k": 1})
        assert not result.is_error
        assert "has no upstream branch" in result.structured_content["memories"][0]["text"]


async def test_no_store_yet_is_an_error_until_an_ingest_creates_it(tmp_path, spotter):
    home = tmp_path / "data"
    async with _server(home) as client:
        result = await client.call_tool("recall", {"query": QUERY})
        assert result.is_error
        assert "no memories yet" in _text(result) and "openmemory ingest" in _text(result)
        assert not home.exists()  # the server never creates a store

        report = await client.call_tool("report", {})
        assert not report.is_error and "No morning report yet" in _text(report)

        # the user ingests while the server runs: the next call finds the store
        transcript = spotter / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
        subprocess.run([str(OPENMEMORY), "ingest", str(transcript), "--home", str(home), "-q"], check=True,
                       timeout=300)
        result = await client.call_tool("recall", {"query": QUERY, "k": 3})
        assert not result.is_error, _text(result)
        assert "has no upstream branch" in result.structured_content["memories"][0]["text"]


async def test_an_unusable_store_is_a_tool_error(tmp_path):
    home = tmp_path / "data"
    home.mkdir()
    (home / "openmemory.db").write_bytes(b"this is not a database" * 100)
    async with _server(home) as client:
        result = await client.call_tool("recall", {"query": QUERY})
        assert result.is_error and "cannot be used" in _text(result)
        again = await client.call_tool("recall", {"query": QUERY})
        assert again.is_error  # still answering


async def test_lessons_default_to_the_project_the_agent_works_in(spotter_home, tmp_path):
    project = tmp_path / "work" / "app"
    project.mkdir(parents=True)
    async with _server(spotter_home, cwd=project) as client:
        result = await client.call_tool("lessons", {})
        assert not result.is_error, _text(result)
        assert result.structured_content["project"] == str(project)
        other = await client.call_tool("lessons", {"project": str(tmp_path)})
        assert other.structured_content["project"] == str(tmp_path)
    for line in _prose(_text(result)):
        assert observation_violation(line) is None, line


async def test_lessons_and_the_report_after_a_sleep(spotter, tmp_path):
    """The real transcripts, ingested and slept on: the agent in a worktree of the project
    (even a new one) gets its lessons, strongest first, and the morning report."""
    home = tmp_path / "data"
    for command in (["ingest", str(spotter), "-q"], ["sleep", "--now", "2026-02-12T23:59:59Z"]):
        subprocess.run([str(OPENMEMORY), *command, "--home", str(home)], check=True, capture_output=True,
                       timeout=300)
    worktree = "/home/USER/projects/spotter-worktrees/spotter-new"
    async with _server(home) as client:
        result = await client.call_tool("lessons", {"project": worktree})
        assert not result.is_error, _text(result)
        lessons = result.structured_content["lessons"]
        assert any("`git push` failed in 3 sessions" in lesson["text"] for lesson in lessons)
        assert [lesson["strength"] for lesson in lessons] == sorted((l["strength"] for l in lessons), reverse=True)
        assert ("prediction (not met yet): A coming session in spotter-worktrees/* that runs `git push` will see this failure "
                "again or its resolution, `git push --set-upstream origin <branch>`.") in _text(result)
        # "have I seen this before?": the answer opens with the lesson, its resolution and how often
        recalled = await client.call_tool("recall", {"query": "git push says the branch has no upstream", "k": 3})
        assert not recalled.is_error, _text(recalled)
        text = _text(recalled)
        assert text.startswith("Lesson 1 (from past sessions): seen 3 times in 3 sessions")
        first = text.split("\n\n")[0]
        assert "has no upstream branch" in first and "each time, `git push --set-upstream origin <branch>`" in first
        assert "resolution seen: `git push --set-upstream origin <branch>` succeeded after the failure (in 3 of 3" in first
        top = recalled.structured_content["lessons"][0]
        assert top["lesson"]["resolution"]["command"] == "git push --set-upstream origin <branch>"
        assert top["evidence"] is not None
        none = await client.call_tool("lessons", {"project": str(tmp_path)})
        assert none.structured_content["lessons"] == []
        report = await client.call_tool("report", {})
        assert not report.is_error and "# Open Memory: morning report" in _text(report)
        assert report.structured_content["path"].startswith(str(home / "reports"))
    for line in _prose(_text(result)) + _prose(_text(report)) + _prose(text):
        assert observation_violation(line) is None, line


async def test_the_tools_listed_without_the_sdk_are_what_the_sdk_lists(tmp_path):
    """The server answers tools/list from the standard library (it starts in a blink); what it
    lists must stay what the SDK would list for the same tools (build_server is the reference)."""
    from openmemory_local.integrations.mcp_server import TOOLS, Memory, build_server

    sdk = build_server(Memory(tmp_path / "home", tmp_path))
    listed = [tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in await sdk.list_tools()]
    assert listed == TOOLS


def test_garbage_on_stdin_gets_json_rpc_errors_and_the_server_keeps_serving(tmp_path):
    lines = ["not json", "[1, 2]", '{"jsonrpc": "2.0", "id": 1, "method": "nope"}',
             '{"jsonrpc": "2.0", "method": "notifications/initialized"}',
             '{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "recall", "arguments": [1]}}',
             '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "forget", "arguments": {}}}',
             '{"jsonrpc": "2.0", "id": 4, "method": "ping"}']
    done = subprocess.run([str(OPENMEMORY), "mcp", "--home", str(tmp_path / "home")], input="\n".join(lines) + "\n",
                          capture_output=True, text=True, timeout=120)
    import json

    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, done.stderr
    assert [a.get("error", {}).get("code") for a in answers[:3]] == [-32700, -32600, -32601]
    assert answers[3]["id"] == 2 and answers[3]["result"]["isError"]
    assert answers[4]["id"] == 3 and "Unknown tool: forget" in answers[4]["result"]["content"][0]["text"]
    assert answers[5] == {"jsonrpc": "2.0", "id": 4, "result": {}}
    assert not (tmp_path / "home").exists()  # nothing created by merely serving
