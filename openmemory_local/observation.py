"""Re-export of the observation rule, which lives in :mod:`openmemory_protocol.observation`.

The rule is protocol (PROTOCOL.md, "The observation rule"): the commons node applies it on the
wire, the local engine when it writes, renders or accepts a model's text. Both import it from
``openmemory_protocol``; this module keeps the engine's old import path working.
"""

from openmemory_protocol.observation import (  # noqa: F401
    ADDRESSED_PATTERNS,
    OBLIGATION_PATTERNS,
    RULES,
    NotAnObservation,
    ObservationViolation,
    canonical_form,
    check_observation,
    is_observation,
    observation_violation,
)

__all__ = [
    "RULES",
    "ADDRESSED_PATTERNS",
    "OBLIGATION_PATTERNS",
    "ObservationViolation",
    "NotAnObservation",
    "canonical_form",
    "observation_violation",
    "is_observation",
    "check_observation",
]
