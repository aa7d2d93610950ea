"""Domains of a claim (openmemory_protocol.domains): the program table, wrappers skipped,
unknown programs and tools general, a project's domains from its commands."""

from __future__ import annotations

import pytest

from openmemory_protocol.claims import Claim
from openmemory_protocol.domains import (DOMAINS, GENERAL, domain_topic, domains_of,
                                         domains_of_programs, ecosystem_of, program_of)


def claim(situation: str) -> Claim:
    return Claim(situation=situation, failure="error: something failed")


@pytest.mark.parametrize("situation, domains", [
    ("git push", ("git",)),
    ("cd && npm test", ("node",)),
    ("python -m pytest", ("python",)),
    ("uv sync && pytest", ("python",)),
    ("git commit && cargo build", ("git", "rust")),
    ("sudo docker build", ("containers",)),
    ("/usr/bin/python3.11 setup.py", ("python",)),
    ("CI=1 npm ci", ("node",)),
    ("frobnicate --all", (GENERAL,)),
    ("Read", (GENERAL,)),  # a tool claim names no program
])
def test_domains_of_a_claim(situation, domains):
    assert domains_of(claim(situation)) == domains


def test_program_names_and_heads():
    assert program_of("/usr/local/bin/node18") == "node"
    assert program_of("python3") == "python"
    assert program_of("pip3.12") == "pip"
    assert ecosystem_of("env") is None and ecosystem_of("timeout 5") is None
    assert ecosystem_of("timeout 5 go test") is None  # "5" is the program here: not guessed


def test_project_domains_always_include_general():
    assert domains_of_programs([]) == {GENERAL}
    assert domains_of_programs(["git status", "cd web && npm run build", "make"]) == {GENERAL, "git", "node", "c"}


def test_topics_by_domain():
    assert domain_topic("lesson", "python") == "/openmemory/1/lesson/python"
    assert GENERAL in DOMAINS
    with pytest.raises(ValueError):
        domain_topic("lesson", "cobol")


def test_the_spec_vectors_and_protocol_table_are_this_rule():
    """spec/vectors/domains.json (made by spec/generate_vectors.py) and PROTOCOL.md's two lists
    are what openmemory_protocol/domains.py decides: a change to the rule shows here."""
    import json
    import re
    from pathlib import Path

    from openmemory_node.follow import record_topics
    from openmemory_protocol.claims import Claim
    from openmemory_protocol.domains import _TABLE, NEUTRAL

    root = Path(__file__).resolve().parents[2]
    vectors = json.loads((root / "spec" / "vectors" / "domains.json").read_text())
    assert vectors["table"] == {eco: progs.split() for eco, progs in _TABLE.items()}
    assert vectors["wrappers"] == sorted(NEUTRAL)
    for v in vectors["vectors"]:
        domains = domains_of(Claim(situation=v["situation"], failure="error: failed"))
        assert list(domains) == v["domains"], v
        assert record_topics("lesson", domains, "/openmemory/1/lesson") == v["lesson_topics"]
    protocol = (root / "PROTOCOL.md").read_text()
    listed = re.search(r"<!-- list: domains -->\s*```text\n(.*?)```", protocol, re.S).group(1)
    assert {line.split()[1]: line.split()[2:] for line in listed.strip().splitlines()} == vectors["table"]
    wrappers = re.search(r"<!-- list: domain-wrappers -->\s*```text\n(.*?)```", protocol, re.S).group(1)
    assert sorted(wrappers.split()[1:]) == sorted(NEUTRAL)
