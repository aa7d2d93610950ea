"""``is_observation`` runs the rule's tests in another order than ``observation_violation`` (the
language test before the clause scan, so that a text of other words is refused sooner, as the
lesson texts of a failure quoting a foreign message are): the *reason* may differ, the verdict must
not. Checked on every corpus of test_rule_differential.py and its mutations, on texts built from
the rule's vocabulary, and on lesson texts quoting made-up words (by the accelerator when it is
built, by the Python code with ``OPENMEMORY_PURE=1``)."""

from __future__ import annotations

import random
import string

from openmemory_protocol import observation as rule

from .test_rule_differential import _corpus, _mutate, _transcript_texts
from .test_rule_native import _vocabulary, _vocabulary_text


def _made_up(rng: random.Random) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9)))


def _lesson_texts(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        words = " ".join(_made_up(rng) if rng.random() < 0.7 else rng.choice(("run", "the", "build", "failed", "it",
                                                                              "Use", "must", "please", "to"))
                         for _ in range(rng.randint(0, 8)))
        head = rng.choice(("error", "failed", "fatal", "Run", "please run", "you must"))
        out.append(f'`{_made_up(rng)}` failed in {rng.randint(1, 4)} session: "{head}: {words}"')
    return out


def test_the_verdict_is_whether_there_is_a_violation():
    rng = random.Random(21)
    base = _corpus() + _transcript_texts()
    vocabulary = _vocabulary()
    texts = base + [_mutate(rng.choice(base), rng) for _ in range(1500)]
    texts += [_vocabulary_text(rng, vocabulary) for _ in range(3000)] + _lesson_texts(rng, 3000)
    different = [t for t in texts if rule.is_observation(t) != (rule.observation_violation(t) is None)]
    assert not different, different[:5]
    # the comparison can fail: both verdicts in numbers, and texts refused for their language that an
    # earlier test refuses too (where the order of the tests decides the reason given)
    verdicts = [rule.is_observation(t) for t in texts]
    assert sum(verdicts) > 1000 and len(verdicts) - sum(verdicts) > 3000
    both = [t for t in texts if (v := rule.observation_violation(t)) is not None and v.rule != "not-english"
            and rule._violation(t, True).rule == "not-english"]
    assert len(both) > 100
