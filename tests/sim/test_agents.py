"""Simulated agents: the memory folder read as Claude Code reads it, the agent model's
matching, and transcripts that the real adapter ingests into the episodes they were meant to be."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from openmemory_local.text.embed import EMBEDDING
from simulations.agents import Agent, AgentModel, InProcessEngine, best_match, ingest_check, read_memory, situation_text
from simulations.pitfalls import load

PITFALLS = {p.id: p for p in load()}
PUSH = PITFALLS["git-push-no-upstream"]
DAY = datetime(2026, 4, 1, tzinfo=timezone.utc)


def _lesson_file(folder, name, text):
    (folder / name).write_text(f'---\nname: "x"\ndescription: "x"\ntype: project\n---\n\n> {text}\n\nkind: error\n')


def test_memory_is_read_as_claude_code_loads_it(tmp_path):
    """MEMORY.md's first 200 lines and 25,000 bytes; the files linked there, read from disk;
    a link past those limits, a dangling link, a link out of the folder: not read."""
    folder = tmp_path / "memory"
    folder.mkdir()
    _lesson_file(folder, "a.md", '`uv sync` failed in 2 sessions: "error: The lockfile at `uv.lock` needs updating"')
    _lesson_file(folder, "late.md", "`make test` failed in 2 sessions.")
    _lesson_file(folder, "far.md", "`go test` failed in 2 sessions.")
    lines = ["# mine", "- [uv \\[locked\\] lesson](a.md) · strength 1.0", "- [gone](missing.md)", "- [out](../x.md)"]
    lines += [f"filler {i}" for i in range(200)] + ["- [late](late.md)"]
    (folder / "MEMORY.md").write_text("\n".join(lines) + "\n")
    got = read_memory(folder)
    assert [l.file for l in got] == ["a.md"]
    assert got[0].texts[0].startswith("`uv sync` failed") and got[0].texts[1] == "uv [locked] lesson"
    # the byte limit: a link beyond 25,000 bytes is not loaded even within 200 lines
    (folder / "MEMORY.md").write_text("x" * 25_000 + "\n- [far](far.md)\n")
    assert read_memory(folder) == []
    assert read_memory(folder, AgentModel(index_max_bytes=30_000))[0].file == "far.md"
    assert read_memory(tmp_path / "nothing-here") == []


def test_a_lesson_helps_only_when_its_text_matches_the_situation(tmp_path):
    model = AgentModel()
    folder = tmp_path / "memory"
    folder.mkdir()
    _lesson_file(folder, "good.md", '`uv sync` failed in 2 sessions, on branches a and b: "error: The lockfile at '
                 '`uv.lock` needs to be updated, but `--locked` was provided."')
    _lesson_file(folder, "vague.md", "`uv` failed in 2 sessions: \"error\"")
    (folder / "MEMORY.md").write_text("- [good](good.md)\n- [vague](vague.md)\n")
    lessons = read_memory(folder)
    uv = PITFALLS["uv-lock-outdated"]
    cos, lesson = best_match(lessons, situation_text(uv))
    assert lesson.file == "good.md" and cos >= model.match_cosine
    cos_vague, _ = best_match([l for l in lessons if l.file == "vague.md"], situation_text(uv))
    assert cos_vague < model.match_cosine
    assert model.describe()["what"] == "a model of an agent, not a measured agent"
    assert EMBEDDING in model.label() and "agent model" in model.label()


def _agent(tmp_path, p_avoid, match_cosine=0.3, mix=None):
    return Agent("A", tmp_path, seed=3, model=AgentModel(p_avoid=p_avoid, match_cosine=match_cosine),
                 mix=mix if mix is not None else [(PUSH, 0)], sessions_per_day=3, benign_share=0.0)


def test_a_failure_then_its_resolution_or_the_resolution_alone(tmp_path):
    """Without a lesson the session shows the failing call and its output, then the call that
    works; with a lesson the agent recognises and heeds (p = 1), the working call alone."""
    agent = _agent(tmp_path / "w", p_avoid=1.0, match_cosine=-1.0)  # every lesson is recognised
    first = agent.run_day(0, DAY)
    assert all(e["failed"] and not e["matched"] for p in first for e in p.encounters)  # no memory yet
    transcript = [json.loads(l) for l in open(first[0].path)]
    results = [b for r in transcript if r["type"] == "user" and isinstance(r["message"]["content"], list)
               for b in r["message"]["content"] if b.get("type") == "tool_result"]
    assert results[1]["is_error"] and results[1]["content"].startswith("Exit code 128\nfatal: The current branch")
    assert results[2]["is_error"] is False and "set up to track" in results[2]["content"]
    InProcessEngine().run(agent, DAY.replace(hour=23, minute=59))
    assert agent.memory(), "a failure met in 3 sessions is a lesson in the memory folder"
    second = agent.run_day(1, DAY.replace(day=2))
    assert all(not e["failed"] and e["matched"] for p in second for e in p.encounters)
    assert all(e["lesson_from"] == [PUSH.id] for p in second for e in p.encounters)
    transcript = [json.loads(l) for l in open(second[0].path)]
    assert not any(b.get("is_error") for r in transcript if r["type"] == "user"
                   and isinstance(r["message"]["content"], list) for b in r["message"]["content"])
    InProcessEngine().run(agent, DAY.replace(day=2, hour=23, minute=59))
    check = ingest_check(agent)
    assert check["ok"], check
    assert check["sessions"] == {"meant": 6, "ingested": 6} and check["errors"] == {"meant": 3, "ingested": 3}


def test_the_ingest_check_sees_a_transcript_that_is_not_what_was_meant(tmp_path):
    agent = _agent(tmp_path / "w", p_avoid=0.0)
    plans = agent.run_day(0, DAY)
    lines = open(plans[0].path).read().splitlines()
    with open(plans[0].path, "w") as f:  # drop the failing call's result: no error episode then
        f.write("\n".join(l for l in lines if '"is_error":true' not in l) + "\n")
    InProcessEngine().run(agent, DAY.replace(hour=23, minute=59))
    check = ingest_check(agent)
    assert not check["ok"]
    assert check["mismatches"][0]["session"] == plans[0].session_id
    assert check["errors"] == {"meant": 3, "ingested": 2}


def test_a_lesson_writer_reaches_the_agents_engine_with_the_time_a_local_model_needs(tmp_path):
    """--lesson-model: the agent's engine gets the model's URL and a config.toml giving it
    minutes an answer (read by the engine's own configuration loader, not by this test)."""
    from openmemory_local.core.config import load_config

    plain = Agent("A", tmp_path, seed=1, model=AgentModel(), mix=[])
    assert "OPENMEMORY_LESSON_MODEL_URL" not in plain.environ()
    agent = Agent("B", tmp_path, seed=1, model=AgentModel(), mix=[], lesson_model_url="http://127.0.0.1:9/v1")
    env = agent.environ()
    assert env["OPENMEMORY_LESSON_MODEL_URL"] == "http://127.0.0.1:9/v1"
    config = load_config(environ=env)
    assert config.lesson_model_url == "http://127.0.0.1:9/v1"
    assert config.lesson_model_timeout >= 300 and config.lesson_model_budget >= config.lesson_model_timeout
    assert load_config(environ=plain.environ()).lesson_model_timeout == 20.0
