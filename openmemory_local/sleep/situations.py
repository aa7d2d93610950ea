"""What a surprise is, and what situation a session met: the texts sleep compares.

Three kinds of text, all normalised (:mod:`openmemory_local.text.normalize`) so that branch
names, hashes, numbers and paths with ids do not keep the same thing apart:

*Signature* of a surprise (:func:`signature`), what lessons cluster on:

* a failed shell command: its programs and the failure's first meaningful line,
  ``git push: fatal: The current branch {branch} has no upstream branch.`` (the
  command's arguments, file lists and commit messages are left out: they differ every
  time while the failure is the same);
* a failed call of a file tool (Read, Edit, Write, ...): the tool, the path relative to
  the project and the failure, ``Read test/support: EISDIR: illegal operation on a
  directory, read``;
* any other failed tool call: the tool and the failure;
* a rejection or interrupt by the person: the tool, its command, and what happened;
* a correction: ``<the person's words> | <the agent's last action>`` (no fixed words of
  ours: two unrelated corrections must not look alike because both are corrections).

*Facets* of an episode (:func:`facets`): the situations it shows, each a short text. A
session episode has one per program it ran (``git push``), one per simple shell command
(``git add priv/static/assets/app.css``), one per file it read or edited
(``Edit lib/app.ex``), each with the first and last time the session met it
(:func:`timed_facets`); an error episode has its signature and the commands of its call; a
correction its signature and the action it corrected.

*Probes* of a lesson (:func:`probes`): the situation its prediction expects and the outcome.
Each probe is ``{"text", "require", "role", "words"?}``: a facet matches when its cosine with
``text`` reaches ``Config.verify_cosine``, it shares a word with ``text``, it contains
``require`` (a path the lesson is about) if any, and every one of ``words`` as a whole word.
``role`` says what a match means:

* ``situation``: a shell-command lesson expects each of its programs to run again (``git
  push``), anchored on the path its failure names when there is one (``git add
  priv/static/assets``); a file-tool lesson expects its tool on the folder its failures
  share, if any; a correction expects the action it corrected (``pip install``);
* ``failure``: the lesson's own signature, the failure (or correction) recurring; matched on
  error and correction episodes only;
* ``resolution``: what made the failure go away (``details["resolutions"]``, see
  :mod:`openmemory_local.ingest.resolutions`) used again: the call that worked, with the words it
  added (``git push --set-upstream origin {branch}``, words ``--set-upstream``), or the
  program run before the same call worked (``mix format``); for a correction, the programs
  it names other than the one it corrected (``uses uv, not pip`` -> ``uv``).

Verify (:func:`openmemory_local.sleep.passes.verify`) decides a prediction on these roles.
"""

from __future__ import annotations

from functools import lru_cache

import re
from typing import Iterable

from openmemory_local.ingest.episodes import command_heads
from openmemory_local.ingest.resolutions import step_commands
from openmemory_local.text.normalize import command_segments, normalise, path_like

__all__ = ["FILE_TOOLS", "OPTION_ALIASES", "signature", "subject", "facets", "timed_facets", "facet_texts", "probes",
           "probe_matches", "rel_path"]

#: Long options and the short forms that mean the same to the programs agents run most
#: (``git push -u`` is ``git push --set-upstream``), for a resolution's required words.
OPTION_ALIASES = {"--set-upstream": "-u", "--force": "-f", "--no-verify": "-n", "--all": "-A", "--verbose": "-v",
                  "-u": "--set-upstream", "-f": "--force", "-n": "--no-verify", "-A": "--all"}

#: Tools whose ``command`` field is a file or folder path.
FILE_TOOLS = frozenset({"Read", "Edit", "MultiEdit", "Write", "NotebookEdit", "NotebookRead", "LS"})
_FACET_WORDS = 12
_MAX_FACETS = 200


def _ctx(ep: dict) -> tuple[str | None, str | None]:
    fields = ep.get("fields") or {}
    return ep.get("project") or fields.get("cwd"), fields.get("branch")


def rel_path(path: str, cwd: str | None, branch: str | None) -> str:
    """A path as signatures show it: normalised, relative to the project, ``.`` for the project."""
    out = normalise(path, cwd=cwd, branch=branch)
    return out or "."


def subject(ep: dict) -> dict:
    """What failed: ``{"tool", "heads", "path"}`` (heads: the programs of a shell command)."""
    fields = ep.get("fields") or {}
    tool = fields.get("tool") or "unknown"
    command = fields.get("command") or ""
    if tool == "Bash" and command:
        return {"tool": tool, "heads": list(dict.fromkeys(command_heads(command))), "path": None}
    if tool in FILE_TOOLS and command:
        cwd, branch = _ctx(ep)
        return {"tool": tool, "heads": [], "path": rel_path(command, cwd, branch)}
    return {"tool": tool, "heads": [], "path": None}


def signature(ep: dict, sub: dict | None = None) -> str:
    """The normalised signature of a surprise (an error or correction episode). ``sub``: the
    episode's :func:`subject` if the caller has it already (not computed again)."""
    fields = ep.get("fields") or {}
    cwd, branch = ep.get("project") or fields.get("cwd"), fields.get("branch")  # (_ctx)
    if ep["kind"] == "correction":
        said = normalise(fields.get("message") or ep.get("text") or "", cwd=cwd, branch=branch)
        action = fields.get("agent_action") or {}
        did = _action_text(action, cwd, branch)
        return f"{said} | {did}" if did else said
    sub = sub or subject(ep)
    failure = fields.get("failure")
    if failure in ("rejected", "interrupted"):
        what = " && ".join(sub["heads"]) or sub["path"] or _clip_words(
            normalise(fields.get("command") or "", cwd=cwd, branch=branch), _FACET_WORDS)
        return f"{sub['tool']} {what}: {failure} by the person".replace("  ", " ")
    line = normalise(fields.get("first_line") or "", cwd=cwd, branch=branch)
    if sub["heads"]:
        head = " && ".join(sub["heads"])
    elif sub["path"]:
        head = f"{sub['tool']} {sub['path']}"
    else:
        head = sub["tool"]
    return f"{head}: {line}" if line else head


def _action_text(action: dict, cwd, branch) -> str:
    if not action:
        return ""
    tool = action.get("tool") or ""
    command = action.get("command") or ""
    if tool == "Bash":
        heads = list(dict.fromkeys(command_heads(command)))
        return " && ".join(heads)
    if tool in FILE_TOOLS and command:
        return f"{tool} {rel_path(command, cwd, branch)}"
    return tool


def _clip_words(text: str, n: int) -> str:
    words = text.split()
    return " ".join(words[:n])


@lru_cache(maxsize=1 << 16)
def _command_facets_cached(command: str, cwd, branch):
    return tuple(_command_facets_uncached(command, cwd, branch))


def _command_facets(command: str, cwd, branch) -> list[str]:
    # memoised: a pure function of its arguments, which sleep asks again and again
    if len(command) > 512:
        return _command_facets_uncached(command, cwd, branch)
    return list(_command_facets_cached(command, cwd, branch))


def _command_facets_uncached(command: str, cwd, branch) -> list[str]:
    out = []
    for segment in command_segments(command):
        segment = normalise(segment, cwd=cwd, branch=branch)
        words = segment.split()
        if not words:
            continue
        out.append(_clip_words(segment, _FACET_WORDS))
        head = " ".join(words[:2]) if len(words) > 1 and not words[1].startswith("-") else words[0]
        # one facet per path argument, so a long `git add a b c` still shows `git add c`
        paths = [w for w in words[1:] if path_like(w)]
        if len(paths) > 1:
            out.extend(f"{head} {p}" for p in paths[:20])
    return out


def facets(ep: dict) -> list[str]:
    """The situations an episode shows (distinct, at most 200; see the module docstring)."""
    return [facet for facet, _first, _last in timed_facets(ep)]


def timed_facets(ep: dict, sig: str | None = None, sub: dict | None = None) -> list[tuple[str, str | None, str | None]]:
    """:func:`facets` with when the episode met each: ``(facet, first, last)``.

    A session episode's facets carry the first and last time the session ran the command or
    touched the file (its ``times`` field); ``None`` where that is not known (an episode
    stored before sessions recorded times, or a transcript without timestamps): the caller
    then dates the facet at the episode's ``created``. Error and correction episodes happen
    at one moment: ``None`` too (their ``created`` is that moment). ``sig``: the episode's
    :func:`signature` and ``sub`` its :func:`subject`, if the caller has them already (not computed again)."""
    names, times = facet_texts(ep, sig, sub)
    if times is None:
        return [(facet, None, None) for facet in names]
    return [(facet, *when) for facet, when in zip(names, times)]


def facet_texts(ep: dict, sig: str | None = None, sub: dict | None = None) -> tuple[tuple[str, ...], list | None]:
    """:func:`timed_facets` as ``(facets, times)``: the facets, and each one's ``(first, last)`` in a
    list beside them, or None when no time is known for any (an error, a correction, a session
    without ``times``: then nothing is made per facet but the text)."""
    fields = ep.get("fields") or {}
    cwd, branch = _ctx(ep)
    kind = ep["kind"]
    if kind == "session":
        times = fields.get("times")
        if times:
            return _merged(_session_facets(fields, cwd, branch, times))
        # no times known (nothing to merge but the texts): the facets alone
        names = list((fields.get("commands") or {}).keys())
        lines = fields.get("command_lines") or []
        for line in lines:
            names += _command_facets(line, cwd, branch)
        files = [f"Edit {rel_path(path, cwd, branch)}" for path in fields.get("files_edited") or []]
        files += [f"Read {rel_path(path, cwd, branch)}" for path in fields.get("files_read") or []]
        return _untimed(names + files), None
    names = []
    if kind == "error":
        sub = sub or subject(ep)
        names.append(sig or signature(ep, sub))
        if sub["tool"] == "Bash":
            names += sub["heads"]
            names += _command_facets(fields.get("command") or "", cwd, branch)
        elif sub["path"]:
            names.append(f"{sub['tool']} {sub['path']}")
    elif kind == "correction":
        names.append(sig or signature(ep))
        action = _action_text(fields.get("agent_action") or {}, cwd, branch)
        if action:
            names.append(action)
    return _untimed(names), None


def _session_facets(fields: dict, cwd, branch, times: dict) -> list[tuple[str, list | None]]:
    """A session's facets with the times its ``times`` field gives each (None where it gives none)."""
    out: list[tuple[str, list | None]] = []
    for head in (fields.get("commands") or {}).keys():
        out.append((head, times.get(f"c {head}")))
    for line in fields.get("command_lines") or []:
        when = times.get(f"l {line}")
        out.extend((facet, when) for facet in _command_facets(line, cwd, branch))
    for path in fields.get("files_edited") or []:
        out.append((f"Edit {rel_path(path, cwd, branch)}", times.get(f"e {path}")))
    for path in fields.get("files_read") or []:
        out.append((f"Read {rel_path(path, cwd, branch)}", times.get(f"r {path}")))
    return out


def _merged(out: list[tuple[str, list | None]]) -> tuple[tuple[str, ...], list[tuple]]:
    """Each distinct facet once (the first 200), with the first and last of its times."""
    merged: dict[str, list | None] = {}
    for facet, when in out:
        if not facet:
            continue
        if facet not in merged:
            if len(merged) >= _MAX_FACETS:
                continue
            merged[facet] = list(when) if when else None
        elif when:
            seen = merged[facet]
            merged[facet] = list(when) if seen is None else [min(seen[0], when[0]), max(seen[1], when[1])]
    return tuple(merged), [tuple(when or (None, None)) for when in merged.values()]


def _untimed(names: list[str]) -> tuple[str, ...]:
    """:func:`_merged`'s facets for facets without times: each distinct one once (the first 200)."""
    distinct = tuple(dict.fromkeys(filter(None, names)))
    return distinct[:_MAX_FACETS] if len(distinct) > _MAX_FACETS else distinct


def _common_dir(paths: Iterable[str]) -> str | None:
    parts = [p.split("/") for p in paths if p and p != "."]
    if not parts:
        return None
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    out = "/".join(common)
    return out or None


def named_programs(message: str, heads: Iterable[str]) -> list[str]:
    """The programs (or program and subcommand) among ``heads`` that ``message`` names:
    ``"no, this project uses uv, not pip"`` with heads ``uv sync``, ``pip install`` ->
    ``uv``, ``pip``; ``"don't git rebase here"`` with ``git rebase`` -> ``git rebase``."""
    words = set(re.findall(r"[\w.+-]+", message.lower()))
    out = []
    for head in heads:
        parts = head.lower().split()
        if not parts or parts[0] not in words:
            continue
        out.append(head if all(p in words for p in parts) else parts[0])
    return list(dict.fromkeys(out))


def probes(details: dict, signature_text: str, programs: Iterable[str] = ()) -> list[dict]:
    """The situation a lesson's prediction expects, and its outcome (see the module docstring).

    Each probe has a ``role``: ``situation`` (the lesson's situation recurring), ``failure``
    (the failure itself, or the correction, recurring: matched on error and correction
    episodes only) or ``resolution`` (what made the failure go away being used again).
    ``programs``: command heads run in the project's recent sessions; a correction that
    names one of them (``uses uv, not pip``) also expects it to be run again: the program it
    corrected is its situation, the others its resolution.
    """
    out: list[dict] = []
    kind = details.get("kind")
    subj = details.get("subject") or {}
    if kind == "error":
        heads = subj.get("heads") or []
        anchor = details.get("anchor")
        for head in heads:
            out.append({"text": f"{head} {anchor}" if anchor else head, "require": anchor, "role": "situation"})
        if not heads and subj.get("tool") in FILE_TOOLS:
            common = _common_dir(details.get("paths") or [])
            if common:
                out.append({"text": f"{subj['tool']} {common}", "require": common, "role": "situation"})
        for res in (details.get("resolutions") or [])[:1]:
            out.extend(_resolution_probes(res))
    elif kind == "correction":
        action = details.get("action")
        if action:
            out.append({"text": action, "require": None, "role": "situation"})
        corrected = set((action or "").split())
        for program in named_programs(details.get("said") or "", programs):
            role = "situation" if program.split()[0] in corrected else "resolution"
            out.append({"text": program, "require": None, "role": role})
    out.append({"text": signature_text, "require": None, "role": "failure"})
    seen, unique = set(), []
    for probe in out:
        key = (probe["text"], probe["role"])
        if probe["text"] and key not in seen:
            seen.add(key)
            unique.append(probe)
    return unique


def _resolution_probes(res: dict) -> list[dict]:
    """A resolution as a probe: the call that worked (with the words it added, ``--set-upstream``,
    required as whole words), or the program run before the same call worked (``mix format``)."""
    if res.get("kind") in ("changed", "instead") and res.get("norm"):
        words = [w for w in res.get("delta") or [] if len(w) > 1][:3]
        if res.get("kind") == "changed" and not words:
            return []  # the same program written differently, with nothing added: no telling it apart
        return [{"text": _clip_words(res["norm"], _FACET_WORDS), "require": None, "role": "resolution",
                 "words": words}]
    steps = step_commands(res.get("after"))
    if res.get("kind") == "retry" and not res.get("went_away") and len(steps) == 1 and len(res["after"]) <= 2:
        # one program between the failure and the same call working: that program is the fix
        return [{"text": steps[0], "require": None, "role": "resolution", "words": steps[0].split()[:2]}]
    return []


def probe_matches(probe: dict, facet: str) -> bool:
    """The ``require`` (a substring) and ``words`` (whole words) parts of a probe; the cosine
    part is computed in bulk by verify."""
    need = probe.get("require")
    if need and need not in facet:
        return False
    words = probe.get("words")
    if words:
        tokens = set(facet.split())
        return all(w in tokens or OPTION_ALIASES.get(w) in tokens for w in words)
    return True
