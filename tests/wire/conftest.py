"""Fixtures for the wire-format tests: fixed keys and one record of each type."""

from __future__ import annotations

import pytest
from nacl.signing import SigningKey

from openmemory_node import wire

NOW = 1_760_000_000


@pytest.fixture(scope="session")
def alice() -> SigningKey:
    return SigningKey(b"\x01" * 32)


@pytest.fixture(scope="session")
def bob() -> SigningKey:
    return SigningKey(b"\x02" * 32)


def make_lesson(key: SigningKey, **changes) -> wire.Lesson:
    fields = dict(
        text="`git push` failed in 3 sessions: the current branch had no upstream branch.",
        kind="error",
        strength=1500,
        provenance=b"\x07" * 32,
        created=NOW - 60,
    )
    fields.update(changes)
    return wire.new_lesson(key, **fields)


@pytest.fixture(scope="session")
def records(alice: SigningKey, bob: SigningKey) -> dict[str, wire.Record]:
    lesson = make_lesson(alice)
    return {
        "lesson": lesson,
        "attestation": wire.new_attestation(
            bob, lesson_id=lesson.id, verdict="confirmed", met_before=False,
            evidence={"sessions": 4, "matched": 2, "window": 14 * 86400}, created=NOW - 30,
        ),
        "revocation": wire.new_revocation(
            alice, target=lesson.id, reason_code="incorrect", reason="A hook sets the upstream now.",
            created=NOW - 10,
        ),
        "vouch": wire.new_vouch(alice, subject=bob.verify_key, created=NOW - 5),
    }
