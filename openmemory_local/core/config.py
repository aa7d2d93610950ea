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

      config.toml             optional settings (below); absent means every default
      sleep.lock              held while a sleep or a render runs (empty; never removed)
      reports/<time>.md       the morning reports, one per sleep that changed something

``<home>/config.toml`` (optional; TOML). Each key maps to a :class:`Config` field
(:data:`FILE_SETTINGS`); an unknown section or key is an error, so that a typo never falls
back to a default silently::

    [engine]
    embedder = "hashed"  # or "learned": see openmemory_local.core.embedders (the `learned` extra)

    [node]
    home = "~/.local/share/openmemory-node"   # the commons node's data folder
    timeout = 10.0                            # seconds per request to its local API

    [publish]
    min_strength = 1.5                        # lessons this strong are published (opted-in projects)

    [lessons]
    model_timeout = 20.0   # seconds per request to the lesson model ($OPENMEMORY_LESSON_MODEL_URL)
    model_budget = 120.0   # seconds in all per sleep given to it (a slow local model: raise both)

    [commons]
    receive = true       # openmemory run pulls received lessons from the node
    candidates = true    # render candidates (not yet verified) beside common lessons
    max_lessons = 10     # commons lessons per project, below the personal layer

Claude Code's folder is ``$CLAUDE_CONFIG_DIR`` when that variable is set (Claude Code's own
setting), else ``~/.claude``. Transcripts are found under its ``projects/``; lessons are
rendered into ``projects/<project folder>/memory/`` (see :mod:`openmemory_local.render.memory_folder`).

All tunables live in :class:`Config`, including every threshold and window of sleep and
render, so a single object describes a run. A few can be set from the environment (see
``ENV_*``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

__all__ = [
    "Config",
    "ConfigError",
    "ENV_HOME",
    "ENV_MAX_LINE_BYTES",
    "ENV_LESSON_MODEL_URL",
    "ENV_LESSON_MODEL",
    "ENV_LESSON_MODEL_KEY",
    "ENV_NODE_HOME",
    "CONFIG_FILE",
    "FILE_SETTINGS",
    "resolve_home",
    "resolve_node_home",
    "default_node_home",
    "read_config_file",
    "claude_config_dir",
    "default_sources",
    "agent_sources",
    "codex_home",
    "gemini_dir",
    "load_config",
]

ENV_HOME = "OPENMEMORY_HOME"
ENV_MAX_LINE_BYTES = "OPENMEMORY_MAX_LINE_BYTES"
ENV_LESSON_MODEL_URL = "OPENMEMORY_LESSON_MODEL_URL"
ENV_LESSON_MODEL = "OPENMEMORY_LESSON_MODEL"
ENV_LESSON_MODEL_KEY = "OPENMEMORY_LESSON_MODEL_KEY"
#: The commons node's data folder (the node's own variable: one setting for both programs).
ENV_NODE_HOME = "OPENMEMORY_NODE_HOME"
DB_NAME = "openmemory.db"
CONFIG_FILE = "config.toml"


class ConfigError(ValueError):
    """A setting that cannot be used (for example a non-numeric environment value)."""


@dataclass(frozen=True)
class Config:
    """One run's settings. Build it with :func:`load_config`; tests use ``Config(home=...)``."""

    home: Path
    #: Transcript roots ingested when no path is given (``openmemory ingest``, ``run``).
    sources: tuple[Path, ...] = field(default_factory=tuple)
    #: The other agents' transcript folders (Codex's, Gemini CLI's: :func:`adapters.agent_roots`),
    #: scanned by ``openmemory ingest`` and ``run`` when they exist.
    agent_sources: tuple[Path, ...] = field(default_factory=tuple)

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
    #: What embeds texts for recall, clustering and verify: "hashed" (no model, the default)
    #: or "learned" (sentence-transformers, the `learned` extra; see
    #: :mod:`openmemory_local.core.embedders`). Switching re-embeds the store once.
    embedder: str = "hashed"
    #: Up to this many vectors recall scores every one exactly (or reads the copy: see the next
    #: setting); beyond, an approximate nearest-neighbour index (usearch HNSW) proposes the
    #: candidates of the queries the copy does not serve, scored exactly (:mod:`openmemory_local.recall.ann`;
    #: not built where the copy serves every query). 0 turns it off.
    recall_index_min_rows: int = 200_000
    #: From this many vectors queries of the hashed embedding read the slot-major copy (exact
    #: answers at a tenth to a twentieth of the exact pass's time: :mod:`openmemory_local.recall.columns`;
    #: every query with its C pass built, short ones without), below it the exact pass; 0 turns
    #: the copy off.
    recall_copy_min_rows: int = 50_000
    #: The embedding matrix is compacted when more than this share of its rows are
    #: stale (episodes whose text changed or that were replaced) …
    vector_garbage_ratio: float = 0.5
    #: … and at least this many rows are stale.
    vector_garbage_min: int = 4096

    # --- sleep: decay (openmemory_local.sleep.passes.decay) ---------------------------------
    #: An episode's strength halves every this many days of activity of its project family
    #: without a touch (counted from ``last_touched``, up to whole UTC days; a day without a
    #: session in the family does not count); a lesson's, from its last reinforcement.
    decay_half_life_days: float = 45.0
    #: Below this strength an episode is archived (kept, never deleted, no longer recalled
    #: nor consolidated) and a lesson is archived (no longer rendered nor predicting).
    archive_below: float = 0.15

    # --- sleep: lessons (openmemory_local.sleep.passes.learn) ------------------------------
    #: A surprise joins the lesson (or forming group) whose centroid it resembles at
    #: least this much (cosine of the normalised signatures' embeddings) …
    lesson_join_cosine: float = 0.55
    #: … a failed tool call becomes a lesson once the same failure happened in this many
    #: sessions (a retry loop inside one session is one encounter) …
    error_min_sessions: int = 2
    #: … and a correction by the person is a lesson on its own.
    correction_min_sessions: int = 1
    #: Strength of a new lesson (plus ``lesson_join_strength`` for each session beyond
    #: the minimum that it already has).
    lesson_initial_strength: float = 1.0
    #: Added when a surprise from a session not yet in the lesson joins it (``seen`` grows
    #: by one for every surprise that joins, whatever its session).
    lesson_join_strength: float = 0.5
    #: Strength never grows beyond this, so a lesson that stops predicting can still fade.
    lesson_max_strength: float = 5.0
    #: The failure kinds of error episodes that are surprises. ``cancelled`` (a call
    #: cancelled because a parallel call failed) is a consequence, not a surprise.
    surprise_failures: tuple[str, ...] = (
        "error", "exit_code", "tool_use_error", "hook", "rejected", "interrupted",
    )
    #: Groups of one (kind, project family) are compared exhaustively up to this many;
    #: beyond, candidates come from an inverted index over the signatures' features:
    #: the ``cluster_prefix_features`` rarest features of the surprise, skipping
    #: features shared by more than ``cluster_posting_cap`` groups, and at most
    #: ``cluster_candidates`` groups (those sharing most features) are scored.
    cluster_exhaustive_max: int = 256
    cluster_prefix_features: int = 12
    cluster_posting_cap: int = 500
    cluster_candidates: int = 64

    # --- sleep: verify and predict (openmemory_local.sleep.passes.verify/predict) ------------
    #: A probe of a prediction (its situation, its failure, its resolution) matches a facet
    #: of a later episode of the lesson's project family (a command a session ran, a file it
    #: touched, the failure itself) that resembles it at least this much …
    verify_cosine: float = 0.5
    #: … and a session that met the situation without the failure or its resolution fails
    #: the prediction once it has been quiet this long (it may still be running before).
    prediction_settle_minutes: float = 60.0
    confirm_strength: float = 0.5
    fail_strength: float = 0.5
    #: Lessons at least this strong (and not vetoed) make a prediction when none is open.
    predict_min_strength: float = 1.0

    # --- lesson texts (openmemory_local.sleep.lesson_text) --------------------------------
    #: An OpenAI-compatible endpoint (``http://127.0.0.1:8080/v1``) of a local model
    #: that rephrases lessons; None (the default) keeps the deterministic texts. Its
    #: output must pass the observation check, else the deterministic text is kept.
    lesson_model_url: str | None = None
    lesson_model_name: str = "local"
    lesson_model_key: str | None = None
    #: Seconds per request, and in total per sleep, given to the model.
    lesson_model_timeout: float = 20.0
    lesson_model_budget: float = 120.0

    # --- render (openmemory_local.render.memory_folder) ------------------------------------------
    #: Claude Code's folder (``$CLAUDE_CONFIG_DIR``, else ``~/.claude``); None renders
    #: nowhere unless a memory folder is given (``openmemory render --memory-dir``).
    claude_dir: Path | None = None
    #: Lessons weaker than this are not rendered (they are fading) …
    render_min_strength: float = 0.5
    #: … and at most this many per project, strongest first.
    render_max_lessons: int = 30
    #: Claude Code reads the first 200 lines or 25 KB of MEMORY.md: the whole file, the
    #: owner's text included, is kept within both.
    memory_index_max_lines: int = 200
    memory_index_max_bytes: int = 25_000
    #: The most Open Memory's section of a Codex ``AGENTS.md`` or a Gemini CLI ``GEMINI.md`` may take
    #: (:mod:`openmemory_local.render.agents`; Codex's 32 KiB for all its files applies too).
    agent_section_max_bytes: int = 8_000

    # --- the commons node (openmemory_local.commons.node_link) ---------------------------------
    #: The node's data folder, where the engine reads its API address (``api.addr``) and
    #: token (``api.token``): ``--node-home``, else ``$OPENMEMORY_NODE_HOME``, else
    #: ``[node] home`` in ``<home>/config.toml``, else the node's default folder.
    node_home: Path | None = None
    #: Seconds one request to the node's local API may take.
    node_timeout: float = 10.0

    # --- publishing (openmemory_local.commons.publish) ------------------------------------------
    #: Lessons of opted-in projects at least this strong are published (not vetoed, passing
    #: the observation rule and the redaction gate). 1.5 is one step above a new lesson: a
    #: failure met in a third session, or a lesson whose prediction came true once; a single
    #: correction (1.0) stays local until it is confirmed.
    publish_min_strength: float = 1.5
    # --- the commons layer (openmemory_local.commons.receive) ----------------------------------
    #: ``openmemory run`` pulls what the node received (lessons, statuses, revocations);
    #: False turns the commons layer off (what it rendered leaves at the next render).
    commons_receive: bool = True
    #: Strangers' candidates (lessons by keys outside the owner's team, not yet common) are
    #: rendered too, marked as such. Off by default: every received lesson is tested in shadow
    #: (predicted and verified against this agent's sessions without being shown), and a lesson
    #: shown before it is verified is one whose use confirms itself (issue 28).
    commons_candidates: bool = False
    #: The team's candidates (lessons by keys the owner added with ``openmemory team add``)
    #: are rendered before they are verified, marked as the team's.
    commons_team_candidates: bool = True
    #: At most this many commons lessons per project, after the personal layer and within
    #: what it leaves of MEMORY.md's budget (the personal layer is never cut for them).
    commons_max_lessons: int = 10
    #: A commons lesson reaches a project only if the programs and tools it names score at
    #: least this much against what the project's sessions ran (a named program the project
    #: ran: 1; the same program with another subcommand, or a tool it used: 0.5; a language
    #: it uses: 0.25).
    commons_min_relevance: float = 0.5
    #: Records asked of the node per page of ``GET /v1/changes``.
    commons_page: int = 500
    #: Seconds the SessionStart hook gives the node before it leaves the memory folder as it is.
    commons_hook_timeout: float = 2.0
    #: A received lesson's prediction fails when this many days passed with sessions in the
    #: project and none met what it names (the window an attestation's evidence covers); the
    #: same verdict is not sent again within it.
    commons_window_days: float = 14.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "home", Path(self.home).expanduser())
        object.__setattr__(self, "sources", tuple(Path(p).expanduser() for p in self.sources))
        if self.claude_dir is not None:
            object.__setattr__(self, "claude_dir", Path(self.claude_dir).expanduser())
        if self.node_home is not None:
            object.__setattr__(self, "node_home", Path(self.node_home).expanduser())

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

    @property
    def reports_dir(self) -> Path:
        return self.home / "reports"

    @property
    def lock_path(self) -> Path:
        return self.home / "sleep.lock"

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


def default_node_home(environ=None) -> Path:
    """The commons node's default data folder, as ``openmemory-node`` resolves it:
    ``$XDG_DATA_HOME/openmemory-node``, else ``~/.local/share/openmemory-node``."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path(env.get("HOME") or Path.home()) / ".local" / "share"
    return base / "openmemory-node"


def resolve_node_home(option: str | os.PathLike | None = None, file_value: str | os.PathLike | None = None,
                      environ=None) -> Path:
    """The node's data folder: ``option`` (``--node-home``), else ``$OPENMEMORY_NODE_HOME``,
    else ``file_value`` (``[node] home``), else :func:`default_node_home`."""
    env = os.environ if environ is None else environ
    for value in (option, env.get(ENV_NODE_HOME), file_value):
        if value:
            return Path(value).expanduser().absolute()
    return default_node_home(env)


#: ``config.toml`` keys: (section, key) -> (Config field, type). Types are checked; paths
#: may start with ``~``.
FILE_SETTINGS: dict[tuple[str, str], tuple[str, type]] = {
    ("engine", "embedder"): ("embedder", str),
    ("node", "home"): ("node_home", Path),
    ("node", "timeout"): ("node_timeout", float),
    ("publish", "min_strength"): ("publish_min_strength", float),
    ("commons", "receive"): ("commons_receive", bool),
    ("commons", "candidates"): ("commons_candidates", bool),
    ("commons", "team_candidates"): ("commons_team_candidates", bool),
    ("commons", "max_lessons"): ("commons_max_lessons", int),
    ("commons", "min_relevance"): ("commons_min_relevance", float),
    ("commons", "hook_timeout"): ("commons_hook_timeout", float),
    ("commons", "window_days"): ("commons_window_days", float),
    ("lessons", "model_timeout"): ("lesson_model_timeout", float),
    ("lessons", "model_budget"): ("lesson_model_budget", float),
}


#: Settings whose value is one of a few words.
_CHOICES: dict[str, tuple[str, ...]] = {"embedder": ("hashed", "learned")}


def read_config_file(home: Path) -> dict:
    """The settings of ``<home>/config.toml`` as Config field -> value ({} without a file).

    Raises :class:`ConfigError` for a file that does not parse, an unknown section or key,
    or a value of the wrong type.
    """
    path = Path(home) / CONFIG_FILE
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no file; a home that is no folder: the store says so
        return {}
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    import tomllib  # (here: a home without a config file does not pay for the parser's import)

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path} does not parse: {exc}") from None
    out: dict = {}
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: {section!r} must be a [section]")
        for key, value in values.items():
            spec = FILE_SETTINGS.get((section, key))
            if spec is None:
                known = ", ".join(f"[{s}] {k}" for s, k in FILE_SETTINGS)
                raise ConfigError(f"{path}: unknown setting [{section}] {key} (known: {known})")
            name, kind = spec
            if kind is Path:
                if not isinstance(value, str) or not value:
                    raise ConfigError(f"{path}: [{section}] {key} must be a path (a string)")
                value = Path(value).expanduser()
            elif kind is float:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                    raise ConfigError(f"{path}: [{section}] {key} must be a positive number")
                value = float(value)
            elif kind is int:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ConfigError(f"{path}: [{section}] {key} must be a whole number, zero or more")
            elif kind is bool:
                if not isinstance(value, bool):
                    raise ConfigError(f"{path}: [{section}] {key} must be true or false")
            elif not isinstance(value, kind):
                raise ConfigError(f"{path}: [{section}] {key} must be a {kind.__name__}")
            if name in _CHOICES and value not in _CHOICES[name]:
                raise ConfigError(f"{path}: [{section}] {key} must be one of "
                                  + ", ".join(f'"{c}"' for c in _CHOICES[name]) + f", not {value!r}")
            out[name] = value
    return out


def claude_config_dir(environ=None) -> Path:
    """Claude Code's folder: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    env = os.environ if environ is None else environ
    if env.get("CLAUDE_CONFIG_DIR"):
        return Path(env["CLAUDE_CONFIG_DIR"]).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".claude"


def default_sources(environ=None) -> tuple[Path, ...]:
    """Claude Code's transcript root: ``$CLAUDE_CONFIG_DIR/projects`` or ``~/.claude/projects``."""
    return (claude_config_dir(environ) / "projects",)


def codex_home(environ=None) -> Path:
    """Codex CLI's folder: ``$CODEX_HOME``, else ``~/.codex``."""
    env = os.environ if environ is None else environ
    if env.get("CODEX_HOME"):
        return Path(env["CODEX_HOME"]).expanduser()
    return Path(env.get("HOME") or Path.home()) / ".codex"


def gemini_dir(environ=None) -> Path:
    """Gemini CLI's folder: ``$GEMINI_CLI_HOME/.gemini``, else ``~/.gemini``."""
    env = os.environ if environ is None else environ
    base = env.get("GEMINI_CLI_HOME") or env.get("HOME") or str(Path.home())
    return Path(base).expanduser() / ".gemini"


def agent_sources(environ=None) -> tuple[Path, ...]:
    """The transcript folders of the agents other than Claude Code: Codex's ``sessions`` and
    ``archived_sessions``, Gemini CLI's ``tmp`` (see :mod:`openmemory_local.ingest.adapters`). Path
    arithmetic only: reading the configuration imports no adapter."""
    codex = codex_home(environ)
    return (codex / "sessions", codex / "archived_sessions", gemini_dir(environ) / "tmp")


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


def load_config(home_option: str | os.PathLike | None = None, environ=None, *,
                node_home_option: str | os.PathLike | None = None, **overrides) -> Config:
    """The configuration for a run: home and sources resolved, ``<home>/config.toml`` read,
    environment overrides applied (the environment wins over the file, options over both)."""
    env = os.environ if environ is None else environ
    home = resolve_home(home_option, env)
    from_file = read_config_file(home)
    file_node_home = from_file.pop("node_home", None)
    settings = {
        "sources": default_sources(env),
        "agent_sources": agent_sources(env),
        "max_line_bytes": _env_int(env, ENV_MAX_LINE_BYTES, Config.max_line_bytes),
        "claude_dir": claude_config_dir(env),
        "lesson_model_url": env.get(ENV_LESSON_MODEL_URL) or None,
        "lesson_model_name": env.get(ENV_LESSON_MODEL) or Config.lesson_model_name,
        "lesson_model_key": env.get(ENV_LESSON_MODEL_KEY) or None,
        **from_file,  # FILE_SETTINGS never names a field set from the environment above
        "node_home": resolve_node_home(node_home_option, file_node_home, env),
    }
    config = Config(home=home, **settings)
    return replace(config, **overrides) if overrides else config


def project_dir(cwd: str | None) -> str | None:
    """Claude Code's folder name for a working directory (``/home/me/app`` -> ``-home-me-app``)."""
    if not cwd:
        return None
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def memory_dir_for(claude_dir: Path, cwd: str) -> Path:
    """``<claude dir>/projects/<cwd with non-alphanumerics as '-'>/memory``."""
    return Path(claude_dir) / "projects" / project_dir(cwd) / "memory"
