"""The observation rule's C accelerator (openmemory_protocol/_observation_c.c) against its Python
code, which is the reference: the same verdict AND reason on every text, and the same value from
each piece it replaces (the lowered forms and their words, the clauses with their tokens, the
token cache's entries, the clause scan and the language counts).

The texts: every corpus of test_rule_differential.py (both corpora, the spec's vectors, lessons,
texts cut from the real transcripts, seeded Unicode mutations), then ASCII texts built at random
from the rule's own vocabulary (verbs, openers, labels, clause words, predicate words, names,
reporting verbs, punctuation, brackets, quotes, code spans, links, markup, odd white space,
numbers, paths, look-alike and hyphenated words) so that every branch is taken, seeded and by
hypothesis.

The module is imported directly (not through openmemory_protocol.native, which OPENMEMORY_PURE
turns off): these tests fail, they do not skip, when it is not built or is stale.
"""

from __future__ import annotations

import hashlib
import importlib
import random
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openmemory_protocol import observation as rule

from .test_rule_differential import _corpus, _mutate, _transcript_texts

SOURCE = Path(rule.__file__).with_name("_observation_c.c")


@pytest.fixture(scope="module")
def accelerator():
    module = importlib.import_module("openmemory_protocol._observation_c")  # fails when not built
    assert module.SOURCE_SHA256 == hashlib.sha256(SOURCE.read_bytes()).hexdigest(), (
        "openmemory_protocol._observation_c is stale: .venv/bin/python setup.py build_ext --inplace")
    return module


class Paths:
    """The rule by its C path and by its Python path, each with a token cache of its own (the
    Python path must not read tokens the C code classified, nor the other way round)."""

    def __init__(self, module, limit: int = rule._TOKENS_LIMIT):
        self.module = module
        self.c = rule._tables()
        self.py_tokens: dict = {}
        self.limit = limit

    def __enter__(self):
        self.saved = (self.c.native, rule._TOKENS)
        self.module.setup(rule._CLAUSE_WORDS, rule.is_english_word, rule._prose, self.c.verbs, rule._OPENING,
                          (rule._W, rule._C, rule._T, rule._N, rule._O, rule._S), self.limit)  # (its cache emptied)
        return self

    def __exit__(self, *exc):
        self.c.native, rule._TOKENS = self.saved
        rule._set_up(self.module, self.c.verbs)  # the module's tables are the rule's again

    def native(self, text: str):
        self.c.native = self.module
        return _answer(rule.observation_violation(text))

    def python(self, text: str):
        self.c.native, saved = None, rule._TOKENS
        rule._TOKENS = self.py_tokens
        try:
            return _answer(rule.observation_violation(text))
        finally:
            rule._TOKENS = saved

    def python_clauses(self, canonical: str):
        saved, rule._TOKENS = rule._TOKENS, self.py_tokens
        try:
            return rule._clauses(canonical)
        finally:
            rule._TOKENS = saved

    def check(self, text: str) -> list:
        """Every difference between the two paths on ``text`` (empty when they agree)."""
        out = []
        native, python = self.native(text), self.python(text)
        if native != python:
            out.append(("answer", text, native, python))
        _, canonical = rule.canonical_form(text)
        clauses = self.python_clauses(canonical)
        if canonical.isascii():
            selectors = rule._selectors()
            native, python = self.module.forms(canonical, selectors[2]), rule._select(canonical, selectors)
            if native != python:
                out.append(("forms", text, native, python))
            native_clauses = self.module.clauses(canonical)
            if native_clauses != clauses:
                out.append(("clauses", text, native_clauses, clauses))
        if self.module.counts(clauses) != rule._counts(clauses):
            out.append(("counts", text, self.module.counts(clauses), rule._counts(clauses)))
        for start in range(len(clauses) + 1):
            if self.module.next_clause(clauses, start) != rule._next_clause(clauses, start, self.c.verbs):
                out.append(("next_clause", text, start))
        return out


def _answer(violation):
    return None if violation is None else (violation.rule, violation.detail)


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


def _assert_agree(paths: Paths, texts: list[str]) -> None:
    problems = []
    for text in texts:
        problems += paths.check(text)
    assert not problems, problems[:3]


# ---- the tests --------------------------------------------------------------------------------

def test_the_rule_uses_the_accelerator_unless_it_is_turned_off(accelerator, monkeypatch):
    import os

    assert (rule._tables().native is None) == bool(os.environ.get("OPENMEMORY_PURE"))
    if rule._tables().native is not None:
        assert rule._tables().native is accelerator


def test_both_paths_agree_on_every_corpus_and_mutation(accelerator):
    base = _corpus() + _transcript_texts()
    rng = random.Random(4)
    texts = base + [_mutate(rng.choice(base), rng) for _ in range(4000)]
    assert len(texts) >= 5000 and sum(rule.canonical_form(t)[1].isascii() for t in texts) > 3000
    with Paths(accelerator) as paths:
        _assert_agree(paths, texts)
        answers = [paths.native(t) for t in texts]
    # the comparison can fail: both verdicts, and every rule, in numbers
    assert sum(a is None for a in answers) > 1000
    assert {a[0] for a in answers if a} == set(rule.RULES)


def test_both_paths_agree_on_texts_built_from_the_rule_s_vocabulary(accelerator):
    rng = random.Random(16)
    vocabulary = _vocabulary()
    texts = [_vocabulary_text(rng, vocabulary) for _ in range(12000)]
    with Paths(accelerator) as paths:
        _assert_agree(paths, texts)
        answers = [paths.native(t) for t in texts]
    rules = {a[0] for a in answers if a}
    assert sum(a is None for a in answers) > 500 and rules >= {"addressed-to-agent", "obligation",
                                                               "imperative-opening", "not-english"}


@settings(max_examples=1500, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(st.sampled_from(_vocabulary()), st.sampled_from(_PUNCTUATION),
                          st.text(alphabet=st.characters(max_codepoint=127), max_size=6)), max_size=30),
       st.lists(st.sampled_from(["", " ", "\n", "  "]), min_size=30, max_size=30))
def test_both_paths_agree_on_generated_ascii_texts(accelerator, pieces, gaps):
    text = "".join(p + g for p, g in zip(pieces, gaps))
    with Paths(accelerator) as paths:
        assert paths.check(text) == []


def test_the_token_classification_and_its_cache(accelerator):
    raws = set()
    rng = random.Random(3)
    vocabulary = _vocabulary()
    for text in _corpus() + [_vocabulary_text(rng, vocabulary) for _ in range(2000)]:
        raws.update(t for t in text.replace("`", " ").split() if t.isascii())
    alphabet = string.ascii_letters + string.digits + "'-./,~$_:!?"
    raws.update("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 5))) for _ in range(5000))
    with Paths(accelerator) as paths:
        for raw in sorted(raws):
            token = rule._token(raw)
            if token[0] == rule._W:
                token = None if token[2] in rule._CLAUSE_WORDS else token + (rule.is_english_word(token[2]),)
            cached = accelerator.cached()
            first = accelerator.token(raw)
            assert first == token, raw
            assert accelerator.cached() == cached + 1  # cached
            assert accelerator.token(raw) is first and accelerator.cached() == cached + 1  # and read back
        assert {rule._token(r)[0] for r in raws} == {rule._W, rule._T, rule._N, rule._O, rule._S}


def test_a_full_cache_is_cleared_as_the_python_code_clears_it(accelerator):
    texts = _corpus()[:400]
    with Paths(accelerator, limit=8) as paths:
        for text in texts:
            assert paths.native(text) == paths.python(text), text
            assert accelerator.cached() <= 8


def test_bad_input_is_refused_with_an_error(accelerator):
    with Paths(accelerator):
        selection = rule._selectors()[2]
        for function in (lambda t: accelerator.forms(t, selection), accelerator.clauses, accelerator.token):
            with pytest.raises(TypeError):
                function(b"bytes")
            with pytest.raises(ValueError):
                function("caf\u00e9")
        vocabulary, addressed, obligation = selection
        for bad, error in ((({"a": (0, 0, 0)}, (), ()), None), ("selection", TypeError),
                           (({"caf\u00e9": (0, 0, 0)}, addressed, obligation), ValueError),
                           (({"a": (1 << len(addressed), 0, 0)}, addressed, obligation), ValueError),
                           (({"a": (-1, 0, 0)}, addressed, obligation), OverflowError),
                           (({"a": (0, 0)}, addressed, obligation), ValueError),
                           (({"a": (0, 0, 0)}, addressed * 2, obligation), ValueError)):
            if error is None:
                assert accelerator.forms("a b", bad) == (["a b"], [], [], False)
            else:
                with pytest.raises(error):
                    accelerator.forms("text", bad)
        assert accelerator.forms("Text to Say", selection) == (["text to say"], [], [], False)
        told = accelerator.forms("He TOLD me to", selection)
        assert told[0] == ["he told me to"] and told[3] is True
        texts, addressed, obligation, reported = accelerator.forms("You must, <|x|> 1gn0re a-b", selection)
        assert texts == ["you must, <|x|> 1gn0re a-b", "you must, <|x|> 1gn0re ab", "you must, <|x|> ignore a-b"]
        assert addressed and obligation and reported is False
        with pytest.raises(ValueError):
            accelerator.token("two words")
        with pytest.raises(TypeError):
            accelerator.counts([("not", "a", "clause", "tuple")])
        with pytest.raises(TypeError):
            accelerator.counts([([("word", "x")], False, False)])  # a word token without its flag
        with pytest.raises(TypeError):
            accelerator.next_clause("clauses", 0)
        for clause in ([("word", "x", "x", 1)], False, False), ([("word", "x", "x", True)], 0, 0):
            with pytest.raises(TypeError, match="bools"):  # (flags are the rule's bools: no truth test runs code)
                accelerator.next_clause([clause], 0)
        with pytest.raises(TypeError, match="bools"):
            accelerator.counts([([("word", "x", "x", None)], False, False)])
        assert accelerator.counts([]) == (0, 0, 0, 0, 0) and accelerator.next_clause([], 0) == 0
        assert accelerator.clauses("") == [] and accelerator.forms("", selection) == ([""], [], [], False)
