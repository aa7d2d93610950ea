"""``openmemory install``, ``uninstall`` and ``hook`` on the command line, without the work behind them.

The parser needs only these few names; :mod:`.claude_code` (settings edits, the scheduler, the
hooks) is imported when one of the commands runs, so that ``openmemory --version``, ``report``
and every other command start without it.
"""

from __future__ import annotations

import argparse

from openmemory_local.integrations.schedule import SCHEDULE_KINDS

__all__ = ["register", "SCHEDULE_KINDS"]

#: The agents ``openmemory install`` wires in (:mod:`.claude_code`, :mod:`.agents`).
TARGETS = ["claude-code", "codex", "gemini"]


def _hhmm(value: str) -> str:
    try:
        hour, minute = (int(part) for part in value.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected HH:MM, got {value!r}") from None
    if not (0 <= hour < 24 and 0 <= minute < 60):
        raise argparse.ArgumentTypeError(f"expected HH:MM, got {value!r}")
    return f"{hour:02d}:{minute:02d}"


def _own_common() -> argparse.ArgumentParser:
    from openmemory_local.cli.base import Parser

    common = Parser(add_help=False)
    common.add_argument("--home", metavar="DIR", help="data folder")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    return common


def _install(args: argparse.Namespace) -> int:
    if args.target in ("codex", "gemini"):
        from openmemory_local.integrations.agents import run

        return run(args.target, "install", getattr(args, "home", None), dry_run=args.dry_run,
                   as_json=getattr(args, "json", False))
    from openmemory_local.integrations.claude_code import _cmd_install

    return _cmd_install(args)


def _uninstall(args: argparse.Namespace) -> int:
    if args.target in ("codex", "gemini"):
        from openmemory_local.integrations.agents import run

        return run(args.target, "uninstall", getattr(args, "home", None), dry_run=args.dry_run,
                   as_json=getattr(args, "json", False), force=args.force)
    from openmemory_local.integrations.claude_code import _cmd_uninstall

    return _cmd_uninstall(args)


def _hook(args: argparse.Namespace) -> int:
    from openmemory_local.integrations.claude_code import _cmd_hook

    return _cmd_hook(args)


def register(subparsers, common: argparse.ArgumentParser | None = None) -> None:
    """Add ``install``, ``uninstall`` and ``hook`` to the ``openmemory`` command line.

    ``common`` is the parent parser with the options every command takes (``--home``,
    ``--json``); each command sets ``func`` (``args -> exit code``) as its default.
    """
    parents = [common if common is not None else _own_common()]
    install = subparsers.add_parser(
        "install",
        parents=parents,
        help="wire Open Memory into an agent (Claude Code, Codex CLI, Gemini CLI: MCP server, hooks; "
        "claude-code also schedules the nightly run)",
        description="Register the MCP server and add the hooks that ingest each session as it ends (Claude "
        "Code: also schedule the nightly run). Idempotent; `uninstall` undoes exactly what it did.",
    )
    install.add_argument("target", choices=TARGETS)
    install.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    install.add_argument("--schedule", choices=SCHEDULE_KINDS, default="auto",
                         help="how to run `openmemory run` nightly (default: systemd if it runs, else cron, "
                         "else print instructions)")
    install.add_argument("--at", type=_hhmm, default="03:17", metavar="HH:MM", help="nightly run time (local)")
    install.set_defaults(func=_install)

    uninstall = subparsers.add_parser(
        "uninstall",
        parents=parents,
        help="undo `openmemory install` (removes exactly what it added)",
    )
    uninstall.add_argument("target", choices=TARGETS)
    uninstall.add_argument("--dry-run", action="store_true", help="show what would change, change nothing")
    uninstall.add_argument("--force", action="store_true",
                           help="also remove our entries that were edited since install")
    uninstall.set_defaults(func=_uninstall)

    hook = subparsers.add_parser("hook", parents=parents,
                                 help="entry points called by agents (Claude Code's SessionEnd and SessionStart)")
    hook.add_argument("event", choices=["session-end", "session-start"])
    hook.set_defaults(func=_hook)

