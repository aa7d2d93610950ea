"""Received lessons tested as claims, on evidence the lesson could not have caused.

Each received claim is predicted in shadow (:func:`predict_commons`), shown or not; a later
session of this agent that meets the claim's program is its evidence (:func:`verify_commons`):
the *failure* part is confirmed only by this agent's own error of the same program whose
failure line matches the quote (:func:`failure_met`), the *fix* part only when that error's own
resolution is the claim's fix (:func:`fix_met`); evidence dated after the lesson was shown in
that family's memory folder is *exposed*, reported as such and never counted. :func:`attest`
sends the verdicts to the node as attestations (:func:`attestation_body`).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from openmemory_protocol import claims as claim_rules

from openmemory_local.commons.choose import Chooser, relevance
from openmemory_local.commons.receive import (_MAX_SESSIONS, _MAX_WINDOW, _TESTABLE, claim_of, lesson_details,
                                              lesson_probes, received_rows, record_commons_event)
from openmemory_local.core.clock import DAY, epoch, iso
from openmemory_local.core.jsonio import loads
from openmemory_local.sleep.lesson_text import prediction_text
from openmemory_local.sleep.lessons import project_families
from openmemory_local.sleep.situations import facets, probe_matches, subject
from openmemory_local.text.embed import feature_cosine, features
from openmemory_local.text.normalize import normalise
from openmemory_local.storage import commons as commons_table
from openmemory_local.storage.episodes import episodes_between, errors_before


def memory_folders(store) -> dict[str, str]:
    """Real path of each project's memory folder -> the project (its working directory)."""
    import os

    from openmemory_local.core.config import memory_dir_for

    claude_dir = store.config.claude_dir
    if claude_dir is None:
        return {}
    return {os.path.realpath(memory_dir_for(claude_dir, cwd)): cwd for cwd in project_families(store)}


def _rendered_families(store) -> dict[int, set[str]]:
    """Received lesson -> the project families whose memory folders hold its file now."""
    folders = memory_folders(store)
    if not folders:
        return {}
    families = project_families(store)
    out: dict[int, set[str]] = defaultdict(set)
    for lesson_id, memory_dir in commons_table.commons_files_shown(store):
        cwd = folders.get(memory_dir)
        out[lesson_id].update(families.get(cwd, ()) if cwd else ())
    return dict(out)


def predict_commons(store, now: datetime) -> dict:
    """Every received claim makes a prediction in each project family whose sessions run what
    it names, rendered there or not (*shadow testing*: a stranger's candidate is tested by
    this agent's sessions without ever being shown to it); and an open prediction whose lesson
    is now rendered in its family's memory folder is *exposed* from now on (evidence after
    that could have been caused by the lesson: it never counts for it)."""
    from openmemory_local.sleep.passes import _recent_heads

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
        open_preds = {(cid, fam): (pid, exposed)
                      for pid, cid, fam, _made, _probes, exposed in commons_table.open_commons_predictions(store)}
        for lesson in received_rows(store, _TESTABLE):
            for fam, profile in sorted(profiles.items()):
                held = open_preds.get((lesson["id"], fam))
                shown = fam in rendered.get(lesson["id"], ())
                if held is not None:
                    if shown and held[1] is None:
                        commons_table.set_prediction_exposed(store, held[0], now_iso)
                        out["exposed"].append(held[0])
                    continue
                if relevance(lesson["terms"], profile)[0] < store.config.commons_min_relevance:
                    continue
                expected = lesson_probes(lesson["kind"], lesson["terms"], _recent_heads(store, sorted(cwds_of[fam])))
                text = prediction_text(lesson_details(lesson["kind"], lesson["terms"]), fam, lesson["short"])
                pid = commons_table.insert_commons_prediction(store, lesson["id"], fam, now_iso, text, expected,
                                                              now_iso if shown else None)
                out["made"].append(pid)
    return out


def _ep_family(project, fields) -> str:
    from openmemory_local.sleep.passes import _ep_family as sleep_family

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
        # the claim's fix is a shown command (short quoted code kept: ``sed -i 's/^    /\t/' Makefile``);
        # the norm has no quoted strings: either form of this session's call may be the claim's
        return kind == claim.fix_how and any(claim_rules.command_matches(claim.fix, str(seen))
                                             for seen in (res.get("norm"), res.get("command")) if seen)
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
                 for pid, cid, fam, made, probes_json, exposed_at in commons_table.open_commons_predictions(store)]
        out["open"] = len(preds)
        if preds:
            lessons = {row["id"]: row for row in received_rows(store, f"id IN ({','.join(str(p[1]) for p in preds)})")}
            claims = {cid: _claim(row) for cid, row in lessons.items()}
            episodes = episodes_between(store, min(p[3] for p in preds), now_iso)
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
                    commons_table.confirm_commons_prediction(store, pid, now_iso, max(sessions, matched), matched,
                                                             eid, fix, exposed)
                    out["confirmed"].append(pid)
                elif seen["matched"] and epoch(now) - epoch(made) >= window:
                    commons_table.fail_commons_prediction(store, pid, now_iso, len(seen["matched"]))
                    out["failed"].append(pid)
        out["attestations"] = _decide(store, now)
    return out


def met_before(store, lesson: dict) -> bool:
    """Whether this agent's own episodes met the claim's failure (the same program failing the
    same way) before it received the lesson: then its vote does not count, by design."""
    claim = _claim(lesson)
    if claim is None:
        return False
    for eid, kind, project, fields_json in errors_before(store, lesson["received"]):
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
    for row in commons_table.resolved_unattested(store):
        by_lesson[row[0]].append(row[1:])
    for cid, preds in sorted(by_lesson.items()):
        ids = [p[0] for p in preds]
        lesson = received_rows(store, "id = ?", (cid,))[0]
        if lesson["mine"] or lesson["status"] == "revoked" or lesson["vetoed"] or lesson["refused"]:
            commons_table.set_predictions_attestation(store, ids, 0)
            continue
        failure, fix, exposed, sessions, matched = _verdicts(preds)
        verdict = "confirmed" if failure == "confirmed" else "failed"
        window = int(min(_MAX_WINDOW, max(1, max(epoch(now) - epoch(p[4]) for p in preds))))
        last = commons_table.last_live_attestation(store, cid)
        if last and (last[1] or last[5], last[2] or "untested", bool(last[3])) == (failure, fix, exposed) \
                and epoch(now) - epoch(last[4]) < config.commons_window_days * DAY:
            commons_table.set_predictions_attestation(store, ids, last[0])
            continue
        aid = commons_table.insert_attestation(store, cid, lesson["record_id"], verdict, met_before(store, lesson),
                                               sessions, matched, window, now_iso, failure, fix, exposed)
        commons_table.set_predictions_attestation(store, ids, aid)
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
    from openmemory_local.commons.node_link import NodeError, NodeUnavailable

    now_iso = iso(now)
    out = {"sent": [], "refused": [], "dropped": [], "waiting": 0}
    pending = commons_table.pending_attestations(store)
    if not pending:
        return out
    node_key = str(link.node().get("public_key") or "")
    for row in pending:
        aid, cid, record = row["id"], row["commons_id"], row["lesson_record"]
        lesson = received_rows(store, "id = ?", (cid,))[0]
        body = attestation_body(lesson, row)
        if lesson["author"] == node_key or node_key in lesson["authors"] or lesson["mine"] \
                or lesson["status"] == "revoked" or lesson["vetoed"] or lesson["refused"] or body is None:
            with store.write():
                commons_table.set_attestation_dropped(store, aid)
            out["dropped"].append(aid)
            continue
        try:
            answer = link.post("/v1/attest", body)
        except NodeUnavailable:
            out["waiting"] = len(pending) - len(out["sent"]) - len(out["refused"]) - len(out["dropped"])
            break
        except NodeError as exc:
            with store.write():
                commons_table.set_attestation_refused(store, aid, f"{exc.status} {exc.code}: {exc.message}"[:300])
            out["refused"].append(aid)
            continue
        answer = answer if isinstance(answer, dict) else {}
        with store.write():
            commons_table.set_attestation_sent(store, aid, now_iso, answer.get("id"), answer.get("status"))
            record_commons_event(store, now_iso, "commons_attested", commons=cid, record=record, verdict=row["verdict"],
                          failure=row["failure"], fix=row["fix"], exposed=bool(row["exposed"]),
                          met_before=bool(row["met_before"]), sessions=row["sessions"], matched=row["matched"],
                          window=row["window"], attestation=answer.get("id"), node_status=answer.get("status"),
                          text=lesson["text"])
        out["sent"].append(aid)
    return out
