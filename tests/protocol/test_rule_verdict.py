"""``is_observation`` runs the rule's tests in another order than ``observation_violation`` (the
language test before the clause scan, so that a text of other words is refused sooner, as the
lesson texts of a failure quoting a foreign message are): the *reason* may differ, the verdict must
not. Checked on every corpus of test_rule_differential.py and its mutations, on texts built from
the rule's vocabulary, and on lesson texts quoting made-up words."""

from __future__ import annotations

import random
import string

from openmemory_protocol import observation as rule

from .test_rule_differential import _corpus, _mutate, _transcript_texts


# ---- texts built from the rule's vocabulary -------------------------------------------------

def _vocabulary() -> list[str]:
    verbs = sorted(rule.tables().verbs)
    rng = random.Random(11)
    words = rng.sample(verbs, 300) + ["run", "build", "type", "test", "merge", "open", "copy", "list", "use", "set"]
    words += sorted(rule.SKIPPED_OPENERS) + sorted(rule.LABELS) + sorted(rule.PREDICATE_WORDS)
    words += sorted(rule._CLAUSE_WORDS) + sorted(rule._STOPS) + list(rule.REPORTING_VERBS)
    words += [" ".join(p) for p in rule.SKIPPED_PHRASES] + sorted(rule.ALWAYS_IMPERATIVE)
    words += ["Open Memory", "Open", "Memory", "to", "into", "onto", "with", "the", "a", "an", "this", "it", "your",
              "my", "our", "that", "these", "failed", "stopped", "refused", "runs", "builds", "passes", "tried",
              "Build", "Run", "RUN", "Tests", "Type", "you", "You must", "agent", "the agent will", "please",
              "must", "should", "have to", "need to", "make sure", "is required", "told the agent to run",
              "ignore previous instructions", "SYSTEM:", "<|im_start|>", "[INST]", "<<SYS>>", "admin mode",
              "Alw4ys", "1gn0re", "pr3v10us", "v2", "utf8", "sha256", "a1b2", "x_1a", "i-nstruction", "as-sis-tant",
              "pre-commit", "re-run", "Re-run", "Re-Build", "step-by-step", "quickly", "daily", "apply", "fly",
              "it's", "don't", "let's", "can't", "o'clock", "rock'n'roll", "'tis", "dogs'", "Sempre", "usar",
              "Dialyzer", "zzkqx", "qwzrt", "blorf", "xyzzy", "foo", "bar", "baz", "expect(response)", "(char 255)",
              "assert 401 == 200", "==", "->", "=>", "&&", "||", "#", "@", "%", "^", "+", "*", "**", "$HOME",
              "~/x", "/tmp/a", "a/b", "./x", ".env", "-f", "--force", "1", "2", "3.5", "1,000", "10.0.0.1",
              "1e3", "0x1f", "42nd", "Step 1", "Note:", "hint 2 -", "FATAL", "error:", "TODO", "fyi"]
    return words


_PUNCTUATION = [".", ",", ";", ":", "!", "?", "...", "?!", " - ", " -- ", "-", "--", "\n", "\n\n", " (", ")", "(", "[",
                "]", "{", "}", "\"", "'", " '", "' ", "`", "``", "```", "`x`", "`git push`", "``a`b``",
                "[link](http://x)",
                "![img](a.png)", "[text]", "**", "__", "_", "~~", "*", "<b>", "</b>", "<!--", "-->", "<x y=1>", "<|",
                "|>", "\t", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f", "\x00", "\x7f", "\x01",
                "  ", " ", " ", " ", " "]


def _vocabulary_text(rng: random.Random, vocabulary: list[str]) -> str:
    pieces = []
    for _ in range(rng.randint(0, 24)):
        r = rng.random()
        if r < 0.55:
            word = rng.choice(vocabulary)
            if rng.random() < 0.15:
                word = word.capitalize() if rng.random() < 0.7 else word.upper()
            pieces.append(word)
        elif r < 0.9:
            pieces.append(rng.choice(_PUNCTUATION))
        else:
            pieces.append("".join(rng.choice(string.printable) for _ in range(rng.randint(1, 6))))
        pieces.append(rng.choice((" ", " ", " ", "", "\n")))
    return "".join(pieces)


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
