"""The episode model, agent-neutral: events in, episodes and session digests out.

A transcript adapter (``adapters/claude_code.py`` first) turns its format into the
*events* defined here (the person said, the agent said, a tool was called, a tool
returned, ...). The :class:`EpisodeBuilder` turns events into episodes. It knows nothing
of any agent's file format, and its state is plain JSON so that reading can resume where
the previous run stopped.

Episodes (``Episode.kind``):

``session``
    One per session, merged from the digests of its transcripts (the main one and its
    subagents, see :func:`session_episode`). ``fields``: ``asked`` (the first request),
    ``tools`` (name -> count), ``tool_calls``, ``commands`` (command head, such as
    ``git push``, -> count), ``command_lines`` (distinct shell commands, first 40),
    ``files_read``/``files_edited``, ``failed`` (failed tool calls, subagents included)
    and ``failures`` (short list), ``corrections``, ``interrupts``, ``compactions``,
    ``person_messages`` (count) and ``person_last``, ``last_agent`` (the last thing the
    agent said), ``outcome`` (``completed``, ``interrupted``, ``failed``, ``waiting``: how
    it ended), ``subagents`` (one entry per subagent transcript), ``orphan`` (True when
    only subagent transcripts exist: the parent is missing), ``started``/``ended``,
    ``cwd``, ``project_dir``, ``branch``, and ``times``: when the session first and last
    met each of its commands, command lines and files (``{"c git push": [first, last],
    "l git push -u origin x": [...], "r lib/app.ex": [...], "e lib/app.ex": [...]}``), so
    that what a session did is dated at its own time, not at the session's start.

``error``
    One per failed tool call. ``fields``: ``tool``, ``command`` (the command, file,
    pattern or URL the call was about), ``description``, ``failure`` (``error``,
    ``exit_code``, ``tool_use_error``, ``rejected`` by the person, ``interrupted`` by the
    person, ``cancelled`` because a parallel call failed, ``hook``), ``exit_code``,
    ``first_line`` (the failure's reason line: the line a person would quote, see
    :mod:`openmemory_local.ingest.reason`), ``output`` (its start), ``call_id``, ``call_line``,
    ``exit_source`` (only from agents that record no success flag, Codex and Gemini CLI: where
    the exit code came from, ``field``, ``metadata``, ``output`` or ``status``),
    ``resolution`` (what made it go away later in the same session, or None: see
    :mod:`openmemory_local.ingest.resolutions`; the episode's text then ends with it).

``correction``
    One per correction by the person: a message that corrects what the agent just did
    (:func:`openmemory_local.ingest.corrections.correction_cue`, which reads it with the agent's
    last statement and recent tool calls *and its calls and statement after it*: the message
    is decided once the agent made 3 calls after it (reads not counted), at the person's next
    message, or at the end of a read once the agent answered; a strong cue at once), or
    feedback given when rejecting a tool call. ``fields``: ``message``, ``cue`` (what made it
    one: ``rejected``, ``still``, ``restated``, ``no``, ``changed``, ...) and ``opening`` (the
    same, kept for older readers), ``agent_statement`` (what the agent said just before, on
    the same branch of the conversation), ``agent_action`` (the agent's last tool call before
    it), ``course`` (how the agent changed course after it: ``undo``, ``redo``, ``conceded``,
    ``stopped``, or None; see docs/corrections.md). :func:`correction_opening` is the former
    opening-word test, kept as the benchmark's baseline.

Only :class:`PersonSaid` events ever count as the person: an adapter must never emit one
for tool output, summaries, notifications, command wrappers, skill or hook text.
"""

from __future__ import annotations

from functools import lru_cache

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any, Iterable

from openmemory_local.ingest import resolutions as _res
from openmemory_local.ingest.corrections import AFTER_CALLS, STRONG_CUES, correction_cue, course_change, is_read
from openmemory_local.ingest.reason import reason_line
from openmemory_local.core.config import project_dir

__all__ = [
    "Episode",
    "Meta",
    "Link",
    "PersonSaid",
    "AgentSaid",
    "ToolCalled",
    "ToolReturned",
    "Interrupted",
    "CommandRun",
    "Compacted",
    "HookFailed",
    "Titled",
    "TaskGiven",
    "EpisodeBuilder",
    "CORRECTION_OPENINGS",
    "correction_opening",
    "first_meaningful_line",
    "command_heads",
    "session_episode",
]

# --- episodes ---------------------------------------------------------------------


@dataclass
class Episode:
    """An episode before it is stored (the store adds id, strength, touches, ...)."""

    kind: str
    key: str
    text: str
    fields: dict
    session_id: str | None
    agent_id: str | None
    project: str | None
    created: str
    source_line: int | None


# --- events -----------------------------------------------------------------------
# Every event has ``line`` (1-based line in the transcript) and ``ts`` (ISO time or None).
# ``uid``/``parent`` place it in the conversation tree when the format has one.


@dataclass(slots=True)
class Meta:
    """Who and where: updates the transcript's identity (first values win, except branch)."""

    line: int
    ts: str | None
    session_id: str | None = None
    agent_id: str | None = None
    cwd: str | None = None
    branch: str | None = None
    version: str | None = None


@dataclass(slots=True)
class Link:
    """A record that says nothing to us but is part of the conversation tree."""

    line: int
    ts: str | None
    uid: str
    parent: str | None


@dataclass(slots=True)
class PersonSaid:
    line: int
    ts: str | None
    text: str
    uid: str | None = None
    parent: str | None = None
    #: "message", "queued" (typed while the agent worked) or "rejection" (feedback given
    #: when rejecting a tool call: always a correction).
    via: str = "message"


@dataclass(slots=True)
class AgentSaid:
    line: int
    ts: str | None
    text: str
    uid: str | None = None
    parent: str | None = None
    turn: str | None = None  # one model response may span several lines: counted once


@dataclass(slots=True)
class ToolCalled:
    line: int
    ts: str | None
    call_id: str
    tool: str
    command: str = ""
    description: str = ""
    files_read: tuple[str, ...] = ()
    files_edited: tuple[str, ...] = ()
    shell: bool = False  # ``command`` is a shell command line
    uid: str | None = None
    parent: str | None = None
    turn: str | None = None
    agent: str | None = None  # a subagent's call seen from its parent's transcript


@dataclass(slots=True)
class ToolReturned:
    line: int
    ts: str | None
    call_id: str
    failure: str | None = None  # None: it worked; else a failure kind (see module doc)
    text: str = ""
    exit_code: int | None = None
    uid: str | None = None
    parent: str | None = None
    agent: str | None = None  # a subagent's result seen from its parent's transcript
    #: Where ``exit_code`` came from when the agent records no success flag: ``field`` (a
    #: structured field), ``metadata`` (a JSON envelope), ``output`` (parsed from the text),
    #: ``status`` (the call's status); None: the adapter's own rule (Claude Code's result flag).
    exit_source: str | None = None


@dataclass(slots=True)
class Interrupted:
    """The person interrupted the agent (not a tool call failure by itself)."""

    line: int
    ts: str | None
    uid: str | None = None
    parent: str | None = None


@dataclass(slots=True)
class CommandRun:
    """A command the person typed to the agent's host (``/compact``, ``/model``, a skill)."""

    line: int
    ts: str | None
    name: str
    args: str = ""


@dataclass(slots=True)
class Compacted:
    line: int
    ts: str | None
    trigger: str = ""


@dataclass(slots=True)
class HookFailed:
    """A hook that failed outside any tool call (a tool call blocked by a hook arrives as a
    failed ToolReturned instead)."""

    line: int
    ts: str | None
    key: str
    hook: str
    text: str


@dataclass(slots=True)
class TaskGiven:
    """The task a (sub)agent was given by the agent that launched it (never the person)."""

    line: int
    ts: str | None
    text: str


@dataclass(slots=True)
class Titled:
    line: int
    ts: str | None
    title: str


# --- text helpers -----------------------------------------------------------------

#: Openings that make a person's message a correction (matched on whole words, after
#: an optional "ok,"/"hmm," and leading punctuation).
CORRECTION_OPENINGS: tuple[str, ...] = (
    "no", "nope", "nah", "don't", "dont", "do not", "stop", "wrong", "actually", "instead",
    "undo", "revert", "roll back", "rollback", "wait", "hold on", "not that", "that's not",
    "thats not", "that is not", "that's wrong", "incorrect", "never", "why did you",
    "you shouldn't", "you should not", "you didn't", "you did not", "please don't",
    "please do not", "please stop", "please undo", "please revert", "i said", "i told you",
    "i asked", "not what i",
)
_OPENING_RE = re.compile(
    r"^(?:(?:ok(?:ay)?|hmm+|uh+|um+|oh)\b[\s,.!]*)?("
    + "|".join(re.escape(o) for o in sorted(CORRECTION_OPENINGS, key=len, reverse=True))
    + r")(?![\w'])"
)
_LEADING = re.compile(r"^[\s\"'`*_>#~\-\u2022(\[]+")


def correction_opening(text: str) -> str | None:
    """The correction word ``text`` opens with, or None."""
    norm = unicodedata.normalize("NFKC", text[:200]).replace("\u2019", "'").replace("\u2018", "'")
    norm = _LEADING.sub("", norm.lower())
    match = _OPENING_RE.match(norm)
    return match.group(1) if match else None


def first_meaningful_line(text: str, *, limit: int = 300, tool: str | None = None) -> str:
    """The line of a failure's output that says what went wrong (:func:`openmemory_local.ingest.reason.reason_line`)."""
    return reason_line(text, tool=tool, limit=limit)


_MULTI = frozenset(
    "git mix npm npx yarn pnpm bun cargo go uv pip pip3 poetry docker kubectl make bd gh "
    "python python3 node deno rails bundle rake dotnet gradle mvn terraform helm brew apt "
    "apt-get systemctl tmux elixir iex".split()
)
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=\S*$")
_SHELL_TOKEN = re.compile(r"""'[^']*'?|"(?:\\.|[^"\\])*"?|&&|\|\||[;|]|[^'"&|;]+|&""")


def _split_shell(line: str) -> list[str]:
    """Split a command line on ``&&``, ``||``, ``;`` and ``|`` outside quotes."""
    if not any(c in line for c in "'\"&|;"):
        return [line.strip()] if line.strip() else []
    segments, current = [], []
    for match in _SHELL_TOKEN.finditer(line):
        token = match.group(0)
        if token in ("&&", "||", ";", "|"):
            segments.append("".join(current))
            current = []
        else:
            current.append(token)
    segments.append("".join(current))
    return [seg.strip() for seg in segments if seg.strip()]


@lru_cache(maxsize=1 << 16)
def _command_heads_cached(command: str):
    return tuple(_command_heads_uncached(command))


def command_heads(command: str) -> list[str]:
    """The programs a shell command line runs: ``cd x && git push 2>&1 | tail`` -> ``git push``.

    ``cd``, ``echo`` and pipes into output filters are not counted; for tools with
    subcommands the subcommand is kept (``git push``, ``mix test``, ``python -m pytest``).
    """
    # memoised: a pure function of its arguments, which sleep asks again and again
    if len(command) > 512:
        return _command_heads_uncached(command)
    return list(_command_heads_cached(command))


#: Programs that run another (their own options skipped); filters not counted after a first program;
#: programs never counted.
_WRAPPERS = frozenset(("sudo", "time", "env", "nohup", "exec", "timeout"))
_FILTERS = frozenset(("cd", "echo", "true", "false", "head", "tail", "grep", "wc", "sort", "cat", "less", "tee",
                      "xargs", "printf", "sleep", "2>&1"))
_NEVER = frozenset(("cd", "echo", "true", "false", "sleep", "printf"))


def _command_heads_uncached(command: str) -> list[str]:
    """The work of :func:`command_heads` (uncached)."""
    heads = []
    first_line = _first_line(command)
    for segment in _split_shell(first_line):
        words = [w for w in segment.split() if not _ENV_ASSIGN.match(w)]
        while words and words[0] in _WRAPPERS:
            words = words[1:]
            while words and (words[0][:1] == "-" or words[0][:1].isdigit()):
                words = words[1:]
        if not words:
            continue
        prog = words[0].rsplit("/", 1)[-1]
        if prog in _FILTERS:
            if heads or prog in _NEVER:
                continue
        head = prog
        if prog in _MULTI:
            sub = _subcommand(words[1:])
            if sub:
                head = f"{prog} {sub}"
        heads.append(head)
    return heads


def _subcommand(args: list[str]) -> str | None:
    if args[:1] == ["-m"] and len(args) > 1:
        return "-m " + args[1]
    i = 0
    while i < len(args):
        word = args[i]
        if word in ("-C", "-c", "--git-dir", "--work-tree", "--prefix", "--cwd"):
            i += 2
            continue
        if word.startswith("-"):
            i += 1
            continue
        return word if re.match(r"^[A-Za-z][\w.:-]*$", word) else None
    return None


def _first_line(text: str) -> str:
    return text.lstrip().split("\n", 1)[0].rstrip()


def _clip(text: str, n: int) -> str:
    text = " ".join(text[: 4 * n + 64].split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "\u2026"


def _rel(path: str, cwd: str | None) -> str:
    if cwd and path.startswith(cwd.rstrip("/") + "/"):
        return path[len(cwd.rstrip("/")) + 1 :]
    return path


# --- the builder --------------------------------------------------------------------

_MAX_PENDING = 512
_NO_REF = object()
_MAX_RESOLVED = 128
_MAX_REFS = 512
_MAX_STATEMENTS = 32
_MAX_LIST = 40
_MAX_FAILURES = 20
#: Cues the calls after a message cannot change: decided at once.
_DECIDED_NOW = frozenset(STRONG_CUES)


def _new_digest() -> dict:
    return {
        "session_id": None,
        "agent_id": None,
        "cwd": None,
        "branch": None,
        "version": None,
        "title": None,
        "started": None,
        "ended": None,
        "asked": None,
        "prompt": None,
        "person_messages": 0,
        "person_last": None,
        "agent_turns": 0,
        "tool_calls": 0,
        "tools": {},
        "commands": {},
        "command_lines": [],
        "files_read": [],
        "files_edited": [],
        "failed": 0,
        "failures": [],
        "corrections": 0,
        "interrupts": 0,
        "compactions": 0,
        "host_commands": [],
        "delegations": [],
        "last_agent": None,
        "last_event": None,
        "last_line": 0,
        "times": {},
    }


def _when(d: dict, kind: str, item: str, ts: str | None) -> None:
    """Record when a session met ``item`` (``kind``: ``c`` a command head, ``l`` a command line,
    ``r`` a file read, ``e`` a file edited): ``times["<kind> <item>"] = [first, last]``."""
    if not ts:
        return
    times = d["times"]
    key = f"{kind} {item}"
    seen = times.get(key)
    if seen is None:
        times[key] = [ts, ts]
    else:  # min and max, as comparisons
        if ts < seen[0]:
            seen[0] = ts
        if ts > seen[1]:
            seen[1] = ts


def _merge_times(into: dict, more: dict, kinds: str) -> None:
    for key, (first, last) in more.items():
        if key[:1] not in kinds:
            continue
        seen = into.get(key)
        into[key] = [first, last] if seen is None else [min(seen[0], first), max(seen[1], last)]


@dataclass
class _State:
    digest: dict = field(default_factory=_new_digest)
    pending: dict = field(default_factory=dict)  # call id -> call summary
    resolved: list = field(default_factory=list)  # recently resolved call ids
    refs: dict = field(default_factory=dict)  # uid -> index of the statement in force there
    statements: dict = field(default_factory=dict)  # index (str) -> {"text", "line"}
    next_statement: int = 0
    last_statement: int | None = None
    last_action: dict | None = None
    last_turn: str | None = None
    open_failures: list = field(default_factory=list)  # failures waiting for their resolution
    recent_actions: list = field(default_factory=list)  # the agent's last tool calls (tool, heads, files)
    open_turn: dict | None = None  # a person message waiting for the agent's next calls (corrections)


class EpisodeBuilder:
    """Turns one transcript's events into episodes and a digest; resumable.

    ``EpisodeBuilder(state)`` continues from a previous :meth:`state`. Feed events with
    :meth:`feed`; collect new episodes from :meth:`take` (error and correction episodes
    only: the session episode is merged from digests by :func:`session_episode`).
    Whether a message is the person's is the adapter's decision: the builder trusts
    :class:`PersonSaid` and nothing else.
    """

    def __init__(self, state: dict | None = None):
        s = _State()
        if state:
            for key, value in state.items():
                setattr(s, key, value)
            digest = _new_digest()
            digest.update(s.digest)
            s.digest = digest
        self.s = s
        self._resolved = set(s.resolved)
        self._out: list[Episode] = []
        # How many refs point at each statement (derived from ``refs``, not saved): a statement
        # no ref points at may be trimmed. ``_dead``: some statement may have none (the trim's
        # scan is needed only then).
        self._refcount: dict[int, int] = {}
        for statement in s.refs.values():
            if statement is not None:
                self._refcount[statement] = self._refcount.get(statement, 0) + 1
        self._dead = True

    def state(self) -> dict:
        """The resumable state (plain JSON-able data; shares structure with the builder)."""
        return dict(vars(self.s))

    @property
    def digest(self) -> dict:
        return self.s.digest

    def take(self) -> list[Episode]:
        """The episodes made since the last call; an episode re-made (an error whose resolution
        came later) appears once, in its latest form. A person message the agent has answered
        (a call or a statement after it) is decided here with what followed so far; one it has
        not answered yet waits in the state for the next read."""
        turn = self.s.open_turn
        if turn is not None and (turn["after"] or turn["after_said"] is not None):
            self._settle_turn()
        out, self._out = self._out, []
        latest: dict[tuple[str, str], Episode] = {}
        for ep in out:
            latest[(ep.kind, ep.key)] = ep
        return list(latest.values())

    # --- feeding ---------------------------------------------------------------

    def feed_all(self, events: Iterable) -> None:
        for event in events:
            self.feed(event)

    def feed(self, ev) -> None:
        d = self.s.digest
        ts = ev.ts
        if ts:
            if d["started"] is None or ts < d["started"]:
                d["started"] = ts
            if d["ended"] is None or ts > d["ended"]:
                d["ended"] = ts
        if ev.line > d["last_line"]:
            d["last_line"] = ev.line
        handler = _HANDLERS.get(type(ev))
        if handler is not None:
            handler(self, ev)

    # --- tree of the conversation ----------------------------------------------

    def _link(self, uid: str | None, parent: str | None, statement: int | None = None) -> None:
        if not uid:
            return
        refs = self.s.refs
        count = self._refcount
        if statement is None:
            statement = refs.get(parent) if parent in refs else self.s.last_statement
        old = refs.get(uid, _NO_REF)
        if old is not _NO_REF:
            if old == statement:
                return  # linked there already (a record's second event): nothing changes
            self._unref(old)
        refs[uid] = statement
        if statement is not None:
            count[statement] = count.get(statement, 0) + 1
        if len(refs) > _MAX_REFS + _MAX_REFS // 4:  # trim in batches: amortised O(1)
            for key in list(refs)[: len(refs) - _MAX_REFS]:
                self._unref(refs.pop(key))

    def _unref(self, statement: int | None) -> None:
        if statement is None:
            return
        left = self._refcount[statement] - 1
        if left:
            self._refcount[statement] = left
        else:
            del self._refcount[statement]
            self._dead = True

    def _statement_before(self, parent: str | None) -> dict | None:
        index = self.s.refs.get(parent) if parent and parent in self.s.refs else self.s.last_statement
        if index is None:
            return None
        return self.s.statements.get(str(index))

    # --- handlers --------------------------------------------------------------

    def _on_meta(self, ev: Meta) -> None:
        d = self.s.digest
        for key in ("session_id", "agent_id", "cwd", "version"):
            value = getattr(ev, key)
            if value and not d[key]:
                d[key] = value
        if ev.branch:
            d["branch"] = ev.branch

    def _on_link(self, ev: Link) -> None:
        self._link(ev.uid, ev.parent)

    def _on_title(self, ev: Titled) -> None:
        self.s.digest["title"] = _clip(ev.title, 200)

    def _on_agent(self, ev: AgentSaid) -> None:
        text = ev.text.strip()
        s = self.s
        self._count_turn(ev.turn)
        if not text:
            self._link(ev.uid, ev.parent)
            return
        if s.open_turn is not None and s.open_turn["after_said"] is None:
            s.open_turn["after_said"] = _clip(text, 600)
        index = s.next_statement
        s.next_statement += 1
        said = _clip(text, 600)
        statements = s.statements
        statements[str(index)] = {"text": said, "line": ev.line}
        if len(statements) > 2 * _MAX_STATEMENTS:  # trim in batches: amortised O(1)
            if self._dead:  # drop statements no ref points at, oldest first (``index`` is live)
                live = self._refcount
                for key in list(statements):
                    if len(statements) <= _MAX_STATEMENTS:
                        break
                    number = int(key)
                    if number != index and number not in live:
                        del statements[key]
                else:
                    self._dead = False  # every statement left has a ref (or is ``index``)
            while len(statements) > 4 * _MAX_STATEMENTS:
                del statements[next(iter(statements))]
        s.last_statement = index
        self._link(ev.uid, ev.parent, index)
        if index not in self._refcount:
            self._dead = True  # no ref points at it (an event without uid)
        s.digest["last_agent"] = {"text": said if len(said) <= 400 else said[:399] + "\u2026", "line": ev.line}
        s.digest["last_event"] = "agent"

    def _count_turn(self, turn: str | None) -> None:
        if turn is None:
            self.s.digest["agent_turns"] += 1
        elif turn != self.s.last_turn:
            self.s.digest["agent_turns"] += 1
            self.s.last_turn = turn

    def _on_person(self, ev: PersonSaid) -> None:
        text = ev.text.strip()
        if not text:
            return
        d = self.s.digest
        d["person_messages"] += 1
        if d["asked"] is None:
            d["asked"] = {"text": _clip(text, 600), "line": ev.line}
        d["person_last"] = {"text": _clip(text, 400), "line": ev.line}
        interrupted = d["last_event"] == "interrupt"  # the person stopped the agent just before
        d["last_event"] = "person"
        self._settle_turn()  # the previous message's calls after it end here
        before = self._statement_before(ev.parent)
        turn = {"text": text, "via": ev.via, "uid": ev.uid, "line": ev.line, "ts": ev.ts, "interrupted": interrupted,
                "said": before["text"] if before else None, "said_line": before["line"] if before else None,
                "before": list(self.s.recent_actions), "action": self.s.last_action, "after": [],
                "after_said": None}
        if correction_cue(text, via=ev.via, agent_said=turn["said"], actions=turn["before"],
                          interrupted=interrupted) in _DECIDED_NOW:
            self._decide_turn(turn, known=False)  # the words alone decide (what follows cannot change it)
        elif turn["before"] or turn["said"]:
            self.s.open_turn = turn  # decided with the agent's next calls (_settle_turn)
        self._link(ev.uid, ev.parent)

    # --- corrections: a message decided with the agent's next calls (openmemory_local.ingest.corrections)

    def _settle_turn(self) -> None:
        """Decide the open message, if any, with the calls and statement seen after it."""
        turn = self.s.open_turn
        if turn is not None:
            self.s.open_turn = None
            self._decide_turn(turn, known=True)

    def _after_call(self, call: dict) -> None:
        turn = self.s.open_turn
        if turn is None:
            return
        turn["after"].append(call)
        if sum(1 for a in turn["after"] if not is_read(a)) >= AFTER_CALLS:
            self._settle_turn()

    def _decide_turn(self, turn: dict, *, known: bool) -> None:
        cue = correction_cue(turn["text"], via=turn["via"], agent_said=turn["said"], actions=turn["before"],
                             after=turn["after"] if known else None, after_said=turn["after_said"],
                             interrupted=turn.get("interrupted", False))
        if not cue:
            return
        d = self.s.digest
        action = turn["action"]
        d["corrections"] += 1
        key = turn["uid"] or f"{d['session_id']}:{d['agent_id'] or ''}:{turn['line']}"
        text = turn["text"]
        fields = {
            "message": _clip(text, 1000),
            "opening": cue,  # the cue that made it one (openmemory_local.ingest.corrections.CUES)
            "cue": cue,
            "agent_statement": turn["said"],
            "agent_statement_line": turn["said_line"],
            "agent_action": action,
            "via": turn["via"],
            "course": course_change(turn["before"], turn["after"], turn["after_said"], turn["said"]) if known else None,
        }
        said = f' after the agent said: "{_clip(turn["said"], 300)}"' if turn["said"] else ""
        did = ""
        if action:
            did = f" (its last action: {action['tool']} {_clip(action['command'], 120)})".rstrip()
        text_out = f'The person corrected the agent: "{_clip(text, 400)}"{said}{did}.'
        self._emit("correction", key, text_out, fields, PersonSaid(turn["line"], turn["ts"], text))

    def _on_call(self, ev: ToolCalled) -> None:
        s = self.s
        d = s.digest
        self._count_turn(ev.turn)
        self._link(ev.uid, ev.parent)
        if ev.call_id in s.pending or ev.call_id in self._resolved:
            return  # the same call written twice
        d["tool_calls"] += 1
        tools = d["tools"]
        tools[ev.tool] = tools.get(ev.tool, 0) + 1
        ts = ev.ts
        if ev.shell and ev.command:
            commands = d["commands"]
            for head in command_heads(ev.command):
                commands[head] = commands.get(head, 0) + 1
                _when(d, "c", head, ts)
            line = _clip(_first_line(ev.command), 200)
            lines = d["command_lines"]
            if line in lines:
                _when(d, "l", line, ts)
            elif len(lines) < _MAX_LIST:
                lines.append(line)
                _when(d, "l", line, ts)
        if ev.files_read or ev.files_edited:
            cwd = d["cwd"]
            for name, files in (("files_read", ev.files_read), ("files_edited", ev.files_edited)):
                known = d[name]
                for path in files:
                    rel = _rel(path, cwd)
                    if rel in known:
                        _when(d, name[6], rel, ts)
                    elif len(known) < _MAX_LIST:
                        known.append(rel)
                        _when(d, name[6], rel, ts)
        if ev.tool in ("Task", "Agent") and ev.description:
            if len(d["delegations"]) < _MAX_LIST:
                d["delegations"].append(_clip(ev.description, 120))
        command = ev.command[:500]
        summary = {
            "tool": ev.tool,
            "command": command,
            "description": ev.description[:200],
            "line": ev.line,
            "ts": ev.ts,
        }
        s.pending[ev.call_id] = summary
        if len(s.pending) > _MAX_PENDING:
            del s.pending[next(iter(s.pending))]
        s.last_action = {"tool": ev.tool, "command": command[:200], "line": ev.line}
        self._remember_action(summary, ev.agent, ev.shell)
        d["last_event"] = "tool"

    def _on_result(self, ev: ToolReturned) -> None:
        s = self.s
        d = s.digest
        self._link(ev.uid, ev.parent)
        call = s.pending.pop(ev.call_id, None)
        if call is None and ev.call_id in self._resolved:
            return  # the same result written twice
        s.resolved.append(ev.call_id)
        self._resolved.add(ev.call_id)
        if len(s.resolved) > 2 * _MAX_RESOLVED:
            del s.resolved[: len(s.resolved) - _MAX_RESOLVED]
            self._resolved = set(s.resolved)
        if ev.failure is None:
            d["last_event"] = "tool"
            if call is not None:
                self._watch_resolutions(call, ev)
            return
        call = call or {"tool": "unknown", "command": "", "description": "", "line": None, "ts": None}
        first = _FAILURE_LINE.get(ev.failure) or reason_line(ev.text, tool=call["tool"])
        d["failed"] += 1
        d["last_event"] = "failure"
        if len(d["failures"]) < _MAX_FAILURES:
            d["failures"].append({
                "tool": call["tool"],
                "command": _clip(call["command"], 120),
                "failure": ev.failure,
                "exit_code": ev.exit_code,
                "first_line": _clip(first, 160),
                "line": ev.line,
            })
        fields = {
            "tool": call["tool"],
            "command": call["command"],
            "description": call["description"],
            "failure": ev.failure,
            "exit_code": ev.exit_code,
            "first_line": first,
            "output": ev.text[:1500],
            "call_id": ev.call_id,
            "call_line": call["line"],
            "resolution": None,
        }
        if ev.exit_source is not None:
            fields["exit_source"] = ev.exit_source
        self._count_calls(ev.agent)
        if ev.failure not in ("cancelled", "rejected", "interrupted") and call["tool"] != "unknown":
            self._failed_again(call, ev, first)
        self._emit("error", ev.call_id, _error_text(call, ev.failure, ev.exit_code, first), fields, ev,
                   agent=ev.agent)
        if ev.failure != "cancelled" and call["tool"] != "unknown":
            self._open_failure(call, ev.agent)

    # --- resolutions (see openmemory_local.ingest.resolutions) --------------------------

    def _describe(self, call: dict, display: bool = True) -> dict:
        d = self.s.digest
        heads = command_heads(call["command"]) if call["tool"] == "Bash" else []
        return _res.describe(call["tool"], call["command"], call.get("description") or "", heads, d["cwd"],
                             d["branch"], display=display)

    def _open_failure(self, call: dict, agent: str | None) -> None:
        ep = self._out[-1]
        opened = self.s.open_failures
        opened.append({"episode": _episode_state(ep), "call": self._describe(call), "agent": agent, "calls": 0,
                       "after": [], "best": None})
        if len(opened) > _res.MAX_OPEN:
            del opened[0]

    def _count_calls(self, agent: str | None) -> None:
        keep = []
        for entry in self.s.open_failures:
            if entry["agent"] == agent:
                entry["calls"] += 1
            if entry["calls"] <= _res.WINDOW:
                keep.append(entry)
        self.s.open_failures = keep

    def _watch_resolutions(self, call: dict, ev: ToolReturned) -> None:
        if not self.s.open_failures:
            return
        desc = self._describe(call, display=False)  # made only if it resolves one (rare)
        step = _res.step(desc)
        self._count_calls(ev.agent)
        keep = []
        for entry in self.s.open_failures:
            if entry["agent"] != ev.agent:
                keep.append(entry)
                continue
            read = _res.read_step(entry["call"], desc)  # (a read the refused edit asked for is a step)
            kind = None if read else _res.resolves(entry["call"], desc)
            if kind == "instead" and entry["calls"] > _res.INSTEAD_WINDOW:
                kind = None
            if kind is not None and (kind != "instead" or entry["best"] is None):
                res = _res.resolution(entry["call"], desc, kind, entry["calls"] - 1, entry["after"], ev.line)
                entry["best"] = kind
                self._re_emit(entry, res)
                if kind != "instead":
                    continue  # resolved: no longer open
            elif (done := step or read) and len(entry["after"]) < 12:
                entry["after"].append(done)
            keep.append(entry)
        self.s.open_failures = keep

    def _failed_again(self, call: dict, ev: ToolReturned, first: str) -> None:
        """The same call failed again: a failure it no longer shows went away with the steps
        before it (a ``retry`` that ``went_away``); one it shows again was not fixed by them."""
        if not self.s.open_failures:
            return
        desc = self._describe(call, display=False)
        keep = []
        for entry in self.s.open_failures:
            if entry["agent"] != ev.agent or _res.resolves(entry["call"], desc) not in ("retry", "changed"):
                keep.append(entry)
                continue
            if entry["episode"]["fields"].get("first_line") == first:
                entry["after"] = []  # the steps so far did not fix it
                keep.append(entry)
                continue
            if entry["after"]:
                res = _res.resolution(entry["call"], desc, "retry", entry["calls"] - 1, entry["after"], ev.line)
                res["went_away"] = True
                self._re_emit(entry, res)
            # without a step in between, the change is the call's own doing: keep waiting
            else:
                keep.append(entry)
        self.s.open_failures = keep

    def _re_emit(self, entry: dict, res: dict) -> None:
        stored = entry["episode"]
        fields = dict(stored["fields"], resolution=res)
        text = stored["text"].rstrip(".") + ". " + _res.phrase(res)[:1].upper() + _res.phrase(res)[1:] + "."
        self._out.append(Episode(stored["kind"], stored["key"], text, fields, stored["session_id"],
                                 stored["agent_id"], stored["project"], stored["created"], stored["source_line"]))

    def _remember_action(self, call: dict, agent: str | None, shell: bool = False) -> None:
        if agent is not None:
            return
        heads = command_heads(call["command"]) if shell or call["tool"] == "Bash" else []
        recent = self.s.recent_actions
        action = {"tool": call["tool"], "heads": heads[:4], "command": call["command"][:160]}
        self._after_call(action)
        recent.append(action)
        if len(recent) > 20:
            del recent[0]

    def _on_interrupt(self, ev: Interrupted) -> None:
        self.s.digest["interrupts"] += 1
        self.s.digest["last_event"] = "interrupt"
        self._link(ev.uid, ev.parent)

    def _on_command(self, ev: CommandRun) -> None:
        d = self.s.digest
        entry = (ev.name + " " + ev.args).strip()
        if len(d["host_commands"]) < _MAX_LIST:
            d["host_commands"].append(_clip(entry, 200))
        if d["asked"] is None and ev.args.strip():
            d["asked"] = {"text": _clip(entry, 600), "line": ev.line}

    def _on_task(self, ev: TaskGiven) -> None:
        if self.s.digest["prompt"] is None and ev.text.strip():
            self.s.digest["prompt"] = _clip(ev.text, 600)

    def _on_compacted(self, ev: Compacted) -> None:
        self.s.digest["compactions"] += 1

    def _on_hook(self, ev: HookFailed) -> None:
        d = self.s.digest
        first = reason_line(ev.text)
        d["failed"] += 1
        d["last_event"] = "failure"
        if len(d["failures"]) < _MAX_FAILURES:
            d["failures"].append({"tool": f"hook:{ev.hook}", "command": "", "failure": "hook",
                                  "exit_code": None, "first_line": _clip(first, 160), "line": ev.line})
        fields = {"tool": f"hook:{ev.hook}", "command": "", "description": "", "failure": "hook",
                  "exit_code": None, "first_line": first, "output": ev.text[:1500],
                  "call_id": None, "call_line": None}
        self._emit("error", ev.key, f"The {ev.hook} hook failed: {first}", fields, ev)

    def _emit(self, kind: str, key: str, text: str, fields: dict, ev, agent: str | None = None) -> None:
        d = self.s.digest
        fields = dict(fields)
        fields.update({"cwd": d["cwd"], "branch": d["branch"], "project_dir": project_dir(d["cwd"])})
        self._out.append(Episode(
            kind=kind,
            key=key,
            text=text,
            fields=fields,
            session_id=d["session_id"],
            agent_id=agent or d["agent_id"],
            project=d["cwd"],
            created=ev.ts or d["ended"] or d["started"] or "",
            source_line=ev.line,
        ))


_HANDLERS = {
    Meta: EpisodeBuilder._on_meta,
    Link: EpisodeBuilder._on_link,
    Titled: EpisodeBuilder._on_title,
    AgentSaid: EpisodeBuilder._on_agent,
    PersonSaid: EpisodeBuilder._on_person,
    ToolCalled: EpisodeBuilder._on_call,
    ToolReturned: EpisodeBuilder._on_result,
    Interrupted: EpisodeBuilder._on_interrupt,
    CommandRun: EpisodeBuilder._on_command,
    Compacted: EpisodeBuilder._on_compacted,
    TaskGiven: EpisodeBuilder._on_task,
    HookFailed: EpisodeBuilder._on_hook,
}

_FAILURE_LINE = {
    "rejected": "rejected by the person",
    "interrupted": "interrupted by the person",
    "cancelled": "cancelled: a parallel tool call failed",
}
_FAILURE_PHRASE = {
    "rejected": "was rejected by the person",
    "interrupted": "was interrupted by the person",
    "cancelled": "was cancelled because a parallel tool call failed",
}


def _episode_state(ep: Episode) -> dict:
    return {"kind": ep.kind, "key": ep.key, "text": ep.text, "fields": ep.fields, "session_id": ep.session_id,
            "agent_id": ep.agent_id, "project": ep.project, "created": ep.created, "source_line": ep.source_line}


def _error_text(call: dict, failure: str, exit_code: int | None, first: str) -> str:
    tool = call["tool"]
    command = _clip(call["command"], 200)
    subject = f"{tool} `{command}`" if command else tool
    if failure in _FAILURE_PHRASE:
        text = f"{subject} {_FAILURE_PHRASE[failure]}"
    else:
        text = f"{subject} failed"
        if exit_code is not None:
            text += f" with exit code {exit_code}"
        if first:
            text += f": {first}"
    if call.get("description"):
        text += f" ({_clip(call['description'], 120)})"
    return text.rstrip(".") + "."


# --- the session episode ----------------------------------------------------------


def _merge_counts(into: dict, more: dict) -> None:
    for key, value in more.items():
        into[key] = into.get(key, 0) + value


def _top(counts: dict, n: int) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def _outcome(d: dict) -> str:
    last = d.get("last_event")
    if last == "interrupt":
        return "interrupted"
    if last == "failure":
        return "failed"
    if last == "person":
        return "waiting"
    return "completed"


def session_episode(session_id: str, parts: list[dict]) -> Episode | None:
    """Merge the digests of one session's transcripts into its session episode.

    ``parts``: one dict per transcript with ``role`` (``main``, ``subagent``,
    ``compaction``), ``agent_id``, ``digest`` and ``source_line``. With no ``main`` part
    the session is an orphan (its parent transcript is missing) and is described from its
    subagents.
    """
    if not parts:
        return None
    mains = [p for p in parts if p["role"] == "main"]
    subs = [p for p in parts if p["role"] != "main"]
    orphan = not mains
    # Several main transcripts for one session id (copies): the one read furthest wins.
    main = max(mains, key=lambda p: (p["digest"].get("last_line") or 0)) if mains else None
    base = main["digest"] if main else max(subs, key=lambda p: p["digest"].get("last_line") or 0)["digest"]
    tools: dict = dict(base["tools"]) if main else {}
    commands: dict = dict(base["commands"]) if main else {}
    failed = base["failed"] if main else 0
    failures = list(base["failures"]) if main else []
    files_edited = list(base["files_edited"]) if main else []
    files_read = list(base["files_read"]) if main else []
    times: dict = {k: list(v) for k, v in (base.get("times") or {}).items()} if main else {}
    subagents = []
    started = [p["digest"]["started"] for p in parts if p["digest"].get("started")]
    ended = [p["digest"]["ended"] for p in parts if p["digest"].get("ended")]
    for p in sorted(subs, key=lambda p: (p["digest"].get("started") or "", p.get("agent_id") or "")):
        sd = p["digest"]
        subagents.append({
            "agent_id": p.get("agent_id"),
            "role": p["role"],
            "prompt": _clip((sd.get("prompt") or ""), 300) or None,
            "tool_calls": sd["tool_calls"],
            "failed": sd["failed"],
        })
        if p["role"] == "compaction":
            continue
        _merge_counts(tools, sd["tools"])
        _merge_counts(commands, sd["commands"])
        _merge_times(times, sd.get("times") or {}, "cre")  # command lines are the main transcript's
        failed += sd["failed"]
        failures += [dict(f, agent_id=p.get("agent_id")) for f in sd["failures"]]
        for path in sd["files_edited"]:
            if path not in files_edited and len(files_edited) < _MAX_LIST:
                files_edited.append(path)
        for path in sd["files_read"]:
            if path not in files_read and len(files_read) < _MAX_LIST:
                files_read.append(path)
    cwd = base.get("cwd")
    fields = {
        "title": base.get("title"),
        "asked": (base.get("asked") or {}).get("text") if main else None,
        "tool_calls": sum(tools.values()),
        "tools": tools,
        "commands": commands,
        "command_lines": base["command_lines"] if main else [],
        "files_read": files_read,
        "files_edited": files_edited,
        "failed": failed,
        "failures": failures[:_MAX_FAILURES],
        "corrections": base["corrections"] if main else 0,
        "interrupts": base["interrupts"] if main else 0,
        "compactions": base["compactions"] if main else 0,
        "person_messages": base["person_messages"] if main else 0,
        "person_last": (base.get("person_last") or {}).get("text") if main else None,
        "host_commands": base["host_commands"] if main else [],
        "delegations": base["delegations"] if main else [],
        "last_agent": (base.get("last_agent") or {}).get("text"),
        "outcome": _outcome(base) if main else "unknown",
        "subagents": subagents,
        "orphan": orphan,
        "started": min(started) if started else None,
        "ended": max(ended) if ended else None,
        "cwd": cwd,
        "project_dir": project_dir(cwd),
        "branch": base.get("branch"),
        "version": base.get("version"),
        "times": times,
    }
    source = main if main else max(subs, key=lambda p: p["digest"].get("last_line") or 0)
    line = ((base.get("asked") or {}).get("line") if main else None) or 1
    return Episode(
        kind="session",
        key=session_id,
        text=_session_text(fields),
        fields=fields,
        session_id=session_id,
        agent_id=None,
        project=cwd,
        created=fields["started"] or fields["ended"] or "",
        source_line=line,
    ) if source else None


def _session_text(f: dict) -> str:
    where = f["cwd"].rstrip("/").rsplit("/", 1)[-1] if f["cwd"] else "an unknown project"
    branch = f" on branch {f['branch']}" if f.get("branch") else ""
    parts = []
    if f["orphan"]:
        parts.append(f"Session in {where}{branch} (parent transcript missing; subagent work only).")
    else:
        asked = f'asked: "{_clip(f["asked"], 300)}"' if f["asked"] else "no request recorded"
        parts.append(f"Session in {where}{branch}, {asked}.")
    if f["tool_calls"]:
        tools = ", ".join(f"{k} {v}" for k, v in _top(f["tools"], 6))
        parts.append(f"{f['tool_calls']} tool calls ({tools}).")
    if f["commands"]:
        parts.append("Ran " + ", ".join(f"{k} ({v})" if v > 1 else k for k, v in _top(f["commands"], 10)) + ".")
    if f["files_edited"]:
        parts.append("Edited " + ", ".join(f["files_edited"][:8]) + ".")
    if f["failed"]:
        heads = []
        for fail in f["failures"][:5]:
            what = fail["command"] or fail["tool"]
            heads.append(f"{_clip(what, 60)}: {_clip(fail['first_line'], 90)}" if fail["first_line"] else _clip(what, 60))
        parts.append(f"{f['failed']} failed tool calls (" + "; ".join(heads) + ").")
    if f["corrections"]:
        parts.append(f"The person corrected the agent {f['corrections']} times.")
    subs = [s for s in f["subagents"] if s["role"] == "subagent"]
    if subs:
        parts.append(f"{len(subs)} subagents" + (
            ": " + "; ".join(_clip(s["prompt"], 80) for s in subs[:3] if s["prompt"]) if any(s["prompt"] for s in subs) else ""
        ) + ".")
    if f["person_last"] and f["person_messages"] > 1:
        parts.append(f'Last said by the person: "{_clip(f["person_last"], 160)}".')
    outcome = {"completed": "Ended", "interrupted": "Ended interrupted by the person",
               "failed": "Ended on a failed tool call", "waiting": "Ended waiting for the agent",
               "unknown": "Ended"}[f["outcome"]]
    if f["last_agent"]:
        parts.append(f'{outcome}; the agent last said: "{_clip(f["last_agent"], 240)}".')
    else:
        parts.append(outcome + ".")
    return " ".join(parts)
