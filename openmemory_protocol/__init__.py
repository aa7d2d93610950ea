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

from importlib import import_module

#: Each name this package exports, and the module it comes from: imported on first use (PEP 562),
#: so that a command reaching only ``openmemory_protocol.native`` (the native modules' loader)
#: does not pay for the rule's tables.
_FROM = {
    "DEDUP_DOMAIN": "content", "WHITE_SPACE": "content", "dedup_key": "content", "normalise": "content",
    "RULES": "observation", "NotAnObservation": "observation", "ObservationViolation": "observation",
    "canonical_form": "observation", "check_observation": "observation", "is_observation": "observation",
    "observation_violation": "observation",
    "UNICODE_VERSION": "unicode14", "is_assigned": "unicode14", "mask_unassigned": "unicode14",
}
_SUBMODULES = frozenset({"content", "observation", "unicode14", "tables", "native"})

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


def __getattr__(name: str):
    if name in _FROM:
        value = getattr(import_module(f".{_FROM[name]}", __name__), name)
    elif name in _SUBMODULES:
        value = import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | _SUBMODULES)
