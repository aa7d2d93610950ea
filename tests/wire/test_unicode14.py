"""Unicode 14.0 pinned: text fields refuse code points unassigned in it, from our own table
(openmemory_protocol/unicode14.py, spec/unicode-14.0-assigned.txt), never from the running Python's
unicodedata (3.11 has UCD 14.0.0, 3.12 15.0.0, 3.13 15.1.0)."""

from __future__ import annotations

import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from openmemory_protocol.observation import observation_violation
from openmemory_protocol.unicode14 import ASSIGNED_RANGES, UNICODE_VERSION, is_assigned, mask_unassigned
from openmemory_node import wire
from openmemory_node.wire.text import FORBIDDEN_RANGES, check_text

SPEC = Path(__file__).resolve().parents[2] / "spec"


def gaps():
    out, nxt = [], 0
    for low, high in ASSIGNED_RANGES:
        if low > nxt:
            out.append((nxt, low - 1))
        nxt = high + 1
    if nxt <= 0x10FFFF:
        out.append((nxt, 0x10FFFF))
    return out


def test_the_table_and_the_spec_file_are_what_the_generator_makes():
    out = subprocess.run([sys.executable, str(SPEC / "generate_unicode_table.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_the_table_is_unicode_14():
    assert UNICODE_VERSION == "14.0.0"
    assert len(ASSIGNED_RANGES) == 698
    assert sum(high - low + 1 for low, high in ASSIGNED_RANGES) == 284_278
    assigned_here = [cp for low, high in ASSIGNED_RANGES for cp in range(low, high + 1)]
    # Assigned code points stay assigned (Unicode's encoding stability): on any Python, every
    # code point of the table is assigned; on Python 3.11 (UCD 14.0.0), exactly those are.
    assert all(unicodedata.category(chr(cp)) != "Cn" for cp in assigned_here)
    if unicodedata.unidata_version == UNICODE_VERSION:
        assert len(assigned_here) == sum(unicodedata.category(chr(cp)) != "Cn" for cp in range(0x110000))
    # Known points: U+0870 and U+10570 are new in 14.0; U+11F04 (15.0), U+10D70 (16.0) and
    # U+0378 (never) are not assigned in it.
    assert is_assigned(0x0870) and is_assigned(0x10570) and is_assigned(0x41)
    assert not any(map(is_assigned, (0x11F04, 0x10D70, 0x0378, 0x1FAE8, 0xFDD0, 0x10FFFF)))


@pytest.mark.parametrize("field,minimum,maximum", [("text", 1, 512), ("reason", 0, 280)])
def test_every_unassigned_code_point_is_refused_as_schema(field, minimum, maximum):
    forbidden = {cp for low, high in FORBIDDEN_RANGES for cp in range(low, high + 1)}
    for low, high in gaps():
        for cp in {low, (low + high) // 2, high}:
            with pytest.raises(wire.WireError) as exc:
                check_text(f"The log printed {chr(cp)} once.", field, min_bytes=minimum, max_bytes=maximum)
            assert exc.value.code == "schema" and exc.value.field == field
            if cp not in forbidden:
                assert "not assigned in Unicode 14.0.0" in exc.value.message
    # Assigned code points pass, first and last of every range (forbidden ones and surrogates aside).
    for low, high in ASSIGNED_RANGES:
        for cp in {low, high}:
            if cp in forbidden or 0xD800 <= cp <= 0xDFFF:
                continue
            assert check_text(f"x{chr(cp)}", field, min_bytes=minimum, max_bytes=maximum)


def test_publishing_a_text_with_an_unassigned_code_point_is_a_clear_schema_error():
    from nacl.signing import SigningKey

    with pytest.raises(wire.WireError) as exc:
        wire.new_lesson(SigningKey(bytes(32)), text="The Kawi letter \U00011f04 broke the parser.", kind="error",
                        strength=1000, provenance=bytes(32), created=1_760_000_000)
    assert exc.value.code == "schema"
    assert str(exc.value).startswith("schema: text holds U+11F04 at index 16: a code point not assigned in Unicode 14.0.0")


def test_the_observation_rule_reads_unassigned_code_points_as_u_fffd():
    assert mask_unassigned("A\U00010d70you \u0870\U00011f04") == "A\ufffdyou \u0870\ufffd"
    assert mask_unassigned("plain ASCII") == "plain ASCII"
    # The rule's word boundaries are ASCII: 'you must' after any non-ASCII code point is a match,
    # whatever that code point is in this Python's tables.
    for text in ("A\u0870you must rebase.", "A\U00010d70you must rebase.", "A\U00011f04you must rebase."):
        violation = observation_violation(text)
        assert violation is not None and violation.rule == "addressed-to-agent"
    # A letter of another script is refused outside code spans, and allowed inside one; a code point
    # unassigned in 14.0 reads as U+FFFD, no letter.
    assert observation_violation("The log printed \u0870 twice.").rule == "other-script"
    assert observation_violation("The log printed `\u0870` twice.") is None
    assert observation_violation("The log printed \U00011f04 twice.") is None
