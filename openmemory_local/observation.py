"""The observation rule: a lesson states what happened, it never tells an agent what to do.

Safety rule 1 of the design: "the user corrected the agent for using pip; this project uses
uv" is an observation; "always use uv" is an instruction. This module is the one check for
that rule. The local engine runs it when it writes a lesson, the commons node runs it when
it publishes and when it receives one (a lesson text that instructs is invalid on the wire).
It is pure, deterministic and dependency-free so that both halves share it, and so that
another implementation can reproduce it from PROTOCOL.md.

The rule, applied to the text after Unicode NFKC normalisation (Unicode 14.0, the version the
protocol pins: a code point unassigned in 14.0 is read as U+FFFD, so that the answer never
depends on the running Python's ``unicodedata``; the wire refuses such texts anyway):

1. Every sentence is checked (sentences split on ``.``, ``!``, ``?``, ``;``, ``:`` and new
   lines). A sentence whose first word, after leading white space, quotes, bullets, markdown
   emphasis and list numbers are stripped, is in IMPERATIVE_OPENINGS is an instruction
   ("do not" and "don't" are covered by ``do``/``don't``; "please" opens an instruction
   whatever follows). A sentence that opens with a backtick code span has code as its
   subject ("`git push` failed ...") and is not checked for an imperative opening.
2. Anywhere in the text, a phrase in ADDRESSED_PATTERNS (text addressed to the agent reading
   it, or prompt-injection markers) makes it an instruction.

Both lists are data, under test (tests/test_observation.py), and written out in PROTOCOL.md.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from .unicode14 import mask_unassigned

__all__ = [
    "IMPERATIVE_OPENINGS",
    "ADDRESSED_PATTERNS",
    "ObservationViolation",
    "NotAnObservation",
    "observation_violation",
    "is_observation",
    "check_observation",
]

#: First words that make a sentence an order. Lower case, apostrophes as ASCII "'".
IMPERATIVE_OPENINGS: frozenset[str] = frozenset(
    """
    always never do don't dont use make avoid ensure run please must should remember
    stop try prefer install add remove delete set execute ignore forget disregard follow
    obey keep check verify consider switch write put pass skip let's be take give tell
    say reply respond answer configure enable disable pretend act assume trust beware
    refrain stick rely note
    """.split()
)

#: Phrases, anywhere in the text, that address the reader or try to steer it.
#: Each is a regular expression matched case-insensitively on word boundaries.
ADDRESSED_PATTERNS: tuple[str, ...] = (
    r"ignore (?:all |any |the )?(?:previous|prior|above|earlier|preceding) (?:instructions?|prompts?|messages?|rules?)",
    r"disregard (?:all |any |the )?(?:previous|prior|above|earlier|preceding|your)",
    r"forget (?:all |any |everything|your|the )",
    r"you (?:must|should|shall|need to|have to|are required to|will now|are now|may not|cannot|can't|mustn't)",
    r"you(?:'re| are) (?:an?|the|now)\b",
    r"from now on",
    r"new instructions?",
    r"(?:system|developer) (?:prompt|message|instructions?)",
    r"as an? (?:ai|assistant|language model|llm)",
    r"act as",
    r"pretend (?:to be|that|you)",
    r"do not (?:tell|reveal|mention|disclose)",
    r"<\s*/?\s*(?:system|instructions?|assistant|user|human|im_start|im_end|system-reminder)\b",
    r"\[/?(?:inst|sys)\]",
    r"<<\s*sys\s*>>",
)

_ADDRESSED_RE = [re.compile(r"(?<![\w])" + p, re.IGNORECASE) for p in ADDRESSED_PATTERNS]
# One alternation of every pattern: it matches exactly when one of the patterns above matches
# (the alternatives share the look-behind and have no back-references), and scans the text
# once instead of once per pattern. Used as a fast path; the per-pattern loop still decides
# which pattern is reported.
_ANY_ADDRESSED_RE = re.compile(r"(?<![\w])(?:" + "|".join(ADDRESSED_PATTERNS) + ")", re.IGNORECASE)
_SENTENCE_SPLIT = re.compile(r"[.!?;:\n]+")
# Leading decoration: whitespace, quotes, bullets, markdown emphasis, list numbers, brackets.
_LEADING_NOISE = re.compile(r"^(?:[\s\"'*_>#~\-\u2022\u2013\u2014(\[]|\d+[.)]\s)+")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


@dataclass(frozen=True)
class ObservationViolation:
    """Why a text is not an observation: which rule, and the words that broke it."""

    rule: str  # "imperative-opening" or "addressed-to-agent"
    detail: str

    def __str__(self) -> str:
        if self.rule == "imperative-opening":
            return f"a sentence opens with the imperative {self.detail!r}: state what happened instead"
        return f"the text addresses the agent ({self.detail!r}): state what happened instead"


class NotAnObservation(ValueError):
    """Raised by :func:`check_observation` for a text that instructs rather than observes."""

    def __init__(self, violation: ObservationViolation):
        super().__init__(str(violation))
        self.violation = violation


def _normalise(text: str) -> str:
    # Code points unassigned in Unicode 14.0 first become U+FFFD (a symbol: no case, not a word
    # character, not white space, unchanged by NFKC), as Unicode 14.0 reads them.
    text = unicodedata.normalize("NFKC", mask_unassigned(text))
    return text.replace("\u2019", "'").replace("\u2018", "'")


def _first_words(sentence: str) -> list[str]:
    noise = _LEADING_NOISE.match(sentence)
    if noise:
        sentence = sentence[noise.end() :]
    # Lower-casing never maps a character to nothing, so the first 80 characters of the whole
    # lowered sentence come from its first 80 characters: lowering only those is the same.
    head = sentence[:80].lower()[:80]
    if head.startswith("`"):
        return []  # a sentence whose subject is a code span (`git push` failed ...)
    # The first two words: what _WORD.findall(head)[:2] gives, without finding all the others.
    first = _WORD.search(head)
    if first is None:
        return []
    second = _WORD.search(head, first.end())
    return [first.group()] if second is None else [first.group(), second.group()]


def observation_violation(text: str) -> ObservationViolation | None:
    """Return the first way ``text`` breaks the observation rule, or None if it is one."""
    text = _normalise(text)
    if _ANY_ADDRESSED_RE.search(text):
        for pattern in _ADDRESSED_RE:
            match = pattern.search(text)
            if match:
                return ObservationViolation("addressed-to-agent", match.group(0).strip())
    for sentence in _SENTENCE_SPLIT.split(text):
        words = _first_words(sentence)
        if not words:
            continue
        if words[0] == "please" and len(words) > 1:
            return ObservationViolation("imperative-opening", "please " + words[1])
        if words[0] in IMPERATIVE_OPENINGS:
            return ObservationViolation("imperative-opening", words[0])
    return None


def is_observation(text: str) -> bool:
    return observation_violation(text) is None


def check_observation(text: str) -> str:
    """Return ``text`` unchanged if it is an observation, else raise NotAnObservation."""
    violation = observation_violation(text)
    if violation is not None:
        raise NotAnObservation(violation)
    return text
