"""The commons layer: lessons other agents published, received through this agent's node.

A received lesson is someone else's observation. It is kept apart from the agent's own
lessons (table ``commons_lessons``, never ``lessons``: never a surprise, never a member of an
own lesson, never published as the agent's own), rendered as its own part of the memory
folder below the personal layer (:mod:`openmemory_local.render.commons_part`), and tested by this
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
    it, as sleep compares an own lesson's (the facets of :mod:`openmemory_local.sleep.situations`
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
probes are those of an own lesson with the same subject (:func:`openmemory_local.sleep.situations.probes`),
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
from datetime import datetime

from openmemory_protocol import claims as claim_rules

from openmemory_local.core.clock import iso
from openmemory_local.storage import commons as commons_table
from openmemory_local.storage.trust_boundary import stale_folders
from openmemory_local.ingest.episodes import command_heads
from openmemory_local.core.jsonio import dumps, loads
from openmemory_local.sleep.lesson_text import clip
from openmemory_local.text.normalize import normalise
from openmemory_protocol.observation import is_observation
from openmemory_local.sleep.situations import probes

__all__ = [
    "STATUSES",
    "CommonsNotFound",
    "short_id",
    "file_name_for",
    "read_text",
    "lesson_probes",
    "status_text",
    "public_view",
    "apply_changes",
    "pull",
    "commons_rows",
    "attestations_of",
    "find_commons",
    "veto_commons",
    "unveto_commons",
    "withdraw",
    "stale_rendered",
    "team_keys",
    "blocked_keys",
    "apply_lists",
    "claim_of",
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


def lesson_details(kind: str, terms: dict) -> dict:
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
    return probes(lesson_details(kind, terms), terms.get("signature") or "", programs)


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


def received_rows(store, where: str = "1", params=()) -> list[dict]:
    return [_row(r) for r in commons_table.received_lesson_rows(store, _COLUMNS, where, params)]


def public_view(row: dict) -> dict:
    """A received lesson for tools and the MCP server: what it is, marked as received."""
    keys = ("record_id", "short", "kind", "text", "status", "status_text", "confirmers", "threshold", "policy",
            "received", "file_name", "relevance", "why", "similarity")
    view = {k: row[k] for k in keys if k in row}
    view["source"] = "commons"
    view["note"] = "reported by other agents through the Open Memory commons, not by this agent's own sessions"
    return view


# --- pull ---------------------------------------------------------------------------------------


def record_commons_event(store, at: str, kind: str, **detail) -> None:
    from openmemory_local.storage.store import record_event

    record_event(store, at, kind, None, None, **detail)


def withdraw(store, commons_id: int, at: str) -> None:
    """Close a commons lesson's open predictions and drop its unsent attestations."""
    commons_table.withdraw_received(store, commons_id, at)


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


def apply_changes(store, entries: list, node_key: str, now: datetime, team=None) -> dict:
    """Take one page of ``GET /v1/changes`` into the store (inside the caller's transaction
    or one of its own). Malformed entries are counted and skipped, never stored. ``team``: the
    hex keys of the owner's team (default: as last pulled, :func:`team_keys`)."""
    now_iso = iso(now)
    team = frozenset(team_keys(store) if team is None else team)
    out = {"received": 0, "updated": 0, "status_changed": 0, "revoked": 0, "mine": 0, "bad": 0,
           "attestations": 0}
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
                        commons_table.set_group_tally(store, group, now_iso)
                if record.get("signer") == node_key and isinstance(entry.get("id"), str):
                    commons_table.set_attestation_node_status(store, entry["id"], entry.get("status"))
                out["attestations"] += 1
            elif kind not in ("revocation", "vouch"):
                out["bad"] += 1
    return out


def _apply_lesson(store, fields: dict, group: dict, node_key: str, now_iso: str, out: dict,
                  team: frozenset[str] = frozenset()) -> None:
    authors = group.get("authors") or [fields["author"]]
    mine = fields["author"] == node_key or node_key in authors
    row = commons_table.received_by_record(store, fields["record_id"])
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
        cid = commons_table.insert_received(store, sets)
        if mine:
            out["mine"] += 1
        else:
            out["received"] += 1
            record_commons_event(store, now_iso, "commons_received", commons=cid, record=fields["record_id"],
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
                detail["rendered_in"] = commons_table.folders_rendering(store, cid)
                record_commons_event(store, now_iso, "commons_revoked", **detail)
            else:
                record_commons_event(store, now_iso, "commons_status", **detail)
        if fields["status"] == "revoked":
            withdraw(store, cid, now_iso)
    else:
        out["updated"] += 1
    commons_table.update_received(store, cid, sets)


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
            commons_table.set_layers(store, team)
        if blocked is not None:
            store.set_meta("commons_blocked", dumps(sorted(set(blocked))))
            commons_table.set_refused_authors(store, blocked, _BLOCKED)


def _node_lists(link) -> dict[str, list[str]]:
    """The node's team and blocked lists (an older node without them: left out)."""
    from openmemory_local.commons.node_link import NodeError

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

    Raises :class:`openmemory_local.commons.node_link.NodeUnavailable` when no node answers (what
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
            commons_table.mark_authored_by(store, node_key)
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

    from openmemory_local.storage.episodes import session_command_heads

    return sorted(domains_of_programs(session_command_heads(store)))


def report_domains(store, link) -> dict:
    """Tell the node the domains this agent's projects touch (``PUT /v1/domains``): it
    follows those and ``general``, so that it takes the lessons of its agent's ecosystems and
    not the others' (PROTOCOL.md, "Topics")."""
    domains = project_domains(store)
    answer = link.follow_domains(domains)
    return {"domains": domains, "changed": bool(isinstance(answer, dict) and answer.get("changed"))}


# --- predict, verify, attest --------------------------------------------------------------------


#: Received lessons that are tested (in shadow unless rendered): a claim, not this agent's own,
#: not refused, revoked or vetoed.
_TESTABLE = ("status IN ('candidate', 'common', 'faded') AND mine = 0 AND vetoed_at IS NULL AND refused IS NULL "
             "AND claim IS NOT NULL")


# --- views, veto ---------------------------------------------------------------------------------


def commons_rows(store, *, include_all: bool = False) -> list[dict]:
    """Every received lesson (revoked and this agent's own too with ``include_all``), newest
    first, with where it is rendered, its predictions and this agent's attestations."""
    where = "1" if include_all else "status != 'revoked' AND mine = 0"
    rows = received_rows(store, where)
    rows.sort(key=lambda r: (-r["created"], r["record_id"]))
    rendered = defaultdict(list)
    for lesson_id, path, state in commons_table.commons_files(store):
        rendered[lesson_id].append({"path": path, "state": state})
    preds = defaultdict(lambda: {"open": 0, "confirmed": 0, "failed": 0, "withdrawn": 0})
    for cid, state, n in commons_table.prediction_counts(store):
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
    for (cid, verdict, met, sessions, matched, window, made, state, record_id, node_status, failure, fix,
         exposed) in commons_table.attestation_rows(store, ids):
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
    found = received_rows(store, "record_id LIKE ? OR record_id LIKE ?", (text + "%", "1220" + text + "%"))
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
        write_commons_veto(store, lesson["id"], now_iso, why=why)
    return lesson, True


def write_commons_veto(store, commons_id: int, at: str, *, why: str, **detail) -> str | None:
    """Write a received lesson's veto unless it has one: the one place it is written, whichever way
    it came (:func:`veto_commons`, its file deleted from a memory folder: ``why`` and ``detail`` say
    which, in the ``commons_vetoed`` event). The same flag with the same meaning as an own lesson's
    veto (rule L7 of :mod:`openmemory_local.sleep.lifecycle`): never rendered, never attested; its
    open predictions are withdrawn and its unsent attestations dropped. Returns its record id if it
    was vetoed now, else None."""
    vetoed = commons_table.veto_received_once(store, commons_id, at)
    if vetoed is None:
        return None
    record_id, text = vetoed
    withdraw(store, commons_id, at)
    record_commons_event(store, at, "commons_vetoed", commons=commons_id, record=record_id, text=text, why=why,
                         **detail)
    return record_id


def unveto_commons(store, ident: str, now: datetime) -> tuple[dict, bool]:
    lesson = find_commons(store, ident)
    if not lesson["vetoed"]:
        return lesson, False
    now_iso = iso(now)
    with store.write():
        commons_table.set_received_veto(store, lesson["id"], None, now_iso)
        record_commons_event(store, now_iso, "commons_unvetoed", commons=lesson["id"], record=lesson["record_id"],
                      text=lesson["text"])
    return lesson, True


#: The node's key lists this engine edits: the owner's team, and the blocked authors.
KEY_LISTS = {"team": "the team", "blocked": "the blocked authors"}


def stale_rendered(store) -> list[str]:
    """Memory folders holding a commons file of a lesson that may no longer be there
    (revoked, vetoed, faded, or, without ``Config.commons_candidates``, a candidate)."""
    return stale_folders(store.conn, store.config.commons_candidates, store.config.commons_team_candidates)


def describe(row: dict) -> str:
    """One line for people: short id, status, text."""
    return f"{row['short']}  {row['status_text']}: {clip(row['text'], 160)}"
