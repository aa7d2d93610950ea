"""What made a failure go away in the same session: its *resolution*, as the transcript shows it.

The episode builder (:class:`openmemory_local.ingest.episodes.EpisodeBuilder`) keeps each failed tool
call open for the next :data:`WINDOW` tool calls of the same (sub)agent and watches the calls
that succeed after it:

``changed``
    the next successful call of the same program (a shell command sharing a program with the
    failed one: ``git push``) or of the same tool, on the same target (the paths the call names;
    none for ``git push``), written differently: ``git push --set-upstream origin <branch>``
    after ``git push``; ``git add -f priv/static/assets/app.css`` after ``git add ...``;
``retry``
    the same call, written the same way, succeeding later: what changed is what ran in between
    (``after``: the programs run and the files edited meanwhile, ``mix format``); or the same
    call failing again, but no longer this way (``went_away``: a test run that stopped showing
    ``no :secret_key_base configuration`` after an edit of ``config/test.exs``, while it still
    failed for another reason). A failure shown again resets what ran in between;
``instead``
    a different program or tool that succeeded on the same target (``ls test/support`` after
    ``Read test/support`` failed with EISDIR), kept only while no ``changed`` or ``retry``
    comes within the window.

The resolution is stored in the error episode's ``fields["resolution"]``::

    {"kind": "changed" | "retry" | "instead", "tool": "Bash",
     "command": "git push --set-upstream origin <branch>",   # shown: branch and project folder hidden
     "norm": "git push --set-upstream origin {branch}",      # normalised (openmemory_local.text.normalize)
     "delta": ["--set-upstream"],   # words of the resolving call that the failed one did not have
     "calls_after": 0,              # tool calls between the failure and the resolving call
     "after": ["mix format", "edited lib/a.ex"],              # what ran in between (retry)
     "went_away": True,             # (retry only, optional) the same call failed again, but no
                                    # longer this way: the steps in between fixed this failure
     "line": 617}                   # the resolving call's result, in the transcript

and the episode's text gains the observation (```git push --set-upstream origin <branch>`
succeeded right after.``). The ``command`` is the fix as it ran (:func:`_fix_display`): the
setup before an unchanged call is shown with it (``git stash && git checkout main``), and so are
the variables a call ran with (``CGO_ENABLED=1 go test -race ./...``) and short quoted code. The pure functions here describe a call (:func:`describe`) and
decide whether a later call resolves a failure (:func:`resolves`); the builder holds the state.
"""

from __future__ import annotations

import re

from openmemory_local.text.normalize import command_segments, normalise, path_like, shown_segments
from openmemory_local.text.redact import mask_secrets

__all__ = ["WINDOW", "MAX_OPEN", "READ_ONLY", "describe", "resolves", "step", "read_step", "resolution", "phrase",
           "step_commands", "step_paths"]

#: Tool calls after a failure within which its resolution is looked for.
WINDOW = 40
#: Failures waiting for a resolution at once (the oldest is dropped beyond).
MAX_OPEN = 16
#: An ``instead`` resolution comes within this many tool calls of the failure.
INSTEAD_WINDOW = 5
_MAX_AFTER = 6

#: Programs that only look: never a step that resolved anything.
READ_ONLY = frozenset(
    "ls,cat,head,tail,grep,rg,find,pwd,echo,wc,sort,less,tree,file,stat,which,type,sleep,du,df,git status,"
    "git diff,git log,git show,git branch,git ls-files,git rev-parse,git remote,bd show,bd list,bd ready".split(","))
_FILE_EDIT = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
_LOOK_TOOLS = frozenset({"Read", "Glob", "Grep", "LS", "TodoWrite", "TaskOutput", "WebSearch", "WebFetch"})


def _targets(tool: str, command: str, cwd: str | None, branch: str | None, files: tuple = (),
             segments: list[str] | None = None) -> list[str]:
    if tool != "Bash":
        return [normalise(p, cwd=cwd, branch=branch) or "." for p in files] or (
            [normalise(command, cwd=cwd, branch=branch) or "."] if command and "/" in command else [])
    out = []
    for segment in command_segments(command) if segments is None else segments:
        for word in segment.split()[1:]:
            word = word.strip("'\"")
            if path_like(word) and not word.startswith("-"):
                out.append((normalise(word, cwd=cwd, branch=branch) or ".").rstrip("/"))
    return list(dict.fromkeys(out))[:20]


def _display(tool: str, command: str, description: str, cwd: str | None, branch: str | None,
             heads: list[str], segments: list[str] | None = None) -> str:
    """The call as a lesson shows it: quoted strings, redirections and the project folder out,
    the branch as ``<branch>``."""
    if tool != "Bash":
        path = command
        if cwd and path.startswith(cwd.rstrip("/") + "/"):
            path = path[len(cwd.rstrip("/")) + 1:]
        return f"{tool} {path}".strip() + (f" ({description})" if description else "")
    if segments is None:
        segments = command_segments(command)
    return " ".join(_hide(" && ".join(segments[:2]), cwd, branch).split())[:200]


def _hide(text: str, cwd: str | None, branch: str | None) -> str:
    """A command as a lesson shows it: the project folder as ``.``, the branch as ``<branch>``."""
    if cwd:
        text = text.replace(cwd.rstrip("/") + "/", "").replace(cwd.rstrip("/"), ".")
    if branch and branch != "HEAD" and len(branch) >= 2:
        text = re.sub(r"(?<![\w.-])" + re.escape(branch) + r"(?![\w-])", "<branch>", text)
    return text


def describe(tool: str, command: str, description: str, heads: list[str], cwd: str | None,
             branch: str | None, files: tuple = (), *, display: bool = True) -> dict:
    """What a call is, for matching: its tool, programs, targets and normalised form.

    ``display=False``: without the ``display`` form (what a successful call needs only if it
    turns out to resolve a failure: :func:`resolution` makes it then, from ``description``)."""
    segments = command_segments(command) if tool == "Bash" else None
    if segments is not None:
        # the variable assignments and ``cd`` a call ran with are part of the call (a fix may be
        # just that: ``CGO_ENABLED=1 go test -race ./...``), not of its situation (``targets``)
        norm = " && ".join(normalise(s, cwd=cwd, branch=branch) for s in command_segments(command, setup=True))
    else:
        norm = normalise(f"{tool} {command} {description}".strip(), cwd=cwd, branch=branch)
    out = {"tool": tool, "heads": list(dict.fromkeys(heads)),
           "targets": _targets(tool, command, cwd, branch, files, segments), "norm": norm}
    if display:
        out["display"] = _display(tool, command, description, cwd, branch, heads, segments=segments)
    else:
        out["description"] = description
    out.update(command=command[:500], cwd=cwd, branch=branch)
    return out


def _overlap(a: list[str], b: list[str]) -> bool:
    for x in a:
        for y in b:
            if x == y or x.startswith(y.rstrip("/") + "/") or y.startswith(x.rstrip("/") + "/"):
                return True
    return False


def _program_key(head: str) -> str:
    """A program head as the same program however it is spelled: ``docker-compose`` is ``docker
    compose``, ``python3`` is ``python``, ``pip3 install`` is ``pip install``."""
    words = head.replace("-", " ").split() if head.split()[0] in _SPELLED_APART else head.split()
    if not words:
        return head
    stem = re.sub(r"\d+(\.\d+)?$", "", words[0])
    return " ".join([stem if stem in _VERSIONED else words[0]] + words[1:])


#: Programs that exist both as one hyphenated word and as a subcommand of another.
_SPELLED_APART = frozenset(("docker-compose", "docker-buildx"))
#: Programs installed under their version's name too (``python3``, ``pip3``, ``python3.12``).
_VERSIONED = frozenset(("python", "pip", "ruby", "gem", "node", "php", "perl", "lua", "gcc", "g++", "clang", "java"))


def _same_program(a: list[str], b: list[str]) -> bool:
    """A program in common: ``git push`` and ``git push``; ``make`` and ``make build`` (a program
    without its subcommand matches any of its subcommands); never ``git push`` and ``git pull``;
    spelled apart (:func:`_program_key`), ``docker-compose`` and ``docker compose``."""
    for x in map(_program_key, a):
        for y in map(_program_key, b):
            if x == y or (" " not in x and y.split()[0] == x) or (" " not in y and x.split()[0] == y):
                return True
    return False


def resolves(failed: dict, call: dict) -> str | None:
    """``changed``, ``retry`` or ``instead`` if the successful ``call`` resolves ``failed``, else None."""
    same_target = (not failed["targets"] and not call["targets"]) or _overlap(failed["targets"], call["targets"])
    if failed["tool"] == "Bash":
        same_program = call["tool"] == "Bash" and _same_program(failed["heads"], call["heads"])
    else:
        same_program = call["tool"] == failed["tool"] or (failed["tool"] in _FILE_EDIT and call["tool"] in _FILE_EDIT)
    if same_program and same_target:
        return "retry" if call["norm"] == failed["norm"] else "changed"
    if failed["targets"] and call["targets"] and same_target and not same_program:
        # a Bash failure is done instead by another command; a file tool's by anything but an edit
        if (call["tool"] == "Bash") if failed["tool"] == "Bash" else call["tool"] not in _FILE_EDIT:
            return "instead"
    return None


def step(call: dict) -> str | None:
    """What a successful call between a failure and its resolution did, or None if it only looked."""
    if call["tool"] in _FILE_EDIT:
        return f"edited {call['targets'][0]}" if call["targets"] else None
    if call["tool"] != "Bash":
        return None
    heads = [h for h in call["heads"] if h not in READ_ONLY and h.split()[0] not in READ_ONLY]
    return " && ".join(heads[:2]) or None


def read_step(failed: dict, call: dict) -> str | None:
    """A read that is a step for this failure: a file edit refused because the file had not been
    read, then the file read (``read src/app/page.tsx``); any other read only looks."""
    if failed["tool"] not in _FILE_EDIT or call["tool"] != "Read":
        return None
    if failed["targets"] and call["targets"] and _overlap(failed["targets"], call["targets"]):
        return f"read {call['targets'][0]}"
    return None


def step_commands(after: list) -> list[str]:
    """The programs run between a failure and the same call working (``mix format``): the steps
    that are neither an edit nor a read of a file."""
    return [str(a) for a in after or [] if not str(a).startswith(("edited ", "read "))]


def step_paths(after: list, what: str = "edited") -> list[str]:
    """The files edited (``what="edited"``) or read (``"read"``) between a failure and the same
    call working."""
    prefix = what + " "
    return [str(a)[len(prefix):] for a in after or [] if str(a).startswith(prefix)]


def resolution(failed: dict, call: dict, kind: str, calls_after: int, after: list[str], line: int | None) -> dict:
    """The ``fields["resolution"]`` of a resolved failure (see the module docstring)."""
    shared = [h for h in call["heads"] if _same_program([h], failed["heads"])]
    display = call["display"] if "display" in call else _display(
        call["tool"], call["command"], call.get("description") or "", call.get("cwd"), call.get("branch"), call["heads"])
    before = set(failed["norm"].split())
    delta = [w for w in call["norm"].split() if w not in before and len(w) > 1 and w != "&&" and "{" not in w
             and "/" not in w][:4] if kind == "changed" else []
    if call["tool"] == "Bash" and kind != "instead" and shared and call.get("command"):
        display = _fix_display(call, shared, failed["norm"].split(" && "), delta) or display
    return {"kind": kind, "tool": call["tool"], "command": display, "norm": call["norm"], "delta": delta,
            "calls_after": calls_after, "after": list(dict.fromkeys(after))[:_MAX_AFTER], "line": line}


def _segment_head(segment: str, heads: list[str]) -> str | None:
    """Which of a call's program heads a shown segment runs (its variable assignments aside, its
    program by file name: ``~/.cargo/bin/cargo build`` runs ``cargo build``)."""
    words = segment.split()
    while words and "=" in words[0] and not words[0].startswith("-"):
        words = words[1:]
    if not words:
        return None
    plain = " ".join([words[0].rsplit("/", 1)[-1]] + words[1:])
    found = [h for h in heads if plain == h or plain.startswith(h + " ")]
    return max(found, key=len) if found else None


def _looks_only(segment: str) -> bool:
    words = segment.split()
    if not words:
        return True
    prog = words[0].rsplit("/", 1)[-1]
    return prog in READ_ONLY or " ".join([prog] + words[1:2]) in READ_ONLY


def _fix_display(call: dict, shared: list[str], failed_segments: list[str], delta: list[str]) -> str | None:
    """The resolving call as the fix shows it (see :func:`shown_segments`): its segments that run
    the failed call's programs; when those ran *unchanged* (``make build`` again), what ran before
    them in the same line is the fix and is shown too (``sed -i 's/^    /\t/' Makefile && make
    build``, ``git stash && git checkout main``, ``cd service && go test ./...``); a ``cd`` right
    before the shown segments is always shown (where they ran)."""
    shown = shown_segments(call["command"])
    cwd, branch = call.get("cwd"), call.get("branch")
    if not shown:
        return None
    idx = [i for i, seg in enumerate(shown) if _segment_head(seg, shared) is not None]
    if not idx:
        return None

    def norm(seg: str) -> str:
        return " && ".join(normalise(s, cwd=cwd, branch=branch) for s in command_segments(seg, setup=True))

    before = set(failed_segments)
    if all(norm(shown[i]) in before for i in idx):
        chosen = [i for i in range(idx[-1] + 1) if i in idx or not _looks_only(shown[i])]
    else:
        chosen = idx
        marked = [i for i in idx if any(w in shown[i].split() for w in delta)]
        chosen = marked or chosen
    first = chosen[0]
    while first > 0 and shown[first - 1].split()[:1] == ["cd"]:
        first -= 1
        chosen = [first] + chosen
    # what a call ran with (a variable, a quoted value) may be a secret: never shown
    return mask_secrets(_hide(" && ".join(shown[i] for i in chosen), cwd, branch).strip())[:200]


def phrase(res: dict, *, timing: bool = True) -> str:
    """The resolution as an observation (a sentence without its final period). ``timing=False``
    leaves out when it came (right after, later), which differs from one agent to the next."""
    what = f"`{res['command']}`"
    if res["kind"] == "retry":
        after = [a for a in res.get("after") or []]
        if after and res.get("went_away"):
            return f"the same call ran again without this failure after {_steps(after)}"
        if after:
            return f"the same call succeeded after {_steps(after)}"
        if not timing:
            return "the same call succeeded when tried again"
        return "the same call succeeded " + ("right after" if res.get("calls_after", 0) == 0 else "later")
    when = (" right after" if res.get("calls_after", 0) == 0 else " later in the session") if timing else ""
    if res["kind"] == "instead":
        return f"{what} succeeded on the same target{when}"
    return f"{what} succeeded{when}"


def _steps(after: list[str]) -> str:
    shown = [f"an edit of {a[7:]}" if a.startswith("edited ") else f"a read of {a[5:]}" if a.startswith("read ")
             else f"`{a}`" for a in after[:3]]
    if len(shown) == 1:
        return shown[0]
    return ", ".join(shown[:-1]) + " and " + shown[-1]
