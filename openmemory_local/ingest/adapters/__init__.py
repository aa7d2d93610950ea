"""Transcript adapters: each turns one agent's transcript format into the neutral events of
:mod:`openmemory_local.ingest.episodes`. Three agents: Claude Code (:mod:`.claude_code`), Codex CLI
(:mod:`.codex`) and Gemini CLI (:mod:`.gemini`). An adapter says where its agent keeps
transcripts (``default_roots``, following the variables that move them), which files are its
own (``claims``, ``discover``, ``related``), whether a file is read whole (``whole_file``) and
makes the resumable parser of one file (``parser``; the protocol is in :mod:`.base`).

:func:`adapter_for` picks the adapter of one file: by its name and place first (``rollout-*``
is Codex's, ``chats/session-*`` Gemini's), else by its first line, else Claude Code's.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from openmemory_local.ingest.adapters.claude_code import ClaudeCodeAdapter
from openmemory_local.ingest.adapters.codex import CodexAdapter
from openmemory_local.ingest.adapters.gemini import GeminiAdapter

ADAPTERS = {a.name: a for a in (ClaudeCodeAdapter(), CodexAdapter(), GeminiAdapter())}
DEFAULT_ADAPTER = ClaudeCodeAdapter.name
_SNIFF = 65536

__all__ = ["ADAPTERS", "DEFAULT_ADAPTER", "ClaudeCodeAdapter", "CodexAdapter", "GeminiAdapter", "adapter_for",
           "agent_roots"]


def adapter_for(path: Path, *, sniff: bool = False):
    """The adapter of one transcript file: by name and place, then (``sniff``: a file given by
    name) by its first line; Claude Code's when nothing else claims it."""
    for name in ("codex", "gemini"):
        if ADAPTERS[name].claims(path):
            return ADAPTERS[name]
    if sniff:
        head = b""
        try:
            if stat.S_ISREG(os.stat(path).st_mode):  # never open a FIFO or a device to look at it
                with open(path, "rb") as handle:
                    head = handle.read(_SNIFF)
        except OSError:
            pass
        first = head.split(b"\n", 1)[0]
        if b'"session_meta"' in first and b'"payload"' in first:
            return ADAPTERS["codex"]
        if b'"projectHash"' in head[:4096] and b'"sessionId"' in head[:4096] and b'"uuid"' not in first:
            return ADAPTERS["gemini"]
    return ADAPTERS[DEFAULT_ADAPTER]


def agent_roots(environ=None) -> tuple[Path, ...]:
    """The transcript folders of the agents other than Claude Code (whose folder is
    ``Config.sources``): :func:`openmemory_local.core.config.agent_sources`."""
    from openmemory_local.core.config import agent_sources

    return agent_sources(environ)
