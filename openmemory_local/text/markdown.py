"""Quoted text made inert in Markdown, without HTML entities: the one escaping of every text an
agent reads (``MEMORY.md``, lesson files, received lessons' files).

The agent reads these files as they are, not as rendered HTML, so an entity (``&lt;branch>``,
``&amp;&amp;``) is noise in what it reads: the text is escaped for Markdown instead, and stays
readable. What must hold, whatever a quoted text holds (a failure's output, a lesson received from
a stranger):

* no HTML comment can open or close (``<!--``, ``-->``): Open Memory's section markers
  (``<!-- openmemory:end -->``) cannot be forged, and nothing can be hidden in a comment;
* no HTML tag can open (``<script>``, ``<img ...>``);
* no code span can be left open to swallow the text after it.

How (CommonMark): the text is cut into code spans (a run of backticks up to the next run of the
same length) and the prose around them. In prose, ``<`` and a backtick are written
``\\<`` and ``\\``` `` (a backslash escape: shown as the character itself, never markup), so are the
dashes of ``<!--`` and the dashes and ``>`` of ``-->`` (neither is left in the file, for a reader
that strips comments from raw text), a backslash before punctuation is doubled (so that it cannot
undo an escape), and, with ``brackets``, ``[`` and ``]`` are escaped too (the text is a link's
text). Inside a code span everything is shown as
written (placeholders such as ``<branch>`` stay as they are: ``git push --set-upstream origin
<branch>``), except that the two comment delimiters are broken with a space (``<! --``,
``-- >``): a backslash would show there. A backtick run with no partner is prose: its backticks
are escaped.
"""

from __future__ import annotations

import re

__all__ = ["escape_markdown", "break_comments", "one_line"]

_TICKS = re.compile(r"`+")
_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


def _spans(text: str) -> list[tuple[bool, str]]:
    """``(is_code, piece)`` in order: code spans (backticks included) and the prose between."""
    out: list[tuple[bool, str]] = []
    runs = list(_TICKS.finditer(text))
    pos, i = 0, 0
    while i < len(runs):
        opener = runs[i]
        closer = next((j for j in range(i + 1, len(runs)) if len(runs[j].group()) == len(opener.group())), None)
        if closer is None:
            i += 1
            continue
        if opener.start() > pos:
            out.append((False, text[pos:opener.start()]))
        out.append((True, text[opener.start():runs[closer].end()]))
        pos = runs[closer].end()
        i = closer + 1
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


def _prose(text: str, brackets: bool, after: str) -> str:
    """``after``: the first character after this piece (a code span's backtick), or nothing."""
    comment = set()  # the dashes of every "<!--" and "-->": escaped, so neither is left in the text
    for m in re.finditer(r"(?=(<!--|-->))", text):
        first = m.start() + (2 if m.group(1) == "<!--" else 0)
        comment.update((first, first + 1))
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            nxt = text[i + 1] if i + 1 < len(text) else after
            out.append("\\\\" if nxt and nxt in _PUNCT else "\\")
        elif ch in "<`" or (brackets and ch in "[]") or (ch == "-" and i in comment) \
                or (ch == ">" and text[max(0, i - 2):i] == "--"):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def break_comments(text: str) -> str:
    """``text`` with every ``<!--`` and ``-->`` broken by a space (``<! --``, ``-- >``): for a code
    span, or a value that is not Markdown (front matter), where a backslash would show."""
    while "<!--" in text or "-->" in text:
        text = text.replace("<!--", "<! --").replace("-->", "-- >")
    return text


_code = break_comments


def escape_markdown(text: str, *, brackets: bool = False) -> str:
    """``text`` inert in Markdown and free of HTML entities it did not hold (see the module)."""
    pieces = _spans(text or "")
    return "".join(_code(piece) if code else _prose(piece, brackets, pieces[n + 1][1][:1] if n + 1 < len(pieces) else "")
                   for n, (code, piece) in enumerate(pieces))


def one_line(text: str) -> str:
    """``text`` on one line: every run of white space one space, except the spaces inside a code
    span, kept as written (``sed -i 's/^    /\\t/' Makefile``: a command's quoted code means what
    its spaces say); a line break or tab in a code span is a space."""
    return "".join(re.sub(r"[^\S ]", " ", piece) if code else re.sub(r"\s+", " ", piece)
                   for code, piece in _spans(text or "")).strip()
