"""What both halves of Open Memory share: the rules of the protocol that are not the wire format.

Pure and standard library only; imports neither ``openmemory_local`` nor ``openmemory_node``, so
the engine and the commons node depend on it and not on each other.

- The observation rule (:mod:`.observation`, PROTOCOL.md "The observation rule"):
  :func:`observation_violation`, :func:`is_observation`, :func:`check_observation`,
  :class:`ObservationViolation` (``rule``, ``detail``), :class:`NotAnObservation`, :data:`RULES`,
  :func:`canonical_form`.
- Content identity (:mod:`.content`, PROTOCOL.md "Content identity"): :func:`normalise` (the
  normalised text) and :func:`dedup_key` (``dedup_key(text, kind)``, lower-case hex).
- Unicode 14.0, the version the protocol pins (:mod:`.unicode14`): :data:`UNICODE_VERSION`,
  :func:`is_assigned`, :func:`mask_unassigned`.
- The rule's tables, generated from public sources (:mod:`.tables`, files in ``data/``, the same
  as spec/observation/).
"""

from .content import DEDUP_DOMAIN, WHITE_SPACE, dedup_key, normalise
from .observation import (
    RULES,
    NotAnObservation,
    ObservationViolation,
    canonical_form,
    check_observation,
    is_observation,
    observation_violation,
)
from .unicode14 import UNICODE_VERSION, is_assigned, mask_unassigned

__all__ = [
    "RULES",
    "ObservationViolation",
    "NotAnObservation",
    "observation_violation",
    "is_observation",
    "check_observation",
    "canonical_form",
    "normalise",
    "dedup_key",
    "DEDUP_DOMAIN",
    "WHITE_SPACE",
    "UNICODE_VERSION",
    "is_assigned",
    "mask_unassigned",
]
