"""The injected clock.

Every function of the engine that depends on time takes ``now`` (an aware UTC
``datetime``) as an argument; only the edges (the CLI, a server) read the real clock,
through :func:`resolve_now`. A simulation, a test or a user replaying history sets the
time with ``--now 2026-03-01T09:00:00Z`` on any command, or with the environment
variable ``OPENMEMORY_NOW`` (the option wins over the variable).

A ``now`` later than the real clock is refused unless asked for (:func:`check_not_future`):
a sleep in the future would decay and archive the real store for good. Simulations on an
accelerated clock pass ``--future`` or set ``OPENMEMORY_ALLOW_FUTURE=1``.

Times are stored as ISO 8601 UTC text with millisecond precision and a ``Z`` suffix
(``2026-02-11T20:55:01.123Z``), the form Claude Code writes, so that the SQLite file stays
readable and sorts correctly as text.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone

__all__ = ["ENV_NOW", "ENV_ALLOW_FUTURE", "ClockError", "parse_time", "iso", "resolve_now", "check_not_future",
           "future_allowed", "epoch", "DAY"]

ENV_NOW = "OPENMEMORY_NOW"
ENV_ALLOW_FUTURE = "OPENMEMORY_ALLOW_FUTURE"
#: How far ahead of the real clock a ``now`` may be without ``--future`` (seconds).
FUTURE_TOLERANCE = 60.0
DAY = 86400.0


class ClockError(ValueError):
    """A time that could not be read (bad ``--now`` or ``OPENMEMORY_NOW``)."""


def parse_time(value: str) -> datetime:
    """Parse an ISO 8601 time into an aware UTC datetime.

    Accepts a ``Z`` suffix, an offset, or no zone (read as UTC), and a bare date
    (midnight UTC). Raises :class:`ClockError` for anything else.
    """
    text = value.strip()
    if not text:
        raise ClockError("empty time")
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ClockError(f"not an ISO 8601 time: {value!r} (example: 2026-03-01T09:00:00Z)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.astimezone(timezone.utc)


def iso(moment: datetime) -> str:
    """Format an aware datetime as stored: UTC, milliseconds, ``Z``."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def epoch(value: str | datetime) -> float:
    """Seconds since the Unix epoch for a stored ISO text or a datetime."""
    if isinstance(value, str):
        value = parse_time(value)
    return value.timestamp()


def resolve_now(option: str | None = None, environ: os._Environ | dict | None = None) -> datetime:
    """The current time: ``option`` if given, else ``$OPENMEMORY_NOW``, else the real clock."""
    env = os.environ if environ is None else environ
    raw = option if option else env.get(ENV_NOW)
    if raw:
        return parse_time(raw)
    return datetime.now(timezone.utc)



def future_allowed(option: bool = False, environ: os._Environ | dict | None = None) -> bool:
    """``--future`` given, or ``$OPENMEMORY_ALLOW_FUTURE`` set to anything but empty, 0, no or false."""
    env = os.environ if environ is None else environ
    return bool(option) or env.get(ENV_ALLOW_FUTURE, "").strip().lower() not in ("", "0", "no", "false")


def check_not_future(now: datetime, allowed: bool, wall: datetime | None = None) -> datetime:
    """``now``, unless it is later than the real clock (``wall``) and that was not allowed:
    :class:`ClockError` then."""
    wall = wall or datetime.now(timezone.utc)
    if not allowed and (now - wall).total_seconds() > FUTURE_TOLERANCE:
        raise ClockError(
            f"--now {iso(now)} is later than the clock ({iso(wall)}): a sleep there would age the real store for "
            f"good. For a simulation, pass --future or set {ENV_ALLOW_FUTURE}=1")
    return now
