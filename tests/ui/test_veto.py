"""Veto and unveto: one function (openmemory_local.render.refresh.set_veto) for the CLI and the page;
the file leaves the memory folder at once, or at the next render when a render cannot run now."""

from __future__ import annotations

import json

from openmemory_local.cli.main import main
from openmemory_local.sleep.lessons import lesson_rows
from openmemory_local.render.refresh import set_veto
from openmemory_local.render.memory_folder import render
from openmemory_local.sleep.passes import sleep_lock
from tests.local.test_render import claude, learned, memdir  # noqa: F401 (fixtures)
from tests.local.test_sleep import at


def test_a_veto_removes_the_file_now_and_an_unveto_writes_it_back(learned, claude):  # noqa: F811
    render(learned, at(1))
    victim = lesson_rows(learned)[0]
    path = memdir(claude) / victim["file_name"]
    assert path.exists()
    outcome = set_veto(learned, victim["id"], at(2))
    assert outcome["vetoed"] is True and outcome["pending"] is None and not path.exists()
    assert outcome["message"] == (f"Lesson {victim['id']} vetoed: never rendered again; its file was removed "
                                  "from 1 memory folder.")
    assert victim["file_name"] not in (memdir(claude) / "MEMORY.md").read_text()
    again = set_veto(learned, victim["id"], at(2))
    assert again == {"lesson": victim["id"], "vetoed": False, "message": f"Lesson {victim['id']} was already vetoed."}
    back = set_veto(learned, victim["id"], at(3), vetoed=False)
    assert back["unvetoed"] is True and path.exists()
    assert back["message"] == f"Lesson {victim['id']} unvetoed: written again into 1 memory folder."


def test_while_a_sleep_runs_the_next_render_does_it(learned, claude):  # noqa: F811
    render(learned, at(1))
    victim = lesson_rows(learned)[0]
    path = memdir(claude) / victim["file_name"]
    with sleep_lock(learned.config):
        outcome = set_veto(learned, victim["id"], at(2))
    assert outcome["vetoed"] is True and outcome["render"] is None and "another sleep or render" in outcome["pending"]
    assert outcome["message"].startswith(f"Lesson {victim['id']} vetoed; the next render removes its files")
    assert path.exists() and lesson_rows(learned, ids=[victim["id"]])[0]["vetoed"]  # vetoed all the same
    render(learned, at(3))
    assert not path.exists()


def test_a_file_the_owner_edited_stays(learned, claude):  # noqa: F811
    render(learned, at(1))
    victim = lesson_rows(learned)[0]
    path = memdir(claude) / victim["file_name"]
    path.write_text(path.read_text() + "\nmine now\n")
    render(learned, at(2))  # the edit is seen
    outcome = set_veto(learned, victim["id"], at(3))
    assert path.read_text().endswith("mine now\n")
    assert outcome["message"].endswith("removed from 0 memory folders, and left alone in 1 where you edited it.")


def test_the_cli_prints_the_same_outcome(learned, claude, monkeypatch, capsys):  # noqa: F811
    render(learned, at(1))
    victim = lesson_rows(learned)[0]
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    home = str(learned.config.home)
    assert main(["veto", str(victim["id"]), "--home", home, "--now", "2026-03-03T08:00:00Z"]) == 0
    assert capsys.readouterr().out == (f"Lesson {victim['id']} vetoed: never rendered again; its file was removed "
                                       "from 1 memory folder.\n")
    assert not (memdir(claude) / victim["file_name"]).exists()
    assert main(["unveto", str(victim["id"]), "--home", home, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["unvetoed"] is True and data["pending"] is None and "message" not in data
    assert data["render"]["targets"][0]["written"] == [str(memdir(claude).resolve() / victim["file_name"])]
    assert main(["veto", "999", "--home", home]) == 2
