"""The discrete-event model of the commons at scale, small: the real state machine per node,
revocation everywhere, and the reductions of the sybil curve exact by the rules."""

from __future__ import annotations

import random

from simulations.commons_des import (
    MODEL_NOTE, ModelConfig, _sybil_world, lesson_outcome, observer_commons, propagation, run, sybil_curve,
)

SMALL = ModelConfig(nodes=200, seed=3, lessons=2, horizon_hours=3.0, observers=12, sybil_shares=(0.0, 0.3),
                    false_lessons=2, true_lessons=1, attest_share=0.2)


def test_gossip_and_sync_bring_a_revocation_to_every_node_and_its_commons_revokes_both():
    p = propagation(SMALL)
    for lesson in p["lessons"]:
        assert lesson["reached_within_120s"] == 1.0  # every node online at publication got it
        assert 0 < lesson["t50_s"] <= lesson["t99_s"] < 5
    for name in ("revoked", "derived"):
        r = p["revocation"][name]
        assert r["every_online_node_s"] is not None and r["every_online_node_s"] < 5
        assert r["offline_nodes"] > 0  # churn left some nodes offline at that moment ...
        back = r["offline_catch_up_after_return_s"]
        assert back["max"] is not None and back["max"] < SMALL.sync_interval_s + 5  # ... they caught up by sync
    assert p["every_holder_shows_revoked"]  # each node's own Commons says so
    assert p["counts"]["syncs"] > 0 and p["counts"]["lost_offline"] > 0
    assert 0 < p["hop_cost_ms"] < 1000


def _full_ring(world, count):
    return [world.vouch(v, (v + step) % count) for v in range(count) for step in (1, 2) if (v + step) % count != v]


def test_the_sybil_reductions_change_no_lesson_status():
    """An observer's Commons fed everything it holds (every attestation, the attacker's whole
    vouch ring) and fed only what reduce_for keeps agree on every lesson: status and history."""
    cfg = ModelConfig(nodes=60, seed=5, false_lessons=2, true_lessons=2, attest_share=0.3, honest_detect=0.7)
    rng = random.Random(9)
    count = 25
    world = _sybil_world(cfg, count, rng)
    everything = (world.false_lessons + world.true_lessons + world.honest_atts
                  + [a for s in range(count) for a in world.sybil_atts[s]] + _full_ring(world, count))
    ids = [x.id for x in world.false_lessons + world.true_lessons]
    honest = [bytes(k.verify_key) for k in world.honest]
    sybils = [bytes(k.verify_key) for k in world.sybils]
    outcomes = set()
    for obs in range(8):
        trust = frozenset(rng.sample(honest, 12) + rng.sample(sybils, obs % 3))  # some trust 0, 1 or 2 sybils
        for policy in ("open", "trusted"):
            full = lesson_outcome(observer_commons(everything, policy, trust, 3, reduce=False), ids)
            reduced = lesson_outcome(observer_commons(everything, policy, trust, 3), ids)
            assert full == reduced, (obs, policy)
            outcomes.add(tuple(sorted(full.values())))
    assert len(outcomes) > 1  # the observers differ: the comparison was not of trivial cases


def test_the_sybil_curve_open_falls_to_sybils_trusted_only_through_trust():
    cfg = ModelConfig(nodes=150, seed=4, observers=10, sybil_shares=(0.0, 0.3), false_lessons=2, true_lessons=1,
                      attest_share=0.2, honest_detect=1.0, trust_mistake=0.0, strategies=("attest+vouch",))
    rows = {(r["share"], r["policy"]): r for r in sybil_curve(cfg)["rows"]}
    assert rows[(0.0, "open")]["falsely_promoted"] == 0.0  # honest attesters are never fooled here
    assert rows[(0.3, "open")]["false_common_at_day_30"] == 1.0  # 64 sybils outvote every honest failure
    assert rows[(0.3, "trusted")]["falsely_promoted"] == 0.0  # nobody trusts a sybil: no sybil vote counts
    assert rows[(0.3, "trusted")]["observers_trusting_a_sybil"] == 0.0
    assert rows[(0.0, "open")]["true_promoted"] == 1.0
    # with careless trust lists, the vouch ring turns one trusted sybil into three
    careless = ModelConfig(nodes=150, seed=4, observers=10, sybil_shares=(0.3,), false_lessons=2, true_lessons=1,
                           attest_share=0.2, honest_detect=1.0, trust_mistake=0.3, strategies=("attest+vouch",))
    row = next(r for r in sybil_curve(careless)["rows"] if r["policy"] == "trusted")
    assert row["observers_trusting_a_sybil"] > 0 and row["falsely_promoted"] > 0


def test_the_run_writes_a_labelled_summary_and_plots(tmp_path):
    tiny = ModelConfig(nodes=100, seed=3, lessons=1, horizon_hours=1.0, observers=3, sybil_shares=(0.0, 0.2),
                       false_lessons=1, true_lessons=1, attest_share=0.2)
    result = run(tiny, tmp_path)
    assert result["what"] == MODEL_NOTE and "model" in MODEL_NOTE
    assert (tmp_path / "summary.json").exists()
    for png in ("reach.png", "sybil_curve.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"
    assert {r["policy"] for r in result["sybil"]["rows"]} == {"open", "trusted"}
