"""``openmemory ui``: a local web page of the memory and its node, to see what was learned and to steer it.

It shows the lessons by project and by layer (this agent's own; those received from the
commons), each own lesson with its text, its strength over time, its prediction record, the
episodes it was learned from and, one click further, the transcript lines they point to
(read from the archive); each received lesson as an observation reported by other agents,
with its status, the node's tally of attestations, its predictions here and its provenance
chain drawn as a graph; publishing per project (what would leave, what left, what the
redaction gate held back and why); the commons node (peers, records, revocations, trust);
the morning reports; and search (the engine's own recall). Every action (veto and unveto,
opting in and out, publishing, revoking, the node's revoke and trust) calls the same function
as its command (:mod:`.commons_pages` lists them).

Served on 127.0.0.1 only, behind a token, Host and Origin checks and a CSRF token
(:mod:`.guard`). Built on Starlette and uvicorn, with Jinja2 templates and a little
JavaScript (no build step), plots by :mod:`openmemory_local.eval.plots`: the ``ui`` extra
(``pip install -e '.[ui]'``). Nothing of it is imported until ``openmemory ui`` runs,
so the other commands start as fast as before.

Modules: :mod:`.guard` (who may use the page: pure), :mod:`.data` (what it shows: reads the
store), :mod:`.nodeview` (what it asks the node), :mod:`.markup` (the morning report as
HTML), :mod:`.server` (the ASGI app and ``serve``), :mod:`.commons_pages` (the publishing,
commons and node handlers), ``templates/`` and ``static/``.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["register"]

EXIT_USAGE = 2  # as openmemory_local.cli.main


def register(subparsers, common: argparse.ArgumentParser | None = None) -> None:
    """Add ``ui`` to the ``openmemory`` command line (its handler is ``args.func``)."""
    parser = subparsers.add_parser(
        "ui",
        parents=[common] if common is not None else [],
        help="a local web page of the memory and its node: lessons, evidence, the commons, publishing, search",
        description="Serve a page on 127.0.0.1 (this machine only) showing the lessons by project and "
        "layer (own, received from the commons) with their strength over time, predictions, episodes and "
        "transcript lines, provenance graphs, publishing, the commons node, the morning reports and "
        "search; lessons can be vetoed, projects opted in or out of publishing, lessons revoked, keys "
        "trusted. Prints a link with a token (good while the page runs) and opens the browser when there is one.",
    )
    parser.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--no-browser", action="store_true", help="do not open a browser; just print the link")
    parser.set_defaults(func=_cmd_ui)


def _usage(message: str) -> int:
    print(f"openmemory ui: {message}", file=sys.stderr)
    return EXIT_USAGE


def _cmd_ui(args: argparse.Namespace) -> int:
    from openmemory_local.core.clock import resolve_now
    from openmemory_local.core.config import load_config

    if not 0 <= args.port <= 65535:
        return _usage(f"--port must be from 0 to 65535, not {args.port}")
    resolve_now(args.now)  # a bad --now is a usage error now (ClockError), not on every request
    config = load_config(args.home, node_home_option=getattr(args, "node_home", None))
    try:
        from openmemory_local.ui.server import PortInUse, serve
    except ImportError as exc:
        from openmemory_protocol.extras import missing_extra

        return _usage(missing_extra("ui", "the page", exc))
    try:
        return serve(config, port=args.port, browser=not args.no_browser, now_option=args.now, as_json=args.json)
    except PortInUse as exc:
        return _usage(str(exc))
