"""The store: one SQLite file (``<home>/openmemory.db``), WAL mode, forward migrations.

Everything the engine knows above the raw stream lives here, in tables a user can open
with ``sqlite3`` or Datasette. Every table except ``schema_version``, ``meta`` and
``counters`` can be recomputed from the archive (``openmemory ingest --from-archive``).

Schema (version 1)
------------------
``schema_version(version, description, applied_at)``
    One row per applied migration. :data:`MIGRATIONS` lists them; opening a store runs
    the missing ones in order, in one write transaction. A store whose version is
    newer than this code knows is refused (:class:`StoreError`), never downgraded.

    The node's store (:mod:`openmemory_node.store`) migrates the same way (it used ``PRAGMA
    user_version`` and adopts such a file on open). Why this style: the history is in the
    file, in a table a user reads with ``sqlite3`` or Datasette (what ran, when, what for),
    not a bare integer in the header; each :class:`Migration` carries its number and says
    what it does; a migration may take the :class:`Store` (files beside the database,
    version 5). The runner is written in both halves rather than shared: the engine never
    imports the node, and ``openmemory_protocol`` holds pure rules without I/O.

``meta(key, value)``
    ``embedding`` (the name of the embedding in ``episodes.embedding``, see
    :mod:`openmemory_local.text.embed`), ``vectors_file`` (the current matrix file under
    ``vectors/``).

``counters(name, value)``
    ``episode_seq`` (bumped by triggers on every insert or update of an episode: each
    episode row carries the ``seq`` of its last change, so a cache refreshes only rows
    with ``seq`` above what it saw; an update that sets ``seq`` itself, above the counter,
    and moves the counter, is left alone by the trigger: decay's bulk rewrite, schema version 6),
    ``episode_epoch`` (bumped on every delete: caches
    reload) and ``vec_rows`` (committed rows of the vectors file).

``transcripts``
    One row per raw-stream file: ``path`` (absolute path of the original), ``adapter``,
    ``status`` (``active``, ``not_transcript``), ``session_id``, ``agent_id`` and
    ``role`` (``main``, ``subagent``, ``compaction``), ``project`` (working directory),
    ``size``/``mtime`` at the last read, ``consumed_bytes``/``consumed_lines`` (how far it
    was read: always the end of a complete line), ``head_hash``/``tail_hash`` (SHA-256 of
    the first 64 KiB and of the last 4 KiB consumed: a mismatch means earlier bytes
    changed), ``content_hash`` (SHA-256 chained over the chunks read: ``h = sha256(h_prev
    + sha256(chunk))``), ``archive_path`` (relative to home) and ``archive_bytes`` (its
    committed compressed size), ``state`` (the parser's resumable state, JSON),
    ``digest`` (what this file contributes to its session episode, JSON),
    ``rejected_lines`` and ``rejects`` (reason -> count, JSON).

``dirty_sessions(session_id)``
    Sessions whose transcripts changed since their session episode was last merged
    (written in the transcript's transaction; the episode is re-merged at the end of the
    run, or by the next run after a crash).

``episodes``
    One row per episode: ``kind`` (``session``, ``error``, ``correction``; later issues
    may add kinds), ``key`` (unique per kind: the session id, the tool-call id, the
    person's message id), ``session_id``, ``agent_id`` (subagent, if any), ``project``,
    ``text`` (what is embedded and shown), ``fields`` (structured JSON, per kind, see
    :mod:`openmemory_local.ingest.episodes`), ``embedding`` (256 little-endian float32),
    ``strength`` (starts at 1.0; sleep decays it), ``touches`` (how often recall returned
    it), ``created`` (when it happened, from the transcript), ``last_touched`` (the later
    of when it happened and when recall last returned it: decay and recency count from
    here), ``archived`` (0/1: archived episodes are kept but not recalled),
    ``transcript_id``, ``source_path`` (the archive file, relative to home) and
    ``source_line`` (1-based line in it: the archive decompresses to the original's
    bytes, so the line is the same in both), ``vec_row`` (row in the vectors file),
    ``seq``, ``ingested``, ``updated``.

Schema (version 2: sleep, render and the morning report)
---------------------------------------------------------
``lessons``
    One row per group of resembling surprises (:mod:`openmemory_local.sleep.passes`):
    ``state`` (``forming``: not yet a lesson, waiting for the failure to repeat in
    another session; ``active``; ``archived``: faded below ``Config.archive_below``),
    ``kind`` (``error``, ``correction``), ``family`` (the project family, see
    :mod:`openmemory_local.text.normalize`), ``text`` (the observation, as rendered),
    ``text_source`` (``rule``: the deterministic text; ``model``: rephrased by the local
    model), ``rule_text`` (the deterministic text), ``signature`` (the normalised
    signature of its first surprise), ``centroid`` (sum of its members' signature
    embeddings, 256 float32), ``strength``, ``seen`` (surprises joined), ``sessions``
    (distinct sessions among them), ``first_seen``/``last_seen``, ``formed``,
    ``learned`` (when it became a lesson), ``reinforced`` (last join from a new session
    or confirmation: lesson decay counts from here), ``archived_at``, ``vetoed_at``
    (set: the owner vetoed it; it still absorbs its surprises but is never rendered nor
    predicts), ``file_name`` (its file in memory folders), ``details`` (JSON: subject,
    failure messages, branches, paths, projects, ...).

``lesson_members(episode_id, lesson_id, session_id, created, signature, joined)``
    Which surprise is in which lesson (an episode is in at most one).

``predictions``
    ``lesson_id``, ``made``, ``text`` (the situation a coming session will meet),
    ``probes`` (JSON: what is matched), ``family``, ``state`` (``open``, ``confirmed``,
    ``failed``, ``withdrawn`` when its lesson was archived or vetoed), ``resolved``,
    ``episode_id``/``similarity``/``facet`` (what confirmed it).

``events(id, at, kind, lesson_id, prediction_id, detail)``
    What sleep, render and veto changed: ``learned``, ``strengthened``, ``confirmed``,
    ``failed``, ``archived``, ``episodes_archived``, ``predicted``, ``vetoed``,
    ``unvetoed``, ``edited``, ``revived``. The morning report covers the events since the
    previous report.

``reports(id, made, first_event, last_event, file, data, markdown)``
    One per morning report (its Markdown is also a file under ``reports/``).

``rendered_files(path, memory_dir, lesson_id, role, sha256, pending_sha256, state, written)``
    Every file Open Memory wrote into a memory folder (``role``: ``lesson`` or
    ``index`` for the managed section of ``MEMORY.md``) and the SHA-256 of what it
    wrote: a lesson file whose bytes differ was edited by its owner and is left alone; a
    lesson file that is gone was deleted by its owner: a veto.

``meta`` gains ``decayed_until`` (the start of the last UTC day decay was applied up to)
and ``last_sleep`` (the last sleep that changed something: a later sleep may not be earlier,
and :mod:`openmemory_local.sleep.replay` replays the days after it).

Schema (version 3: publishing to the commons, :mod:`openmemory_local.commons.publish`)
------------------------------------------------------------------------------
These three tables are the owner's choices and the commons' record of them: unlike the
others, they cannot be recomputed from the archive (the opt-ins, the provenance salts, the
record ids).

``publish_projects(family, enabled, path, enabled_at, disabled_at)``
    The project families opted in to publishing (``enabled`` 1), and those opted out again
    (0). No row: never published (the default).

``publish_queue``
    The outbox, one row per lesson at most: ``state`` ``pending`` (every field of the record
    fixed: ``text``, ``kind``, ``strength``, ``created`` (Unix seconds), ``provenance`` and
    its ``salt`` and ``episodes``, ``derived_from``; sent as is, however often it is
    retried, so that a retry is the same record), ``held`` (the commons form failed the
    redaction gate or the observation rule, or the node refused it: ``reasons``, JSON) or
    ``withdrawn`` (its project was opted out after a send was tried: the next publish asks
    the node whether it landed). ``attempts``, ``last_attempt``, ``last_error``.

``published``
    Every record this engine's lessons became on the commons: ``record_id`` (the node's
    record id, 68 hex digits), ``lesson_id`` (``lessons.id``), ``family``, the record's
    ``text``, ``kind``, ``strength``, ``created``, ``provenance`` with its ``salt`` and
    ``episodes`` (``[{"id", "kind", "key", "hash"}]``: what ``openmemory publish provenance``
    opens), ``derived_from`` (JSON ids), ``author`` (the node's public key, hex),
    ``dedup_key`` (the node's group key), ``published_at``, ``superseded_by`` (the record
    that replaced it when the lesson's commons text changed), ``revoked_at``,
    ``revocation_id``, ``revoke_code``, ``revoke_reason``. Readers that must tell the
    agent's own lessons from others' (attesting received lessons) match ``record_id`` or
    ``dedup_key`` here.

Schema (version 4: the commons layer, :mod:`openmemory_local.commons.receive`)
-----------------------------------------------------------------------
Received lessons are kept apart from the agent's own: never in ``lessons``, never members
of a group, never surprises, never published as its own.

``commons_lessons``
    One row per lesson record the node received: ``record_id`` (hex), ``kind``, ``text``,
    ``author`` (hex key), ``created`` (the record's time, Unix seconds), ``strength``,
    ``derived_from`` (JSON ids), ``status`` (the node's: ``candidate``, ``common``,
    ``faded``, ``revoked``), the group (``group_head``, ``authors`` JSON, ``confirmers``,
    ``threshold``, ``policy``, ``votes``, ``counted``), ``mine`` (1: this node's key
    authored it or a member of its group: never rendered as received, never attested),
    ``observation`` (0: this engine's observation check refuses the text: never rendered),
    ``received`` (when this engine first pulled it), ``status_changed``, ``change`` (the
    node's change number last seen), ``vetoed_at``, ``file_name``, ``probes`` and
    ``terms`` (JSON: what its text names, for predictions and relevance).

``commons_predictions``
    A commons lesson rendered in a project family expects what its text names to come
    back: ``commons_id``, ``family``, ``made``, ``text``, ``probes``, ``state`` (``open``,
    ``confirmed``, ``failed``, ``withdrawn``), ``resolved``, ``sessions`` and ``matched``
    (the family's sessions in the window, those that met it), ``episode_id``/``facet``/
    ``similarity`` (the first match), ``attestation_id`` (the attestation it went into).

``commons_attestations``
    Every attestation this engine decided: ``commons_id``, ``lesson_record`` (the id
    attested), ``verdict``, ``met_before``, ``sessions``, ``matched``, ``window``
    (seconds), ``made``, ``state`` (``pending`` until the node took it, ``sent``,
    ``refused``, ``dropped``), ``sent``, ``record_id`` (the attestation's id on the node),
    ``node_status`` (``counted``, ``not-counted``), ``error``.

Schema version 7 (claims and trust, issues 27 and 28): ``commons_lessons`` gains ``version``
(the record's), ``claim`` (JSON parts: the record's, or parsed from a version 1 text that is
the rendering of one), ``claim_key`` (the same claim: a veto or revocation covers its near-copies),
``layer`` (``team``: authored by a key of the owner's team; else ``commons``), ``refused`` (why
this engine refuses it at receipt, whatever its status: an unsafe command, a failure that
carries a prompt) and ``parts`` (the node's per-part tallies, JSON). Commons predictions and
attestations gain ``failure``, ``fix`` (``confirmed``, ``failed``, ``untested``) and
``exposed`` (the lesson was rendered in the family's memory folder before the evidence).

``meta`` gains ``commons_cursor`` (the node's change number pulled up to) and
``commons_node`` (the public key of the node it was pulled from: another node starts over).
``rendered_files.role`` gains ``commons`` (``lesson_id`` is then a ``commons_lessons.id``).

Schema (version 5: each embedding stored once, issue 16)
--------------------------------------------------------
``episodes.embedding`` (the blob) is gone: the vectors file (:mod:`openmemory_local.storage.vectors`)
holds every vector, once; it derives from the texts (a lost file is re-embedded).
``episodes.embedder`` names the embedding of the episode's row (``hash-wb-256-v1``,
``minilm-l6-v2-384-v1``; NULL while none is made yet: :func:`openmemory_local.storage.vectors.embed_pending`
makes it). A version-4 store is migrated by writing its blobs into a new vectors file
first (nothing re-embedded), then dropping the column; a VACUUM returns the space.

Opening: a store whose schema is current is only read (no write transaction), so read-only
commands (``stats``, ``lessons``, ``report``, ``episodes``, ``recall --no-touch``) open it
while another process writes.

Concurrency: SQLite in WAL mode, ``synchronous=NORMAL``; writers use
:meth:`Store.write` (``BEGIN IMMEDIATE``), so two processes never interleave a
transcript's changes; readers are never blocked. A ``Store`` (one connection) belongs to
one thread: open one per thread.

For the passes built on this store (sleep, render, report):

* Add tables with a new :class:`Migration` appended to :data:`MIGRATIONS`.
* Refer to episodes by ``id``: it survives re-reads of a transcript and
  ``ingest --from-archive`` (episodes are upserted by ``(kind, key)``).
* ``strength``, ``archived`` and ``last_touched`` may be updated with plain SQL inside
  ``store.write()``: the triggers bump ``seq``, and recall's cached index follows. Decay
  should count from ``last_touched`` (recall renews it); archived episodes stay in the
  store and out of recall.
* ``fields`` is JSON: read it with ``json_extract`` in SQL or :func:`loads` in Python.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from openmemory_local.core.clock import iso
from openmemory_local.core.config import Config
from openmemory_local.core.jsonio import dumps, loads

__all__ = ["Store", "StoreError", "SCHEMA_VERSION", "MIGRATIONS", "dumps", "loads", "record_event"]


class StoreError(RuntimeError):
    """The store cannot be used (newer schema, not a database, cannot create the folder)."""


# --- migrations -------------------------------------------------------------------

_V1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO counters (name, value) VALUES ('episode_seq', 0), ('episode_epoch', 0), ('vec_rows', 0);

CREATE TABLE transcripts (
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    adapter TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'active',
    session_id TEXT,
    agent_id TEXT,
    role TEXT,
    project TEXT,
    size INTEGER NOT NULL DEFAULT 0,
    mtime REAL,
    consumed_bytes INTEGER NOT NULL DEFAULT 0,
    consumed_lines INTEGER NOT NULL DEFAULT 0,
    head_hash TEXT,
    tail_hash TEXT,
    content_hash TEXT,
    archive_path TEXT,
    archive_bytes INTEGER NOT NULL DEFAULT 0,
    state TEXT,
    digest TEXT,
    rejected_lines INTEGER NOT NULL DEFAULT 0,
    rejects TEXT NOT NULL DEFAULT '{}',
    first_ingested TEXT,
    last_ingested TEXT
);
CREATE INDEX transcripts_session ON transcripts (session_id);

CREATE TABLE dirty_sessions (session_id TEXT PRIMARY KEY);

CREATE TABLE episodes (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    session_id TEXT,
    agent_id TEXT,
    project TEXT,
    text TEXT NOT NULL,
    fields TEXT NOT NULL DEFAULT '{}',
    embedding BLOB NOT NULL,
    strength REAL NOT NULL DEFAULT 1.0,
    touches INTEGER NOT NULL DEFAULT 0,
    created TEXT NOT NULL,
    last_touched TEXT NOT NULL,
    archived INTEGER NOT NULL DEFAULT 0,
    transcript_id INTEGER REFERENCES transcripts (id),
    source_path TEXT,
    source_line INTEGER,
    vec_row INTEGER,
    seq INTEGER NOT NULL DEFAULT 0,
    ingested TEXT NOT NULL,
    updated TEXT NOT NULL,
    UNIQUE (kind, key)
);
CREATE INDEX episodes_session ON episodes (session_id);
CREATE INDEX episodes_project ON episodes (project);
CREATE INDEX episodes_transcript ON episodes (transcript_id);
CREATE INDEX episodes_seq ON episodes (seq);
-- Covers what recall loads, so loading 100k memories never reads their texts and vectors.
CREATE INDEX episodes_recall ON episodes (vec_row, kind, project, last_touched, strength, archived);

CREATE TRIGGER episodes_seq_insert AFTER INSERT ON episodes BEGIN
    UPDATE counters SET value = value + 1 WHERE name = 'episode_seq';
    UPDATE episodes SET seq = (SELECT value FROM counters WHERE name = 'episode_seq')
        WHERE id = NEW.id;
END;
CREATE TRIGGER episodes_seq_update
AFTER UPDATE OF kind, session_id, agent_id, project, text, fields, embedding, strength,
    touches, created, last_touched, archived, vec_row ON episodes BEGIN
    UPDATE counters SET value = value + 1 WHERE name = 'episode_seq';
    UPDATE episodes SET seq = (SELECT value FROM counters WHERE name = 'episode_seq')
        WHERE id = NEW.id;
END;
CREATE TRIGGER episodes_epoch_delete AFTER DELETE ON episodes BEGIN
    UPDATE counters SET value = value + 1 WHERE name = 'episode_epoch';
END;
"""


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[sqlite3.Connection], None]
    #: ``apply`` takes the :class:`Store` (for files beside the database), not the connection.
    with_store: bool = False
    #: What it frees goes back to the disk (a VACUUM once it is committed).
    vacuum: bool = False


def _sql(script: str) -> Callable[[sqlite3.Connection], None]:
    def apply(conn: sqlite3.Connection) -> None:
        # executescript would COMMIT the open transaction; run statement by statement.
        for statement in _split_sql(script):
            conn.execute(statement)

    return apply


def _split_sql(script: str) -> list[str]:
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if buffer.strip():
                statements.append(buffer.strip())
            buffer = ""
    if buffer.strip():
        statements.append(buffer.strip())
    return statements


_V2 = """
CREATE INDEX episodes_created ON episodes (created);

CREATE TABLE lessons (
    id INTEGER PRIMARY KEY,
    state TEXT NOT NULL,
    kind TEXT NOT NULL,
    family TEXT NOT NULL,
    text TEXT NOT NULL,
    text_source TEXT NOT NULL DEFAULT 'rule',
    rule_text TEXT NOT NULL,
    signature TEXT NOT NULL,
    centroid BLOB NOT NULL,
    strength REAL NOT NULL DEFAULT 0,
    seen INTEGER NOT NULL DEFAULT 0,
    sessions INTEGER NOT NULL DEFAULT 0,
    first_seen TEXT,
    last_seen TEXT,
    formed TEXT NOT NULL,
    learned TEXT,
    reinforced TEXT,
    archived_at TEXT,
    vetoed_at TEXT,
    file_name TEXT,
    details TEXT NOT NULL DEFAULT '{}',
    updated TEXT NOT NULL
);
CREATE INDEX lessons_state ON lessons (state);

CREATE TABLE lesson_members (
    episode_id INTEGER PRIMARY KEY REFERENCES episodes (id) ON DELETE CASCADE,
    lesson_id INTEGER NOT NULL REFERENCES lessons (id) ON DELETE CASCADE,
    session_id TEXT,
    created TEXT NOT NULL,
    signature TEXT NOT NULL,
    joined TEXT NOT NULL
);
CREATE INDEX lesson_members_lesson ON lesson_members (lesson_id, session_id);

CREATE TABLE predictions (
    id INTEGER PRIMARY KEY,
    lesson_id INTEGER NOT NULL REFERENCES lessons (id) ON DELETE CASCADE,
    made TEXT NOT NULL,
    text TEXT NOT NULL,
    probes TEXT NOT NULL,
    family TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'open',
    resolved TEXT,
    episode_id INTEGER REFERENCES episodes (id) ON DELETE SET NULL,
    similarity REAL,
    facet TEXT
);
CREATE INDEX predictions_lesson ON predictions (lesson_id, state);
CREATE INDEX predictions_state ON predictions (state);

CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    lesson_id INTEGER,
    prediction_id INTEGER,
    detail TEXT NOT NULL DEFAULT '{}'
);

CREATE TABLE reports (
    id INTEGER PRIMARY KEY,
    made TEXT NOT NULL,
    first_event INTEGER NOT NULL,
    last_event INTEGER NOT NULL,
    file TEXT NOT NULL,
    data TEXT NOT NULL,
    markdown TEXT NOT NULL
);

CREATE TABLE rendered_files (
    path TEXT PRIMARY KEY,
    memory_dir TEXT NOT NULL,
    lesson_id INTEGER,
    role TEXT NOT NULL,
    sha256 TEXT,
    pending_sha256 TEXT,
    state TEXT NOT NULL,
    written TEXT NOT NULL
);
CREATE INDEX rendered_files_dir ON rendered_files (memory_dir);
CREATE INDEX rendered_files_lesson ON rendered_files (lesson_id);
"""

# Publishing to the commons (openmemory_local.commons.publish): opt-ins, the outbox, what left.
_V3_PUBLISH = """
CREATE TABLE publish_projects (
    family TEXT PRIMARY KEY,
    enabled INTEGER NOT NULL DEFAULT 1,
    path TEXT,
    enabled_at TEXT,
    disabled_at TEXT
);

CREATE TABLE publish_queue (
    id INTEGER PRIMARY KEY,
    lesson_id INTEGER NOT NULL UNIQUE,
    family TEXT NOT NULL,
    state TEXT NOT NULL,
    text TEXT NOT NULL,
    kind TEXT NOT NULL,
    strength REAL NOT NULL,
    created INTEGER,
    provenance TEXT,
    salt TEXT,
    episodes TEXT NOT NULL DEFAULT '[]',
    derived_from TEXT NOT NULL DEFAULT '[]',
    reasons TEXT NOT NULL DEFAULT '[]',
    queued TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_attempt TEXT,
    last_error TEXT
);
CREATE INDEX publish_queue_state ON publish_queue (state, id);

CREATE TABLE published (
    record_id TEXT PRIMARY KEY,
    lesson_id INTEGER NOT NULL,
    family TEXT NOT NULL,
    text TEXT NOT NULL,
    kind TEXT NOT NULL,
    strength REAL NOT NULL,
    created INTEGER NOT NULL,
    provenance TEXT NOT NULL,
    salt TEXT NOT NULL,
    episodes TEXT NOT NULL DEFAULT '[]',
    derived_from TEXT NOT NULL DEFAULT '[]',
    author TEXT,
    dedup_key TEXT,
    published_at TEXT NOT NULL,
    superseded_by TEXT,
    revoked_at TEXT,
    revocation_id TEXT,
    revoke_code TEXT,
    revoke_reason TEXT
);
CREATE INDEX published_lesson ON published (lesson_id);
CREATE INDEX published_dedup ON published (dedup_key);
"""

# The commons layer (openmemory_local.commons.receive): received lessons, their predictions, attestations.
_V4_COMMONS = """
CREATE TABLE commons_lessons (
    id INTEGER PRIMARY KEY,
    record_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    author TEXT NOT NULL,
    created INTEGER NOT NULL,
    strength REAL,
    derived_from TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL,
    group_head TEXT,
    authors TEXT NOT NULL DEFAULT '[]',
    confirmers INTEGER NOT NULL DEFAULT 0,
    threshold INTEGER,
    policy TEXT,
    votes INTEGER NOT NULL DEFAULT 0,
    counted INTEGER NOT NULL DEFAULT 0,
    mine INTEGER NOT NULL DEFAULT 0,
    observation INTEGER NOT NULL DEFAULT 1,
    received TEXT NOT NULL,
    status_changed TEXT NOT NULL,
    change INTEGER,
    vetoed_at TEXT,
    file_name TEXT NOT NULL,
    probes TEXT NOT NULL DEFAULT '[]',
    terms TEXT NOT NULL DEFAULT '{}',
    updated TEXT NOT NULL
);
CREATE INDEX commons_lessons_status ON commons_lessons (status);
CREATE INDEX commons_lessons_group ON commons_lessons (group_head);

CREATE TABLE commons_predictions (
    id INTEGER PRIMARY KEY,
    commons_id INTEGER NOT NULL REFERENCES commons_lessons (id) ON DELETE CASCADE,
    family TEXT NOT NULL,
    made TEXT NOT NULL,
    text TEXT NOT NULL,
    probes TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'open',
    resolved TEXT,
    sessions INTEGER,
    matched INTEGER,
    episode_id INTEGER REFERENCES episodes (id) ON DELETE SET NULL,
    facet TEXT,
    similarity REAL,
    attestation_id INTEGER
);
CREATE INDEX commons_predictions_lesson ON commons_predictions (commons_id, state);
CREATE INDEX commons_predictions_state ON commons_predictions (state);

CREATE TABLE commons_attestations (
    id INTEGER PRIMARY KEY,
    commons_id INTEGER NOT NULL REFERENCES commons_lessons (id) ON DELETE CASCADE,
    lesson_record TEXT NOT NULL,
    verdict TEXT NOT NULL,
    met_before INTEGER NOT NULL,
    sessions INTEGER NOT NULL,
    matched INTEGER NOT NULL,
    window INTEGER NOT NULL,
    made TEXT NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    sent TEXT,
    record_id TEXT,
    node_status TEXT,
    error TEXT
);
CREATE INDEX commons_attestations_lesson ON commons_attestations (commons_id, state);
CREATE INDEX commons_attestations_state ON commons_attestations (state);
"""

# Each embedding stored once (issue 16): the vectors file is the only copy (it is derived from
# the texts: a lost file is re-embedded), and each episode records which embedder made its
# vector. Existing stores: the file is rewritten from the blobs first, so nothing is
# re-embedded and nothing is lost.
_V5_TRIGGER = """
CREATE TRIGGER episodes_seq_update
AFTER UPDATE OF kind, session_id, agent_id, project, text, fields, embedder, strength,
    touches, created, last_touched, archived, vec_row ON episodes BEGIN
    UPDATE counters SET value = value + 1 WHERE name = 'episode_seq';
    UPDATE episodes SET seq = (SELECT value FROM counters WHERE name = 'episode_seq')
        WHERE id = NEW.id;
END
"""


def _v5_embedding_once(store: "Store") -> None:
    conn = store.conn
    conn.execute("DROP TRIGGER episodes_seq_update")
    conn.execute("ALTER TABLE episodes ADD COLUMN embedder TEXT")
    if conn.execute("SELECT 1 FROM episodes LIMIT 1").fetchone():
        from openmemory_local.storage.vectors import rewrite_from_blobs

        rewrite_from_blobs(store)
    conn.execute("ALTER TABLE episodes DROP COLUMN embedding")
    conn.execute(_V5_TRIGGER)


# A writer that rewrites many rows (decay: every active episode's strength) gives each its new
# ``seq`` in the same statement and moves the counter once (the values the trigger would have
# given, in the same order): the trigger then has nothing to do for that row. Every other update
# leaves ``seq`` as it was and the trigger bumps it, as before.
_V6_TRIGGER = """
DROP TRIGGER episodes_seq_update;
CREATE TRIGGER episodes_seq_update
AFTER UPDATE OF kind, session_id, agent_id, project, text, fields, embedder, strength,
    touches, created, last_touched, archived, vec_row ON episodes WHEN NEW.seq IS OLD.seq BEGIN
    UPDATE counters SET value = value + 1 WHERE name = 'episode_seq';
    UPDATE episodes SET seq = (SELECT value FROM counters WHERE name = 'episode_seq')
        WHERE id = NEW.id;
END;
"""


_V7_CLAIMS = """
ALTER TABLE commons_lessons ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE commons_lessons ADD COLUMN claim TEXT;
ALTER TABLE commons_lessons ADD COLUMN claim_key TEXT;
ALTER TABLE commons_lessons ADD COLUMN layer TEXT NOT NULL DEFAULT 'commons';
ALTER TABLE commons_lessons ADD COLUMN refused TEXT;
ALTER TABLE commons_lessons ADD COLUMN parts TEXT;
CREATE INDEX commons_lessons_claim ON commons_lessons (claim_key);
ALTER TABLE commons_predictions ADD COLUMN failure TEXT;
ALTER TABLE commons_predictions ADD COLUMN fix TEXT;
ALTER TABLE commons_predictions ADD COLUMN exposed_at TEXT;
ALTER TABLE commons_attestations ADD COLUMN failure TEXT;
ALTER TABLE commons_attestations ADD COLUMN fix TEXT;
ALTER TABLE commons_attestations ADD COLUMN exposed INTEGER NOT NULL DEFAULT 0;
"""


#: Forward migrations, in order; never edit a released one.
MIGRATIONS: list[Migration] = [
    Migration(1, "transcripts, episodes, counters, meta", _sql(_V1)),
    Migration(2, "lessons, lesson_members, predictions, events, reports, rendered_files", _sql(_V2)),
    Migration(3, "publish_projects, publish_queue, published (publishing to the commons)", _sql(_V3_PUBLISH)),
    Migration(4, "commons_lessons, commons_predictions, commons_attestations", _sql(_V4_COMMONS)),
    Migration(5, "each embedding stored once: episodes.embedding dropped (the vectors file holds them), "
              "episodes.embedder added", _v5_embedding_once, with_store=True, vacuum=True),
    Migration(6, "episodes_seq_update skips a row whose update sets its seq itself (decay's bulk rewrite)",
              _sql(_V6_TRIGGER)),
    Migration(7, "received lessons as claims: commons_lessons.version, claim, claim_key, layer (team or "
              "commons), refused, parts; per-part verdicts and exposure of commons predictions and attestations",
              _sql(_V7_CLAIMS)),
]
SCHEMA_VERSION = MIGRATIONS[-1].version


class Store:
    """An open store. Create with :meth:`Store.open`; close with :meth:`close` (or ``with``).

    ``store.db`` is the :class:`sqlite_utils.Database` (for queries and introspection);
    ``store.conn`` is its connection, in autocommit mode: writes go through
    :meth:`write`, which holds SQLite's write lock for the whole block.
    """

    def __init__(self, config: Config, conn: sqlite3.Connection):
        self.config = config
        self.conn = conn
        self._db = None
        self._cache: dict[str, Any] = {}

    @property
    def db(self):
        """The :class:`sqlite_utils.Database` over :attr:`conn` (imported on first use: commands
        that only read never load it)."""
        if self._db is None:
            import sqlite_utils

            self._db = sqlite_utils.Database(self.conn)
        return self._db

    # --- opening ------------------------------------------------------------------

    @classmethod
    def open(cls, config: Config, *, create: bool = True) -> "Store":
        """Open (and create, and migrate) the store of ``config.home``."""
        home = config.home
        if not home.exists():
            if not create:
                raise StoreError(f"no Open Memory data folder at {home}")
            try:
                home.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the data folder {home}: {exc.strerror}") from exc
        elif not home.is_dir():
            raise StoreError(f"{home} is not a folder")
        try:
            conn = sqlite3.connect(
                str(config.db_path),
                timeout=config.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            store = cls(config, conn)
            store._prepare()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open the store {config.db_path}: {exc}") from exc
        return store

    def set_busy_timeout(self, seconds: float) -> None:
        """How long a statement waits for another process's lock before it gives up."""
        self.conn.execute(f"PRAGMA busy_timeout = {int(seconds * 1000)}")

    def _prepare(self) -> None:
        conn = self.conn
        self.set_busy_timeout(self.config.busy_timeout)
        self._enable_wal()
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        self.migrate()

    def _enable_wal(self) -> None:
        """Switch a new database to WAL mode. Two processes creating the store at once
        race for it: SQLite answers "locked" to the loser without waiting, so retry (the
        winner's switch then shows) until ``busy_timeout``."""
        import time

        deadline = time.monotonic() + self.config.busy_timeout
        delay = 0.005
        while True:
            try:
                if self.conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    self.conn.execute("PRAGMA journal_mode = wal")
                return
            except sqlite3.OperationalError as exc:
                if ("locked" not in str(exc) and "busy" not in str(exc)) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    def migrate(self) -> list[int]:
        """Apply the missing migrations; return the versions applied.

        A store that is up to date is only read (no write transaction, no lock taken):
        read-only commands open it while another process writes."""
        try:
            current = self.schema_version()
        except sqlite3.OperationalError:  # no schema_version table yet: a new file
            current = -1
        if current == SCHEMA_VERSION:
            return []
        applied: list[int] = []
        with self.write():
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                "version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            current = self.schema_version()
            if current > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.config.db_path} has schema version {current}, newer than this "
                    f"openmemory knows ({SCHEMA_VERSION}): upgrade openmemory"
                )
            from datetime import datetime, timezone

            for migration in MIGRATIONS:
                if migration.version <= current:
                    continue
                migration.apply(self if migration.with_store else self.conn)
                self.conn.execute(
                    "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.description, iso(datetime.now(timezone.utc))),
                )
                applied.append(migration.version)
            if applied and self.get_meta("embedding") is None:
                from openmemory_local.core.embedders import HASHED_EMBEDDING

                self.set_meta("embedding", HASHED_EMBEDDING)
        if any(m.vacuum for m in MIGRATIONS if m.version in applied) and current > 0:
            self.conn.execute("VACUUM")  # what it freed (v5: the embedding blobs) goes back to the disk
            self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return applied

    def schema_version(self) -> int:
        row = self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def close(self) -> None:
        cached = self._cache.pop("vectors_fd", None)
        if cached:
            os.close(cached[1])
        self.conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- transactions -------------------------------------------------------------

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): all or nothing, one writer at a time.

        Nested use joins the outer transaction.
        """
        if self.conn.in_transaction:
            yield self.conn
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every query inside sees the same snapshot."""
        if self.conn.in_transaction:
            yield self.conn
            return
        self.conn.execute("BEGIN")
        try:
            yield self.conn
        finally:
            if self.conn.in_transaction:
                self.conn.execute("COMMIT")

    # --- meta and counters ----------------------------------------------------------

    def get_meta(self, key: str, default: str | None = None) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else default

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def counter(self, name: str) -> int:
        row = self.conn.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0]) if row else 0

    def set_counter(self, name: str, value: int) -> None:
        self.conn.execute(
            "INSERT INTO counters (name, value) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            (name, value),
        )

    # --- episodes -----------------------------------------------------------------

    def episode(self, episode_id: int) -> dict | None:
        """One episode as a dict (``fields`` decoded, ``embedding`` left out), or None."""
        row = self.conn.execute(
            f"SELECT {_EPISODE_COLUMNS} FROM episodes WHERE id = ?", (episode_id,)
        ).fetchone()
        return _episode_row(row) if row else None

    def episodes(
        self,
        *,
        kind: str | None = None,
        project: str | None = None,
        session: str | None = None,
        include_archived: bool = False,
        only_archived: bool = False,
        ids: list[int] | None = None,
        limit: int | None = None,
        order: str = "created",
    ) -> list[dict]:
        """Episodes matching the filters, oldest first (``order='created'``) or by id.

        ``project`` matches the working directory exactly, its last path component, or
        its Claude Code folder name (``-home-me-app``); ``session`` matches a session id or
        a prefix of one.
        """
        where, params = [], []
        if kind:
            where.append("kind = ?")
            params.append(kind)
        if project:
            tail = "/" + project.strip("/")
            where.append("(project = ? OR substr(project, -length(?)) = ? "
                         "OR json_extract(fields, '$.project_dir') = ?)")
            params += [project, tail, tail, project]
        if session:
            where.append("(session_id = ? OR substr(session_id, 1, length(?)) = ?)")
            params += [session, session, session]
        if only_archived:
            where.append("archived = 1")
        elif not include_archived:
            where.append("archived = 0")
        if ids is not None:
            if not ids:
                return []
            where.append(f"id IN ({','.join('?' * len(ids))})")
            params += list(ids)
        sql = f"SELECT {_EPISODE_COLUMNS} FROM episodes"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created, id" if order == "created" else " ORDER BY id"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [_episode_row(row) for row in self.conn.execute(sql, params)]

    def touch(self, ids: list[int], now_iso: str, *, timeout: float | None = None) -> bool:
        """Record that recall returned these episodes: ``last_touched = now``, ``touches + 1``.

        ``last_touched`` never moves backwards (a simulated past ``now`` leaves it). Returns
        False, changing nothing, if the write lock could not be had within ``timeout``.
        """
        if not ids:
            return True
        placeholders = ",".join("?" * len(ids))
        if timeout is not None:
            self.conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        try:
            with self.write():
                self.conn.execute(
                    f"UPDATE episodes SET touches = touches + 1, "
                    f"last_touched = MAX(last_touched, ?) WHERE id IN ({placeholders})",
                    [now_iso, *ids],
                )
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return False
            raise
        finally:
            if timeout is not None:
                self.conn.execute(f"PRAGMA busy_timeout = {int(self.config.busy_timeout * 1000)}")
        return True

    def stats(self) -> dict:
        """Counts for ``openmemory stats``."""
        c = self.conn
        kinds = {k: n for k, n in c.execute(
            "SELECT kind, COUNT(*) FROM episodes WHERE archived = 0 GROUP BY kind ORDER BY kind")}
        archived = c.execute("SELECT COUNT(*) FROM episodes WHERE archived = 1").fetchone()[0]
        statuses = {s: n for s, n in c.execute(
            "SELECT status, COUNT(*) FROM transcripts GROUP BY status ORDER BY status")}
        row = c.execute(
            "SELECT COUNT(*), COALESCE(SUM(consumed_bytes), 0), COALESCE(SUM(consumed_lines), 0), "
            "COALESCE(SUM(archive_bytes), 0), COALESCE(SUM(rejected_lines), 0), MAX(last_ingested) "
            "FROM transcripts WHERE status = 'active'"
        ).fetchone()
        sessions = c.execute(
            "SELECT COUNT(DISTINCT session_id) FROM transcripts WHERE status = 'active'"
        ).fetchone()[0]
        projects = c.execute(
            "SELECT COUNT(DISTINCT project) FROM episodes WHERE kind = 'session'"
        ).fetchone()[0]
        return {
            "home": str(self.config.home),
            "schema_version": self.schema_version(),
            "embedding": self.get_meta("embedding"),
            "episodes": {"active": sum(kinds.values()), "by_kind": kinds, "archived": archived},
            "sessions": sessions,
            "projects": projects,
            "transcripts": {
                "by_status": statuses,
                "bytes_read": row[1],
                "lines_read": row[2],
                "rejected_lines": row[4],
                "last_ingested": row[5],
            },
            "archive_bytes": row[3],
            "vector_rows": self.counter("vec_rows"),
            "db_bytes": _size(self.config.db_path) + _size(Path(str(self.config.db_path) + "-wal")),
        }


_EPISODE_COLUMNS = (
    "id, kind, key, session_id, agent_id, project, text, fields, strength, touches, created, "
    "last_touched, archived, transcript_id, source_path, source_line, vec_row, ingested, updated"
)


def _episode_row(row) -> dict:
    keys = [k.strip() for k in _EPISODE_COLUMNS.split(",")]
    out = dict(zip(keys, row))
    out["fields"] = loads(out["fields"], {})
    out["archived"] = bool(out["archived"])
    return out


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# --- rows every stage writes ----------------------------------------------------------------


def record_event(store, at: str, kind: str, lesson_id: int | None = None, prediction_id: int | None = None,
                 **detail) -> None:
    store.conn.execute(
        "INSERT INTO events (at, kind, lesson_id, prediction_id, detail) VALUES (?, ?, ?, ?, ?)",
        (at, kind, lesson_id, prediction_id, dumps(detail)),
    )


#: Ids bound in one statement at most: SQLite limits the variables of a statement (999 before
#: 3.32), so a read by many ids goes a chunk at a time.
ID_CHUNK = 500


def rows_by_ids(store, sql: str, ids) -> list[tuple]:
    """The rows of ``sql`` over ``ids``: its one ``{ids}`` stands for the ``IN (...)`` list, filled
    a chunk of :data:`ID_CHUNK` at a time, the rows in chunk order. The one way the storage
    layer reads by a list of ids."""
    ids = list(ids)
    out: list[tuple] = []
    for start in range(0, len(ids), ID_CHUNK):
        chunk = ids[start:start + ID_CHUNK]
        out.extend(store.conn.execute(sql.replace("{ids}", ",".join("?" * len(chunk))), chunk))
    return out


def insert_row(store, table: str, values: dict) -> int:
    """Insert one row of ``table`` (column -> value; the names are the storage layer's own, never
    input); its rowid."""
    return store.conn.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                              list(values.values())).lastrowid


def update_row(store, table: str, row_id: int, values: dict) -> None:
    """Set these columns (column -> value) of the row ``row_id`` of ``table``."""
    store.conn.execute(f"UPDATE {table} SET {', '.join(f'{k} = ?' for k in values)} WHERE id = ?",
                       [*values.values(), row_id])
