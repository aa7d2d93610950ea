"""Volatile tokens out, so that the same surprise on two branches is one surprise.

Sleep compares surprises (and predictions with what later sessions did) by the cosine of
their hashed embeddings (:mod:`openmemory_local.text.embed`). Before embedding, a text is
*normalised*: what changes from one occurrence of the same failure to the next is
replaced by a placeholder word, in this order:

==========================  =======================================================
what                        becomes
==========================  =======================================================
the session's working       removed (``/home/me/app/lib/x.ex`` -> ``lib/x.ex``), also in
directory, and its Claude   its Claude Code folder form (``-home-me-app``) and in
Code folder name            sibling worktrees of the same family (see :func:`family`)
the session's branch name   ``{branch}`` (as a whole token: ``spotter-gqc``)
UUIDs                       ``{id}``
ISO timestamps, clock       ``{time}``
times
hexadecimal hashes (7+      ``{hash}`` (``bd0afab``, ``3f9c2e1d...``)
characters, letters and
digits)
numbers (with a decimal     ``{num}`` (``806.5KB`` -> ``{num}``; seeds, ports, line
part or a short unit)       numbers, exit codes, sizes, durations)
path components that still  ``{id}`` (``tmpab12cd`` -> ``{id}``)
hold a digit
==========================  =======================================================

White space is collapsed. The result is meant for comparison (and shown in
``openmemory lessons --json`` as the lesson's signature); lesson texts quote the real
failure, not its normalised form.

A *project family* groups the working directories that are one project: git worktrees
named after their branch (``~/src/app-worktrees/feature-x`` on branch ``feature-x``)
belong to the family ``~/src/app-worktrees/*``; any other directory is its own family.
Lessons form inside one family (a correction in one project says nothing about
another) and render into every project folder of their family.
"""

from __future__ import annotations

import re
from functools import lru_cache


__all__ = [
    "normalise",
    "family",
    "family_matches",
    "family_label",
    "command_segments",
    "shown_segments",
    "path_like",
]

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_ISO_TIME = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
)
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\b")
_HEX = re.compile(r"\b(?=[0-9a-fA-F]*[0-9])(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{7,64}\b")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_])\d+(?:[.,]\d+)*(?:[A-Za-z]{1,3})?(?![A-Za-z0-9_])")
_PATH_TOKEN = re.compile(r"[^\s'\"`()\[\]{}<>,;|&=]*/[^\s'\"`()\[\]{}<>,;|&=]*")
_DIGIT = re.compile(r"\d")
_SPACE = re.compile(r"\s+")
_PLACEHOLDER = re.compile(r"\{(?:id|time|hash|num|branch)\}")


@lru_cache(maxsize=256)
def _family_re(fam: str) -> re.Pattern:
    """Any worktree of a ``.../*`` family, with the slash after it."""
    return re.compile(re.escape(fam[:-2]) + r"/[^/\s'\"`]+(?:/|(?![\w.-]))")


@lru_cache(maxsize=4096)
def _branch_re(branch: str) -> re.Pattern | None:
    """The branch's names as a whole token (the reference of :func:`_sub_branch`, which replaces them)."""
    names = {branch}
    if "/" in branch:
        names.add(branch.rsplit("/", 1)[-1])
    names = sorted((n for n in names if len(n) >= 2), key=len, reverse=True)
    if not names:
        return None
    return re.compile(r"(?<![\w.-])(?:" + "|".join(re.escape(n) for n in names) + r")(?![\w-])")


@lru_cache(maxsize=4096)
def _dashed(root: str) -> str:
    """A directory as Claude Code names its folder (``/home/me/app`` -> ``-home-me-app``)."""
    return re.sub(r"[^A-Za-z0-9]", "-", root)


def _strip_dir(text: str, root: str) -> str:
    """Remove ``root`` (followed by ``/`` or the end of a path) from ``text``."""
    out, start = [], 0
    while True:
        at = text.find(root, start)
        if at < 0:
            break
        end = at + len(root)
        if end < len(text) and text[end] == "/":
            out.append(text[start:at])
            start = end + 1
        elif end >= len(text) or not (text[end].isalnum() or text[end] in "_.-"):
            out.append(text[start:at])
            start = end
        else:
            out.append(text[start:end])
            start = end
    out.append(text[start:])
    return "".join(out)


def _path_ids(match: re.Match) -> str:
    token = match.group(0)
    if not _DIGIT.search(token):
        return token
    parts = token.split("/")
    for i, part in enumerate(parts):
        if _DIGIT.search(_PLACEHOLDER.sub("", part)):
            stem, dot, ext = part.rpartition(".")
            keep_ext = dot and stem and ext.isalpha() and len(ext) <= 5
            parts[i] = "{id}" + (("." + ext) if keep_ext else "")
    return "/".join(parts)


#: Texts up to this long are memoised (at most 65,536 of them: a few tens of MB at worst).
_MEMO_CHARS = 512


@lru_cache(maxsize=1 << 16)
def _normalise_cached(text: str, *, cwd: str | None = None, branch: str | None = None):
    return _normalise_uncached(text, cwd=cwd, branch=branch)


def normalise(text: str, *, cwd: str | None = None, branch: str | None = None) -> str:
    """``text`` with its volatile tokens replaced (see the module docstring)."""
    # memoised: a pure function of its arguments, which sleep asks again and again
    if len(text) > _MEMO_CHARS:
        return _normalise_uncached(text, cwd=cwd, branch=branch)
    return _normalise_cached(text, cwd=cwd, branch=branch)


def _normalise_uncached(text: str, *, cwd: str | None = None, branch: str | None = None) -> str:
    """The work of :func:`normalise` (uncached)."""
    if not text:
        return ""
    root, fam, dashed, tail = _context(cwd, branch)
    if root is not None:
        if fam is not None and fam[:-2] in text:
            text = _family_re(fam).sub("", text)
        if root in text:
            text = _strip_dir(text, root)
        if dashed in text:
            text = _strip_dir(text, dashed)
    if tail is not None and tail in text:
        text = _sub_branch(text, _branch_names(branch))
    return _volatile_tail(text)


@lru_cache(maxsize=4096)
def _branch_names(branch: str) -> tuple[str, ...]:
    """The names :func:`_branch_re` matches, longest first (its alternation's order)."""
    names = {branch}
    if "/" in branch:
        names.add(branch.rsplit("/", 1)[-1])
    return tuple(sorted((n for n in names if len(n) >= 2), key=len, reverse=True))


def _sub_branch(text: str, names: tuple[str, ...]) -> str:
    """``_branch_re(branch).sub("{branch}", text)`` without compiling a regular expression per branch
    (one each, for the thousands of branches of a big sleep): each leftmost occurrence of a name, the
    longest first, neither after a word character, ``.`` or ``-`` nor before a word character or
    ``-`` (``\\w`` as the regular expression reads it: ``str.isalnum()`` or ``_``)."""
    if not names:
        return text
    out, start, at, end = [], 0, 0, len(text)
    while True:
        found = [k for k in (text.find(name, at) for name in names) if k >= 0]
        if not found:
            break
        at = min(found)
        before = text[at - 1] if at else ""
        match = None
        if not (before and (before.isalnum() or before in "_.-")):
            for name in names:
                stop = at + len(name)
                if text.startswith(name, at) and not (stop < end and (text[stop].isalnum() or text[stop] in "_-")):
                    match = stop
                    break
        if match is None:
            at += 1
            continue
        out += (text[start:at], "{branch}")
        start = at = match
    out.append(text[start:])
    return "".join(out)


@lru_cache(maxsize=4096)
def _context(cwd: str | None, branch: str | None) -> tuple:
    """What :func:`normalise` looks for in a text of ``cwd`` and ``branch`` (memoised: a few distinct
    pairs, asked per text): ``(root, family if a worktree family, the root as Claude Code names its
    folder, the branch's last part)``, None for what does not apply."""
    root = fam = dashed = tail = None
    if cwd and cwd.strip("/"):
        root = cwd.rstrip("/")
        fam = family(root, branch)
        fam = fam if fam and fam.endswith("/*") else None
        dashed = _dashed(root)
    if branch and branch != "HEAD":
        tail = branch.rsplit("/", 1)[-1]
    return root, fam, dashed, tail


def _volatile_tail(text: str) -> str:
    """IDs, times, hashes and numbers, then the path components with a digit, replaced; the white
    space collapsed."""
    text = _ids_times_numbers(text)
    if "/" in text:
        text = _PATH_TOKEN.sub(_path_ids, text)
    return _SPACE.sub(" ", text).strip()


def _ids_times_numbers(text: str) -> str:
    """UUIDs, times, hashes and numbers replaced, in that order. Each pattern is tried only where
    it can match (what this skips would change nothing): a UUID, an ISO time have dashes, a clock
    time a colon; times, hashes and numbers have a digit."""
    if "-" in text:
        text = _UUID.sub("{id}", text)
    if _DIGIT.search(text):
        if "-" in text:
            text = _ISO_TIME.sub("{time}", text)
        if ":" in text:
            text = _CLOCK.sub("{time}", text)
        text = _HEX.sub("{hash}", text)
        text = _NUMBER.sub("{num}", text)
    return text


# --- project families -------------------------------------------------------------------


def family(cwd: str | None, branch: str | None = None) -> str | None:
    """The project family of a working directory (see the module docstring).

    A path component equal to the branch name (or to its last ``/`` part) becomes ``*``:
    ``/src/app-worktrees/feature-x`` on ``feature-x`` -> ``/src/app-worktrees/*``.
    """
    if not cwd:
        return None
    root = cwd.rstrip("/") or "/"
    if not branch:
        return root
    names = {branch, branch.rsplit("/", 1)[-1]}
    parts = root.split("/")
    # only the last component: a worktree folder named after its branch
    if len(parts) > 2 and parts[-1] in names:
        parts[-1] = "*"
    return "/".join(parts)


def family_matches(fam: str | None, path: str | None) -> bool:
    """Whether ``path`` (a working directory, or a folder inside one) belongs to ``fam``."""
    if not fam or not path:
        return False
    path = path.rstrip("/") or "/"
    if fam.endswith("/*"):
        base = fam[:-2]
        if not path.startswith(base + "/"):
            return False
        rest = path[len(base) + 1:]
        return bool(rest) and rest.split("/", 1)[0] not in ("", ".", "..")
    return path == fam or path.startswith(fam.rstrip("/") + "/")


def family_label(fam: str | None) -> str:
    """A short name for a family, for texts: its last one or two path components."""
    if not fam:
        return "an unknown project"
    parts = [p for p in fam.split("/") if p]
    if not parts:
        return "/"
    if parts[-1] == "*" and len(parts) >= 2:
        return parts[-2] + "/*"
    return parts[-1]


# --- shell commands -------------------------------------------------------------------------

_QUOTED = re.compile(r"\"(?:\\.|[^\"\\])*\"?|'[^']*'?|\$\((?:[^()]|\([^()]*\))*\)")
_HEREDOC = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?.*", re.S)
_REDIRECT = re.compile(r"(?:^|\s)(?:\d?>>?&?\d?|&>|<)\s*(?:/dev/null|&?\d|\S+)?")
_SEPARATOR = re.compile(r"&&|\|\||[;|\n]")


_SKIPPED_PROGRAMS = frozenset(("cd", "echo", "true", "false", "head", "tail", "wc", "sort", "cat", "tee", "xargs",
                               "printf", "sleep", "less", "source", "."))


def command_segments(command: str, *, setup: bool = False) -> list[str]:
    """The simple commands of a shell line: quoted strings, heredocs and redirections
    removed (a commit message says nothing about the situation), split on ``&&``,
    ``||``, ``;``, ``|`` and new lines; ``cd`` and output filters dropped.

    ``setup=True``: what a command needed to run as it did is kept, the ``cd`` segments and a
    segment's leading variable assignments (``CGO_ENABLED=1 go test -race ./...``): two calls
    that differ only there are different calls (a fix), though the same situation."""
    if not command:
        return []
    text = _HEREDOC.sub("", command[:4000])
    text = _QUOTED.sub(" ", text)
    out = []
    for segment in _SEPARATOR.split(text):
        segment = _REDIRECT.sub(" ", segment)
        words = segment.split()
        env = []
        while words and "=" in words[0] and not words[0].startswith("-"):
            env.append(words[0])
            words = words[1:]
        if not words:
            continue
        prog = words[0].rsplit("/", 1)[-1]
        if prog in _SKIPPED_PROGRAMS and not (setup and prog == "cd"):
            continue
        out.append(" ".join((env if setup else []) + words))
    return out


_SHOWN_QUOTE_MAX = 32
_PROSE_WORD = re.compile(r"[A-Za-z]{3,}")
_SHOWN_PART = re.compile(r"<<-?\s*['\"]?(\w+)['\"]?.*|\"(?:\\.|[^\"\\])*\"?|'[^']*'?|\$\((?:[^()]|\([^()]*\))*\)"
                         r"|&&|\|\||[;|\n]|[^\"'$;|&\n<]+|.", re.S)


def shown_segments(command: str) -> list[str]:
    """The simple commands of a shell line as a fix shows them (what another agent would type):
    the ``cd`` and variable assignments kept, heredocs and redirections out, a quoted string kept
    as written when it is short code (``'s/^    /\t/'``, ``'.[0].id'``) and shown as ``<text>`` when
    it is prose or long (a commit message: the same fix whatever the message), a command
    substitution as ``<command>`` (placeholders, as a claim has them: PROTOCOL.md); split on
    ``&&``, ``||``, ``;``, ``|`` and new lines outside quotes."""
    if not command:
        return []
    out, current = [], []

    def close() -> None:
        text = " ".join(_REDIRECT.sub(" ", "".join(current)).split())
        if text:
            out.append(text)
        current.clear()

    for match in _SHOWN_PART.finditer(command[:4000]):
        part = match.group(0)
        if part in ("&&", "||", ";", "|", "\n"):
            close()
        elif part.startswith("<<") and match.group(1):
            break  # a heredoc: its body is not the command
        elif part[:1] in ("'", '"'):
            body = part[1:-1] if len(part) > 1 and part[-1] == part[0] else part[1:]
            short = len(body) <= _SHOWN_QUOTE_MAX and len(_PROSE_WORD.findall(body)) <= 2
            kept = f"{part[0]}{body}{part[0]}".replace(" ", "\x00").replace("\t", "\x01")
            current.append(f" {kept} " if short else " \x02 ")
        elif part.startswith("$("):
            current.append(" \x03 ")
        else:
            current.append(part)
    close()
    # spaces inside a kept quote, and the placeholders, were held apart from the splitting and
    # the redirections above
    return [s.replace("\x00", " ").replace("\x01", "\t").replace("\x02", "<text>").replace("\x03", "<command>")
            for s in out]


def path_like(word: str) -> bool:
    """A word that names a file or folder (has a ``/``, or a short file extension)."""
    if "/" in word:
        return True
    stem, dot, ext = word.rpartition(".")
    return bool(dot and stem and ext.isalpha() and 1 <= len(ext) <= 5 and not word.startswith("-"))
