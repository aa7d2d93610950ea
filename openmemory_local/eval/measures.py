"""``openmemory eval``: the paper's six measures (section 7), read from the store.

Each measure is cheap, local, and computed from the same store the engine keeps, per week (the
ISO week, Monday 00:00 UTC, of the moment it counts) and overall:

1. *repeat-yourself rate*: of the person's corrections, the share that restate one made in an
   earlier session of the same project family, in the same or other words
   (:func:`openmemory_local.ingest.corrections.same_correction`: the same corrected program and a
   preferred alternative in common, or their words' cosine; not lesson membership, which groups
   "use poetry, not pip" with "use uv instead of pip");
2. *repeated-error rate*: failures (error episodes of ``Config.surprise_failures``) that a
   lesson formed before them already described (the failure joined a lesson learned before it
   happened), per session, and as a share of the failures;
3. *prediction accuracy*: confirmed / (confirmed + failed), by the week a prediction was decided;
   open and withdrawn ones are counted beside;
4. *surprises per session*: failures and corrections per session, by the week they happened;
5. *the two-agent result*: read from an experiment's output folder (``--experiment DIR``,
   ``python -m simulations.two_agents --out DIR`` writes ``summary.json`` there): agent B's
   repeated-error rate on the errors only agent A had met, per arm; said so when the folder
   holds no summary;
6. *retrieval quality*: for each failure of measure 2, recall over the memories that existed
   before it (other sessions only) ranked by relevance (:mod:`openmemory_local.eval.retrieval`):
   recall@1/3/10 and MRR of finding the lesson's evidence (its earlier failures), for the
   hashed embedding (what recall uses), BM25 and their fusion (and the learned embedder with
   ``--learned`` and the ``learned`` extra), on the latest 500 such failures at most, ranks up
   to 100 (MRR@100). Relevance only: recency and strength at that past moment are not kept.

``--split TIME`` learns from what came before TIME and scores only what came after: a copy of
the store (a temporary folder; the store itself is only read) has its lessons, predictions and
events removed and is replayed up to TIME (:func:`openmemory_local.sleep.replay.replay`, then a sleep
at TIME). Then, for what happened after TIME: (1) corrections that restate one made before it,
(2) failures that a lesson formed before it described (and, in 6, how many recall put that
lesson's evidence, from before TIME, in the top 3), (3) the predictions open at TIME as the
sessions after it decided them, (4) surprises per session after it.

:func:`evaluate` returns plain data (``openmemory eval --json``); :func:`table` the terminal
text; ``--plots DIR`` draws one PNG per measure (:mod:`openmemory_local.eval.plots`, matplotlib: the
``eval`` extra, imported only then).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

from openmemory_local.core.clock import iso, parse_time
from openmemory_local.storage import measures as tables

__all__ = ["evaluate", "table", "two_agent_result", "week_of", "register", "EvalError"]

SUMMARY_FILE = "summary.json"
#: Measure 6 scores at most this many failures, the latest (each ranks every memory of the store).
MAX_RETRIEVAL_QUERIES = 500
#: ... looking at the first 100 memories of each ranking (MRR counts a first hit beyond as 0).
RETRIEVAL_DEPTH = 100


class EvalError(ValueError):
    """An evaluation that cannot be made (a bad --split, an unreadable experiment summary)."""


def week_of(stamp: str) -> str:
    """The Monday (UTC date) of the ISO week of a stored time."""
    day = parse_time(stamp).date()
    return (day - timedelta(days=day.weekday())).isoformat()


def _rate(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


# --- reading the store ----------------------------------------------------------------------


def _surprise_kinds(config) -> tuple[str, list]:
    kinds = list(config.surprise_failures)
    return ",".join("?" * len(kinds)), kinds


def _sessions(store, after: str | None) -> dict[str, str]:
    """session id -> when it started (session episodes), after ``after`` if given."""
    rows = tables.session_starts(store, after)
    return {sid: created for sid, created in rows if sid}


def _surprises(store, config, after: str | None) -> list[tuple]:
    """(episode id, kind, session, created, lesson id or None) of failures and corrections."""
    _marks, kinds = _surprise_kinds(config)
    return tables.surprise_rows(store, after, kinds)


def _corrections_said(store) -> list[tuple]:
    """(id, session, created, family, terms) of every correction, oldest first (measure 1)."""
    from openmemory_local.ingest.corrections import correction_terms
    from openmemory_local.sleep.passes import _ep_family
    out = []
    for eid, session_id, created, project, fields in tables.correction_rows(store):
        f = json.loads(fields) if fields else {}
        out.append((eid, session_id, created, _ep_family(project, f),
                    correction_terms(f.get("message") or "", f.get("agent_action"))))
    return out


def _restated(said: list[tuple], eid: int, session_id: str | None, created: str, until: str | None = None) -> bool:
    """Whether the correction ``eid`` restates one made before it (and before ``until``, a split's
    time, when given) in another session of its project family, in the same or other words
    (:func:`openmemory_local.ingest.corrections.same_correction`: the one rule of "the same correction";
    sharing a lesson is not it, since lessons group by resemblance of the whole text)."""
    from openmemory_local.ingest.corrections import same_correction
    mine = next((row for row in said if row[0] == eid), None)
    if mine is None:
        return False
    return any(row[2] < created and (until is None or row[2] <= until) and row[1] != session_id
               and row[3] == mine[3] and same_correction(row[4], mine[4]) for row in said)


def _weekly(rows, key, fields) -> list[dict]:
    weeks: dict[str, dict] = {}
    for row in rows:
        entry = weeks.setdefault(week_of(key(row)), {f: 0 for f in fields})
        for f in fields:
            entry[f] += row.get(f, 0)
    return [dict(week=w, **v) for w, v in sorted(weeks.items())]


def _measure_counts(store, config, *, after: str | None,
                    lessons_before: dict[int, str] | None) -> tuple[dict, dict, dict, list]:
    """Measures 1, 2 and 4 (and the queries of 6). ``lessons_before``: lesson id -> when it was
    learned; ``after``: a split's time (corrections then restate only ones made before it)."""
    sessions = _sessions(store, after)
    surprises = _surprises(store, config, after)
    learned = lessons_before if lessons_before is not None else tables.learned_times(store)
    rows1, rows2, rows4, queries = [], [], [], []
    said = _corrections_said(store)
    for eid, kind, session_id, created, lesson_id in surprises:
        rows4.append({"at": created, "surprises": 1})
        if kind == "correction":
            repeat = _restated(said, eid, session_id, created, until=after)
            rows1.append({"at": created, "corrections": 1, "repeats": int(repeat)})
            continue
        when = learned.get(lesson_id) if lesson_id else None
        described = bool(when and when < created)
        rows2.append({"at": created, "failures": 1, "described": int(described)})
        if described:
            queries.append((eid, session_id, created, lesson_id))
    for sid, created in sessions.items():
        rows4.append({"at": created, "sessions": 1})
        rows2.append({"at": created, "sessions": 1})
    w1 = _weekly(rows1, lambda r: r["at"], ("corrections", "repeats"))
    for w in w1:
        w["rate"] = _rate(w["repeats"], w["corrections"])
    c1, r1 = sum(r["corrections"] for r in rows1), sum(r["repeats"] for r in rows1)
    w2 = _weekly(rows2, lambda r: r["at"], ("failures", "described", "sessions"))
    for w in w2:
        w["per_session"], w["share"] = _rate(w["described"], w["sessions"]), _rate(w["described"], w["failures"])
    f2 = sum(r.get("failures", 0) for r in rows2)
    d2 = sum(r.get("described", 0) for r in rows2)
    s2 = len(sessions)
    w4 = _weekly(rows4, lambda r: r["at"], ("surprises", "sessions"))
    for w in w4:
        w["per_session"] = _rate(w["surprises"], w["sessions"])
    n4 = sum(r.get("surprises", 0) for r in rows4)
    return (
        {"overall": {"corrections": c1, "repeats": r1, "rate": _rate(r1, c1)}, "weeks": w1},
        {"overall": {"failures": f2, "described": d2, "sessions": s2, "per_session": _rate(d2, s2),
                     "share": _rate(d2, f2)}, "weeks": w2},
        {"overall": {"surprises": n4, "sessions": s2, "per_session": _rate(n4, s2)}, "weeks": w4},
        queries,
    )


def _predictions(store, ids: list[int] | None = None) -> dict:
    rows = tables.prediction_outcomes(store, ids)
    counts = {s: 0 for s in ("confirmed", "failed", "open", "withdrawn")}
    weeks: dict[str, dict] = {}
    for state, resolved in rows:
        counts[state] = counts.get(state, 0) + 1
        if state in ("confirmed", "failed") and resolved:
            entry = weeks.setdefault(week_of(resolved), {"confirmed": 0, "failed": 0})
            entry[state] += 1
    out_weeks = [dict(week=w, **v, accuracy=_rate(v["confirmed"], v["confirmed"] + v["failed"]))
                 for w, v in sorted(weeks.items())]
    decided = counts["confirmed"] + counts["failed"]
    return {"overall": dict(counts, decided=decided, accuracy=_rate(counts["confirmed"], decided)),
            "weeks": out_weeks}


def _retrieval(store, queries: list[tuple], methods: tuple[str, ...], *, before: str | None,
               evidence: dict[int, set] | None = None) -> dict:
    """Measure 6: rank every memory that existed before each query (other sessions), score the
    lesson's earlier members as the relevant ones."""
    from openmemory_local.eval.retrieval import rank, score

    if not queries:
        return {"overall": {m: {"queries": 0} for m in methods}, "weeks": []}
    considered = len(queries)
    queries = queries[-MAX_RETRIEVAL_QUERIES:]  # the latest: each query ranks the whole store
    import numpy as np

    corpus = tables.episode_corpus(store)
    position = {row[0]: i for i, row in enumerate(corpus)}
    created_at = np.array([row[2] for row in corpus])
    session_of = np.array([row[1] or "" for row in corpus])
    members: dict[int, set] = {}
    for lesson_id, episode_id in tables.memberships(store):
        members.setdefault(lesson_id, set()).add(episode_id)
    texts = [row[3] for row in corpus]
    qtexts, exclude, relevant, weeks = [], [], [], []
    for eid, session_id, created, lesson_id in queries:
        cut = before or created
        mask = created_at >= cut
        if session_id:
            mask |= session_of == session_id
        mask[position[eid]] = True
        skip = set(np.flatnonzero(mask).tolist())
        pool = evidence.get(lesson_id) if evidence is not None else members.get(lesson_id, set())
        rel = {position[m] for m in pool if m in position} - skip
        if not rel:
            continue
        qtexts.append(texts[position[eid]])
        exclude.append(skip)
        relevant.append(rel)
        weeks.append(week_of(created))
    cache: dict = {}
    overall, by_week = {}, {}
    for method in methods:
        ranking = rank(method, qtexts, texts, exclude, cache, depth=RETRIEVAL_DEPTH)
        overall[method] = score(ranking, relevant)
        for w in sorted(set(weeks)):
            picks = [n for n, wk in enumerate(weeks) if wk == w]
            by_week.setdefault(w, {})[method] = score([ranking[n] for n in picks], [relevant[n] for n in picks])
    return {"overall": overall, "weeks": [dict(week=w, **v) for w, v in sorted(by_week.items())],
            "failures": considered, "scored": len(queries)}


# --- the two-agent experiment ---------------------------------------------------------------


def two_agent_result(folder: str | Path | None) -> dict:
    """Measure 5 from an experiment's output folder (its ``summary.json``)."""
    if folder is None:
        return {"status": "no experiment given (--experiment DIR: the folder of "
                          "`python -m simulations.two_agents --out DIR`)"}
    path = Path(folder) / SUMMARY_FILE
    if not Path(folder).is_dir():
        return {"status": f"{folder} is not a folder", "folder": str(folder)}
    if not path.is_file():
        return {"status": f"{folder} holds no {SUMMARY_FILE}: the experiment has not written its summary there",
                "folder": str(folder)}
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvalError(f"{path} cannot be read: {exc}") from None
    arms = {}
    for name, arm in (summary.get("arms") or {}).items():
        if not isinstance(arm, dict):
            continue
        arms[name] = {"b_repeated_error_rate": arm.get("b_repeated_error_rate"),
                      "by_day": arm.get("b_repeated_error_rate_by_day") or [],
                      "ingest_check_ok": arm.get("ingest_check_ok")}
    return {"status": "read", "folder": str(folder), "what": summary.get("what"), "world": summary.get("world"),
            "agent_model": summary.get("agent_model"), "arms": arms,
            "not_measured": summary.get("not_measured") or {}}


# --- the whole evaluation ---------------------------------------------------------------------


def _methods(learned: bool) -> tuple[str, ...]:
    from openmemory_local.eval.retrieval import FAST_METHODS

    return (*FAST_METHODS, "learned", "fusion-all") if learned else FAST_METHODS


def evaluate(store, now: datetime, *, split: datetime | None = None, experiment=None, learned: bool = False) -> dict:
    """The six measures (see the module docstring) as plain data."""
    if learned:
        from openmemory_local.core.embedders import EmbedderUnavailable, learned_available

        if not learned_available():
            from openmemory_protocol.extras import absent, missing_extra

            raise EmbedderUnavailable(missing_extra("learned", "--learned", absent("learned")))
    methods = _methods(learned)
    out = {"now": iso(now), "split": iso(split) if split else None, "home": str(store.config.home)}
    if split is None:
        m1, m2, m4, queries = _measure_counts(store, store.config, after=None, lessons_before=None)
        m3 = _predictions(store)
        m6 = _retrieval(store, queries, methods, before=None)
        out["episodes"] = tables.episode_count(store)
    else:
        m1, m2, m3, m4, m6, extra = _split(store, split, methods)
        out.update(extra)
    out["measures"] = {"repeat_yourself": m1, "repeated_errors": m2, "prediction_accuracy": m3,
                       "surprises_per_session": m4, "two_agents": two_agent_result(experiment), "retrieval": m6}
    return out


def _split(store, split: datetime, methods) -> tuple:
    """Learn on a copy up to ``split``, then score what came after (see the module docstring)."""
    from openmemory_local.sleep.replay import replay
    from openmemory_local.sleep.passes import learn, sleep, verify
    from openmemory_local.storage.store import Store

    cut = iso(split)
    last = tables.last_times(store)
    tmp = Path(tempfile.mkdtemp(prefix="openmemory-eval-"))
    try:
        tables.copy_database(store, tmp / "openmemory.db")
        config = store.config.with_(home=tmp, claude_dir=None, lesson_model_url=None, sources=())
        with Store.open(config) as copy:
            tables.forget_learning(copy)
            replay(copy, split)
            sleep(copy, split, phrase=False)
            lessons_before = tables.learned_times(copy, formed_only=True)
            evidence: dict[int, set] = {}
            for lesson_id, episode_id in tables.memberships(copy):
                evidence.setdefault(lesson_id, set()).add(episode_id)
            open_at_split = tables.open_prediction_ids(copy)
            # what came after: the surprises join the groups they resemble, the sessions decide the
            # predictions open at the split (once every session is over: its end, plus the settling time)
            end = max(filter(None, [cut, *(last or ())]))
            after = parse_time(end) + timedelta(minutes=copy.config.prediction_settle_minutes + 1)
            with copy.write():
                learn(copy, after)
                verify(copy, after)
            m1, m2, m4, queries = _measure_counts(copy, copy.config, after=cut, lessons_before=lessons_before)
            m3 = _predictions(copy, open_at_split)
            m6 = _retrieval(copy, queries, methods, before=cut, evidence=evidence)
            extra = {"learned_before_split": len(lessons_before), "open_at_split": len(open_at_split),
                     "episodes_before_split": tables.episode_count(copy, created_before=cut),
                     "episodes_after_split": tables.episode_count(copy, created_after=cut)}
        return m1, m2, m3, m4, m6, extra
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --- output -------------------------------------------------------------------------------------


def _fmt(value, digits: int = 3) -> str:
    return "-" if value is None else (f"{value:.{digits}f}" if isinstance(value, float) else str(value))


def table(result: dict) -> str:
    """The terminal form: one block per measure, overall then per week."""
    m = result["measures"]
    lines = []
    head = f"Open Memory evaluation at {result['now']}"
    if result["split"]:
        head += (f", split at {result['split']}: learned from {result['episodes_before_split']} episodes before it "
                 f"({result['learned_before_split']} lessons, {result['open_at_split']} open predictions), scored on "
                 f"the {result['episodes_after_split']} after it")
    lines += [head, ""]
    r1 = m["repeat_yourself"]["overall"]
    lines.append(f"1. repeat-yourself rate      {_fmt(r1['rate'])}  ({r1['repeats']} of {r1['corrections']} "
                 "corrections restate an earlier one of the project)")
    r2 = m["repeated_errors"]["overall"]
    lines.append(f"2. repeated-error rate       {_fmt(r2['per_session'])} per session  ({r2['described']} of "
                 f"{r2['failures']} failures, {_fmt(r2['share'])}, were described by a lesson formed before them; "
                 f"{r2['sessions']} sessions)")
    r3 = m["prediction_accuracy"]["overall"]
    lines.append(f"3. prediction accuracy       {_fmt(r3['accuracy'])}  ({r3['confirmed']} confirmed of "
                 f"{r3['decided']} decided; {r3['open']} open, {r3['withdrawn']} withdrawn)")
    r4 = m["surprises_per_session"]["overall"]
    lines.append(f"4. surprises per session     {_fmt(r4['per_session'])}  ({r4['surprises']} surprises in "
                 f"{r4['sessions']} sessions)")
    r5 = m["two_agents"]
    if r5["status"] == "read" and r5["arms"]:
        for name, arm in r5["arms"].items():
            rate = arm["b_repeated_error_rate"] or {}
            parts = ", ".join(f"{k.replace('_', ' ')} {_fmt(v if not isinstance(v, dict) else v.get('rate'))}"
                              for k, v in rate.items())
            lines.append(f"5. two agents, {name + ':':<13} B's repeated-error rate on A-only errors: {parts}")
        for what, why in (r5.get("not_measured") or {}).items():
            lines.append(f"   not measured: {what}: {why}")
    else:
        lines.append(f"5. two agents                {r5['status']}")
    r6 = m["retrieval"]["overall"]
    for n, (method, s) in enumerate(r6.items()):
        label = "6. retrieval quality" if n == 0 else ""
        if not s.get("queries"):
            lines.append(f"{label:<28}{method}: no failure yet that an earlier lesson described")
            continue
        lines.append(f"{label:<28}{method:<11} recall@1 {_fmt(s['recall@1'])}  @3 {_fmt(s['recall@3'])}  "
                     f"@10 {_fmt(s['recall@10'])}  MRR {_fmt(s['mrr'])}  ({s['queries']} failures)")
    weeks = sorted({w["week"] for key in ("repeat_yourself", "repeated_errors", "prediction_accuracy",
                                         "surprises_per_session") for w in m[key]["weeks"]})
    if weeks:
        lines += ["", f"{'week of':<12} {'repeat':>7} {'rep.err/s':>10} {'accuracy':>9} {'surpr/s':>8} "
                      f"{'recall@3':>9}"]
        index = {key: {w["week"]: w for w in m[key]["weeks"]} for key in m if isinstance(m[key], dict)
                 and "weeks" in m[key]}
        first_method = next(iter(r6), None)
        for w in weeks:
            ret = (index["retrieval"].get(w) or {}).get(first_method) or {}
            lines.append(f"{w:<12} {_fmt((index['repeat_yourself'].get(w) or {}).get('rate')):>7} "
                         f"{_fmt((index['repeated_errors'].get(w) or {}).get('per_session')):>10} "
                         f"{_fmt((index['prediction_accuracy'].get(w) or {}).get('accuracy')):>9} "
                         f"{_fmt((index['surprises_per_session'].get(w) or {}).get('per_session')):>8} "
                         f"{_fmt(ret.get('recall@3')):>9}")
    if isinstance(result.get("plots"), list) and result["plots"]:
        lines += ["", "Plots: " + ", ".join(result["plots"])]
    return "\n".join(lines)


# --- the command line ----------------------------------------------------------------------------


def register(subparsers, common) -> None:
    """Add ``eval`` to the ``openmemory`` command line."""
    p = subparsers.add_parser(
        "eval", parents=[common], help="the six measures of the paper, from the store",
        description="Repeat-yourself rate, repeated-error rate, prediction accuracy, surprises per session, the "
                    "two-agent result (--experiment) and retrieval quality, per week and overall, from the store.")
    p.add_argument("--split", metavar="TIME", help="learn from what came before TIME, score only what came after")
    p.add_argument("--experiment", metavar="DIR", help="the output folder of the two-agent experiment "
                   "(python -m simulations.two_agents --out DIR)")
    p.add_argument("--plots", metavar="DIR", help="write one PNG per measure there (the `eval` extra: matplotlib)")
    p.add_argument("--learned", action="store_true", help="also measure retrieval with the learned embedder "
                   "(the `learned` extra)")
    p.set_defaults(func=_cmd_eval)


def _cmd_eval(args) -> int:
    from openmemory_local.cli.base import UsageError, _emit_json, _now, _open
    from openmemory_local.core.embedders import EmbedderUnavailable

    now = _now(args)
    split = parse_time(args.split) if args.split else None
    with _open(args) as store:
        try:
            result = evaluate(store, now, split=split, experiment=args.experiment, learned=args.learned)
        except (EvalError, EmbedderUnavailable) as exc:
            raise UsageError(str(exc)) from None
    missing = None
    if args.plots:
        from openmemory_protocol.extras import absent, missing_extra

        module = absent("eval")
        try:
            if module is None:
                from openmemory_local.eval.plots import plot_evaluation

                result["plots"] = plot_evaluation(result, args.plots)
        except ImportError as exc:  # a part of matplotlib that does not import
            module = exc
        if module is not None:  # the measures are still printed; the hint says what to install for the figures
            missing = missing_extra("eval", "--plots", module)
            result["plots"] = {"missing": missing}  # --json: where the list of files would be
    if args.json:
        _emit_json(result)
    else:
        print(table(result))
    if missing:
        print(f"openmemory eval: no plots written: {missing}", file=sys.stderr)
        return 2
    return 0

