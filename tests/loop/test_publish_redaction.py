"""The redaction corpus (tests/loop/data/redaction, SYNTHETIC transcripts whose failures carry
secrets, e-mail addresses, host names, internal URLs and paths): none of it reaches a record
on a real node. The allow-list (openmemory_local.text.redact.commons_scrub) replaces what the
identity scrub leaves, so the gate, which held two of these lessons back when redaction was a
deny-list, holds none; what it would hold is listed in the morning report (test_publish.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from openmemory_protocol.claims import check_claim
from openmemory_protocol.claims import parse as parse_claim
from openmemory_local.commons.publish import publish
from openmemory_local.render.report import make_report

from openmemory_local.core.clock import parse_time

from .publish_helpers import lesson_texts, om, om_json, open_store

CORPUS = Path(__file__).parent / "data" / "redaction"
CORPUS_NOW = "2026-02-19T00:00:00Z"


def _corpus_module():
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_corpus_is_what_its_generator_writes(tmp_path):
    corpus = _corpus_module()
    written = corpus.write(tmp_path)
    for path in written:
        assert path.read_bytes() == (CORPUS / path.name).read_bytes(), path.name


@pytest.fixture
def danas_machine(tmp_path, monkeypatch):
    """This process as it would run on the corpus's machine: user dana, host dana-thinkpad,
    a git configuration with her e-mail address."""
    home = tmp_path / "dana-home"
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Dana Kowalski\n\temail = dana.kowalski@acme-corp.example\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USER", "dana")
    monkeypatch.setenv("LOGNAME", "dana")
    monkeypatch.setenv("HOSTNAME", "dana-thinkpad")
    return home


@pytest.mark.slow
def test_nothing_of_the_corpus_reaches_a_record(cluster, danas_machine, tmp_path):
    corpus = _corpus_module()
    node = cluster.node("a").init().start()
    home = tmp_path / "engine"
    home.mkdir()
    assert om("ingest", "-q", "--home", home, CORPUS)[0] == 0
    assert om("sleep", "--no-report", "--home", home, "--now", CORPUS_NOW)[0] == 0
    assert om("publish", "enable", corpus.CWD, "--home", home)[0] == 0
    dry = om_json("publish", "--dry-run", "--home", home, "--now", CORPUS_NOW)
    with open_store(home, node.home) as store:
        result = publish(store, parse_time(CORPUS_NOW))
        report = make_report(store, parse_time(CORPUS_NOW))
    texts = lesson_texts(node)
    assert sorted(texts) == sorted(r["text"] for r in dry["records"])
    # every failure is published (a correction stays in the personal layer): the allow-list
    # (commons_scrub) replaces what the deny-list left, so the gate holds nothing back any more
    assert len(texts) == len(corpus.FAILURES), texts
    for text in texts:
        claim = parse_claim(text)  # a lesson on the wire is a claim, and its text is its rendering
        assert claim is not None and check_claim(claim).text == text, text
        leaks = [s for s in corpus.SENSITIVE if s.lower() in text.lower()]
        assert not leaks, (text, leaks)
    assert result["held"] == [], result["held"]
    assert "## Held back from the commons" not in report["markdown"]
    # what the gate used to hold back (the project's name glued into a word, a host name with a
    # digit) now leaves as placeholders
    glued = [t for t in texts if "CompileError" in t]
    assert len(glued) == 1 and "<name>" in glued[0], glued
    assert [t for t in texts if "resolve hostname" in t], texts
    # placeholders, not silence: the records still say what failed
    joined = "\n".join(texts)
    for placeholder in ("<secret>", "<email>", "<host>", "<ip>", "<url>", "<name>"):
        assert placeholder in joined, (placeholder, texts)
    # a second publish changes nothing and reports no new hold
    with open_store(home, node.home) as store:
        again = publish(store, parse_time(CORPUS_NOW))
        assert again["sent"] == [] and again["new_holds"] == []
