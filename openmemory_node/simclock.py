"""An accelerated clock for simulations and tests: the daemon on another world's time.

``openmemory-node start --clock-file PATH`` runs the daemon on the clock a file describes
instead of the system's. The file holds one JSON object::

    {"world": 1775001600.0, "wall": 1764584000.0, "rate": 60.0}

meaning: at wall-clock time ``wall`` (Unix seconds, this machine's clock) the world's time
was ``world``, and it runs ``rate`` times as fast as the wall clock since. The node's time is
``world + (time.time() - wall) * rate``. Everything the daemon times goes by it (it is the
``clock`` the daemon injects everywhere): the ``created`` of records it signs, the clock-skew
check, arrival times, the commons' windows, the sync interval and connect delay, reconnect
backoff, rate limits and penalty decay. Loops that wake on the wall clock (the sync loop
looks every 0.25 s, the reconnect loop every ``[reconnect] interval``) compare against it, so
a sync interval of an hour of world time is a minute of wall time at rate 60.

The simulation moves the world by rewriting the file (write a temporary file, then rename:
:func:`write_clock_file`); the daemon looks at the file's modification time at every reading
(a ``stat``) and reads it again when it changed. The clock never goes backwards: a file
whose world is behind the time already shown holds the clock there until the world catches
up. A file that cannot be read or parsed later keeps the last good description (and is
logged once per change); one that cannot be read at start is an error (:class:`ClockFileError`).

This is a simulation and testing option, not a deployment one: a node on a clock other than
the real one refuses, as it should, records from its own future and signs records dated in
the world's time.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from pathlib import Path
from typing import Callable

__all__ = ["ClockFileError", "FileClock", "read_clock_file", "write_clock_file"]

log = logging.getLogger(__name__)


class ClockFileError(ValueError):
    """The clock file is missing or does not describe a clock."""


def _number(data: dict, key: str, path: Path) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ClockFileError(f"{path}: {key!r} must be a finite number, not {value!r}")
    return float(value)


def read_clock_file(path: str | os.PathLike) -> tuple[float, float, float]:
    """``(world, wall, rate)`` from a clock file; :class:`ClockFileError` if it is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ClockFileError(f"no clock file at {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ClockFileError(f"{path}: not a clock file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict):
        raise ClockFileError(f"{path}: not a JSON object")
    unknown = sorted(set(data) - {"world", "wall", "rate"})
    if unknown:
        raise ClockFileError(f"{path}: unknown keys {unknown} (known: world, wall, rate)")
    world, wall = _number(data, "world", path), _number(data, "wall", path)
    rate = _number(data, "rate", path) if "rate" in data else 1.0
    if world < 0 or wall < 0:
        raise ClockFileError(f"{path}: world and wall are Unix seconds (not negative)")
    if not 0 <= rate <= 1e7:
        raise ClockFileError(f"{path}: rate must be between 0 and 10,000,000")
    return world, wall, rate


def write_clock_file(path: str | os.PathLike, world: float, rate: float = 1.0, *,
                     wall: float | None = None) -> Path:
    """Describe a clock at ``world`` now (``wall``: default the current time), running at
    ``rate``; written atomically (a temporary file renamed over the old one)."""
    path = Path(path)
    body = {"world": float(world), "wall": float(time.time() if wall is None else wall), "rate": float(rate)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(body) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    read_clock_file(path)  # what we wrote reads back
    return path


class FileClock:
    """A clock read from a clock file (see the module docstring); call it for the time."""

    def __init__(self, path: str | os.PathLike, *, wall: Callable[[], float] = time.time):
        self.path = Path(path)
        self._wall = wall
        self._stamp: tuple[int, int, int] | None = None
        self._last = -math.inf
        self._bad: str | None = None
        self._lock = threading.Lock()
        self.world, self.anchor, self.rate = read_clock_file(self.path)
        self._stamp = self._file_stamp()

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st.st_mtime_ns, st.st_ino, st.st_size

    def _refresh(self) -> None:
        stamp = self._file_stamp()
        if stamp is None or stamp == self._stamp:
            return
        try:
            self.world, self.anchor, self.rate = read_clock_file(self.path)
            self._bad = None
        except ClockFileError as exc:
            if str(exc) != self._bad:
                self._bad = str(exc)
                log.warning("clock file unreadable, keeping the last good one: %s", exc)
        self._stamp = stamp

    def __call__(self) -> float:
        with self._lock:
            self._refresh()
            now = self.world + (self._wall() - self.anchor) * self.rate
            if now < self._last:  # never backwards
                return self._last
            self._last = now
            return now

    def describe(self) -> dict:
        return {"source": str(self.path), "world": self.world, "wall": self.anchor, "rate": self.rate}
