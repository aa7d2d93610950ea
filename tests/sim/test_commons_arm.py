"""The two-agent experiment with the commons, short, as local processes: a real node per agent
(and the drill's rogue and revoker), the real engine each night (its entry point in this
process), the same world in both arms.

The short world is chosen so that the comparison is not a coin toss (docs/simulations.md,
"The short version in CI"): both arms draw the same random numbers at the same encounters
(a paired comparison), so B can only fail *less* with the commons where a received lesson
matches and its own does not yet; the A-only pitfalls are ones whose commons text the agent
model recognises (`python -m simulations.pitfalls --check`: cosine 0.50 to 0.68) and that
reach B's folder before B first meets them (`git` lessons: B's sessions run `git status`) or
right after (`docker-compose`); B's own lessons need two failed sessions each."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simulations.two_agents import WorldConfig, run

pytestmark = pytest.mark.slow

SHORT = dict(days=8, seed=5, attesters=2, sessions_per_day=6, a_only=3, shared=1, b_own=1, b_from=3,
             engine="in-process", drill=True,
             pitfalls=("git-push-fetch-first", "git-add-beyond-symlink", "docker-compose-v1",  # A-only
                       "npm-ci-no-lockfile",  # shared
                       "uv-lock-outdated"))  # B's own


def node_status_on_disk(home, record_id: str) -> str:
    """A stopped node's status of a record, computed from its store (``openmemory-node show``)."""
    done = subprocess.run([sys.executable, "-m", "openmemory_node.cli", "--home", str(home), "show", record_id,
                           "--json"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["status"]


def test_the_commons_lowers_bs_repeated_errors_and_the_drill_removes_the_poisoned_lesson(tmp_path):
    summary = run(WorldConfig(**SHORT), tmp_path, ["control", "commons"])
    control, commons = (summary["arms"][a] for a in ("control", "commons"))
    assert control["ingest_check_ok"] and commons["ingest_check_ok"]

    # --- the experiment: the same encounters in both arms, fewer errors with the commons -----
    c, k = control["b_repeated_error_rate"]["all"], commons["b_repeated_error_rate"]["all"]
    assert c["met"] == k["met"] > 0, (c, k)  # the same world: B meets the same pitfalls at the same moments
    assert k["rate"] < c["rate"], (k, c)
    shared = commons["commons"]
    assert shared["published_a_only"] >= 2 and shared["received_in_b_memory"] >= 2, shared["published"]
    assert shared["b_encounters_avoided_with_a_commons_lesson"] > 0
    # every lesson A published is a real record on B's node with its pitfall, and B's votes count
    for lesson in shared["published"]:
        assert lesson["pitfalls"] and lesson["statuses"], lesson
    days = [json.loads(line) for line in (tmp_path / "days.jsonl").read_text().splitlines()]
    assert {d["arm"] for d in days} == {"control", "commons"}
    assert all(d["B"]["commons_rendered"] == 0 for d in days if d["arm"] == "control")

    # --- the drill: spread as a candidate, rendered, revoked everywhere, offline node too ----
    drill = summary["drill"]
    assert drill["spread"]["candidate_everywhere"] and drill["spread"]["rendered_in_every_folder"], drill["spread"]
    assert drill["offline_folder_held_it_after_its_night"]  # its night without its node changed nothing
    assert drill["offline"]["node_revoked_after_back_wall_s"] is not None
    assert drill["ok"], drill["final"]
    ids = (drill["lesson"]["id"], drill["derived"]["id"])
    shorts = [i[:16] for i in ids]
    world = tmp_path / "world" / "commons"
    agents = [p for p in world.iterdir() if (p / "openmemory").is_dir()]
    assert sorted(p.name for p in agents) == ["A", "B", "C1", "C2"]
    # checked again from disk, not from the run's own report: no memory folder holds either
    # lesson, and every node's store (the rogue's and the revoker's too) says both are revoked
    for agent in agents:
        (memory,) = list((agent / "home/.claude/projects").glob("*/memory"))
        index = (memory / "MEMORY.md").read_text()
        assert not [f for f in memory.iterdir() if any(s in f.name for s in shorts)], agent.name
        assert not any(s in index for s in shorts), agent.name
    homes = [p / "node" for p in world.iterdir() if (p / "node" / "node.db").exists()]
    assert len(homes) == 6
    for home in homes:
        assert [node_status_on_disk(home, i) for i in ids] == ["revoked", "revoked"], home
    for png in ("b_error_rate.png", "lessons.png", "drill_revocation.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
