"""Transcript adapters: each turns one agent's transcript format into the neutral events of
:mod:`openmemory_local.episodes`. Claude Code is the first; another agent's format is a new
module here with the same three methods (``discover``, ``related``, ``parser``)."""

from .claude_code import ClaudeCodeAdapter

ADAPTERS = {ClaudeCodeAdapter.name: ClaudeCodeAdapter()}
DEFAULT_ADAPTER = ClaudeCodeAdapter.name

__all__ = ["ADAPTERS", "DEFAULT_ADAPTER", "ClaudeCodeAdapter"]
