"""The fast paths of sleep give the old algorithm's result exactly (differential tests against
the straightforward versions they replaced, on random data)."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np

from openmemory_local.sleep.cluster import _most_shared
from openmemory_local.text.embed import DIMS, _slot, embed_features


def _embed_features_by_element(feats: dict) -> np.ndarray:
    # the version before: each feature added into the array, one by one
    vec = np.zeros(DIMS, dtype=np.float64)
    for feature, weight in feats.items():
        index, sign = _slot(feature)
        vec[index] += sign * weight
    norm = math.sqrt(math.fsum((vec * vec).tolist()))
    if norm > 0.0:
        vec /= norm
    return vec.astype(np.float32)


def test_embed_features_is_bit_for_bit_the_element_by_element_sum():
    rng = random.Random(5)
    for _ in range(1000):
        n = rng.choice([0, 1, 2, 5, 20, 300, 1000])  # 1000 features: slots collide, signs cancel
        feats = {f"w{rng.randrange(2000)} {rng.randrange(9)}": rng.choice([1.0, 0.5, 2.0, rng.random()])
                 for _ in range(n)}
        assert embed_features(feats).tobytes() == _embed_features_by_element(feats).tobytes()
    assert not embed_features({}).any()


def test_most_shared_names_the_groups_most_common_names():
    rng = random.Random(11)
    for _ in range(1000):
        n = rng.choice([1, 2, 5, 64])
        size = rng.randrange(n + 1, 4 * n + 200)
        counts = Counter()
        for gid in rng.sample(range(10 * size), size):  # insertion order is not the ids' order
            counts[gid] = rng.choice([1, 1, 1, 2, 3, rng.randrange(1, 13)])
        expected = [g for g, _ in counts.most_common(n)]
        got = _most_shared(counts, n)
        assert sorted(got) == sorted(expected) and len(got) == n


def _ids_times_numbers_every_pattern(text: str) -> str:
    # the version before: every pattern tried on every text
    from openmemory_local.text.normalize import _CLOCK, _HEX, _ISO_TIME, _NUMBER, _UUID

    text = _UUID.sub("{id}", text)
    text = _ISO_TIME.sub("{time}", text)
    text = _CLOCK.sub("{time}", text)
    text = _HEX.sub("{hash}", text)
    return _NUMBER.sub("{num}", text)


def test_volatile_tokens_are_replaced_as_when_every_pattern_was_tried():
    from openmemory_local.text.normalize import _ids_times_numbers

    pieces = ["abcdefab-abcd-abcd-abcd-abcdefabcdef", "3f9c2e1d-0000-4000-8000-00000000beef", "2026-01-02",
              "2026-01-02T10:11:12.5Z", "10:11", "9:05:01,25", "bd0afab", "deadbeefcafe", "806.5KB", "42",
              "x-1", "-", ":", "a:b", "\u0663\u0664:\u0661\u0662", "\u0660\u0661\u0662\u0663-01-02", "v1.2.3",
              "tmpab12cd", "Error:", "fatal", "ok", "--flag=3", "/tmp/x-9/y", "e", "\t", "  "]
    rng = random.Random(3)
    for _ in range(5000):
        text = rng.choice(["", " ", "-", ":", "/"]).join(rng.choice(pieces) for _ in range(rng.randrange(0, 6)))
        assert _ids_times_numbers(text) == _ids_times_numbers_every_pattern(text), text


def _features_before(text: str) -> dict:
    # the version before, word by word
    from openmemory_local.text.embed import _BIGRAM_WEIGHT, STOP_WORDS, _raw_tokens, stem

    raw = _raw_tokens(text)
    toks = [stem(t) for t in raw]
    out: dict[str, float] = {}
    for word, tok in zip(raw, toks):
        if word not in STOP_WORDS:
            out[tok] = out.get(tok, 0.0) + 1.0
    for (lw, left), (rw, right) in zip(zip(raw, toks), zip(raw[1:], toks[1:])):
        if lw in STOP_WORDS and rw in STOP_WORDS:
            continue
        pair = f"{left} {right}"
        out[pair] = out.get(pair, 0.0) + _BIGRAM_WEIGHT
    return out


def test_features_are_the_word_by_word_features_in_the_same_order():
    from openmemory_local.text.embed import _features_uncached

    words = ["the", "a", "of", "git", "push", "pushed", "Error", "fatal", "is", "to", "tests", "{num}", "x_y",
             "café", "ﬁle", "does", "doe", "push", "git"]
    rng = random.Random(8)
    for _ in range(5000):
        text = " ".join(rng.choice(words) for _ in range(rng.randrange(0, 12)))
        got, expected = _features_uncached(text), _features_before(text)
        assert list(got.items()) == list(expected.items()), text


def test_decay_gives_each_rewritten_row_a_new_seq_that_recall_follows(store):
    from datetime import datetime, timedelta, timezone

    from openmemory_local.core.clock import iso
    from openmemory_local.ingest.episodes import Episode
    from openmemory_local.ingest.transcripts import add_episodes
    from openmemory_local.recall.query import index_for
    from openmemory_local.sleep.passes import decay

    start = datetime(2026, 3, 2, tzinfo=timezone.utc)
    episodes = [Episode("session", f"s{d}", f"Session {d} ran git push and mix test {d}.",
                        {"commands": {"git push": 1}, "command_lines": ["git push"], "files_edited": [],
                         "files_read": [], "cwd": "/home/me/app", "branch": "main"}, f"s{d}", None, "/home/me/app",
                        iso(start + timedelta(days=d)), 1) for d in range(30)]
    add_episodes(store, episodes, now=start + timedelta(days=30))
    index = index_for(store)
    index.refresh()
    before = store.counter("episode_seq")
    seqs = dict(store.conn.execute("SELECT id, seq FROM episodes"))
    out = decay(store, start + timedelta(days=40))
    assert out["episodes_decayed"] == 30
    after = dict(store.conn.execute("SELECT id, seq FROM episodes"))
    changed = sorted(eid for eid in after if after[eid] != seqs[eid])
    # each decayed row has its own new seq above what a cache saw, the counter is the last of them
    assert len(changed) == 30 and sorted(after[e] for e in changed) == list(range(before + 1, before + 31))
    assert store.counter("episode_seq") == before + 30 == max(after.values())
    index.refresh()  # the incremental refresh (rows whose seq moved) sees every new strength
    strengths = dict(store.conn.execute("SELECT id, strength FROM episodes"))
    assert all(s < 1.0 for s in strengths.values())
    for eid, value in strengths.items():
        assert index.strength[index._row_of[eid]] == np.float32(value)
    # any other update still moves seq through the trigger
    eid = changed[0]
    with store.write():
        store.conn.execute("UPDATE episodes SET strength = 0.25 WHERE id = ?", (eid,))
    assert store.conn.execute("SELECT seq FROM episodes WHERE id = ?", (eid,)).fetchone()[0] == before + 31
    assert store.counter("episode_seq") == before + 31
    index.refresh()
    assert index.strength[index._row_of[eid]] == np.float32(0.25)


def test_recent_heads_read_once_are_what_the_store_query_gives(store):
    from datetime import datetime, timedelta, timezone

    from openmemory_local.core.clock import iso
    from openmemory_local.ingest.episodes import Episode
    from openmemory_local.ingest.transcripts import add_episodes
    from openmemory_local.sleep.passes import _recent_heads, _RecentHeads

    start = datetime(2026, 3, 2, tzinfo=timezone.utc)
    rng = random.Random(4)
    programs = ["git push", "uv sync", "pip install", "mix test", "npm ci", "cargo build", "make", "go test"]
    episodes = []
    for n in range(60):
        project = rng.choice(["/home/me/app", "/home/me/api", "/home/me/web"])
        minute = rng.choice([n, n, 7, 7, 30])  # sessions created at the same moment, some across a cut
        commands = {c: 1 for c in rng.sample(programs, rng.randrange(1, 4))}
        episodes.append(Episode("session", f"s{n}", f"Session {n}.", {"commands": commands, "cwd": project},
                                f"s{n}", None, project, iso(start + timedelta(minutes=minute)), 1))
    add_episodes(store, episodes, now=start + timedelta(days=1))
    lists = [[], ["/home/me/app"], ["/home/me/api", "/home/me/web"], ["/home/me/app", "/home/me/app"],
             ["/nowhere"], ["/home/me/web", "/nowhere", "/home/me/app"]]
    for cut in (1, 2, 3, 5, 8, 13, 40, 200):
        fast = _RecentHeads(store, cut)
        for projects in lists:
            assert fast(projects) == _recent_heads(store, projects, cut), (cut, projects)


def test_find_on_sums_grown_into_new_zeros_is_find_on_sums_never_grown():
    from openmemory_local.sleep.cluster import GroupIndex
    from openmemory_local.text.embed import features

    rng = random.Random(17)
    words = [f"w{k}" for k in range(40)] + ["git", "push", "fatal", "error", "mix", "test", "branch"]
    for exhaustive in (0, 8, 256):
        grown = GroupIndex(exhaustive_max=exhaustive, prefix=12, posting_cap=50, candidates=16)
        sized = GroupIndex(exhaustive_max=exhaustive, prefix=12, posting_cap=50, candidates=16)
        sized._sums = np.zeros((4096, DIMS))  # room for every group: never grows
        next_gid = 1
        keys = [("error", "/a"), ("error", "/b"), ("correction", "/a")]
        for step in range(1500):  # past 64, 128, 256 and 512 groups: the sums grow
            key = rng.choice(keys)
            sig = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 8)))
            feats = features(sig)
            vector = embed_features(feats)
            threshold = rng.choice([0.3, 0.55, 0.8])
            got = grown.find(key, sig, feats, vector, threshold)
            assert got == sized.find(key, sig, feats, vector, threshold), step
            gid = got[0]
            if gid is None:
                gid, next_gid = next_gid, next_gid + 1
                grown.add(gid, key, np.zeros(DIMS))
                sized.add(gid, key, np.zeros(DIMS))
                if rng.random() < 0.05:
                    continue  # a group left at a zero sum (a zero norm scored as 1.0)
            grown.join(gid, key, sig, feats, vector)
            sized.join(gid, key, sig, feats, vector)
        assert len(grown._sums) > 64 and grown._sums[:len(grown)].tobytes() == sized._sums[:len(sized)].tobytes()
