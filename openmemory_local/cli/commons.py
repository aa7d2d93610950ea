"""``openmemory commons``: what this agent received from the commons, its status, and where
it is rendered; and the veto of a received lesson (``openmemory veto <record id>``).

    openmemory commons                  received lessons (not revoked), newest first
    openmemory commons --all            also revoked ones and this agent's own publications
    openmemory commons --pull           ask the node first (what ``openmemory run`` does)
    openmemory commons --json           the same as data
    openmemory commons block KEY        never again this author: its lessons leave every memory folder now,
                                        its records are dropped at receipt, its votes do not count
    openmemory commons unblock KEY      undo it
    openmemory team [list]              the owner's team: keys whose lessons are shown before they are verified
    openmemory team add KEY [--note T]  (your other machines, your colleagues: `openmemory-node id` shows a key)
    openmemory team remove KEY

Exit codes as every command (0 done, 2 usage, 4 store unusable); with ``--pull`` and no node
answering, the list is printed from the store and the exit code is 3.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["register", "cmd_commons", "cmd_team", "veto_command", "print_commons_step"]


def _key_list(args, name: str, action: str) -> int:
    """``openmemory team ...`` and ``openmemory commons block|unblock KEY``."""
    from openmemory_local.cli.base import EXIT_ERROR, EXIT_OK, EXIT_PARTIAL, UsageError, _emit_json, _now, _open
    from openmemory_local.render.refresh import change_key_list
    from openmemory_local.commons.node_link import NodeError, NodeUnavailable

    if action in ("add", "remove") and not args.key:
        raise UsageError(f"{'openmemory team' if name == 'team' else 'openmemory commons'} {action} needs a KEY "
                         "(64 hex digits or a peer id: `openmemory-node id` prints a node's)")
    with _open(args) as store:
        try:
            out = change_key_list(store, name, action, args.key, _now(args), note=getattr(args, "note", "") or "")
        except NodeUnavailable as exc:
            print(f"openmemory: the node did not answer ({exc}); the team and blocked lists live in the node: "
                  "start it (`openmemory-node start`)", file=sys.stderr)
            return EXIT_PARTIAL
        except NodeError as exc:
            print(f"openmemory: the node refused it: {exc}", file=sys.stderr)
            return EXIT_ERROR
    if args.json:
        _emit_json(out)
        return EXIT_OK
    what = {"team": "team", "blocked": "blocked authors"}[name]
    if action == "add":
        done = "blocked: its lessons left the memory folders, its records are dropped" if name == "blocked" else \
            "added to the team: its lessons are shown before they are verified, marked as the team's"
        print(f"{out['key']}  {done}" if out.get("added") else f"{out['key']}  already in the {what} list")
    elif action == "remove":
        print(f"{out['key']}  " + ("unblocked" if name == "blocked" else "removed from the team"))
    for row in out["keys"]:
        note = f"  {row.get('note')}" if row.get("note") else ""
        print(f"{row.get('key')}  {row.get('peer_id', '')}  ({row.get('source', '')}){note}")
    if not out["keys"]:
        print(f"no keys in the {what} list", file=sys.stderr)
    return EXIT_OK


def cmd_team(args) -> int:
    return _key_list(args, "team", args.action or "list")


def cmd_commons(args) -> int:
    from openmemory_local.cli.base import EXIT_OK, EXIT_PARTIAL, _clip, _emit_json, _now, _open, _width
    from openmemory_local.commons.receive import commons_rows, pull
    from openmemory_local.commons.node_link import NodeError, NodeUnavailable, open_link

    if getattr(args, "action", None):
        return _key_list(args, "blocked", {"block": "add", "unblock": "remove"}[args.action])
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
            flags = [f for f, on in (("vetoed", r["vetoed"]), ("yours", r["mine"]), ("team", r["layer"] == "team"),
                                     ("refused by the observation check", not r["observation"]),
                                     (f"refused: {r['refused']}", bool(r["refused"]))) if on]
            p = r["predictions"]
            print(f"{r['short']}  {r['kind']:<10} {r['status_text']}" + (f"  [{', '.join(flags)}]" if flags else ""))
            print("      " + _clip(r["text"], 2 * (width - 8)))
            where = [f["path"] + ("" if f["state"] == "ours" else f" ({f['state']})") for f in r["rendered"]]
            print("      rendered in: " + (", ".join(where) if where else "none"))
            verdicts = ", ".join(
                (f"failure {a['failure']}, fix {a['fix']}" if a.get("failure") else a["verdict"])
                + (" (exposed)" if a.get("exposed") else "") + (" (met before)" if a["met_before"] else "")
                + f" {a['state']}" for a in r["attestations"]) or "none"
            print(f"      predictions {p['open']} open, {p['confirmed']} confirmed, {p['failed']} failed; "
                  f"attested: {verdicts}")
        return code


def veto_command(args, store, now) -> dict | None:
    """``openmemory veto|unveto ID`` for a received lesson (a record id: 8 hex digits or more):
    :func:`openmemory_local.render.refresh.set_commons_veto` (the page's button too); None when
    ``ID`` is an own lesson's number (fewer than 8 digits)."""
    from openmemory_local.cli.base import UsageError
    from openmemory_local.commons.receive import CommonsNotFound
    from openmemory_local.render.refresh import set_commons_veto

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
    p.add_argument("action", nargs="?", choices=["block", "unblock"],
                   help="block an author's key (its lessons leave every memory folder, its records are dropped), "
                   "or unblock it")
    p.add_argument("key", nargs="?", help="the author's key: 64 hex digits or a peer id")
    p.add_argument("--all", action="store_true", help="also revoked lessons and this agent's own publications")
    p.add_argument("--pull", action="store_true", help="ask the node for what is new first")
    p.set_defaults(func=cmd_commons)
    p = subparsers.add_parser(
        "team", parents=[common], help="the owner's team: keys whose lessons are shown before they are verified",
        description="Your other machines and your colleagues: lessons their nodes publish are shown in your "
        "memory folders as the team's (not yet verified); everyone else's only once independent agents "
        "verified them. Their votes count too. The list lives in the node (`openmemory-node team`).")
    p.add_argument("action", nargs="?", choices=["list", "add", "remove"])
    p.add_argument("key", nargs="?", help="64 hex digits or a peer id (`openmemory-node id` prints a node's)")
    p.add_argument("--note", help="a note kept beside the key (who it is)")
    p.set_defaults(func=cmd_team)
