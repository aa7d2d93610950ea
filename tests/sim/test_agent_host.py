"""The agent service (what each container of docker-compose.yml runs), on loopback in this
process: the runner drives agents over it exactly as over the compose network."""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone

import pytest

from simulations.agent_host import METHODS, RemoteAgent, RemoteError, serve
from simulations.two_agents import RemoteHosts, WorldConfig, run

SMALL = dict(days=2, seed=2, attesters=0, sessions_per_day=4, a_only=2, shared=1, b_own=1, b_from=1,
             engine="in-process")


@pytest.fixture
def service(tmp_path):
    ready = threading.Event()
    where: dict = {}

    def started(address):
        where["address"] = address
        ready.set()

    thread = threading.Thread(target=serve, args=(tmp_path / "served", ("127.0.0.1", 0)), kwargs={"ready": started},
                              daemon=True)
    thread.start()
    assert ready.wait(30)
    host, port = where["address"]
    yield f"http://{host}:{port}"
    RemoteAgent(f"http://{host}:{port}", "any", timeout=30).shutdown()
    thread.join(30)
    assert not thread.is_alive()


def test_the_runner_drives_agents_over_the_service(service, tmp_path):
    # every agent on the one service (the name travels in each call; the path is ignored)
    summary = run(WorldConfig(**SMALL), tmp_path / "out", ["control"], plots=False,
                  hosts=RemoteHosts(service + "/{name}"))
    arm = summary["arms"]["control"]
    assert summary["world"]["where"] == "containers"
    assert arm["ingest_check_ok"] and arm["ingest_check"]["B"]["sessions"]["ingested"] == 2 * 4
    # the agents' folders are where the service keeps them, not in the runner's folder
    assert (tmp_path / "served/world/control/B/openmemory/openmemory.db").exists()
    assert not (tmp_path / "out/world/control/B").exists()


def test_the_service_answers_only_its_methods_and_reports_failures(service, tmp_path):
    scope = {"world": WorldConfig(**SMALL).to_dict(), "arm": "control"}
    b = RemoteAgent(service, "B").attach(**scope)
    assert b.describe()["agent"] is True
    plans = b.run_day(0, datetime(2026, 4, 1, tzinfo=timezone.utc))
    assert len(plans) == 4 and all("encounters" in p for p in plans)
    assert b.memory() == [] and b.memory_index() == ""  # nothing rendered before the first night
    with pytest.raises(AttributeError):
        b.rm_rf("/")  # not a method of the service: never sent
    assert "rm_rf" not in METHODS
    with pytest.raises(RemoteError, match="unknown method"):
        b.call("__init__")  # asked anyway: the service refuses it
    with pytest.raises(RemoteError, match="is a node only"):
        RemoteAgent(service, "Rogue").attach(**scope, node_only=True).night(None)
    with pytest.raises(RemoteError, match="KeyError"):
        RemoteAgent(service, "Z").attach(**scope)  # no agent Z in this world
    with pytest.raises(RemoteError, match="does not answer"):
        RemoteAgent("http://127.0.0.1:9", "B", timeout=5).call("describe")
    assert json.dumps(scope)  # what travels is plain JSON
