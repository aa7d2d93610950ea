"""Builders for small synthetic Claude Code transcripts (the shapes seen in the real ones).

The writer lives in ``simulations/transcripts.py`` (the simulated agents write their sessions
with it too); the tests import it from here.
"""

from simulations.transcripts import CWD, SESSION, T

__all__ = ["CWD", "SESSION", "T"]
