"""Sleep: decay, lessons, verify, predict. Four passes, each a function of (store, now).

Rules (every number is a :class:`openmemory_local.core.config.Config` field). What moves a lesson
or a prediction from one state to another, and a lesson's strength, is decided by the pure
lifecycle core, :mod:`openmemory_local.sleep.lifecycle` (rules L1-L7, P1-P5, and the transition
tables); the passes read the store, ask it, and persist what it decides through
:mod:`openmemory_local.storage.lessons`. What follows is how each pass gathers what the core reads:

``decay(store, now)``
    Strength halves every ``decay_half_life_days`` (45) *days of activity* without a touch:
    a day counts for a memory when its project family was active that UTC day (an episode of
    the family was created, or one of its sessions ended, that day: :class:`Activity`), so a
    project left alone, or a history imported a year late, loses nothing for the agent's
    absence; with activity every day this is the calendar. Decay is applied up to the start of
    ``now``'s day, from the later of an episode's ``last_touched`` and the point the previous
    decay reached (``meta.decayed_until``; the day of that moment counts for the part of it
    after it); any number of sleeps within one day decay once. An episode below
    ``archive_below`` (0.15) is archived: kept, never deleted, no longer recalled nor
    consolidated (``openmemory episodes --archived``). Lessons decay the same way from their
    last reinforcement, counting their family's active days, and are archived below the same
    threshold (their open prediction is withdrawn). A group still forming whose surprises are
    all archived is dropped.

``learn(store, now)``
    Surprises (error episodes of the failure kinds in ``surprise_failures``, and
    corrections) created up to ``now`` and not yet in a group are taken in time order. Each
    is reduced to its normalised signature (:mod:`openmemory_local.sleep.situations`) and joins
    the group of its kind and project family whose centroid it resembles most, if the
    cosine reaches ``lesson_join_cosine`` (0.55); else it starts a new group
    (:mod:`openmemory_local.sleep.cluster` finds the group without comparing all pairs). A group
    is a lesson once its surprises come from ``error_min_sessions`` (2) sessions for
    failures (a failure must repeat: retries inside one session are one encounter) or
    ``correction_min_sessions`` (1) for corrections (one correction is a lesson). A new
    lesson starts at ``lesson_initial_strength`` (1.0), plus ``lesson_join_strength``
    (0.5) per session beyond the minimum; afterwards every surprise that joins adds 1 to
    ``seen``, and ``lesson_join_strength`` to strength when it comes from a session not yet
    in the lesson. Strength is capped at ``lesson_max_strength`` (5). A vetoed or archived
    lesson still absorbs the surprises that resemble it (a veto is never undone by the
    same failure coming back under a new id); an archived one that a new session meets
    again is revived. With an embedder other than the hashed one (``[engine] embedder =
    "learned"``), a surprise's vector is its episode's own (the vectors file: nothing more is
    embedded for sleep), the threshold is the embedder's (:attr:`Embedder.join_cosine`), and
    the centroids are recomputed once when the store's embedder changes.

``verify(store, now)``
    A prediction states a situation and its outcome: "when a coming session of this project
    family meets the situation (``git push`` runs), the failure recurs or its resolution is
    used (``git push --set-upstream origin <branch>``)". Its probes
    (:func:`openmemory_local.sleep.situations.probes`) carry a role: ``situation``, ``failure``,
    ``resolution``. Each open prediction is compared with what the sessions of its family did
    after it was made (and up to ``now``), each thing dated at its own time: a failure or a
    correction when it happened, a command a session ran or a file it touched when the session
    did it (the session episode's ``times``), so a session that was running when the sleep
    happened counts for what it did after it, and not for what it did before. Facets (the
    commands, the files, the failure itself) are matched against the probes (cosine >=
    ``verify_cosine``, 0.5, and the probe's required path and words; the ``failure`` probe only
    against a failure's or correction's own signature). The window is activity, not time: the
    *first later session that meets the situation or the outcome* decides, whenever it comes:

    * *confirmed* when that session shows the failure again or its resolution (a ``resolution``
      probe): the lesson gains ``confirm_strength`` (0.5);
    * *failed* when that session met the situation with neither, once it has been quiet
      ``prediction_settle_minutes`` (60; until then nothing is decided, a later session
      included: it may yet show them): the world changed, the lesson loses ``fail_strength``
      (0.5);
    * *open* while no session of the family meets the situation: no amount of time without
      such a session fails a prediction (a project left alone for a year fails nothing).
      A prediction fails only when a session of its family happened and met its situation
      without confirming it.

    The verdict, the facet and the episode that decided are kept on the prediction (and in
    the ``confirmed``/``failed`` event, with ``why``). The structure is one function per step
    (:func:`_evidence` collects matches per session, :func:`openmemory_local.sleep.lifecycle.verdict`
    decides); a history
    brought in is replayed day by day (:mod:`openmemory_local.sleep.replay`) through the same passes.
    What learn computed of a surprise (signature, subject, features) verify reuses in the same
    sleep (:class:`SleepMemo`); each distinct facet is compared with a family's probes once, and
    an episode's facets and a probe-facet cosine (pure functions) are kept across the sleeps of
    one process in bounded memos (``benchmarks/sleep_compare.py`` checks the tables are the same).

``predict(store, now)``
    Each active, unvetoed lesson with strength >= ``predict_min_strength`` (1) and no
    open prediction makes one: the situation a coming session in its project family will
    meet and its outcome (:func:`openmemory_local.sleep.situations.probes`), so that it can be
    confirmed even when the lesson helped the agent avoid the failure (its resolution used).

Lesson ``details`` (JSON, read by the texts, the probes, ``openmemory lessons --json`` and the
commons form of issue 12): ``kind``, ``seen``, ``sessions``, ``signature``, ``branches``,
``projects``; for failures ``failure`` (the commonest failure kind), ``subject`` (``tool``,
``heads``: the programs every member shares, ``path``), ``tools`` (tool -> members), ``paths``,
``messages`` (``text``, ``sessions``, ``count``: the reason lines, commonest first), ``anchor``,
``resolutions`` (commonest first, at most 3: ``kind``, ``command`` as shown, ``norm``,
``delta``, ``after``, ``went_away``, ``sessions``, ``count``, ``right_after``; see
:mod:`openmemory_local.ingest.resolutions`); for corrections ``said``, ``action``, ``action_label``,
``statement``, ``cue``.

:func:`sleep` refuses a ``now`` before the store's last sleep (:class:`SleepClockError`: the
store already holds what happened until then), then runs the four passes in one transaction
(a sleep killed midway leaves the store as it was before), holding ``<home>/sleep.lock`` so two sleeps never run at once
(the second gets :class:`SleepBusy` at once rather than waiting), then asks the optional
local model to rephrase new lessons (:func:`openmemory_local.sleep.lesson_text.rephrase`).
Everything a pass changes is also an *event* (table ``events``), from which the morning
report is written. A sleep with nothing to do writes nothing.
"""

from __future__ import annotations

import errno
import gc
import os
import time
from bisect import bisect_left, bisect_right
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import lru_cache
from datetime import datetime, timezone
from typing import Iterator

import numpy as np

from openmemory_local.core.clock import DAY, epoch, iso, parse_time
from openmemory_local.sleep.cluster import GroupIndex
from openmemory_local.text.embed import DIMS, embed_features, feature_cosine, feature_norm, features
from openmemory_local.core.embedders import HASHED_EMBEDDING, store_embedder
from openmemory_local.core.jsonio import dumps, loads
from openmemory_local.sleep import lifecycle
from openmemory_local.storage import episodes as episode_store
from openmemory_local.storage import lessons as lesson_store
from openmemory_local.storage.store import record_event
from openmemory_local.sleep.lesson_text import lesson_text, prediction_text, rephrase
from openmemory_local.text.normalize import family, normalise, path_like
from openmemory_local.sleep.situations import facet_texts, probe_matches, probes, signature, subject

__all__ = [
    "SleepMemo",
    "SleepBusy",
    "SleepClockError",
    "SleepResult",
    "Activity",
    "check_sleep_time",
    "holds_anything",
    "sleep",
    "sleep_lock",
    "decay",
    "learn",
    "verify",
    "predict",
]

UNKNOWN_FAMILY = "(unknown project)"


class SleepBusy(RuntimeError):
    """Another sleep (or render) holds the data folder's lock."""


class SleepClockError(ValueError):
    """A sleep asked for at a time before the store's last sleep."""


@dataclass
class SleepResult:
    now: str
    changed: bool = False
    seconds: float = 0.0
    decay: dict = field(default_factory=dict)
    learn: dict = field(default_factory=dict)
    verify: dict = field(default_factory=dict)
    predict: dict = field(default_factory=dict)
    phrase: dict = field(default_factory=dict)
    empty: bool = False  # the store held nothing to consolidate: nothing done, nothing recorded

    def to_dict(self) -> dict:
        return {
            "now": self.now,
            "changed": self.changed,
            "empty": self.empty,
            "seconds": round(self.seconds, 3),
            "decay": self.decay,
            "learn": self.learn,
            "verify": self.verify,
            "predict": self.predict,
            "phrase": self.phrase,
        }


# --- the lock -------------------------------------------------------------------------------


@contextmanager
def sleep_lock(config) -> Iterator[None]:
    """Hold ``<home>/sleep.lock`` (an advisory ``flock``; the file stays, empty), or raise
    :class:`SleepBusy` at once. Released when the process ends, however it ends."""
    import fcntl

    config.home.mkdir(parents=True, exist_ok=True)
    fd = os.open(config.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise SleepBusy(f"another sleep or render is running on {config.home}") from None
            raise
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# --- helpers ----------------------------------------------------------------------------------


def _day_start(now: datetime) -> datetime:
    now = now.astimezone(timezone.utc)
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def _ep_family(project: str | None, fields: dict) -> str:
    return _family_of(project or fields.get("cwd"), fields.get("branch"))


@lru_cache(maxsize=1 << 14)
def _family_of(cwd: str | None, branch: str | None) -> str:
    # memoised: a pure function of a few distinct (project, branch) pairs, asked per episode
    return family(cwd, branch) or UNKNOWN_FAMILY


def _vec_blob(vec: np.ndarray) -> bytes:
    return np.asarray(vec, dtype="<f4").tobytes()


def _blob_vec(blob: bytes | None) -> np.ndarray:
    if not blob:
        return np.zeros(DIMS, dtype=np.float64)
    return np.frombuffer(blob, dtype="<f4").astype(np.float64)


# --- the sleep ----------------------------------------------------------------------------------


@dataclass
class SleepMemo:
    """What :func:`learn` computed of each surprise, kept for :func:`verify` in the same sleep
    (the same pure functions of the same episodes: computed once)."""
    signatures: dict[int, str] = field(default_factory=dict)  # episode id -> signature
    subjects: dict[int, dict] = field(default_factory=dict)  # episode id -> subject (errors)
    features: dict[str, dict] = field(default_factory=dict)  # signature -> its features

    def keep(self, eid: int, sig: str, sub: dict | None, feats: dict) -> None:
        self.signatures[eid] = sig
        if sub is not None:
            self.subjects[eid] = sub
        self.features[sig] = feats


def check_sleep_time(store, now: datetime) -> None:
    """Refuse a sleep at a time before the last sleep that changed the store
    (:class:`SleepClockError`): the store already holds what happened until then."""
    last = store.get_meta("last_sleep")
    if last and iso(now) < last:
        raise SleepClockError(
            f"cannot sleep at {iso(now)}: this store last slept at {last}, later; sleep only moves forward "
            f"(to replay an earlier time, use a copy of the data folder, or a new one)")


def holds_anything(store) -> bool:
    """Whether the store holds an episode or a lesson: something a sleep consolidates."""
    return episode_store.holds_episodes_or_lessons(store)


def sleep(store, now: datetime, *, lock: bool = True, phrase: bool = True) -> SleepResult:
    """Run the four passes at ``now`` (one transaction), then the optional rephrasing
    (``phrase=False``: not). A ``now`` before the last sleep raises :class:`SleepClockError`. A
    store that holds nothing (:func:`holds_anything`) is left as it is (``empty``): its sleep
    records no day, so a history that arrives later is still replayed as it happened."""
    started = time.perf_counter()
    result = SleepResult(now=iso(now))
    holder = sleep_lock(store.config) if lock else nullcontext()
    with holder:
        with store.write(), _collector_paused():
            check_sleep_time(store, now)
            if not holds_anything(store):
                # nothing to consolidate, and nothing recorded: not the day decay reached, not the last
                # sleep, so that a history ingested later (a new user's first run comes before their
                # transcripts) is replayed from its first day (openmemory_local.sleep.replay)
                result.empty = True
                result.seconds = time.perf_counter() - started
                return result
            before = store.conn.total_changes
            result.decay = decay(store, now)
            memo = SleepMemo()  # what learn computes, verify reuses
            result.learn = learn(store, now, memo)
            result.verify = verify(store, now, memo)
            result.predict = predict(store, now)
            result.changed = store.conn.total_changes != before
            if result.changed:
                store.set_meta("last_sleep", iso(now))
        result.phrase = rephrase(store, now) if phrase else {}
        if result.phrase.get("accepted"):
            result.changed = True
    result.seconds = time.perf_counter() - started
    return result


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the four passes, as it was after them. The passes make
    millions of small dicts, lists and tuples that live until the sleep ends and hold no cycles; the
    collector's full passes over that growing heap were a large share of a big sleep
    (docs/performance-history.md), and pausing it finds under a thousand cyclic objects left at the end,
    with the same peak memory. Reference counting frees everything else as before."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


# --- decay -------------------------------------------------------------------------------------


def decay(store, now: datetime) -> dict:
    """Halve strengths every ``decay_half_life_days`` of activity without a touch; archive the weak."""
    config = store.config
    day = iso(_day_start(now))
    now_iso = iso(now)
    out = {"until": day, "episodes_decayed": 0, "episodes_archived": 0, "lessons_decayed": 0,
           "lessons_archived": [], "groups_dropped": 0}
    with store.write():
        previous = store.get_meta("decayed_until")
        if previous and previous >= day:
            return out
        half_life = float(config.decay_half_life_days)
        floor = previous or ""
        # one scan: the days each family was active (Activity's query) and the episodes that decay, each
        # episode's family read once (its fields parsed twice: cwd and branch; a session's a third time)
        start = floor[:10]
        days_seen: set[tuple] = set()
        candidates = []
        for eid, decays, strength, project, cwd, branch, since, created, ended in episode_store.decay_scan(
                store, floor, day):
            if created >= start:
                days_seen.add((project, cwd, branch, created[:10]))
            if isinstance(ended, str) and ended >= start:
                days_seen.add((project, cwd, branch, ended[:10]))
            if decays:
                candidates.append((eid, strength, project, cwd, branch, since))
        active = Activity.of_days(days_seen)
        until = epoch(day)
        factor = lifecycle.decay_factor  # L4: the lesson's rule, episodes' too
        decayed = []
        for eid, strength, project, cwd, branch, since in candidates:
            days = active.days(_family_of(project or cwd, branch), since, until)
            if days > 0:
                decayed.append((strength * factor(days, half_life), eid))
        # each row's new seq set here, the counter moved once: what the update trigger would do row by row
        # (the same values, in the same order; store.py, schema version 6), at half the writes
        seq = store.counter("episode_seq")
        if decayed:
            episode_store.set_strengths(store, [(eid, strength, seq + n)
                                                for n, (strength, eid) in enumerate(decayed, 1)])
            store.set_counter("episode_seq", seq + len(decayed))
        out["episodes_decayed"] = len(decayed)
        archived = episode_store.archive_weaker_than(store, config.archive_below)  # (L4's threshold)
        if archived:
            out["episodes_archived"] = len(archived)
            record_event(store, now_iso, "episodes_archived", count=len(archived), ids=archived[:50])
        out["lessons_decayed"] = lesson_store.decay_active_lessons(
            store, floor, day, lambda fam, since: active.days(fam, since, until),
            lambda strength, days: lifecycle.decayed_strength(strength, days, config))
        # (the core is asked about the lessons below the threshold and the groups without a live
        # surprise: its guards say no to the others, which a sleep need not build a question for)
        for lesson_id, strength, vetoed, kind in lesson_store.lessons_in_state(store, lifecycle.ACTIVE):
            if not lifecycle.fades(strength, config):
                continue
            change = lifecycle.after_decay(lifecycle.Lesson(lifecycle.ACTIVE, strength, vetoed, kind), 0, config)
            if change.archived:
                _archive_lesson(store, lesson_id, now_iso, strength, "faded")
                out["lessons_archived"].append(lesson_id)
        dropped = [gid for gid, kind, live in lesson_store.forming_groups(store) if not live
                   and lifecycle.after_forgetting(lifecycle.Lesson(lifecycle.FORMING, kind=kind), live).dropped]
        out["groups_dropped"] = lesson_store.delete_groups(store, dropped)
        store.set_meta("decayed_until", day)
    return out


class Activity:
    """The UTC days on which each project family was active (it had an episode: a session
    started or ended, a failure, a correction), from ``since`` on; what decay counts.

    :meth:`days` is the number of active days between two moments, a day counted in part
    for the part of it after ``since`` (so that with activity every day it is the calendar
    count: decay is then what it would be on a wall clock)."""

    def __init__(self, store, since: str):
        start = since[:10]
        self._set(episode_store.active_days_since(store, start))

    @classmethod
    def of_days(cls, rows) -> "Activity":
        """The activity of ``rows``, what the constructor's query gives: ``(project, cwd, branch,
        day)`` (a day is ``YYYY-MM-DD``, the first ten characters of a time; anything else is not one)."""
        out = cls.__new__(cls)
        out._set(rows)
        return out

    def _set(self, rows) -> None:
        found: dict[str, set] = {}
        for project, cwd, branch, date in rows:
            try:
                when = datetime.strptime(date or "", "%Y-%m-%d").replace(tzinfo=timezone.utc).timestamp()
            except ValueError:
                continue
            found.setdefault(_ep_family(project, {"cwd": cwd, "branch": branch}), set()).add(when)
        self._days: dict[str, list[float]] = {fam: sorted(days) for fam, days in found.items()}
        self._cache: dict[tuple, float] = {}

    def days(self, fam: str | None, since: str | None, until: float) -> float:
        key = (fam, since)
        out = self._cache.get(key)
        if out is None:
            out = self._cache[key] = self._count(self._days.get(fam or UNKNOWN_FAMILY, []), since, until)
        return out

    @staticmethod
    def _count(days: list[float], since: str | None, until: float) -> float:
        try:
            start = epoch(since) if since else float("-inf")
        except ValueError:
            return 0.0
        first = bisect_right(days, start - DAY)  # the first day that ends after ``since``
        last = bisect_left(days, until)  # days that start before ``until``
        if last <= first:
            return 0.0
        count = float(last - first)
        if days[first] < start:
            count -= (start - days[first]) / DAY
        return count


def _archive_lesson(store, lesson_id: int, now_iso: str, strength: float, why: str) -> None:
    """Persist a lesson's archiving (L4, L5: its open prediction withdrawn, P5) and its event."""
    lesson_store.archive_lesson(store, lesson_id, now_iso)
    record_event(store, now_iso, "archived", lesson_id, strength=round(strength, 4), why=why)


# --- lessons -------------------------------------------------------------------------------------


@dataclass
class _Group:
    id: int
    state: str
    kind: str
    family: str
    strength: float
    reinforced: str | None
    vetoed: bool
    sessions_before: set | None = None  # loaded when first touched in this sleep
    joined: list = field(default_factory=list)  # (episode created, session id) of new members
    rows: list | None = None  # a group made in this sleep: its members as _details reads them, oldest first


def _cluster_vectors(store):
    """How surprises are embedded for clustering: None for the hashed embedder (a surprise's
    normalised signature, embedded: the rule above); with another embedder (the learned one),
    ``episode id -> vector`` from the store's vectors file, the episode's own text's embedding
    (made once for recall: nothing more is embedded for sleep)."""
    embedder = store_embedder(store)
    if embedder.embedding == HASHED_EMBEDDING:
        return None
    from openmemory_local.storage.vectors import VectorFile

    vectors = VectorFile(store)
    matrix = vectors.map(vectors.current_name(), vectors.committed_rows())

    def of(episode_ids) -> dict[int, np.ndarray]:
        out: dict[int, np.ndarray] = {}
        for eid, row in episode_store.vector_rows(store, list(episode_ids)):
            if row < len(matrix):
                out[eid] = np.asarray(matrix[row], dtype=np.float64)
        return out

    return of


def _recentre(store, of) -> None:
    """Recompute every group's centroid with the store's embedder (after a switch): the sum of
    its members' vectors (signatures' for the hashed embedder, episodes' for another)."""
    dims = store_embedder(store).dims
    sums: dict[int, np.ndarray] = {}
    members = lesson_store.all_members(store)
    vectors = of(eid for _, eid, _ in members) if of else {}
    made: dict[str, np.ndarray] = {}
    for gid, eid, sig in members:
        if of:
            vec = vectors.get(eid)
        else:
            vec = made.get(sig)
            if vec is None:
                vec = made[sig] = embed_features(features(sig)).astype(np.float64)
        if vec is not None:
            sums[gid] = sums.get(gid, np.zeros(dims)) + vec
    lesson_store.set_centroids(store, [(_vec_blob(sums.get(gid, np.zeros(dims))), gid)
                                            for gid in lesson_store.all_lesson_ids(store)])
    store.set_meta("centroid_embedding", store_embedder(store).embedding)


def _load_index(store, keys: set | None = None) -> tuple[GroupIndex, dict[int, _Group]]:
    """The groups (lessons and groups forming) and their index; only those of ``keys`` ((kind,
    family) pairs) if given."""
    config = store.config
    index = GroupIndex(exhaustive_max=config.cluster_exhaustive_max, prefix=config.cluster_prefix_features,
                       posting_cap=config.cluster_posting_cap, candidates=config.cluster_candidates,
                       dims=store_embedder(store).dims)
    groups: dict[int, _Group] = {}
    signatures: dict[int, list[str]] = {}
    for lesson_id, sig in lesson_store.member_signatures(store):
        signatures.setdefault(lesson_id, []).append(sig)
    for gid, state, kind, fam, strength, reinforced, vetoed, centroid in lesson_store.group_rows(store):
        if keys is not None and (kind, fam) not in keys:
            continue
        groups[gid] = _Group(gid, state, kind, fam, strength, reinforced, bool(vetoed))
        sigs = signatures.get(gid, [])
        index.add(gid, (kind, fam), _blob_vec(centroid),
                  ((s, features(s) if i < 8 else {}) for i, s in enumerate(sigs)))
    return index, groups


def learn(store, now: datetime, memo: SleepMemo | None = None) -> dict:
    """Surprises join the lesson they resemble, or cluster among themselves (see the module doc).
    ``memo``, when given, receives what was computed of each surprise (for verify)."""
    config = store.config
    now_iso = iso(now)
    out = {"surprises": 0, "joined": 0, "new_groups": 0, "learned": [], "strengthened": [], "revived": []}
    with store.write():
        of = _cluster_vectors(store)
        if (store.get_meta("centroid_embedding") or HASHED_EMBEDDING) != store_embedder(store).embedding:
            _recentre(store, of)  # the store's embedder changed since the centroids were made
        rows = episode_store.unclustered_surprises(store, now_iso, list(config.surprise_failures))
        if not rows:
            return out
        episode_vectors = of(r[0] for r in rows) if of else None
        if episode_vectors is not None:  # not embedded yet (the next embed_pending does): the next sleep takes them
            rows = [r for r in rows if r[0] in episode_vectors]
        parsed = [loads(r[5], {}) for r in rows]
        # a surprise is only compared with the groups of its key: only those keys' groups are loaded
        index, groups = _load_index(store, {(r[1], _ep_family(r[3], f)) for r, f in zip(rows, parsed)})
        out["surprises"] = len(rows)
        embedder = store_embedder(store)
        join_cosine = embedder.join_cosine or config.lesson_join_cosine
        dims = embedder.dims
        members = []
        new_lessons = []
        next_id = lesson_store.next_lesson_id(store)
        vectors: dict[str, np.ndarray] = {}  # a signature's vector, made once per sleep
        index.reserve(len(rows))  # at most one new group per surprise
        for (eid, kind, session_id, project, created, _fields_json, text), fields in zip(rows, parsed):
            ep = {"id": eid, "kind": kind, "project": project, "fields": fields, "text": text}
            sub = subject(ep) if kind == "error" else None
            sig = signature(ep, sub)
            feats = features(sig)
            if memo is not None:
                memo.keep(eid, sig, sub, feats)
            vec = episode_vectors[eid] if episode_vectors is not None else vectors.get(sig)
            if vec is None:
                vec = vectors[sig] = embed_features(feats)
            key = (kind, _ep_family(project, ep["fields"]))
            gid, _cos = index.find(key, sig, feats, vec, join_cosine)
            if gid is None:
                # the id SQLite would give (the largest plus one: nothing else writes lessons meanwhile);
                # the rows are written at once below
                gid, next_id = next_id, next_id + 1
                new_lessons.append((gid, kind, key[1], sig))
                index.add(gid, key, np.zeros(dims))
                groups[gid] = _Group(gid, lifecycle.FORMING, kind, key[1], 0.0, None, False, sessions_before=set(),
                                     rows=[])
                out["new_groups"] += 1
            else:
                out["joined"] += 1
            group = groups[gid]
            index.join(gid, key, sig, feats, vec)
            sid = session_id or f"episode:{eid}"
            group.joined.append((created, sid))
            if group.rows is not None:
                group.rows.append((sid, created, sig, project, ep["fields"], sub))
            members.append((eid, gid, sid, created, sig, now_iso))
        touched = [g for g in groups.values() if g.joined]
        first_sigs = {gid: sig for gid, _kind, _fam, sig in new_lessons}
        # the sessions each group had before this sleep, in a few queries (not one per group)
        before = lesson_store.member_sessions(store, [g.id for g in touched if g.sessions_before is None])
        for group in touched:
            if group.sessions_before is None:
                group.sessions_before = {sid for _, sid in before.get(group.id, ())}
        # the groups made in this sleep are written once, promoted or not (below), after their members: the
        # members' references to them are checked when the transaction ends (or when they are written)
        lesson_store.defer_foreign_keys(store, True)
        lesson_store.insert_members(store, members)
        lesson_store.set_centroids(store, [(_vec_blob(index._sums[index._row[g.id]]), g.id)
                                          for g in touched if g.rows is None])
        # a group made in this sleep is counted from its members in memory; the others by the store
        ids = [g.id for g in touched if g.rows is None]
        counts = lesson_store.member_counts(store, ids)
        sources = lesson_store.text_sources(store, ids)
        updates: dict[str, list] = {}
        for group in touched:
            if group.rows is None:
                _promote_or_reinforce(store, group, now_iso, out, counts[group.id][0][1:], sources[group.id][0][1:],
                                      updates=updates)
            else:
                created = [c for c, _ in group.joined]
                counts_now = (len(group.rows), len({sid for _, sid in group.joined}), min(created), max(created))
                made = {"state": lifecycle.FORMING, "kind": group.kind, "family": group.family, "text": "",
                        "rule_text": "",
                        "signature": first_sigs[group.id], "centroid": _vec_blob(index._sums[index._row[group.id]]),
                        "formed": now_iso, "updated": now_iso}
                _promote_or_reinforce(store, group, now_iso, out, counts_now, ("rule", ""), updates=updates, made=made)
        lesson_store.write_groups(store, updates)
        lesson_store.defer_foreign_keys(store, False)
    return out


def _promote_or_reinforce(store, group: _Group, now_iso: str, out: dict, counts: tuple | None = None,
                          source: tuple | None = None, updates: dict[str, list] | None = None,
                          made: dict | None = None) -> None:
    """Recount a group that gained members, and persist what the lifecycle decides of it
    (:func:`openmemory_local.sleep.lifecycle.after_join`): a forming group promoted to a lesson
    (L2), a lesson strengthened or an archived one revived (L3), or only recounted.
    ``counts`` (seen, sessions, first, last) and ``source`` (text_source, rule_text), when
    given, are the group's as they stand (``learn`` reads them for every group at once);
    ``updates``, when given, collects the UPDATE (by statement) for the caller to run at once.
    ``made``: a group made in this sleep and not written yet, the columns of its row as it was
    made; the statement is then its INSERT with what this sets (the row in one write)."""
    config = store.config
    seen, sessions, first, last = counts or lesson_store.member_counts(store, [group.id])[group.id][0][1:]
    details = _details(store, group, seen, sessions)
    rule = lesson_text(details, group.id)
    new_sessions = {s for _, s in group.joined} - (group.sessions_before or set())
    latest = max(c for c, _ in group.joined)
    sets = {"seen": seen, "sessions": sessions, "first_seen": first, "last_seen": last,
            "details": dumps(details), "rule_text": rule, "signature": details["signature"], "updated": now_iso}
    change = lifecycle.after_join(lifecycle.Lesson(group.state, group.strength, group.vetoed, group.kind),
                                  sessions, len(new_sessions), config)
    strength, to = change.before.strength, change.after.strength
    if change.learned:
        sets.update(state=lifecycle.ACTIVE, strength=to, learned=now_iso, reinforced=latest,
                    file_name=f"openmemory-lesson-{group.id}.md")
        out["learned"].append(group.id)
        record_event(store, now_iso, "learned", group.id, strength=to, seen=seen, sessions=sessions, text=rule)
    elif group.state != lifecycle.FORMING and new_sessions:
        sets.update(strength=to, reinforced=max(filter(None, [group.reinforced, latest])))
        if change.revived:
            sets.update(state=lifecycle.ACTIVE, archived_at=None)
            out["revived"].append(group.id)
            record_event(store, now_iso, "revived", group.id, strength=to, sessions=sorted(new_sessions))
        if change.strengthened:
            out["strengthened"].append(group.id)
            record_event(store, now_iso, "strengthened", group.id, before=round(strength, 4), after=round(to, 4),
                         joined=len(group.joined), new_sessions=len(new_sessions), why="recurred")
    row = source or lesson_store.text_sources(store, [group.id])[group.id][0][1:]
    if row[0] == "rule" or row[1] != rule:
        sets.update(text=rule, text_source="rule")
    if made is not None:
        sets = {**made, **sets}
    sql = lesson_store.group_statement(sets, new=made is not None)
    if updates is None:
        lesson_store.write_groups(store, {sql: [(*sets.values(), group.id)]})
    else:
        updates.setdefault(sql, []).append((*sets.values(), group.id))


_DETAIL_MEMBERS = 500


def _details(store, group: _Group, seen: int, sessions: int) -> dict:
    """What the lesson's texts and probes are built from, out of its (latest 500) members (those
    of ``group.rows`` for a group made in this sleep: its members, in the order of the query)."""
    if group.rows is not None:
        rows = group.rows[-_DETAIL_MEMBERS:]  # surprises come in (created, id) order
    else:
        rows = lesson_store.latest_members(store, group.id, _DETAIL_MEMBERS)
        rows = [(*row[:4], loads(row[4], {}), None) for row in reversed(rows)]  # oldest first
    details: dict = {"kind": group.kind, "seen": seen, "sessions": sessions}
    branches, paths, projects = [], [], []
    by_sig: dict[str, dict] = {}
    failures: dict[str, int] = {}
    subjects: dict[str, dict] = {}
    tools: dict[str, int] = {}
    heads_seen: list[list[str]] = []
    resolved: dict[tuple, dict] = {}
    member_fixes: list[tuple[dict, dict, str]] = []
    latest_fields, latest_project = {}, None
    errors = group.kind == "error"
    for session_id, created, sig, project, fields, sub in rows:
        latest_fields, latest_project = fields, project
        branch = fields.get("branch")
        if branch and branch not in branches:
            branches.append(branch)
        cwd = project or fields.get("cwd")
        if cwd and cwd not in projects:
            projects.append(cwd)
        entry = by_sig.get(sig)
        if entry is None:
            entry = by_sig[sig] = {"sig": sig, "sessions": set(), "count": 0, "text": "", "last": ""}
        entry["sessions"].add(session_id)
        entry["count"] += 1
        entry["last"] = created
        if errors:
            failure = fields.get("failure") or "error"
            failures[failure] = failures.get(failure, 0) + 1
            entry["text"] = fields.get("first_line") or ""
            sub = sub or subject({"kind": group.kind, "project": project, "fields": fields})
            if sig not in subjects:
                subjects[sig] = sub
            if sub["path"] and sub["path"] not in paths:
                paths.append(sub["path"])
            tools[sub["tool"]] = tools.get(sub["tool"], 0) + 1
            heads_seen.append(sub["heads"])
            res = fields.get("resolution")
            if isinstance(res, dict) and res.get("kind"):
                member_fixes.append((sub, res, session_id))
    # most sessions first, then most often, then most recent
    ranked = sorted(by_sig.values(), key=lambda e: e["last"], reverse=True)
    ranked.sort(key=lambda e: (-len(e["sessions"]), -e["count"]))
    top = ranked[0]
    details["signature"] = top["sig"]
    details["branches"] = branches
    details["projects"] = projects
    if group.kind == "error":
        details["failure"] = max(failures, key=lambda k: (failures[k], k)) if failures else "error"
        details["subject"] = dict(subjects.get(top["sig"]) or {})
        shared = [h for h in details["subject"].get("heads") or [] if all(h in hs for hs in heads_seen if hs)]
        if shared:
            details["subject"]["heads"] = shared  # what the group's commands share (git commit)
        details["tools"] = dict(sorted(tools.items(), key=lambda kv: (-kv[1], kv[0])))
        # a fix is claimed for the failure it followed: a member's resolution counts when that
        # member failed the way the lesson says (its tool, a program in common), so that a lesson
        # about `tree` never states what fixed a `python` that merged into it
        for sub, res, session_id in member_fixes:
            if _same_failure(sub, details["subject"]):
                _count_resolution(resolved, res, session_id)
        details["resolutions"] = _ranked_resolutions(resolved)
        details["paths"] = paths
        messages, seen_norm = [], set()
        for entry in ranked:
            norm = entry["sig"].split(": ", 1)[-1]
            if norm in seen_norm:
                continue
            seen_norm.add(norm)
            messages.append({"text": entry["text"], "sessions": len(entry["sessions"]), "count": entry["count"]})
        details["messages"] = messages[:10]
        details["anchor"] = _anchor(store, group.id, top)
    else:
        fields = latest_fields
        details["said"] = fields.get("message") or ""
        action = fields.get("agent_action") or {}
        if action:
            details["action"] = _action_norm(action, latest_project, fields)
            details["action_label"] = _action_label(action)
        details["statement"] = fields.get("agent_statement")
    return details


def _same_failure(member: dict, subject: dict) -> bool:
    """Whether a member's failing call is the lesson's: the same tool and, for a shell command,
    a program in common (``git push`` and ``git push``; not ``tree`` and ``python``)."""
    if member.get("tool") != subject.get("tool"):
        return False
    heads, want = member.get("heads") or [], subject.get("heads") or []
    if not want or not heads:
        return True
    return any(h.split()[0] == w.split()[0] for h in heads for w in want)


def _count_resolution(resolved: dict, res: dict, session_id: str | None) -> None:
    if res["kind"] == "retry":
        key = ("retry", tuple(sorted(res.get("after") or [])[:3]), bool(res.get("went_away")))
    else:
        key = (res["kind"], res.get("norm") or res.get("command"))
    entry = resolved.setdefault(key, {"kind": res["kind"], "command": res.get("command") or "", "norm": res.get("norm"),
                                      "delta": res.get("delta") or [], "after": list(res.get("after") or [])[:3],
                                      "went_away": bool(res.get("went_away")), "sessions": set(), "count": 0,
                                      "right_after": True})
    entry["sessions"].add(session_id)
    entry["count"] += 1
    entry["right_after"] = entry["right_after"] and not res.get("calls_after")


def _ranked_resolutions(resolved: dict) -> list[dict]:
    """What made the failure go away, most sessions first (see ``details["resolutions"]``)."""
    out = sorted(resolved.values(), key=lambda e: (-len(e["sessions"]), -e["count"], e["kind"] != "changed"))
    return [dict(e, sessions=len(e["sessions"])) for e in out[:3]]


def _action_norm(action: dict, project, fields) -> str:
    from openmemory_local.sleep.situations import _action_text

    return _action_text(action, project or fields.get("cwd"), fields.get("branch"))


def _action_label(action: dict) -> str | None:
    from openmemory_local.ingest.episodes import command_heads

    tool = action.get("tool") or ""
    command = action.get("command") or ""
    if tool == "Bash" and command:
        heads = list(dict.fromkeys(command_heads(command)))[:3]
        return ", ".join(f"`{h}`" for h in heads) or None
    return f"`{tool}`" if tool else None


def _anchor(store, gid: int, top: dict) -> str | None:
    """A path that the failure message names and that the failing commands touched."""
    norm = top["sig"].split(": ", 1)[-1]
    if "/" not in norm:  # (no word of it can be a path)
        return None
    candidates = [w.strip(".,:;'\"()[]") for w in norm.split()]
    candidates = [w for w in candidates if "/" in w and path_like(w) and "{" not in w]
    if not candidates:
        return None
    for (fields_json, project) in lesson_store.member_commands(store, gid, 20):
        fields = loads(fields_json, {})
        command = normalise(fields.get("command") or "", cwd=project or fields.get("cwd"), branch=fields.get("branch"))
        for word in candidates:
            if word in command:
                return word
    return None


# --- verify ---------------------------------------------------------------------------------------


def verify(store, now: datetime, memo: SleepMemo | None = None) -> dict:
    """Decide open predictions on the sessions that came after them (see the module doc).
    ``memo``: what :func:`learn` computed in this sleep (not computed again)."""
    config = store.config
    now_iso = iso(now)
    out = {"open": 0, "episodes": 0, "sessions": 0, "confirmed": [], "failed": []}
    with store.write():
        preds = lesson_store.open_predictions(store)
        if not preds:
            return out
        out["open"] = len(preds)
        since = min(p[2] for p in preds)
        by_family: dict[str, list[int]] = {}
        for i, p in enumerate(preds):
            by_family.setdefault(p[4], []).append(i)
        # a session that started before the prediction and went on after it shows what it met after
        episodes = episode_store.episodes_met_after(store, since, now_iso)
        out["episodes"] = len(episodes)
        ended: dict[int, str | None] = {}
        evidence = _evidence(config, preds, by_family, episodes, now_iso, memo, ended)
        quiet = _quiet_sessions(episodes, epoch(now) - config.prediction_settle_minutes * 60, ended)
        out["sessions"] = len({sid for per in evidence.values() for sid in per})
        decided = [(pred, verdict) for i, pred in enumerate(preds)
                   if (verdict := lifecycle.verdict(evidence.get(i, {}), quiet)).outcome != lifecycle.UNDECIDED]
        # the lessons of the decided predictions, read at once and kept as they change (P2, P3, L5)
        rows = lesson_store.strengths(store, [pred[1] for pred, _ in decided])
        lessons = {lid: lifecycle.Lesson(state, strength, vetoed, kind)
                   for lid, (state, strength, _reinforced, vetoed, kind) in rows.items()}
        reinforced = {lid: row[2] for lid, row in rows.items()}
        for (pid, lesson_id, made, _probes, _fam), verdict in decided:
            state = lifecycle.resolve(lifecycle.OPEN, lifecycle.CONFIRM if verdict.outcome == lifecycle.CONFIRMED
                                      else lifecycle.FAIL)
            eid, created, facet, sim = verdict.match
            change = lifecycle.after_verdict(lessons[lesson_id], verdict.outcome, config)
            lessons[lesson_id] = change.after
            if state == lifecycle.CONFIRMED:  # decay counts from the confirming evidence (L5)
                reinforced[lesson_id] = max(filter(None, [reinforced[lesson_id], created]))
            before, after = change.before.strength, change.after.strength
            lesson_store.set_strength(store, lesson_id, after, reinforced[lesson_id])
            lesson_store.resolve_prediction(store, pid, state, now_iso, eid, round(sim, 6), facet)
            record_event(store, now_iso, state, lesson_id, pid, episode=eid, facet=facet, why=verdict.why,
                         similarity=round(sim, 4), before=round(before, 4), after=round(after, 4),
                         days=round((epoch(now) - epoch(made)) / DAY, 1))
            out[state].append(pid)
            if change.archived:
                _archive_lesson(store, lesson_id, now_iso, after, "predictions failed")
    return out


def _quiet_sessions(episodes, before: float, ended_of: dict[int, str | None] | None = None) -> set:
    """Sessions whose last activity (a session episode's ``ended``, else its latest episode) is
    before ``before``. ``ended_of``: the session episodes' ``ended``, by id, if already read."""
    last: dict[str, float] = {}
    for eid, kind, _project, created, fields_json, session_id in episodes:
        sid = session_id or f"episode:{eid}"
        when = epoch(created)
        if kind == "session":
            ended = ended_of[eid] if ended_of is not None and eid in ended_of else loads(fields_json, {}).get("ended")
            if ended:
                try:
                    when = max(when, epoch(ended))
                except (ValueError, TypeError):
                    pass
        last[sid] = max(last.get(sid, 0.0), when)
    return {sid for sid, when in last.items() if when <= before}


def _evidence(config, preds, by_family: dict[str, list[int]], episodes, now_iso: str,
              memo: SleepMemo | None = None, ended: dict[int, str | None] | None = None) -> dict[int, dict]:
    """For each prediction (by position), the later sessions of its family that matched one of its
    probes: ``{session id: {"first": when, role: (episode id, when, facet, similarity)}}``, the
    earliest match of each role.

    A match is dated at its own time: an error or correction episode at its ``created``, a
    session's command or file at the first time the session met it after the prediction was
    made (:func:`openmemory_local.sleep.situations.timed_facets`: its first time if that is after
    the prediction, else its last time); a facet met only before the prediction, or not yet by
    ``now``, does not count. Facets and probes are short texts (``git push``), compared by the
    exact cosine of their features (:func:`openmemory_local.text.embed.feature_cosine`): no hashing
    collision can make ``mix deps.get`` resemble ``git push``. A ``failure`` probe matches
    only the signature of an error or correction episode (its first facet): another failure of
    the same program (``mix test``) is the situation met again, not this failure.

    Each distinct facet is compared with a family's probes once (:func:`_facet_hits`); ``memo``
    holds what :func:`learn` computed of the same episodes; ``ended``, when given, receives each
    session episode's ``ended`` (for :func:`_quiet_sessions`).
    """
    threshold = config.verify_cosine
    parsed = [loads(p[3], []) for p in preds]
    plan: dict[str, tuple] = {}
    for fam, positions in by_family.items():
        probe_rows = [(i, probe, features(probe["text"])) for i in positions for probe in parsed[i]]
        # each probe with its memo key (its text, required path and words: what the cosine depends on)
        probe_rows = [(i, probe, feats, feature_norm(feats),
                       (probe["text"], probe.get("require"), tuple(probe.get("words") or ())))
                      for i, probe, feats in probe_rows]
        postings: dict[str, list[int]] = {}  # feature -> probes (rows) that have it
        for k, (_, _, feats, _, _) in enumerate(probe_rows):
            for feature in feats:
                postings.setdefault(feature, []).append(k)
        plan[fam] = (probe_rows, postings, _hits_maker(preds, probe_rows, postings, threshold, memo))
    found: dict[int, dict] = {}
    # family -> facet -> the probes it matches: (prediction position, role, made, cosine)
    hits_of: dict[str, dict[str, tuple]] = {fam: {} for fam in plan}
    for eid, kind, project, created, fields_json, session_id in episodes:
        # an episode's family, end and facets are pure functions of its content: kept across sleeps
        content = (kind, project, fields_json)
        known_ep = _EPISODE_FACETS.get(content)
        fields = None
        if known_ep is None:
            fields = loads(fields_json, {})
            known_ep = _EPISODE_FACETS.put(content, (_ep_family(project, fields), fields.get("ended"), None),
                                           len(fields_json or ""))
        fam, session_end, texts = known_ep
        is_session = kind == "session"
        if ended is not None and is_session:
            ended[eid] = session_end
        entry = plan.get(fam)
        if entry is None:
            continue
        fam_hits = hits_of[fam]
        sid = session_id or f"episode:{eid}"
        if texts is None:
            ep = {"id": eid, "kind": kind, "project": project, "fields": fields or loads(fields_json, {})}
            if memo is not None and kind == "error":  # (a correction's signature in learn may also read its text)
                texts = facet_texts(ep, memo.signatures.get(eid), memo.subjects.get(eid))
            else:
                texts = facet_texts(ep)
            # (a tuple, not a list: the collector stops following what holds only texts)
            _EPISODE_FACETS[content] = (fam, session_end, texts)
        names, times = texts  # (timed_facets: the facets, and their times if any is known)
        _record_hits(names, times, fam_hits, entry[2], found, sid, eid, created, now_iso, is_session)
    return found


def _hits_maker(preds, probe_rows: list, postings: dict, threshold: float, memo: SleepMemo | None):
    """A family's ``hits_for(facet)``: :func:`_facet_hits` as :func:`_record_hits` keeps them,
    ``(prediction position, role, made, cosine)``."""
    known = memo.features if memo is not None else None

    def hits_for(facet: str) -> tuple:
        return tuple((i, probe.get("role") or "situation", preds[i][2], sim)
                     for i, probe, sim in _facet_hits(facet, probe_rows, postings, threshold, known))

    return hits_for


def _record_hits(names, times, fam_hits: dict, hits_for, found: dict, sid: str, eid: int, created: str,
                 now_iso: str, is_session: bool) -> None:
    """One episode's matches into ``found`` (see :func:`_evidence`): each of its facets (``names``;
    ``times``: their first and last times, None when none is known) with the probes it matches
    (``fam_hits``, filled by ``hits_for`` for a facet not met yet), dated at its own time, the
    earliest match of each role and session kept."""
    for n, facet in enumerate(names):
        hits = fam_hits.get(facet)
        if hits is None:
            hits = fam_hits[facet] = hits_for(facet)
        if not hits:
            continue
        if times is None:
            first = last = created
        else:
            first, last = times[n]
            first = (_stored_time(first) if first else None) or created
            last = (_stored_time(last) if last else None) or created
        # the failure recurs only as an error or correction whose signature (its first facet) matches
        failure = not is_session and n == 0
        for i, role, made, sim in hits:
            when = first if made < first <= now_iso else last if made < last <= now_iso else None
            if when is None or (role == "failure" and not failure):
                continue
            per = found.get(i)
            if per is None:
                per = found[i] = {}
            seen = per.get(sid)
            if seen is None:
                per[sid] = {"first": when, role: (eid, when, facet, sim)}
                continue
            if role in seen and seen[role][1] <= when:
                continue
            seen[role] = (eid, when, facet, sim)
            if when < seen["first"]:
                seen["first"] = when


def _facet_hits(facet: str, probe_rows: list, postings: dict, threshold: float, known: dict | None = None) -> tuple:
    """The probes of one family that ``facet`` matches (its required path and words, and a cosine
    >= ``threshold``): ``(prediction position, probe, cosine)``, in the probes' order. A pure
    function of the facet and the family's probes: verify asks it once per distinct facet.
    ``known``: features already made (a signature's, by learn), by text."""
    feats = (known.get(facet) if known else None) or features(facet)
    norm = None
    # only probes that share a feature with the facet can reach the threshold
    lists = [k for k in map(postings.get, feats) if k]
    if not lists:
        return ()
    out = []
    for k in sorted(set().union(*lists)):
        i, probe, probe_feats, probe_norm, probe_key = probe_rows[k]
        pair = (probe_key, facet)
        sim = _PAIR_SIMS.get(pair, _UNSEEN)
        if sim is _UNSEEN:  # a pure function of the probe and the facet: kept across sleeps
            if probe_matches(probe, facet):
                if norm is None:
                    norm = feature_norm(feats)
                sim = feature_cosine(probe_feats, feats, probe_norm, norm)
            else:
                sim = None
            _PAIR_SIMS.put(pair, sim)
        if sim is not None and sim >= threshold:
            out.append((i, probe, sim))
    return tuple(out)


class _Bounded(dict):
    """A memo of pure functions kept across the sleeps of one process (a replay sleeps once per
    day over the same episodes and predictions); it forgets everything at ``limit`` entries, or
    when the weights given to :meth:`put` (the characters its keys hold) add up to ``weight``."""

    def __init__(self, limit: int, weight: int | None = None):
        super().__init__()
        self.limit = limit
        self.weight = weight
        self._held = 0

    def put(self, key, value, weight: int = 0):
        if len(self) >= self.limit or (self.weight is not None and self._held + weight > self.weight):
            self.clear()
        self._held += weight
        self[key] = value
        return value

    def clear(self) -> None:
        super().clear()
        self._held = 0


_UNSEEN = object()
#: (kind, project, fields JSON) -> (family, ended, its facet_texts or None until asked)
_EPISODE_FACETS = _Bounded(1 << 15, weight=32 << 20)  # (at most 32 MiB of episode text held)
#: ((probe text, require, words), facet) -> the cosine, or None when the required path or words are missing
_PAIR_SIMS = _Bounded(1 << 17)


@lru_cache(maxsize=1 << 16)
def _stored_time(raw: str | None) -> str | None:
    """A transcript's time as stored (``iso``), or None."""
    if not raw:
        return None
    try:
        return iso(parse_time(raw))
    except ValueError:
        return None


# --- predict ---------------------------------------------------------------------------------------


def _recent_heads(store, projects: list[str], sessions: int = 200) -> list[str]:
    """The command heads run in the last ``sessions`` sessions of these projects."""
    if not projects:
        return []
    return _heads(commands for (commands,) in episode_store.latest_session_commands(store, projects, sessions))


def _heads(commands_json) -> list[str]:
    """The command heads of sessions' ``commands`` fields (JSON texts), sorted, each once."""
    heads: dict[str, None] = {}
    for commands in commands_json:
        heads.update(dict.fromkeys(loads(commands, {}) or {}))
    return sorted(heads)


class _RecentHeads:
    """:func:`_recent_heads` for many project lists, the sessions read once: each project's
    sessions (id, created) are read in one pass, the latest ``sessions`` of a list chosen in memory
    and only their commands read. Where the cut falls between sessions created at the same moment
    (which of them the store's order keeps decides), the store is asked as before."""

    def __init__(self, store, sessions: int = 200):
        self.store = store
        self.sessions = sessions
        self._by_project: dict[str, list[tuple[str, int]]] | None = None

    def __call__(self, projects: list[str]) -> list[str]:
        if not projects:
            return []
        if self._by_project is None:
            self._by_project = {}
            for eid, project, created in episode_store.session_times(self.store):
                self._by_project.setdefault(project, []).append((created, eid))
        rows = [row for project in dict.fromkeys(projects) for row in self._by_project.get(project, ())]
        if len(rows) > self.sessions:
            rows.sort(reverse=True)  # the latest first
            if rows[self.sessions - 1][0] == rows[self.sessions][0]:
                return _recent_heads(self.store, projects, self.sessions)
            rows = rows[:self.sessions]
        return _heads(episode_store.session_commands(self.store, [eid for _, eid in rows]).values())


def predict(store, now: datetime) -> dict:
    """Every strong enough lesson without an open prediction makes one (P1)."""
    config = store.config
    now_iso = iso(now)
    out = {"made": []}
    with store.write():
        has_open = lesson_store.with_open_prediction(store)
        chosen = [lid for lid, state, strength, vetoed, kind in lesson_store.all_groups(store)
                  if lifecycle.may_predict(lifecycle.Lesson(state, strength, vetoed, kind), lid in has_open, config)]
        found = lesson_store.details_of(store, chosen)
        heads_of: dict[tuple, list[str]] = {}  # projects -> their recent heads, read once per predict
        recent_heads = _RecentHeads(store)
        for lesson_id in chosen:
            fam, details_json = found[lesson_id]
            details = loads(details_json, {})
            programs = ()
            if details.get("kind") == "correction":
                projects = tuple(details.get("projects") or [])
                programs = heads_of.get(projects)
                if programs is None:
                    programs = heads_of[projects] = recent_heads(list(projects))
            expected = probes(details, details.get("signature") or "", programs)
            text = prediction_text(details, fam, lesson_id)
            pid = lesson_store.insert_prediction(store, lesson_id, now_iso, text, dumps(expected), fam)
            record_event(store, now_iso, "predicted", lesson_id, pid, text=text)
            out["made"].append(pid)
    return out

