"""What every command of the ``openmemory`` command line shares: exit codes, the usage error,
JSON output, the terminal's width, the argument parser's class, a progress bar, and opening the
store a command works on (its ``--home``, its ``--now``)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: `openmemory --version` and `report` load no numpy, SQLite helpers nor SDK
    from datetime import datetime

    from openmemory_local.storage.store import Store

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_PARTIAL, EXIT_STORE, EXIT_BUSY, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 5, 130
EXIT_NO_NODE = 8
EPISODE_KINDS = ("session", "error", "correction")  # what --kind accepts (the store's kinds)


class UsageError(Exception):
    pass


# --- output helpers -------------------------------------------------------------------


def _emit_json(value) -> None:
    import json

    json.dump(value, sys.stdout, ensure_ascii=False, indent=2, default=str)
    sys.stdout.write("\n")


def _columns(fallback: int) -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it (``$COLUMNS``, else the
    terminal of stdout, else ``fallback``), without importing shutil: it brings zlib, bz2 and
    lzma, 2 ms of a one-shot command."""
    try:
        columns = int(os.environ.get("COLUMNS", 0))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or fallback


def _width() -> int:
    return max(60, _columns(100))


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's own, its width found by :func:`_columns` (argparse's imports shutil for it,
    even to check one argument's metavar while the parser is built)."""

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        super().__init__(prog, indent_increment, max_help_position, _columns(80) - 2 if width is None else width)


class Parser(argparse.ArgumentParser):
    """The command line's parsers (its subcommands' too: they take their parent's class)."""

    def __init__(self, *args, formatter_class=_HelpFormatter, **kwargs):
        super().__init__(*args, formatter_class=formatter_class, **kwargs)


def _clip(text: str, n: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: max(0, n - 1)] + "\u2026"


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class ProgressBar:
    """A one-line progress bar on stderr, drawn only when stderr is a terminal."""

    def __init__(self, label: str, unit: str = "files"):
        self.label = label
        self.unit = unit
        self.enabled = sys.stderr.isatty()
        self._drawn = False

    def __call__(self, done: int, total: int, done_bytes: int = 0, total_bytes: int = 0, name: str = "") -> None:
        if not self.enabled or total == 0:
            return
        width = 24
        frac = done_bytes / total_bytes if total_bytes else done / total
        filled = int(frac * width)
        bar = "#" * filled + "." * (width - filled)
        size = f"{_mb(done_bytes)}/{_mb(total_bytes)} " if total_bytes else ""
        line = f"\r{self.label} [{bar}] {done:,}/{total:,} {self.unit} {size}"
        room = _width() - len(line) - 1
        line += _clip(os.path.basename(name), room) if room > 8 else ""
        sys.stderr.write(line.ljust(_width() - 1)[: _width() - 1])
        sys.stderr.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            sys.stderr.write("\r" + " " * (_width() - 1) + "\r")
            sys.stderr.flush()


# --- commands ---------------------------------------------------------------------------


def _config(args):
    from openmemory_local.core.config import load_config

    return load_config(args.home, node_home_option=getattr(args, "node_home", None))


def _open(args) -> Store:
    from openmemory_local.storage.store import Store

    return Store.open(_config(args))


def _now(args) -> datetime:
    """``--now`` (or ``$OPENMEMORY_NOW``, else the clock); later than the clock only with
    ``--future`` or ``$OPENMEMORY_ALLOW_FUTURE``."""
    from openmemory_local.core.clock import check_not_future, future_allowed, resolve_now

    return check_not_future(resolve_now(args.now), future_allowed(getattr(args, "future", False)))
