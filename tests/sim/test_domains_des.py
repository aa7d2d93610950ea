"""The domains scale model (simulations/domains_des.py) on 600 nodes: following domains cuts a
node's traffic below taking every topic, and per-domain rendezvous joins the followers of a
small domain that random connections leave apart."""

from __future__ import annotations

from simulations.domains_des import DomainModel, run


def test_following_domains_cuts_traffic_and_domain_rendezvous_joins_small_topics():
    result = run(DomainModel(nodes=600, seed=3))
    t = result["traffic"]
    assert t["followed_domains"]["records_per_day_median"] < t["all_topics"]["records_per_day"]
    assert 0 < t["followed_domains"]["share_of_all_median"] < 1
    topics = result["topics"]
    assert topics["general"]["followers"] == 600  # everyone follows general
    for domain, row in topics.items():
        assert row["reachable_with_domain_rendezvous"] >= row["reachable_random_overlay"], domain
    small = [d for d, row in topics.items() if row["share"] < 0.1]
    assert small and all(topics[d]["reachable_random_overlay"] < 0.9 for d in small)
    assert all(topics[d]["reachable_with_domain_rendezvous"] > 0.9 for d in small)
