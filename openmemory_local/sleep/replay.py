"""Replay: a history brought in is consolidated as it happened.

A new user's first ``openmemory run`` (or ``openmemory ingest``) brings in months of
transcripts at once. Slept on once, at today's date, that backlog would be one undifferentiated
heap: lessons formed from everything at once, no prediction ever made before the sessions that
could confirm it. :func:`replay` sleeps instead as if the engine had been installed all along:

* one sleep (:func:`openmemory_local.sleep.passes.sleep`) at the end of each past UTC day that holds
  activity (an episode created that day, or a session that ended that day), at 23:59:59Z, in
  order, so lessons form, predictions are made and then verified by the days after;
* only days after the day of the store's last sleep (every day, if it never slept) and before
  the day of ``now``: the day of ``now`` is the caller's own sleep (``openmemory run`` sleeps
  at ``now`` right after), and a store slept every night has nothing to replay;
* decay counts days of activity (:class:`openmemory_local.sleep.passes.Activity`), so nothing is
  archived merely because the backlog is old on the day it is imported: a lesson from a year
  ago is as strong after the first run as it was at the end of its last day.

A sleep that is busy (another process holds ``sleep.lock``) raises
:class:`openmemory_local.sleep.passes.SleepBusy`; the days already slept stay slept (each sleep is its
own transaction) and the next replay goes on from there. A sleep of a store that holds nothing
(a new user's first ``openmemory run``, before any transcript) records no sleep, so the history
that arrives after it is replayed from its first day, as in a store that had it from the start.
Transcripts of days before the last sleep of a store that held something, arriving later
(another machine's history), are not replayed: the next sleep consolidates them, and they
cannot verify predictions made after them.
"""

from __future__ import annotations

from datetime import datetime, time, timezone
from typing import Callable

from openmemory_local.core.clock import iso
from openmemory_local.sleep.passes import sleep
from openmemory_local.storage.episodes import episode_days_between

__all__ = ["pending_days", "replay", "REPLAY_TIME"]

#: The time of day (UTC) of a replayed sleep: the end of the day.
REPLAY_TIME = time(23, 59, 59, tzinfo=timezone.utc)

#: ``progress(done, total, day)``: called before each day's sleep and once at the end.
Progress = Callable[[int, int, str], None]


def pending_days(store, now: datetime) -> list[datetime]:
    """The moments (the end of each day) :func:`replay` would sleep at, oldest first."""
    last = store.get_meta("last_sleep")
    after = last[:10] if last else ""
    today = iso(now)[:10]
    out = []
    for day in episode_days_between(store, after, today):
        try:
            date = datetime.strptime(day, "%Y-%m-%d").date()
        except (TypeError, ValueError):
            continue
        out.append(datetime.combine(date, REPLAY_TIME))
    return out


def replay(store, now: datetime, progress: Progress | None = None) -> dict:
    """Sleep at the end of each pending day (:func:`pending_days`); what changed, added up."""
    days = pending_days(store, now)
    out = {"days": len(days), "first": iso(days[0]) if days else None, "last": iso(days[-1]) if days else None,
           "learned": 0, "strengthened": 0, "confirmed": 0, "failed": 0, "made": 0, "episodes_archived": 0,
           "lessons_archived": 0, "seconds": 0.0}
    for done, moment in enumerate(days):
        if progress:
            progress(done, len(days), moment.date().isoformat())
        result = sleep(store, moment)
        out["learned"] += len(result.learn.get("learned", []))
        out["strengthened"] += len(result.learn.get("strengthened", []))
        out["confirmed"] += len(result.verify.get("confirmed", []))
        out["failed"] += len(result.verify.get("failed", []))
        out["made"] += len(result.predict.get("made", []))
        out["episodes_archived"] += result.decay.get("episodes_archived", 0)
        out["lessons_archived"] += len(result.decay.get("lessons_archived", []))
        out["seconds"] += result.seconds
    if progress and days:
        progress(len(days), len(days), "")
    out["seconds"] = round(out["seconds"], 3)
    return out
