"""The ``openmemory`` command line.

Commands: ``run``, ``ingest``, ``sleep``, ``render``, ``lessons``, ``veto``, ``unveto``,
``report``, ``recall``, ``episodes``, ``show``, ``stats``, ``publish``, ``revoke``, ``commons``, ``eval`` (and,
registered by their modules, ``mcp``, ``install``, ``uninstall``, ``hook``, ``ui``). Every command takes ``--home DIR``
(the data folder), ``--json`` (machine-readable output on stdout) and ``--now TIME`` (the
injected clock, also ``$OPENMEMORY_NOW``; later than the real clock only with ``--future`` or
``$OPENMEMORY_ALLOW_FUTURE=1``). ``run`` and ``ingest`` replay a history they bring in
(:mod:`openmemory_local.sleep.replay`).

Exit codes:

====  ==================================================================================
0     success (lines rejected as bad input and files that are not transcripts are
      reported, not errors)
1     an unexpected error (a bug: please report it with the message)
2     usage error: bad arguments, a bad ``--now``, a ``--now`` later than the clock without
      ``--future``, a ``sleep``/``run`` at a ``--now`` before the store's last sleep, a query
      without searchable words, an episode or lesson id that does not exist, nowhere to render
3     ingest finished, but some inputs could not be read (missing, unreadable, deleted
      while read, or the store stayed locked): see the summary; the rest was ingested
4     the store cannot be used (cannot create the data folder, not a database, written
      by a newer openmemory)
5     busy: another sleep or render is running on this data folder; nothing was changed
      by this one (``run``: the ingest before it was done)
6     ``install``/``uninstall``: a settings file does not parse; nothing was changed
7     ``install``/``uninstall``: a conflict (an entry we did not put there, or one edited
      since install): see the message
8     ``revoke``, ``publish disable --revoke``: the commons node is not running (or did not
      answer): nothing was revoked; start it and run the command again
130   interrupted (Ctrl-C); nothing half-written is kept
====  ==================================================================================
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import TYPE_CHECKING

from openmemory_local import __version__
if TYPE_CHECKING:  # imported where used: `openmemory --version` and `report` load no numpy, SQLite helpers nor SDK
    from datetime import datetime

    from openmemory_local.storage.store import Store

from openmemory_local.cli.base import (  # noqa: F401 (the names tests and commands use)
    EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PARTIAL, EXIT_STORE, EXIT_BUSY, EXIT_INTERRUPTED, EXIT_NO_NODE, EPISODE_KINDS, UsageError, _emit_json,
    _columns, _width, _HelpFormatter, Parser, _clip,
    _mb, ProgressBar, _config, _open, _now)


class DayBar(ProgressBar):
    """The replay's progress: days slept of days to sleep."""

    def __call__(self, done: int, total: int, day: str) -> None:  # type: ignore[override]
        if not self.enabled or total == 0:
            return
        width = 24
        filled = int(done / total * width)
        line = f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} days {day}"
        sys.stderr.write(line.ljust(_width() - 1)[: _width() - 1])
        sys.stderr.flush()
        self._drawn = True


def _replay(store, now, quiet: bool) -> dict:
    from openmemory_local.sleep.replay import replay

    bar = DayBar("replaying") if not quiet else None
    try:
        return replay(store, now, progress=bar)
    finally:
        if bar:
            bar.close()


def _print_replay(result: dict, out=None) -> None:
    if result and result.get("days"):
        print(f"Replayed {result['days']} past days ({result['first'][:10]} to {result['last'][:10]}), one sleep at "
              f"the end of each: {result['learned']} lessons learned, {result['made']} predictions made, "
              f"{result['confirmed']} confirmed, {result['failed']} failed ({result['seconds']:.1f} s)", file=out)


def _embed_pending(store, args) -> None:
    """Move the store to the configured embedder and embed what has no vector yet, with a
    progress bar on a terminal (:func:`openmemory_local.storage.vectors.embed_pending`; nothing to do
    and nothing written in the common case)."""
    from openmemory_local.storage.vectors import embed_pending

    quiet = getattr(args, "json", False) or getattr(args, "quiet", False)
    bar = None if quiet else ProgressBar("embedding", unit="texts")
    try:
        embed_pending(store, progress=bar)
    finally:
        if bar:
            bar.close()


def _keep_recall_ready(store) -> None:
    """After a command that changed many rows (ingest, sleep, run), save recall's arrays for
    the next process (:meth:`openmemory_local.recall.query.RecallIndex.refresh`): the first
    ``openmemory recall`` or MCP call after the nightly run reads them instead of every row."""
    from openmemory_local.recall.query import _SAVE_MIN_ROWS, index_for

    if store.counter("vec_rows") >= _SAVE_MIN_ROWS:
        index_for(store).refresh()


def _print_ingest(summary: dict, out=None) -> None:
    out = out or sys.stdout
    t = summary["totals"]
    statuses = t["by_status"]
    read = sum(statuses.get(s, 0) for s in ("new", "grown", "rewritten", "shrank", "rearchived", "rebuilt"))
    print(f"Read {read} of {t['files']} files: {_mb(t['bytes'])}, {t['lines']:,} lines in "
          f"{summary['seconds']:.1f} s", file=out)
    if statuses:
        print("  files: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in statuses.items()), file=out)
    added = t["episodes_added"]
    changes = ", ".join(f"{k} {v}" for k, v in added.items()) or "none"
    print(f"  episodes added: {changes}; updated {t['episodes_updated']}, removed {t['episodes_removed']}"
          + (f", {t['duplicates']} already known from another copy" if t["duplicates"] else ""), file=out)
    if t["rejected_lines"]:
        print("  lines rejected: " + ", ".join(f"{k} {v}" for k, v in t["rejected_lines"].items()), file=out)
    for f in summary["files"]:
        if f["status"] in ("unreadable", "vanished", "not_found", "busy", "failed", "not_transcript", "not_a_file",
                           "unsupported"):
            print(f"  {f['status'].replace('_', ' ')}: {f['path']} ({f['reason']})", file=out)
        elif f["rejected"]:
            bad = ", ".join(f"{k} {v}" for k, v in f["rejected"].items())
            print(f"  {f['path']}: skipped {bad}", file=out)
    for missing in summary.get("missing_sources") or []:
        print(f"  not found: {missing}", file=out)


def cmd_ingest(args) -> int:
    from openmemory_local.ingest.transcripts import rebuild_from_archive, ingest

    now = _now(args)
    with _open(args) as store:
        _embed_pending(store, args)
        bar = ProgressBar("ingesting") if not (args.json or args.quiet) else None
        try:
            if args.from_archive:
                if args.paths:
                    raise UsageError("--from-archive reads the archive only: give no paths")
                summary = rebuild_from_archive(store, now=now, progress=bar)
            else:
                summary = ingest(store, args.paths or None, now=now, progress=bar)
        finally:
            if bar:
                bar.close()
        data = summary.to_dict()
        replayed = None
        if not args.no_replay:
            from openmemory_local.sleep.passes import SleepBusy

            try:
                replayed = data["replay"] = _replay(store, now, args.json or args.quiet)
            except SleepBusy as exc:
                data["replay"] = {"busy": str(exc)}
                print(f"openmemory ingest: not replayed ({exc}): the next run does it", file=sys.stderr)
        _keep_recall_ready(store)
        if args.json:
            _emit_json(data)
        elif not args.quiet:
            if not args.paths and not args.from_archive and not summary.files and summary.missing_sources:
                print(f"No transcripts found: {', '.join(summary.missing_sources)} does not exist.")
            else:
                _print_ingest(data)
            _print_replay(replayed or {})
        return EXIT_PARTIAL if summary.problems else EXIT_OK


def cmd_run(args) -> int:
    from openmemory_local.run import run_job

    from openmemory_local.sleep.passes import check_sleep_time

    now = _now(args)
    with _open(args) as store:
        check_sleep_time(store, now)  # before ingesting anything
        _embed_pending(store, args)
        bar = ProgressBar("ingesting") if not args.json else None
        days = DayBar("replaying") if not args.json else None
        try:
            report = run_job(store, now, progress=bar, replay_progress=days)
        finally:
            for each in (bar, days):
                if each:
                    each.close()
        _keep_recall_ready(store)
        ingest_report = report.get("ingest", {})
        if args.json:
            _emit_json(report)
        else:
            sources = ingest_report.get("sources", [])
            if not ingest_report.get("files") and ingest_report.get("missing_sources") == sources:
                where = ", ".join(sources) or "~/.claude/projects"
                print(f"No Claude Code transcripts yet: {where} does not exist. Nothing to ingest; "
                      f"run this again after some Claude Code sessions.")
            else:
                _print_ingest(ingest_report)
            _print_replay(report.get("replay", {}))
            _print_sleep(report.get("sleep", {}))
            _print_publish(report.get("publish", {}))
            from openmemory_local.cli.commons import print_commons_step

            print_commons_step(report.get("commons", {}))
            _print_render(report.get("render", {}))
            made = (report.get("report") or {}).get("report")
            if made:
                print()
                print(made["markdown"].rstrip())
                print()
                print(f"Report: {store.config.home / made['file']}")
            else:
                print("Nothing new since the last report (`openmemory report` shows it).")
            print(f"Data folder: {store.config.home}")
        return EXIT_PARTIAL if ingest_report.get("problems") else EXIT_OK


def _print_sleep(result: dict, out=None) -> None:
    if not result:
        return
    if result.get("empty"):
        print(f"Slept at {result['now']}: nothing to consolidate yet (no episodes); nothing recorded, so "
              "transcripts ingested later are replayed from their first day", file=out)
        return
    learn, verify, decay = result.get("learn", {}), result.get("verify", {}), result.get("decay", {})
    print(f"Slept at {result['now']}: {learn.get('surprises', 0)} new surprises, "
          f"{len(learn.get('learned', []))} lessons learned, {len(learn.get('strengthened', []))} strengthened, "
          f"{len(verify.get('confirmed', []))} predictions confirmed, {len(verify.get('failed', []))} failed, "
          f"{len(result.get('predict', {}).get('made', []))} made, {decay.get('episodes_archived', 0)} episodes "
          f"archived ({result.get('seconds', 0):.2f} s)" + ("" if result.get("changed") else "; nothing changed"),
          file=out)


def _print_publish(result: dict, out=None) -> None:
    """One or two lines on what publishing did (nothing when no project is opted in)."""
    from openmemory_local.commons.publish import publish_messages

    for line in publish_messages(result):
        print(line, file=out)


def _print_render(result: dict, out=None) -> None:
    from openmemory_local.render.memory_folder import nothing_rendered

    if not result:
        return
    why = nothing_rendered(result)
    if why:
        print(why, file=out)
    for target in result.get("targets", []):
        changes = []
        if target["written"]:
            changes.append(f"{len(target['written'])} written")
        if target["removed"]:
            changes.append(f"{len(target['removed'])} removed")
        if target["left_alone"]:
            changes.append(f"{len(target['left_alone'])} left alone")
        index = target["index"]
        if index == "created":
            changes.append("Open Memory's section added to MEMORY.md")
        elif index == "written":
            changes.append("Open Memory's section of MEMORY.md updated")
        elif index not in ("unchanged", "none"):
            changes.append(f"MEMORY.md {index}")
        print(f"Rendered {len(target['lessons'])} lessons into {target['memory_dir']}: "
              + (", ".join(changes) or "unchanged"), file=out)
    for lesson_id in result.get("vetoed", []):
        print(f"  lesson {lesson_id} vetoed: its file was deleted", file=out)
    for record_id in result.get("commons_vetoed", []):
        print(f"  received lesson {record_id[:16]} vetoed: its file was deleted", file=out)
    for path in result.get("edited", []):
        print(f"  {path}: edited by its owner, left alone from now on", file=out)
    for line in result.get("problems", []) + [s for s in result.get("skipped", []) if s != "no Claude Code folder"]:
        print(f"  {line}", file=out)
    _print_agent_render(result.get("agents") or {}, out)


def _print_agent_render(result: dict, out=None) -> None:
    """What ``render`` did to Codex's ``AGENTS.md`` and Gemini CLI's ``GEMINI.md`` files."""
    for target in result.get("targets", []):
        index = target["index"]
        what = {"created": "Open Memory's section added", "written": "Open Memory's section updated",
                "unchanged": "unchanged", "none": "no lessons: nothing written"}.get(index, index)
        print(f"Rendered {target['listed']} lessons into {target['file']} ({target['agent']}): {what}", file=out)
    for lesson_id in result.get("vetoed", []):
        print(f"  lesson {lesson_id} vetoed: its line was deleted from an agent's memory file", file=out)
    for line in result.get("problems", []) + result.get("skipped", []):
        print(f"  {line}", file=out)


def cmd_sleep(args) -> int:
    from openmemory_local.render.report import make_report
    from openmemory_local.sleep.passes import sleep

    now = _now(args)
    with _open(args) as store:
        _embed_pending(store, args)
        result = sleep(store, now).to_dict()
        made = make_report(store, now) if not args.no_report else None
        _keep_recall_ready(store)
        if args.json:
            _emit_json({"sleep": result, "report": made})
        else:
            _print_sleep(result)
            if made:
                print()
                print(made["markdown"].rstrip())
        return EXIT_OK


def cmd_render(args) -> int:
    from openmemory_local.render.memory_folder import RenderError, render

    now = _now(args)
    with _open(args) as store:
        try:
            result = render(store, now, memory_dir=args.memory_dir, project=args.project)
        except RenderError as exc:
            raise UsageError(str(exc)) from None
        data = result.to_dict()
        if not args.memory_dir:  # the other agents' memory files of the same projects (agent_render)
            from openmemory_local.render.agents import render_agents
            from openmemory_local.sleep.passes import sleep_lock

            with sleep_lock(store.config):
                data["agents"] = render_agents(store, now).to_dict()
            data["changed"] = data["changed"] or data["agents"]["changed"]
        if args.json:
            _emit_json(data)
        else:
            _print_render(data)
        return EXIT_OK


def cmd_lessons(args) -> int:
    from openmemory_local.sleep.lessons import lesson_rows, lessons_for_project
    from openmemory_local.commons.publish import commons_line, commons_views

    with _open(args) as store:
        if args.all:
            states = ("active", "archived", "forming")
        elif args.forming:
            states = ("forming",)
        else:
            states = ("active",)
        rows = lesson_rows(store, states=states, include_vetoed=args.all or args.vetoed)
        if args.vetoed:
            rows = [r for r in rows if r["vetoed"]]
        if args.project:
            wanted = {r["id"] for r in (lessons_for_project(store, os.path.abspath(args.project)) or [])}
            rows = [r for r in rows if r["id"] in wanted]
        commons = commons_views(store, {r["id"] for r in rows})
        for r in rows:
            r["commons"] = commons["lessons"].get(r["id"])
        if args.json:
            _emit_json(rows)
            return EXIT_OK
        if commons["unavailable"]:
            print(f"(Commons status unknown: {commons['unavailable']})")
        if not rows:
            print("No lessons yet (`openmemory run` makes them from recurring surprises)." if not (
                args.all or args.forming or args.vetoed or args.project) else "No lessons match.")
        width = _width()
        for r in rows:
            flags = [r["state"]] if r["state"] != "active" else []
            if r["vetoed"]:
                flags.append("vetoed")
            record = r["record"]
            sessions = f"{r['sessions']} session{'s' if r['sessions'] != 1 else ''}"
            print(f"#{r['id']:<4} {r['kind']:<10} strength {r['strength']:.2f}  seen {r['seen']} "
                  f"({sessions})  last {(r['last_seen'] or '')[:10]}  predictions "
                  f"{record['confirmed']} confirmed, {record['failed']} failed"
                  + (f"  [{', '.join(flags)}]" if flags else ""))
            print("      " + _clip(r["text"] or r["rule_text"], 2 * (width - 8)))
            if r["prediction"]:
                print(f"      open prediction (since {r['prediction_made'][:10]}): "
                      + _clip(r["prediction"], 2 * width))
            for rec in (r["commons"] or {}).get("records", []):
                print(f"      commons: record {rec['record_id']}  {commons_line(rec)}")
        return EXIT_OK


def cmd_veto(args) -> int:
    from openmemory_local.sleep.lessons import LessonNotFound
    from openmemory_local.render.refresh import set_veto

    now = _now(args)
    with _open(args) as store:
        word = "unvetoed" if args.command == "unveto" else "vetoed"
        from openmemory_local.cli.commons import veto_command

        received = veto_command(args, store, now)
        if received is not None:  # a received lesson, by its record id
            message = received.pop("message")
            if args.json:
                _emit_json({**received, word: received["changed"]})
            else:
                print(message)
            return EXIT_OK
        try:
            outcome = set_veto(store, int(args.id), now, vetoed=args.command == "veto")
        except LessonNotFound as exc:
            raise UsageError(str(exc)) from None
        message = outcome.pop("message")
        outcome.pop("commons_hint", None)
        if args.json:
            _emit_json(outcome)
        else:
            print(message)
        return EXIT_OK


def cmd_report(args) -> int:
    from openmemory_local.render.report import latest_report_data

    with _open(args) as store:
        data = latest_report_data(store)
        if args.json:
            _emit_json(data)
            return EXIT_OK
        if data is None:
            print("No morning report yet: `openmemory run` writes one after a sleep that changed something.")
            return EXIT_OK
        print(data["markdown"].rstrip())
        print()
        print(f"Report: {store.config.home / data['file']}")
        return EXIT_OK


def cmd_recall(args) -> int:
    from openmemory_local.recall.query import EmptyQuery, recall, recall_lessons

    if args.k < 1:
        raise UsageError("-k must be at least 1")
    now = _now(args)
    with _open(args) as store:
        _embed_pending(store, args)
        try:
            lessons = [] if args.kind else recall_lessons(store, args.query, 3, now, project=args.project)
            results = recall(store, args.query, args.k, now, kinds=args.kind or None, project=args.project,
                             touch=not args.no_touch)
        except EmptyQuery as exc:
            raise UsageError(str(exc)) from None
        if args.json:
            _emit_json({"query": args.query, "now": now.isoformat(), "lessons": [h.to_dict() for h in lessons],
                        "results": [r.to_dict() for r in results]})
            return EXIT_OK
        width = _width()
        for rank, h in enumerate(lessons, 1):
            lesson = h.lesson
            print(f"L{rank}. {h.score:.3f}  [lesson] #{lesson['id']}  strength {lesson['strength']:.2f} · seen "
                  f"{lesson['seen']} in {lesson['sessions']} sessions · rel {h.relevance:.2f}")
            print("    " + _clip(lesson["text"], 3 * (width - 6)))
        if not results and not lessons:
            print("No memories yet (run `openmemory ingest`)." if not store.stats()["episodes"]["active"]
                  else "Nothing recalled.")
            return EXIT_OK
        for rank, r in enumerate(results, 1):
            e = r.episode
            head = (f"{rank:>2}. {r.score:.3f}  [{e['kind']}] {e['created'][:10]}  #{e['id']}  "
                    f"rel {r.relevance:.2f} · rec {r.recency:.2f} · str {r.strength:.2f}")
            print(head)
            print("    " + _clip(e["text"], 3 * (width - 6)))
        return EXIT_OK


def cmd_episodes(args) -> int:
    with _open(args) as store:
        rows = store.episodes(kind=args.kind, project=args.project, session=args.session,
                              only_archived=args.archived, limit=args.limit)
        if args.json:
            _emit_json(rows)
            return EXIT_OK
        width = _width()
        for e in rows:
            prefix = f"#{e['id']:<5} {e['kind']:<10} {e['created'][:16].replace('T', ' ')}  {(e['session_id'] or '')[:8]}  "
            print(prefix + _clip(e["text"], width - len(prefix)))
        if not rows:
            print("No episodes match.")
        return EXIT_OK


def cmd_show(args) -> int:
    from openmemory_local.ingest.archive import ArchiveFile, read_line

    with _open(args) as store:
        e = store.episode(args.id)
        if e is None:
            raise UsageError(f"no episode #{args.id}")
        raw = None
        if args.raw and e["source_path"] and e["source_line"]:
            raw = read_line(ArchiveFile(store.config.home, e["source_path"]), e["source_line"])
        if args.json:
            _emit_json(dict(e, raw=raw) if args.raw else e)
            return EXIT_OK
        print(f"#{e['id']} {e['kind']}  {e['created']}  session {e['session_id']}"
              + (f"  agent {e['agent_id']}" if e["agent_id"] else ""))
        print(f"project: {e['project']}")
        print(f"strength {e['strength']:.2f} · touches {e['touches']} · last touched {e['last_touched']}"
              + (" · archived" if e["archived"] else ""))
        print(f"source: {e['source_path']}:{e['source_line']}")
        print()
        print(e["text"])
        print()
        import json

        print(json.dumps(e["fields"], ensure_ascii=False, indent=2))
        if raw is not None:
            print()
            print(raw)
        return EXIT_OK


_NOT_OPTED_IN = "No project is opted in: nothing is published. `openmemory publish enable [PROJECT]` opts one in."


def cmd_publish(args) -> int:
    """``openmemory publish [enable|disable|status|provenance] [TARGET]``, ``--dry-run``."""
    from pathlib import Path

    from openmemory_local.commons.node_link import NodeError, NodeUnavailable
    from openmemory_local.commons.publish import (PublishError, disable, disable_messages, dry_run, enable, enable_messages, open_provenance,
                          publish, publish_messages, status)

    action, target = args.action, args.target
    if action is None and target is not None:
        raise UsageError(f"unknown publish action {target!r} (enable, disable, status, provenance)")
    if args.dry_run and action is not None:
        raise UsageError("--dry-run goes with `openmemory publish` alone")
    if args.revoke and action != "disable":
        raise UsageError("--revoke goes with `openmemory publish disable`")
    now = _now(args)
    with _open(args) as store:
        if action == "enable":
            result = enable(store, target or Path.cwd(), now)
            if args.json:
                _emit_json(result)
                return EXIT_OK
            print("\n".join(enable_messages(result, store.config.publish_min_strength)))
            return EXIT_OK
        if action == "disable":
            try:
                result = disable(store, target or Path.cwd(), now, revoke_published=args.revoke,
                                 reason=args.reason or "")
            except NodeUnavailable as exc:
                print(f"openmemory publish: opted out, but nothing was revoked: {exc}", file=sys.stderr)
                return EXIT_NO_NODE
            except (NodeError, PublishError) as exc:
                raise UsageError(str(exc)) from None
            if args.json:
                _emit_json(result)
                return EXIT_OK
            print("\n".join(disable_messages(result, target or ".")))
            return EXIT_OK
        if action == "status":
            result = status(store)
            if args.json:
                _emit_json(result)
                return EXIT_OK
            if not result["families"]:
                print(_NOT_OPTED_IN)
            for f in result["families"]:
                since = "opted in since " + (f["enabled_at"] or "")[:10] if f["enabled"] else "opted out"
                print(f"{f['family']}  {since}"
                      f"\n    {f['lessons']} active lesson(s), {f['eligible']} at strength {result['threshold']:g}+; "
                      f"published {f['published_records']} record(s) of {f['published_lessons']} lesson(s), "
                      f"{f['revoked_records']} revoked; {f['pending']} waiting, {f['held']} held back")
            print(f"commons node: {result['node_home']}")
            return EXIT_OK
        if action == "provenance":
            if not target:
                raise UsageError("publish provenance needs a lesson id or a record id")
            try:
                opened = open_provenance(store, target)
            except PublishError as exc:
                raise UsageError(str(exc)) from None
            if args.json:
                _emit_json(opened)
                return EXIT_OK
            for o in opened:
                print(f"record {o['record_id']} (lesson {o['lesson_id']})")
                print(f"  provenance  {o['provenance']}  ({'matches' if o['matches'] else 'DOES NOT MATCH'})")
                print(f"  salt        {o['salt']}")
                print(f"  episodes    {len(o['episodes'])}: SHA-256(\"openmemory/episode/v1\" 0x00 kind 0x00 key)")
                for e in o["episodes"]:
                    print(f"    {e['hash']}  {e['kind']} {e['key']}  #{e['id']} {(e['created'] or '')[:16]} "
                          f"{e['source'] or '(episode gone)'}")
            return EXIT_OK
        if args.dry_run:
            result = dry_run(store, now)
            if args.json:
                _emit_json(result)
                return EXIT_OK
            _print_dry_run(result)
            return EXIT_OK
        result = publish(store, now)
        if args.json:
            _emit_json(result)
            return EXIT_OK
        if not result["opted_in"] and not result["sent"] and not result["waiting"]:
            print(_NOT_OPTED_IN)
            return EXIT_OK
        print("\n".join(publish_messages(result, detail=True)))
        return EXIT_OK


def _print_dry_run(result: dict) -> None:
    if not result["opted_in"]:
        print("No project is opted in: nothing would leave. `openmemory publish enable [PROJECT]` opts one in.")
        return
    records = result["records"]
    print(f"{len(records)} record(s) would leave this machine (lessons at strength {result['threshold']:g}+ of "
          f"{', '.join(result['opted_in'])}); nothing is sent:")
    for r in records:
        print(f"  lesson {r['lesson']} ({r['state']}): kind {r['kind']}, strength {r['strength']:g}"
              + (f", derived from {', '.join(d[:16] + chr(0x2026) for d in r['derived_from'])}" if r["derived_from"]
                 else ""))
        print(f"    {r['text']}")
    for h in result["held"]:
        print(f"  lesson {h['lesson']} held back: " + "; ".join(h["reasons"]))
    if result["unchanged"]:
        print(f"  already published, unchanged: lesson(s) {', '.join(map(str, result['unchanged']))}")
    for s in result["skipped"]:
        print(f"  lesson {s['lesson']} not published: " + "; ".join(s["reasons"]))


def cmd_revoke(args) -> int:
    from openmemory_local.commons.publish import PublishError, revoke, revoke_messages

    now = _now(args)
    with _open(args) as store:
        try:
            result = revoke(store, args.lesson, now, code=args.code, reason=args.reason or "")
        except PublishError as exc:
            raise UsageError(str(exc)) from None
        if args.json:
            _emit_json(result)
            return EXIT_OK
        print("\n".join(revoke_messages(result, args.code)))
        return EXIT_OK


def cmd_stats(args) -> int:
    with _open(args) as store:
        s = store.stats()
        if args.json:
            _emit_json(s)
            return EXIT_OK
        ep = s["episodes"]
        tr = s["transcripts"]
        print(f"data folder    {s['home']}")
        print(f"schema         version {s['schema_version']}, embedding {s['embedding']}")
        print(f"episodes       {ep['active']} active ("
              + ", ".join(f"{k} {v}" for k, v in ep["by_kind"].items()) + f"), {ep['archived']} archived")
        print(f"sessions       {s['sessions']} in {s['projects']} projects")
        print("transcripts    " + (", ".join(f"{k.replace('_', ' ')} {v}" for k, v in tr["by_status"].items()) or "none"))
        print(f"read           {_mb(tr['bytes_read'])}, {tr['lines_read']:,} lines, "
              f"{tr['rejected_lines']} rejected; last ingest {tr['last_ingested'] or 'never'}")
        print(f"archive        {_mb(s['archive_bytes'])}")
        print(f"store          {_mb(s['db_bytes'])}, {s['vector_rows']} vector rows")
        return EXIT_OK


# --- parser -----------------------------------------------------------------------------


class _OneCommand:
    """The subparsers action seen through one command: ``add_parser`` builds that command's
    parser only and hands back a stand-in that ignores every call for the others (building the
    20-odd parsers, a third of a one-shot command's own time, is for `--help` and errors)."""

    def __init__(self, subparsers, only: str):
        self._subparsers, self._only = subparsers, only

    def add_parser(self, name, **kwargs):
        if name == self._only:
            return self._subparsers.add_parser(name, **kwargs)
        return _IGNORED

    def __getattr__(self, name):
        return getattr(self._subparsers, name)


class _Ignored:
    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self


_IGNORED = _Ignored()

#: Modules that add commands of their own (``register(subparsers, common)``), and which
#: command is whose: a module is imported only when the whole parser is built or the command is
#: its own (a command missing here is still parsed, by the whole parser; tests/local/test_cli_parser.py
#: holds the map complete).
_REGISTERING = ("openmemory_local.cli.commons", "openmemory_local.eval.measures", "openmemory_local.integrations.mcp_server",
               "openmemory_local.ui", "openmemory_local.integrations.register")
_REGISTERED_BY = {"commons": "openmemory_local.cli.commons", "team": "openmemory_local.cli.commons",
                  "eval": "openmemory_local.eval.measures", "mcp": "openmemory_local.integrations.mcp_server", "ui": "openmemory_local.ui",
                  "install": "openmemory_local.integrations.register",
                  "uninstall": "openmemory_local.integrations.register",
                  "hook": "openmemory_local.integrations.register"}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``only``, a command's name, just that command's (the
    same parser for it: what a one-shot command builds; None if there is no such command)."""
    common = Parser(add_help=False)
    common.add_argument("--home", metavar="DIR", help="data folder (default: $OPENMEMORY_HOME, "
                        "else $XDG_DATA_HOME/openmemory, else ~/.local/share/openmemory)")
    common.add_argument("--json", action="store_true", help="machine-readable output on stdout")
    common.add_argument("--now", metavar="TIME", help="the current time, ISO 8601 (default: "
                        "$OPENMEMORY_NOW, else the clock)")
    common.add_argument("--future", action="store_true", help="allow a --now later than the clock (simulations; "
                        "also $OPENMEMORY_ALLOW_FUTURE=1)")
    common.add_argument("--node-home", metavar="DIR", help="the commons node's data folder (default: "
                        "$OPENMEMORY_NODE_HOME, else [node] home in config.toml, else "
                        "~/.local/share/openmemory-node)")

    parser = Parser(
        prog="openmemory",
        description="Open Memory: keep what surprised a coding agent, and recall it.",
        epilog="Exit codes: 0 ok, 1 unexpected error, 2 usage, 3 some inputs could not be "
               "ingested, 4 store unusable, 5 busy (another sleep or render), 6 a settings file does "
               "not parse (install), 7 a conflict (install), 8 no commons node (revoke), 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"openmemory {__version__}")
    real = parser.add_subparsers(dest="command", metavar="COMMAND")
    real.required = True
    parser.commands = real.choices  # for _parse_args: each command's own parser
    sub = real if only is None else _OneCommand(real, only)

    p = sub.add_parser("run", parents=[common], help="the nightly job: ingest, sleep, render, report",
                       description="Ingest ~/.claude/projects (and Codex's ~/.codex/sessions, Gemini CLI's "
                       "~/.gemini/tmp), replay a history brought in (one sleep at the end "
                       "of each past day), sleep (decay, lessons, verify, predict), render the lessons into each "
                       "project's memory folder (and its AGENTS.md / GEMINI.md where Codex / Gemini CLI worked), and "
                       "print the morning report.")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sleep", parents=[common], help="consolidate: decay, lessons, verify, predict",
                       description="Run the four sleep passes at --now (one transaction), then write the "
                       "morning report of what changed.")
    p.add_argument("--no-report", action="store_true", help="do not write a report (its events wait for the next)")
    p.set_defaults(func=cmd_sleep)

    p = sub.add_parser("render", parents=[common], help="write the lessons into the agent's memory folders",
                       description="Write each project's lessons into its Claude Code memory folder "
                       "(~/.claude/projects/<project>/memory/), or into --memory-dir; and into the managed section "
                       "of its AGENTS.md (Codex) and GEMINI.md (Gemini CLI) where those agents worked.")
    p.add_argument("--memory-dir", metavar="DIR", help="render into this folder instead")
    p.add_argument("--project", help="only this project (its working directory)")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("lessons", parents=[common], help="list lessons",
                       description="Lessons, strongest first, with strength, seen count, open prediction and "
                       "prediction record.")
    p.add_argument("--project", help="only the lessons of this project (a working directory)")
    p.add_argument("--all", action="store_true", help="also archived, vetoed and forming ones")
    p.add_argument("--forming", action="store_true", help="only groups not yet lessons (a failure seen in one session)")
    p.add_argument("--vetoed", action="store_true", help="only vetoed lessons")
    p.set_defaults(func=cmd_lessons)

    for name, text in (("veto", "never render this lesson again"), ("unveto", "undo a veto")):
        p = sub.add_parser(name, parents=[common], help=text, description=text.capitalize() + ".")
        p.add_argument("id", help="the lesson's id (see `openmemory lessons`), or a received lesson's record id "
                       "(see `openmemory commons`)")
        p.set_defaults(func=cmd_veto)

    p = sub.add_parser("report", parents=[common], help="show the latest morning report")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("ingest", parents=[common], help="read transcripts into episodes",
                       description="Archive and ingest transcripts of Claude Code, Codex CLI and Gemini CLI "
                       "(files or folders; default ~/.claude/projects, ~/.codex/sessions, ~/.gemini/tmp). Incremental: only new bytes are read. Then the past days brought "
                       "in are slept on as they happened (one sleep at the end of each; --no-replay: not).")
    p.add_argument("paths", nargs="*", metavar="PATH", help="transcript files or folders")
    p.add_argument("--from-archive", action="store_true",
                   help="rebuild every episode from the archive alone (originals not read)")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    p.add_argument("--no-replay", action="store_true", help="do not sleep on the past days brought in (the next "
                   "`openmemory run` does)")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("recall", parents=[common], help="the memories that best match a query",
                       description="Score = 0.60 relevance + 0.25 recency + 0.15 strength. "
                       "Returned memories are touched (use keeps them alive).")
    p.add_argument("query", help="what to remember, in words")
    p.add_argument("-k", type=int, default=5, help="how many (default 5)")
    p.add_argument("--kind", action="append", metavar="KIND", choices=EPISODE_KINDS,
                   help="only this kind: session, error, correction (repeatable)")
    p.add_argument("--project", help="only this project (path, last path part, or Claude Code folder name)")
    p.add_argument("--no-touch", action="store_true", help="do not record this recall")
    p.set_defaults(func=cmd_recall)

    p = sub.add_parser("episodes", parents=[common], help="list episodes",
                       description="List episodes, oldest first.")
    p.add_argument("--kind", choices=EPISODE_KINDS, help="session, error or correction")
    p.add_argument("--project", help="project (path, last path part, or Claude Code folder name)")
    p.add_argument("--session", help="session id (or a prefix of one)")
    p.add_argument("--archived", action="store_true", help="list archived episodes instead")
    p.add_argument("--limit", type=int, help="at most this many")
    p.set_defaults(func=cmd_episodes)

    p = sub.add_parser("show", parents=[common], help="one episode in full",
                       description="One episode, its fields, and with --raw its source line from the archive.")
    p.add_argument("id", type=int)
    p.add_argument("--raw", action="store_true", help="also print the transcript line it points to")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("stats", parents=[common], help="what the store holds")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser(
        "publish", parents=[common], help="share lessons with the commons: opt a project in or out, see, send",
        description="Nothing is published unless a project is opted in. `publish enable [PROJECT]` opts a "
        "project family in (PROJECT: a working directory, default the current one), `disable` opts it out "
        "(--revoke also withdraws what it published), `status` lists them, `provenance LESSON` opens a "
        "record's provenance commitment; `publish` alone sends now what `openmemory run` would, and "
        "`publish --dry-run` prints exactly the records that would leave, sending nothing.")
    p.add_argument("action", nargs="?", choices=["enable", "disable", "status", "provenance"],
                   help="enable, disable, status or provenance (none: publish now)")
    p.add_argument("target", nargs="?", help="PROJECT (enable, disable) or LESSON/RECORD id (provenance)")
    p.add_argument("--dry-run", action="store_true", help="print the records that would leave; send nothing")
    p.add_argument("--revoke", action="store_true",
                   help="(disable) also revoke what was published, reason withdrawn")
    p.add_argument("--reason", help="(disable --revoke) why, for people: an observation")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser("revoke", parents=[common], help="withdraw a published lesson from the commons",
                       description="Revoke, through the commons node, every record a lesson was published as. "
                       "A revoked lesson is never published again.")
    p.add_argument("lesson", type=int, help="the lesson's id (see `openmemory lessons`)")
    p.add_argument("--code", default="withdrawn", choices=["incorrect", "harmful", "instruction", "private", "spam",
                                                          "withdrawn", "other"],
                   help="the reason code (default withdrawn)")
    p.add_argument("--reason", default="", help="why, for people (an observation, at most 280 bytes)")
    p.set_defaults(func=cmd_revoke)

    # openmemory commons, eval, mcp, ui, install / uninstall / hook
    modules = _REGISTERING if only is None else [_REGISTERED_BY[only]] if only in _REGISTERED_BY else []
    for module in modules:
        importlib.import_module(module).register(sub, common)
    if only is not None and only not in real.choices:
        return None
    return parser


def _loaded(module: str, name: str) -> tuple[type, ...]:
    """The exception class ``name`` of ``module`` if that module was imported, else nothing:
    an exception of a module that never loaded cannot have been raised, so ``main`` tells
    errors apart without importing what the command did not use."""
    loaded = sys.modules.get(module)
    return (getattr(loaded, name),) if loaded is not None else ()


def _failure(command: str, exc: Exception) -> int:
    """Print what went wrong with ``command``; return its exit code (see the module docstring)."""
    if isinstance(exc, (UsageError, *_loaded("openmemory_local.core.clock", "ClockError"), *_loaded("openmemory_local.core.config", "ConfigError"),
                        *_loaded("openmemory_local.sleep.passes", "SleepClockError"))):
        print(f"openmemory {command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if isinstance(exc, _loaded("openmemory_local.storage.store", "StoreError")):
        print(f"openmemory {command}: {exc}", file=sys.stderr)
        return EXIT_STORE
    if isinstance(exc, _loaded("openmemory_local.sleep.passes", "SleepBusy")):
        print(f"openmemory {command}: {exc}; try again when it is done", file=sys.stderr)
        return EXIT_BUSY
    if isinstance(exc, _loaded("openmemory_local.commons.node_link", "NodeUnavailable")):
        print(f"openmemory {command}: nothing was done: {exc}", file=sys.stderr)
        return EXIT_NO_NODE
    if isinstance(exc, _loaded("openmemory_local.commons.node_link", "NodeError")):
        print(f"openmemory {command}: the commons node refused: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if isinstance(exc, BrokenPipeError):
        return EXIT_OK
    # an unexpected error: say what, exit 1
    print(f"openmemory {command}: unexpected error: {type(exc).__name__}: {exc}", file=sys.stderr)
    return EXIT_ERROR


def _parse_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, with the words an option interrupted given to the command.

    argparse (3.11) fills a command's optional positionals from the words before its first
    option only: ``publish enable --home H ~/src/app`` would leave PROJECT unset and refuse
    ``~/src/app``, ``ingest a --home H b`` refuse ``b``. Such a word goes to the first of the
    command's positionals still empty (or to a list one), checked against its choices; any
    other leftover is the usual error."""
    args, extra = parser.parse_known_args(argv)
    command = getattr(parser, "commands", {}).get(getattr(args, "command", None))
    if extra and command is not None:
        slots = [a for a in command._actions if not a.option_strings and a.dest != "help"]
        left = []
        for word in extra:
            slot = None if word.startswith("-") else next(
                (a for a in slots if getattr(args, a.dest, None) in (None, []) or a.nargs in ("*", "+")), None)
            if slot is None:
                left.append(word)
            elif slot.choices is not None and word not in slot.choices:
                command.error(f"argument {slot.metavar or slot.dest}: invalid choice: {word!r}")
            elif slot.nargs in ("*", "+"):
                setattr(args, slot.dest, [*(getattr(args, slot.dest, None) or []), word])
            else:
                setattr(args, slot.dest, word)
        extra = left
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if words == ["--version"]:  # what hooks and scripts ask most: no parser
        print(f"openmemory {__version__}")
        return EXIT_OK
    parser = None
    if words and not words[0].startswith("-") and "-h" not in words and "--help" not in words:
        parser = build_parser(only=words[0])  # the command's parser alone (None: not a command)
    args = _parse_args(parser or build_parser(), argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"\nopenmemory {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        return _failure(args.command, exc)


if __name__ == "__main__":
    sys.exit(main())
