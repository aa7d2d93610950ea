"""Claude Code ``SessionStart`` hook: take revoked received lessons out of the memory folders
before the session reads them.

A lesson revoked in the commons (by its author, by a revoker, through an ancestor, or by the
owner locally on the node: ``openmemory-node revoke ID --local``) reaches the memory folder at
the next render; this hook makes it sooner. Claude Code runs it when a session starts, resumes,
is cleared or compacted, with a JSON payload on stdin (``session_id``, ``cwd``, ``source``),
and adds what it prints to the session's context, so it prints nothing: it logs to
``<data>/logs/claude-code-hook.log``. It never fails nor holds a session:

1. *Fast path*, standard library only (an interpreter start, a read of the store, one
   request): the engine's cursor and the memory folders holding a commons file that may no
   longer be there are read from the store (read-only,
   :mod:`openmemory_local.storage.trust_boundary`), and the node is asked whether any
   lesson changed since the cursor (``GET /v1/changes?limit=1&type=lesson``, with
   ``Config.commons_hook_timeout``, 2 s). Nothing new and nothing stale: exit.
2. Otherwise, in the same process: pull what changed (:func:`openmemory_local.commons.receive.pull`)
   and re-render the projects whose folders hold a stale file (revoked, vetoed, faded), which
   removes it and its line in ``MEMORY.md`` (:func:`openmemory_local.render.refresh.refresh_folders`).
   A render already running (the nightly run) is left to do it.

A node that is down or does not answer in time leaves the folders as they are (stale files of
lessons the store already knows to be revoked are still removed); the hook exits 0 whatever
happened. Installed by ``openmemory install claude-code`` beside the SessionEnd hook as
``python -P -m openmemory_local.integrations.session_start --home DATA``.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time

from openmemory_local.integrations.session_end import _log, _open_log, close_log, read_payload

STDIN_DEADLINE = 1.0  # seconds to wait for the payload (it is not needed to do the work)


def _options(argv: list[str]) -> dict:
    options = {"home": None, "node_home": None}
    i = 0
    while i < len(argv):
        if argv[i] in ("--home", "--node-home") and i + 1 < len(argv):
            options[argv[i][2:].replace("-", "_")] = argv[i + 1]
            i += 1
        i += 1
    return options


def _fast_check(config) -> tuple[bool, bool, list[str], str]:
    """(node answered, lessons changed since the cursor, stale folders, what happened)."""
    from openmemory_local.commons.node_link import NodeError, NodeLink, NodeUnavailable
    from openmemory_local.storage.trust_boundary import cursor, stale_folders
    from openmemory_local.core.config import default_node_home

    try:
        conn = sqlite3.connect(f"file:{config.db_path}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error as exc:
        return False, False, [], f"store not readable ({exc})"
    try:
        after, _node = cursor(conn)
        stale = stale_folders(conn, config.commons_candidates, config.commons_team_candidates)
    except sqlite3.Error as exc:  # an older store, without the commons tables
        return False, False, [], f"no commons layer in the store ({exc})"
    finally:
        conn.close()
    try:
        link = NodeLink.open(config.node_home or default_node_home(), timeout=config.commons_hook_timeout)
        page = link.get("/v1/changes", after=after, limit=1, type="lesson")
    except (NodeUnavailable, NodeError) as exc:
        return False, False, stale, f"node not asked: {exc}"
    if not isinstance(page, dict):
        return False, False, stale, "the node's answer is not an object"
    last = page.get("last") if isinstance(page.get("last"), int) else 0
    changed = bool(page.get("changes")) or after > last
    return True, changed, stale, "lessons changed" if changed else "nothing new"


def hook(argv: list[str], stdin_fd: int = 0) -> int:
    """The SessionStart hook proper. Always returns 0 and prints nothing."""
    started = time.monotonic()
    log = None
    real_stdout = sys.stdout
    try:
        options = _options(argv)
        from openmemory_local.core.config import load_config, resolve_home

        home = os.path.abspath(os.path.expanduser(options["home"] or str(resolve_home(None))))
        log = _open_log(home)
        try:
            read_payload(stdin_fd, STDIN_DEADLINE)  # drained, so the writer never blocks; not needed
        except OSError:
            pass
        config = load_config(home, node_home_option=options["node_home"])
        if not config.db_path.is_file() or not config.commons_receive:
            return 0
        node_ok, changed, stale, what = _fast_check(config)
        if not changed and not stale:
            _log(log, f"session-start: {what}; memory folders unchanged ({time.monotonic() - started:.3f}s)")
            return 0
        sys.stdout = log if log is not None else open(os.devnull, "w")  # nothing reaches the session's context
        from openmemory_local.core.clock import resolve_now
        from openmemory_local.render.refresh import refresh_folders
        from openmemory_local.storage.store import Store

        with Store.open(config.with_(node_timeout=config.commons_hook_timeout)) as store:
            result = refresh_folders(store, resolve_now(None), pull_first=node_ok and changed)
        _log(log, f"session-start: {what}; pulled {result.get('pull') or 'nothing'} in {result['pull_seconds']}s; "
                  f"re-rendered "
                  f"{result['rendered'] or 'nothing'}; removed {result['removed'] or 'nothing'}"
                  + (f"; {result['busy']}" if result.get("busy") else "")
                  + f" in {result['seconds']}s ({time.monotonic() - started:.3f}s in all)")
    except BaseException as exc:  # noqa: BLE001 - a hook must never fail nor hold a session
        _log(log, f"session-start: hook error: {type(exc).__name__}: {exc}")
    finally:
        sys.stdout = real_stdout
        close_log(log)
    return 0


if __name__ == "__main__":
    try:
        code = hook(sys.argv[1:])
    except BaseException:  # noqa: BLE001
        code = 0
    sys.exit(code)
