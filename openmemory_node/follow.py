"""Domains on the node: which domains it follows, the domains of each record it holds, and
the gossip topics and sync sets that follow from them (issue 33; the rule that gives a
lesson its domains is :func:`openmemory_protocol.domains.lesson_domains`).

* **Followed domains** (:class:`Following`): ``general`` always; then ``[domains] follow`` in
  the configuration, the domains the engine reported (``PUT /v1/domains``, kept in
  ``domains.json`` in the data folder so that a restart keeps them), and the domains of the
  lessons this node wrote itself (their attestations must come back to their author). A node that was told
  nothing (an empty ``follow`` and no report), or whose ``follow`` holds ``"*"``, follows
  every domain: a relay, a bootstrap node or a node without an engine takes everything, as
  before domains existed.
* **A record's domains** (:class:`DomainIndex`): a lesson's are its claim's; an attestation's
  are those of the lesson it attests, when this node holds that lesson, else unknown (None:
  it is taken on the topic it came by, and counted in no domain's sync set until its lesson
  arrives). Revocations and vouches have none: they go on their type's one topic, which
  every node joins, so that a revocation reaches every node that holds its target, whatever
  it follows.
* **Topics**: a lesson is published on ``/openmemory/1/lesson/<d>`` for each of its domains
  (one message, several topic ids), an attestation on its lesson's
  ``/openmemory/1/attestation/<d>``; ``general``'s topics are the types' own
  (``/openmemory/1/lesson``), which every node joins; a node joins those of the domains it
  follows.

Everything here is bookkeeping over data: no libp2p, no trio.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

from openmemory_protocol.domains import DOMAINS, GENERAL, check_domains, domain_topic, lesson_domains

#: Record types gossiped and synced by domain; the others have one topic each.
DOMAIN_TYPES = ("lesson", "attestation")
#: The file in the data folder that keeps the engine's report.
DOMAINS_FILE = "domains.json"
EVERY = "*"


def record_topics(record_type: str, domains: Iterable[str] | None, type_topic: str) -> list[str]:
    """The topics a record is published on: its domains' for a lesson or an attestation (an
    attestation of a lesson not held: ``general``), else its type's one topic."""
    if record_type not in DOMAIN_TYPES:
        return [type_topic]
    return [domain_topic(record_type, d) for d in sorted(domains or (GENERAL,))]


def topic_domain(topic: str) -> tuple[str, str | None] | None:
    """``/openmemory/1/lesson/python`` -> ("lesson", "python"); ``/openmemory/1/vouch`` ->
    ("vouch", None); None for a topic that is not ours."""
    prefix = "/openmemory/1/"
    if not topic.startswith(prefix):
        return None
    parts = topic[len(prefix):].split("/")
    if len(parts) == 1:
        return parts[0], (GENERAL if parts[0] in DOMAIN_TYPES else None)
    if len(parts) == 2 and parts[0] in DOMAIN_TYPES and parts[1] in DOMAINS:
        return parts[0], parts[1]
    return None


class Following:
    """The domains this node follows (None: every domain)."""

    def __init__(self, configured: Iterable[str] = (), home: Path | None = None):
        configured = list(configured)
        self.every_configured = EVERY in configured
        self.configured = check_domains(d for d in configured if d != EVERY)
        self.home = Path(home) if home is not None else None
        self.reported: set[str] | None = None  # the engine's last report
        self.reported_at: float | None = None
        self.authored: set[str] = set()  # the domains of this node's own lessons
        if self.home is not None:
            self._load()

    def _load(self) -> None:
        path = self.home / DOMAINS_FILE  # type: ignore[operator]
        try:
            data = json.loads(path.read_text())
            self.reported = check_domains(data.get("domains", []))
            self.reported_at = float(data.get("at") or 0)
        except FileNotFoundError:
            return
        except (ValueError, TypeError, AttributeError, OSError):
            self.reported = None  # a damaged file: as if never told (the engine tells again)

    @property
    def domains(self) -> frozenset[str] | None:
        """The followed domains, ``general`` included; None for every domain."""
        if self.every_configured or (not self.configured and self.reported is None):
            return None
        return frozenset(self.configured | (self.reported or set()) | self.authored | {GENERAL})

    def follows(self, domains: Iterable[str] | None) -> bool:
        """Whether a record of these domains is for this node (unknown domains: yes)."""
        followed = self.domains
        if followed is None or domains is None:
            return True
        return any(d in followed for d in domains)

    def add_authored(self, domains: Iterable[str]) -> bool:
        """The domains of a lesson this node wrote; True when the followed set changed."""
        before = self.domains
        self.authored |= set(domains)
        return self.domains != before

    def report(self, domains: Iterable[str], now: float) -> bool:
        """The engine's domains (replacing its last report); True when the followed set changed."""
        before = self.domains
        self.reported = check_domains(domains)
        self.reported_at = now
        if self.home is not None:
            path = self.home / DOMAINS_FILE
            tmp = path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps({"domains": sorted(self.reported), "at": now}) + "\n")
            os.replace(tmp, path)
        return self.domains != before

    def topics(self, type_topics: Iterable[str]) -> list[str]:
        """The topics this node joins: every type topic of a record without domains, and the
        domain topics of the followed domains."""
        followed = sorted(self.domains or DOMAINS)
        out = [t for t in type_topics if topic_domain(t) and topic_domain(t)[1] is None]  # type: ignore[index]
        out += [domain_topic(t, d) for t in DOMAIN_TYPES for d in followed]
        return out

    def status(self) -> dict[str, Any]:
        followed = self.domains
        return {"following": "every domain" if followed is None else sorted(followed),
                "configured": sorted(self.configured) + ([EVERY] if self.every_configured else []),
                "reported": None if self.reported is None else sorted(self.reported),
                "authored": sorted(self.authored),
                "reported_at": self.reported_at}


class DomainIndex:
    """The domains of the lessons this node holds, and of the attestations of them; kept
    current by the ingest's on-accept hook (and the store's evictions)."""

    def __init__(self) -> None:
        self.lessons: dict[bytes, tuple[str, ...]] = {}  # lesson id -> its domains
        self.attests: dict[bytes, bytes] = {}  # attestation id -> the lesson id it attests
        self.orphans: dict[bytes, set[bytes]] = {}  # lesson not held -> attestations of it

    @classmethod
    def from_store(cls, store: Any) -> "DomainIndex":
        from . import wire

        index = cls()
        for _id, type_, data, _status in store.scan():
            if type_ in DOMAIN_TYPES:
                try:
                    record = wire.decode(data)
                except Exception:  # (stored, hence valid once: a newer reader's problem, not ours)
                    continue
                record.__dict__["id_bytes"] = wire.record_id(data)
                index.add(record)
        return index

    def add(self, record: Any) -> list[bytes]:
        """Index a record; for a lesson, the attestations held of it that now have domains."""
        if record.record_type == "lesson":
            self.lessons[record.id_bytes] = lesson_domains(record.claim)
            return sorted(self.orphans.pop(record.id_bytes, ()))
        if record.record_type == "attestation":
            self.attests[record.id_bytes] = record.lesson_id
            if record.lesson_id not in self.lessons:
                self.orphans.setdefault(record.lesson_id, set()).add(record.id_bytes)
        return []

    def discard(self, idb: bytes) -> None:
        self.lessons.pop(idb, None)
        lesson = self.attests.pop(idb, None)
        if lesson is not None and lesson in self.orphans:
            self.orphans[lesson].discard(idb)
            if not self.orphans[lesson]:
                del self.orphans[lesson]

    def of_lesson(self, lesson_id: bytes) -> tuple[str, ...] | None:
        return self.lessons.get(lesson_id)

    def of_record(self, record: Any) -> tuple[str, ...] | None:
        """A record's domains: a lesson's claim's, an attestation's lesson's (None when that
        lesson is not held), None for the other types."""
        if record.record_type == "lesson":
            return lesson_domains(record.claim)
        if record.record_type == "attestation":
            return self.lessons.get(record.lesson_id)
        return None

    def of_id(self, record_type: str, idb: bytes) -> tuple[str, ...] | None:
        if record_type == "lesson":
            return self.lessons.get(idb)
        lesson = self.attests.get(idb)
        return None if lesson is None else self.lessons.get(lesson)
