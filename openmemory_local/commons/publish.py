"""Publishing lessons to the commons: per-project opt-in, the redaction gate, an publishing.

Nothing is ever published by default. A project family is opted in with :func:`enable`
(``openmemory publish enable [PROJECT]``) and out with :func:`disable`. Then each
``openmemory run`` (the ``publish`` step, after sleep) and ``openmemory publish``:

1. **Plan** (:func:`plan`, reads only). Every active lesson of an opted-in family, not
   vetoed, never revoked from the commons, with strength at or above
   ``Config.publish_min_strength`` (1.5 by default: one step above a new lesson, so a
   failure met in a third session, or a lesson whose prediction came true once; a single
   correction, 1.0, stays local until it is confirmed) gets its commons form
   (:mod:`openmemory_local.commons.form`): a claim (situation, failure, fix; corrections have
   none: they stay personal), each part redacted, rendered to its one text. The claim must pass
   the claim rules (:func:`openmemory_protocol.claims.claim_violation`, as every receiver
   checks it) and the redaction gate (:func:`openmemory_local.text.redact.gate`, with this machine's
   :class:`Identity`); one that fails either is *held back*: never sent, listed in the morning
   report with the reason.
   A lesson whose text is what it last published needs nothing; one whose text changed
   publishes a new record with ``derived_from`` naming the previous one; a text another of
   this engine's lessons already publishes is not sent twice.
2. **Queue** (:func:`queue`, one transaction). Each record to send becomes a
   ``publish_queue`` row with every field fixed: text, kind, strength, ``created`` (the run's
   time, Unix seconds), ``provenance`` (below) and ``derived_from``.
3. **Send** (:func:`send`). Each pending row is posted to the node
   (``POST /v1/lessons``, ``created`` included), and on the node's answer, in one
   transaction, moved to ``published``. Ed25519 signatures are deterministic, so the same
   fields give the same record bytes and id: a retry after a kill (of the engine after the
   node stored the record, or of the node before it answered) is answered 200 (already
   known), never a second record. No node running (:class:`NodeUnavailable`): nothing fails,
   the rows wait for the next run, and the report says so. A node that refuses a record as
   invalid (422) holds it back, with the node's reason; any other error leaves it pending.

**Provenance** (PROTOCOL.md, "Provenance"): ``SHA-256("openmemory/provenance/v1" 0x00 salt
h_1 ... h_n)`` over the distinct hashes of the lesson's episodes, ascending, with
``h = SHA-256("openmemory/episode/v1" 0x00 kind 0x00 key)`` (the episode's kind and its
stable key: session id, tool-call id or message id) and a random 32-byte salt per record,
kept in the store with the episode list. :func:`open_provenance` opens it for the owner.

**Undoing.** :func:`revoke` revokes every record of a lesson through the node (a revoked
lesson is never published again); :func:`disable` stops publishing a family and, with
``revoke=True``, revokes what it published (reason code ``withdrawn``).

The web UI and the CLI call these plain functions; the CLI is a thin layer over them.
``$OPENMEMORY_FAULT=publish-kill-after:N`` makes the process kill itself (SIGKILL) after
the N-th record the node accepted and before the engine recorded it: the crash the kill
tests need, at its worst moment.
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re
import signal
import socket
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from openmemory_protocol.claims import claim_violation

from openmemory_local.core.clock import epoch, iso
from openmemory_local.commons.form import KINDS as COMMONS_KINDS, commons_text
from openmemory_local.core.jsonio import dumps, loads
from openmemory_local.commons.node_link import NodeError, NodeLink, NodeUnavailable, open_link
from openmemory_local.text.normalize import family, family_matches
from openmemory_protocol.observation import NotAnObservation, check_observation
from openmemory_local.storage import published as publishing
from openmemory_local.text.redact import GENERIC_BRANCHES, GENERIC_DIRS, GENERIC_USERS, Identity, gate, project_names, users_in_path

__all__ = [
    "Candidate",
    "PublishError",
    "resolve_families",
    "enable",
    "disable",
    "opted_in",
    "status",
    "machine_identity",
    "plan",
    "queue",
    "send",
    "publish",
    "dry_run",
    "episode_hash",
    "commitment",
    "open_provenance",
    "revoke",
    "published_records",
    "commons_status",
    "commons_views",
    "commons_line",
    "enable_messages",
    "disable_messages",
    "revoke_messages",
    "publish_messages",
    "REVOKE_CODES",
    "ENV_FAULT",
]

ENV_FAULT = "OPENMEMORY_FAULT"
#: The reason codes of a revocation (PROTOCOL.md, "Revocation").
REVOKE_CODES = ("incorrect", "harmful", "instruction", "private", "spam", "withdrawn", "other")
_EPISODE_DOMAIN = b"openmemory/episode/v1\x00"
_PROVENANCE_DOMAIN = b"openmemory/provenance/v1\x00"


class PublishError(ValueError):
    """A publishing request that cannot be done (no such lesson, nothing to revoke, ...)."""


# --- opt-in -----------------------------------------------------------------------------------


def _git_branch(path: Path) -> str | None:
    """The branch checked out at ``path`` (read from ``.git/HEAD``; no git process)."""
    git = _git_dir(path)
    if git is None:
        return None
    try:
        head = (git / "HEAD").read_text().strip()
    except OSError:
        return None
    return head[len("ref: refs/heads/"):] if head.startswith("ref: refs/heads/") else None


def _git_dir(path: Path) -> Path | None:
    for folder in (path, *path.parents):
        dot = folder / ".git"
        try:
            if dot.is_dir():
                return dot
            if dot.is_file():
                text = dot.read_text().strip()
                if text.startswith("gitdir:"):
                    target = Path(text[len("gitdir:"):].strip())
                    return target if target.is_absolute() else (folder / target).resolve()
        except OSError:
            return None
    return None


def _known_families(store) -> dict[str, set[str]]:
    """Every working directory with a session, or a lesson, in the store -> its families."""
    out: dict[str, set[str]] = {}
    for cwd, branch in publishing.session_branches(store):
        out.setdefault(cwd, set()).add(family(cwd, branch))
    return out


def resolve_families(store, project: str | os.PathLike) -> list[str]:
    """The project families a working directory (or a family, ``.../app-worktrees/*``) names.

    A directory the store has sessions of gives their families; one inside a known family,
    or a family's worktrees folder itself, gives that family; any other directory gives its
    own family (a git worktree named after its branch: ``.../<branch>`` -> ``.../*``).
    """
    raw = os.fspath(project)
    if raw.endswith("/*"):
        return [os.path.abspath(raw[:-2]) + "/*"]
    path = os.path.abspath(os.path.expanduser(raw))
    known = _known_families(store)
    if path in known:
        return sorted(known[path])
    families = {f for fams in known.values() for f in fams}
    families |= publishing.lesson_families(store, with_null=True)
    inside = sorted(f for f in families if family_matches(f, path) or (f.endswith("/*") and f[:-2] == path))
    if inside:
        return inside
    return [family(path, _git_branch(Path(path))) or path]


def enable(store, project: str | os.PathLike, now: datetime) -> dict:
    """Opt a project in to publishing; ``{"families", "changed"}``."""
    families = resolve_families(store, project)
    changed = []
    now_iso = iso(now)
    with store.write():
        for fam in families:
            if publishing.project_enabled(store, fam):
                continue
            publishing.enable_project(
                store, fam, os.path.abspath(os.fspath(project)) if not os.fspath(project).endswith("/*") else fam,
                now_iso)
            changed.append(fam)
    lessons = {fam: publishing.active_lesson_count(store, fam) for fam in families}
    known = {f for fams in _known_families(store).values() for f in fams}
    known |= publishing.lesson_families(store)
    # not known yet (no session ingested): the opt-in will cover the family its sessions form (_folder_opt_ins)
    return {"families": families, "changed": changed, "lessons": lessons,
            "unknown": [f for f in families if f not in known]}


def disable(store, project: str | os.PathLike, now: datetime, *, revoke_published: bool = False,
            reason: str = "", link: NodeLink | None = None) -> dict:
    """Opt a project out: nothing more is published for it. Records not sent yet are dropped
    (one whose send was tried waits as ``withdrawn`` until the node says whether it landed).
    ``revoke_published``: also revoke, through the node, what it published (``withdrawn``)."""
    families = resolve_families(store, project)
    now_iso = iso(now)
    changed, dropped, withdrawn = [], 0, 0
    through = {f: row for f, row in _covered(store).items() if f in families}  # opted in through a folder
    with store.write():
        for fam in families:
            n = publishing.disable_project(store, fam, now_iso)
            if fam in through:
                n += publishing.disable_project(store, through[fam][0], now_iso)
            if n:
                changed.append(fam)
            dropped += publishing.drop_family_unsent(store, fam)
            withdrawn += publishing.withdraw_family_pending(store, fam)
    published = [dict(record_id=r, lesson_id=lid) for r, lid in publishing.published_of_families(store, families)]
    out = {"families": families, "changed": changed, "dropped": dropped, "withdrawn": withdrawn,
           "published": published, "revoked": []}
    if revoke_published and (published or withdrawn):
        link = link or open_link(store.config)
        _resolve_withdrawn(store, link, now)
        lessons = sorted({lid for _, lid in publishing.published_of_families(store, families)})
        for lesson_id in lessons:
            out["revoked"].extend(revoke(store, lesson_id, now, code="withdrawn", reason=reason, link=link)["revoked"])
    return out


def _folder_opt_ins(store) -> dict[str, list[str]]:
    """Opt-ins made before their project's sessions were known, now resolved: an opted-in row whose
    own family the store has no session nor lesson of, and whose folder (``path``, as the person
    named it: ``openmemory publish enable ~/src/app`` before the first ingest) now belongs to
    families the store knows (its worktrees' family, ``~/src/app-worktrees/*``) -> those families."""
    known = {f for fams in _known_families(store).values() for f in fams}
    known |= publishing.lesson_families(store)
    out: dict[str, list[str]] = {}
    for fam, path in publishing.enabled_folders(store):
        if fam in known or path.endswith("/*"):
            continue
        resolved = [f for f in resolve_families(store, path) if f != fam and f in known]
        if resolved:
            out[fam] = resolved
    return out


def _covered(store) -> dict[str, tuple[str, str, str]]:
    """Families opted in through a folder opt-in (:func:`_folder_opt_ins`) -> (the row's family, its
    folder, when it was opted in); not those opted out by themselves since that opt-in."""
    projects = {fam: (enabled, path, enabled_at, disabled_at)
                for fam, enabled, path, enabled_at, disabled_at in publishing.project_rows(store)}
    rows = {fam: (enabled, disabled_at) for fam, (enabled, _path, _since, disabled_at) in projects.items()}
    out: dict[str, tuple[str, str, str]] = {}
    for fam, resolved in _folder_opt_ins(store).items():
        _enabled, path, since, _disabled = projects[fam]
        for f in resolved:
            own = rows.get(f)
            if own is None or (not own[0] and (own[1] or "") < (since or "")):
                out.setdefault(f, (fam, path, since))
    return out


def opted_in(store) -> list[str]:
    """The families opted in: by their own row, or through a folder opted in before the project's
    sessions were known, once they are (:func:`_folder_opt_ins`: the opt-in covers the family the
    folder's worktrees form)."""
    own = publishing.enabled_families(store)
    return sorted(own | set(_covered(store)))


def status(store, *, known: bool = False) -> dict:
    """Opted-in (and opted-out) families with what each has eligible, published, waiting, held;
    ``known``: also every other family the store has sessions or lessons of (never opted in)."""
    threshold = store.config.publish_min_strength
    families = []
    rows = publishing.project_rows(store)
    covered = _covered(store)  # a folder opted in before its sessions were known: listed as its families
    folders = {row[0] for row in covered.values()}
    rows = sorted([r for r in rows if r[0] not in folders and r[0] not in covered]
                  + [(f, 1, path, since, None) for f, (_, path, since) in covered.items()])
    if known:
        listed = {r[0] for r in rows}
        others = {f for fams in _known_families(store).values() for f in fams}
        others |= publishing.lesson_families(store)
        rows = sorted(rows + [(f, 0, None, None, None) for f in others - listed if f])
    for fam, enabled, path, enabled_at, disabled_at in rows:
        families.append({
            "family": fam, "enabled": bool(enabled), "path": path, "enabled_at": enabled_at,
            "disabled_at": disabled_at, **publishing.family_counts(store, fam, threshold),
        })
    return {"threshold": threshold, "families": families, "node_home": str(store.config.node_home or "")}


# --- what identifies this machine (the I/O around redact) -------------------------------------


def _machine(config) -> dict:
    users, hosts, homes, emails, watch = set(), set(), set(), set(), set()
    try:
        users.add(getpass.getuser())
    except (KeyError, OSError):  # no passwd entry (a container)
        pass
    for var in ("USER", "LOGNAME", "USERNAME"):
        if os.environ.get(var):
            users.add(os.environ[var])
    home = Path(os.environ.get("HOME") or Path.home())
    homes.add(str(home))
    users.add(home.name)
    try:
        host = socket.gethostname()
    except OSError:
        host = ""
    for name in (host, os.environ.get("HOSTNAME") or ""):
        if name:
            hosts.update({name, name.split(".", 1)[0]})
    git = _read_git_config(home / ".gitconfig")
    emails.update(git["emails"])
    watch.update(git["names"])
    return {"users": users, "hosts": hosts, "homes": homes, "emails": emails, "watch": watch}


def _read_git_config(path: Path) -> dict:
    """Remote URLs, user e-mails and names of a git config file (missing: nothing)."""
    out: dict[str, set[str]] = {"remotes": set(), "emails": set(), "names": set()}
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    section = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.lower()
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key, value = key.strip().lower(), value.strip().strip('"')
        if section.startswith("[remote") and key in ("url", "pushurl"):
            out["remotes"].add(value)
        elif section.startswith("[user") and key == "email":
            out["emails"].add(value)
        elif section.startswith("[user") and key == "name" and len(value) >= 3:
            out["names"].add(value)
    return out


def _project_git(projects) -> dict:
    out: dict[str, set[str]] = {"remotes": set(), "emails": set(), "names": set()}
    seen: set[Path] = set()
    for project in projects:
        git = _git_dir(Path(project)) if project and Path(project).exists() else None
        if git is None:
            continue
        common = git
        try:
            common = (git / (git / "commondir").read_text().strip()).resolve()
        except OSError:
            pass
        if common in seen:
            continue
        seen.add(common)
        for key, values in _read_git_config(common / "config").items():
            out[key] |= values
    return out


class _Context:
    """What the plan needs about this machine and store, gathered once per plan."""

    def __init__(self, store):
        self.store = store
        self.machine = _machine(store.config)
        self.known = _known_families(store)
        self.branches_by_cwd: dict[str, set[str]] = {}
        for cwd, branch in publishing.session_branches(store, with_branch_only=True):
            self.branches_by_cwd.setdefault(cwd, set()).add(branch)
        self.path_users = {u for cwd in self.known if (u := users_in_path(cwd))}
        self._cache: dict[str, Identity] = {}

    def identity(self, fam: str, details: dict) -> Identity:
        key = fam + "\x00" + dumps([details.get("projects"), details.get("branches")])
        if key not in self._cache:
            self._cache[key] = machine_identity(self, fam, details)
        return self._cache[key]


def machine_identity(context: "_Context", fam: str, details: dict) -> Identity:
    """The :class:`Identity` for one lesson of family ``fam``: this machine's user and host
    names and home, the family's working directories, names and branches, git remotes; and
    for the gate only, every other project and branch of the store."""
    m = context.machine
    projects = {p for p in details.get("projects") or [] if p}
    projects |= {cwd for cwd, fams in context.known.items() if fam in fams or family_matches(fam, cwd)}
    branches = {b for b in details.get("branches") or [] if b}
    for cwd in projects:
        branches |= context.branches_by_cwd.get(cwd, set())
        if fam.endswith("/*") and family_matches(fam, cwd):
            branches.add(cwd[len(fam) - 1:].split("/", 1)[0])
    users = set(m["users"]) | context.path_users
    git = _project_git(sorted(projects))
    names = set(project_names(sorted(projects), fam, users))
    watch = set(m["watch"]) | git["names"]
    for remote in git["remotes"]:
        owner_repo = re.sub(r"\.git$", "", remote.rstrip("/")).replace(":", "/").split("/")[-2:]
        if len(owner_repo) == 2:
            watch.add(owner_repo[0])
            names.add(owner_repo[1])
    other = [cwd for cwd in context.known if cwd not in projects]
    watch |= set(project_names(other, None, users))
    watch |= {b for bs in context.branches_by_cwd.values() for b in bs}
    watch = {w for w in watch - names - branches
             if w.lower() not in GENERIC_BRANCHES | GENERIC_DIRS and w not in GENERIC_USERS}
    homes = set(m["homes"])
    for cwd in projects:
        found = re.match(r"^/(?:home|Users)/[^/]+", cwd)
        if found:
            homes.add(found.group(0))
    return Identity(
        users=tuple(sorted(users)), hosts=tuple(sorted(m["hosts"])), homes=tuple(sorted(homes)),
        family=fam, projects=tuple(sorted(projects)), names=tuple(sorted(names)),
        branches=tuple(sorted(branches)), remotes=tuple(sorted(git["remotes"])),
        emails=tuple(sorted(m["emails"] | git["emails"])), watch=tuple(sorted(watch)))


# --- the plan ----------------------------------------------------------------------------------


@dataclass
class Candidate:
    """What the plan says about one eligible lesson.

    ``action``: ``new`` (a record to queue), ``pending`` (queued already: sent as it is),
    ``unchanged`` (its text is what it published), ``same`` (another lesson of this engine
    publishes the same text), ``held`` (``reasons``), ``none`` (no commons form: ``reasons``).
    """

    lesson_id: int
    family: str
    kind: str
    strength: float
    action: str
    text: str | None = None
    reasons: list[str] = field(default_factory=list)
    derived_from: list[str] = field(default_factory=list)
    local_text: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _latest_published(store) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for row in publishing.published_rows(store):
        record_id, lesson_id, text, kind, revoked = (row["record_id"], row["lesson_id"], row["text"], row["kind"],
                                                     row["revoked_at"])
        entry = out.setdefault(lesson_id, {"revoked": False})
        entry["revoked"] = entry["revoked"] or revoked is not None
        entry.update(record_id=record_id, text=text, kind=kind)
    return out


def plan(store, now: datetime, context: _Context | None = None, *, families: list[str] | None = None
         ) -> list[Candidate]:
    """What publishing would do now, lesson by lesson (reads only; see the module docstring).

    ``families``: plan for these project families as if they were opted in (what opting one
    in would send: the page shows it before the person confirms); default, the opted-in ones."""
    families = opted_in(store) if families is None else sorted(set(families))
    if not families:
        return []
    context = context or _Context(store)
    rows = publishing.publishable_lessons(store, families, store.config.publish_min_strength)
    queued = publishing.queued_by_lesson(store)
    latest = _latest_published(store)
    taken = {(e["kind"], e["text"]): lid for lid, e in latest.items() if not e["revoked"]}
    taken.update({(r[3], r[2]): lid for lid, r in queued.items() if r[1] in ("pending", "withdrawn")})
    out: list[Candidate] = []
    for lesson_id, fam, kind, strength, details_json, local_text in rows:
        previous = latest.get(lesson_id)
        if previous and previous["revoked"]:
            continue  # revoked from the commons: never published again
        c = Candidate(lesson_id, fam, kind, round(float(strength), 3), "none", local_text=local_text)
        row = queued.get(lesson_id)
        if row is not None and row[1] in ("pending", "withdrawn"):
            c.action, c.text, c.strength, c.derived_from = "pending", row[2], row[4], loads(row[5], [])
            out.append(c)
            continue
        details = loads(details_json, {})
        form = commons_text(details, context.identity(fam, details))
        if form.text is None:
            c.reasons = [form.why or "no commons form"]
            out.append(c)
            continue
        c.text = form.text
        violation = claim_violation(form.claim) if form.claim is not None else None
        if violation is not None:  # (commons_text made it pass: a second look, as the node will)
            c.action, c.reasons = "held", [f"not a claim: {violation}"]
            out.append(c)
            continue
        c.reasons = list(form.notes)
        findings = gate(form.text, context.identity(fam, details))
        if findings:
            c.action, c.reasons = "held", [str(f) for f in findings]
        elif previous and previous["text"] == form.text and previous["kind"] == kind:
            c.action = "unchanged"
        elif (kind, form.text) in taken and taken[(kind, form.text)] != lesson_id:
            c.action, c.reasons = "same", [f"lesson {taken[(kind, form.text)]} publishes the same text"]
        else:
            c.action = "new"
            c.derived_from = [previous["record_id"]] if previous else []
            taken[(kind, form.text)] = lesson_id
        out.append(c)
    return out


# --- provenance --------------------------------------------------------------------------------


def episode_hash(kind: str, key: str) -> bytes:
    """The hash of one source episode: ``SHA-256("openmemory/episode/v1" 0x00 kind 0x00 key)``."""
    return hashlib.sha256(_EPISODE_DOMAIN + kind.encode() + b"\x00" + key.encode()).digest()


def commitment(salt: bytes, hashes) -> bytes:
    """PROTOCOL.md's provenance: ``SHA-256("openmemory/provenance/v1" 0x00 salt h_1 ... h_n)``
    over the distinct hashes, ascending bytewise."""
    return hashlib.sha256(_PROVENANCE_DOMAIN + salt + b"".join(sorted(set(hashes)))).digest()


def _episodes_of(store, lesson_id: int) -> list[dict]:
    return [{"id": eid, "kind": kind, "key": key, "hash": episode_hash(kind, key).hex()}
            for eid, kind, key in publishing.lesson_member_keys(store, lesson_id)]


def open_provenance(store, target: str | int) -> list[dict]:
    """Open the provenance commitments of a lesson's records (``target``: a lesson id or a
    record id): for each, the salt, the episodes with their hashes and where they are in the
    archive, the commitment recomputed from them, and whether it matches the record's."""
    rows = _published_rows(store, target)
    out = []
    for row in rows:
        episodes = loads(row["episodes"], [])
        hashes = [bytes.fromhex(e["hash"]) for e in episodes]
        recomputed = commitment(bytes.fromhex(row["salt"]), hashes).hex()
        ids = [e["id"] for e in episodes]
        where = publishing.episode_sources(store, ids) if ids else {}
        for e in episodes:
            session, created, path, line = where.get(e["id"], (None, None, None, None))
            e.update(session_id=session, created=created, source=f"{path}:{line}" if path else None,
                     present=e["id"] in where and episode_hash(e["kind"], e["key"]).hex() == e["hash"])
        out.append({"record_id": row["record_id"], "lesson_id": row["lesson_id"], "provenance": row["provenance"],
                    "salt": row["salt"], "episodes": episodes, "recomputed": recomputed,
                    "matches": recomputed == row["provenance"]})
    return out


# --- queue and send ------------------------------------------------------------------------------


def queue(store, now: datetime, candidates: list[Candidate]) -> dict:
    """Write the plan: new records become pending rows (every field fixed), held lessons are
    recorded (an event when the hold is new or its reasons changed). One transaction."""
    from openmemory_local.storage.store import record_event

    now_iso = iso(now)
    created = int(epoch(now))
    out = {"queued": [], "held": [], "released": [], "withdrawn": []}
    by_lesson = {c.lesson_id: c for c in candidates}
    with store.write():
        # A lesson vetoed (or archived) while its record waited: it does not leave. A send
        # already tried may have landed: the row waits as withdrawn for the node's answer.
        for row_id, lesson_id, attempts in publishing.pending_of_gone_lessons(store):
            if attempts:
                publishing.set_queue_withdrawn(store, row_id)
            else:
                publishing.delete_queue_row(store, row_id)
            out["withdrawn"].append(lesson_id)
        held = publishing.held_rows(store)
        for lesson_id in held:
            c = by_lesson.get(lesson_id)
            if c is None or c.action != "held":
                publishing.release_held(store, lesson_id)
                out["released"].append(lesson_id)
        for c in candidates:
            if c.action == "held":
                before = held.get(c.lesson_id)
                if before is None or before[0] != c.text or loads(before[1], []) != c.reasons:
                    publishing.hold(store, c.lesson_id, c.family, c.text or "", c.kind, c.strength, c.reasons, now_iso)
                    record_event(store, now_iso, "held", c.lesson_id, reasons=c.reasons)
                    out["held"].append(c.lesson_id)
            elif c.action == "new":
                salt = os.urandom(32)
                episodes = _episodes_of(store, c.lesson_id)
                provenance = commitment(salt, [bytes.fromhex(e["hash"]) for e in episodes]).hex()
                publishing.enqueue(store, c.lesson_id, c.family, c.text, c.kind, c.strength, created, provenance,
                               salt.hex(), episodes, sorted(c.derived_from), now_iso)
                out["queued"].append(c.lesson_id)
    return out


def _fault_after() -> int | None:
    raw = os.environ.get(ENV_FAULT, "")
    if raw.startswith("publish-kill-after:"):
        try:
            return int(raw.split(":", 1)[1])
        except ValueError:
            return None
    return None


def _record_sent(store, row: dict, view: dict, author: str | None, now_iso: str) -> None:
    from openmemory_local.storage.store import record_event

    record_id = view["id"]
    with store.write():
        publishing.record_published(store, row, record_id, view.get("author") or author, now_iso,
                                loads(row["derived_from"], []))
        record_event(store, now_iso, "published", row["lesson_id"], record=record_id, text=row["text"],
                     duplicate=bool(view.get("duplicate")), derived_from=loads(row["derived_from"], []))


def _rows(store, state: str) -> list[dict]:
    return publishing.queue_rows(store, state)


def _hold_personal_kinds(store, now_iso: str) -> list[dict]:
    """Pending rows of a kind that has no commons form (a correction, a rejected call: a person's
    preference stays personal) are held, never sent, whatever queued them: an engine before
    claims queued corrections, and its queue survives an upgrade. Checked at the last step
    before a record leaves, so no path around :func:`plan` can send one."""
    from openmemory_local.storage.store import record_event

    held = []
    for row in _rows(store, "pending"):
        if row["kind"] in COMMONS_KINDS:
            continue
        reason = f"a {row['kind']} has no commons form: it stays personal"
        with store.write():
            publishing.hold_queued(store, row["id"], reason)
            record_event(store, now_iso, "held", row["lesson_id"], reasons=[reason])
        held.append({"lesson": row["lesson_id"], "reason": reason})
    return held


def _resolve_withdrawn(store, link: NodeLink, now: datetime) -> int:
    """Rows whose project was opted out after their send was tried: did the record land? If
    the node has it (same text and time, by its own key), it is published; else dropped."""
    rows = _rows(store, "withdrawn")
    if not rows:
        return 0
    author = link.node().get("public_key")
    wanted = {(r["text"], r["created"]): r for r in rows}
    oldest = min(r["created"] or 0 for r in rows)
    before, found = None, 0
    while wanted:
        page = link.get("/v1/records", type="lesson", author=author, limit=1000, before=before)
        for rec in page.get("records") or []:
            key = ((rec.get("record") or {}).get("text"), rec.get("created"))
            if key in wanted:
                _record_sent(store, wanted.pop(key), rec, author, iso(now))
                found += 1
        before = page.get("next_before")
        records = page.get("records") or []
        if not records or len(records) < 1000 or min(r.get("created") or 0 for r in records) < oldest:
            break
    with store.write():
        for row in wanted.values():
            publishing.delete_queue_row(store, row["id"])
    return found


def send(store, now: datetime, *, link: NodeLink | None = None,
         on_sent: Callable[[dict, dict], None] | None = None) -> dict:
    """Send the pending rows to the node, oldest first (see the module docstring).

    ``{"sent": [{lesson, record, duplicate}], "waiting": n, "refused": [...], "node": ...}``;
    ``on_sent(row, answer)`` is called after each record is recorded (tests use it).
    """
    from openmemory_local.storage.store import record_event

    out: dict = {"sent": [], "refused": [], "waiting": 0, "node": None, "error": None}
    out["refused"] += _hold_personal_kinds(store, iso(now))
    rows = _rows(store, "pending")
    if not rows and not _rows(store, "withdrawn"):
        _note_waiting(store, iso(now), out)
        return out
    now_iso = iso(now)
    fault = _fault_after()
    try:
        link = link or open_link(store.config)
        node = link.node()
        out["node"] = {"address": link.address, "peer_id": node.get("peer_id")}
        author = node.get("public_key")
        _resolve_withdrawn(store, link, now)
        for row in rows:
            with store.write():
                publishing.note_attempt(store, row["id"], now_iso)
            body = {"text": row["text"], "kind": row["kind"], "strength": row["strength"],
                    "provenance": row["provenance"], "derived_from": loads(row["derived_from"], []),
                    "created": row["created"]}
            try:
                view = link.post("/v1/lessons", body)
            except NodeError as exc:
                if exc.status == 422 and exc.code != "clock-skew":
                    reason = f"the node refused it ({exc.code}: {exc.message})"
                    with store.write():
                        publishing.hold_queued(store, row["id"], reason)
                        record_event(store, now_iso, "held", row["lesson_id"], reasons=[reason])
                    out["refused"].append({"lesson": row["lesson_id"], "reason": reason})
                    continue
                raise
            if fault is not None and len(out["sent"]) + 1 >= fault:
                os.kill(os.getpid(), signal.SIGKILL)
            _record_sent(store, row, view, author, now_iso)
            out["sent"].append({"lesson": row["lesson_id"], "record": view["id"],
                                "duplicate": bool(view.get("duplicate"))})
            if on_sent is not None:
                on_sent(row, view)
        _fill_dedup_keys(store, link)
    except (NodeUnavailable, NodeError) as exc:
        out["error"] = str(exc)
        out["unavailable"] = isinstance(exc, NodeUnavailable)
        with store.write():
            publishing.note_waiting_error(store, str(exc)[:500])
    out["waiting"] = publishing.waiting_count(store)
    _note_waiting(store, now_iso, out)
    return out


def _note_waiting(store, now_iso: str, out: dict) -> None:
    """An event for the morning report when the number of records waiting changes."""
    from openmemory_local.storage.store import record_event

    before = int(store.get_meta("publish_waiting") or 0)
    if out["waiting"] == before:
        return
    with store.write():
        store.set_meta("publish_waiting", str(out["waiting"]))
        if out["waiting"]:
            record_event(store, now_iso, "publish_waiting", None, count=out["waiting"], why=out.get("error") or "")


def _fill_dedup_keys(store, link: NodeLink) -> None:
    for record_id in publishing.records_without_dedup_key(store):
        try:
            view = link.get(f"/v1/commons/{record_id}")
        except NodeError:
            continue
        key = ((view.get("commons") or {}).get("group") or {}).get("dedup_key")
        if key:
            with store.write():
                publishing.set_dedup_key(store, record_id, key)


def publish(store, now: datetime, *, link: NodeLink | None = None, on_sent=None) -> dict:
    """Plan, queue and send (the ``publish`` step of ``openmemory run``; ``openmemory publish``).

    Never raises for a missing or failing node: the result says what waits and why.
    """
    families = opted_in(store)
    result: dict = {"opted_in": families, "queued": [], "held": [], "sent": [], "refused": [], "waiting": 0,
                    "node": None, "error": None}
    if families:
        candidates = plan(store, now)
        queued = queue(store, now, candidates)
        result.update(queued=queued["queued"], held=[c.to_dict() for c in candidates if c.action == "held"],
                      new_holds=queued["held"])
    sent = send(store, now, link=link, on_sent=on_sent)
    result.update(sent=sent["sent"], refused=sent["refused"], waiting=sent["waiting"], node=sent["node"],
                  error=sent["error"], unavailable=sent.get("unavailable", False))
    return result


def dry_run(store, now: datetime, *, families: list[str] | None = None) -> dict:
    """Exactly the records that would leave now (text, kind, strength, derived_from), and
    what is held back and why; sends and writes nothing. ``families``: as :func:`plan` (what
    opting these in would send), default the opted-in ones."""
    candidates = plan(store, now, families=families)
    leave = [c for c in candidates if c.action in ("new", "pending")]
    return {
        "opted_in": opted_in(store),
        "families": opted_in(store) if families is None else sorted(set(families)),
        "threshold": store.config.publish_min_strength,
        "records": [{"lesson": c.lesson_id, "family": c.family, "state": "queued" if c.action == "pending" else "new",
                     "text": c.text, "kind": c.kind, "strength": c.strength, "derived_from": c.derived_from}
                    for c in leave],
        "held": [{"lesson": c.lesson_id, "family": c.family, "reasons": c.reasons, "local_text": c.local_text}
                 for c in candidates if c.action == "held"],
        "unchanged": [c.lesson_id for c in candidates if c.action == "unchanged"],
        "skipped": [{"lesson": c.lesson_id, "reasons": c.reasons} for c in candidates if c.action in ("none", "same")],
    }


# --- revoking and viewing ----------------------------------------------------------------------

def _published_rows(store, target: str | int, *, active_only: bool = False) -> list[dict]:
    where = "lesson_id = ?" if isinstance(target, int) or str(target).isdigit() else "record_id = ?"
    if where.startswith("lesson"):
        rows = publishing.published_rows(store, lesson_id=int(target), active_only=active_only)
    else:
        rows = publishing.published_rows(store, record_id=str(target).lower(), active_only=active_only)
    if not rows:
        raise PublishError(f"lesson {target} was never published" if where.startswith("lesson")
                           else f"no published record {target}")
    return rows


def published_records(store, lesson_ids=None) -> dict[int, list[dict]]:
    """The records each lesson became on the commons (oldest first), by lesson id."""
    out: dict[int, list[dict]] = {}
    for entry in publishing.published_rows(store):
        if lesson_ids is None or entry["lesson_id"] in lesson_ids:
            entry.pop("salt")
            entry.pop("episodes")
            entry["derived_from"] = loads(entry["derived_from"], [])
            out.setdefault(entry["lesson_id"], []).append(entry)
    return out


def revoke(store, lesson_id: int, now: datetime, *, code: str = "withdrawn", reason: str = "",
           link: NodeLink | None = None) -> dict:
    """Revoke every record of a lesson through the node (``code``: :data:`REVOKE_CODES`).

    Raises :class:`PublishError` (never published, bad code), :class:`NodeUnavailable`.
    """
    from openmemory_local.storage.store import record_event

    if code not in REVOKE_CODES:
        raise PublishError(f"unknown reason code {code!r} (one of: {', '.join(REVOKE_CODES)})")
    if reason:
        try:
            check_observation(reason)
        except NotAnObservation as exc:
            raise PublishError(f"the reason must be an observation: {exc}") from None
    lesson_id = int(lesson_id)
    tried = publishing.tried_sends_of_lesson(store, lesson_id)
    if tried:  # a send of this lesson was tried and not recorded: ask the node first
        link = link or open_link(store.config)
        with store.write():
            publishing.withdraw_pending_of_lesson(store, lesson_id)
        _resolve_withdrawn(store, link, now)
    rows = _published_rows(store, lesson_id)
    targets = [r for r in rows if r["revoked_at"] is None]
    out = {"lesson": lesson_id, "revoked": [], "already": [r["record_id"] for r in rows if r["revoked_at"]]}
    if not targets:
        return out
    link = link or open_link(store.config)
    now_iso = iso(now)
    for row in targets:
        answer = link.post("/v1/revoke", {"id": row["record_id"], "reason_code": code, "reason": reason})
        with store.write():
            publishing.set_revoked(store, row["record_id"], now_iso, answer.get("id"), code, reason)
            record_event(store, now_iso, "published_revoked", lesson_id, record=row["record_id"], code=code,
                         revocation=answer.get("id"), effect=(answer.get("effect") or {}).get("status"))
        out["revoked"].append({"record": row["record_id"], "revocation": answer.get("id"),
                               "status": answer.get("target_status")})
    with store.write():  # never published again: what waits for it does not leave
        publishing.drop_untried_of_lesson(store, lesson_id)
    return out


def commons_status(link: NodeLink, record_id: str, *, max_members: int = 50) -> dict:
    """A published record as the node sees it: its status, and its group (the records of its
    dedup key: how many, by how many authors)."""
    view = link.get(f"/v1/commons/{record_id}")
    commons = view.get("commons") or {}
    group = commons.get("group") or {}
    members = list(group.get("members") or [])
    authors = set()
    for member in members[:max_members]:
        if member == record_id:
            authors.add(view.get("author"))
            continue
        try:
            authors.add(link.record(member).get("author"))
        except NodeError:
            continue
    authors.discard(None)
    return {"record": record_id, "status": view.get("status") or commons.get("status"),
            "group_status": group.get("status"), "dedup_key": group.get("dedup_key"), "head": group.get("head"),
            "members": len(members), "authors": len(authors), "tally": commons.get("tally")}


def commons_views(store, lesson_ids=None) -> dict:
    """Each published lesson's records, with their status as the node reports it
    (:func:`commons_status`): ``{"lessons": {lesson id: {"records": [...]}}, "unavailable":
    why the node could not be asked, or None}``. What ``openmemory lessons`` and the page show."""
    records = published_records(store, lesson_ids)
    out: dict = {"lessons": {}, "unavailable": None}
    link = None
    if any(rec["revoked_at"] is None for recs in records.values() for rec in recs):
        try:
            link = open_link(store.config)
            link.node()
        except NodeUnavailable as exc:
            out["unavailable"], link = str(exc), None
    for lesson_id, recs in records.items():
        shown = []
        for rec in recs:
            view = {k: rec[k] for k in ("record_id", "text", "created", "published_at", "superseded_by",
                                        "revoked_at", "revoke_code", "dedup_key")}
            view["family"] = rec["family"]
            view["node"] = None
            if link is not None:
                try:
                    view["node"] = commons_status(link, rec["record_id"])
                except NodeUnavailable as exc:
                    out["unavailable"], link = str(exc), None
                except NodeError as exc:
                    view["node"] = {"error": str(exc)}
            shown.append(view)
        out["lessons"][lesson_id] = {"records": shown}
    return out


def commons_line(rec: dict) -> str:
    """A published record's state in one line: the node's status and group, and what
    happened to it here (replaced, revoked)."""
    local = []
    if rec.get("superseded_by"):
        local.append(f"replaced by {rec['superseded_by'][:16]}…")
    if rec.get("revoked_at"):
        local.append(f"revoked {rec['revoked_at'][:10]} ({rec.get('revoke_code')})")
    node = rec.get("node")
    if node is None:
        state = "status unknown (node not running)" if not rec.get("revoked_at") else ""
    elif node.get("error"):
        state = f"node: {node['error']}"
    else:
        group = node.get("group_status")
        state = (f"{node['status']}; group of {node['members']} record(s) by {node['authors']} author(s)"
                 + (f", group {group}" if group not in (None, node["status"]) else ""))
    return "; ".join(p for p in [state, *local] if p)


# --- what the commands say (the CLI prints it, the page shows it) ----------------------------------


def enable_messages(result: dict, threshold: float) -> list[str]:
    """What :func:`enable` did, one sentence per family."""
    return [f"{fam}: {'opted in' if fam in result['changed'] else 'already opted in'}; {result['lessons'][fam]} "
            f"active lesson(s) so far"
            + ("; no session of it is ingested yet: once there are, the opt-in covers the project family they "
               "form (its git worktrees with it)" if fam in result.get("unknown", ()) else "")
            + f". Lessons at strength {threshold:g} or more are published by the next "
            "`openmemory run` (or `openmemory publish`); `openmemory publish --dry-run` shows exactly what would "
            "leave." for fam in result["families"]]


def disable_messages(result: dict, target: str) -> list[str]:
    """What :func:`disable` did: per family, then what was revoked or stays on the commons
    (``target``: how the person named the project, for the command to withdraw it)."""
    out = [f"{fam}: {'opted out' if fam in result['changed'] else 'was not opted in'}; nothing more is published "
           "from it" + (f" ({result['dropped']} queued record(s) dropped)" if result["dropped"] else "")
           for fam in result["families"]]
    if result["revoked"]:
        out.append(f"Revoked {len(result['revoked'])} record(s) (reason withdrawn).")
    elif result["published"]:
        lessons = sorted({p["lesson_id"] for p in result["published"]})
        out.append(f"{len(result['published'])} record(s) of lesson(s) {', '.join(map(str, lessons))} stay on the "
                   f"commons. To withdraw them: openmemory publish disable {target} --revoke (or openmemory "
                   "revoke LESSON).")
    return out


def publish_messages(result: dict, *, detail: bool = False) -> list[str]:
    """What :func:`publish` did, in one or two lines (none when no project is opted in);
    ``detail``: then each record sent and each lesson held back (``openmemory publish``)."""
    if not result or (not result.get("opted_in") and not result.get("sent") and not result.get("waiting")):
        return []
    sent = result.get("sent") or []
    parts = [f"{len(sent)} record(s) sent" + (f" to the node at {result['node']['address']}" if result.get("node")
                                              and sent else "")]
    if result.get("held"):
        parts.append(f"{len(result['held'])} lesson(s) held back by the redaction gate (see the report)")
    if result.get("refused"):
        parts.append(f"{len(result['refused'])} refused by the node")
    out = ["Published: " + ", ".join(parts)]
    if result.get("waiting"):
        out.append(f"  {result['waiting']} record(s) wait in the queue for the commons node: "
                   f"{result.get('error') or ''}".rstrip(": "))
    if detail:
        out += [f"  lesson {s['lesson']}: record {s['record']}" + (" (already on the node)" if s["duplicate"] else "")
                for s in result.get("sent") or []]
        out += [f"  lesson {h['lesson_id']} held back: " + "; ".join(h["reasons"]) for h in result.get("held") or []]
    return out


def revoke_messages(result: dict, code: str) -> list[str]:
    """What :func:`revoke` did, record by record."""
    out = [f"record {r['record']} revoked ({code}) by {r['revocation']}; now {r['status']}" for r in result["revoked"]]
    if not result["revoked"]:
        out.append(f"Lesson {result['lesson']}'s records were already revoked.")
    else:
        out.append(f"Lesson {result['lesson']} is not published again.")
    return out
