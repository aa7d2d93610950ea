"""Is this message of the person's a correction of what the agent just did?

A correction refers to the agent's last action or statement and says it was wrong, unwanted or
did not work. The opening word alone does not tell: "Actually, can you also add a test?" is a
new request, "No Python bindings needed" answers a question, "Wait for the build" is an
instruction, while "scrolling still does not work" is a correction with no correction word at
its start. :func:`correction_cue` reads the message with what the agent did just before (its
last statement, its recent tool calls) and returns the *cue* that makes it a correction, or
None:

===============  ==================================================================
cue              when
===============  ==================================================================
``rejected``     feedback the person gave when rejecting a tool call (always)
``restated``     "that's not what I asked", "I said ...", "I told you ...", "I asked you to"
``why``          "why did you ...", "why are you ...", "who told you to ..."
``omitted``      "you forgot / didn't / missed / broke / ignored ..."
``still``        a complaint that it still (or again) does not work, the same error, nothing
                 changed, "that broke ...", after the agent acted
``reminder``     "did you push?" when the agent's recent calls show no such step
``undo``         "undo / revert / roll back ..." opening the message, after the agent acted
``wrong``        "wrong ...", "that's wrong", "incorrect", "not that"
``stop``         "stop," / "stop doing ..." (an interjection, not "stop the server later")
``wait``         "wait, ..." / "hold on" (an interjection, not "wait for the build")
``no``           "no, ..." / "nope" as an interjection, unless the agent had just asked a
                 question (then it is an answer)
``dont``         "don't / never / do not ..." naming something the agent just did
``actually``     "actually ..." / "instead ..." stating a fact or an alternative, not
                 asking for more ("actually, can you also ...")
===============  ==================================================================

No agent action or statement before it (the session's first message): never a correction.
``benchmarks/corrections.py`` prints precision and recall on ``benchmarks/data/corrections.json``
(the real person messages of ``../shared/data`` that follow an agent action, and hard cases
written for the set, marked synthetic). Corrections feed the repeat-yourself measure:
precision comes first.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Iterable

__all__ = ["correction_cue", "CUES"]

CUES = ("rejected", "restated", "why", "omitted", "still", "reminder", "undo", "wrong", "stop", "wait", "no",
        "dont", "actually")

_FILLER = re.compile(r"^(?:(?:ok(?:ay)?|hmm+|uh+|um+|oh|well|so|hey|erm)\b[\s,.!]*)+")
_LEADING = re.compile(r"^[\s\"'`*_>#~\-\u2022(\[]+")
_RESTATED = re.compile(r"\b(?:that'?s not what i|that is not what i|not what i (?:asked|wanted|meant|said)|"
                       r"i (?:already )?(?:said|told you)|i asked (?:you )?(?:to|for|not)|as i said)\b")
_WHY = re.compile(r"^(?:but )?(?:why (?:did|are|would|do|have) you|who told you to|what are you doing)\b")
_OMITTED = re.compile(r"\byou (?:forgot|didn'?t|did not|missed|broke|deleted|removed|ignored|skipped|never|"
                      r"haven'?t|have not|still haven'?t|overwrote|reverted)\b")
_STILL = re.compile(
    r"\b(?:still|again)\b.{0,40}\b(?:not|n't|fail\w*|broken|wrong|same|error\w*|crash\w*|happen\w*|there|no|blank|"
    r"empty|missing|red|grey|gray|slow|stuck|hangs?|hanging)\b"
    r"|\b(?:still|again) (?:fail\w*|broken|crash\w*|the same)\b"
    r"|\b(?:doesn'?t|does not|didn'?t|did not|isn'?t|is not) (?:seem to )?(?:work|help|fix|change)\w*"
    r"|\bnot working\b|\bsame (?:error|problem|issue|failure|result|thing)\b|\bnothing (?:changed|happens|happened)\b"
    r"|^(?:that|this|it|you) (?:broke|made it worse)\b")
_DID_YOU = re.compile(r"^did you (?:\w+ )?(\w+)(?: (\w+))?")
_UNDO = re.compile(r"^(?:please )?(?:undo|revert|roll ?back|put (?:it|that) back)\b(?! is\b)")
_WRONG = re.compile(r"^(?:wrong\b(?! answers?\b)|that'?s (?:wrong|incorrect|not right)|this is (?:wrong|incorrect)|"
                    r"incorrect\b|not that\b|not this (?:one|file|way)\b|nope\b)")
_STOP = re.compile(r"^(?:please )?stop(?:[\s,.!;:\-\u2014]*$|\s*[,.!;:\-\u2014]|\s+(?:it|that|this|doing|using|running|"
                   r"editing|changing|touching|now|right)\b)")
_WAIT = re.compile(r"^(?:wait|hold on|hang on)(?:[\s,.!;:\-\u2014]|$)(?!\s*(?:for|until|till)\b)")
_NO = re.compile(r"^(?:no+|nah)(?:\s*[,.!;:\-\u2014]|\s*$|\s+no\b)")
_DONT = re.compile(r"^(?:please )?(?:don'?t|do not|never)\s+(?!worry|forget|bother\b)(.*)")
_ACTUALLY = re.compile(r"^(?:actually|instead)\b[\s,]*(.*)")
_REQUEST = re.compile(r"^(?:(?:can|could|would|will) you|also|let'?s|please (?:also )?add|and\b|how about|maybe also|"
                      r"add\b|what about)")
_QUESTION_TO_PERSON = re.compile(r"\?\s*$|\b(?:should i|do you want|would you like|want me to|shall i|let me know)\b",
                                 re.IGNORECASE)
_WORD = re.compile(r"[a-z][\w.+-]*")
_FIXED = {"push": "push", "pushed": "push", "commit": "commit", "committed": "commit", "test": "test",
          "tests": "test", "run": None, "tested": "test", "build": "build", "lint": "lint", "format": "format",
          "formatted": "format", "deploy": "deploy", "deployed": "deploy", "merge": "merge", "merged": "merge",
          "install": "install", "installed": "install", "rebase": "rebase", "check": None, "save": None}


def _norm(text: str) -> str:
    text = unicodedata.normalize("NFKC", text[:600]).replace("\u2019", "'").replace("\u2018", "'")
    text = _LEADING.sub("", text.strip().lower())
    return _FILLER.sub("", text)


def _action_words(actions: Iterable[dict]) -> set[str]:
    """The words of what the agent did: programs and subcommands, tools, file names."""
    words: set[str] = set()
    for action in actions:
        words.add((action.get("tool") or "").lower())
        for head in action.get("heads") or []:
            words.update(head.lower().split())
        command = (action.get("command") or "").lower()
        for token in re.findall(r"[\w.+-]+", command[:300]):
            if len(token) > 2:
                words.add(token)
                words.add(token.rsplit("/", 1)[-1].split(".")[0])
    words.discard("")
    return words


def _names_action(rest: str, actions: list[dict]) -> bool:
    mine = _action_words(actions)
    said = set(_WORD.findall(rest))
    said |= {w.rstrip("s") for w in said} | {w[:-3] for w in said if w.endswith("ing") and len(w) > 5}
    return bool(said & mine)


def _reminder(norm: str, actions: list[dict]) -> bool:
    """"did you push?": a question about a step none of the agent's recent calls shows."""
    if not norm.rstrip().endswith("?"):
        return False
    match = _DID_YOU.match(norm)
    if not match:
        return False
    asked = [_FIXED.get(w, w) for w in match.groups() if w]
    asked = [w for w in asked if w and w not in ("the", "it", "that", "a", "all", "them")]
    if not asked:
        return False
    done = _action_words(actions)
    done |= {w.rstrip("s") for w in done}
    return not any(w in done or w.rstrip("s") in done for w in asked)


def correction_cue(text: str, *, via: str = "message", agent_said: str | None = None,
                   actions: Iterable[dict] = (), first: bool = False) -> str | None:
    """The cue that makes ``text`` a correction of the agent's last action (see the module doc).

    ``agent_said``: what the agent said just before; ``actions``: its recent tool calls, oldest
    first, each ``{"tool", "heads", "command"}``; ``first``: nothing of the agent's came before.
    """
    if via == "rejection":
        return "rejected"
    actions = list(actions)
    if first or (not actions and not agent_said):
        return None
    norm = _norm(text)
    if not norm:
        return None
    acted = bool(actions)
    asked_person = bool(agent_said and _QUESTION_TO_PERSON.search(agent_said.strip()[-300:]))
    if _RESTATED.search(norm[:200]):
        return "restated"
    if _WHY.match(norm):
        return "why"
    if _OMITTED.search(norm[:200]):
        return "omitted"
    if acted and _STILL.search(norm[:300]):
        return "still"
    if norm.startswith("did you"):
        return "reminder" if _reminder(norm, actions[-20:]) else None
    if acted and _UNDO.match(norm):
        return "undo"
    if _WRONG.match(norm):
        return "wrong"
    if _WAIT.match(norm):
        return "wait"
    dont = _DONT.match(norm)
    if dont:
        return "dont" if acted and _names_action(dont.group(1), actions[-8:]) else None
    if _STOP.match(norm):
        return "stop"
    if _NO.match(norm):
        rest = _NO.sub("", norm, count=1).strip(" ,.!-")
        if asked_person or rest.startswith(("problem", "rush", "worries", "thanks", "need", "that's all", "that is all")):
            return None
        return "no"
    actually = _ACTUALLY.match(norm)
    if actually:
        rest = actually.group(1)
        if not rest or _REQUEST.match(rest) or rest.rstrip().endswith("?"):
            return None
        return "actually"
    return None
