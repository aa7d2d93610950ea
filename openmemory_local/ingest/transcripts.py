"""Ingest: raw stream -> archive + episodes, idempotent and incremental.

For each transcript (one transaction each):

1. Plan. A file never seen is read whole. A known file is read from where the last run
   stopped (JSONL is append-only) after checking that its first 64 KiB and the 4 KiB
   before that point are unchanged; a file that shrank or whose earlier bytes changed is
   re-read whole, its previous archive set aside (kept) and its episodes replaced; a file
   whose archive is missing or short is re-read whole to re-archive it. An unchanged file
   (same size and mtime) is not opened.
2. Read complete lines only (a last line still being written is left for the next run),
   copying every byte read into a gzip member and parsing the lines with the adapter into
   events, a block's lines at a time (the adapter settles most of them on their bytes: only
   the records that can say something are decoded), and the events into episodes
   (:mod:`openmemory_local.ingest.episodes`). Bad lines
   (invalid JSON, binary garbage, oversized lines, malformed records) are counted by
   reason and skipped. A file in which no line looks like a transcript record is "not a
   transcript": recorded and skipped until it changes.
3. Commit, under SQLite's write lock (``BEGIN IMMEDIATE``): check that no other process
   moved this transcript since step 1 (if one did, start again from step 1: that is how
   two concurrent ingests neither double-count nor corrupt), append the member to the
   archive, append new vectors, upsert the episodes by ``(kind, key)`` (ids, strength and
   touches survive a re-read), save the resumable parser state, and mark the session
   dirty.

At the end of a run every dirty session's episode is re-merged from the digests of all
its transcripts (one transaction each; a crash leaves the mark for the next run), the
embedding matrix is compacted if needed, and the archive files written are flushed to
disk.

``ingest(store, paths, now=...)`` is the Python API (the SessionEnd hook of a later issue
calls ``openmemory ingest <transcript>``); :func:`rebuild_from_archive` recomputes
every episode from the archive alone.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from openmemory_local.ingest.adapters import ADAPTERS, DEFAULT_ADAPTER, adapter_for
from openmemory_local.ingest.archive import ArchiveFile, ArchiveReader, MemberWriter, archive_relpath, iter_archives, original_path
from openmemory_local.core.clock import ClockError, iso, parse_time
from openmemory_local.core.embedders import store_embedder
from openmemory_local.ingest.episodes import Episode, EpisodeBuilder, session_episode
from openmemory_local.ingest.rawstream import HEAD_BYTES, TAIL_BYTES, Consumed, Line, LineReader, chain_hash
from openmemory_local.core.config import Config
from openmemory_local.storage import episodes as episodes_table
from openmemory_local.storage.store import Store, dumps, loads
from openmemory_local.storage.vectors import VectorFile, embed_pending

__all__ = ["ingest", "rebuild_from_archive", "add_episodes", "IngestSummary", "FileResult", "PROBLEM_STATUSES"]

#: Statuses of a file that could not be ingested this run (the CLI exits 3 if any).
PROBLEM_STATUSES = frozenset({"unreadable", "vanished", "not_found", "busy", "failed"})
_RETRIES = 3
_READ_BUFFER = 1 << 20


@dataclass
class FileResult:
    """What happened to one file."""

    path: str
    status: str  # new, grown, unchanged, rewritten, shrank, rearchived, rebuilt, pending,
    #              not_transcript, not_a_file, unreadable, vanished, not_found, busy, failed
    reason: str | None = None
    session_id: str | None = None
    role: str | None = None
    lines: int = 0
    bytes: int = 0
    added: dict = field(default_factory=dict)  # kind -> episodes added
    updated: int = 0
    removed: int = 0
    duplicates: int = 0  # episodes already owned by another transcript (a copy)
    rejected: dict = field(default_factory=dict)  # reason -> lines rejected this run
    agent: str | None = None  # the adapter that read it (claude-code, codex, gemini)

    def to_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class IngestSummary:
    files: list[FileResult] = field(default_factory=list)
    #: Session episodes merged at the end of the run (added / updated counts).
    sessions: FileResult = field(default_factory=lambda: FileResult("", "sessions"))
    seconds: float = 0.0
    sources: list[str] = field(default_factory=list)
    missing_sources: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[FileResult]:
        return [f for f in self.files if f.status in PROBLEM_STATUSES]

    def totals(self) -> dict:
        by_status = Counter(f.status for f in self.files)
        added: Counter = Counter(self.sessions.added)
        rejected: Counter = Counter()
        for f in self.files:
            added.update(f.added)
            rejected.update(f.rejected)
        return {
            "files": len(self.files),
            "by_status": dict(sorted(by_status.items())),
            "lines": sum(f.lines for f in self.files),
            "bytes": sum(f.bytes for f in self.files),
            "episodes_added": dict(sorted(added.items())),
            "episodes_updated": sum(f.updated for f in self.files) + self.sessions.updated,
            "episodes_removed": sum(f.removed for f in self.files),
            "duplicates": sum(f.duplicates for f in self.files),
            "rejected_lines": dict(sorted(rejected.items())),
            "problems": len(self.problems),
        }

    def to_dict(self) -> dict:
        return {
            "sources": self.sources,
            "missing_sources": self.missing_sources,
            "seconds": round(self.seconds, 3),
            "totals": self.totals(),
            "files": [f.to_dict() for f in self.files],
        }


class _Conflict(Exception):
    """Another process changed this transcript between our read and our commit."""


class _Skip(Exception):
    def __init__(self, status: str, reason: str):
        super().__init__(status, reason)  # both in args: it crosses process boundaries
        self.status = status
        self.reason = reason


Progress = Callable[[int, int, int, int, str], None]


# --- discovery ----------------------------------------------------------------------


def discover(paths: Iterable[os.PathLike | str], adapter=None,
             agents: dict | None = None) -> tuple[list[Path], list[FileResult], list[str]]:
    """Files to ingest under ``paths`` (files, or folders searched recursively).

    With ``adapter`` None, each file's adapter is its own (:func:`adapters.adapter_for`: a
    folder's files by name and place, a file given by name also by its first line), recorded
    in ``agents`` (real path -> adapter). Returns (files, problems for paths that do not exist
    or are not files, missing).
    """
    files: dict[str, Path] = {}
    agents = {} if agents is None else agents
    problems: list[FileResult] = []
    missing: list[str] = []
    for raw in paths:
        path = Path(os.path.abspath(Path(raw).expanduser()))
        try:
            st = path.stat()
        except FileNotFoundError:
            missing.append(str(path))
            problems.append(FileResult(str(path), "not_found", "no such file or folder"))
            continue
        except OSError as exc:
            problems.append(FileResult(str(path), "unreadable", exc.strerror or str(exc)))
            continue
        if adapter is not None:
            found = [(p, adapter) for p in (adapter.discover(path) if stat.S_ISDIR(st.st_mode)
                                            else [path, *adapter.related(path)])]
        elif stat.S_ISDIR(st.st_mode):
            found = [(p, adapter_for(p)) for p in _walk(path)]
        else:
            ad = adapter_for(path, sniff=True)
            found = [(p, ad) for p in (path, *ad.related(path))]
        for item, ad in found:
            key = os.path.realpath(item)
            if key not in files:
                files[key] = Path(key)
                agents[key] = ad
    return sorted(files.values()), problems, missing


def _walk(root: Path) -> list[Path]:
    """Every transcript of any agent under ``root`` (symbolic links to folders not followed):
    the files an adapter claims by name and place (Claude Code's: every ``*.jsonl``)."""
    found = []
    others = [ADAPTERS[name] for name in ADAPTERS if name != DEFAULT_ADAPTER]
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            if name.endswith(".jsonl") or any(ad.claims(path) for ad in others):
                found.append(path)
    return sorted(found)


# --- the run ------------------------------------------------------------------------


def ingest(
    store: Store,
    paths: Iterable[os.PathLike | str] | None = None,
    *,
    now: datetime,
    adapter: str | None = None,
    progress: Progress | None = None,
    before_file: Callable[[Path], None] | None = None,
) -> IngestSummary:
    """Ingest transcripts (files or folders; default: ``store.config.sources``, Claude Code's,
    and ``store.config.agent_sources``, the other agents' folders that exist). Each file is read
    by its own agent's adapter (``adapter``: one adapter for every file instead).

    Never raises for a bad file: each one gets a :class:`FileResult` with its status and
    reason. ``before_file`` is called with each path before it is opened (tests use it to
    pull files away mid-run).
    """
    started = time.perf_counter()
    ad = ADAPTERS[adapter] if adapter is not None else None
    agents: dict = {}
    if paths is None:
        paths = list(store.config.sources)
        existing = [p for p in paths if Path(p).exists()]
        # the other agents' folders: scanned when they exist, not reported missing (an agent
        # that is not installed is no problem)
        others = [p for p in store.config.agent_sources if Path(p).is_dir() and p not in paths]
        summary = IngestSummary(sources=[str(p) for p in paths + others],
                                missing_sources=[str(p) for p in paths if not Path(p).exists()])
        files, problems, _ = discover(existing + others, ad, agents)
    else:
        paths = list(paths)
        summary = IngestSummary(sources=[str(p) for p in paths])
        files, problems, missing = discover(paths, ad, agents)
        summary.missing_sources = missing
    summary.files.extend(problems)

    def one(path: Path) -> FileResult:
        if before_file:
            before_file(path)
        each = agents.get(str(path)) or ad or ADAPTERS[DEFAULT_ADAPTER]
        result = _ingest_path(store, each, path, now)
        result.agent = each.name
        return result

    _run(store, summary, files, one, now, progress, started)
    return summary


def _run(store: Store, summary: IngestSummary, items: list, one, now: datetime, progress, started: float,
         sync: bool = True) -> None:
    """Process files one by one (reporting progress by bytes), then merge the dirty
    session episodes, compact the matrix and flush the archive."""
    _cleanup(store)
    sizes = [_size(store.config.home / (item[0] if isinstance(item, tuple) else item)) for item in items]
    total = sum(sizes)
    done = 0
    for index, item in enumerate(items):
        if progress:
            progress(index, len(items), done, total, str(item))
        summary.files.append(one(item))
        done += sizes[index]
    if progress:
        progress(len(items), len(items), total, total, "")
    _finish_run(store, iso(now), summary.sessions)
    if sync:
        _sync(store, summary)
    summary.seconds = time.perf_counter() - started


def _sync(store: Store, summary: IngestSummary) -> None:
    """Flush this run's archive appends to disk (``Config.archive_sync == "run"``): one
    fsync per archive file written, several at a time (fsync waits on the disk, not the CPU)."""
    if store.config.archive_sync != "run":
        return
    home = store.config.home
    written = [home / archive_relpath(f.agent or DEFAULT_ADAPTER, Path(f.path)) for f in summary.files if f.bytes]
    if not written:
        return

    def flush(path: Path) -> None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)

    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="openmemory-fsync") as pool:
        list(pool.map(flush, written))


def rebuild_from_archive(
    store: Store, *, now: datetime, adapter: str | None = None, progress: Progress | None = None
) -> IngestSummary:
    """Recompute every transcript's episodes from the archive alone (originals unused).

    Episodes keep their ids, strength and touches where their key survives; episodes of
    archived transcripts that no longer derive from the archive are removed.
    """
    started = time.perf_counter()
    home = store.config.home
    chosen = [ADAPTERS[adapter]] if adapter is not None else list(ADAPTERS.values())
    summary = IngestSummary(sources=[str(home / "archive" / ad.name) for ad in chosen])
    archives = [(rel, ad) for ad in chosen for rel in iter_archives(home, ad.name)]

    def one(item) -> FileResult:
        rel, ad = item
        result = _rebuild_one(store, ad, rel, now)
        result.agent = ad.name
        return result

    # Nothing is appended to the archive here (a damaged one is rewritten and synced).
    _run(store, summary, archives, one, now, progress, started, sync=False)
    return summary


def _cleanup(store: Store) -> None:
    """Remove leftovers of interrupted runs (temporary members, stale matrix files)."""
    tmp = store.config.tmp_dir
    if tmp.is_dir():
        cutoff = time.time() - 3600  # another process may be writing a fresh one
        for entry in tmp.iterdir():
            try:
                if entry.stat().st_mtime < cutoff:
                    entry.unlink()
            except OSError:
                pass
    # Only when no other writer is active (a rebuild may be writing a new matrix file).
    store.set_busy_timeout(0.05)
    try:
        with store.write():
            VectorFile(store).remove_stale_files()
    except Exception:  # a busy store: the next run cleans up
        pass
    finally:
        store.set_busy_timeout(store.config.busy_timeout)


# --- one transcript ---------------------------------------------------------------------


@dataclass
class _Plan:
    mode: str  # new, append, unchanged, rewrite, rearchive
    reason: str | None
    start: int
    start_line: int
    head: bytes = b""
    tail: bytes = b""


@dataclass
class _Parsed:
    """What reading a transcript produced (plain data)."""

    consumed: int
    lines: int
    incomplete: bool
    binary: bool  # nothing complete was read and the unread bytes are not text
    head_hash: str
    tail_hash: str
    chunk_digest: bytes  # SHA-256 of the bytes read in this run
    chunk_bytes: int
    transcript_like: bool
    role: str
    agent_id: str | None
    skip_reason: str | None  # the adapter knows this file and cannot read it (a named skip)
    rejects: dict  # reason -> lines, all runs
    rejected: dict  # reason -> lines, this run
    state: dict
    digest: dict
    episodes: list
    member: bytes | str | None  # the archive member: bytes, or a spilled file's path


@dataclass
class _Read:
    """The outcome of reading one file (``_read_transcript``)."""

    kind: str  # parsed, unchanged, stat (same bytes, new size/mtime), skip
    size: int = 0
    mtime: float = 0.0
    status: str | None = None
    reason: str | None = None
    plan: _Plan | None = None
    parsed: _Parsed | None = None


@dataclass
class _Job:
    """Everything needed to read one transcript (plain data, no store)."""

    path: str
    adapter: str
    config: Config
    relpath: str
    row: dict | None
    #: What the adapter cannot read in the file and is told (adapters with ``needs_cwd_hint``:
    #: the working folders already known, to match a project hash against).
    hints: dict | None = None


_ROW_FIELDS = ("status", "size", "mtime", "consumed_bytes", "consumed_lines", "head_hash", "tail_hash",
               "archive_bytes", "state", "digest")


def _job(store: Store, ad, path: Path, row: dict | None) -> _Job:
    subset = {k: row[k] for k in _ROW_FIELDS} if row else None
    hints = None
    if getattr(ad, "needs_cwd_hint", False):
        hints = {"known_cwds": episodes_table.known_projects(store)}
    return _Job(str(path), ad.name, store.config, archive_relpath(ad.name, path), subset, hints)


def _ingest_path(store: Store, ad, path: Path, now: datetime) -> FileResult:
    """Read and commit one file, retrying when a concurrent ingest moved it first."""
    result = FileResult(str(path), "failed")
    for _attempt in range(_RETRIES):
        try:
            row0 = _transcript_row(store, str(path))
            outcome = _read_transcript(_job(store, ad, path, row0))
            try:
                return _apply(store, ad, path, row0, outcome, now)
            finally:
                _drop_member(outcome)
        except _Conflict:
            continue
        except _Skip as skip:
            return FileResult(str(path), skip.status, skip.reason)
        except FileNotFoundError:
            return FileResult(str(path), "vanished", "deleted before it could be read")
        except PermissionError as exc:
            return FileResult(str(path), "unreadable", exc.strerror or "permission denied")
        except IsADirectoryError:
            return FileResult(str(path), "not_a_file", "a folder")
        except OSError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                return FileResult(str(path), "busy", "the store stayed locked by another process")
            return FileResult(str(path), "unreadable", exc.strerror or str(exc))
        except Exception as exc:  # never crash the run on one file
            if "database is locked" in str(exc):
                return FileResult(str(path), "busy", "the store stayed locked by another process")
            return FileResult(str(path), "failed", f"{type(exc).__name__}: {exc}")
    result.reason = "kept changing under concurrent ingests; retry later"
    result.status = "busy"
    return result


def _drop_member(outcome: _Read) -> None:
    if outcome.parsed is not None and isinstance(outcome.parsed.member, str):
        try:
            os.unlink(outcome.parsed.member)
        except OSError:
            pass


def _transcript_row(store: Store, path: str) -> dict | None:
    return episodes_table.transcript_row(store, path)


def _fingerprint(row: dict | None) -> tuple:
    if row is None:
        return (None,)
    return (row["consumed_bytes"], row["head_hash"], row["tail_hash"], row["archive_bytes"], row["status"],
            row["size"], row["mtime"])


def _read_transcript(job: _Job) -> _Read:
    """Plan and read one transcript, without touching the store (the commit does that)."""
    path = Path(job.path)
    config = job.config
    ad = ADAPTERS[job.adapter]
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise _Skip("not_a_file", "not a regular file")
    row = job.row
    archive = ArchiveFile(config.home, job.relpath)
    same = row is not None and row["size"] == st.st_size and row["mtime"] == st.st_mtime
    if same and row["status"] == "not_transcript":
        skip = loads(row.get("digest"), {}).get("skip") if row.get("digest") else None
        if skip:
            return _Read("skip", st.st_size, st.st_mtime, "unsupported", f"{skip} (unchanged)")
        return _Read("skip", st.st_size, st.st_mtime, "not_transcript",
                     f"no {ad.label} record in its first lines (unchanged)")
    if (same and row["status"] == "active" and row["consumed_bytes"] == st.st_size
            and archive.size() >= row["archive_bytes"]):
        return _Read("unchanged", st.st_size, st.st_mtime)
    # The default buffer: the reader asks for 1 MiB blocks, which a buffer as large as a block
    # would copy twice (file -> buffer -> block: 0.09 s instead of 0.04 s on 212 MB).
    with open(path, "rb") as f:
        plan = _plan(row, f, st, archive)
        if plan.mode == "append" and ad.whole_file(path):
            plan = _Plan("rewrite", "changed (read whole)", 0, 0)  # a whole-file format: never appended to
        if plan.mode == "unchanged":
            return _Read("stat", st.st_size, st.st_mtime, plan=plan)
        state = loads(row["state"], {}) if (row and plan.mode == "append") else {}
        if job.hints and plan.mode != "append":
            state = {"parser": dict(job.hints)}
        member = MemberWriter(config.tmp_dir, config.archive_level)
        try:
            parsed = _parse(config, ad, path, f, plan, state, member)
        except BaseException:
            member.discard()
            raise
    return _Read("parsed", st.st_size, st.st_mtime, plan=plan, parsed=parsed)


def _plan(row: dict | None, f, st: os.stat_result, archive: ArchiveFile) -> _Plan:
    if row is None or row["status"] != "active":
        return _Plan("new", None, 0, 0)
    consumed = row["consumed_bytes"]
    if st.st_size < consumed:
        return _Plan("rewrite", "shrank", 0, 0)
    head = f.read(min(HEAD_BYTES, consumed))
    if hashlib.sha256(head).hexdigest() != row["head_hash"]:
        return _Plan("rewrite", "earlier bytes changed", 0, 0)
    tail_start = max(0, consumed - TAIL_BYTES)
    f.seek(tail_start)
    tail = f.read(consumed - tail_start)
    if hashlib.sha256(tail).hexdigest() != row["tail_hash"]:
        return _Plan("rewrite", "earlier bytes changed", 0, 0)
    if archive.size() < row["archive_bytes"] or (consumed and not archive.exists()):
        return _Plan("rearchive", "archive missing or short", 0, 0)
    if st.st_size == consumed:
        return _Plan("unchanged", None, consumed, row["consumed_lines"])
    f.seek(consumed)
    return _Plan("append", None, consumed, row["consumed_lines"], head=head, tail=tail)


def _has_subagent(config: Config, ad, path: Path) -> Callable[[str], bool]:
    def check(agent_id: str) -> bool:
        sub = ad.subagent_path(path, agent_id)
        return sub.exists() or (config.home / archive_relpath(ad.name, sub)).exists()

    return check


def _parse(config: Config, ad, path: Path, stream, plan: _Plan, state: dict,
           member: MemberWriter | None) -> _Parsed:
    if plan.mode != "append" and stream.seekable():
        stream.seek(0)
    if ad.whole_file(path):
        # read whole, from no earlier state (a hint for the parser at most: a rebuild's)
        return _parse_whole(config, ad, path, stream, {} if "builder" in state else state, member)
    sink = Consumed(head=plan.head, tail=plan.tail, member=member)
    reader = LineReader(stream, sink, offset=plan.start, line=plan.start_line,
                        max_line_bytes=config.max_line_bytes)
    parser = ad.parser(path, state.get("parser"), _has_subagent(config, ad, path))
    builder = EpisodeBuilder(state.get("builder"))
    rejects_before = dict(parser.rejects)
    feed = builder.feed
    line_events, run_events = parser.feed, parser.feed_run
    seen = 0  # lines read while it is not known to be a transcript
    probe = config.probe_lines
    for item in reader.runs():
        if type(item) is Line:
            events = line_events(item)
            seen += 1
        elif parser.transcript_like:
            events = run_events(*item)  # a block's lines at once
        else:
            # Line by line until a line shows a transcript, or the probe gives up on it.
            block, pos, end, number = item
            events = []
            while pos < end and not parser.transcript_like and seen < probe:
                nxt = block.index(b"\n", pos) + 1
                number += 1
                run_events(block, pos, nxt, number - 1, events)
                seen += 1
                pos = nxt
            if pos < end and parser.transcript_like:
                run_events(block, pos, end, number, events)
            elif pos < end:  # stopped inside the run: the reader is where the probe stopped
                reader.line, reader.offset = number, reader.offset - (end - pos)
        for event in events:
            feed(event)
        if not parser.transcript_like and seen >= probe:
            break  # not a transcript: nothing of it is kept
        if parser.skip_reason if hasattr(parser, "skip_reason") else False:
            break  # a format the adapter knows it cannot read: a named skip
    for event in parser.finish() if hasattr(parser, "finish") else ():
        feed(event)
    sink.finish()
    rejected = {k: v - rejects_before.get(k, 0) for k, v in parser.rejects.items()
                if v - rejects_before.get(k, 0) > 0}
    binary = False
    if reader.incomplete and reader.offset == 0 and stream.seekable():
        stream.seek(0)
        binary = _looks_binary(stream.read(4096))
    return _Parsed(
        consumed=reader.offset, lines=reader.line, incomplete=reader.incomplete, binary=binary,
        head_hash=sink.head_hash, tail_hash=sink.tail_hash, chunk_digest=sink.digest(),
        chunk_bytes=sink.bytes, transcript_like=parser.transcript_like, role=parser.role,
        agent_id=parser.agent_id, skip_reason=getattr(parser, "skip_reason", None), rejects=dict(parser.rejects),
        rejected=rejected, state={"parser": parser.state(), "builder": builder.state()}, digest=builder.digest,
        episodes=builder.take(), member=member.detach() if member is not None else None,
    )


#: The largest whole-file transcript (a Gemini ``.json``, a ``.jsonl.zst`` once decompressed) read.
WHOLE_FILE_LIMIT = 256 << 20


def _parse_whole(config: Config, ad, path: Path, stream, state: dict, member: MemberWriter | None) -> _Parsed:
    """Read a transcript that is rewritten rather than appended to (a Gemini CLI ``.json``) or
    compressed (``.jsonl.zst``): all of its bytes are archived as they are, then decoded and
    parsed at once; every run that finds it changed reads it whole again."""
    sink = Consumed(member=member)
    raw = stream.read(WHOLE_FILE_LIMIT + 1)
    if len(raw) > WHOLE_FILE_LIMIT:
        raise _Skip("unsupported", f"{ad.label} transcript larger than {WHOLE_FILE_LIMIT >> 20} MiB: not read")
    sink.feed(raw)
    sink.finish()
    parser = ad.parser(path, state.get("parser"), None)
    builder = EpisodeBuilder(None)
    data = raw
    skip = None
    if path.name.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            zstandard = None
            skip = f"{ad.label} {path.name}: a .zst transcript needs the zstandard module (pip install zstandard)"
        if zstandard is not None:
            try:
                data = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read(WHOLE_FILE_LIMIT + 1)
            except zstandard.ZstdError as exc:
                skip = f"{ad.label} {path.name}: not a readable zstd file ({exc})"
    events: list = []
    if skip is None:
        if hasattr(parser, "feed_document") and not path.name.endswith(".zst"):
            events = parser.feed_document(data)
        else:
            parser.feed_run(data, 0, len(data), 0, events)  # every line, the last one even without its newline
    for event in events:
        builder.feed(event)
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    return _Parsed(
        consumed=len(raw), lines=lines, incomplete=False, binary=skip is None and not parser.transcript_like
        and _looks_binary(data[:4096]), head_hash=sink.head_hash, tail_hash=sink.tail_hash,
        chunk_digest=sink.digest(), chunk_bytes=sink.bytes, transcript_like=skip is None and parser.transcript_like,
        role=parser.role, agent_id=parser.agent_id, skip_reason=skip or parser.skip_reason,
        rejects=dict(parser.rejects), rejected=dict(parser.rejects),
        state={"parser": parser.state(), "builder": builder.state()}, digest=builder.digest,
        episodes=builder.take(), member=member.detach() if member is not None else None,
    )


def _looks_binary(data: bytes) -> bool:
    if b"\x00" in data:
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(data) - 4  # a multi-byte character cut at the end is fine
    return False


def _apply(store: Store, ad, path: Path, row0: dict | None, outcome: _Read, now: datetime) -> FileResult:
    """Commit what reading found (or record why there was nothing to commit)."""
    if outcome.kind == "skip":
        return FileResult(str(path), outcome.status, outcome.reason)
    if outcome.kind == "unchanged":
        return FileResult(str(path), "unchanged", session_id=row0["session_id"], role=row0["role"])
    if outcome.kind == "stat":
        with store.write():
            row = _transcript_row(store, str(path))
            if _fingerprint(row) != _fingerprint(row0):
                raise _Conflict()
            episodes_table.update_transcript(store, row["id"], {"size": outcome.size, "mtime": outcome.mtime})
        return FileResult(str(path), "unchanged", session_id=row0["session_id"], role=row0["role"])
    return _commit(store, ad, path, outcome, row0, archive_relpath(ad.name, path), now)


def _commit(store: Store, ad, path: Path, outcome: _Read, row0: dict | None, relpath: str,
            now: datetime) -> FileResult:
    plan, parsed = outcome.plan, outcome.parsed
    result = FileResult(str(path), "failed", lines=parsed.lines - plan.start_line,
                        bytes=parsed.consumed - plan.start, rejected=parsed.rejected)
    now_iso = iso(now)
    if not parsed.transcript_like:
        if parsed.lines == 0 and not parsed.binary and not parsed.skip_reason:
            result.status, result.reason = "pending", "no complete line yet"
            return result
        with store.write():
            row = _transcript_row(store, str(path))
            if _fingerprint(row) != _fingerprint(row0):
                raise _Conflict()
            if row is not None and row["status"] == "active":
                raise _Skip("failed", "a transcript became unreadable as one")  # never drop its episodes
            _upsert_transcript(store, row, {
                "path": str(path), "adapter": ad.name, "status": "not_transcript", "size": outcome.size,
                "mtime": outcome.mtime, "last_ingested": now_iso, "rejects": dumps(parsed.rejects),
                "digest": dumps({"skip": parsed.skip_reason}) if parsed.skip_reason else None,
            }, now_iso)
        result.rejected = {}  # its lines were never meant to be transcript records
        if parsed.skip_reason:  # a named skip: the adapter knows this file and cannot read it
            result.status, result.reason = "unsupported", parsed.skip_reason
            return result
        result.status = "not_transcript"
        result.reason = ("binary data" if parsed.lines == 0 else
                         f"no {ad.label} record in its first {parsed.lines} lines")
        return result
    vectors = _embed_all(store, parsed.episodes)
    archive = ArchiveFile(store.config.home, relpath)
    appended = False
    recorded = 0
    try:
        with store.write():
            row = _transcript_row(store, str(path))
            if _fingerprint(row) != _fingerprint(row0):
                raise _Conflict()
            recorded = row["archive_bytes"] if row else 0
            if plan.mode in ("rewrite", "rearchive") or row is None or row["status"] != "active":
                archive.supersede(now_iso)  # keep whatever was there
                recorded = 0
            else:
                archive.truncate_to(recorded)
            archive_size = recorded
            if parsed.member is not None:
                archive_size = archive.append_member(parsed.member,
                                                     fsync=store.config.archive_sync == "append")
                appended = True
            values = _transcript_values(ad, path, outcome.size, outcome.mtime, parsed, row, relpath,
                                        archive_size, now_iso, appending=plan.mode == "append")
            tid = _upsert_transcript(store, row, values, now_iso)
            replace = plan.mode in ("rewrite", "rearchive")
            _apply_episodes(store, tid, relpath, parsed.episodes, vectors, replace, now_iso, result)
            _mark_dirty(store, parsed.digest.get("session_id"), row)
    except BaseException:
        if appended:
            try:
                archive.truncate_to(recorded)
            except OSError:
                pass
        raise
    result.session_id = parsed.digest.get("session_id")
    result.role = parsed.role
    result.status = {"new": "new", "append": "grown", "rearchive": "rearchived"}.get(
        plan.mode, "shrank" if plan.reason == "shrank" else "rewritten")
    result.reason = plan.reason
    return result


def _transcript_values(ad, path, size, mtime, parsed: _Parsed, row, relpath, archive_size, now_iso,
                       appending: bool = False) -> dict:
    digest = parsed.digest
    previous = row["content_hash"] if (appending and row) else None
    return {
        "path": str(path),
        "adapter": ad.name,
        "status": "active",
        "session_id": digest.get("session_id"),
        "agent_id": parsed.agent_id,
        "role": parsed.role,
        "project": digest.get("cwd"),
        "size": size,
        "mtime": mtime,
        "consumed_bytes": parsed.consumed,
        "consumed_lines": parsed.lines,
        "head_hash": parsed.head_hash,
        "tail_hash": parsed.tail_hash,
        # Chained over the chunks read: an append continues the previous chain.
        "content_hash": chain_hash(previous, parsed.chunk_digest) if parsed.chunk_bytes else (previous or ""),
        "archive_path": relpath,
        "archive_bytes": archive_size,
        "state": dumps(parsed.state),
        "digest": dumps(digest),
        "rejected_lines": sum(parsed.rejects.values()),
        "rejects": dumps(parsed.rejects),
        "last_ingested": now_iso,
    }


def _upsert_transcript(store: Store, row: dict | None, values: dict, now_iso: str) -> int:
    if row is None:
        return episodes_table.insert_transcript(store, dict(values, first_ingested=now_iso))
    if row.get("first_ingested") is None:
        values = dict(values, first_ingested=now_iso)
    episodes_table.update_transcript(store, row["id"], values)
    return row["id"]


#: A vector still to be made (the embedder does not embed inline: :func:`embed_pending` will).
PENDING = "pending"


def _embed_all(store: Store, episodes: list[Episode]) -> list:
    """Each episode's vector, by the store's embedder; :data:`PENDING` for all when it is one
    that embeds in batches at the end of the run (the learned one)."""
    embedder = store_embedder(store)
    if not embedder.inline:
        return [PENDING] * len(episodes)
    return [embedder.embed(ep.text) for ep in episodes]


def _embed_one(store: Store, text: str):
    embedder = store_embedder(store)
    return embedder.embed(text) if embedder.inline else PENDING


def _apply_episodes(store: Store, tid: int, relpath: str, episodes: list[Episode], vectors: list,
                    replace: bool, now_iso: str, result: FileResult) -> None:
    """Upsert episodes by (kind, key); with ``replace``, remove this transcript's others."""
    keys = {(ep.kind, ep.key) for ep in episodes}
    if replace:
        stale = [eid for eid, kind, key in episodes_table.transcript_episode_keys(store, tid)
                 if (kind, key) not in keys]
        if stale:
            episodes_table.delete_episodes(store, stale)
            result.removed += len(stale)
    added: Counter = Counter()
    inserts, new_vectors = [], []
    for ep, vec in zip(episodes, vectors):
        existing = episodes_table.episode_by_key(store, ep.kind, ep.key)
        fields = dumps(ep.fields)
        if existing is None:
            inserts.append((ep, fields))
            new_vectors.append(vec)
            continue
        eid, owner, text, old_fields = existing
        if owner is not None and owner != tid:
            result.duplicates += 1
            continue
        if text == ep.text and old_fields == fields:
            continue
        _update_episode(store, eid, ep, fields, vec if text != ep.text else None, tid, relpath, now_iso)
        result.updated += 1
    if inserts:
        live = [v for v in new_vectors if not isinstance(v, str)]
        first = VectorFile(store).append(np.stack(live)) if live else None
        embedding = store.get_meta("embedding")
        for offset, ((ep, fields), vec) in enumerate(zip(inserts, new_vectors)):
            _insert_episode(store, ep, fields, vec, None if first is None else first + offset, tid, relpath,
                            now_iso, embedding=embedding)
            added[ep.kind] += 1
    for kind, n in added.items():
        result.added[kind] = result.added.get(kind, 0) + n


def add_episodes(store: Store, episodes: list[Episode], *, now: datetime) -> FileResult:
    """Store episodes that do not come from a transcript (imports, tests, benchmarks).

    Upserted by ``(kind, key)`` like ingested ones, in one transaction; they belong to no
    transcript, so no re-read ever removes them.
    """
    result = FileResult("", "new")
    vectors = _embed_all(store, episodes)
    with store.write():
        _apply_episodes(store, None, None, episodes, vectors, False, iso(now), result)
    _finish_run(store, iso(now), result)
    return result


def _insert_episode(store: Store, ep: Episode, fields: str, vec, row: int | None, tid: int | None,
                    relpath: str | None, now_iso: str, touched: str | None = None, *,
                    embedding: str | None = None) -> None:
    """Insert one episode; its vector is already at ``row`` of the vectors file (None: pending),
    made by ``embedding`` (default: the store's)."""
    created = _normal_time(ep.created, now_iso)
    touched = _normal_time(touched, created) if touched else None
    episodes_table.insert_episode(
        store,
        (ep.kind, ep.key, ep.session_id, ep.agent_id, ep.project, ep.text, fields,
         None if row is None else (embedding or store.get_meta("embedding")), created, touched or created, tid, relpath,
         ep.source_line, row, now_iso, now_iso),
    )


def _normal_time(value: str | None, default: str) -> str:
    """A time as stored (``iso``), whatever ISO form the transcript used."""
    if not value:
        return default
    try:
        return iso(parse_time(value))
    except ClockError:
        return default


def _update_episode(store: Store, eid: int, ep: Episode, fields: str, vec, tid: int | None,
                    relpath: str | None, now_iso: str, touched: str | None = None) -> None:
    sets = ["session_id = ?", "agent_id = ?", "project = ?", "text = ?", "fields = ?", "created = ?",
            "transcript_id = ?", "source_path = ?", "source_line = ?", "updated = ?"]
    params = [ep.session_id, ep.agent_id, ep.project, ep.text, fields, _normal_time(ep.created, now_iso), tid,
              relpath, ep.source_line, now_iso]
    if touched:
        sets.append("last_touched = MAX(last_touched, ?)")
        params.append(_normal_time(touched, now_iso))
    if isinstance(vec, str):  # PENDING: the new text is embedded at the end of the run
        sets += ["embedder = NULL", "vec_row = NULL"]
    elif vec is not None:
        row = VectorFile(store).append(np.asarray(vec)[None, :])
        sets += ["embedder = ?", "vec_row = ?"]
        params += [store.get_meta("embedding"), row]
    episodes_table.update_episode(store, eid, sets, params)


def _mark_dirty(store: Store, session_id: str | None, previous_row: dict | None) -> None:
    """Queue the session (and the one this transcript belonged to before) for re-merging."""
    episodes_table.mark_sessions_dirty(
        store, [sid for sid in {session_id, previous_row.get("session_id") if previous_row else None} if sid])


def _finish_run(store: Store, now_iso: str, result: FileResult) -> None:
    """Re-merge every dirty session episode (one transaction each), then compact vectors."""
    while True:
        session_id = episodes_table.a_dirty_session(store)
        if session_id is None:
            break
        with store.write():
            if episodes_table.take_dirty_session(store, session_id):  # not already merged by a concurrent run
                _refresh_session(store, session_id, now_iso, result)
    embed_pending(store)
    with store.write():
        VectorFile(store).maybe_compact()
    from openmemory_local.recall.ann import update as update_index
    from openmemory_local.recall.columns import update as update_copy

    update_copy(store)  # recall's derived files of a big store: the slot-major copy, the HNSW index
    update_index(store)


def _refresh_session(store: Store, session_id: str | None, now_iso: str, result: FileResult) -> None:
    """Recompute the session episode of ``session_id`` from its transcripts' digests."""
    if not session_id:
        return
    parts = []
    main_tid, main_path, main_line = None, None, None
    for tid, role, agent_id, digest, archive_path in episodes_table.session_transcripts(store, session_id):
        d = loads(digest, {})
        parts.append({"role": role, "agent_id": agent_id, "digest": d, "tid": tid, "archive": archive_path})
    episode = session_episode(session_id, parts)
    if episode is None:
        return
    mains = [p for p in parts if p["role"] == "main"]
    source = (max(mains, key=lambda p: p["digest"].get("last_line") or 0) if mains
              else max(parts, key=lambda p: p["digest"].get("last_line") or 0))
    main_tid, main_path = source["tid"], source["archive"]
    fields = dumps(episode.fields)
    existing = episodes_table.session_episode_row(store, session_id)
    touched = episode.fields.get("ended") or episode.created or now_iso
    if existing is None:
        vec = _embed_one(store, episode.text)
        row = None if isinstance(vec, str) else VectorFile(store).append(vec[None, :])
        _insert_episode(store, episode, fields, vec, row, main_tid, main_path, now_iso, touched=touched)
        result.added["session"] = result.added.get("session", 0) + 1
        return
    eid, text, old_fields, old_tid, old_path, old_line = existing
    if (text, old_fields, old_tid, old_path, old_line) == (episode.text, fields, main_tid, main_path,
                                                          episode.source_line):
        return
    vec = _embed_one(store, episode.text) if text != episode.text else None
    _update_episode(store, eid, episode, fields, vec, main_tid, main_path, now_iso, touched=touched)
    result.updated += 1


# --- rebuild from the archive -----------------------------------------------------------


def _rebuild_one(store: Store, ad, rel: str, now: datetime) -> FileResult:
    home = store.config.home
    path = original_path(rel)
    archive = ArchiveFile(home, rel)
    for _attempt in range(_RETRIES):
        try:
            row0 = _transcript_row(store, str(path))
            reader = ArchiveReader(archive.path)
            try:
                stream = io.BufferedReader(reader, buffer_size=_READ_BUFFER)
                plan = _Plan("rewrite", "rebuilt from the archive", 0, 0)
                # a format without the session's folder in it (Gemini CLI's) was told it by a file
                # beside the original, maybe gone now: the folder found then is kept
                hint = ({"parser": {"cwd_hint": row0["project"]}}
                        if getattr(ad, "needs_cwd_hint", False) and row0 and row0.get("project") else {})
                parsed = _parse(store.config, ad, path, stream, plan, hint, None)
                damaged = reader.damaged
            finally:
                reader.close()
            return _commit_rebuild(store, ad, path, rel, row0, parsed, damaged, now)
        except _Conflict:
            continue
        except Exception as exc:
            if "database is locked" in str(exc):
                return FileResult(str(path), "busy", "the store stayed locked by another process")
            return FileResult(str(path), "failed", f"{type(exc).__name__}: {exc}")
    return FileResult(str(path), "busy", "kept changing under concurrent ingests; retry later")


def _commit_rebuild(store: Store, ad, path: Path, rel: str, row0, parsed: _Parsed, damaged: bool,
                    now: datetime) -> FileResult:
    now_iso = iso(now)
    result = FileResult(str(path), "rebuilt", "archive damaged: read up to the damage" if damaged else None,
                        lines=parsed.lines, bytes=parsed.consumed, rejected=parsed.rejected)
    if not parsed.transcript_like:
        result.status, result.reason = "not_transcript", f"no {ad.label} record in the archive"
        return result
    home = store.config.home
    archive = ArchiveFile(home, rel)
    if damaged:
        _rewrite_damaged_archive(store, archive, parsed.consumed, now_iso)
    vectors = _embed_all(store, parsed.episodes)
    with store.write():
        row = _transcript_row(store, str(path))
        if _fingerprint(row) != _fingerprint(row0):
            raise _Conflict()
        values = _transcript_values(ad, path, parsed.consumed, None, parsed, None, rel, archive.size(), now_iso)
        if row is not None:
            # The original's size/mtime stay as last seen; the next ingest compares them.
            values["size"], values["mtime"] = row["size"], row["mtime"]
        tid = _upsert_transcript(store, row, values, now_iso)
        _apply_episodes(store, tid, rel, parsed.episodes, vectors, True, now_iso, result)
        _mark_dirty(store, parsed.digest.get("session_id"), row)
    result.session_id = parsed.digest.get("session_id")
    result.role = parsed.role
    return result


def _rewrite_damaged_archive(store: Store, archive: ArchiveFile, good: int, now_iso: str) -> None:
    """Set a damaged archive aside and write its readable part as a fresh one."""
    member = MemberWriter(store.config.tmp_dir, store.config.archive_level)
    try:
        reader = ArchiveReader(archive.path)
        try:
            left = good
            while left > 0:
                chunk = reader.read(min(left, _READ_BUFFER))
                if not chunk:
                    break
                member.write(chunk)
                left -= len(chunk)
        finally:
            reader.close()
        member.finish()
        archive.supersede(now_iso + "-damaged")
        if member.raw_bytes:
            archive.append_member(member, fsync=True)
    finally:
        member.discard()


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
