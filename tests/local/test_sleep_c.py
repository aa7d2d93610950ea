"""The C accelerator of sleep's hot steps (``openmemory_local/_sleep_c.c``) gives the Python code's
answers exactly: the same feature dicts in the same order, the same vector bits, the same norms and
cosines, the same candidate rows and postings. The module is imported directly (these tests fail,
not skip, when it is not built, and when its build is stale), and compared with the Python
reference functions on random and real inputs."""

from __future__ import annotations

import importlib
import math
import os
import random
import sys

import numpy as np
import pytest

from openmemory_local.text import embed
from openmemory_local.text.embed import STOP_WORDS
from openmemory_protocol import native


@pytest.fixture(scope="module")
def c():
    module = importlib.import_module("openmemory_local._sleep_c")  # fails when not built
    assert native._current(module), "openmemory_local._sleep_c is stale: rebuild it (pip install -e .)"
    return module


WORDS = ["the", "a", "of", "git", "push", "pushed", "Error", "fatal", "is", "to", "tests", "{num}", "x_y", "does",
         "doe", "stopped", "flies", "ties", "boxes", "churches", "class", "status", "axis", "FOO", "running", "ING",
         "ed", "feed", "agreed", "fizzed", "falling", "3d", "ab1cd", "bus", "ies", "pies", "bees", "ss", "hissed",
         "walled", "buzzing", "mixes", "wishes", "Tests", "PUSHES", "HTTPS", "upstream", "branch", "{branch}"]
JOINERS = [" ", "-", "_", "/", ":", ", ", "", ". ", "\t", "(", ")", "'", "\n", "=", "--"]


def _text(rng: random.Random) -> str:
    joiner = rng.choice(JOINERS)
    return joiner.join(rng.choice(WORDS) for _ in range(rng.randrange(0, 25)))


def test_features_are_the_python_features_in_the_same_order(c):
    rng = random.Random(16)
    for _ in range(10000):
        text = _text(rng)
        got, expected = c.features(text, STOP_WORDS), embed._features_python(text)
        assert list(got.items()) == list(expected.items()), text
        assert all(type(v) is float for v in got.values())
    # texts of the real workload (every signature of the synthetic store's failures)
    from simulations.workload import Workload
    from datetime import datetime, timezone

    for ep in Workload(seed=3).episodes(600, datetime(2026, 1, 1, tzinfo=timezone.utc), 3):
        for text in (ep.text, *(str(v) for v in ep.fields.values())):
            if text.isascii():
                assert list(c.features(text, STOP_WORDS).items()) == list(embed._features_python(text).items())


def test_features_leave_a_non_ascii_text_to_the_python_code(c):
    for text in ["café crème", "ﬁle not found", "naïve", "\u0663\u0664 items", "x\u00a0y", "日本語 git push"]:
        assert c.features(text, STOP_WORDS) is None
        assert embed._features_uncached(text) == embed._features_python(text)  # the fallback is taken
    with pytest.raises(TypeError):
        c.features(b"git push", STOP_WORDS)
    with pytest.raises(TypeError):
        c.features("git push", ["a"])
    assert list(c.features("the a of git", frozenset({"git"})).items()) == [("the", 1.0), ("a", 1.0), ("of", 1.0),
                                                                            ("the a", 0.5), ("a of", 0.5),
                                                                            ("of git", 0.5)]


def test_slots_are_blake2b_of_every_length(c):
    rng = random.Random(2)
    for n in list(range(0, 300)) + [1000, 4096]:  # one block, the block boundary (128), several blocks
        text = "".join(rng.choice("ab z9\u00e9\u4e2d\U0001f600") for _ in range(n))
        embed._slot.cache_clear()
        assert c.slot(text) == embed._slot(text), n


def _by_element(feats: dict) -> np.ndarray:
    # the straightforward definition: each feature added into the array, one by one
    vec = np.zeros(embed.DIMS, dtype=np.float64)
    for feature, weight in feats.items():
        index, sign = embed._slot(feature)
        vec[index] += sign * weight
    norm = math.sqrt(math.fsum((vec * vec).tolist()))
    if norm > 0.0:
        vec /= norm
    return vec.astype(np.float32)


def test_vectors_are_the_python_vectors_bit_for_bit(c):
    rng = random.Random(5)
    out = np.empty(embed.DIMS, dtype=np.float32)
    for _ in range(600):
        n = rng.choice([0, 1, 2, 5, 20, 300, 1000])  # 1000 features: slots collide, signs cancel
        feats = {f"w{rng.randrange(2000)} {rng.randrange(9)}": rng.choice([1.0, 0.5, 2.0, rng.random(), 1e-300, 3e150])
                 for _ in range(n)}
        expected = embed._embed_features_python(feats)
        assert c.embed_into(feats, out) is True
        assert out.tobytes() == expected.tobytes() == _by_element(feats).tobytes()
        assert embed.embed_features(feats).tobytes() == expected.tobytes()
    for text in (_text(rng) for _ in range(1000)):
        feats = embed._features_python(text)
        assert embed.embed_features(feats).tobytes() == embed._embed_features_python(feats).tobytes()


def test_vectors_of_odd_weights_are_left_to_the_python_code(c):
    out = np.zeros(embed.DIMS, dtype=np.float32)
    for feats in ({"a": 1}, {"a": float("inf")}, {"a": float("nan")}, {"a": 1e200}, {1: 1.0}):
        assert c.embed_into(feats, out) is False and not out.any()
    odd = {"a": 1, "b": 2.0}
    assert embed.embed_features(odd).tobytes() == embed._embed_features_python(odd).tobytes()
    with pytest.raises(ValueError):
        c.embed_into({"a": 1.0}, np.zeros(10, dtype=np.float32))
    with pytest.raises(BufferError):
        c.embed_into({"a": 1.0}, b"\0" * 1024)  # not writable


def test_norms_and_cosines_are_the_python_values(c):
    rng = random.Random(9)
    texts = [_text(rng) for _ in range(400)]
    dicts = [embed._features_python(t) for t in texts]
    dicts += [{f"f{rng.randrange(30)}": rng.choice([rng.random(), 1e-170, 1e150, -rng.random(), 0.5])
               for _ in range(rng.randrange(0, 40))} for _ in range(400)]
    for a in dicts:
        assert c.feature_norm(a) == embed._feature_norm_python(a)
    for _ in range(20000):
        a, b = rng.choice(dicts), rng.choice(dicts)
        norms = rng.choice([(None, None), (embed._feature_norm_python(a), None), (None, 2.5),
                            (embed._feature_norm_python(a), embed._feature_norm_python(b))])
        try:
            expected = embed._feature_cosine_python(a, b, *norms)
        except ZeroDivisionError:
            assert c.feature_cosine(a, b, *norms) is None
            continue
        got = c.feature_cosine(a, b, *norms)
        assert got == expected or (math.isnan(got) and math.isnan(expected)), (a, b, norms)
        assert embed.feature_cosine(a, b, *norms) == expected or math.isnan(expected)
    # what C does not take, the Python code decides
    assert c.feature_norm({"a": 1}) is None and c.feature_norm({"a": 1e200}) is None
    assert c.feature_cosine({"a": 1.0}, {"a": 2}, None, None) is None
    assert c.feature_cosine({"a": 1.0}, {"a": 1.0}, 0.0, 1.0) is None
    with pytest.raises(ZeroDivisionError):
        embed.feature_cosine({"a": 1.0}, {"a": 1.0}, 0.0, 1.0)
    assert embed.feature_cosine({"a": 1}, {"a": 2.0}) == embed._feature_cosine_python({"a": 1}, {"a": 2.0})


def test_the_accelerator_is_what_the_engine_uses_unless_turned_off(c):
    import subprocess

    code = ("import openmemory_local.text.embed as e, openmemory_local.sleep.cluster as k; e.features('x y'); "
            "print(e._NATIVE is not None, k._FIND is not None)")
    env = {k: v for k, v in os.environ.items() if k != "OPENMEMORY_PURE"}
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                        env=env).stdout.split()
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "OPENMEMORY_PURE": "1"}).stdout.split()
    assert on == ["True", "True"] and off == ["False", "False"]


def test_facet_hits_are_the_python_hits(c):
    from openmemory_local.sleep import passes as sleep_module
    from openmemory_local.sleep.situations import OPTION_ALIASES

    rng = random.Random(30)
    commands = ["git push", "git push --set-upstream origin {branch}", "git push -u origin {branch}", "mix test",
                "mix format", "git add priv/static/assets/app.css", "Edit lib/app.ex", "Read test/support",
                "uv sync", "pip install -r requirements.txt", "npm ci", "git commit -m {num}", "mix deps.get"]
    for _ in range(200):
        probe_rows = []
        for i in range(rng.randrange(1, 12)):
            text = rng.choice(commands)
            probe = {"text": text, "require": rng.choice([None, None, "priv/static", "lib/", ""]),
                     "role": rng.choice(["situation", "failure", "resolution"])}
            if rng.random() < 0.4:
                probe["words"] = rng.sample(["--set-upstream", "-u", "origin", "--force", "test", "x"],
                                            rng.randrange(0, 3))
            feats = embed.features(text)
            key = (text, probe["require"], tuple(probe.get("words") or ()))  # what sleep keys the memo by
            probe_rows.append((i, probe, feats, embed.feature_norm(feats), key))
        postings: dict = {}
        for k, row in enumerate(probe_rows):
            for feature in row[2]:
                postings.setdefault(feature, []).append(k)
        for _ in range(20):
            facet = " ".join(rng.sample(" ".join(commands).split(), rng.randrange(1, 6)))
            feats = embed.features(facet)
            threshold = rng.choice([0.0, 0.3, 0.5, 0.9])
            expected = sleep_module._facet_hits_python(facet, feats, probe_rows, postings, threshold)
            assert c.facet_hits(facet, feats, probe_rows, postings, threshold, OPTION_ALIASES) == expected
            sleep_module._PAIR_SIMS.clear()
            assert sleep_module._facet_hits(facet, probe_rows, postings, threshold) == expected
    # what C does not take, the Python code decides
    row = (0, {"text": "a"}, {"a": 1}, 1.0, ("a", None, ()))
    assert c.facet_hits("a", {"a": 1.0}, [row], {"a": [0]}, 0.5, {}) is None
    assert c.facet_hits("a", {"a": 1.0}, [], {"a": [3]}, 0.5, {}) is None
    assert c.facet_hits("a", {"a": 1.0}, [], {"a": [0]}, 1, {}) is None
    assert c.facet_hits("a", {"b": 1.0}, [], {"a": [0]}, 0.5, {}) == ()


def test_command_heads_are_the_python_heads(c):
    from openmemory_local.ingest import episodes
    pieces = ["git push", "git -C repo push", "git --git-dir x status", "git -c a=b commit -m 'x && y'", "mix test",
              "cd /tmp", "echo hi", "sudo -u root apt-get install x", "time 3 make", "env A=1 B=2 npm ci",
              "timeout 10 mix test", "FOO=bar uv sync", "python -m pytest -q", "python3 -m", "python -m",
              "grep x file", "cat a | grep b | wc -l", "2>&1", "./bin/run --x", "../x/", "/usr/bin/git log",
              "npm run build:prod", "cargo +nightly build", "go 1test", "docker compose up -d", "bd ready",
              "a=1", "_x=", "1a=2 ls", "sleep 1", "printf x", "true", "make -j8 all", "git commit -m \"a \\\" b\"",
              "tail -f log", "xargs rm", "git 'push'", "\"git\" push", "npx -y create-x", "kubectl -n ns get pods"]
    joiners = [" && ", " || ", "; ", " | ", " & ", "&&", "|", ";", " \\\n ", "\n", " ", "\t", "\x1c", "|||", "&&&"]
    rng = random.Random(40)
    texts = ["", " ", "\n\n", "'unclosed && x", "\"unclosed \\", "a \\", "\"x\\\"", "''", "a'b'c | d",
             "\t\x0b git push"]
    for _ in range(20000):
        text = rng.choice(["", " ", "\n", "  \t"]) + "".join(
            rng.choice(pieces) + rng.choice(joiners) for _ in range(rng.randrange(1, 6)))
        if rng.random() < 0.2:
            k = rng.randrange(len(text) + 1)
            text = text[:k] + rng.choice("'\"\\&|;= -/") + text[k:]
        texts.append(text)
    for text in texts:
        assert c.command_heads(text, episodes._MULTI, episodes._WRAPPERS, episodes._FILTERS, episodes._NEVER) == \
            episodes._command_heads_python(text), repr(text)
    assert c.command_heads("git push \u2014 x", episodes._MULTI, episodes._WRAPPERS, episodes._FILTERS,
                           episodes._NEVER) is None
    assert episodes._command_heads_uncached("caf\u00e9 && git push") == ["café", "git push"]


VOLATILE_PIECES = ["2024-01-02", "T", " ", "10:11", ":12", ".5", ",25", "+01:00", "-0530", "Z", "3f9c2e1d", "KB",
                   "123e4567-e89b-12d3-a456-426614174000", "deadbeef12", "1.5", "abcd", "/", "tmp", "ab12", ".py",
                   "{num}", "{id}", "x", "-", "_", "9" * 70, "aaa" + "1" * 61, "1.2.3", "v1", "...", "\t", "=", "'"]
VOLATILE_CHARS = "0123456789abcdefABCDEFTZgxz_ -:.,+/{}\t\n\x1c\x0b'\"=()`<>;|&"


def _strings(value, out: list) -> None:
    if isinstance(value, str):
        out.append(value[:3000])
        out.extend(line for line in value[:3000].splitlines()[:50])
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


def test_volatile_tokens_are_the_python_ones(c, shared_data):
    from openmemory_local.text import normalize
    from .transcripts import real_records

    rng = random.Random(50)
    texts = ["", " ", "\x1c x \x1f", "1", "a1", "1a", "1abcd", "1.5abcd", "1.2.3.x", "12:345", "1:2", "2024-01-02T1:22",
             "2024-01-02 10:11:12.123+0530", "2024-01-02T10:11:12,5Z9", "abcdef1", "abcdef", "1234567", "a" * 63 + "1",
             "a" * 64 + "1", "/tmp/x1/y.tar.gz", "a/1.b/c.", "x/.1/1./{num}1", "/{num}/{id}"]
    for k in range(60000):
        if k % 2:
            text = "".join(rng.choice(VOLATILE_CHARS) for _ in range(rng.randrange(0, 40)))
        else:
            text = "".join(rng.choice(VOLATILE_PIECES if rng.random() < 0.7 else VOLATILE_CHARS)
                           for _ in range(rng.randrange(0, 14)))
        texts.append(text)
    # the real transcripts' texts (commands, outputs, messages, paths)
    generated = len(texts)
    for record in real_records(shared_data):
        _strings(record, texts)
    real = 0
    for k, text in enumerate(texts):
        got = c.volatile_tail(text)
        if not text.isascii():
            assert got is None
            continue
        real += k >= generated
        assert got == normalize._volatile_tail_python(text), repr(text)
    assert real > 100_000  # the transcripts were read
    with pytest.raises(TypeError):
        c.volatile_tail(b"1.5")


def test_normalise_is_the_same_with_and_without_the_accelerator(c, monkeypatch):
    from datetime import datetime, timezone

    from openmemory_local.text import normalize
    from simulations.workload import Workload

    cases = []
    for ep in Workload(seed=5).episodes(800, datetime(2026, 1, 1, tzinfo=timezone.utc), 3):
        cwd, branch = ep.fields.get("cwd"), ep.fields.get("branch")
        for text in (ep.text, *(str(v) for v in ep.fields.values())):
            cases.append((text, cwd, branch))
    cases += [("caf\u00e9 /tmp/x1 12", None, None), ("\u0663 1.5", "/a", "b")]  # the Python code's
    with_c = [normalize._normalise_uncached(t, cwd=cwd, branch=b) for t, cwd, b in cases]
    monkeypatch.setattr(embed, "_NATIVE", None)
    assert [normalize._normalise_uncached(t, cwd=cwd, branch=b) for t, cwd, b in cases] == with_c
