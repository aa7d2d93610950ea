"""The content identity's ASCII shortcut (``normalise`` on an ASCII text) against every step
(``content._normalise``): the same form on the red-team corpus, the real observations, the
spec's vectors, pieces of the real transcripts, seeded mutations of them (white space and
control characters included) and every ASCII text hypothesis makes."""

from __future__ import annotations

import random
import string

from hypothesis import given, settings, strategies as st

from openmemory_protocol import content

from .test_rule_differential import _corpus, _mutate, _transcript_texts

_ASCII_MUTATIONS = "\t\r\n\x0b\x0c\x1c\x1d\x1e\x1f\x00\x7f  ..  . " + string.ascii_letters + string.punctuation


def _ascii_mutate(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 5)):
        chars.insert(rng.randrange(len(chars) + 1), rng.choice(_ASCII_MUTATIONS))
    return "".join(chars)


def test_the_ascii_shortcut_gives_what_every_step_gives_on_the_corpora():
    base = _corpus() + _transcript_texts()
    rng = random.Random(11)
    texts = base + [_mutate(rng.choice(base), rng) for _ in range(2000)]
    texts += [_ascii_mutate(rng.choice(base).encode("ascii", "ignore").decode(), rng) for _ in range(3000)]
    ascii_texts = [t for t in texts if t.isascii()]
    assert len(ascii_texts) > 3000  # the shortcut is what is tested
    for text in texts:
        assert content.normalise(text) == content._normalise(text), repr(text)
        assert content.dedup_key(text, "error") == _reference_key(text, "error")


def _reference_key(text: str, kind: str) -> str:
    import hashlib

    message = content.DEDUP_DOMAIN + kind.encode() + b"\x00" + content._normalise(text).encode()
    return hashlib.sha256(message).hexdigest()


@settings(max_examples=3000, deadline=None, derandomize=True)
@given(st.text(alphabet=st.characters(max_codepoint=127), max_size=60))
def test_the_ascii_shortcut_gives_what_every_step_gives_on_any_ascii_text(text):
    assert content.normalise(text) == content._normalise(text)
