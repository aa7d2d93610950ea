"""The two-agent experiment's control arm, short: few days, few pitfalls, the real engine."""

from __future__ import annotations

import json

import pytest

from simulations import two_agents
from simulations.agents import AgentModel
from simulations.two_agents import WorldConfig, run

SMALL = dict(days=5, seed=2, attesters=1, sessions_per_day=6, a_only=3, shared=1, b_own=1, b_from=1,
             engine="in-process")


def test_control_arm_end_to_end(tmp_path):
    summary = run(WorldConfig(**SMALL), tmp_path, ["control"])
    arm = summary["arms"]["control"]
    assert arm["ingest_check_ok"], arm["ingest_check"]
    # every transcript written became its session, every failing call its error episode
    for name, check in arm["ingest_check"].items():
        assert check["sessions"]["meant"] == check["sessions"]["ingested"] == 5 * 6
    days = [json.loads(line) for line in (tmp_path / "days.jsonl").read_text().splitlines()]
    assert [d["day"] for d in days] == list(range(5))
    assert days[0]["B"]["a_only"]["met"] == 0  # B meets A-only pitfalls from day 1 only
    assert sum(d["B"]["a_only"]["met"] for d in days) > 0
    by_day = arm["b_repeated_error_rate_by_day"]
    assert all(r["failed"] <= r["met"] for r in by_day)
    assert sum(r["met"] for r in by_day) == arm["b_repeated_error_rate"]["all"]["met"]
    # the model is named in every output
    assert summary["agent_model"]["what"] == "a model of an agent, not a measured agent"
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["agent_model"] == summary["agent_model"]
    for png in ("b_error_rate.png", "lessons.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "commons arm" in summary["not_measured"]  # only the control arm ran
    # each agent kept its own folders
    for agent in ("A", "B", "C1"):
        assert (tmp_path / "world/control" / agent / "openmemory/openmemory.db").exists()
        assert list((tmp_path / "world/control" / agent / "home/.claude/projects").glob("*/*.jsonl"))


def test_what_b_reads_changes_what_b_does(tmp_path):
    """The loop is closed through the disk: an agent that heeds every lesson (p = 1, any lesson
    recognised) stops failing once the engine has rendered a lesson into its folder; one that
    heeds none (p = 0) fails at every encounter."""
    heeds = run(WorldConfig(**SMALL, model=AgentModel(p_avoid=1.0, match_cosine=-1.0)), tmp_path / "heeds",
                ["control"], plots=False)
    never = run(WorldConfig(**SMALL, model=AgentModel(p_avoid=0.0)), tmp_path / "never", ["control"], plots=False)
    days = [json.loads(line) for line in (tmp_path / "heeds/days.jsonl").read_text().splitlines()]
    first_lesson = next(d["day"] for d in days if d["B"]["lessons_rendered"] > 0)
    assert sum(d["B"]["failed"] for d in days if d["day"] > first_lesson) == 0
    assert days[0]["B"]["failed"] == days[0]["B"]["met"] > 0  # nothing to read on day 0
    never_all = never["arms"]["control"]["b_repeated_error_rate"]["all"]
    assert never_all["met"] > 0 and never_all["rate"] == 1.0


def test_the_drill_needs_the_commons_arm(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        two_agents.main(["--days", "2", "--out", str(tmp_path), "--arms", "control", "--drill", "-q"])
    assert info.value.code == 2
    assert "--drill runs in the commons arm" in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()  # nothing ran: no half result
    with pytest.raises(ValueError, match="no pitfall nope"):
        run(WorldConfig(**{**SMALL, "pitfalls": ("nope", "a", "b", "c", "d")}), tmp_path, ["control"])


def test_a_world_config_travels_as_json():
    """What the runner sends an agent's container to make the same agent there."""
    config = WorldConfig(**SMALL, pitfalls=("git-push-fetch-first", "docker-compose-v1", "npm-ci-no-lockfile",
                                            "uv-lock-outdated", "make-no-rule-test"), drill=True)
    assert WorldConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_bad_options_are_usage_errors(tmp_path, capsys):
    for argv in (["--days", "0"], ["--arms", "nope"], ["--b-from", "9", "--days", "3"], ["--p-avoid", "2"],
                 ["--clock-rate", "0"], ["--threshold", "0"], ["--pitfalls", "a,b"], ["--hosts", "http://x:1"]):
        with pytest.raises(SystemExit) as info:
            two_agents.main(argv + ["--out", str(tmp_path)])
        assert info.value.code == 2


def test_one_night_as_a_real_process(tmp_path):
    summary = run(WorldConfig(**{**SMALL, "days": 2, "attesters": 0, "engine": "process"}), tmp_path, ["control"],
                  plots=False)
    arm = summary["arms"]["control"]
    assert summary["world"]["engine"] == "process"
    assert arm["ingest_check_ok"] and arm["ingest_check"]["B"]["sessions"]["ingested"] == 12


def test_the_lesson_writer_without_its_model_is_a_clear_error(tmp_path, capsys):
    import importlib.util

    import pytest

    from simulations.two_agents import main

    if importlib.util.find_spec("llama_cpp") is not None:
        pytest.skip("the agent-lm extra is installed here: the writer would start (tests/sim/test_lm.py runs it)")
    assert main(["--lesson-model", "--days", "1", "--out", str(tmp_path / "out"), "--arms", "control", "-q"]) == 2
    assert "--lesson-model needs the agent-lm extra" in capsys.readouterr().err
