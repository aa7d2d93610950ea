"""The commons layer: lessons other agents published, received through this agent's node.

A received lesson is someone else's observation. It is kept apart from the agent's own
lessons (table ``commons_lessons``, never ``lessons``: never a surprise, never a member of an
own lesson, never published as the agent's own), rendered as its own part of the memory
folder below the personal layer (:mod:`openmemory_local.commons_render`), and tested by this
agent's own sessions, whose verdict goes back to the commons as an attestation.

The passes, each a function of (store, now) or (store, link, now), in the order
``openmemory run`` calls them:

``pull(store, link, now)``
    Asks the node what changed since the cursor (``GET /v1/changes``, paged; the cursor is
    ``meta.commons_cursor``, committed with each page): new lessons with their status,
    author and group (confirmers, threshold, policy), and status changes (a lesson that
    became common, faded or was revoked, itself or through an ancestor). A lesson whose
    author, or an author of its group, is this node's key is *mine* (this agent published
    it): kept, never rendered as received, never attested. A revoked lesson's open
    predictions are withdrawn and its pending attestations dropped.

``verify_commons(store, now)``
    Each open prediction of a commons lesson (made when it was rendered in a project
    family, :func:`predict_commons`) is compared with the family's episodes created after
    it, as sleep compares an own lesson's (the facets of :mod:`openmemory_local.situations`
    against the probes its text yields, exact feature cosine >= ``Config.verify_cosine``).
    One session meeting it confirms it; ``Config.commons_window_days`` passed with
    sessions in the family and none meeting it fails it (with no session there is no
    evidence either way: it stays open). Resolved predictions become an attestation per
    lesson: ``confirmed`` if one was confirmed, else ``failed``; the same verdict is not
    attested again within a window. ``met_before`` is true when this agent's own episodes
    held a matching surprise (the failure itself, or the correction) before it received
    the lesson: the policies then do not count the vote, by design. ``evidence``:
    ``sessions`` (the families' sessions in the windows), ``matched`` (those that met it),
    ``window`` (seconds from the prediction to now).

``attest(store, link, now)``
    Sends the pending attestations (``POST /v1/attest``). Never for a lesson authored by
    this node's key (checked against ``GET /v1/node``), nor a revoked or vetoed one. A node
    that is down leaves them pending for the next run.

``predict_commons(store, now)``
    After render: every commons lesson rendered in a project family without an open
    prediction there makes one.

What a commons lesson's text yields (:func:`read_text`): the programs and tools it names in
backticks (```git push``` -> the program head ``git push``; ```Read``` -> a tool), its first
quoted passage (the failure, or what the person said) and the languages it names. Its
probes are those of an own lesson with the same subject (:func:`openmemory_local.situations.probes`),
its *signature* (what ``met_before`` looks for) the program and the normalised quote.

Which lessons reach which project (:func:`select_for`): a project family's profile is what
its sessions ran (command heads, tools) and the languages of the files they touched; a lesson
scores 1 per program head the family ran (0.5 for the same program with another
subcommand), 0.5 per tool it used, 0.25 per language; at least
``Config.commons_min_relevance`` (0.5) reaches it. Common lessons come first, then
candidates (``Config.commons_candidates``), each by relevance, then confirmers, newest
first, one per group (the same observation from several authors), at most
``Config.commons_max_lessons`` (10) per project.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from openmemory_protocol import claims as claim_rules

from .clock import DAY, epoch, iso
from .commons_state import eligible_sql, stale_folders
from .embed import embed, feature_cosine, features
from .episodes import command_heads
from .jsonio import dumps, loads
from .lesson_text import clip, prediction_text
from .lessons import project_families
from .normalize import family, normalise
from .observation import is_observation
from .situations import facets, probe_matches, probes, subject

__all__ = [
    "STATUSES",
    "CommonsNotFound",
    "short_id",
    "file_name_for",
    "read_text",
    "lesson_probes",
    "status_text",
    "Profile",
    "project_profiles",
    "relevance",
    "Chooser",
    "select_for",
    "for_project",
    "public_view",
    "apply_changes",
    "pull",
    "predict_commons",
    "verify_commons",
    "met_before",
    "attest",
    "commons_rows",
    "attestations_of",
    "find_commons",
    "veto_commons",
    "unveto_commons",
    "set_commons_veto",
    "withdraw",
    "recall_commons",
    "stale_rendered",
    "refresh_folders",
    "change_key_list",
    "team_keys",
    "blocked_keys",
    "apply_lists",
    "claim_of",
    "failure_met",
    "fix_met",
]

STATUSES = ("candidate", "common", "faded", "revoked")
#: Statuses that may be rendered (candidates only with ``Config.commons_candidates``).
RENDERED = ("common", "candidate")
_MAX_WINDOW = 366 * 86400  # the wire format's largest evidence window
_MAX_SESSIONS = 1_000_000


class CommonsNotFound(LookupError):
    pass


# --- what a received lesson is ------------------------------------------------------------------


def short_id(record_id: str) -> str:
    """The 16 hex digits ``openmemory-node records`` shows (``1220`` and 12 more)."""
    return record_id[:16]


def file_name_for(record_id: str) -> str:
    return f"openmemory-commons-{short_id(record_id)}.md"


_CODE = re.compile(r"`([^`\n]{1,120})`")
_QUOTED = re.compile(r"\"([^\"\n]{2,500})\"|\u201c([^\u201d\n]{2,500})\u201d")
_WORD = re.compile(r"[A-Za-z][A-Za-z+#]*|\.[a-z]{1,5}\b")

#: Languages, as a lesson's words or the extensions of a project's files name them.
EXTENSIONS = {
    "py": "python", "ex": "elixir", "exs": "elixir", "heex": "elixir", "rs": "rust", "go": "go",
    "js": "javascript", "mjs": "javascript", "jsx": "javascript", "ts": "typescript", "tsx": "typescript",
    "rb": "ruby", "java": "java", "kt": "kotlin", "swift": "swift", "php": "php", "c": "c", "h": "c",
    "cpp": "c++", "cc": "c++", "hpp": "c++", "cs": "c#", "hs": "haskell", "ml": "ocaml", "scala": "scala",
    "clj": "clojure", "erl": "erlang", "lua": "lua", "sh": "shell", "sql": "sql", "dart": "dart", "zig": "zig",
}
LANGUAGES = frozenset(EXTENSIONS.values()) - {"go", "c", "shell", "sql"}  # as words: not ambiguous ones


def _tool_like(code: str) -> bool:
    return code.startswith("mcp__") or (" " not in code and code[:1].isupper() and code.isidentifier())


def read_text(text: str, kind: str) -> dict:
    """What a commons lesson's text names: ``heads`` (programs, ``git push``), ``programs``
    (their first words), ``tools`` (``Read``), ``quote`` (the first quoted passage),
    ``languages``, and its ``signature`` (the surprise itself, for ``met_before``)."""
    codes = [" ".join(c.split()) for c in _CODE.findall(text or "")]
    tools, heads = [], []
    for code in codes:
        if _tool_like(code):
            tools.append(code)
        else:
            heads.extend(command_heads(code) or [])
    heads = list(dict.fromkeys(h for h in heads if h))
    tools = list(dict.fromkeys(tools))
    found = _QUOTED.search(text or "")
    quote = (found.group(1) or found.group(2)).strip().rstrip("\u2026").strip() if found else ""
    words = {w.lower() for w in _WORD.findall(text or "")}
    languages = sorted({w for w in words if w in LANGUAGES}
                       | {EXTENSIONS[w[1:]] for w in words if w.startswith(".") and w[1:] in EXTENSIONS})
    said = normalise(quote)
    if kind == "correction":
        action = " && ".join(heads) or (tools[0] if tools else "")
        signature = f"{said} | {action}" if said and action else (said or action)
    else:
        head = " && ".join(heads) or (tools[0] if tools else "")
        signature = f"{head}: {said}" if head and said else (head or said)
    return {"heads": heads, "programs": list(dict.fromkeys(h.split()[0] for h in heads)), "tools": tools,
            "quote": quote, "languages": languages, "signature": signature}


def claim_of(kind: str, text: str, parts=None) -> "claim_rules.Claim | None":
    """A received lesson as a claim: its record's parts (version 2), else the claim its text is
    the exact rendering of (a version 1 record of the commons form), else None (free prose,
    which only the owner's own and team layers may hold)."""
    if isinstance(parts, dict) and parts:
        try:
            return claim_rules.Claim.from_parts(parts, kind)
        except claim_rules.ClaimError:
            return None
    return claim_rules.parse(text, kind)


def same_claim_key(kind: str, text: str, claim) -> str:
    """What a veto or revocation covers (C6 of :mod:`openmemory_protocol.claims`): the claim,
    or for free prose its text with case, punctuation, spacing and quoting ignored."""
    if claim is not None:
        return claim_rules.claim_key(claim)
    return f"text\x00{kind}\x00{claim_rules.text_key(text)}"


def receipt_refusal(text: str, claim) -> str | None:
    """Why this engine refuses a received lesson whatever its status or attestations: a claim
    that breaks the claim rules (an unsafe command: C5; a failure carrying a prompt: C4), or a
    free text holding an unsafe command. Defence in depth: the node refused these already."""
    if claim is not None:
        violation = claim_rules.claim_violation(claim)
        return f"{violation.code}: {violation}" if violation is not None else None
    for code in [text, *_CODE.findall(text or "")]:
        unsafe = claim_rules.unsafe_command(code)
        if unsafe is not None:
            return f"unsafe: it {unsafe[1]} ({unsafe[0]})"
    marker = claim_rules.failure_marker(text or "")
    return f"claim: the text carries {marker}" if marker is not None else None


def _details(kind: str, terms: dict) -> dict:
    """The ``details`` of an own lesson with the same subject (what probes and texts read)."""
    heads, tools = terms.get("heads") or [], terms.get("tools") or []
    if kind == "correction":
        action = " && ".join(heads) or (tools[0] if tools else None)
        label = ", ".join(f"`{h}`" for h in heads[:3]) or (f"`{tools[0]}`" if tools else None)
        return {"kind": "correction", "action": action, "action_label": label, "said": terms.get("quote") or ""}
    return {"kind": "error", "subject": {"heads": heads, "tool": tools[0] if tools else ("Bash" if heads else None)}}


def lesson_probes(kind: str, terms: dict, programs=()) -> list[dict]:
    """The situation a commons lesson's prediction expects (``programs``: the heads the
    family ran, which a correction that names them also expects)."""
    return probes(_details(kind, terms), terms.get("signature") or "", programs)


def status_text(status: str, confirmers: int, threshold: int | None, layer: str = "commons") -> str:
    """``common: confirmed by 4 independent agents`` / ``candidate: not yet verified`` /
    ``team: not yet verified`` (a lesson of the owner's team, shown before it is verified)."""
    agents = f"{confirmers} independent agent{'s' if confirmers != 1 else ''}"
    if status == "common":
        return f"common: confirmed by {agents}"
    if layer == "team" and status == "candidate":
        return "team: not yet verified by independent agents"
    if status == "candidate":
        if confirmers and threshold:
            return (f"candidate: not yet verified (confirmed by {confirmers} of the {threshold} "
                    "independent agents needed)")
        return "candidate: not yet verified"
    if status == "faded":
        return "faded: it stopped predicting what independent agents met"
    return status


# --- relevance --------------------------------------------------------------------------------


@dataclass
class Profile:
    """What a project family's sessions do."""

    heads: set[str] = field(default_factory=set)
    programs: set[str] = field(default_factory=set)
    tools: set[str] = field(default_factory=set)
    languages: set[str] = field(default_factory=set)
    sessions: int = 0


def _extension_language(path: str) -> str | None:
    name = path.rsplit("/", 1)[-1]
    stem, dot, ext = name.rpartition(".")
    return EXTENSIONS.get(ext.lower()) if dot and stem else None


def project_profiles(store) -> dict[str, Profile]:
    """Project family -> its :class:`Profile`, from every session episode in the store."""
    out: dict[str, Profile] = defaultdict(Profile)
    for cwd, branch, commands, tools, edited, read in store.conn.execute(
        "SELECT project, json_extract(fields, '$.branch'), json_extract(fields, '$.commands'), "
        "json_extract(fields, '$.tools'), json_extract(fields, '$.files_edited'), "
        "json_extract(fields, '$.files_read') FROM episodes WHERE kind = 'session' AND project IS NOT NULL"
    ):
        profile = out[family(cwd, branch)]
        profile.sessions += 1
        for head in loads(commands, {}) or {}:
            profile.heads.add(head)
            profile.programs.add(head.split()[0])
        profile.tools.update(loads(tools, {}) or {})
        for path in (loads(edited, []) or []) + (loads(read, []) or []):
            language = _extension_language(str(path))
            if language:
                profile.languages.add(language)
    return dict(out)


def relevance(terms: dict, profile: Profile | None) -> tuple[float, list[str]]:
    """How much of what a lesson names a family's sessions do: (score, reasons)."""
    if profile is None:
        return 0.0, []
    score, why = 0.0, []
    for head in terms.get("heads") or []:
        program = head.split()[0]
        if head in profile.heads:
            score += 1.0
            why.append(f"`{head}` runs in this project")
        elif program in profile.programs:
            score += 0.5
            why.append(f"`{program}` runs in this project")
    for tool in terms.get("tools") or []:
        if tool in profile.tools:
            score += 0.5
            why.append(f"`{tool}` is used in this project")
    for language in terms.get("languages") or []:
        if language in profile.languages:
            score += 0.25
            why.append(f"its files are {language}")
    return score, list(dict.fromkeys(why))


def _merged(profiles: dict[str, Profile], families: set[str]) -> Profile | None:
    found = [profiles[f] for f in families if f in profiles]
    if not found:
        return None
    if len(found) == 1:
        return found[0]
    out = Profile()
    for p in found:
        out.heads |= p.heads
        out.programs |= p.programs
        out.tools |= p.tools
        out.languages |= p.languages
        out.sessions += p.sessions
    return out


_COLUMNS = ("id", "record_id", "kind", "text", "author", "created", "strength", "derived_from", "status",
            "group_head", "authors", "confirmers", "threshold", "policy", "votes", "counted", "mine", "observation",
            "received", "status_changed", "change", "vetoed_at", "file_name", "probes", "terms", "updated",
            "version", "claim", "claim_key", "layer", "refused", "parts")


def _row(row) -> dict:
    out = dict(zip(_COLUMNS, row))
    for name, default in (("derived_from", []), ("authors", []), ("probes", []), ("terms", {}), ("claim", None),
                          ("parts", {})):
        out[name] = loads(out[name], default)
    out["mine"] = bool(out["mine"])
    out["observation"] = bool(out["observation"])
    out["vetoed"] = out["vetoed_at"] is not None
    out["short"] = short_id(out["record_id"])
    out["status_text"] = status_text(out["status"], out["confirmers"], out["threshold"], out["layer"])
    return out


def _rows(store, where: str = "1", params=()) -> list[dict]:
    return [_row(r) for r in store.conn.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM commons_lessons WHERE {where} ORDER BY id", list(params))]


def _eligible(config, table: str = "") -> tuple[str, list]:
    """The SQL condition of a received lesson that may be rendered (``table``: a prefix): the
    trust boundary (:mod:`openmemory_local.commons_state`)."""
    return eligible_sql(config.commons_candidates, table, config.commons_team_candidates)


def _one_per_group(rows: list[dict]) -> list[dict]:
    """The same observation from several authors is one lesson: its earliest member shown."""
    best: dict[str, dict] = {}
    for row in rows:
        key = row["group_head"] or row["record_id"]
        held = best.get(key)
        if held is None or (row["created"], row["record_id"]) < (held["created"], held["record_id"]):
            best[key] = row
    return list(best.values())


class Chooser:
    """Chooses the received lessons of each project (see the module docstring); what it reads
    from the store (the families' profiles, the lessons that may be rendered) is read once."""

    def __init__(self, store):
        self.store = store
        self._profiles: dict[str, Profile] | None = None
        self._pool: list[dict] | None = None

    @property
    def profiles(self) -> dict[str, Profile]:
        if self._profiles is None:
            self._profiles = project_profiles(self.store)
        return self._profiles

    @property
    def pool(self) -> list[dict]:
        if self._pool is None:
            where, params = _eligible(self.store.config)
            self._pool = _one_per_group(_rows(self.store, where, params))
        return self._pool

    def for_families(self, families: set[str], limit: int | None = None) -> list[dict]:
        """The lessons that reach a project of these families, best first, each with
        ``relevance`` and ``why``."""
        config = self.store.config
        limit = config.commons_max_lessons if limit is None else limit
        if limit <= 0 or not config.commons_receive or not self.pool:
            return []  # with [commons] receive = false the layer is off: what it rendered leaves too
        profile = _merged(self.profiles, families)
        if profile is None:
            return []
        chosen = []
        for row in self.pool:
            score, why = relevance(row["terms"], profile)
            if score >= config.commons_min_relevance:
                chosen.append(dict(row, relevance=round(score, 3), why=why))
        chosen.sort(key=lambda r: (r["status"] != "common", -r["relevance"], -r["confirmers"], -r["created"],
                                   r["record_id"]))
        return chosen[:limit]


def select_for(store, families: set[str], limit: int | None = None) -> list[dict]:
    """The received lessons that reach a project of these families (:class:`Chooser`)."""
    return Chooser(store).for_families(families, limit)


def for_project(store, path: str) -> list[dict]:
    """The received lessons rendered for the project at ``path`` (a working directory)."""
    path = str(path).rstrip("/") or "/"
    families = project_families(store).get(path) or {family(path)}
    return select_for(store, families)


def public_view(row: dict) -> dict:
    """A received lesson for tools and the MCP server: what it is, marked as received."""
    keys = ("record_id", "short", "kind", "text", "status", "status_text", "confirmers", "threshold", "policy",
            "received", "file_name", "relevance", "why", "similarity")
    view = {k: row[k] for k in keys if k in row}
    view["source"] = "commons"
    view["note"] = "reported by other agents through the Open Memory commons, not by this agent's own sessions"
    return view


# --- pull ---------------------------------------------------------------------------------------


def _record_event(store, at: str, kind: str, **detail) -> None:
    from .sleep import record_event

    record_event(store, at, kind, None, None, **detail)


def withdraw(store, commons_id: int, at: str) -> None:
    """Close a commons lesson's open predictions and drop its unsent attestations."""
    store.conn.execute("UPDATE commons_predictions SET state = 'withdrawn', resolved = ? WHERE commons_id = ? "
                       "AND state = 'open'", (at, commons_id))
    store.conn.execute("UPDATE commons_attestations SET state = 'dropped' WHERE commons_id = ? AND state = 'pending'",
                       (commons_id,))


def _summary(entry: dict) -> dict | None:
    summary = entry.get("commons")
    return summary if isinstance(summary, dict) else None


def _int(value, default=0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _lesson_fields(entry: dict) -> dict | None:
    """The fields of a lesson entry of ``GET /v1/changes``, checked; None if malformed."""
    record = entry.get("record")
    rid = entry.get("id")
    if not isinstance(record, dict) or not isinstance(rid, str) or not re.fullmatch(r"[0-9a-f]{68}", rid):
        return None
    text, kind, signer = record.get("text"), record.get("kind"), record.get("signer")
    status = entry.get("status")
    if not (isinstance(text, str) and text.strip() and isinstance(kind, str) and isinstance(signer, str)
            and status in STATUSES):
        return None
    derived = record.get("derived_from")
    derived = [d for d in derived if isinstance(d, str)] if isinstance(derived, list) else []
    strength = record.get("strength")
    claim = record.get("claim")
    return {"record_id": rid, "text": " ".join(text.split()), "kind": kind, "author": signer,
            "created": _int(record.get("created")), "strength": _int(strength) / 1000 if _int(strength, -1) >= 0
            else None, "derived_from": derived, "status": status, "change": _int(entry.get("change"), None),
            "version": _int(record.get("version"), 1), "claim": claim if isinstance(claim, dict) else None}


def _group_fields(summary: dict | None) -> dict:
    if summary is None:
        return {}
    authors = summary.get("authors")
    return {"group_head": summary.get("group") if isinstance(summary.get("group"), str) else None,
            "authors": [a for a in authors if isinstance(a, str)] if isinstance(authors, list) else [],
            "confirmers": _int(summary.get("confirmers")), "threshold": _int(summary.get("threshold"), None),
            "policy": summary.get("policy") if isinstance(summary.get("policy"), str) else None,
            "votes": _int(summary.get("votes")), "counted": _int(summary.get("counted")),
            "parts": summary.get("parts") if isinstance(summary.get("parts"), dict) else None}


def _rendered_in(store, commons_id: int) -> list[str]:
    return [d for (d,) in store.conn.execute(
        "SELECT DISTINCT memory_dir FROM rendered_files WHERE role = 'commons' AND lesson_id = ? ORDER BY memory_dir",
        (commons_id,))]


def apply_changes(store, entries: list, node_key: str, now: datetime, team=None) -> dict:
    """Take one page of ``GET /v1/changes`` into the store (inside the caller's transaction
    or one of its own). Malformed entries are counted and skipped, never stored. ``team``: the
    hex keys of the owner's team (default: as last pulled, :func:`team_keys`)."""
    now_iso = iso(now)
    team = frozenset(team_keys(store) if team is None else team)
    out = {"received": 0, "updated": 0, "status_changed": 0, "revoked": 0, "mine": 0, "bad": 0,
           "attestations": 0}
    conn = store.conn
    with store.write():
        for entry in entries:
            if not isinstance(entry, dict):
                out["bad"] += 1
                continue
            kind = entry.get("type")
            if kind == "lesson":
                fields = _lesson_fields(entry)
                if fields is None:
                    out["bad"] += 1
                    continue
                _apply_lesson(store, fields, _group_fields(_summary(entry)), node_key, now_iso, out, team)
            elif kind == "attestation":
                summary = _summary(entry)
                record = entry.get("record") if isinstance(entry.get("record"), dict) else {}
                if summary is not None and isinstance(summary.get("lesson"), str):
                    group = _group_fields(summary)
                    if group.get("group_head"):
                        conn.execute("UPDATE commons_lessons SET confirmers = ?, threshold = ?, policy = ?, votes = ?, "
                                     "counted = ?, updated = ? WHERE group_head = ?",
                                     (group["confirmers"], group["threshold"], group["policy"], group["votes"],
                                      group["counted"], now_iso, group["group_head"]))
                if record.get("signer") == node_key and isinstance(entry.get("id"), str):
                    conn.execute("UPDATE commons_attestations SET node_status = ? WHERE record_id = ?",
                                 (entry.get("status"), entry["id"]))
                out["attestations"] += 1
            elif kind not in ("revocation", "vouch"):
                out["bad"] += 1
    return out


def _apply_lesson(store, fields: dict, group: dict, node_key: str, now_iso: str, out: dict,
                  team: frozenset[str] = frozenset()) -> None:
    conn = store.conn
    authors = group.get("authors") or [fields["author"]]
    mine = fields["author"] == node_key or node_key in authors
    row = conn.execute("SELECT id, status, mine FROM commons_lessons WHERE record_id = ?",
                       (fields["record_id"],)).fetchone()
    sets = {"status": fields["status"], "change": fields["change"], "mine": int(mine), "updated": now_iso,
            "authors": dumps(authors)}
    for name in ("group_head", "confirmers", "threshold", "policy", "votes", "counted"):
        if group.get(name) is not None or (name in group and name != "group_head"):
            sets[name] = group[name]
    if group.get("parts") is not None:
        sets["parts"] = dumps(group["parts"])
    if row is None:
        terms = read_text(fields["text"], fields["kind"])
        claim = claim_of(fields["kind"], fields["text"], fields.get("claim"))
        # a claim's text is its rendering, never prose: the observation rule is for free text
        observation = claim is not None or is_observation(fields["text"])
        sets.update(record_id=fields["record_id"], kind=fields["kind"], text=fields["text"], author=fields["author"],
                    created=fields["created"], strength=fields["strength"],
                    derived_from=dumps(fields["derived_from"]), observation=int(observation),
                    received=now_iso, status_changed=now_iso, file_name=file_name_for(fields["record_id"]),
                    probes=dumps(lesson_probes(fields["kind"], terms)), terms=dumps(terms),
                    version=fields.get("version") or 1, claim=dumps(claim.parts()) if claim else None,
                    claim_key=same_claim_key(fields["kind"], fields["text"], claim),
                    refused=receipt_refusal(fields["text"], claim),
                    layer="team" if fields["author"] in team else "commons")
        sets["group_head"] = sets.get("group_head") or fields["record_id"]
        names = ", ".join(sets)
        cid = conn.execute(f"INSERT INTO commons_lessons ({names}) VALUES ({', '.join('?' * len(sets))})",
                           list(sets.values())).lastrowid
        if mine:
            out["mine"] += 1
        else:
            out["received"] += 1
            _record_event(store, now_iso, "commons_received", commons=cid, record=fields["record_id"],
                          status=fields["status"], lesson_kind=fields["kind"], text=fields["text"])
        if fields["status"] == "revoked":
            out["revoked"] += 1
        return
    cid, before, _was_mine = row
    if before != fields["status"]:
        sets["status_changed"] = now_iso
        out["status_changed"] += 1
        if not mine:
            detail = {"commons": cid, "record": fields["record_id"], "before": before, "after": fields["status"],
                      "text": fields["text"], "confirmers": group.get("confirmers")}
            if fields["status"] == "revoked":
                out["revoked"] += 1
                detail["rendered_in"] = _rendered_in(store, cid)
                _record_event(store, now_iso, "commons_revoked", **detail)
            else:
                _record_event(store, now_iso, "commons_status", **detail)
        if fields["status"] == "revoked":
            withdraw(store, cid, now_iso)
    else:
        out["updated"] += 1
    assignments = ", ".join(f"{k} = ?" for k in sets)
    conn.execute(f"UPDATE commons_lessons SET {assignments} WHERE id = ?", [*sets.values(), cid])


def team_keys(store) -> list[str]:
    """The owner's team (hex keys) as last pulled from the node (``openmemory team add``)."""
    return loads(store.get_meta("commons_team") or "[]", []) or []


def blocked_keys(store) -> list[str]:
    """The blocked authors (hex keys) as last pulled from the node (``openmemory commons block``)."""
    return loads(store.get_meta("commons_blocked") or "[]", []) or []


_BLOCKED = "blocked: its author's key is blocked on this node"


def apply_lists(store, team: list[str] | None = None, blocked: list[str] | None = None) -> None:
    """Take the node's team and blocked lists: each received lesson's layer (``team`` when its
    author is in the team), and a blocked author's lessons refused here at once (the node
    revokes them too: R11), whatever the node says later; unblocking lifts it."""
    with store.write():
        if team is not None:
            store.set_meta("commons_team", dumps(sorted(set(team))))
            store.conn.execute("UPDATE commons_lessons SET layer = CASE WHEN author IN (SELECT value FROM "
                               "json_each(?)) THEN 'team' ELSE 'commons' END", (dumps(sorted(set(team))),))
        if blocked is not None:
            store.set_meta("commons_blocked", dumps(sorted(set(blocked))))
            store.conn.execute("UPDATE commons_lessons SET refused = NULL WHERE refused = ?", (_BLOCKED,))
            store.conn.execute("UPDATE commons_lessons SET refused = ? WHERE refused IS NULL AND author IN "
                               "(SELECT value FROM json_each(?))", (_BLOCKED, dumps(sorted(set(blocked)))))


def _node_lists(link) -> dict[str, list[str]]:
    """The node's team and blocked lists (an older node without them: left out)."""
    from .node_link import NodeError

    out = {}
    for name in ("team", "blocked"):
        try:
            data = link.get(f"/v1/{name}")
        except NodeError:
            continue
        rows = data.get(name) if isinstance(data, dict) else None
        if isinstance(rows, list):
            out[name] = sorted({r["key"] for r in rows if isinstance(r, dict) and isinstance(r.get("key"), str)
                                and re.fullmatch(r"[0-9a-f]{64}", r["key"])})
    return out


def pull(store, link, now: datetime, *, max_pages: int = 1000) -> dict:
    """Pull what the node has that this store has not seen (see the module docstring).

    Raises :class:`openmemory_local.node_link.NodeUnavailable` when no node answers (what
    was committed page by page stays). A node other than the one pulled from before (another
    key) and a cursor beyond the node's last change (a rebuilt node store) start from 0.
    """
    info = link.node()
    node_key = str(info.get("public_key") or "")
    totals: dict = {"node": node_key, "pages": 0, "received": 0, "updated": 0, "status_changed": 0, "revoked": 0,
                    "mine": 0, "bad": 0, "attestations": 0, "reset": False}
    previous = store.get_meta("commons_node")
    if previous != node_key:  # a first pull, or another node: from the beginning
        with store.write():
            store.set_meta("commons_node", node_key)
            store.set_meta("commons_cursor", "0")
            store.conn.execute("UPDATE commons_lessons SET mine = 1 WHERE author = ?", (node_key,))
        totals["reset"] = previous is not None
    lists = _node_lists(link)
    apply_lists(store, lists.get("team"), lists.get("blocked"))
    totals["team"] = len(team_keys(store))
    cursor = int(store.get_meta("commons_cursor") or 0)
    for _ in range(max_pages):
        page = link.get("/v1/changes", after=cursor, limit=store.config.commons_page)
        if not isinstance(page, dict) or not isinstance(page.get("changes"), list):
            totals["bad"] += 1
            break
        last = _int(page.get("last"))
        if cursor > last:  # the node's store was rebuilt: its numbers start again
            cursor = 0
            totals["reset"] = True
            continue
        with store.write():
            counts = apply_changes(store, page["changes"], node_key, now)
            cursor = max(cursor, _int(page.get("next_after"), cursor))
            # another pull (the SessionStart hook beside a run) may have gone further
            if totals["reset"] or cursor > int(store.get_meta("commons_cursor") or 0):
                store.set_meta("commons_cursor", str(cursor))
        totals["pages"] += 1
        for key, value in counts.items():
            totals[key] += value
        if not page.get("more") or not page["changes"]:
            break
    totals["cursor"] = cursor
    return totals


def project_domains(store) -> list[str]:
    """The domains this agent's projects touch: those of the programs its sessions ran (the
    command heads of its session episodes, archived or not), by the commons' rule
    (:func:`openmemory_protocol.domains.domains_of_programs`), ``general`` always."""
    from openmemory_protocol.domains import domains_of_programs

    heads = [row[0] for row in store.conn.execute(
        "SELECT DISTINCT j.key FROM episodes AS e, json_each(e.fields, '$.commands') AS j "
        "WHERE e.kind = 'session' AND json_type(e.fields, '$.commands') = 'object'")]
    return sorted(domains_of_programs(heads))


def report_domains(store, link) -> dict:
    """Tell the node the domains this agent's projects touch (``PUT /v1/domains``): it
    follows those and ``general``, so that it takes the lessons of its agent's ecosystems and
    not the others' (PROTOCOL.md, "Topics")."""
    domains = project_domains(store)
    answer = link.follow_domains(domains)
    return {"domains": domains, "changed": bool(isinstance(answer, dict) and answer.get("changed"))}


# --- predict, verify, attest --------------------------------------------------------------------


def _memory_folders(store) -> dict[str, str]:
    """Real path of each project's memory folder -> the project (its working directory)."""
    import os

    from .render import memory_dir_for

    claude_dir = store.config.claude_dir
    if claude_dir is None:
        return {}
    return {os.path.realpath(memory_dir_for(claude_dir, cwd)): cwd for cwd in project_families(store)}


def _rendered_families(store) -> dict[int, set[str]]:
    """Received lesson -> the project families whose memory folders hold its file now."""
    folders = _memory_folders(store)
    if not folders:
        return {}
    families = project_families(store)
    out: dict[int, set[str]] = defaultdict(set)
    for lesson_id, memory_dir in store.conn.execute(
            "SELECT lesson_id, memory_dir FROM rendered_files WHERE role = 'commons' AND state IN ('ours', 'edited')"):
        cwd = folders.get(memory_dir)
        out[lesson_id].update(families.get(cwd, ()) if cwd else ())
    return dict(out)


#: Received lessons that are tested (in shadow unless rendered): a claim, not this agent's own,
#: not refused, revoked or vetoed.
_TESTABLE = ("status IN ('candidate', 'common', 'faded') AND mine = 0 AND vetoed_at IS NULL AND refused IS NULL "
             "AND claim IS NOT NULL")


def predict_commons(store, now: datetime) -> dict:
    """Every received claim makes a prediction in each project family whose sessions run what
    it names, rendered there or not (*shadow testing*: a stranger's candidate is tested by
    this agent's sessions without ever being shown to it); and an open prediction whose lesson
    is now rendered in its family's memory folder is *exposed* from now on (evidence after
    that could have been caused by the lesson: it never counts for it)."""
    from .sleep import _recent_heads

    now_iso = iso(now)
    out = {"made": [], "exposed": []}
    chooser = Chooser(store)
    profiles = chooser.profiles
    rendered = _rendered_families(store)
    families = project_families(store)
    cwds_of: dict[str, list[str]] = defaultdict(list)
    for cwd, fams in families.items():
        for fam in fams:
            cwds_of[fam].append(cwd)
    with store.write():
        open_preds = {(cid, fam): (pid, exposed) for pid, cid, fam, exposed in store.conn.execute(
            "SELECT id, commons_id, family, exposed_at FROM commons_predictions WHERE state = 'open'")}
        for lesson in _rows(store, _TESTABLE):
            for fam, profile in sorted(profiles.items()):
                held = open_preds.get((lesson["id"], fam))
                shown = fam in rendered.get(lesson["id"], ())
                if held is not None:
                    if shown and held[1] is None:
                        store.conn.execute("UPDATE commons_predictions SET exposed_at = ? WHERE id = ?",
                                           (now_iso, held[0]))
                        out["exposed"].append(held[0])
                    continue
                if relevance(lesson["terms"], profile)[0] < store.config.commons_min_relevance:
                    continue
                expected = lesson_probes(lesson["kind"], lesson["terms"], _recent_heads(store, sorted(cwds_of[fam])))
                text = prediction_text(_details(lesson["kind"], lesson["terms"]), fam, lesson["short"])
                pid = store.conn.execute(
                    "INSERT INTO commons_predictions (commons_id, family, made, text, probes, exposed_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (lesson["id"], fam, now_iso, text, dumps(expected), now_iso if shown else None)).lastrowid
                out["made"].append(pid)
    return out


def _ep_family(project, fields) -> str:
    from .sleep import _ep_family as sleep_family

    return sleep_family(project, fields)


def _scan(config, preds: list[tuple], episodes) -> list[dict]:
    """For each prediction ``(id, family, made, probes)``: the sessions of its family after
    it was made, and the first match of each session that met it."""
    threshold = config.verify_cosine
    found = [{"sessions": set(), "matched": {}} for _ in preds]
    plans: dict[str, tuple[list, dict]] = {}
    for i, (_pid, fam, _made, expected) in enumerate(preds):
        rows, postings = plans.setdefault(fam, ([], {}))
        for probe in expected:
            feats = features(probe["text"])
            for feature in feats:
                postings.setdefault(feature, []).append(len(rows))
            rows.append((i, probe, feats))
    cache: dict[str, dict] = {}
    for eid, kind, session_id, project, created, fields_json in episodes:
        fields = loads(fields_json, {})
        plan = plans.get(_ep_family(project, fields))
        if plan is None:
            continue
        rows, postings = plan
        live = {i for i, _, _ in rows if created > preds[i][2]}
        if not live:
            continue
        session = session_id or f"episode {eid}"
        for i in live:
            found[i]["sessions"].add(session)
        for facet in facets({"id": eid, "kind": kind, "project": project, "fields": fields}):
            feats = cache.get(facet)
            if feats is None:
                feats = cache[facet] = features(facet)
            for k in sorted({k for feature in feats for k in postings.get(feature, ())}):
                i, probe, probe_feats = rows[k]
                if i not in live or session in found[i]["matched"] or not probe_matches(probe, facet):
                    continue
                sim = feature_cosine(probe_feats, feats)
                if sim >= threshold:
                    found[i]["matched"][session] = (eid, facet, sim)
    return found


def _claim(lesson: dict):
    return claim_of(lesson["kind"], lesson["text"], lesson.get("claim"))


def _program_met(claim, ep: dict) -> bool:
    """The episode's failed call ran what the claim's situation names (the program head, or
    the tool)."""
    sub = subject(ep)
    if claim.tool is not None:
        return sub["tool"] == claim.tool
    # the same head, or the same program where one side names no subcommand (``pytest`` and
    # ``pytest -q``; never ``git push`` and ``git pull``)
    return any(h == e or (h.split()[0] == e.split()[0] and (" " not in h or " " not in e))
               for h in claim.heads for e in sub["heads"] if h and e)


def failure_met(claim, ep: dict) -> bool:
    """Whether an error episode is this agent meeting the failure a claim quotes: the same
    program failing with the same failure line (normalised; placeholders stand for what either
    side redacted), never the program failing with something else."""
    fields = ep.get("fields") or {}
    if ep.get("kind") != "error" or fields.get("failure") in ("rejected", "interrupted"):
        return False
    if not _program_met(claim, ep):
        return False
    cwd, branch = ep.get("project") or fields.get("cwd"), fields.get("branch")
    line = normalise(fields.get("first_line") or "", cwd=cwd, branch=branch)
    return bool(line) and claim_rules.failure_matches(claim.failure, line)


def fix_met(claim, ep: dict) -> bool:
    """Whether this agent's own session made the failure go away the way the claim says: the
    same ``fix_how`` and the same command (or step, or edited path)."""
    res = (ep.get("fields") or {}).get("resolution")
    if claim.fix_how is None or not isinstance(res, dict):
        return False
    kind = res.get("kind")
    if claim.fix_how in ("changed", "instead"):
        return kind == claim.fix_how and claim_rules.command_matches(claim.fix, str(res.get("norm") or
                                                                                   res.get("command") or ""))
    if kind != "retry":
        return False
    after = [str(a) for a in res.get("after") or []]
    steps = [a for a in after if not a.startswith("edited ")]
    if claim.fix_how == "after":
        return bool(steps) and claim_rules.command_matches(claim.fix, steps[0])
    if claim.fix_how == "edited":
        edits = [a[len("edited "):] for a in after if a.startswith("edited ")]
        return bool(edits) and not steps and any(
            claim_rules.failure_matches(claim.fix, normalise(e)) for e in edits)
    return claim.fix_how == "retried" and not after


def verify_commons(store, now: datetime) -> dict:
    """Resolve the open predictions of received claims, part by part, then decide the
    attestations (see the module docstring):

    * the *failure* part is confirmed by an error episode of the family, after the prediction
      was made, that meets the claim's failure (:func:`failure_met`); it fails when the window
      passed with sessions of the family running the claim's situation and none meeting it;
    * the *fix* part is confirmed only by such an episode whose own resolution is the claim's
      fix (:func:`fix_met`), else it is untested;
    * evidence dated at or after the prediction's ``exposed_at`` (the lesson was rendered in
      that family's memory folder) is *exposed*: it is reported as such and never counts for
      the lesson's promotion; unexposed evidence is preferred."""
    config = store.config
    now_iso = iso(now)
    out = {"open": 0, "confirmed": [], "failed": [], "attestations": []}
    window = config.commons_window_days * DAY
    with store.write():
        preds = [(pid, cid, fam, made, loads(probes_json, []), exposed_at)
                 for pid, cid, fam, made, probes_json, exposed_at in store.conn.execute(
                     "SELECT id, commons_id, family, made, probes, exposed_at FROM commons_predictions "
                     "WHERE state = 'open' ORDER BY id")]
        out["open"] = len(preds)
        if preds:
            lessons = {row["id"]: row for row in _rows(store, f"id IN ({','.join(str(p[1]) for p in preds)})")}
            claims = {cid: _claim(row) for cid, row in lessons.items()}
            episodes = store.conn.execute(
                "SELECT id, kind, session_id, project, created, fields FROM episodes WHERE created > ? "
                "AND created <= ? ORDER BY created, id", (min(p[3] for p in preds), now_iso)).fetchall()
            situations = _scan(config, [(pid, fam, made, [p for p in probes if p.get("role") == "situation"])
                                        for pid, _cid, fam, made, probes, _e in preds], episodes)
            by_family: dict[str, list[int]] = defaultdict(list)
            for i, pred in enumerate(preds):
                by_family[pred[2]].append(i)
            hits: dict[int, list[tuple]] = defaultdict(list)  # prediction index -> (exposed, no fix, created, ep id)
            for eid, kind, session_id, project, created, fields_json in episodes:
                if kind != "error":
                    continue
                fields = loads(fields_json, {})
                waiting = [i for i in by_family.get(_ep_family(project, fields), ()) if created > preds[i][3]]
                if not waiting:
                    continue
                ep = {"id": eid, "kind": kind, "project": project, "fields": fields}
                for i in waiting:
                    claim = claims.get(preds[i][1])
                    if claim is None or not failure_met(claim, ep):
                        continue
                    exposed = preds[i][5] is not None and created >= preds[i][5]
                    hits[i].append((exposed, not fix_met(claim, ep), created, eid, session_id))
            for i, (pid, cid, fam, made, _probes, _exposed) in enumerate(preds):
                claim = claims.get(cid)
                seen = situations[i]
                sessions = len(seen["sessions"])
                if hits.get(i):
                    exposed, no_fix, _created, eid, _session = min(hits[i])
                    fix = "untested" if claim is None or claim.fix_how is None or no_fix else "confirmed"
                    matched = len({h[4] or h[3] for h in hits[i] if h[0] == exposed})
                    # (a resolved prediction's exposed_at says whether the evidence it went with was
                    # exposed: NULL when the episode that confirmed it came before the lesson was shown)
                    store.conn.execute(
                        "UPDATE commons_predictions SET state = 'confirmed', resolved = ?, sessions = ?, matched = ?, "
                        "episode_id = ?, failure = 'confirmed', fix = ?, facet = NULL, similarity = NULL, "
                        "exposed_at = CASE WHEN ? THEN exposed_at ELSE NULL END WHERE id = ?",
                        (now_iso, max(sessions, matched), matched, eid, fix, int(exposed), pid))
                    out["confirmed"].append(pid)
                elif seen["matched"] and epoch(now) - epoch(made) >= window:
                    store.conn.execute("UPDATE commons_predictions SET state = 'failed', resolved = ?, sessions = ?, "
                                       "matched = 0, failure = 'failed', fix = 'untested' WHERE id = ?",
                                       (now_iso, len(seen["matched"]), pid))
                    out["failed"].append(pid)
        out["attestations"] = _decide(store, now)
    return out


def met_before(store, lesson: dict) -> bool:
    """Whether this agent's own episodes met the claim's failure (the same program failing the
    same way) before it received the lesson: then its vote does not count, by design."""
    claim = _claim(lesson)
    if claim is None:
        return False
    for eid, kind, project, fields_json in store.conn.execute(
            "SELECT id, kind, project, fields FROM episodes WHERE kind = 'error' AND created < ? "
            "ORDER BY created DESC", (lesson["received"],)):
        if failure_met(claim, {"id": eid, "kind": kind, "project": project, "fields": loads(fields_json, {})}):
            return True
    return False


def _verdicts(preds: list[tuple]) -> tuple[str, str, bool, int, int]:
    """Resolved predictions of one lesson -> (failure, fix, exposed, sessions, matched) of one
    attestation. Unexposed evidence decides when there is any: an exposed fix confirmation
    never stands beside an unexposed failure confirmation."""
    unexposed = [p for p in preds if not p[5]]
    chosen, exposed = (unexposed, False) if unexposed else (preds, True)
    confirmed = [p for p in chosen if p[1] == "confirmed"]
    failure = "confirmed" if confirmed else "failed"
    fix = "confirmed" if any(p[6] == "confirmed" for p in confirmed) else "untested"
    sessions = min(_MAX_SESSIONS, sum(p[2] or 0 for p in chosen))
    matched = min(sessions, sum(p[3] or 0 for p in confirmed)) if confirmed else 0
    return failure, fix, exposed, max(sessions, matched), matched


def _decide(store, now: datetime) -> list[int]:
    """Resolved predictions not yet attested -> one attestation per lesson (pending)."""
    config = store.config
    now_iso = iso(now)
    made_ids = []
    by_lesson: dict[int, list[tuple]] = defaultdict(list)
    for row in store.conn.execute(
        "SELECT commons_id, id, state, sessions, matched, made, exposed_at IS NOT NULL, fix FROM commons_predictions "
        "WHERE state IN ('confirmed', 'failed') AND attestation_id IS NULL ORDER BY id"):
        by_lesson[row[0]].append(row[1:])
    for cid, preds in sorted(by_lesson.items()):
        ids = [p[0] for p in preds]
        marks = ",".join("?" * len(ids))
        lesson = _rows(store, "id = ?", (cid,))[0]
        if lesson["mine"] or lesson["status"] == "revoked" or lesson["vetoed"] or lesson["refused"]:
            store.conn.execute(f"UPDATE commons_predictions SET attestation_id = 0 WHERE id IN ({marks})", ids)
            continue
        failure, fix, exposed, sessions, matched = _verdicts(preds)
        verdict = "confirmed" if failure == "confirmed" else "failed"
        window = int(min(_MAX_WINDOW, max(1, max(epoch(now) - epoch(p[4]) for p in preds))))
        last = store.conn.execute(
            "SELECT id, failure, fix, exposed, made, verdict FROM commons_attestations WHERE commons_id = ? "
            "AND state IN ('pending', 'sent') ORDER BY id DESC LIMIT 1", (cid,)).fetchone()
        if last and (last[1] or last[5], last[2] or "untested", bool(last[3])) == (failure, fix, exposed) \
                and epoch(now) - epoch(last[4]) < config.commons_window_days * DAY:
            store.conn.execute(f"UPDATE commons_predictions SET attestation_id = ? WHERE id IN ({marks})",
                               [last[0], *ids])
            continue
        aid = store.conn.execute(
            "INSERT INTO commons_attestations (commons_id, lesson_record, verdict, met_before, sessions, matched, "
            "window, made, failure, fix, exposed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (cid, lesson["record_id"], verdict, int(met_before(store, lesson)), sessions, matched, window, now_iso,
             failure, fix, int(exposed))).lastrowid
        store.conn.execute(f"UPDATE commons_predictions SET attestation_id = ? WHERE id IN ({marks})", [aid, *ids])
        made_ids.append(aid)
    return made_ids


def attestation_body(lesson: dict, row: dict) -> dict | None:
    """What ``POST /v1/attest`` is sent for one attestation: per part for a claim record
    (version 2); for a version 1 record, whose attestation cannot say it was exposed, a single
    verdict, and nothing for exposed evidence or a stated fix not confirmed."""
    evidence = {"sessions": row["sessions"], "matched": row["matched"], "window": row["window"]}
    if (lesson.get("version") or 1) >= 2:
        return {"id": lesson["record_id"], "failure": row["failure"] or row["verdict"], "fix": row["fix"] or "untested",
                "exposed": bool(row["exposed"]), "met_before": bool(row["met_before"]), "evidence": evidence}
    if row["exposed"]:
        return None
    claim = _claim(lesson)
    verdict = row["verdict"]
    if verdict == "confirmed" and claim is not None and claim.fix_how is not None and row["fix"] != "confirmed":
        return None  # (a version 1 vote cannot say "the failure, not the fix": it says nothing)
    return {"id": lesson["record_id"], "verdict": verdict, "met_before": bool(row["met_before"]),
            "evidence": evidence if verdict == "confirmed" else {**evidence, "matched": 0}}


def attest(store, link, now: datetime) -> dict:
    """Send the pending attestations through the node (see the module docstring)."""
    from .node_link import NodeError, NodeUnavailable

    now_iso = iso(now)
    out = {"sent": [], "refused": [], "dropped": [], "waiting": 0}
    pending = store.conn.execute(
        "SELECT a.id, a.commons_id, a.lesson_record, a.verdict, a.met_before, a.sessions, a.matched, a.window, "
        "a.failure, a.fix, a.exposed FROM commons_attestations a WHERE a.state = 'pending' ORDER BY a.id").fetchall()
    if not pending:
        return out
    node_key = str(link.node().get("public_key") or "")
    names = ("id", "commons_id", "lesson_record", "verdict", "met_before", "sessions", "matched", "window", "failure",
             "fix", "exposed")
    for values in pending:
        row = dict(zip(names, values))
        aid, cid, record = row["id"], row["commons_id"], row["lesson_record"]
        lesson = _rows(store, "id = ?", (cid,))[0]
        body = attestation_body(lesson, row)
        if lesson["author"] == node_key or node_key in lesson["authors"] or lesson["mine"] \
                or lesson["status"] == "revoked" or lesson["vetoed"] or lesson["refused"] or body is None:
            with store.write():
                store.conn.execute("UPDATE commons_attestations SET state = 'dropped' WHERE id = ?", (aid,))
            out["dropped"].append(aid)
            continue
        try:
            answer = link.post("/v1/attest", body)
        except NodeUnavailable:
            out["waiting"] = len(pending) - len(out["sent"]) - len(out["refused"]) - len(out["dropped"])
            break
        except NodeError as exc:
            with store.write():
                store.conn.execute("UPDATE commons_attestations SET state = 'refused', error = ? WHERE id = ?",
                                   (f"{exc.status} {exc.code}: {exc.message}"[:300], aid))
            out["refused"].append(aid)
            continue
        answer = answer if isinstance(answer, dict) else {}
        with store.write():
            store.conn.execute("UPDATE commons_attestations SET state = 'sent', sent = ?, record_id = ?, "
                               "node_status = ? WHERE id = ?", (now_iso, answer.get("id"), answer.get("status"), aid))
            _record_event(store, now_iso, "commons_attested", commons=cid, record=record, verdict=row["verdict"],
                          failure=row["failure"], fix=row["fix"], exposed=bool(row["exposed"]),
                          met_before=bool(row["met_before"]), sessions=row["sessions"], matched=row["matched"],
                          window=row["window"], attestation=answer.get("id"), node_status=answer.get("status"),
                          text=lesson["text"])
        out["sent"].append(aid)
    return out


# --- views, veto ---------------------------------------------------------------------------------


def commons_rows(store, *, include_all: bool = False) -> list[dict]:
    """Every received lesson (revoked and this agent's own too with ``include_all``), newest
    first, with where it is rendered, its predictions and this agent's attestations."""
    where = "1" if include_all else "status != 'revoked' AND mine = 0"
    rows = _rows(store, where)
    rows.sort(key=lambda r: (-r["created"], r["record_id"]))
    rendered = defaultdict(list)
    for lesson_id, path, state in store.conn.execute(
        "SELECT lesson_id, path, state FROM rendered_files WHERE role = 'commons' ORDER BY path"):
        rendered[lesson_id].append({"path": path, "state": state})
    preds = defaultdict(lambda: {"open": 0, "confirmed": 0, "failed": 0, "withdrawn": 0})
    for cid, state, n in store.conn.execute(
        "SELECT commons_id, state, COUNT(*) FROM commons_predictions GROUP BY commons_id, state"):
        preds[cid][state] = n
    atts = attestations_of(store, [row["id"] for row in rows])
    for row in rows:
        row["rendered"] = rendered.get(row["id"], [])
        row["predictions"] = dict(preds[row["id"]])
        row["attestations"] = atts.get(row["id"], [])
    return rows


def attestations_of(store, ids: list[int]) -> dict[int, list[dict]]:
    """This agent's attestations of these received lessons, oldest first."""
    out: dict[int, list[dict]] = defaultdict(list)
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for (cid, verdict, met, sessions, matched, window, made, state, record_id, node_status, failure, fix,
             exposed) in store.conn.execute(
            "SELECT commons_id, verdict, met_before, sessions, matched, window, made, state, record_id, node_status, "
            f"failure, fix, exposed FROM commons_attestations WHERE commons_id IN ({','.join('?' * len(chunk))}) "
            "ORDER BY id", chunk):
            out[cid].append({"verdict": verdict, "failure": failure, "fix": fix, "exposed": bool(exposed),
                             "met_before": bool(met), "evidence": {
                                 "sessions": sessions, "matched": matched, "window": window}, "made": made,
                             "state": state, "record": record_id, "node_status": node_status})
    return dict(out)


def find_commons(store, ident: str) -> dict:
    """A received lesson by its record id or a prefix of it (8 hex digits at least, the
    ``1220`` header optional)."""
    text = ident.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{8,68}", text):
        raise CommonsNotFound(f"{ident!r} is not a commons record id (hex, 8 digits at least)")
    found = _rows(store, "record_id LIKE ? OR record_id LIKE ?", (text + "%", "1220" + text + "%"))
    if not found:
        raise CommonsNotFound(f"no received lesson {ident}")
    if len(found) > 1:
        raise CommonsNotFound(f"{ident} names {len(found)} received lessons: give more digits")
    return found[0]


def veto_commons(store, ident: str, now: datetime, *, why: str = "openmemory veto") -> tuple[dict, bool]:
    """Never render this received lesson again (and never attest it). False if it was."""
    lesson = find_commons(store, ident)
    if lesson["vetoed"]:
        return lesson, False
    now_iso = iso(now)
    with store.write():
        store.conn.execute("UPDATE commons_lessons SET vetoed_at = ?, updated = ? WHERE id = ?",
                           (now_iso, now_iso, lesson["id"]))
        withdraw(store, lesson["id"], now_iso)
        _record_event(store, now_iso, "commons_vetoed", commons=lesson["id"], record=lesson["record_id"],
                      text=lesson["text"], why=why)
    return lesson, True


def unveto_commons(store, ident: str, now: datetime) -> tuple[dict, bool]:
    lesson = find_commons(store, ident)
    if not lesson["vetoed"]:
        return lesson, False
    now_iso = iso(now)
    with store.write():
        store.conn.execute("UPDATE commons_lessons SET vetoed_at = NULL, updated = ? WHERE id = ?",
                           (now_iso, lesson["id"]))
        _record_event(store, now_iso, "commons_unvetoed", commons=lesson["id"], record=lesson["record_id"],
                      text=lesson["text"])
    return lesson, True


def set_commons_veto(store, ident: str, now: datetime, *, vetoed: bool = True) -> dict:
    """Veto (or unveto) a received lesson, then render at once, so that its file leaves (or
    comes back to) the memory folders now: what ``openmemory veto RECORD_ID`` and the page's
    button do, one code path (as :func:`openmemory_local.lessons.set_veto` for an own lesson).

    Returns ``{"commons", "short", "changed", "render", "pending", "message"}``. Raises
    :class:`CommonsNotFound`."""
    from .render import RenderError, render
    from .sleep import SleepBusy

    word = "vetoed" if vetoed else "unvetoed"
    lesson, changed = (veto_commons if vetoed else unveto_commons)(store, ident, now)
    out: dict = {"commons": lesson["record_id"], "short": lesson["short"], "changed": changed, "render": None,
                 "pending": None}
    if not changed:
        out["message"] = f"Received lesson {lesson['short']} was already {word if vetoed else 'not vetoed'}."
        return out
    try:
        result = render(store, now).to_dict()
    except (SleepBusy, RenderError) as exc:
        out["pending"] = str(exc)
        out["message"] = (f"Received lesson {lesson['short']} {word}; the next render "
                          + ("removes its file" if vetoed else "may write it again") + f" ({exc}).")
        return out
    out["render"] = result
    name = lesson["file_name"] or file_name_for(lesson["record_id"])
    paths = [p for t in result["targets"] for p in t["removed" if vetoed else "written"]
             if str(p).rsplit("/", 1)[-1] == name]
    folders = f"{len(paths)} memory folder{'s' if len(paths) != 1 else ''}"
    out["message"] = (f"Received lesson {lesson['short']} vetoed: never rendered again; its file was removed from "
                      f"{folders}." if vetoed else
                      f"Received lesson {lesson['short']} unvetoed: written again into {folders} (those it is "
                      "chosen for).")
    return out


#: The node's key lists this engine edits: the owner's team, and the blocked authors.
KEY_LISTS = {"team": "the team", "blocked": "the blocked authors"}


def change_key_list(store, name: str, action: str, key: str | None, now: datetime, *, note: str = "",
                    link=None) -> dict:
    """``openmemory team add|remove KEY`` and ``openmemory commons block|unblock KEY`` (the
    page's buttons too, one code path): the node's list changes (it holds them: a blocked
    key's records are dropped at receipt there, its lessons revoked, its votes not counted),
    then this engine pulls and renders at once, so that a blocked author's lessons (and their
    near-copies) leave every memory folder now, and a team member's arrive. Raises
    :class:`openmemory_local.node_link.NodeUnavailable` when no node runs (the lists live in
    the node) and NodeError for a key the node refuses."""
    from .node_link import open_link
    from .render import RenderError, render
    from .sleep import SleepBusy

    if name not in KEY_LISTS:
        raise ValueError(f"no key list {name!r}")
    link = link or open_link(store.config)
    if action == "add":
        data = link.add_key(name, str(key), note)
    elif action == "remove":
        data = link.remove_key(name, str(key))
    else:
        data = link.keys(name)
    out: dict = {"list": name, "action": action, "keys": data.get(name, []), "changed": data.get("changed", 0),
                 "added": data.get("added"), "key": data.get("key")}
    if action in ("add", "remove"):
        out["pull"] = pull(store, link, now)
        try:
            out["render"] = render(store, now).to_dict()
        except (SleepBusy, RenderError) as exc:
            out["render"] = None
            out["pending"] = str(exc)
    return out


def recall_commons(store, query: str, k: int = 3, threshold: float = 0.35) -> list[dict]:
    """Received lessons (common, or candidates when rendered) whose text resembles
    ``query``, best first: each with ``similarity``."""
    import numpy as np

    where, params = _eligible(store.config)
    rows = _one_per_group(_rows(store, where, params))
    if not rows or k <= 0:
        return []
    q = embed(query)
    scored = []
    for row in rows:
        sim = float(np.dot(q, embed(row["text"])))
        if sim >= threshold:
            row["similarity"] = round(sim, 4)
            scored.append(row)
    scored.sort(key=lambda r: (r["status"] != "common", -r["similarity"], r["record_id"]))
    return scored[:k]


def stale_rendered(store) -> list[str]:
    """Memory folders holding a commons file of a lesson that may no longer be there
    (revoked, vetoed, faded, or, without ``Config.commons_candidates``, a candidate)."""
    return stale_folders(store.conn, store.config.commons_candidates, store.config.commons_team_candidates)


def refresh_folders(store, now: datetime, *, pull_first: bool = True, link=None, max_pages: int = 20) -> dict:
    """What the SessionStart hook does beyond its fast path: pull, then re-render the
    projects whose memory folders hold a commons file that may no longer be there (which
    removes it, and its line in MEMORY.md). A render already running is left to do it."""
    from .node_link import NodeError, NodeUnavailable, open_link
    from .render import render
    from .sleep import SleepBusy

    import time

    started = time.monotonic()
    out: dict = {"pull": None, "rendered": [], "removed": [], "busy": None}
    if pull_first:
        try:
            pulled = pull(store, link or open_link(store.config), now, max_pages=max_pages)
            out["pull"] = f"{pulled['received']} new, {pulled['status_changed']} changed, {pulled['revoked']} revoked"
        except (NodeUnavailable, NodeError) as exc:
            out["pull"] = f"the node did not answer ({exc})"
    out["pull_seconds"] = round(time.monotonic() - started, 3)
    folders = _memory_folders(store)
    for folder in stale_rendered(store):
        cwd = folders.get(folder)
        if cwd is None:  # a folder given with --memory-dir: its next render
            continue
        try:
            result = render(store, now, project=cwd)
        except SleepBusy as exc:
            out["busy"] = str(exc)
            break
        out["rendered"].append(cwd)
        out["removed"] += [path for target in result.targets for path in target["removed"]]
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def describe(row: dict) -> str:
    """One line for people: short id, status, text."""
    return f"{row['short']}  {row['status_text']}: {clip(row['text'], 160)}"
