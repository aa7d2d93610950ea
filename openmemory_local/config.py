"""Where Open Memory keeps its data, where it finds transcripts, and every tunable.

The data folder ("home") is, in order of precedence:

1. ``--home DIR`` on the command line (``home_option``),
2. ``$OPENMEMORY_HOME``,
3. ``$XDG_DATA_HOME/openmemory``,
4. ``~/.local/share/openmemory``.

Its layout::

    <home>/
      openmemory.db           the store (SQLite, WAL mode: also -wal and -shm files)
      vectors/                embedding matrix files (a cache of the store, rebuilt if lost)
      archive/claude-code/    the kept raw stream: one gzip file per transcript, mirroring
                              the transcript's absolute path (…/<session>.jsonl.gz)
      tmp/                    large archive members being written (removed after use)

Claude Code transcripts are found under ``$CLAUDE_CONFIG_DIR/projects`` when that
variable is set (Claude Code's own setting), else ``~/.claude/projects``.

All tunables live in :class:`Config`; later passes (sleep, render) add theirs here so a
single object describes a run. A few can be set from the environment (see ``ENV_*``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = [
    "Config",
    "ConfigError",
    "ENV_HOME",
    "ENV_MAX_LINE_BYTES",
    "resolve_home",
    "default_sources",
    "load_config",
]

ENV_HOME = "OPENMEMORY_HOME"
ENV_MAX_LINE_BYTES = "OPENMEMORY_MAX_LINE_BYTES"
DB_NAME = "openmemory.db"


class ConfigError(ValueError):
    """A setting that cannot be used (for example a non-numeric environment value)."""


@dataclass(frozen=True)
class Config:
    """One run's settings. Build it with :func:`load_config`; tests use ``Config(home=...)``."""

    home: Path
    #: Transcript roots ingested when no path is given (``openmemory ingest``, ``run``).
    sources: tuple[Path, ...] = field(default_factory=tuple)

    # --- ingest -------------------------------------------------------------------
    #: A transcript line longer than this is skipped (counted as "oversized line").
    max_line_bytes: int = 64 * 1024 * 1024
    #: How many complete lines are inspected before a file with no Claude Code record
    #: in them is declared "not a transcript".
    probe_lines: int = 64
    #: Seconds a writer waits for another process's transaction before giving up on a
    #: transcript (it is then counted as "busy" and picked up by the next run).
    busy_timeout: float = 60.0
    #: gzip level of archive members (1 is fast and still shrinks transcripts ~6x).
    archive_level: int = 1
    #: When archive appends reach the disk: "run" (one sync at the end of an ingest run
    #: that appended anything: the default), "append" (fsync every append: slowest,
    #: safest against power loss) or "none" (leave it to the operating system).
    archive_sync: str = "run"

    # --- recall -------------------------------------------------------------------
    relevance_weight: float = 0.60
    recency_weight: float = 0.25
    strength_weight: float = 0.15
    recency_half_life_days: float = 30.0
    #: Seconds a recall waits to record its touch before skipping it (recall never
    #: fails because a long ingest holds the write lock).
    touch_timeout: float = 2.0

    # --- vectors ------------------------------------------------------------------
    #: The embedding matrix is compacted when more than this share of its rows are
    #: stale (episodes whose text changed or that were replaced) …
    vector_garbage_ratio: float = 0.5
    #: … and at least this many rows are stale.
    vector_garbage_min: int = 4096

    def __post_init__(self) -> None:
        object.__setattr__(self, "home", Path(self.home).expanduser())
        object.__setattr__(self, "sources", tuple(Path(p).expanduser() for p in self.sources))

    @property
    def db_path(self) -> Path:
        return self.home / DB_NAME

    @property
    def archive_dir(self) -> Path:
        return self.home / "archive"

    @property
    def vectors_dir(self) -> Path:
        return self.home / "vectors"

    @property
    def tmp_dir(self) -> Path:
        return self.home / "tmp"

    def with_(self, **changes) -> "Config":
        """A copy with some settings changed."""
        return replace(self, **changes)


def resolve_home(home_option: str | os.PathLike | None = None, environ=None) -> Path:
    """The data folder, by the precedence in the module docstring (not created here)."""
    env = os.environ if environ is None else environ
    if home_option:
        return Path(home_option).expanduser().absolute()
    if env.get(ENV_HOME):
        return Path(env[ENV_HOME]).expanduser().absolute()
    xdg = env.get("XDG_DATA_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "openmemory"
    return Path(env.get("HOME") or Path.home()) / ".local" / "share" / "openmemory"


def default_sources(environ=None) -> tuple[Path, ...]:
    """Claude Code's transcript root: ``$CLAUDE_CONFIG_DIR/projects`` or ``~/.claude/projects``."""
    env = os.environ if environ is None else environ
    if env.get("CLAUDE_CONFIG_DIR"):
        return (Path(env["CLAUDE_CONFIG_DIR"]).expanduser() / "projects",)
    return (Path(env.get("HOME") or Path.home()) / ".claude" / "projects",)


def _env_int(env, name: str, default: int | None, allow_zero: bool = False) -> int | None:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"${name} must be an integer, not {raw!r}") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"${name} must be {'zero or more' if allow_zero else 'positive'}, not {raw!r}")
    return value


def load_config(home_option: str | os.PathLike | None = None, environ=None, **overrides) -> Config:
    """The configuration for a run: home and sources resolved, environment overrides applied."""
    env = os.environ if environ is None else environ
    config = Config(
        home=resolve_home(home_option, env),
        sources=default_sources(env),
        max_line_bytes=_env_int(env, ENV_MAX_LINE_BYTES, Config.max_line_bytes),
    )
    return replace(config, **overrides) if overrides else config
