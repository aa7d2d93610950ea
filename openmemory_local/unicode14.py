"""Re-export of :mod:`openmemory_protocol.unicode14` (the code points assigned in Unicode 14.0).

The table moved to the protocol package, which both halves import; this name stays importable.
"""

from openmemory_protocol.unicode14 import (  # noqa: F401
    ASSIGNED_RANGES,
    UNASSIGNED_RE,
    UNICODE_VERSION,
    is_assigned,
    mask_unassigned,
)

__all__ = ["UNICODE_VERSION", "ASSIGNED_RANGES", "UNASSIGNED_RE", "is_assigned", "mask_unassigned"]
