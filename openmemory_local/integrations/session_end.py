"""Claude Code ``SessionEnd`` hook: queue the ended session's transcript for ingest, return at once.

Claude Code runs this when a session ends, with a JSON payload on stdin (``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name``, ``reason``). Claude Code is exiting: it
does not wait long for hooks and kills what is still running, so the hook must never block
nor fail the exit. It therefore:

1. reads stdin with a deadline and a size cap (a stdin that never closes cannot hold it);
2. checks the payload (a JSON object whose ``transcript_path`` is an existing file);
3. starts ``openmemory ingest`` on that transcript (and its subagents' folder) in a new
   session, detached from Claude Code's process group, under a runner that enforces a
   timeout and appends everything to ``<data>/logs/claude-code-hook.log``;
4. exits 0, whatever happened (every failure is logged, none is raised).

It imports only the standard library, so that it starts in tens of milliseconds; the
command line installed by ``openmemory install claude-code`` runs it as
``python -P -m openmemory_local.integrations.session_end --home DATA --openmemory EXE``.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

STDIN_DEADLINE = 2.0  # seconds to wait for the payload
STDIN_LIMIT = 1 << 20  # bytes; a SessionEnd payload is a few hundred
INGEST_TIMEOUT = 600.0  # seconds before the detached ingest is stopped
LOG_NAME = "claude-code-hook.log"
LOG_LIMIT = 1 << 20  # rotate the log past this size (one old generation kept)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _log_path(home: str) -> str:
    return os.path.join(home, "logs", LOG_NAME)


def _open_log(home: str):
    """The hook log, opened for appending (rotated when large); None when it cannot be."""
    try:
        path = _log_path(home)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        try:
            if os.path.getsize(path) > LOG_LIMIT:
                os.replace(path, path + ".1")
        except OSError:
            pass
        return open(path, "a", encoding="utf-8", errors="replace")
    except OSError:
        return None


def _log(handle, message: str) -> None:
    if handle is None:
        return
    try:
        handle.write(f"{_now()} {message}\n")
        handle.flush()
    except OSError:
        pass


def close_log(handle) -> None:
    if handle is not None:
        try:
            handle.close()
        except OSError:
            pass


def read_payload(fd: int = 0, deadline: float = STDIN_DEADLINE, limit: int = STDIN_LIMIT) -> bytes:
    """Read stdin until EOF, a complete JSON document, the deadline or the size cap."""
    if os.isatty(fd):
        return b""
    chunks: list[bytes] = []
    size = 0
    end = time.monotonic() + deadline
    while size < limit:
        remaining = end - time.monotonic()
        if remaining <= 0:
            break
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            break
        chunk = os.read(fd, min(65536, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        try:  # a writer that never closes stdin: stop as soon as the document is whole
            json.loads(b"".join(chunks))
            break
        except ValueError:
            continue
    return b"".join(chunks)


def _clean(value: object, limit: int = 200) -> str:
    text = str(value)
    text = "".join(ch if ch.isprintable() else "?" for ch in text)
    return text[:limit]


def parse_payload(raw: bytes) -> tuple[list[str], str]:
    """The paths to ingest and a description for the log; ValueError when the payload is unusable."""
    if not raw.strip():
        raise ValueError("no payload on stdin")
    try:
        payload = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"payload is not JSON ({exc})") from None
    if not isinstance(payload, dict):
        raise ValueError("payload is not a JSON object")
    transcript = payload.get("transcript_path")
    if not isinstance(transcript, str) or not transcript.strip():
        raise ValueError("payload has no transcript_path")
    transcript = os.path.expanduser(transcript)
    if not os.path.isfile(transcript):
        raise ValueError(f"transcript_path is not a file: {_clean(transcript)}")
    paths = [os.path.abspath(transcript)]
    stem, ext = os.path.splitext(paths[0])
    subagents = os.path.join(stem, "subagents")
    if ext == ".jsonl" and os.path.isdir(subagents):
        paths.append(subagents)
    description = " ".join(
        f"{key}={_clean(payload.get(key))}"
        for key in ("session_id", "reason", "hook_event_name")
        if payload.get(key) is not None
    )
    return paths, description


def _default_openmemory() -> str:
    candidate = os.path.join(os.path.dirname(sys.executable), "openmemory")
    return candidate if os.path.isfile(candidate) else "openmemory"


def spawn_ingest(home: str, openmemory: str, paths: list[str], timeout: float, log) -> int:
    """Start the runner detached (its own session, no stdin); return its pid."""
    argv = [
        sys.executable,
        "-P",
        "-m",
        "openmemory_local.integrations.session_end",
        "--run-ingest",
        "--home",
        home,
        "--openmemory",
        openmemory,
        "--timeout",
        str(timeout),
        "--",
        *paths,
    ]
    out = log if log is not None else subprocess.DEVNULL
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=out,
        start_new_session=True,
        close_fds=True,
        cwd=home if os.path.isdir(home) else "/",
    )
    return process.pid


def run_ingest(home: str, openmemory: str, paths: list[str], timeout: float) -> int:
    """The detached runner: ``openmemory ingest PATHS --home HOME`` within ``timeout`` seconds."""
    argv = [openmemory, "ingest", *paths, "--home", home]
    log = sys.stdout
    started = time.monotonic()
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    except OSError as exc:
        _log(log, f"session-end: cannot start {argv[0]}: {exc}")
        return 1
    try:
        code = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.terminate()
        try:
            code = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            code = process.wait()
        _log(log, f"session-end: ingest stopped after the {timeout:g}s timeout (pid {process.pid})")
        return 124
    _log(log, f"session-end: ingest exited {code} after {time.monotonic() - started:.1f}s (pid {process.pid})")
    return code


def _args(argv: list[str]) -> dict:
    """A tiny parser (argparse costs startup time and exits on errors, which a hook must not)."""
    options = {"home": None, "openmemory": None, "timeout": INGEST_TIMEOUT, "run_ingest": False, "paths": []}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            options["paths"] = argv[i + 1 :]
            break
        if arg == "--run-ingest":
            options["run_ingest"] = True
        elif arg in ("--home", "--openmemory", "--timeout") and i + 1 < len(argv):
            options[arg[2:]] = argv[i + 1]
            i += 1
        i += 1
    try:
        options["timeout"] = max(1.0, float(options["timeout"]))
    except (TypeError, ValueError):
        options["timeout"] = INGEST_TIMEOUT
    return options


def _default_home() -> str:
    from openmemory_local.core.config import resolve_home  # stdlib-only module: cheap

    return str(resolve_home(None))


def hook(argv: list[str], stdin_fd: int = 0) -> int:
    """The SessionEnd hook proper. Always returns 0."""
    log = None
    try:
        options = _args(argv)
        home = os.path.abspath(os.path.expanduser(options["home"] or _default_home()))
        log = _open_log(home)
        try:
            raw = read_payload(stdin_fd)
            paths, description = parse_payload(raw)
        except (ValueError, OSError) as exc:
            _log(log, f"session-end: nothing to ingest: {exc}")
            return 0
        openmemory = options["openmemory"] or _default_openmemory()
        pid = spawn_ingest(home, openmemory, paths, options["timeout"], log)
        _log(log, f"session-end: {description} -> ingest {' '.join(paths)} (runner pid {pid})")
    except BaseException as exc:  # noqa: BLE001 - a hook must never fail the session's exit
        _log(log, f"session-end: hook error: {type(exc).__name__}: {exc}")
    finally:
        close_log(log)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    options = _args(argv)
    if options["run_ingest"]:
        home = os.path.abspath(os.path.expanduser(options["home"] or _default_home()))
        return run_ingest(home, options["openmemory"] or _default_openmemory(), options["paths"], options["timeout"])
    return hook(argv)


if __name__ == "__main__":
    try:
        code = main()
    except BaseException:  # noqa: BLE001
        code = 0
    sys.exit(code)
