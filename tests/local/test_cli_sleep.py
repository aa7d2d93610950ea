"""The sleep, render, lessons, veto, unveto and report commands: output, --json, exit codes."""

from __future__ import annotations

import json

import pytest

from openmemory_local.cli.main import main
from openmemory_local.core.config import load_config
from openmemory_local.storage.store import Store

from .test_sleep import add, correction, error, session


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    for name in ("CLAUDE_CONFIG_DIR", "OPENMEMORY_NOW", "XDG_DATA_HOME", "OPENMEMORY_LESSON_MODEL_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENMEMORY_HOME", str(tmp_path / "om"))
    with Store.open(load_config()) as store:
        add(store, error("e1", "s1", 0), error("e2", "s2", 0), correction("c1", "s1", 0),
            error("x1", "s1", 0, command="make docs", first="make: *** No rule to make target 'docs'."),
            session("s1", 0, ["git push"]), session("s2", 0, ["git push"]))
    return tmp_path


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_before_any_sleep(home, capsys):
    assert run(capsys, "lessons", "--json") == (0, "[]\n", "")
    code, out, _ = run(capsys, "report")
    assert code == 0 and "No morning report yet" in out
    assert run(capsys, "report", "--json")[1] == "null\n"


def test_sleep_lessons_veto_report(home, capsys):
    code, out, _ = run(capsys, "sleep", "--now", "2026-03-02T23:00:00Z", "--json")
    data = json.loads(out)
    assert code == 0 and len(data["sleep"]["learn"]["learned"]) == 2 and data["report"]["counts"]["learned"] == 2
    code, out, _ = run(capsys, "lessons")
    assert code == 0 and "open prediction (since 2026-03-02)" in out and "`git push` failed in 2 sessions" in out
    lessons = json.loads(run(capsys, "lessons", "--json")[1])
    assert [l["kind"] for l in lessons] == ["error", "correction"]
    assert {"strength", "seen", "prediction", "record", "provenance", "episodes"} <= set(lessons[0])
    forming = json.loads(run(capsys, "lessons", "--forming", "--json")[1])
    assert [l["seen"] for l in forming] == [1] and "make docs" in forming[0]["rule_text"] + forming[0]["signature"]
    assert json.loads(run(capsys, "lessons", "--project", "/home/me/app", "--json")[1]) == lessons
    assert json.loads(run(capsys, "lessons", "--project", "/elsewhere", "--json")[1]) == []

    code, out, _ = run(capsys, "veto", str(lessons[0]["id"]), "--now", "2026-03-03T08:00:00Z")
    assert code == 0 and "vetoed" in out
    assert json.loads(run(capsys, "veto", str(lessons[0]["id"]), "--json")[1]) == {"lesson": lessons[0]["id"],
                                                                                 "vetoed": False}
    assert [l["id"] for l in json.loads(run(capsys, "lessons", "--json")[1])] == [lessons[1]["id"]]
    code, _, err = run(capsys, "veto", "999")
    assert code == 2 and "no lesson #999" in err
    code, out, _ = run(capsys, "sleep", "--now", "2026-03-03T09:00:00Z")
    assert "## Vetoed" in out
    code, out, _ = run(capsys, "unveto", str(lessons[0]["id"]), "--now", "2026-03-03T10:00:00Z")
    assert code == 0 and "unvetoed" in out
    code, out, _ = run(capsys, "report")
    assert code == 0 and "# Open Memory: morning report" in out and "Report: " in out


def test_render_into_another_folder(home, capsys, tmp_path):
    run(capsys, "sleep", "--now", "2026-03-02T23:00:00Z")
    target = tmp_path / "elsewhere"
    code, out, _ = run(capsys, "render", "--memory-dir", str(target), "--json")
    data = json.loads(out)
    assert code == 0 and data["targets"][0]["index"] == "created"
    assert (target / "MEMORY.md").exists() and len(list(target.glob("openmemory-lesson-*.md"))) == 2
    code, out, _ = run(capsys, "render", "--memory-dir", str(target), "--project", "/elsewhere")
    assert "0 lessons" in out and "section of MEMORY.md updated" in out
    assert not list(target.glob("openmemory-lesson-*.md"))
    # into Claude Code's folder: the project's folder does not exist here
    code, out, _ = run(capsys, "render")
    assert code == 0 and "Nothing rendered: the 1 project(s) with lessons have no Claude Code folder" in out


def test_sleep_twice_and_bad_now(home, capsys):
    run(capsys, "sleep", "--now", "2026-03-02T23:00:00Z")
    code, out, _ = run(capsys, "sleep", "--now", "2026-03-02T23:30:00Z")
    assert code == 0 and "nothing changed" in out and "morning report" not in out
    code, _, err = run(capsys, "sleep", "--now", "yesterday")
    assert code == 2 and "not an ISO 8601 time" in err
