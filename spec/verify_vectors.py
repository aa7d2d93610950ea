#!/usr/bin/env python3
"""An independent verifier of the Open Memory wire format, written from PROTOCOL.md alone.

    python spec/verify_vectors.py        # checks every vector in spec/vectors/, exit 0 if all pass

It imports nothing from this repository: only cbor2, hashlib, PyNaCl and the standard library,
and it reads the observation rule's lists and the text rules' code points out of PROTOCOL.md
itself (and the tables PROTOCOL.md points to: spec/unicode-14.0-assigned.txt and the observation
rule's spec/observation/). If it passes, PROTOCOL.md says enough to implement verification; if the
document and the reference implementation drift apart, it fails.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import unicodedata
from pathlib import Path

import cbor2
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError
from nacl.exceptions import ValueError as NaclValueError

SPEC = Path(__file__).resolve().parent
PROTOCOL = SPEC.parent / "PROTOCOL.md"


class Invalid(Exception):
    def __init__(self, code: str, why: str):
        super().__init__(f"{code}: {why}")
        self.code = code


# --- the lists, read from PROTOCOL.md ---------------------------------------------------------


def protocol_list(name: str) -> str:
    """The fenced block that follows '<!-- list: NAME -->' in PROTOCOL.md."""
    text = PROTOCOL.read_text(encoding="utf-8")
    match = re.search(r"<!-- list: " + re.escape(name) + r" -->\s*```text\n(.*?)\n\s*```", text, re.S)
    if match is None:
        raise SystemExit(f"PROTOCOL.md has no list {name!r}")
    return match.group(1)


def code_point_ranges(block: str) -> list[tuple[int, int]]:
    out = []
    for item in block.split():
        low, _, high = item.partition("..")
        out.append((int(low, 16), int(high or low, 16)))
    return out


FORBIDDEN = code_point_ranges(protocol_list("forbidden-code-points"))
# The code points assigned in Unicode 14.0 (PROTOCOL.md, "Text fields"): spec/unicode-14.0-assigned.txt.
ASSIGNED = code_point_ranges(
    " ".join(line for line in (SPEC / "unicode-14.0-assigned.txt").read_text().splitlines() if not line.startswith("#"))
)
_gaps, _next = [], 0
for _low, _high in ASSIGNED:
    if _low > _next:
        _gaps.append((_next, _low - 1))
    _next = _high + 1
_gaps.append((_next, 0x10FFFF))
UNASSIGNED = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _gaps) + "]")
WHITE_SPACE = "".join(chr(int(x, 16)) for x in protocol_list("white-space").split())

# --- the observation rule (PROTOCOL.md, "The observation rule") ----------------------------
# Lists from PROTOCOL.md, tables from spec/observation/ (the files PROTOCOL.md names).

ADDRESSED = [re.compile(p, re.ASCII) for p in protocol_list("addressed-patterns").strip().splitlines()]
OBLIGATIONS = [re.compile(p, re.ASCII) for p in protocol_list("obligation-patterns").strip().splitlines()]
REPORTING = protocol_list("reporting-verbs").split()
REPORTED = re.compile(r"\b(?:" + "|".join(REPORTING) + r")(?: [a-z']+){0,3}? to (?:(?:always|never|not|only|just"
                      r"|also|now|first) )*([a-z]+)\b", re.ASCII)
SKIPPED = set(protocol_list("skipped-openers").split())
PHRASES = [line.split() for line in protocol_list("skipped-phrases").strip().splitlines()]
LABELS = set(protocol_list("labels").split())
PREDICATES = set(protocol_list("predicate-words").split())
STOPS = set(protocol_list("stop-words").split())
NAMES = [line.split(" ") for line in protocol_list("names").strip().splitlines()]
CLAUSE_WORDS = {"then", "so", "but", "otherwise", "else", "whereas"}
SINGULAR = set(protocol_list("habit-subjects-singular").split())
PLURAL = set(protocol_list("habit-subjects-plural").split())
HABIT = re.compile(r"(?<![a-z0-9_'-])(" + "|".join(sorted(SINGULAR | PLURAL)) + r")((?: (?:"
                   + "|".join(sorted(protocol_list("habit-adverbs").split())) + r"))*) ([a-z]+)\b", re.ASCII)
UNDERGOING = set(protocol_list("habit-undergoing").split())
PARTICIPLES = set(protocol_list("action-participles").split())
CONDITION = re.compile(r"\b(?:when|whenever|if|once|each time|every time|any time)\b[^.;:!?,]{1,160}?, "
                       r"(?:[^.;:!?,]{0,80}? )?(?:is|are|gets?) (?:(?:then|also|just|always|usually|simply"
                       r"|immediately|automatically|first) )*([a-z]+(?:-[a-z]+)?)\b", re.ASCII)
WITH_OF = set(protocol_list("verbs-with-of").split())
MARKUP_LINKS = [re.compile(p, re.ASCII) for p in protocol_list("markup-patterns").strip().splitlines()]
TAGS = [re.compile(p, re.ASCII) for p in protocol_list("tag-patterns").strip().splitlines()]
ENCODED = re.compile(protocol_list("encoded-pattern").strip(), re.ASCII)
TABLES = SPEC / "observation"


def table(name: str) -> list[str]:
    return [x for x in (TABLES / name).read_text(encoding="utf-8").splitlines() if x.strip() and not x.startswith("#")]


def code_points(name: str) -> set[int]:
    out = set()
    for low, high in code_point_ranges(" ".join(table(name))):
        out.update(range(low, high + 1))
    return out


IGNORABLE, MARKS, OTHER_SCRIPT = code_points("ignorable.txt"), code_points("marks.txt"), code_points("other-script-letters.txt")
CONFUSABLES = {int(a, 16): "".join(chr(int(x, 16)) for x in b.split()) for a, b in (x.split(";") for x in table("confusables-ascii.txt"))}
VERBS = dict(x.split() for x in table("verbs.txt"))
PAST_OF = dict(x.split() for x in table("past-forms.txt"))
PAST = set(PAST_OF)
ENGLISH = set(table("english-words.txt"))
SECTIONS: dict[str, set[str]] = {}
_section = ""
for _line in table("function-words.txt"):
    if _line.startswith("["):
        _section = _line.strip("[] ")
    else:
        SECTIONS.setdefault(_section, set()).update(_line.split())
OBJECTS = SECTIONS["object"]
FUNCTION = set().union(*SECTIONS.values())
SPACE = set(WHITE_SPACE) | {"\x1c", "\x1d", "\x1e", "\x1f"}
BREAKS = set("\n\x0b\x0c\r\x85\x1c\x1d\x1e")
QUOTES = set("\u201c\u201d\u201e\u201f\u00ab\u00bb\u2039\u203a")
ASCII_LOWER = {ord(c): c.lower() for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}
CODE = re.compile(r"`+[^`]*`+")
LINK = re.compile(r"!?\[([^\[\]]{0,200})\]\([^() \n]{0,300}\)")
MARKUP = re.compile(r"<!--|-->|<\|[^|<>]{0,40}\|>|</?[A-Za-z][A-Za-z0-9:_-]*(?:[ \n][^<>]{0,200})?/?>|[*~]+"
                    r"|(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])")
SUFFIXES = [("s", 1, ""), ("es", 2, ""), ("ies", 3, "y"), ("ed", 2, ""), ("ed", 1, ""), ("ied", 3, "y"), ("ing", 3, ""),
            ("ing", 3, "e"), ("er", 2, ""), ("er", 1, ""), ("ier", 3, "y"), ("est", 3, ""), ("est", 2, ""),
            ("iest", 4, "y"), ("ly", 2, ""), ("ily", 3, "y"), ("ally", 4, ""), ("bly", 3, "ble")]


LOOK_ALIKE = re.compile(r"(?<![a-z0-9_])(?=[a-z0-9]*[a-z])(?=[a-z0-9]*[0-9])[a-z0-9]+(?![a-z0-9_])")


def unleet(word: str) -> str:
    return word.translate(str.maketrans("013457", "oieast"))


def spaced(text: str) -> str:
    return "".join("\n" if c in BREAKS else " " if c in SPACE else c for c in text)


def kind_of(tok: str) -> str:
    if re.fullmatch(r"[A-Za-z]+(?:'[A-Za-z]+)?", tok):
        return "word"
    if not re.search(r"[A-Za-z0-9]", tok):
        return "symbol"
    if re.fullmatch(r"[0-9][0-9.,]*", tok):
        return "number"
    return "target" if "/" in tok or tok[0] in "-~$." else "other"


def clauses_of(canonical: str) -> list[tuple[list[tuple[str, str, str]], bool]]:
    text = spaced(canonical)
    pieces, last = [], 0
    for m in CODE.finditer(text):
        pieces.append(MARKUP.sub(" ", LINK.sub(r" \1 ", text[last : m.start()])) + m.group())
        last = m.end()
    prose = "".join(pieces) + MARKUP.sub(" ", LINK.sub(r" \1 ", text[last:]))
    out, stack, cur, word, i = [], [], [], "", 0
    quotes = {'"': False, "'": False}

    def end(asks=False):
        nonlocal cur
        if cur:
            out.append((cur, bool(stack), asks and not stack))
        cur = []

    def flush(call=False):
        nonlocal word
        if word:
            k = "other" if call else kind_of(word)
            if k == "word" and word.lower() in CLAUSE_WORDS:
                end()
            else:
                cur.append((k, word, word.lower() if k == "word" else word))
        word = ""

    n = len(prose)
    while i < n:
        ch = prose[i]
        if ch == "`":
            flush()
            m = CODE.match(prose, i)
            if m:
                cur.append(("code", m.group(), m.group()))
                i = m.end()
            else:
                i += 1
        elif ch == " ":
            flush()
            i += 1
        elif ch in ".!?;:":
            j = i
            while j < n and prose[j] in ".!?;:":
                j += 1
            if j == n or prose[j] in " \n\"')]}":
                flush()
                end("?" in prose[i:j])
            else:
                word += prose[i:j]
            i = j
        elif ch in ",\n\u2014\u2015":
            flush()
            end()
            i += 1
        elif ch == "-" and not word and (i == 0 or prose[i - 1] in " \n") and re.match(r"-+(?:[ \n]|$)", prose[i:]):
            flush()
            end()
            i += len(re.match(r"-+", prose[i:]).group())
        elif ch == '"' or ch in "()[]{}" or (ch == "'" and not (0 < i < n - 1 and prose[i - 1].isascii()
                                                                and prose[i - 1].isalpha() and prose[i + 1].isascii()
                                                                and prose[i + 1].isalpha())):
            flush(ch == "(")
            if ch in "\"'":
                opens = quotes[ch] = not quotes[ch]
            else:
                opens = ch in "([{"
            if opens:
                stack.append(cur)
                cur = []
            else:
                if cur:
                    out.append((cur, True, False))
                cur = stack.pop() if stack else []
            i += 1
        else:
            word += ch
            i += 1
    flush()
    while True:
        if cur:
            out.append((cur, bool(stack), False))
        if not stack:
            break
        cur = stack.pop()
    return out


def is_past(w: str) -> bool:
    return w in PAST or (w.endswith("ed") and len(w) >= 4 and (
        w[:-2] in VERBS or w[:-1] in VERBS or (w.endswith("ied") and w[:-3] + "y" in VERBS)
        or (len(w) >= 5 and w[-3] == w[-4] and w[:-3] in VERBS)))


def is_s_form(w: str) -> bool:
    if not w.endswith("s") or len(w) < 3:
        return False
    bases = [w[:-1]] + ([w[:-2]] if w.endswith("es") else []) + ([w[:-3] + "y"] if w.endswith("ies") else [])
    return any(VERBS.get(b) == "o" for b in bases)


def predicate(rest) -> bool:
    if rest and rest[0][0] == "word" and rest[0][2] in OBJECTS:
        return False
    for j, (k, _, w) in enumerate(rest[:6]):
        if k != "word":
            continue
        if w in STOPS:
            return False
        if w in PREDICATES or is_s_form(w):
            return True
        nxt = rest[j + 1] if j + 1 < len(rest) else None
        content = nxt is not None and ((nxt[0] == "other" and re.search("[A-Za-z]", nxt[1]) is not None) or (
            nxt[0] == "word" and nxt[2] not in FUNCTION and nxt[2] not in SKIPPED and not nxt[2].endswith("ly")))
        if is_past(w) and not content:
            return True
    return False


def imperative(tokens, quoted) -> bool:
    if quoted and len(tokens) == 1:
        return False
    i, n = 0, len(tokens)
    tokens = list(tokens)
    while i < n:
        k, text, w = tokens[i]
        if k == "other" and re.fullmatch("[A-Za-z0-9]+", text) and re.search("[A-Za-z]", text) and re.search("[0-9]", text):
            k, w = "word", unleet(text.lower())
            tokens[i] = (k, text, w)
        if k == "symbol" or (k == "number" and i == 0):
            i += 1
            continue
        if k != "word":
            break
        if w in SKIPPED or (w.endswith("ly") and len(w) > 4 and w not in VERBS):
            i += 1
            continue
        if w not in VERBS and not english(w):
            i += 1
            continue
        phrase = next((p for p in PHRASES if all(i + x < n and tokens[i + x][0] == "word" and tokens[i + x][2] == y
                                                 for x, y in enumerate(p))), None)
        if phrase:
            i += len(phrase)
            continue
        if w == "to" and i + 1 < n and tokens[i + 1][0] == "word" and tokens[i + 1][2] in VERBS:
            i += 2
            if i < n and tokens[i][0] == "word":
                if tokens[i][2] in ("this", "it", "that", "these", "those"):
                    i += 1
                elif tokens[i][2] in ("the", "a", "an", "your", "my", "our") and i + 1 < n:
                    i += 2
            continue
        if w in LABELS and n - i <= 2 and all(t[0] == "number" for t in tokens[i + 1 :]):
            return False
        break
    if i >= n:
        return False
    if any([t[1] for t in tokens[i : i + len(name)]] == name for name in NAMES):
        return False
    k, text, w = tokens[i]
    if k == "other" and re.fullmatch(r"[Rr][Ee]-[A-Za-z]+", text):
        w = text[3:].lower()
    elif k != "word":
        return False
    if w in ("do", "don't", "dont", "let's"):
        return True
    if w not in VERBS:
        return False
    rest = tokens[i + 1 :]
    if rest and all(t[0] in ("number", "symbol") for t in rest):
        return False
    if rest and rest[0][0] == "word" and rest[0][2] == "of" and w not in WITH_OF:
        return False
    if PAST_OF.get(w, w) != w:
        return False
    if VERBS[w] == "n":
        if rest and rest[0][0] == "word" and rest[0][2] in OBJECTS:
            return True
        if rest and rest[0][0] in ("code", "target"):
            return not predicate(rest)
        for j in range(1, len(rest) - 1):
            x, nxt = rest[j], rest[j + 1]
            if x[0] == "word" and x[2] in ("to", "into", "onto", "with") and (
                    nxt[0] in ("code", "target") or (x[2] == "to" and nxt[0] == "word" and nxt[2] in VERBS)):
                return not predicate(rest)
        return False
    return not predicate(rest)


def english(w: str) -> bool:
    if w in ENGLISH or (w.endswith("'s") and w[:-2] in ENGLISH):
        return True
    if any(w.endswith(e) and len(w) - cut >= 2 and w[:-cut] + add in ENGLISH for e, cut, add in SUFFIXES):
        return True
    return any(w.endswith(e) and len(w) - len(e) - 1 >= 2 and w[-len(e) - 1] == w[-len(e) - 2]
               and w[: -len(e) - 1] in ENGLISH for e in ("ed", "ing", "er", "est"))


def observation_rule(text: str) -> str | None:
    """None for an observation, else the rule broken."""
    t = unicodedata.normalize("NFKC", UNASSIGNED.sub("\ufffd", text))
    t = "".join(c for c in t if ord(c) not in IGNORABLE)
    folded = "".join(c for c in unicodedata.normalize("NFD", t) if ord(c) not in MARKS)
    canonical = "".join('"' if c in QUOTES else CONFUSABLES.get(ord(c), c) for c in folded)
    lowered = " ".join("".join(" " if c in SPACE else c for c in canonical.replace("`", " ")).split(" "))
    lowered = " ".join(x for x in lowered.split(" ") if x).translate(ASCII_LOWER)
    forms = [lowered, re.sub(r"(?<=[a-z])-+(?=[a-z])", "", lowered), LOOK_ALIKE.sub(lambda m: unleet(m.group()), lowered)]
    if any(p.search(form) for p in ADDRESSED for form in forms):
        return "addressed-to-agent"
    if any(p.search(form) for p in OBLIGATIONS for form in forms) or \
            any(m.group(1) in VERBS for m in REPORTED.finditer(lowered)):
        return "obligation"
    for m in HABIT.finditer(lowered):
        subject, w = m.group(1), m.group(3)
        if subject in SINGULAR:
            if len(w) < 3 or not w.endswith("s") or w.endswith("ss"):
                continue
            base = next((b for b, ok in ((w[:-3] + "y", w.endswith("ies")), (w[:-1], True), (w[:-2], w.endswith("es")))
                         if ok and b in VERBS), None)
        else:
            base = w if w in VERBS else None
        if base and base not in UNDERGOING and w not in FUNCTION and w not in SKIPPED and w not in PREDICATES:
            return "obligation"
    if any(m.group(1) in PARTICIPLES for m in CONDITION.finditer(lowered)):
        return "obligation"
    if any(p.search(lowered) for p in MARKUP_LINKS):
        return "markup"
    if "<" in canonical:
        outside = " ".join(x for x in "".join(" " if c in SPACE else c for c in re.sub(
            r'`+[^`]*`+|"[^"]*"', " ", canonical).replace("`", " ")).split(" ") if x).translate(ASCII_LOWER)
        if any(p.search(outside) for p in TAGS):
            return "markup"
    if ENCODED.search(canonical):
        return "markup"
    clauses = clauses_of(canonical)
    for at, (tokens, quoted, asks) in enumerate(clauses):
        if asks:
            return "addressed-to-agent"
        if imperative(tokens, quoted):
            end = canonical.rstrip(" .\n")
            named = (at == 1 and len(clauses) == 2 and not quoted and len(tokens) == 1 and tokens[0][0] == "word"
                     and clauses[0][0] and not (clauses[0][0][0][0] == "word" and clauses[0][0][0][2] in LABELS)
                     and end.endswith(tokens[0][1]) and end[: -len(tokens[0][1])].rstrip(" ").endswith(":"))
            prefix = (at == 0 and len(clauses) >= 2 and not quoted and len(tokens) == 1 and tokens[0][0] == "word"
                      and tokens[0][1] == tokens[0][2] and canonical.lstrip(" ").startswith(tokens[0][1] + ":"))
            if not named and not prefix:
                return "imperative-opening"
    bare = re.sub(r"[^ \n]*/[^ \n]*", " ", CODE.sub(" ", spaced(folded)))
    if any(ord(c) in OTHER_SCRIPT for c in bare):
        return "other-script"
    counted = foreign = 0
    for tokens, _, _ in clauses:
        words = [(text, w) for k, text, w in tokens if k == "word"]
        for index, (text, w) in enumerate(words):
            if text == w or (index == 0 and text[0] != w[0] and text[1:] == w[1:]):
                counted += 1
                foreign += not english(w)
    if foreign >= 2 and 3 * foreign > counted:
        return "not-english"
    kinds = [k for tokens, _, _ in clauses for k, _, _ in tokens if k != "code"]
    if len(kinds) >= 6 and 2 * kinds.count("symbol") > len(kinds):
        return "not-english"
    return None


# --- content identity -----------------------------------------------------------------------


def normalise(text: str) -> str:
    t = unicodedata.normalize("NFKC", text)
    t = t.translate({0x2018: "'", 0x2019: "'", 0x201C: '"', 0x201D: '"'})
    t = unicodedata.normalize("NFKC", t.casefold())
    t = re.sub("[" + WHITE_SPACE + "]+", " ", t).strip(" ")
    while t.endswith(".") or t.endswith(" "):
        t = t[:-1]
    return t


def dedup_key(text: str, kind: str) -> str:
    data = b"openmemory/dedup/v1\x00" + kind.encode() + b"\x00" + normalise(text).encode()
    return hashlib.sha256(data).hexdigest()


# --- claims (PROTOCOL.md, "Claims") ------------------------------------------------------------

def numbered(name: str) -> list[str]:
    """A list of 'X1 pattern' lines, in order, without the labels."""
    return [line.split(" ", 1)[1] for line in protocol_list(name).splitlines() if line.strip()]


UNSAFE_PATTERNS = [re.compile(p, re.ASCII) for p in numbered("unsafe-commands")]
UNSAFE_CODES = re.findall(r"^\| U\d+ \| `([a-z-]+)` \|", PROTOCOL.read_text(encoding="utf-8"), re.M)
MARKER_PATTERNS = [re.compile(p, re.ASCII) for p in numbered("failure-markers")]
HOWS = {"changed": "; `{}` succeeded.", "instead": "; `{}` succeeded on the same target.",
        "after": "; the same call succeeded after `{}`.", "edited": "; the same call succeeded after an edit of `{}`.",
        "retried": "; the same call succeeded when tried again."}
TOOL = re.compile(r"(?:[A-Z][A-Za-z0-9_]{0,63}|mcp__[A-Za-z0-9_-]{1,120})")
HEAD_WORD = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._+:@=/-]{0,63}")
LATER_WORD = re.compile(r"[A-Za-z0-9._-][A-Za-z0-9._+:@=/-]{0,63}")  # a head's second and third words
NOT_IN_PARTS = {*range(0x00, 0x20), *range(0x7F, 0xA0), 0xAD, 0x61C, 0x180E, *range(0x200B, 0x2010),
                *range(0x2028, 0x202F), *range(0x2060, 0x2070), 0xFEFF, 0xFFF9, 0xFFFA, 0xFFFB, 0x60, 0x22}
PART_NAMES = ("situation", "path", "failure", "fix", "fix_how")


def render_claim(c: dict) -> str:
    s = c["situation"]
    if TOOL.fullmatch(s):
        label = f"`{s}`"
    else:
        heads = [f"`{h}`" for h in s.split(" && ")]
        label = heads[0] if len(heads) == 1 else ", ".join(heads[:-1]) + " and " + heads[-1]
    if c.get("path") is not None:
        label += f" on `{c['path']}`"
    tail = "." if c.get("fix_how") is None else HOWS[c["fix_how"]].format(c.get("fix"))
    return f'{label} failed: "{c["failure"]}"{tail}'


def parse_claim(text: str) -> dict | None:
    """The parts some claim renders to ``text`` with, or None (tried against every form)."""
    m = re.fullmatch(r'((?:`[^`]+`)(?:(?:, `[^`]+`)* and `[^`]+`)?)(?: on `([^`]+)`)? failed: "([^"]+)"(.*)', text, re.S)
    if m is None:
        return None
    names = re.findall(r"`([^`]+)`", m.group(1))
    parts = {"situation": names[0] if len(names) == 1 and TOOL.fullmatch(names[0]) else " && ".join(names)}
    if m.group(2) is not None:
        parts["path"] = m.group(2)
    parts["failure"] = m.group(3)
    tail = m.group(4)
    if tail != ".":
        for how, form in HOWS.items():
            if "{}" in form:
                before, after = form.split("{}")
                if tail.startswith(before) and tail.endswith(after) and len(tail) > len(before) + len(after):
                    fix = tail[len(before):len(tail) - len(after)]
                    if "`" not in fix:
                        parts.update(fix=fix, fix_how=how)
                        break
            elif tail == form:
                parts["fix_how"] = how
                break
        else:
            return None
    return parts if render_claim(parts) == text else None


def part_line(value: str, lo: int, hi: int) -> bool:
    return (lo <= len(value.encode()) <= hi and not any(ord(ch) in NOT_IN_PARTS for ch in value)
            and value.strip(" ") == value and "  " not in value and not any(ch.isspace() and ch != " " for ch in value))


def fold(text: str) -> str:
    return unicodedata.normalize("NFKC", text).translate(ASCII_LOWER)


def command_form(text: str) -> str:
    t = fold(text).replace('"', "").replace("'", "")
    t = re.sub(r"\s*(\|\||&&|\||;|&|\(|\))\s*", r" \1 ", t)
    return " ".join(t.split())


def unsafe_row(text: str) -> int | None:
    form = command_form(text)
    return next((i for i, p in enumerate(UNSAFE_PATTERNS, 1) if p.search(form)), None)


def marker_row(failure: str) -> int | None:
    folded = fold(failure)
    return next((i for i, p in enumerate(MARKER_PATTERNS, 1) if p.search(folded)), None)


def relative_path(v: str) -> bool:
    return part_line(v, 1, 200) and " " not in v and v[0] not in "/~$\\" and not re.match(r"[A-Za-z]:\\", v)


def claim_error(c: dict) -> tuple[str, str] | None:
    """(code, part) of the first rule the claim breaks (PROTOCOL.md's order), or None."""
    s = c["situation"]
    if not part_line(s, 1, 200):
        return "claim", "situation"
    if not TOOL.fullmatch(s):
        heads = s.split(" && ")
        if len(heads) > 3 or not all(1 <= len(h.split(" ")) <= 3 and HEAD_WORD.fullmatch(h.split(" ")[0])
                                     and all(LATER_WORD.fullmatch(w) for w in h.split(" ")[1:]) for h in heads):
            return "claim", "situation"
    if c.get("path") is not None and not relative_path(c["path"]):
        return "claim", "path"
    f = c["failure"]
    if not part_line(f, 2, 300) or not any(unicodedata.category(ch)[0] == "L" for ch in f):
        return "claim", "failure"
    how, fix = c.get("fix_how"), c.get("fix")
    if how is None:
        if fix is not None:
            return "claim", "fix_how"
    elif how not in HOWS:
        return "claim", "fix_how"
    elif (how == "retried") != (fix is None):
        return "claim", "fix"
    elif fix is not None and (not part_line(fix, 1, 200) or (how == "edited" and not relative_path(fix))):
        return "claim", "fix"
    if len(render_claim(c).encode()) > 512:
        return "claim", "failure"
    if marker_row(f) is not None:
        return "claim", "failure"
    for name in ("fix", "failure", "situation", "path"):
        if c.get(name) is not None and unsafe_row(c[name]) is not None:
            return "unsafe", name
    return None


PLACEHOLDER = re.compile(r"<[a-z][a-z_-]{0,15}>|\{[a-z]{1,10}\}")
OPERATORS = {"|", "||", "&&", ";", "&", "(", ")"}


def text_key(t: str) -> str:
    t = PLACEHOLDER.sub(" <> ", unicodedata.normalize("NFKC", t).casefold())
    tokens = re.findall(r"<>|[^\W_]+", t)
    return " ".join("<>" if tok.isdigit() else tok for tok in tokens)


def command_key(c: str) -> str:
    words = PLACEHOLDER.sub("<>", command_form(c)).split(" ")
    segments, current = [], []
    for w in words + [None]:
        if w is None or w in OPERATORS:
            if current:
                segments.append(" ".join(current[:1] + sorted(set(current[1:]))))
            current = []
            if w is not None:
                segments.append(w)
        elif w:
            current.append(w)
    return " ".join(segments)


def claim_key(c: dict) -> str:
    s = c["situation"]
    situation = s if TOOL.fullmatch(s) else " && ".join(command_key(h) for h in s.split(" && "))
    fix = c.get("fix") or ""
    return "\x00".join(["error", situation, text_key(c.get("path") or ""), text_key(c["failure"]),
                        c.get("fix_how") or "", text_key(fix) if c.get("fix_how") == "edited" else command_key(fix)])


def dedup_key_v2(c: dict) -> str:
    return hashlib.sha256(b"openmemory/dedup/v2\x00" + claim_key(c).encode()).hexdigest()


# --- records --------------------------------------------------------------------------------

MAX_RECORD = 2048
U53 = 2**53 - 1
EPOCH = 1_735_689_600  # the protocol epoch, 2025-01-01T00:00:00Z: the earliest created
REASON_CODES = {"incorrect", "harmful", "instruction", "private", "spam", "withdrawn", "other"}


def uint(v, lo, hi):
    return type(v) is int and lo <= v <= hi


def is_id(v):
    return type(v) is bytes and len(v) == 34 and v[:2] == b"\x12\x20"


def good_text(v, lo, hi):
    if type(v) is not str or not lo <= len(v.encode()) <= hi:
        return False
    if any(low <= ord(c) <= high for c in v for low, high in FORBIDDEN) or UNASSIGNED.search(v):
        return False
    return not (lo and all(c in WHITE_SPACE for c in v))


def ascending_ids(v):
    return type(v) is list and len(v) <= 16 and all(map(is_id, v)) and all(a < b for a, b in zip(v, v[1:]))


def evidence_ok(v):
    return (
        type(v) is dict and set(v) == {"sessions", "matched", "window"}
        and uint(v["sessions"], 0, 10**6) and uint(v["matched"], 0, v["sessions"])
        and uint(v["window"], 1, 31_622_400)
    )


FIELDS = {
    "lesson": {
        "text": lambda v: good_text(v, 1, 512),
        "kind": lambda v: type(v) is str and re.fullmatch(r"[a-z][a-z0-9-]{0,23}", v) is not None,
        "strength": lambda v: uint(v, 0, 10**6),
        "provenance": lambda v: type(v) is bytes and len(v) == 32,
        "derived_from": ascending_ids,
    },
    "attestation": {
        "lesson_id": is_id,
        "verdict": lambda v: v in ("confirmed", "failed") and type(v) is str,
        "met_before": lambda v: type(v) is bool,
        "evidence": evidence_ok,
    },
    "revocation": {
        "target": is_id,
        "reason_code": lambda v: type(v) is str and v in REASON_CODES,
        "reason": lambda v: good_text(v, 0, 280),
    },
    "vouch": {"subject": lambda v: type(v) is bytes and len(v) == 32},
}
PART_VERDICTS = ("confirmed", "failed", "untested")


def claim_map_ok(v):
    return (type(v) is dict and set(v) <= set(PART_NAMES) and {"situation", "failure"} <= set(v)
            and all(good_text(x, 0, 512) for x in v.values()))


FIELDS_V2 = {
    "lesson": {
        "text": FIELDS["lesson"]["text"],
        "kind": lambda v: v == "error" and type(v) is str,
        "claim": claim_map_ok,
        "strength": FIELDS["lesson"]["strength"],
        "provenance": FIELDS["lesson"]["provenance"],
        "derived_from": ascending_ids,
    },
    "attestation": {
        "lesson_id": is_id,
        "failure": lambda v: type(v) is str and v in PART_VERDICTS,
        "fix": lambda v: type(v) is str and v in PART_VERDICTS,
        "exposed": lambda v: type(v) is bool,
        "met_before": lambda v: type(v) is bool,
        "evidence": evidence_ok,
    },
}
COMMON = {
    "signer": lambda v: type(v) is bytes and len(v) == 32,
    "created": lambda v: uint(v, EPOCH, U53),
    "signature": lambda v: type(v) is bytes and len(v) == 64,
}


def plain(value, depth=0):
    """Only ints, bytes, text, bools, lists and maps, nesting at most 2 (PROTOCOL.md, Encoding)."""
    if type(value) in (int, bytes, str, bool):
        return True
    if type(value) in (list, dict) and depth < 2:
        items = list(value.items()) if type(value) is dict else [(None, x) for x in value]
        return all((k is None or plain(k, depth + 1)) and plain(x, depth + 1) for k, x in items)
    return False


def validate(data: bytes, now: int, max_skew: int, expect_id: str | None = None) -> dict:
    if not 0 < len(data) <= MAX_RECORD:
        raise Invalid("size", f"{len(data)} bytes")
    try:
        m = cbor2.loads(data)
    except Exception as exc:  # any decoding failure
        raise Invalid("encoding", str(exc)) from None
    if not plain(m) or cbor2.dumps(m, canonical=True) != data:
        raise Invalid("encoding", "not the deterministic encoding of the v1 data model")
    if type(m) is not dict or type(m.get("version")) is not int:
        raise Invalid("schema", "no map, or no integer version")
    version = m["version"]
    if version not in (1, 2):
        raise Invalid("version", str(version))
    if type(m.get("type")) is not str:
        raise Invalid("schema", "type")
    if m["type"] not in FIELDS:
        raise Invalid("type", m["type"])
    if version == 2 and m["type"] not in FIELDS_V2:
        raise Invalid("version", f"no version 2 {m['type']}")
    table = {**(FIELDS if version == 1 else FIELDS_V2)[m["type"]], **COMMON}
    if set(m) != set(table) | {"version", "type"}:
        raise Invalid("schema", "field set")
    for name, check in table.items():
        if not check(m[name]):
            raise Invalid("schema", name)
    if m["type"] == "attestation" and version == 1 and m["verdict"] == "confirmed" and m["evidence"]["matched"] < 1:
        raise Invalid("schema", "confirmed without a match")
    if m["type"] == "attestation" and version == 2:
        parts = (m["failure"], m["fix"])
        if parts == ("untested", "untested") or (m["fix"] == "confirmed" and m["failure"] != "confirmed") or (
                "confirmed" in parts and m["evidence"]["matched"] < 1):
            raise Invalid("schema", "the parts' cross-field rules")
    if m["type"] == "vouch" and m["subject"] == m["signer"]:
        raise Invalid("schema", "self vouch")
    record_id = "1220" + hashlib.sha256(data).hexdigest()
    if expect_id is not None and expect_id != record_id:
        raise Invalid("id", record_id)
    if m["created"] > now + max_skew:
        raise Invalid("clock-skew", str(m["created"] - now))
    if version == 2 and m["type"] == "lesson":
        broken = claim_error(m["claim"])
        if broken is not None:
            raise Invalid(broken[0], broken[1])
        if render_claim(m["claim"]) != m["text"]:
            raise Invalid("claim", "the text is not the rendering of the claim")
    else:
        text = m.get("text") if m["type"] == "lesson" else m.get("reason") if m["type"] == "revocation" else ""
        if text and observation_rule(text):
            raise Invalid("observation", text)
    body = {k: v for k, v in m.items() if k != "signature"}
    message = f"openmemory/{m['type']}/v{version}\x00".encode() + cbor2.dumps(body, canonical=True)
    try:
        crypto_sign_open(m["signature"] + message, m["signer"])  # libsodium: strict RFC 8032
    except (BadSignatureError, NaclValueError):
        raise Invalid("signature", "does not verify") from None
    return {"id": record_id, "map": m, "message": message}


def to_json(m: dict, record_id: str) -> dict:
    out = {"id": record_id}
    for k, v in m.items():
        out[k] = v.hex() if type(v) is bytes else [x.hex() for x in v] if k == "derived_from" else v
    return out


# --- run ------------------------------------------------------------------------------------


def main() -> int:
    failures: list[str] = []
    counts = {}

    def load(name):
        return json.loads((SPEC / "vectors" / name).read_text(encoding="utf-8"))

    valid = load("valid.json")
    for v in valid["vectors"]:
        try:
            r = validate(bytes.fromhex(v["cbor"]), valid["now"], valid["max_skew"])
        except Invalid as exc:
            failures.append(f"valid/{v['name']}: rejected ({exc})")
            continue
        checks = {
            "id": r["id"] == v["id"],
            "signing_message": r["message"].hex() == v["signing_message"],
            "signature": r["map"]["signature"].hex() == v["signature"],
            "public_key": r["map"]["signer"].hex() == v["public_key"],
            "json": json.dumps(to_json(r["map"], r["id"]), sort_keys=True) == json.dumps(v["record"], sort_keys=True),
            "dedup_key": r["map"]["type"] != "lesson" or (
                dedup_key_v2(r["map"]["claim"]) if r["map"]["version"] == 2
                else dedup_key(r["map"]["text"], r["map"]["kind"])) == v["dedup_key"],
        }
        failures += [f"valid/{v['name']}: {k} differs" for k, ok in checks.items() if not ok]
    counts["valid"] = len(valid["vectors"])

    invalid = load("invalid.json")
    for v in invalid["vectors"]:
        try:
            validate(bytes.fromhex(v["cbor"]), invalid["now"], invalid["max_skew"], v.get("expect_id"))
            failures.append(f"invalid/{v['name']}: accepted")
        except Invalid as exc:
            if exc.code != v["error"]:
                failures.append(f"invalid/{v['name']}: {exc.code} instead of {v['error']} ({exc})")
    counts["invalid"] = len(invalid["vectors"])

    for v in load("dedup.json")["vectors"]:
        if normalise(v["text"]) != v["normalised"] or dedup_key(v["text"], v["kind"]) != v["dedup_key"]:
            failures.append(f"dedup: {v['text']!r}")
    counts["dedup"] = len(load("dedup.json")["vectors"])

    observation = load("observation.json")
    if [p.pattern for p in ADDRESSED] != observation["addressed_patterns"] or \
            [p.pattern for p in OBLIGATIONS] != observation["obligation_patterns"]:
        failures.append("observation: PROTOCOL.md's lists differ from the vectors' lists")
    for name, digest in observation["tables"].items():
        if hashlib.sha256((TABLES / name).read_bytes()).hexdigest() != digest:
            failures.append(f"observation: the table {name} differs from the one the vectors were made with")
    for v in observation["vectors"]:
        rule = observation_rule(v["text"])
        if (rule is None) != v["observation"] or (rule is not None and rule != v["rule"]):
            failures.append(f"observation: {v['text']!r}: got {rule}")
    counts["observation"] = len(observation["vectors"])

    cv = load("claims.json")
    if [p.pattern for p in UNSAFE_PATTERNS] != [r["pattern"] for r in cv["unsafe_commands"]] or \
            UNSAFE_CODES != [r["code"] for r in cv["unsafe_commands"]] or \
            [p.pattern for p in MARKER_PATTERNS] != [r["pattern"] for r in cv["failure_markers"]]:
        failures.append("claims: PROTOCOL.md's tables differ from the vectors' tables")
    for v in cv["render"]:
        if render_claim(v["parts"]) != v["text"]:
            failures.append(f"claims/render: {v['text']!r}")
    for v in cv["parse"]:
        if parse_claim(v["text"]) != v["parts"]:
            failures.append(f"claims/parse: {v['text']!r}: got {parse_claim(v['text'])}")
    for v in cv["shapes"]:
        got = claim_error(v["parts"])
        want = None if v["error"] is None else (v["error"]["code"], v["error"]["part"])
        if got != want:
            failures.append(f"claims/shapes: {v['parts']}: got {got}, want {want}")
    for v in cv["unsafe"]:
        row = unsafe_row(v["command"])
        code = UNSAFE_CODES[row - 1] if row else None
        if command_form(v["command"]) != v["form"] or row != v["row"] or code != v["code"]:
            failures.append(f"claims/unsafe: {v['command']!r}: got row {row}")
    for v in cv["markers"]:
        row = marker_row(v["failure"])
        if (row is None) != (v["marker"] is None):
            failures.append(f"claims/markers: {v['failure']!r}: got row {row}")
    for v in cv["same"]:
        ka, kb = claim_key(v["a"]), claim_key(v["b"])
        if (ka, kb, ka == kb, dedup_key_v2(v["a"]), dedup_key_v2(v["b"])) != (
                v["claim_key_a"], v["claim_key_b"], v["same"], v["dedup_key_a"], v["dedup_key_b"]):
            failures.append(f"claims/same: {v['a']} / {v['b']}")
    counts["claims"] = sum(len(cv[k]) for k in ("render", "parse", "shapes", "unsafe", "markers", "same"))

    for line in failures:
        print("FAIL", line)
    total = sum(counts.values())
    print(f"{total - len(failures)} passed, {len(failures)} failed  ({', '.join(f'{k} {n}' for k, n in counts.items())})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
