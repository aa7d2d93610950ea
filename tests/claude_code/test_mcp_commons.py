"""The MCP tools and the commons layer, in a real MCP session: ``lessons`` and ``recall``
include the received lessons of the project, marked as reported by other agents."""

from __future__ import annotations

from pathlib import Path

import pytest
from cc_helpers import OPENMEMORY
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from openmemory_local.commons.receive import apply_changes
from openmemory_local.core.config import Config
from openmemory_protocol.observation import observation_violation
from openmemory_local.storage.store import Store
from tests.local.test_commons import APP, NODE, PUSH, entry, rid
from tests.local.test_sleep import add, at, session


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "data"
    with Store.open(Config(home=home)) as store:
        add(store, session("s1", 0, ["git push"], cwd=APP))
        apply_changes(store, [entry(1, status="common", confirmers=4),
                              entry(2, '`cargo build` failed: "error[E0463]: can\'t find crate"')], NODE, at(1))
    return home


def _server(home: Path) -> Client:
    params = StdioServerParameters(command=str(OPENMEMORY), args=["mcp", "--home", str(home)],
                                   env={"OPENMEMORY_NOW": "2026-03-05T09:00:00Z"})
    return Client(params, read_timeout_seconds=60)


def _prose(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith(">")]


async def test_lessons_and_recall_include_received_lessons_marked_as_such(home):
    async with _server(home) as client:
        lessons = await client.call_tool("lessons", {"project": APP})
        recalled = await client.call_tool("recall", {"query": "git push: the current branch has no upstream branch"})
    assert not lessons.is_error and not recalled.is_error
    for result in (lessons, recalled):
        (received,) = result.structured_content["commons"]
        assert received["record_id"] == rid(1) and received["source"] == "commons"
        assert received["status_text"] == "common: confirmed by 4 independent agents"
        assert "not by this agent's own sessions" in received["note"]
        text = result.content[0].text
        assert "Reported by other agents through the Open Memory commons" in text and PUSH in text
        assert f"commons {rid(1)[:16]} \u00b7 error \u00b7 common: confirmed by 4 independent agents" in text
        assert all(observation_violation(line) is None for line in _prose(text)), _prose(text)
    assert lessons.structured_content["lessons"] == []  # no lesson of its own yet: the received ones apart
