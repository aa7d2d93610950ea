"""The line that matters: which line of a failure's output a person would quote.

A failed command prints much that is not the reason: progress (``Compiling 41 files``,
``Checking PLT...``), banners (``On branch master``, ``Running ExUnit with seed: 1``),
warnings, hints, stack frames, summaries (``5 tests, 4 failures``, ``error: aborting due
to 2 previous errors``). :func:`reason_line` scores every line and keeps the best one:

=====  ===========================================================================
score  lines
=====  ===========================================================================
4      the exception that ends a Python traceback
3      a specific error: ``fatal: ...``, ``error: ...``, ``error[E0433]: ...``,
       ``... error TS2345: ...``, ``XxxError: ...``, ``** (RuntimeError) ...``,
       ``panic: ...``, ``✘ [ERROR] ...``, ``E   assert 4 == 5`` (pytest), ``--- FAIL:``,
       ``Assertion with == failed``, a linter finding (``[F] → ...``), a dialyzer
       location (``lib/x.ex:57:13:pattern_match`` joined with its message), ``No such
       file or directory``, ``command not found``, ``nothing to commit``, ...
2      any line with an error word (failed, cannot, denied, not found, invalid, ...)
1      a plain line of three words or more; summaries and generic lines (``error:
       failed to push some refs``, ``npm ERR! code ERESOLVE``, ``5 tests, 4 failures``)
0      blank lines, rules, progress, banners, warnings, hints, stack frames, echoed code
=====  ===========================================================================

The first line with the highest score wins. A chosen line that is only a header (it ends
with ``:``, ``[DIALYZER]``, ``black.....Failed``) is joined with the meaningful line after
it. A line found inside a tagged section (``[CREDO]``) is prefixed with the tag, and with the
failed header above it (``Pre-commit validation failed:``), so that the quote says which
check failed: ``Pre-commit validation failed: [CREDO] [F] → Function is too complex``.

For the host's own file tools (Read, Edit, Write, ...) the first line is the reason: what
follows it is the file's text echoed back.

``benchmarks/reason_lines.py`` measures the choice against ``benchmarks/data/reason_lines.json``,
a table of real failure outputs and the line a person quotes from each.
"""

from __future__ import annotations

import re

__all__ = ["reason_line", "score_line", "FIRST_LINE_TOOLS"]

#: Tools whose failure says its reason on the first line (the rest is echoed input).
FIRST_LINE_TOOLS = frozenset({"Read", "Edit", "MultiEdit", "Write", "NotebookEdit", "NotebookRead", "Glob",
                              "Grep", "LS", "WebFetch", "TodoWrite"})

_SCAN_CHARS = 64 * 1024  # a failure says what went wrong near its start (or its end: see below)
_TAIL_CHARS = 16 * 1024
_LINE_CHARS = 2000
_MAX_LINES = 4000

_NOISE = re.compile(
    r"""^(?:
        [\s\W_]*$                                           # blank, rules, box drawing, dots
      | [=_\-*#~]{3,}.*[=_\-*#~]{3,}$                       # a titled rule: === FAILURES ===
      | ==>\s | \#\#\[(?:group|endgroup|debug)\]            # build tool section markers
      | .*(?:\.\.\.|\u2026)\s*$                             # progress lines ending in ...
      | (?:hint|note|info|debug|tip|help|warning|warn|npm\ warn|npm\ notice|npm\ WARN|npm\ timing
         |npm\ http|notice)\b[:\s]                          # advice and warnings
      | \[?warning\]?[:\s] | \s*=\ (?:help|note):            # rustc notes
      | (?:Compiling|Generated|Downloading|Downloaded|Installing|Collecting|Resolving|Fetching|Building
         |Running|Finished|Checking|Getting|Updating|Linking|Starting|Using|Analyzing|Preparing|Writing
         |Loading|Creating|Copying|Verifying|Requirement\ already)\b(?!.*\b(?:error|failed|fail)\b)
      | On\ branch\ | Your\ branch\ is\ | HEAD\ detached | To\ (?:https?://|git@|ssh://|\S+:)
      | (?:at|in)\ \S.*(?:\(.*:\d+(?::\d+)?\)|:\d+:\d+)$       # JavaScript stack frames
      | at\ (?:async\ )?[\w$.<>\[\]]+\ \(|at\ new\ |at\ /
      | File\ ".*",\ line\ \d+                              # Python frames
      | \^+$ | [~^\s]+$                                     # carets under code
      | \(\S+\ [\d.]+\)\ \S+:\d+:                           # Elixir stack frames: (phoenix 1.8.3) lib/...
      | (?:stacktrace|code|left|right|expected|actual|String|Stdout|Stderr):\s?                  # ExUnit
      | \d+\ │ | │ | └─ | ┌─ | ├─                           # Elixir source excerpts
      | Please\ report\ incorrect\ results | Analysis\ took | Use\ `mix\ credo | done\ in\ \d
      | PLT\ is\ up\ to\ date | Finding\ suitable\ PLTs | Starting\ Dialyzer | Total\ errors:
      | \[Output\ truncated | \.\.\.\ \[\d+\ characters\ truncated\] | (?:E\s+)?\.\.\.Full\ output\ truncated
      | Fix\ these\ issues\ before | Run\ '.*'\ to\ fix | For\ more\ information\ about\ this\ error
      | A\ complete\ log\ of\ this\ run | npm\ ERR!\s*$ | npm\ error\s*$ | Run\ `.*`\ for\ details
      | platform\ \w+\ --\ Python | rootdir: | plugins: | cachedir: | collected\ \d+\ items? | configfile:
      | -\ (?:hook\ id|duration|exit\ code): | \[rerun: | Traceback\ \(most\ recent\ call\ last\)
      | \#\d+\ [\d.]+\ (?:\[|sha256|DONE|CACHED)            # docker build steps
    )""",
    re.VERBOSE | re.IGNORECASE,
)
_EXCEPTION = re.compile(r"^\[?(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Fault)\b:?")
# What says outright that something failed. Split like _GENERIC below: what opens the line
# (matched at its start) and what may stand anywhere (searched, and only when one of its
# words is in the line: a search of a long alternation is slow on long outputs).
_STRONG_OPENING = re.compile(
    r"""(?:
        (?:fatal|error|Error|ERROR|FATAL|panic|FAIL|FAILED|FAILURE|Failed|E)(?:\[[\w-]+\])?(?::|\s{2,}|\s+-\s)
      | error\[E\d+\] | \*\*\ \(\w+                                             # rustc, Elixir
      | [✘✖×❌]\s | \[ERROR\] | ---\ FAIL: | FAIL\s | FAILED\s | npm\ ERR!\ (?!code\ )\S
      | npm\ error\ (?!code\ )\S
      | Assertion\ with\ | AssertionError\b | assert\ | Expected\b.*\breceived\b
      | \[[A-Z]\]\ [\u2190-\u21ff]                                                  # credo: [F] → ...
      | \S+\.\w+:\d+(?::\d+)?:\s?\w+$                                             # dialyzer location
      | !\ \[(?:rejected|remote\ rejected)\]
    )""",
    re.VERBOSE,
)
_STRONG_WORDS = ("No such file or directory", "command not found", "ermission denied", "cannot access",
                 "not a git repository", "nothing to commit", "no changes added to commit", "nothing added to commit",
                 "Could not resolve", "Cannot find module", "ModuleNotFoundError", "SyntaxError", "segmentation fault",
                 "is beyond a symbolic link", "has no upstream branch", "non-fast-forward", "merge conflict",
                 "CONFLICT (", "Traceback", "error ")
_STRONG_ANYWHERE = re.compile(
    r"""(?:
        \berror\ (?:TS|CS|C|LNK)\d+:                                                   # tsc
      | \b(?:No\ such\ file\ or\ directory|command\ not\ found|[Pp]ermission\ denied|cannot\ access
           |not\ a\ git\ repository|nothing\ to\ commit|no\ changes\ added\ to\ commit|nothing\ added\ to\ commit
           |Could\ not\ resolve|Cannot\ find\ module|ModuleNotFoundError|SyntaxError|segmentation\ fault
           |is\ beyond\ a\ symbolic\ link|has\ no\ upstream\ branch|non-fast-forward|merge\ conflict
           |CONFLICT\ \(|Traceback)\b
    )""",
    re.VERBOSE,
)


class _Strong:
    @staticmethod
    def search(line: str):
        return _STRONG_OPENING.match(line) or (any(w in line for w in _STRONG_WORDS) and _STRONG_ANYWHERE.search(line))


_STRONG = _Strong()
_ERRORISH = re.compile(
    r"error|fatal|fail|exception|denied|not found|no such|cannot|can't|could not|couldn't|invalid|unknown|"
    r"refused|undefined|missing|exceed|not formatted|ignored|rejected|timed out|timeout|assert|panic|abort|"
    r"unable|illegal|not allowed|forbidden|conflict|does not exist|doesn't exist|no upstream|is beyond|"
    r"unresolved|not defined|unexpected|mismatch|violation|too complex|could be|prefer ",
    re.IGNORECASE,
)
#: Every alternative of _ERRORISH is a literal: a substring test of the lower-cased line is the same rule, fast.
_ERRORISH_WORDS = tuple(_ERRORISH.pattern.lower().split("|"))


def _errorish(line: str) -> bool:
    low = line.lower()
    return any(w in low for w in _ERRORISH_WORDS)


# What a line says when a whole run failed (``failed to push some refs``), in two halves that
# together are the one rule: what may stand anywhere in the line (searched), and what must
# open it (matched at its start only: a search would try each of these at every position,
# the bulk of ingest's time on long outputs).
_GENERIC_ANYWHERE = re.compile(
    r"""(?:
        failed\ to\ push\ some\ refs | aborting\ due\ to | could\ not\ compile | build\ failed\b(?!\ with)
      | Process\ completed\ with\ exit\ code | returned\ (?:non-zero\ )?exit\ (?:code|status)
      | exited\ with\ (?:an\ unexpected\ )?code | Command\ failed\ with\ exit\ code | Exit\ status\ \d
      | Build\ failed\ with\ \d+\ error
    )""",
    re.VERBOSE | re.IGNORECASE,
)
_GENERIC_OPENING = re.compile(
    r"""(?:
        make(?:\[\d+\])?:\ \*\*\*\ \[ | npm\ (?:ERR!|error)\ code\ | \d+\ tests?,\ \d+\ failures?
      | \d+\ failed,? | Found\ \d+\ errors? | Tests?:\s+\d+\ failed | error:\ Recipe\ `
      | Error:\ Process\ completed | FAIL\s+\S+\s+[\d.]+s$ | ERROR:\ Job\ failed
      | \#\#\[error\]Process\ completed | (?:\d+\ )?errors?\ generated | \d+\ errors?$
    )""",
    re.VERBOSE | re.IGNORECASE,
)


_GENERIC_WORDS = ("failed to push some refs", "aborting due to", "could not compile", "build failed",
                  "process completed with exit code", "exit code", "exit status", "exited with")


class _Generic:
    """``search(line)``: either half of the rule above (the second only when one of its words is there)."""

    @staticmethod
    def search(line: str):
        if _GENERIC_OPENING.match(line):
            return True
        low = line.lower()
        return any(w in low for w in _GENERIC_WORDS) and _GENERIC_ANYWHERE.search(line)


_GENERIC = _Generic()
_HEADER_TAG = re.compile(r"^\[[A-Z][A-Z _-]*\]:?$")
_LOCATION = re.compile(r"^\S+\.\w+:\d+(?::\d+)?:\s?\w+$")  # dialyzer: lib/x.ex:57:13:pattern_match
_PRECOMMIT_FAILED = re.compile(r"^(.+?)\.{3,}\s*\(?.*?\)?\s*Failed$")


def _precommit_failed(line: str) -> bool:
    """``_PRECOMMIT_FAILED.match``, tried only on a line that can match (it ends in ``Failed``
    and holds ``...``): the match itself is quadratic in the line's length."""
    return ((line.endswith("Failed") or line.endswith("Failed\n")) and "..." in line
            and _PRECOMMIT_FAILED.match(line) is not None)
_SECTION_TITLE = re.compile(r"^[A-Z][\w ]{2,60}$")  # "Software Design", "Code Readability"
_PY_FRAME = re.compile(r"^(?:File \".*\", line \d+|\S.*$)")


_LINE_MARK = re.compile(r"^\s*(?:\[\s*\d+s\]\s*|#\d+ [\d.]+ |\d+\t|\x1b\[[\d;]*m)")
#: The first non-space character of a line ``_LINE_MARK`` matches: one of these or a decimal
#: digit (``\d``: ``str.isdecimal``).
_MARK_STARTS = frozenset("[#\x1b")


def _clean(text: str) -> list[str]:
    if len(text) > _SCAN_CHARS + _TAIL_CHARS:
        text = text[:_SCAN_CHARS] + "\n" + text[-_TAIL_CHARS:]
    text = text.replace("\\n", "\n")  # some hooks report with escaped newlines
    out = []
    for line in text.splitlines()[:_MAX_LINES]:
        line = line[:_LINE_CHARS].replace("\t", " ")
        first = line.lstrip()[:1]
        if first in _MARK_STARTS or first.isdecimal():  # else the pattern cannot match
            line = _LINE_MARK.sub("", line)
        out.append(line.strip().strip("\u2503\u2502\u2551").strip())
    return out


def score_line(line: str) -> int:
    """How much a line (stripped) looks like the reason of a failure (see the module doc)."""
    if not line:
        return 0
    if _GENERIC.search(line):
        return 1
    if _precommit_failed(line):
        return 2
    if _NOISE.match(line):
        return 0
    plain = re.sub(r"^(?:npm (?:ERR!|error)|E)\s+", "", line)
    if _STRONG.search(line) or _EXCEPTION.match(plain):
        return 3
    if _errorish(line) and len(line.split()) > 1:
        return 2
    if len(line.split()) >= 3:
        return 1
    return 0


def _traceback_exception(lines: list[str]) -> int | None:
    """The index of the exception line that ends the first Python traceback, if any."""
    start = next((i for i, l in enumerate(lines) if l.startswith("Traceback (most recent call last)")), None)
    if start is None:
        return None
    found = None
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if not line or line.startswith("File \"") or _NOISE.match(line):
            continue
        if _EXCEPTION.match(line) or re.match(r"^[A-Za-z_][\w.]*: ", line):
            found = i
            break
    return found


def _is_header(line: str) -> bool:
    return ((line.endswith(":") and not re.search(r"\w+://\S+:$", line)) or bool(_HEADER_TAG.match(line))
            or _precommit_failed(line) or bool(_LOCATION.match(line)))


def _context(lines: list[str], at: int) -> str:
    """``Header failed: [TAG]`` above the chosen line, when it sits in a tagged section."""
    tag = header = None
    for i in range(at - 1, max(-1, at - 200), -1):
        line = lines[i]
        if tag is None and _HEADER_TAG.match(line):
            tag = line.rstrip(":")
            continue
        if line.endswith(":") and _errorish(line) and len(line.split()) <= 8:
            header = line
            break
    if tag is None:
        return ""
    return " ".join(part for part in (header, tag) if part) + " "


def reason_line(text: str, *, tool: str | None = None, limit: int = 300) -> str:
    """The line of a failure's output that says what went wrong (see the module docstring)."""
    lines = _clean(text or "")
    present = [i for i, l in enumerate(lines) if l]
    if not present:
        return ""
    if tool in FIRST_LINE_TOOLS:
        return lines[present[0]][:limit]
    # The first line of the highest score wins. A traceback's exception line scores 4, above any
    # line's own score (3 at most): then nothing else needs scoring; else the scan stops at the
    # first 3, since no later line can beat it.
    tb = _traceback_exception(lines)
    if tb is not None:
        best, chosen = 4, tb
    else:
        best, chosen = 0, 0
        for i, line in enumerate(lines):
            score = score_line(line)
            if score > best:
                best, chosen = score, i
                if score >= 3:
                    break
    if best == 0:
        meaningful = [i for i in present if not _NOISE.match(lines[i])]
        return lines[(meaningful or present)[0]][:limit]
    parts = [lines[chosen]]
    k = chosen
    while _is_header(parts[-1]) and len(parts) < 4:
        k += 1
        while k < len(lines) and (not lines[k] or (_NOISE.match(lines[k]) and not _HEADER_TAG.match(lines[k]))
                                  or (_SECTION_TITLE.match(lines[k]) and len(lines[k].split()) <= 3)):
            k += 1
        if k >= len(lines):
            break
        parts.append(lines[k])
    prefix = _context(lines, chosen) if best >= 3 else ""
    out = prefix + " ".join(p.rstrip() for p in parts)
    return " ".join(out.split())[:limit]
