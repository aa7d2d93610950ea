"""``openmemory commons``: what this agent received from the commons, its status, and where
it is rendered; and the veto of a received lesson (``openmemory veto <record id>``).

    openmemory commons                  received lessons (not revoked), newest first
    openmemory commons --all            also revoked ones and this agent's own publications
    openmemory commons --pull           ask the node first (what ``openmemory run`` does)
    openmemory commons --json           the same as data

Exit codes as every command (0 done, 2 usage, 4 store unusable); with ``--pull`` and no node
answering, the list is printed from the store and the exit code is 3.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["register", "cmd_commons", "veto_command", "print_commons_step"]


def cmd_commons(args) -> int:
    from .cli import EXIT_OK, EXIT_PARTIAL, _clip, _emit_json, _now, _open, _width
    from .commons import commons_rows, pull
    from .node_link import NodeError, NodeUnavailable, open_link

    code = EXIT_OK
    with _open(args) as store:
        pulled, problem = None, None
        if args.pull:
            try:
                pulled = pull(store, open_link(store.config), _now(args))
            except (NodeUnavailable, NodeError) as exc:
                problem = f"the node did not answer: {exc}"
                code = EXIT_PARTIAL
        rows = commons_rows(store, include_all=args.all)
        if args.json:
            _emit_json({"pulled": pulled, "problem": problem, "lessons": rows})
            return code
        if problem:
            print(f"openmemory commons: {problem}; listing what the store holds", file=sys.stderr)
        if pulled:
            print(f"Pulled {pulled['received']} new, {pulled['status_changed']} status change(s), "
                  f"{pulled['revoked']} revoked.")
        if not rows:
            print("Nothing received from the commons yet (`openmemory run` pulls from the node; "
                  "see README: what an agent receives).")
            return code
        width = _width()
        for r in rows:
            flags = [f for f, on in (("vetoed", r["vetoed"]), ("yours", r["mine"]),
                                     ("refused by the observation check", not r["observation"])) if on]
            p = r["predictions"]
            print(f"{r['short']}  {r['kind']:<10} {r['status_text']}" + (f"  [{', '.join(flags)}]" if flags else ""))
            print("      " + _clip(r["text"], 2 * (width - 8)))
            where = [f["path"] + ("" if f["state"] == "ours" else f" ({f['state']})") for f in r["rendered"]]
            print("      rendered in: " + (", ".join(where) if where else "none"))
            verdicts = ", ".join(f"{a['verdict']}{' (met before)' if a['met_before'] else ''} {a['state']}"
                                 for a in r["attestations"]) or "none"
            print(f"      predictions {p['open']} open, {p['confirmed']} confirmed, {p['failed']} failed; "
                  f"attested: {verdicts}")
        return code


def veto_command(args, store, now) -> dict | None:
    """``openmemory veto|unveto ID`` for a received lesson (a record id: 8 hex digits or more):
    :func:`openmemory_local.commons.set_commons_veto` (the page's button too); None when
    ``ID`` is an own lesson's number (fewer than 8 digits)."""
    from .cli import UsageError
    from .commons import CommonsNotFound, set_commons_veto

    if str(args.id).isdigit() and len(str(args.id)) < 8:
        return None
    try:
        return set_commons_veto(store, str(args.id), now, vetoed=args.command != "unveto")
    except CommonsNotFound as exc:
        raise UsageError(str(exc)) from None


def print_commons_step(result: dict, out=None) -> None:
    """One or two lines for ``openmemory run``: what the commons step did."""
    if not result or result.get("skipped"):
        return
    pulled = result.get("pull") or {}
    verify = result.get("verify") or {}
    sent = (result.get("attest") or {}).get("sent", [])
    something = (pulled.get("received") or pulled.get("status_changed") or verify.get("confirmed")
                 or verify.get("failed") or sent)
    if result.get("node", "ok") != "ok":
        if verify.get("open") or pulled:
            print(f"Commons: {result['node']}; received lessons wait for the node", file=out)
        return
    if something:
        print(f"Commons: {pulled.get('received', 0)} received, {pulled.get('status_changed', 0)} status change(s) "
              f"({pulled.get('revoked', 0)} revoked), {len(verify.get('confirmed', []))} predictions confirmed, "
              f"{len(verify.get('failed', []))} failed, {len(sent)} attestation(s) sent", file=out)


def register(subparsers, common: argparse.ArgumentParser) -> None:
    p = subparsers.add_parser(
        "commons", parents=[common], help="what this agent received from the commons, its status, where it is rendered",
        description="The lessons other agents published that this agent's node received: their status "
        "(candidate, common, faded, revoked), the memory folders they are rendered in, this agent's predictions "
        "and attestations. Veto one with `openmemory veto RECORD_ID` (or delete its file).")
    p.add_argument("--all", action="store_true", help="also revoked lessons and this agent's own publications")
    p.add_argument("--pull", action="store_true", help="ask the node for what is new first")
    p.set_defaults(func=cmd_commons)
