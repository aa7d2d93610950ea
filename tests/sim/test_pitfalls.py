"""The pitfall catalogue (simulations/pitfalls.toml): well-formed, faithful to the real
transcripts it cites, and every pitfall becomes what the engine should make of it."""

from __future__ import annotations

import json
import re

import pytest

from simulations.pitfalls import CATALOGUE, FORMS, PLACEHOLDERS, CatalogueError, check, load

PITFALLS = load()


def test_the_catalogue_has_thirty_or_more_recurring_failures_of_many_tools():
    assert len(PITFALLS) >= 30
    assert len({p.id for p in PITFALLS}) == len(PITFALLS)
    programs = {p.program for p in PITFALLS}
    assert {"git", "npm", "pip", "uv", "pytest", "docker", "cargo", "make", "mix", "go"} <= programs
    assert sum(p.real for p in PITFALLS) >= 10
    for p in PITFALLS:
        assert p.fail.form in FORMS and p.fail.output and p.resolve and p.situation and p.tasks
        assert p.source.split(":", 1)[1].strip(), p.id  # a note on the source, not just its kind


def _tool_results(data) -> str:
    out = []
    for path in (data / "claude-code").rglob("*.jsonl"):
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            message = record.get("message") if isinstance(record, dict) else None
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                for block in content:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        inner = block.get("content")
                        if isinstance(inner, list):
                            inner = "\n".join(b.get("text", "") for b in inner if isinstance(b, dict))
                        out.append(str(inner))
    return "\n".join(out)


def test_real_pitfalls_print_what_the_real_transcripts_show(shared_data):
    """A pitfall whose source is "real:" has a line of its failure, volatile parts aside, in a
    tool result of ../shared/data/claude-code."""
    corpus = _tool_results(shared_data)
    real_lines = {line.strip() for line in corpus.splitlines() if len(line.strip()) >= 20}
    placeholder = re.compile(r"\\\{(?:" + "|".join(PLACEHOLDERS) + r")\\\}")
    for p in (p for p in PITFALLS if p.real):
        lines = [line.strip() for line in p.fail.output.splitlines() if len(line.strip()) >= 15]
        patterns = [re.compile(placeholder.sub(".+?", re.escape(line))) for line in lines]
        # a line of ours in the real data, or a real line that ours completes (a redacted path)
        found = any(pat.search(corpus) for pat in patterns) or any(
            line[:k] in real_lines for line in lines for k in range(20, len(line)))
        assert found, f"{p.id}: no line of its output is in the real data"


def test_a_malformed_catalogue_is_refused_with_the_entry_and_the_field(tmp_path):
    good = CATALOGUE.read_text()
    cases = {
        'form = "exit"\nexit_code = 128': ('form = "exit"', "exit_code"),  # an exit failure without its code
        'tool = "Bash"\nform = "exit"': ('tool = "Sh"\nform = "exit"', "unknown tool"),
        'id = "git-push-no-upstream"': ('id = "git-push-no-upstream"\ncolour = "red"', "unknown keys"),
    }
    for original, (broken, message) in cases.items():
        path = tmp_path / "bad.toml"
        path.write_text(good.replace(original, broken, 1))
        with pytest.raises(CatalogueError, match=message) as info:
            load(path)
        assert "git-push-no-upstream" in str(info.value) or "pitfall 1" in str(info.value)
    (tmp_path / "garbage.toml").write_text("[[pitfall]\nid = ")
    with pytest.raises(CatalogueError, match="not valid TOML"):
        load(tmp_path / "garbage.toml")
    dup = good + good[good.index("[[pitfall]]"):good.index("[[pitfall]]", good.index("[[pitfall]]") + 1)]
    (tmp_path / "dup.toml").write_text(dup)
    with pytest.raises(CatalogueError, match="duplicate id"):
        load(tmp_path / "dup.toml")


def test_every_pitfall_met_twice_ingests_as_meant_and_becomes_a_lesson(tmp_path):
    """The real engine on two sessions of every pitfall: one session episode per session, one
    error episode per failing call with its tool, command and exit code, and a lesson whose
    provenance names those sessions. How well each lesson's text matches its own situation is
    reported (python -m simulations.pitfalls --check), not fixed here: it moves with the
    engine's lesson texts."""
    report = check(tmp_path, PITFALLS)
    assert report["ingest_ok"], report["ingest"]
    assert sum(c["sessions"]["ingested"] for c in report["ingest"]) == 2 * len(PITFALLS)
    assert sum(c["errors"]["ingested"] for c in report["ingest"]) == 2 * len(PITFALLS)
    missing = [pid for pid, row in report["rows"].items() if not row["lesson"]]
    assert not missing
    assert report["own_lesson_matches"] > 0  # the agent model recognises lessons at all
    # each lesson's commons form is what publish --dry-run shows: no branch, no count, no path
    forms = {pid: row["commons_text"] for pid, row in report["rows"].items() if row["commons_text"]}
    assert forms and report["commons_form_matches"] > 0
    for pid, text in forms.items():
        assert "failed in " not in text and "on branches" not in text and "/home/" not in text, (pid, text)
