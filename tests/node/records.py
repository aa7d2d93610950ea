"""Many distinct valid records of every type, and a stopped node's store filled with them:
for the sync catch-up tests and ``benchmarks/sync_catchup.py``."""

from __future__ import annotations

from pathlib import Path

from nacl.signing import SigningKey

from openmemory_node import wire
from openmemory_node.commons import initial_status
from openmemory_node.store import Store


def make_records(count: int, authors: int, now: int) -> list[bytes]:
    """``count`` distinct valid records of ``authors`` keys, lessons before what names them."""
    keys = [SigningKey(i.to_bytes(4, "big") * 8) for i in range(1, authors + 1)]
    n_lessons = count * 60 // 100
    n_revocations = count * 5 // 100
    n_vouches = count * 5 // 100
    n_attestations = count - n_lessons - n_revocations - n_vouches
    out: list[bytes] = []
    lessons = []
    for i in range(n_lessons):
        lesson = wire.new_lesson(
            keys[i % authors], kind="error", strength=1000 + i % 1000, provenance=i.to_bytes(32, "big"),
            text=f"`pytest -k case{i}` failed in {i % 7 + 2} sessions: the fixture {i} read a stale cache "
                 "until the cache folder was removed.",
            created=now - 86400 + i % 3600,
        )
        lessons.append(lesson)
        out.append(wire.encode(lesson))
    for i in range(n_attestations):
        lesson = lessons[i % n_lessons]
        signer = keys[(i * 7 + 1) % authors]
        if signer.verify_key.encode() == lesson.signer:
            signer = keys[(i * 7 + 2) % authors]
        out.append(wire.encode(wire.new_attestation(
            signer, lesson_id=lesson.id, verdict="confirmed" if i % 3 else "failed", met_before=i % 2 == 0,
            evidence={"sessions": 10 + i % 50, "matched": 1 + i % 5, "window": 14 * 86400},
            created=now - 3600 + i % 1800)))
    for i in range(n_revocations):
        lesson = lessons[(i * 13) % n_lessons]
        author = keys[((i * 13) % n_lessons) % authors]
        out.append(wire.encode(wire.new_revocation(
            author, target=lesson.id, reason_code="incorrect",
            reason=f"The cache of fixture {i} is rebuilt at each run since the plugin changed.",
            created=now - 600 + i)))
    for i in range(n_vouches):
        out.append(wire.encode(wire.new_vouch(
            keys[i % authors], subject=SigningKey((10_000 + i).to_bytes(4, "big") * 8).verify_key,
            created=now - 300 + i % 200)))
    return out


def populate(home: Path, records: list[bytes]) -> None:
    """Write the records into a stopped node's store (one transaction)."""
    store = Store.open(home)
    with store.conn:
        store.conn.execute("BEGIN IMMEDIATE")
        for data in records:
            record = wire.decode(data)
            store.add(id=record.id, idb=record.id_bytes, type=record.record_type,
                      kind=getattr(record, "kind", None), author=record.signer.hex(), created=record.created,
                      data=data, via="api", from_peer=None, status=initial_status(record))
    store.close()
