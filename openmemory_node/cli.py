"""``openmemory-node``: the commons node's command line.

    openmemory-node [--home DIR] init [--listen MULTIADDR]... [--bootstrap MULTIADDR]... [--api HOST:PORT]
    openmemory-node [--home DIR] start [--listen M]... [--bootstrap M]... [--api HOST:PORT] [--log-level L]
                    [--clock-file PATH]
    openmemory-node [--home DIR] id | peers | status | config          [--json]
    openmemory-node [--home DIR] records [--type T] [--kind K] [--status S] [--limit N] [--json]
    openmemory-node [--home DIR] show ID [--json]
    openmemory-node [--home DIR] publish --text TEXT --kind KIND [--strength X] [--derived-from ID]... [--json]
    openmemory-node [--home DIR] fetch ID [--peer PEER_ID] [--json]
    openmemory-node [--home DIR] attest ID (--confirmed | --failed) [--met-before] [--sessions N]
                    [--matched M] [--window-days D] [--json]
    openmemory-node [--home DIR] revoke ID [--reason TEXT] [--code CODE] [--local | --undo] [--json]
    openmemory-node [--home DIR] trust | revokers | team | blocked  [list | add KEY [--note T] | remove KEY] [--json]
    openmemory-node [--home DIR] vouch KEY [--json]
    openmemory-node [--home DIR] sync [--peer PEER_ID] [--json]
    openmemory-node [--home DIR] peers [list | add MULTIADDR | block PEER_ID | unblock PEER_ID] [--json]

Exit codes: 0 done; 1 error; 2 bad usage; 3 no daemon running on this data folder;
4 not found; 5 refused (the record is invalid: the message says why).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

from . import config as config_mod
from .client import ApiError, ApiUnavailable, Client
from .status import ALL_STATUSES
from .wire.limits import KIND_PATTERN, KNOWN_KINDS, PART_VERDICTS, REASON_CODES, RECORD_TYPES

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NO_DAEMON, EXIT_NOT_FOUND, EXIT_REFUSED = 0, 1, 2, 3, 4, 5


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


def _print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, default=str)
    sys.stdout.write("\n")


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _home(args: argparse.Namespace) -> Path:
    return config_mod.resolve_home(args.home)


def _client(args: argparse.Namespace) -> Client:
    try:
        return Client.for_home(_home(args))
    except ApiUnavailable as exc:
        raise CliError(str(exc), EXIT_NO_DAEMON) from None


def _call(client: Client, method: str, path: str, body: Any = None) -> Any:
    try:
        return client.request(method, path, body)
    except ApiUnavailable as exc:
        raise CliError(str(exc), EXIT_NO_DAEMON) from None
    except ApiError as exc:
        raise _api_failure(exc) from None


def _api_failure(exc: ApiError) -> "CliError":
    code = {400: EXIT_USAGE, 404: EXIT_NOT_FOUND, 422: EXIT_REFUSED}.get(exc.status, EXIT_ERROR)
    message = f"{exc.code}: {exc.message}"
    for candidate in exc.details.get("candidates") or ():
        message += f"\n  {candidate}"
    return CliError(message, code)


def _load_config(args: argparse.Namespace) -> config_mod.Config:
    try:
        return config_mod.load(_home(args))
    except config_mod.ConfigError as exc:
        raise CliError(str(exc)) from None


def _apply_overrides(cfg: config_mod.Config, args: argparse.Namespace) -> config_mod.Config:
    import dataclasses

    node = cfg.node
    if getattr(args, "listen", None):
        node = dataclasses.replace(node, listen=list(args.listen))
    if getattr(args, "bootstrap", None):
        node = dataclasses.replace(node, bootstrap=list(dict.fromkeys(node.bootstrap + args.bootstrap)))
    cfg = dataclasses.replace(cfg, node=node)
    if getattr(args, "api", None):
        cfg = dataclasses.replace(cfg, api=dataclasses.replace(cfg.api, address=args.api))
    log = cfg.log
    if getattr(args, "log_level", None):
        log = dataclasses.replace(log, level=args.log_level)
    if getattr(args, "log_format", None):
        log = dataclasses.replace(log, format=args.log_format)
    cfg = dataclasses.replace(cfg, log=log)
    try:
        config_mod.validate(cfg)
    except config_mod.ConfigError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    return cfg


def _apply_public_nodes(cfg: config_mod.Config, addrs: list[str]) -> config_mod.Config:
    """``init --public-node ADDR``: a node reachable from anywhere, used as bootstrap peer,
    relay and rendezvous point at once (docs/node.md, "At home")."""
    import dataclasses

    if not addrs:
        return cfg
    _check_multiaddrs(addrs, True)

    def more(old: list[str]) -> list[str]:
        return list(dict.fromkeys(old + addrs))

    return dataclasses.replace(
        cfg,
        node=dataclasses.replace(cfg.node, bootstrap=more(cfg.node.bootstrap)),
        reachability=dataclasses.replace(cfg.reachability, relays=more(cfg.reachability.relays)),
        discovery=dataclasses.replace(cfg.discovery, rendezvous=more(cfg.discovery.rendezvous)),
    )


def _check_multiaddrs(addrs: list[str], need_peer_id: bool) -> None:
    import multiaddr

    for addr in addrs:
        try:
            maddr = multiaddr.Multiaddr(addr)
        except Exception as exc:
            raise CliError(f"{addr!r} is not a multiaddr: {exc}", EXIT_USAGE) from None
        if need_peer_id and "/p2p/" not in str(maddr):
            raise CliError(f"bootstrap address {addr!r} must end in /p2p/<peer id>", EXIT_USAGE)


# -- commands ---------------------------------------------------------------------------------

def cmd_init(args: argparse.Namespace) -> int:
    from .home import init_home

    home = _home(args)
    cfg = _apply_public_nodes(_apply_overrides(_load_config(args), args), args.public_node or [])
    _check_multiaddrs(cfg.node.listen, False)
    _check_multiaddrs(cfg.node.bootstrap, True)
    existed = (home / config_mod.CONFIG_FILE).exists()
    if existed and (args.listen or args.bootstrap or args.api or args.public_node):
        config_mod.write(home, cfg)  # explicit options update an existing configuration
    try:
        ident, created = init_home(home, cfg)
    except Exception as exc:
        raise CliError(str(exc)) from None
    info = {"home": str(home), "peer_id": ident.peer_id, "public_key": ident.public_key.hex(),
            "created": created, "config": str(home / config_mod.CONFIG_FILE)}
    if args.json:
        _print_json(info)
    else:
        verb = "initialised" if created else "already initialised"
        print(f"{verb} {home}")
        print(f"peer id   {ident.peer_id}")
        print(f"config    {info['config']}")
    return EXIT_OK


def _clock(args: argparse.Namespace):
    """The simulated clock of ``--clock-file`` (:mod:`openmemory_node.simclock`), or None."""
    if not getattr(args, "clock_file", None):
        return None
    import logging

    from .log import event
    from .simclock import ClockFileError, FileClock

    try:
        clock = FileClock(args.clock_file)
    except ClockFileError as exc:
        raise CliError(f"--clock-file: {exc}", EXIT_USAGE) from None
    event(logging.getLogger("openmemory_node.simclock"), logging.WARNING,
          "simulated clock: the node runs on the time of a clock file, not the system's", **clock.describe())
    return clock


def cmd_start(args: argparse.Namespace) -> int:
    from openmemory_protocol.extras import missing_extra

    try:
        import trio

        from .daemon import Daemon, DaemonError
    except ImportError as exc:  # the `node` extra (libp2p, trio) is not installed
        raise CliError(missing_extra("node", "openmemory-node start", exc)) from None
    from . import log
    from .home import HomeError
    from .identity import IdentityError

    home = _home(args)
    cfg = _apply_overrides(_load_config(args), args)
    _check_multiaddrs(cfg.node.listen, False)
    _check_multiaddrs(cfg.node.bootstrap, True)
    log.setup(cfg.log.level, cfg.log.libp2p_level, cfg.log.format)
    clock = _clock(args)
    try:
        daemon = Daemon(home, cfg, **({"clock": clock} if clock is not None else {}))
    except (IdentityError, DaemonError, HomeError) as exc:
        raise CliError(str(exc)) from None
    _freeze_start_up()
    try:
        trio.run(daemon.run)
    except BaseException as exc:
        # trio wraps a task's error in exception groups: report the first one plainly.
        leaf = exc
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        if isinstance(leaf, DaemonError):
            raise CliError(str(leaf)) from None
        if isinstance(leaf, OSError):  # e.g. the listen or API port is taken
            raise CliError(f"cannot start: {leaf}") from None
        if isinstance(leaf, KeyboardInterrupt):
            return 130
        raise
    return EXIT_OK


def _freeze_start_up() -> None:
    """What start-up made (the modules, libp2p's host) lives as long as the process: moved out of
    the cyclic collector's reach (``gc.freeze``), its full collections no longer walk it. In a
    sync catch-up of 10,000 records the collector took 12 % of the node's main thread, 5 % after
    (docs/performance.md, "The node")."""
    import gc

    gc.collect()  # (garbage first: what is frozen is never collected)
    gc.freeze()


def cmd_id(args: argparse.Namespace) -> int:
    home = _home(args)
    try:
        info = Client.for_home(home).get("/v1/node")
        running = True
    except (ApiUnavailable, ApiError):
        from .identity import IdentityError, load

        try:
            ident = load(home)
        except IdentityError as exc:
            raise CliError(str(exc)) from None
        cfg = _load_config(args)
        info = {"peer_id": ident.peer_id, "public_key": ident.public_key.hex(),
                "addrs": [f"{a}/p2p/{ident.peer_id}" for a in cfg.node.listen]}
        running = False
    info["running"] = running
    if args.json:
        _print_json(info)
    elif args.quiet:
        print(info["peer_id"])
    else:
        print(f"peer id     {info['peer_id']}")
        print(f"public key  {info['public_key']}")
        print("listening" if running else "would listen (not running)")
        for addr in info["addrs"]:
            print(f"  {addr}")
    return EXIT_OK


def _shown_as_json(args: argparse.Namespace, data: Any) -> bool:
    """With --json, print ``data`` and say so; the caller then prints nothing else."""
    if args.json:
        _print_json(data)
    return bool(args.json)


def cmd_peers(args: argparse.Namespace) -> int:
    action = args.action or "list"
    if action != "list":
        if not args.target:
            raise CliError(f"peers {action} needs a {'MULTIADDR' if action == 'add' else 'PEER_ID'}",
                           EXIT_USAGE)
        if action == "add":
            data = _call(_client(args), "POST", "/v1/peers", {"addr": args.target})
            message = (f"{data['peer_id']}  " + ("connected" if data["connected"] else
                       f"added, not connected yet ({data['error']}); the node keeps dialling it"))
        elif action == "block":
            data = _call(_client(args), "POST", f"/v1/peers/{args.target}/block")
            message = f"{data['peer_id']}  blocked: disconnected, never dialled, ignored"
        else:
            data = _call(_client(args), "DELETE", f"/v1/peers/{args.target}/block")
            message = f"{data['peer_id']}  unblocked"
        if not _shown_as_json(args, data):
            print(message)
        return EXIT_OK
    data = _call(_client(args), "GET", "/v1/peers")
    if _shown_as_json(args, data):
        return EXIT_OK
    if not data["peers"]:
        print("no peers known")
    for p in data["peers"]:
        state = "connected" if p["connected"] else "not connected"
        if p["graylisted"]:
            state += ", GRAYLISTED"
        print(f"{p['peer_id']}  {state}  score {p['score']:g}  mesh {len(p['mesh'])} topics")
        for addr in p["addrs"][:3]:
            print(f"    {addr}")
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    data = _call(_client(args), "GET", "/v1/status")
    if _shown_as_json(args, data):
        return EXIT_OK
    print(f"peer id    {data['peer_id']}  (up {data['uptime']:.0f} s)")
    peers = data["peers"]
    print(f"peers      {peers['connected']} connected, {peers['known']} known, "
          f"{len(peers['graylisted'])} graylisted")
    for type_, statuses in sorted(data["records"].items()):
        parts = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
        print(f"records    {type_}: {parts}")
    if not data["records"]:
        print("records    none")
    g = data["gossip"]
    print(f"gossip     {g['published']} published, {g['outbox']} waiting, {g['dropped']} dropped")
    ing = data["ingest"]
    print(f"received   {ing['accepted']} accepted, {ing['duplicates']} duplicates")
    for code, row in sorted(data["rejections"].items()):
        print(f"refused    {code}: {row['count']} (last from {row['last_peer'] or 'local'})")
    c = data.get("commons")
    if c:
        print(f"commons    policy {c['policy']}, N = {c['threshold']}, {c['trusted']} trusted keys "
              f"({c['trust_list']} listed), {c['revokers']} revokers, "
              f"{c['local_revocations']} local revocations")
    sy = data.get("sync")
    if sy:
        print(f"sync       every {sy['interval']:g} s; {sy['initiated']} sessions run, {sy['served']} served, "
              f"{sy['received']} records received, {sy['bytes_sent'] + sy['bytes_received']} bytes")
        following = sy.get("following")
        if following is not None:
            print("domains    following " + (following if isinstance(following, str) else ", ".join(following)))
    for line in _reach_lines(_home(args)):
        print(line)
    return EXIT_OK


def _reach_lines(home: Path) -> list[str]:
    """Reachability, relays and discovery, from the running daemon's ``node.reach``."""
    from .reach import REACH_FILE

    try:
        view = json.loads((home / REACH_FILE).read_text())
    except (OSError, ValueError):
        return []
    kinds = list(view.get("connections", {}).values())
    lines = [f"reach      {view.get('state')} (mode {view.get('mode')}); "
             f"{kinds.count('direct')} direct, {kinds.count('relayed')} relayed connections"]
    for addr in view.get("relayed_addrs", []):
        lines.append(f"relayed    {addr}")
    if view.get("relay_offered"):
        served = view.get("relay_served", {})
        lines.append(f"relay      serving {served.get('reservations', 0)} reservations, "
                     f"{served.get('circuits', 0)} circuits")
    if view.get("discovered"):
        lines.append(f"discovery  {len(view['discovered'])} peers found")
    return lines


def _records_offline(args: argparse.Namespace) -> Any:
    from .api import record_view
    from .store import DB_FILE, Store

    home = _home(args)
    if not (home / DB_FILE).exists():
        raise CliError(f"no store at {home} (run openmemory-node init)", EXIT_NO_DAEMON)
    store = Store.open(home)
    try:
        if args.command == "show":
            from .api import resolve_id
            from .httpserver import HttpError

            try:
                idb = resolve_id(store, args.id)
            except HttpError as exc:
                raise _api_failure(ApiError(exc.status, exc.code, exc.message, exc.extra)) from None
            from .api_commons import commons_view
            from .status import CommonsStatus

            from .identity import IdentityError, load as load_identity

            try:
                own: bytes | None = load_identity(home).public_key
            except IdentityError:
                own = None
            machine = CommonsStatus(_load_config(args).commons, store, own).load()
            view = commons_view(machine, store, idb.hex())
            if view.get("status") == "absent" and not view["chain"]["children"]:
                raise CliError(f"not-found: no record {args.id} here", EXIT_NOT_FOUND)
            return view
        rows = store.list(type=args.type, kind=args.kind, status=args.status, limit=args.limit)
        return {"records": [record_view(r) for r in rows]}
    finally:
        store.close()


def _via_api_or_store(args: argparse.Namespace, path: str) -> Any:
    try:
        client = Client.for_home(_home(args))
        return client.get(path)
    except ApiUnavailable:
        return _records_offline(args)
    except ApiError as exc:
        raise _api_failure(exc) from None


def _text_of(view: dict[str, Any]) -> str:
    record = view.get("record") or {}
    if "text" in record:
        return record["text"]
    for key in ("lesson_id", "target", "subject"):
        if key in record:
            return f"{key} {record[key][:16]}"
    return ""


def cmd_records(args: argparse.Namespace) -> int:
    from urllib.parse import urlencode

    query = {k: v for k, v in (("type", args.type), ("kind", args.kind), ("status", args.status),
                               ("limit", args.limit)) if v is not None}
    data = _via_api_or_store(args, "/v1/records?" + urlencode(query))
    if _shown_as_json(args, data):
        return EXIT_OK
    for v in data["records"]:
        text = _text_of(v)
        if len(text) > 70:
            text = text[:67] + "..."
        print(f"{v['id'][:16]}  {v['type']:<11} {(v['kind'] or '-'):<11} {v['status']:<11} "
              f"{_when(v['arrived'])}  {text}")
    if not data["records"]:
        print("no records", file=sys.stderr)
        if args.kind:
            held = _kinds_held(args)
            print(f"(no lesson of kind {args.kind!r} here; kinds held: {', '.join(held) or 'none'})",
                  file=sys.stderr)
    return EXIT_OK


def _kinds_held(args: argparse.Namespace) -> list[str]:
    try:
        return sorted(Client.for_home(_home(args)).get("/v1/status").get("kinds") or {})
    except (ApiUnavailable, ApiError):
        from .store import DB_FILE, Store

        if not (_home(args) / DB_FILE).exists():
            return []
        store = Store.open(_home(args))
        try:
            return sorted(store.kinds())
        finally:
            store.close()


def cmd_show(args: argparse.Namespace) -> int:
    data = _via_api_or_store(args, f"/v1/commons/{args.id}")
    if _shown_as_json(args, data):
        return EXIT_OK
    if data.get("type"):
        _print_record(data)
    else:
        print(f"id          {data['id']}")
        print("status      absent: not held here, but named by records that are")
    _print_commons(data)
    return EXIT_OK


def _short(rid: str | None) -> str:
    return (rid or "-")[:16] + "…"


def _why_revoked(cause: dict[str, Any] | None) -> str:
    if not cause:
        return ""
    if cause["by"] == "local":
        return "revoked locally by this node's operator"
    if cause["by"] == "revocation":
        return f"revocation {_short(cause['revocation'])}"
    root = cause.get("root") or {}
    while root.get("by") == "ancestor":
        root = root.get("root") or {}
    return f"derived from {_short(cause['ancestor'])}, revoked ({_why_revoked(root)})"


def _print_commons(v: dict[str, Any]) -> None:
    c = v.get("commons")
    if c and "group" in c:  # a lesson
        if c.get("revoked_because"):
            print(f"revoked     {_why_revoked(c['revoked_because'])}")
        g = c["group"]
        head = "this one" if g["head"] == v["id"] else _short(g["head"])
        print(f"group       {len(g['members'])} member(s), head {head}, group status {g['status']}")
        votes, tally = c["votes"], c["tally"]
        refused = ", ".join(f"{n} {why}" for why, n in sorted(votes["refused"].items()))
        print(f"votes       {votes['total']} cast, {votes['counted']} counted under `{c['policy']}` "
              f"(N = {c['threshold']})" + (f"; not counted: {refused}" if refused else ""))
        print(f"tally       {tally['confirmers']} confirming keys; in the last "
              f"{tally['fade_window'] / 86400:g} days: {tally['confirmed_in_window']} confirmed, "
              f"{tally['failed_in_window']} failed")
        for step in g["history"]:
            arrow = f"{step['from']} -> {step['to']}" if step["from"] else step["to"]
            print(f"history     {_when(step['at'])}  {arrow}  ({_short(step['cause'])})")
        for vote in votes["shown"][-10:]:
            kind = "corroboration" if vote["corroboration"] else vote["verdict"]
            state = "counted" if vote["counted"] else f"not counted: {vote['reason']}"
            print(f"  vote      {_short(vote['id'])} {kind:<13} by {vote['signer'][:16]}…  {state}")
        for rev in c["revocations"]:
            print(f"  revoked   by {_short(rev['id'])} ({rev['reason_code']}): {rev['effect']}, {rev['why']}")
    elif c:
        detail = ", ".join(f"{k} {_short(val) if isinstance(val, str) and len(val) == 68 else val}"
                           for k, val in c.items() if k != "status" and val is not None)
        print(f"commons     {c['status']}" + (f": {detail}" if detail else ""))
    chain = v.get("chain") or {}
    if chain.get("parents") or chain.get("children"):
        print("provenance chain")
        if chain.get("parents"):
            print("  derived from")
            _print_tree(chain["parents"], "parents", "  ")
        text = (v.get("record") or {}).get("text", "")
        print(f"  ● {_short(v['id'])}  {v.get('status', ''):<10} {text[:60]}")
        if chain.get("children"):
            print("  derived into")
            _print_tree(chain["children"], "children", "  ")


def _print_tree(nodes: list[dict[str, Any]], key: str, indent: str) -> None:
    for i, node in enumerate(nodes):
        last = i == len(nodes) - 1
        text = node.get("text") or ""
        if node.get("truncated"):
            text = "(more not shown)"
        elif node.get("repeated"):
            text = "(shown above)"
        print(f"{indent}{'└─' if last else '├─'} {_short(node['id'])}  {node.get('status', ''):<10} "
              f"{text[:60]}")
        _print_tree(node.get(key) or [], key, indent + ("   " if last else "│  "))


def _print_record(v: dict[str, Any]) -> None:
    print(f"id          {v['id']}")
    print(f"type        {v['type']}" + (f" ({v['kind']})" if v.get("kind") else ""))
    print(f"status      {v['status']}")
    print(f"arrived     {_when(v['arrived'])} via {v['via']}"
          + (f" from {v['from_peer']}" if v.get("from_peer") else ""))
    print(f"duplicates  {v['duplicates']}")
    record = v.get("record") or {}
    for key, value in record.items():
        if key in ("id", "type", "kind"):
            continue
        if key == "claim" and isinstance(value, dict):  # a version 2 lesson: its parts, one a line
            for part, text in value.items():
                print(f"  {'claim.' + part:<12} {text}")
            continue
        print(f"  {key:<12} {value}")


def cmd_publish(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"kind": args.kind, "strength": args.strength}
    if args.claim is not None:
        try:
            body["claim"] = json.loads(args.claim)
        except ValueError as exc:
            print(f"--claim is not JSON: {exc}", file=sys.stderr)
            return EXIT_USAGE
    else:
        body["text"] = args.text
    if args.provenance:
        body["provenance"] = args.provenance
    if args.derived_from:
        body["derived_from"] = args.derived_from
    data = _call(_client(args), "POST", "/v1/lessons", body)
    if not _shown_as_json(args, data):
        state = "already known" if data.get("duplicate") else "published (queued for gossip)"
        print(f"{data['id']}  {state}")
    return EXIT_OK


def cmd_fetch(args: argparse.Namespace) -> int:
    body = {"id": args.id}
    if args.peer:
        body["peer"] = args.peer
    data = _call(_client(args), "POST", "/v1/fetch", body)
    if not _shown_as_json(args, data):
        print(f"found (from {data['fetched']['from']})")
        _print_record(data)
    return EXIT_OK


def cmd_attest(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"id": args.id, "met_before": args.met_before}
    by_parts = args.failure is not None or args.fix is not None or args.exposed
    if by_parts == (args.confirmed or args.failed):
        print("give --confirmed or --failed (the lesson's prediction), or the parts: --failure and/or --fix "
              "(confirmed, failed or untested) and --exposed", file=sys.stderr)
        return EXIT_USAGE
    if by_parts:
        body.update(failure=args.failure or "untested", fix=args.fix or "untested", exposed=args.exposed)
        confirms = "confirmed" in (body["failure"], body["fix"])
    else:
        body["verdict"] = "confirmed" if args.confirmed else "failed"
        confirms = args.confirmed
    if args.sessions is not None or args.matched is not None or args.window_days is not None:
        sessions = args.sessions if args.sessions is not None else 1
        matched = args.matched if args.matched is not None else (1 if confirms else 0)
        window = round((args.window_days if args.window_days is not None else 14) * 86400)
        body["evidence"] = {"sessions": sessions, "matched": matched, "window": window}
    data = _call(_client(args), "POST", "/v1/attest", body)
    if not _shown_as_json(args, data):
        lesson = data.get("lesson") or {}
        state = "already known" if data.get("duplicate") else f"{data['status']}, published (queued)"
        print(f"{data['id']}  {state}")
        print(f"lesson {args.id[:16]}…  now {lesson.get('status')}")
    return EXIT_OK


def cmd_revoke(args: argparse.Namespace) -> int:
    if args.undo:
        data = _call(_client(args), "DELETE", f"/v1/revoke/{args.id}")
        if not _shown_as_json(args, data):
            print(f"{data['id']}  local revocation lifted; now {data['status']}")
        return EXIT_OK
    body: dict[str, Any] = {"id": args.id, "reason": args.reason or "", "local": args.local}
    if args.code:
        body["reason_code"] = args.code
    data = _call(_client(args), "POST", "/v1/revoke", body)
    if _shown_as_json(args, data):
        return EXIT_OK
    if args.local:
        print(f"{data['id']}  revoked here only (never published); now {data['status']}, "
              f"{data['changed']} statuses changed")
        return EXIT_OK
    effect = data.get("effect") or {}
    print(f"{data['id']}  revocation {effect.get('status')} here ({effect.get('reason')}), published (queued)")
    print(f"target {args.id[:16]}…  now {data.get('target_status')}")
    if effect.get("status") == "no-effect":
        print("note: no effect here: this node is neither the author nor in its own revokers list; "
              "the revocation takes effect where its key is a revoker (--local revokes here)",
              file=sys.stderr)
    return EXIT_OK


def cmd_keys(args: argparse.Namespace) -> int:
    name = args.command  # "trust", "revokers", "team" or "blocked"
    action = args.action or "list"
    client = _client(args)
    if action == "list":
        data = _call(client, "GET", f"/v1/{name}")
    elif not args.key:
        raise CliError(f"{name} {action} needs a KEY (64 hex digits or a peer id)", EXIT_USAGE)
    elif action == "add":
        data = _call(client, "POST", f"/v1/{name}", {"key": args.key, "note": args.note or ""})
    else:
        data = _call(client, "DELETE", f"/v1/{name}/{args.key}")
    if _shown_as_json(args, data):
        return EXIT_OK
    if action != "list":
        done = {"add": "added" if data.get("added") else "already listed", "remove": "removed"}[action]
        print(f"{data['key']}  {done}; {data['changed']} statuses changed")
    for row in data[name]:
        note = f"  {row['note']}" if row.get("note") else ""
        print(f"{row['key']}  {row['peer_id']}  ({row['source']}){note}")
    if not data[name]:
        print(f"no keys in the {name} list", file=sys.stderr)
    for key in data.get("vouched", ()):
        print(f"{key}  (vouched for by a trusted key)")
    return EXIT_OK


def cmd_vouch(args: argparse.Namespace) -> int:
    data = _call(_client(args), "POST", "/v1/vouch", {"key": args.key})
    if not _shown_as_json(args, data):
        print(f"{data['id']}  vouch {data['status']} here, published (queued)")
    return EXIT_OK


def cmd_sync(args: argparse.Namespace) -> int:
    body = {"peer": args.peer} if args.peer else {}
    data = _call(_client(args), "POST", "/v1/sync", body)
    if _shown_as_json(args, data):
        return EXIT_OK
    if not data["sessions"]:
        print("no peer connected", file=sys.stderr)
    failed = False
    for r in data["sessions"]:
        need = sum(r["need"].values())
        print(f"{r['peer']}  {r['outcome']}: {r['received']} received of {need} missing, "
              f"{r['bytes_sent'] + r['bytes_received']} bytes, {r['seconds']} s"
              + (f" ({r['detail']})" if r["detail"] else ""))
        failed = failed or r["outcome"] not in ("done", "partial")
    return EXIT_ERROR if failed else EXIT_OK


def cmd_config(args: argparse.Namespace) -> int:
    cfg = _load_config(args)
    if args.json:
        _print_json(cfg.to_dict())
    else:
        sys.stdout.write(config_mod.render(cfg))
    return EXIT_OK


# -- parser -----------------------------------------------------------------------------------

def _kind(text: str) -> str:
    import re

    if not re.fullmatch(KIND_PATTERN, text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a kind: lower-case letters, digits and '-', starting with a letter, "
            f"at most 24 (the engine's: {', '.join(KNOWN_KINDS)})")
    return text


def _bounded_int(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="openmemory-node",
        description="The Open Memory commons node: a libp2p daemon that gossips signed lessons.",
        epilog="Exit codes: 0 done, 1 error, 2 usage, 3 no daemon running, 4 not found, 5 refused.",
    )
    parser.add_argument("--home", help="data folder (default: $OPENMEMORY_NODE_HOME, else "
                        "$XDG_DATA_HOME/openmemory-node)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, fn: Any, json_flag: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        p.set_defaults(fn=fn)
        if json_flag:
            p.add_argument("--json", action="store_true", help="print JSON")
        return p

    def network_options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--listen", action="append", metavar="MULTIADDR",
                       help="listen address, e.g. /ip4/127.0.0.1/tcp/4771 (repeatable; "
                       "replaces the configured ones)")
        p.add_argument("--bootstrap", action="append", metavar="MULTIADDR",
                       help="peer to dial, ending in /p2p/<peer id> (repeatable; added to the "
                       "configured ones)")
        p.add_argument("--api", metavar="HOST:PORT", help="local API address (port 0: any free one)")

    p = command("init", "create the data folder: key (0600), API token, config.toml", cmd_init)
    network_options(p)
    p.add_argument("--public-node", action="append", metavar="MULTIADDR",
                   help="a public node (ending in /p2p/<peer id>) to use as bootstrap peer, relay "
                   "and rendezvous point (repeatable; added to the configured ones)")
    p = command("start", "run the daemon in the foreground (SIGINT/SIGTERM stop it)", cmd_start,
                json_flag=False)
    network_options(p)
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--log-format", choices=["text", "json"])
    p.add_argument("--clock-file", metavar="PATH",
                   help="simulations and tests only: run on the clock this JSON file describes "
                   "({\"world\": T, \"wall\": W, \"rate\": R}; rewrite it to move the time), not the system's")
    p = command("id", "print the peer id and listen addresses", cmd_id)
    p.add_argument("-q", "--quiet", action="store_true", help="print the peer id only")
    p = command("peers", "list peers (default), add one, or block and unblock one", cmd_peers)
    p.add_argument("action", nargs="?", choices=["list", "add", "block", "unblock"])
    p.add_argument("target", nargs="?", help="a multiaddr ending in /p2p/<peer id> (add), or a peer id")
    command("status", "counts of records, peers, gossip and refusals", cmd_status)
    command("config", "print the effective configuration (defaults filled in)", cmd_config)
    p = command("records", "list stored records, newest first", cmd_records)
    p.add_argument("--type", choices=list(RECORD_TYPES))
    p.add_argument("--kind", type=_kind, help=f"lesson kind: {', '.join(KNOWN_KINDS)}, or another "
                   f"matching {KIND_PATTERN}")
    p.add_argument("--status", choices=list(ALL_STATUSES))
    p.add_argument("--limit", type=_bounded_int(1, 1000), default=100, help="1 to 1000 (default 100)")
    p = command("show", "show one record by id (or an unambiguous prefix of it)", cmd_show)
    p.add_argument("id")
    p = command("publish", "sign a lesson with the node's key, store it and gossip it", cmd_publish)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--text", help="an observation, never an instruction; of kind error, the sentence of a "
                      "claim: `PROGRAM` failed: \"FAILURE LINE\"; `FIX` succeeded.")
    what.add_argument("--claim", metavar="JSON", help="a claim's parts: {\"situation\", \"path\"?, \"failure\", "
                      "\"fix\"?, \"fix_how\"?} (kind error)")
    p.add_argument("--kind", required=True, type=_kind, help=f"e.g. {', '.join(KNOWN_KINDS)}")
    p.add_argument("--strength", type=float, default=1.0, help="0 to 1000 (default 1)")
    p.add_argument("--provenance", help="64 hex digits committing to the source episodes")
    p.add_argument("--derived-from", action="append", metavar="ID")
    p = command("fetch", "ask peers for a record by id", cmd_fetch)
    p.add_argument("id")
    p.add_argument("--peer", help="ask only this peer id")
    p = command("attest", "sign an attestation: did the lesson predict what your sessions met?", cmd_attest)
    p.add_argument("id", help="the lesson's id")
    verdict = p.add_mutually_exclusive_group()
    verdict.add_argument("--confirmed", action="store_true", help="its prediction held")
    verdict.add_argument("--failed", action="store_true", help="its prediction failed")
    p.add_argument("--failure", choices=PART_VERDICTS,
                   help="a claim's failure part: met in your own session (confirmed), not (failed), or untested")
    p.add_argument("--fix", choices=PART_VERDICTS,
                   help="a claim's fix part: your own session resolved the failure that way (confirmed)...")
    p.add_argument("--exposed", action="store_true",
                   help="the lesson was shown (rendered) where the evidence came from")
    p.add_argument("--met-before", action="store_true",
                   help="you had met the surprise before you received the lesson (then your vote "
                   "is not independent, and the built-in policies do not count it)")
    p.add_argument("--sessions", type=int, help="sessions in the window (default 1)")
    p.add_argument("--matched", type=int, help="sessions that met the prediction (default 1 if confirmed)")
    p.add_argument("--window-days", type=float, help="the evidence window, in days (default 14)")
    p = command("revoke", "revoke a record by id (with what derives from it), everywhere or here only",
                cmd_revoke)
    p.add_argument("id")
    p.add_argument("--reason", help="why, for people: an observation, never an instruction")
    p.add_argument("--code", choices=list(REASON_CODES),
                   help="why, for machines (default incorrect)")
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--local", action="store_true", help="revoke here only: nothing is signed or published")
    scope.add_argument("--undo", action="store_true", help="lift a local revocation")
    for name, what in (("trust", "keys whose attestations the trusted policy counts"),
                       ("revokers", "keys whose revocations apply on this node"),
                       ("team", "the owner's team: keys whose lessons an agent sees before they are verified"),
                       ("blocked", "blocked authors: their records are dropped, their lessons removed")):
        p = command(name, f"list, add or remove {what}", cmd_keys)
        p.add_argument("action", nargs="?", choices=["list", "add", "remove"])
        p.add_argument("key", nargs="?", help="64 hex digits or a peer id")
        p.add_argument("--note", help="a note kept beside the key")
    p = command("vouch", "sign a vouch for a key (a trusted voucher makes it trusted)", cmd_vouch)
    p.add_argument("key", help="64 hex digits or a peer id")
    p = command("sync", "run an anti-entropy session now, with every connected peer or one", cmd_sync)
    p.add_argument("--peer", help="only this peer id")
    return parser


def main(argv: list[str] | None = None) -> NoReturn:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.fn(args)
    except CliError as exc:
        print(f"openmemory-node {args.command}: {exc}", file=sys.stderr)
        code = exc.code
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        code = EXIT_OK
    if args.command == "start":
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> NoReturn:
    """The daemon has stopped: its store is closed, its lock released, its files removed.
    Python's own teardown of py-libp2p's object graph would add 1.5 to 3 s to a SIGTERM stop on
    a busy machine (measured: benchmarks in README, "Stopping"); flush what is buffered and
    leave now instead."""
    import logging
    import os

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    main()
