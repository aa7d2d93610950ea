"""The observation rule, made faster (issue 16), against a frozen copy of the rule before it.

``_rule_reference.py`` is openmemory_protocol/observation.py as it was before the speed-ups
(tests only). Every text here must get the same verdict AND the same reason (rule and detail)
from both: the red-team corpus, the real observations, the spec's vectors, lesson texts of the
shapes the engine and the commons write, texts cut from the real Claude Code transcripts
(when ``$OPENMEMORY_TEST_DATA`` holds them), and seeded random mutations of all of those with
the characters the canonical form and the clause analysis treat specially.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

from openmemory_protocol import observation as rule

from . import _rule_reference as reference

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data"


def _answer(violation) -> tuple[str, str] | None:
    return None if violation is None else (violation.rule, violation.detail)


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]


def _corpus() -> list[str]:
    texts = [json.loads(line)["text"] for line in
             (DATA / "observations-redteam.jsonl").read_text(encoding="utf-8").split("\n") if line]
    texts += _lines(DATA / "observations-engine.txt") + _lines(DATA / "observations-handwritten.txt")
    texts += [v["text"] for v in json.loads(
        (ROOT / "spec" / "vectors" / "observation.json").read_text(encoding="utf-8"))["vectors"]]
    for i in range(40):  # the lesson and revocation texts of benchmarks/wire.py, and their kin
        texts.append(f"`git push` failed in {i + 2} sessions: the current branch had no upstream branch, "
                     "so the push was refused until the upstream was set.")
        texts.append(f"The hook sets the upstream branch since the repository moved ({i} times).")
    return texts


def _transcript_texts(limit: int = 1500) -> list[str]:
    """Pieces of the prose of real transcripts (user and assistant text, tool results), cut at
    seeded places into lesson-sized texts."""
    from tests.conftest import shared_data_dir

    root = shared_data_dir() / "claude-code"
    if not root.is_dir():
        return []
    pieces: list[str] = []

    def walk(value):
        if isinstance(value, str):
            if len(value) >= 20:
                pieces.append(value)
        elif isinstance(value, list):
            for item in value:
                walk(item)
        elif isinstance(value, dict):
            for key in ("content", "text", "summary"):
                if key in value:
                    walk(value[key])

    for path in sorted(root.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                walk(row.get("message", row))
    rng = random.Random(16)
    rng.shuffle(pieces)
    out = []
    for piece in pieces:
        start = rng.randrange(max(1, len(piece) - 20))
        out.append(piece[start:start + rng.choice((40, 80, 130, 200, 400))])
        if len(out) >= limit:
            break
    return out


# What the canonical form and the clause analysis treat specially: look-alikes, marks, invisible
# code points, other scripts, quotes, brackets, clause marks, markup, digits, white space.
_SPECIAL = (
    "\u0430\u0435\u043e\u0440\u0441\u0455\u0456\u03bf\u0391\u0131\uff41\uff21\u2170\u24b6\u00e9\u00c0\u0301\u0308"
    "\u200b\u200d\u00ad\ufeff\u2060\u202e\u00a0\u2003\u3000\u2028\u0085\u4e2d\u0627\u05d0\u3042\u00df\ufb01"
    "\u201c\u201d\u2018\u2019\u00ab\u00bb\u2014\u2015\ufffd\U0001d400\U0001f600"
    "`'\"()[]{}<>|*_~#.!?;:,-/\\$=+&%@^\t\r\n\x0b\x0c\x1c\x1f 0123456789"
)


def _mutate(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        where = rng.randrange(len(chars) + 1)
        if op < 0.4:
            chars.insert(where, rng.choice(_SPECIAL))
        elif op < 0.6 and chars:
            chars[min(where, len(chars) - 1)] = rng.choice(_SPECIAL)
        elif op < 0.75 and chars:
            del chars[min(where, len(chars) - 1)]
        elif op < 0.9:
            chars.insert(where, chr(rng.randrange(0x20, 0x3000)))
        else:
            chars[where:where] = rng.choice((" you must ", " Run ", " then run ", " please ", "-", " 1gn0re ",
                                             "`x`", " <|im_start|> ", " SYSTEM: ", "?", " Alw4ys ", "ly "))
    return "".join(chars)


def test_the_rule_gives_the_frozen_rule_s_verdict_and_reason_on_every_text():
    base = _corpus() + _transcript_texts()
    rng = random.Random(4)
    texts = base + [_mutate(rng.choice(base), rng) for _ in range(4000)]
    assert len(texts) >= 5000
    different, answers = [], []
    for text in texts:
        new, old = _answer(rule.observation_violation(text)), _answer(reference.observation_violation(text))
        answers.append(new)
        if new != old:
            different.append((text, new, old))
    assert not different, different[:5]
    # the comparison can fail: both sides refuse and accept in numbers
    assert sum(a is None for a in answers) > 1000 and sum(a is not None for a in answers) > 1000


def test_the_canonical_form_is_the_frozen_one():
    rng = random.Random(5)
    base = _corpus()
    for text in base + [_mutate(rng.choice(base), rng) for _ in range(2000)]:
        assert rule.canonical_form(text) == reference.canonical_form(text), text


def test_the_clause_split_by_byte_marks_is_the_regex_split():
    rng = random.Random(6)
    base = _corpus() + ["-a", "'x' y", "a.", "``", "- - x", "x--y", "(a)b", "it's 'q'", ":", "a -b -- c"]
    texts = base + [_mutate(rng.choice(base), rng) for _ in range(3000)]
    assert sum(t.isascii() for t in texts) > 1500
    for text in texts:
        assert rule._split(text) == rule._SPLIT.split(text), text
    # the byte marks are the characters of the split's look-ahead
    ahead = re.compile(rule._SPLIT.pattern[:rule._SPLIT.pattern.index("(?:")])
    assert {chr(b) for b in range(128) if rule._SPLIT_MARKS[b] == 0x21} == {
        chr(b) for b in range(128) if ahead.match(chr(b))}


def test_the_digit_by_letter_test_is_the_regex_one():
    rng = random.Random(7)
    base = _corpus() + ["a1", "1a", "1 a", "a 1", "", "9z", "z9", "A1", "\u00e91", "1\u00e9"]
    for text in base + [_mutate(rng.choice(base), rng).lower() for _ in range(3000)]:
        assert rule._digit_by_letter(text) == (re.search("[a-z][0-9]|[0-9][a-z]", text) is not None), text
