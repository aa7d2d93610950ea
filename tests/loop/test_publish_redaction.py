"""The redaction corpus (tests/loop/data/redaction, SYNTHETIC transcripts whose failures carry
secrets, e-mail addresses, host names, internal URLs and paths): none of it reaches a record
on a real node; what the gate cannot clean is held back and listed in the morning report."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from openmemory_local.observation import check_observation
from openmemory_local.publish import publish
from openmemory_local.report import make_report

from openmemory_local.clock import parse_time

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
        lessons = {cmd: lid for lid, cmd in store.conn.execute(
            "SELECT l.id, json_extract(e.fields, '$.command') FROM lessons l JOIN lesson_members m "
            "ON m.lesson_id = l.id JOIN episodes e ON e.id = m.episode_id WHERE l.kind = 'error' GROUP BY l.id")}
        report = make_report(store, parse_time(CORPUS_NOW))
    texts = lesson_texts(node)
    assert sorted(texts) == sorted(r["text"] for r in dry["records"])
    assert len(texts) == len(corpus.FAILURES) - len(corpus.HELD) + 1  # and the correction
    for text in texts:
        check_observation(text)
        leaks = [s for s in corpus.SENSITIVE if s.lower() in text.lower()]
        assert not leaks, (text, leaks)
    # what the gate could not clean is held back, never sent, and the report says why
    held = {h["lesson_id"]: h["reasons"] for h in result["held"]}
    assert set(held) == {lessons[cmd] for cmd in corpus.HELD}, held
    assert any("acme-billing" in r for r in held[lessons["mix compile"]])
    assert any("dana-thinkpad" in r for r in held[lessons["ssh dana-thinkpad2 uptime"]])
    markdown = report["markdown"]
    assert "## Held back from the commons" in markdown
    for lesson_id in held:
        assert f"- lesson {lesson_id}: " in markdown.split("## Held back from the commons", 1)[1]
    # placeholders, not silence: the records still say what failed
    joined = "\n".join(texts)
    for placeholder in ("<secret>", "<email>", "<host>", "<ip>", "<url>", "<home>"):
        assert placeholder in joined, placeholder
    # a second publish changes nothing and reports no new hold
    with open_store(home, node.home) as store:
        again = publish(store, parse_time(CORPUS_NOW))
        assert again["sent"] == [] and again["new_holds"] == []
