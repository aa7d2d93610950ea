"""The seam of the two-agent experiment: what the runner calls around the agents' days and
nights, and so how (and whether) their memories are connected.

:class:`ControlArm` connects nothing: each agent learns only from its own sessions.
:class:`simulations.commons_arm.CommonsArm` gives every agent its own node, connected.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

__all__ = ["Arm", "ControlArm", "CommonsUnavailable"]


class CommonsUnavailable(RuntimeError):
    """The commons arm cannot run here (said before anything runs)."""


class Arm:
    """What the runner calls, in this order:

    * :meth:`check` before anything runs (raise :class:`CommonsUnavailable` to refuse);
    * :meth:`setup` before day 0 (the agents' handles are made: ``world.agents``);
    * every day: :meth:`begin_day`, the agents' sessions, :meth:`nights` (every agent's
      nightly ``openmemory run``), :meth:`after_nights` (what to record for the day);
    * :meth:`finish` after the last day (the drill), :meth:`summary` (the arm's own part
      of the summary), and :meth:`close` in every case.
    """

    name = "control"
    connects_b = False

    @classmethod
    def check(cls, config) -> None:
        pass

    def setup(self, world, hosts) -> None:
        pass

    def begin_day(self, world, day: int, start: datetime) -> None:
        pass

    def nights(self, world, day: int, night: datetime, pool: ThreadPoolExecutor) -> dict[str, dict]:
        """Every agent's nightly run, two at a time (the machine has two cores)."""
        return dict(zip([a.name for a in world.agents], pool.map(lambda agent: agent.night(night), world.agents)))

    def after_nights(self, world, day: int, now: datetime, nights: dict[str, dict]) -> dict:
        return {}

    def finish(self, world) -> dict:
        return {}

    def summary(self, world, outcome: dict) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


class ControlArm(Arm):
    """No commons: each agent learns only from its own sessions. (B's engine has no node to
    reach: for B's memory folder the same as a node connected to no one, since B publishes
    nothing and only what reaches B's node could reach its folder.)"""
