"""Fixtures for the loop between the engine and the node: real node processes on loopback
(the node tests' harness) beside real engine stores."""

from __future__ import annotations

import pytest

from tests.node.harness import Cluster


@pytest.fixture
def cluster(tmp_path):
    """Node processes made under tmp_path; every one is killed at teardown."""
    c = Cluster(tmp_path / "nodes")
    try:
        yield c
    finally:
        c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # On failure, attach the tail of every node's log to the report.
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        c = item.funcargs.get("cluster")
        if c is not None:
            report.sections.append(("node logs", c.logs()))
