"""The node's own SQLite file: every record it accepted, by id, and what it knows of peers.

One file, ``node.db``, in WAL mode with ``synchronous=NORMAL``: a transaction is durable
once committed against a killed process (``kill -9``); only a power loss can take the last
few. The node commits a record *before* it forwards it or answers for it, so a record
accepted is never lost.

Tables (inspect them with ``sqlite-utils`` or ``sqlite3``):

``records``
    ``id`` (text, primary key), ``idb`` (the id's bytes: ``id`` is their hex, by which a
    record is found), ``type``, ``kind`` (lessons),
    ``author`` (hex Ed25519 key), ``created`` (the record's own time), ``arrived`` (this
    node's clock), ``via`` (local, gossip, fetch, api), ``from_peer`` (the peer that
    delivered it first), ``status``, ``status_changed``, ``duplicates`` (how many more
    times it arrived), ``last_duplicate``, ``published`` (local records: when gossiped),
    ``size`` and ``data`` (the exact bytes received; the record is decoded from them).
``peers``
    known peers, their addresses, where we learned them and when we last saw them.
``rejections``
    one row per refusal code: how many, when last, from whom, why.
``commons_keys``
    keys the operator added at run time to the trust list (``role`` = ``trust``) or the
    revokers list (``revoker``), beside those in config.toml.
``local_revocations``
    the operator's local revocations: applied here, never published.
``blocked_peers``
    peers the operator cut off: never dialled, disconnected on sight.

``records.change`` is the change sequence: every arrival and every status change gives the
record the next number (:meth:`Store.add` in its INSERT; triggers for any other insert and for
every status change, so no write path can miss it). ``GET /v1/changes`` reads
records by it, so a reader with a cursor sees what is new, including a lesson that became
common, faded or revoked without a record of its own arriving.

Migrations: the same style as the engine's store (:mod:`openmemory_local.storage.store`).
:data:`MIGRATIONS` is an append-only list of :class:`Migration` (a version number, a description,
and a function over the :class:`sqlite_utils.Database`); the ``schema_version(version,
description, applied_at)`` table holds one row per applied migration. Opening a store applies the
missing ones in order, in one write transaction; a store whose version is newer than this code
knows is refused (:class:`StoreError`), never run against; a store that is current is only read.

Why this style rather than ``PRAGMA user_version`` (the node's first style): the history is in
the file, in a table a user reads with ``sqlite-utils`` or Datasette (what ran, when, and what it
was for), not a bare integer in the header; a migration is named by its number in the list and in
the file alike, so "entry i takes version i to i+1" cannot drift; and the engine, which needs
migrations that touch files beside the database, already had it, so the two halves now read
alike. A store made by the old runner (``user_version`` N, no ``schema_version`` table) is
adopted on open: versions 1..N are recorded as applied ("before schema_version"), then N+1.. run.
``user_version`` is left as the old runner set it (an older node binary then runs nothing twice).

The runner is written here and in the engine's store (the same small shape) rather than shared:
the engine never imports the node, and ``openmemory_protocol`` holds pure rules without I/O, so a
SQLite runner belongs in neither.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import sqlite_utils

DB_FILE = "node.db"


class StoreError(RuntimeError):
    """The node's store cannot be used (its schema is newer than this code knows)."""


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[sqlite_utils.Database], None]


def _m1(db: sqlite_utils.Database) -> None:
    db["records"].create(
        {
            "id": str, "idb": bytes, "type": str, "kind": str, "author": str,
            "created": int, "arrived": float, "via": str, "from_peer": str,
            "status": str, "status_changed": float, "duplicates": int,
            "last_duplicate": float, "published": float, "size": int, "data": bytes,
        },
        pk="id",
        not_null={"idb", "type", "author", "created", "arrived", "via", "status", "size", "data"},
        defaults={"duplicates": 0},
    )
    db["records"].create_index(["idb"], unique=True)
    db["records"].create_index(["type", "status"])
    db["records"].create_index(["kind"])
    db["records"].create_index(["author"])
    db["peers"].create(
        {
            "peer_id": str, "addrs": str, "source": str, "first_seen": float,
            "last_connected": float, "last_disconnected": float,
        },
        pk="peer_id",
    )
    db["rejections"].create(
        {"code": str, "count": int, "last_at": float, "last_peer": str, "last_detail": str},
        pk="code",
    )


def _m2(db: sqlite_utils.Database) -> None:
    """Part 2: the operator's commons settings that change at run time."""
    db["commons_keys"].create(  # role: "trust" or "revoker"
        {"key": str, "role": str, "added": float, "note": str}, pk=("key", "role"),
    )
    db["local_revocations"].create({"id": str, "reason": str, "at": float}, pk="id")
    db["blocked_peers"].create({"peer_id": str, "at": float, "note": str}, pk="peer_id")


def _m3(db: sqlite_utils.Database) -> None:
    """The change sequence (``records.change``): bumped on every arrival and status change."""
    conn = db.conn
    conn.execute("ALTER TABLE records ADD COLUMN change INTEGER")
    conn.execute("UPDATE records SET change = rowid")
    conn.execute("CREATE INDEX records_change ON records (change)")
    next_change = "(SELECT COALESCE(MAX(change), 0) + 1 FROM records)"
    conn.execute(f"CREATE TRIGGER records_change_insert AFTER INSERT ON records BEGIN "
                 f"UPDATE records SET change = {next_change} WHERE rowid = NEW.rowid; END")
    conn.execute(f"CREATE TRIGGER records_change_status AFTER UPDATE OF status ON records "
                 f"WHEN NEW.status IS NOT OLD.status BEGIN "
                 f"UPDATE records SET change = {next_change} WHERE rowid = NEW.rowid; END")


_NEXT_CHANGE = "(SELECT COALESCE(MAX(change), 0) + 1 FROM records)"


def _m4(db: sqlite_utils.Database) -> None:
    """An arrival numbered by its own INSERT (:meth:`Store.add`) is not rewritten by the
    trigger (a second write of the row, its bytes included); the trigger still numbers any
    other insert."""
    conn = db.conn
    conn.execute("DROP TRIGGER records_change_insert")
    conn.execute(f"CREATE TRIGGER records_change_insert AFTER INSERT ON records WHEN NEW.change IS NULL BEGIN "
                 f"UPDATE records SET change = {_NEXT_CHANGE} WHERE rowid = NEW.rowid; END")


def _m5(db: sqlite_utils.Database) -> None:
    """No index of ``idb``: it is the bytes of ``id`` (its lower-case hex, the primary key, whose
    index finds a record as fast), and a second index of random keys cost every insert a page."""
    db.conn.execute("DROP INDEX IF EXISTS idx_records_idb")


#: Forward migrations, in order (append only; never edit a released one).
MIGRATIONS: list[Migration] = [
    Migration(1, "records, peers, rejections", _m1),
    Migration(2, "commons_keys, local_revocations, blocked_peers (commons settings at run time)", _m2),
    Migration(3, "records.change: the change sequence, bumped on every arrival and status change", _m3),
    Migration(4, "an arrival numbered by its own INSERT is not rewritten by the trigger", _m4),
    Migration(5, "no index of records.idb (the primary key finds a record as fast)", _m5),
]
SCHEMA_VERSION = MIGRATIONS[-1].version


@dataclass(frozen=True)
class StoredRecord:
    id: str
    type: str
    kind: str | None
    author: str
    created: int
    arrived: float
    via: str
    from_peer: str | None
    status: str
    duplicates: int
    published: float | None
    data: bytes
    seq: int

    def meta(self) -> dict[str, Any]:
        return {
            "id": self.id, "type": self.type, "kind": self.kind, "author": self.author,
            "created": self.created, "arrived": self.arrived, "via": self.via,
            "from_peer": self.from_peer, "status": self.status, "duplicates": self.duplicates,
            "published": self.published, "size": len(self.data), "seq": self.seq,
        }


_COLUMNS = "rowid, id, type, kind, author, created, arrived, via, from_peer, status, duplicates, published, data"


def _row(row: tuple) -> StoredRecord:
    seq, id_, type_, kind, author, created, arrived, via, from_peer, status, dups, published, data = row
    return StoredRecord(id_, type_, kind, author, created, arrived, via, from_peer, status,
                        dups or 0, published, bytes(data), seq)


class Store:
    def __init__(self, path: Path, clock: Callable[[], float] = time.time):
        self.path = Path(path)
        self.clock = clock
        conn = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=False)
        self.db = sqlite_utils.Database(conn)
        self.conn = conn
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=5000")
        self.migrate()
        # Counters flushed in batches (flush()): duplicates and refusals are frequent and
        # losing the last second of them on a crash loses no record.
        self._dup: Counter[bytes] = Counter()  # keyed by id bytes
        self._dup_last: dict[bytes, float] = {}
        self._rej: Counter[str] = Counter()
        self._rej_last: dict[str, tuple[float, str | None, str]] = {}
        self._tx_depth = 0
        # Ids looked up at once for the open transaction (look_up), and those of them stored.
        self._looked_up: frozenset[bytes] = frozenset()
        self._present: set[bytes] = set()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction for what runs inside (nested ones join it): committed at the
        end, rolled back whole if anything raises. A batch of records (a sync answer) is then
        one commit, and a process killed within it loses the batch, never a committed record."""
        if self._tx_depth:
            self._tx_depth += 1
            try:
                yield
            finally:
                self._tx_depth -= 1
            return
        self.conn.execute("BEGIN IMMEDIATE")
        self._tx_depth = 1
        try:
            yield
            self.conn.commit()
        except BaseException:
            if self.conn.in_transaction:
                self.conn.rollback()
            raise
        finally:
            self._tx_depth = 0
            self._looked_up, self._present = frozenset(), set()

    @classmethod
    def open(cls, home: Path, clock: Callable[[], float] = time.time) -> "Store":
        return cls(Path(home) / DB_FILE, clock)

    def schema_version(self) -> int:
        row = self.conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def migrate(self) -> list[int]:
        """Apply the missing migrations; return the versions applied. A current store is only
        read (no write transaction)."""
        try:
            current = self.schema_version()
        except sqlite3.OperationalError:  # no schema_version table: a new file, or the old runner's
            current = -1
        if current == SCHEMA_VERSION:
            return []
        applied: list[int] = []
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                "version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)")
            current = self.schema_version()
            if current == 0:  # made by the old runner: PRAGMA user_version counted what ran
                legacy = int(self.conn.execute("PRAGMA user_version").fetchone()[0])
                if legacy > SCHEMA_VERSION:
                    raise StoreError(f"{self.path} has schema version {legacy}, newer than this node knows "
                                     f"({SCHEMA_VERSION}): upgrade openmemory-node")
                for migration in MIGRATIONS[:legacy]:
                    self._record_migration(migration, "before schema_version (user_version "
                                                      f"{legacy}): {migration.description}")
                current = legacy
            if current > SCHEMA_VERSION:
                raise StoreError(f"{self.path} has schema version {current}, newer than this node knows "
                                 f"({SCHEMA_VERSION}): upgrade openmemory-node")
            for migration in MIGRATIONS:
                if migration.version <= current:
                    continue
                migration.apply(self.db)
                self._record_migration(migration, migration.description)
                applied.append(migration.version)
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        return applied

    def _record_migration(self, migration: Migration, description: str) -> None:
        from datetime import datetime, timezone

        self.conn.execute("INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                          (migration.version, description,
                           datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")))

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.conn.close()

    # -- records --------------------------------------------------------------------------
    def add(
        self, *, id: str, idb: bytes, type: str, kind: str | None, author: str, created: int,
        data: bytes, via: str, from_peer: str | None, status: str,
        arrived: float | None = None,
    ) -> bool:
        """Insert a record and commit. False (and nothing written) if the id is known. ``id`` is
        the text form of ``idb`` (the records are found by it: no index of ``idb``)."""
        if id != idb.hex():
            raise ValueError("a record's id is the lower-case hex of its id bytes")
        now = self.clock() if arrived is None else arrived
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO records (id, idb, type, kind, author, created, arrived, via,"
            f" from_peer, status, status_changed, duplicates, size, data, change)"
            f" VALUES (?,?,?,?,?,?,?,?,?,?,?,0,?,?,{_NEXT_CHANGE})",
            (id, idb, type, kind, author, created, now, via, from_peer, status, now, len(data), data),
        )
        if cur.rowcount != 1:
            return False
        if self._looked_up:
            self._present.add(idb)
        return True

    def has(self, id: str) -> bool:
        return self.conn.execute("SELECT 1 FROM records WHERE id=?", (id,)).fetchone() is not None

    def has_idb(self, idb: bytes) -> bool:
        if idb in self._looked_up:
            return idb in self._present
        return self.conn.execute("SELECT 1 FROM records WHERE id=?", (idb.hex(),)).fetchone() is not None

    def look_up(self, idbs: Iterable[bytes]) -> None:
        """Within a transaction, which of ``idbs`` are stored, in one query: :meth:`has_idb`
        answers from it for those ids until the transaction ends (what :meth:`add` and
        :meth:`delete` do in it kept in step; nothing else writes while it is open)."""
        if not self._tx_depth:
            return
        wanted = frozenset(idbs) - self._looked_up
        if not wanted:
            return
        ordered = sorted(idb.hex() for idb in wanted)
        present = self._present
        for start in range(0, len(ordered), 500):
            chunk = ordered[start:start + 500]
            present.update(bytes(row[0]) for row in self.conn.execute(
                f"SELECT idb FROM records WHERE id IN ({','.join('?' * len(chunk))})", chunk))
        self._looked_up |= wanted

    def ids_with_prefix(self, prefix: str, limit: int = 11) -> list[str]:
        """Ids (text) that start with ``prefix`` (lower-case hex), at most ``limit`` of them."""
        return [r[0] for r in self.conn.execute(
            "SELECT id FROM records WHERE id >= ? AND id < ? ORDER BY id LIMIT ?", (prefix, prefix + "g", limit))]

    def has_author(self, author: str) -> bool:
        """Whether any stored record is signed by ``author`` (hex public key)."""
        return self.conn.execute("SELECT 1 FROM records WHERE author=? LIMIT 1", (author,)).fetchone() is not None

    def count_without(self, authors: Iterable[str]) -> int:
        """How many records are signed by none of ``authors`` (hex public keys)."""
        keys = sorted(set(authors))
        sql = "SELECT count(*) FROM records"
        if keys:
            sql += f" WHERE author NOT IN ({','.join('?' * len(keys))})"
        return self.conn.execute(sql, keys).fetchone()[0]

    def oldest_without(self, authors: Iterable[str], batch: int = 256) -> Iterable[tuple[str, bytes, str, bytes]]:
        """Records signed by none of ``authors``, revocations excepted, oldest arrival first,
        as (id, id bytes, type, data), read in batches."""
        keys = sorted(set(authors))
        where = "type <> 'revocation' AND rowid > ?"
        if keys:
            where += f" AND author NOT IN ({','.join('?' * len(keys))})"
        last = 0
        while True:
            rows = self.conn.execute(
                f"SELECT rowid, id, idb, type, data FROM records WHERE {where} ORDER BY rowid LIMIT ?",
                (last, *keys, batch),
            ).fetchall()
            if not rows:
                return
            for _, id_, idb, type_, data in rows:
                yield id_, bytes(idb), type_, bytes(data)
            last = rows[-1][0]

    def delete(self, ids: Iterable[str]) -> int:
        """Remove records (a local storage decision: PROTOCOL.md, "Admission of new authors")."""
        self._looked_up, self._present = frozenset(), set()  # (looked up again when asked)
        with self.transaction():
            return sum(self.conn.execute("DELETE FROM records WHERE id=?", (i,)).rowcount for i in ids)

    def get(self, id: str) -> StoredRecord | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM records WHERE id=?", (id,)).fetchone()
        return _row(row) if row else None

    def get_by_idb(self, idb: bytes) -> StoredRecord | None:
        row = self.conn.execute(f"SELECT {_COLUMNS} FROM records WHERE id=?", (idb.hex(),)).fetchone()
        return _row(row) if row else None

    def data_by_idb(self, idb: bytes) -> bytes | None:
        row = self.conn.execute("SELECT data FROM records WHERE id=?", (idb.hex(),)).fetchone()
        return bytes(row[0]) if row else None

    def data_by_idbs(self, idbs: list[bytes]) -> dict[bytes, bytes]:
        """:meth:`data_by_idb` of many ids in one query (at most 500 a query): {id bytes: data}
        for those stored."""
        out: dict[bytes, bytes] = {}
        for start in range(0, len(idbs), 500):
            chunk = [idb.hex() for idb in idbs[start:start + 500]]
            out.update((bytes(idb), bytes(data)) for idb, data in self.conn.execute(
                f"SELECT idb, data FROM records WHERE id IN ({','.join('?' * len(chunk))})", chunk))
        return out

    def list(
        self, *, type: str | None = None, kind: str | None = None, status: str | None = None,
        author: str | None = None, limit: int = 100, before_seq: int | None = None,
        after_seq: int | None = None,
    ) -> list[StoredRecord]:
        where, args = [], []
        for column, value in (("type", type), ("kind", kind), ("status", status), ("author", author)):
            if value is not None:
                where.append(f"{column}=?")
                args.append(value)
        if before_seq is not None:
            where.append("rowid<?")
            args.append(before_seq)
        if after_seq is not None:
            where.append("rowid>?")
            args.append(after_seq)
        sql = f"SELECT {_COLUMNS} FROM records"
        if where:
            sql += " WHERE " + " AND ".join(where)
        order = "ASC" if after_seq is not None else "DESC"
        sql += f" ORDER BY rowid {order} LIMIT ?"
        args.append(int(limit))
        return [_row(r) for r in self.conn.execute(sql, args)]

    def changes(self, after: int, limit: int = 500, type: str | None = None) -> list[tuple[int, StoredRecord]]:
        """Records whose last arrival or status change is numbered above ``after``, in that
        order: (change number, record) pairs."""
        sql = f"SELECT change, {_COLUMNS} FROM records WHERE change > ?"
        args: list[Any] = [after]
        if type is not None:
            sql += " AND type = ?"
            args.append(type)
        sql += " ORDER BY change LIMIT ?"
        args.append(int(limit))
        return [(row[0], _row(row[1:])) for row in self.conn.execute(sql, args)]

    def last_change(self) -> int:
        return self.conn.execute("SELECT COALESCE(MAX(change), 0) FROM records").fetchone()[0]

    def scan(self, batch: int = 2000) -> Iterable[tuple[str, str, bytes, str]]:
        """Every record as (id, type, data, status), in arrival order, read in batches."""
        last = 0
        while True:
            rows = self.conn.execute(
                "SELECT rowid, id, type, data, status FROM records WHERE rowid>? ORDER BY rowid LIMIT ?",
                (last, batch),
            ).fetchall()
            if not rows:
                return
            for rowid, id_, type_, data, status in rows:
                yield id_, type_, bytes(data), status
            last = rows[-1][0]

    def ids_by_type(self) -> Iterable[tuple[bytes, str]]:
        for idb, type_ in self.conn.execute("SELECT idb, type FROM records"):
            yield bytes(idb), type_

    def ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT id FROM records ORDER BY id")]

    def count(self, **where: str) -> int:
        clause = " AND ".join(f"{k}=?" for k in where)
        sql = "SELECT count(*) FROM records" + (f" WHERE {clause}" if clause else "")
        return self.conn.execute(sql, list(where.values())).fetchone()[0]

    def kinds(self) -> dict[str, int]:
        """Lessons held per kind."""
        return dict(self.conn.execute(
            "SELECT kind, count(*) FROM records WHERE kind IS NOT NULL GROUP BY kind ORDER BY kind"))

    def counts(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for type_, status, n in self.conn.execute(
            "SELECT type, status, count(*) FROM records GROUP BY type, status"
        ):
            out.setdefault(type_, {})[status] = n
        return out

    def set_status(self, changes: Iterable[tuple[str, str]]) -> int:
        """Apply (id, status) pairs in one transaction; returns how many rows changed."""
        now = self.clock()
        changed = 0
        execute = self.conn.execute
        sql = "UPDATE records SET status=?, status_changed=? WHERE id=? AND status<>?"
        if self._tx_depth:  # (within the open transaction: no need of one of its own)
            for id_, status in changes:
                changed += execute(sql, (status, now, id_, status)).rowcount
            return changed
        with self.transaction():
            for id_, status in changes:
                changed += execute(sql, (status, now, id_, status)).rowcount
        return changed

    def unpublished(self, author: str) -> list[StoredRecord]:
        rows = self.conn.execute(
            f"SELECT {_COLUMNS} FROM records WHERE via='local' AND published IS NULL"
            " AND author=? ORDER BY rowid", (author,)
        )
        return [_row(r) for r in rows]

    def mark_published(self, id: str) -> None:
        self.conn.execute("UPDATE records SET published=? WHERE id=?", (self.clock(), id))

    # -- counters (batched) ---------------------------------------------------------------
    def count_duplicate(self, idb: bytes) -> None:
        """Count one more arrival of a stored record (by its id bytes)."""
        self._dup[idb] += 1
        self._dup_last[idb] = self.clock()

    def count_rejection(self, code: str, peer: str | None, detail: str) -> None:
        self._rej[code] += 1
        self._rej_last[code] = (self.clock(), peer, detail[:200])

    def flush(self) -> None:
        if not self._dup and not self._rej:
            return
        dup, dup_last, rej, rej_last = self._dup, self._dup_last, self._rej, self._rej_last
        self._dup, self._dup_last, self._rej, self._rej_last = Counter(), {}, Counter(), {}
        with self.transaction():
            for idb, n in dup.items():
                self.conn.execute(
                    "UPDATE records SET duplicates=duplicates+?, last_duplicate=? WHERE id=?",
                    (n, dup_last[idb], idb.hex()),
                )
            for code, n in rej.items():
                at, peer, detail = rej_last[code]
                self.conn.execute(
                    "INSERT INTO rejections (code, count, last_at, last_peer, last_detail)"
                    " VALUES (?,?,?,?,?) ON CONFLICT(code) DO UPDATE SET count=count+excluded.count,"
                    " last_at=excluded.last_at, last_peer=excluded.last_peer,"
                    " last_detail=excluded.last_detail",
                    (code, n, at, peer, detail),
                )

    def rejections(self) -> dict[str, dict[str, Any]]:
        self.flush()
        return {
            row["code"]: {k: row[k] for k in ("count", "last_at", "last_peer", "last_detail")}
            for row in self.db["rejections"].rows
        }

    # -- commons settings -----------------------------------------------------------------
    def commons_keys(self, role: str) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db["commons_keys"].rows_where("role=?", [role], order_by="added")]

    def add_commons_key(self, key: str, role: str, note: str = "") -> bool:
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO commons_keys (key, role, added, note) VALUES (?,?,?,?)",
            (key, role, self.clock(), note),
        )
        return cur.rowcount == 1

    def remove_commons_key(self, key: str, role: str) -> bool:
        cur = self.conn.execute("DELETE FROM commons_keys WHERE key=? AND role=?", (key, role))
        return cur.rowcount == 1

    def local_revocations(self) -> dict[str, dict[str, Any]]:
        return {r["id"]: {"reason": r["reason"], "at": r["at"]}
                for r in self.db["local_revocations"].rows_where(order_by="at")}

    def add_local_revocation(self, id: str, reason: str) -> bool:
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO local_revocations (id, reason, at) VALUES (?,?,?)",
            (id, reason, self.clock()),
        )
        return cur.rowcount == 1

    def remove_local_revocation(self, id: str) -> bool:
        return self.conn.execute("DELETE FROM local_revocations WHERE id=?", (id,)).rowcount == 1

    def blocked_peers(self) -> dict[str, dict[str, Any]]:
        return {r["peer_id"]: {"at": r["at"], "note": r["note"]} for r in self.db["blocked_peers"].rows}

    def block_peer(self, peer_id: str, note: str = "") -> bool:
        cur = self.conn.execute(
            "INSERT OR IGNORE INTO blocked_peers (peer_id, at, note) VALUES (?,?,?)",
            (peer_id, self.clock(), note),
        )
        return cur.rowcount == 1

    def unblock_peer(self, peer_id: str) -> bool:
        return self.conn.execute("DELETE FROM blocked_peers WHERE peer_id=?", (peer_id,)).rowcount == 1

    # -- peers ----------------------------------------------------------------------------
    def remember_peer(self, peer_id: str, addrs: list[str], source: str) -> None:
        now = self.clock()
        existing = self.db["peers"].rows_where("peer_id=?", [peer_id])
        row = next(iter(existing), None)
        if row is None:
            self.db["peers"].insert(
                {"peer_id": peer_id, "addrs": json.dumps(sorted(set(addrs))), "source": source,
                 "first_seen": now, "last_connected": None, "last_disconnected": None}
            )
            return
        merged = sorted(set(json.loads(row["addrs"] or "[]")) | set(addrs))
        # A bootstrap peer stays a bootstrap peer.
        new_source = row["source"] if row["source"] == "bootstrap" else source
        self.db["peers"].update(peer_id, {"addrs": json.dumps(merged), "source": new_source})

    def peer_event(self, peer_id: str, connected: bool) -> None:
        column = "last_connected" if connected else "last_disconnected"
        self.conn.execute(f"UPDATE peers SET {column}=? WHERE peer_id=?", (self.clock(), peer_id))

    def known_peers(self) -> list[dict[str, Any]]:
        out = []
        for row in self.db["peers"].rows:
            row = dict(row)
            row["addrs"] = json.loads(row["addrs"] or "[]")
            out.append(row)
        return out

    def forget_peer(self, peer_id: str) -> None:
        self.conn.execute("DELETE FROM peers WHERE peer_id=?", (peer_id,))
