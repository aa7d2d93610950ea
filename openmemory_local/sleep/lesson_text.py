"""Lesson and prediction texts: observations, never instructions.

Every text made here passes :func:`openmemory_protocol.observation.check_observation` (safety
rule 1; the same check the commons runs): a text that would fail it is never stored.

Deterministic texts (the default), built from a lesson's episodes (its ``details``, see
:mod:`openmemory_local.sleep.passes`):

* a failed command: ```git push` failed in 3 sessions, on branches a, b and c: "fatal:
  The current branch c has no upstream branch."`` (the most common failure message, by
  sessions, quoted as it was; ``(and 2 other messages)`` when the lesson gathers several);
* a rejection: ```mix phx.server` was rejected by the person in 2 sessions.``;
* a correction: ``The person corrected the agent after it ran `pip install`: "no, this project
  uses uv".``

Quoted material is data: a quoted failure or correction may itself instruct ("Please use offset
and limit ...", "use uv instead"), which the check refuses wherever it stands (an instruction in
quotes is still one). Quotes are therefore tried in steps: the whole quote (clipped), its first
sentence, its first clause, and no quote at all; the first text that passes the check is kept. A
last fixed phrasing always passes. (Rendering escapes the text too: see render.py.)

Optionally a local model rephrases active lessons (:func:`rephrase`): set
``Config.lesson_model_url`` (``$OPENMEMORY_LESSON_MODEL_URL``) to an OpenAI-compatible
endpoint (``http://127.0.0.1:8080/v1``; ``/chat/completions`` is appended). Its answer is
used only if it is one sentence of 20 to 300 characters, passes the observation check (the
same hardened rule) and shares at least two content words with the deterministic text;
otherwise (an error, a timeout, garbage, an instruction) the deterministic text stays. An
answer the observation rule refuses is counted (``refused``) and recorded as a
``model_refused`` event, which the morning report lists. The model runs after the sleep's
transaction has committed, so a slow model never holds the store's write lock.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import Iterable, Iterator

from openmemory_local.core.clock import iso
from openmemory_local.text.embed import STOP_WORDS, _raw_tokens
from openmemory_local.core.jsonio import loads
from openmemory_local.text.normalize import family_label
from openmemory_local.text.redact import PLACEHOLDERS
from openmemory_protocol.observation import ObservationViolation, is_observation, observation_violation

__all__ = [
    "lesson_text",
    "resolution_clause",
    "prediction_text",
    "quote_steps",
    "safe_text",
    "ask_model",
    "accept_model_text",
    "model_refusal",
    "rephrase",
    "clip",
]

_QUOTE_MAX = 200
#: A quote is cut at most this many times (at the ends of its sentences and clauses) on its way
#: to a form that passes the observation rule.
_QUOTE_CUTS = 6
_CUT = re.compile(r"[.!?;:,](?=\s|$)|\n")


def clip(text: str, n: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1].rstrip() + "\u2026"


#: Where markup starts in a quote (an HTML comment or its end, a role token, a tag): never quoted.
#: The commons form's placeholders (``<branch>``, :data:`openmemory_local.text.redact.PLACEHOLDERS`)
#: stand for what was scrubbed, not for markup: they are kept.
_MARKUP_START = re.compile(
    r"<!--|-->|<\|[^|<>]{0,40}\|>|"
    r"</?(?!(?:" + "|".join(p.strip("<>") for p in PLACEHOLDERS) + r")>)[A-Za-z][A-Za-z0-9:_-]*(?:\s[^<>]*)?/?>")


def quote_steps(text: str) -> list[str]:
    """The quote, then shorter and shorter safe forms of it, then nothing. A quote is cut before
    any markup it holds (``<!-- openmemory:end -->`` in a command's output, a tag, a role token):
    what follows markup in a transcript is never quoted."""
    return list(_quote_steps(text))


def _quote_steps(text: str) -> Iterator[str]:
    """:func:`quote_steps` one at a time, each made when it is asked for (the first text that passes
    the check ends the search: the shorter forms are then not made)."""
    text = " ".join((text or "").replace('"', "'").split())
    markup = _MARKUP_START.search(text)
    if markup is not None:
        text = text[: markup.start()].rstrip()
    given = set()
    if text:
        given.add(step := clip(text, _QUOTE_MAX))
        yield step
        # then cut at each end of a sentence or clause, the longest first: "go: -race requires
        # cgo; enable cgo by setting CGO_ENABLED=1" is next "go: -race requires cgo", then "go"
        cuts = sorted({m.start() for m in _CUT.finditer(text, 0, _QUOTE_MAX + 1) if 0 < m.start() < len(text) - 1},
                      reverse=True)
        for cut in cuts[:_QUOTE_CUTS]:
            if (step := clip(text[:cut], _QUOTE_MAX)) and step not in given:
                given.add(step)
                yield step
    if "" not in given:
        yield ""


def safe_text(candidates: Iterable[str], fallback: str) -> str:
    """The first candidate that is an observation, else ``fallback`` (which must be one). The
    candidates may be made as they are asked for (a generator): the later ones are then not made."""
    for text in candidates:
        if text and is_observation(text):
            return text
    if not is_observation(fallback):  # pragma: no cover - the fallbacks are fixed, safe texts
        raise AssertionError(f"fallback text is not an observation: {fallback!r}")
    return fallback


def _and(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _list(items: list[str], limit: int = 3) -> str:
    shown = items[:limit]
    more = len(items) - len(shown)
    if more > 0:
        return ", ".join(shown) + f" and {more} more"
    return _and(shown)


_EDIT_TOOLS = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
_FILE_TOOLS = _EDIT_TOOLS | {"Read", "NotebookRead", "LS", "Glob", "Grep"}


def _label(subject: dict, joiner: str = "and", tools: dict | None = None) -> str:
    """What the group's failures share: its programs (`git commit`), its tool, or the kind of
    tool its several tools are (file edits: `Edit`, `Write` and `MultiEdit`)."""
    heads = subject.get("heads") or []
    if heads:
        items = [f"`{h}`" for h in heads[:3]]
        return _and(items) if joiner == "and" else " or ".join(items)
    names = list(tools or {})
    if len(names) > 1:
        shown = _and([f"`{t}`" for t in names[:4]])
        if all(t in _EDIT_TOOLS for t in names):
            return f"file edits ({shown})"
        if all(t in _FILE_TOOLS for t in names):
            return f"file tools ({shown})"
        return f"tool calls ({shown})"
    tool = subject.get("tool") or "a tool"
    if tool.startswith("hook:"):
        return f"the {tool[5:]} hook"
    return f"`{tool}`"


def _upper(text: str) -> str:
    return text[:1].upper() + text[1:] if text[:1].isalpha() else text


def resolution_clause(details: dict) -> str:
    """``each time, `git push --set-upstream origin <branch>` succeeded right after`` (or "in 2 of
    3 sessions, ..."), from ``details["resolutions"]``; empty when no resolution was seen."""
    found = details.get("resolutions") or []
    if not found:
        return ""
    top = found[0]
    n = int(details.get("sessions") or 1)
    k = min(int(top.get("sessions") or 1), n)
    how_often = "each time" if k >= n and n > 1 else ("that time" if n == 1 else f"in {k} of {n} sessions")
    from openmemory_local.ingest.resolutions import phrase

    said = phrase({"kind": top["kind"], "command": top.get("command") or "", "after": top.get("after") or [],
                   "went_away": top.get("went_away"), "calls_after": 0 if top.get("right_after") else 1})
    return f"{how_often}, {said}"


def _sessions(n: int) -> str:
    return f"in {n} session{'s' if n != 1 else ''}"


def lesson_text(details: dict, lesson_id: int) -> str:
    """The deterministic observation of a lesson (see the module docstring)."""
    if details.get("kind") == "correction":
        return _correction_text(details, lesson_id)
    subject = details.get("subject") or {}
    label = _upper(_label(subject, tools=details.get("tools")))
    n = int(details.get("sessions") or 1)
    context = ""
    branches = [b for b in details.get("branches") or [] if b]
    paths = [p for p in details.get("paths") or [] if p]
    if len(branches) > 1:
        context = f", on branches {_list(branches)}"
    elif paths and not subject.get("heads"):
        context = f", on {_list(paths)}"
    messages = details.get("messages") or []
    failure = details.get("failure")
    if failure in ("rejected", "interrupted"):
        verb = "was rejected by the person" if failure == "rejected" else "was interrupted by the person"
        candidates = [f"{label} {verb} {_sessions(n)}{context}."]
    else:
        others = len(messages) - 1
        tail = f" (and {others} other message{'s' if others != 1 else ''})" if others > 0 else ""
        head = f"{label} failed {_sessions(n)}{context}"
        message = messages[0]["text"] if messages else ""
        fixed = resolution_clause(details)
        ends = [f"; {fixed}.", ""] if fixed else [""]
        candidates = _failure_candidates(head, tail, ends, message, subject, details, n)
    return safe_text(candidates, f"A failed tool call recurred {_sessions(n)} (lesson {lesson_id}).")


def _failure_candidates(head: str, tail: str, ends: list[str], message: str, subject: dict, details: dict,
                        n: int) -> Iterator[str]:
    """A failure's texts, longest first: each end (with the resolution, then without) with each step
    of the quote, then the fixed phrasing; made one at a time, as :func:`safe_text` asks for them."""
    made: list[str] = []  # the quote's steps, made for the first end (the next ends come after all of them)
    for number, end in enumerate(ends):
        for q in (_quote_steps(message) if number == 0 else made):
            if number == 0:
                made.append(q)
            yield f'{head}: "{q}"{tail}{end}' if q else f"{head}{tail}{end or '.'}"
    yield f"A failure of {_label(subject, tools=details.get('tools'))} recurred {_sessions(n)}."


def _correction_text(details: dict, lesson_id: int) -> str:
    # The person's words are quoted only when they pass the observation rule: "use uv instead" is an
    # instruction in quotes (a reported instruction), so that lesson says only what the agent did.
    n = int(details.get("sessions") or 1)
    where = f" {_sessions(n)}" if n > 1 else ""
    action = details.get("action_label")
    after = f" after it ran {action}" if action else ""
    candidates = [
        f'The person corrected the agent{where}{after}: "{q}".' if q
        else f"The person corrected the agent{where}{after}."
        for q in quote_steps(details.get("said") or "")
    ]
    return safe_text(candidates, f"The person corrected the agent{where} (lesson {lesson_id}).")


def prediction_text(details: dict, family: str, lesson_id: int) -> str:
    """The situation the lesson's prediction expects and its outcome, as an observation of the
    future: "A coming session in app that runs `git push` will see this failure again or its
    resolution, `git push --set-upstream origin <branch>`." (see :func:`openmemory_local.sleep.passes.verify`)."""
    where = family_label(family)
    subject = details.get("subject") or {}
    anchor = details.get("anchor")
    candidates = []
    used = _resolution_used(details)
    if details.get("kind") == "correction":
        action = details.get("action_label")
        if action:
            candidates.append(f"A coming session in {where} will meet the situation the person corrected "
                              f"(the agent running {action}) and be corrected again{used}.")
        candidates.append(f"A coming session in {where} will meet the situation the person corrected.")
    elif subject.get("heads"):
        on = f" on {anchor}" if anchor else ""
        candidates.append(f"A coming session in {where} that runs {_label(subject, 'or')}{on} will see this "
                          f"failure again{used}.")
        candidates.append(f"A coming session in {where} will run {_label(subject, 'or')}{on}.")
    else:
        candidates.append(f"A coming session in {where} will see {_label(subject, tools=details.get('tools'))} "
                          f"fail the same way{used}.")
    return safe_text(candidates, f"A coming session in {where} will meet the situation of lesson {lesson_id}.")


def _resolution_used(details: dict) -> str:
    """`` or use `X``` for the prediction text, from the top resolution that can be seen again."""
    for res in (details.get("resolutions") or [])[:1]:
        if res.get("kind") in ("changed", "instead") and res.get("delta" if res.get("kind") == "changed" else "norm"):
            return f" or its resolution, `{res['command']}`"
        if res.get("kind") == "retry" and not res.get("went_away"):
            steps = [a for a in res.get("after") or [] if not a.startswith("edited ")]
            if len(steps) == 1 and len(res.get("after") or []) <= 2:
                return f" or its resolution, `{steps[0]}` before the same call"
    if details.get("kind") == "correction" and details.get("resolution_programs"):
        return " or its resolution, " + " or ".join(f"`{p}`" for p in details["resolution_programs"][:2])
    return ""


# --- the optional local model ------------------------------------------------------------

_SYSTEM = (
    "You rewrite notes about a coding agent's past sessions. Reply with exactly one sentence in the "
    "past or present tense that states what happened, as an observation. It is not advice: no "
    "imperatives, no 'should', no words addressed to a reader. Keep commands in backticks and keep "
    "quoted error messages exact."
)


def _content_words(text: str) -> set[str]:
    return {w for w in _raw_tokens(text) if w not in STOP_WORDS and len(w) > 2}


def _model_answer(answer: str) -> str:
    return " ".join(answer.split()).strip().strip('"').strip()


def model_refusal(answer) -> ObservationViolation | None:
    """How the observation rule refuses a model's answer (None: it does not, or it is no text)."""
    return observation_violation(_model_answer(answer)) if isinstance(answer, str) else None


def accept_model_text(answer, basis: str) -> str | None:
    """The model's answer if it may replace ``basis`` (see the module docstring), else None."""
    if not isinstance(answer, str):
        return None
    text = _model_answer(answer)
    if not 20 <= len(text) <= 300 or "\n" in answer.strip() or text.startswith(("#", "-", "*", "```")):
        return None
    if not is_observation(text):
        return None
    if len(_content_words(text) & _content_words(basis)) < 2:
        return None
    return text


def ask_model(url: str, model: str, basis: str, facts: dict, *, timeout: float,
              key: str | None = None) -> str | None:
    """One chat completion from an OpenAI-compatible endpoint; None on any failure."""
    import urllib.error
    import urllib.request

    if not url.startswith(("http://", "https://")):
        return None
    endpoint = url.rstrip("/")
    if not endpoint.endswith("/chat/completions"):
        endpoint += "/chat/completions"
    body = {
        "model": model,
        "temperature": 0,
        "max_tokens": 160,
        "messages": [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": "Note: " + basis + "\nFacts (JSON): " + json.dumps(facts, ensure_ascii=False)},
        ],
    }
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(endpoint, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read(64 * 1024 + 1)
        if len(raw) > 64 * 1024:
            return None
        data = json.loads(raw.decode("utf-8"))
        return data["choices"][0]["message"]["content"]
    except (OSError, urllib.error.URLError, ValueError, KeyError, IndexError, TypeError, UnicodeDecodeError):
        return None


def rephrase(store, now: datetime) -> dict:
    """Ask the configured model to rephrase lessons whose deterministic text it has not seen.

    Runs outside any transaction; each accepted text is written in its own short one, and
    only if the lesson's deterministic text did not change meanwhile. Returns counts.
    """
    config = store.config
    from openmemory_local.storage.store import record_event

    out = {"asked": 0, "accepted": 0, "rejected": 0, "refused": 0}
    if not config.lesson_model_url:
        return out
    from openmemory_local.storage import phrasing

    rows = phrasing.lessons_with_rule_text(store)
    deadline = time.monotonic() + config.lesson_model_budget
    for lesson_id, basis, details_json in rows:
        details = loads(details_json, {})
        if details.get("model_tried") == basis:
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            break
        facts = {k: details.get(k) for k in ("kind", "sessions", "seen", "branches", "paths") if details.get(k)}
        facts["messages"] = [m.get("text") for m in (details.get("messages") or [])[:3]]
        answer = ask_model(config.lesson_model_url, config.lesson_model_name, basis, facts,
                           timeout=min(config.lesson_model_timeout, left), key=config.lesson_model_key)
        out["asked"] += 1
        text = accept_model_text(answer, basis)
        details["model_tried"] = basis
        with store.write():
            current = phrasing.text_basis(store, lesson_id)
            if current is None or current[0] != basis or current[1] != "rule":
                continue
            if text is None:
                out["rejected"] += 1
                refusal = model_refusal(answer)
                if refusal is not None:
                    out["refused"] += 1
                    record_event(store, iso(now), "model_refused", lesson_id, rule=refusal.rule,
                                 answer=clip(answer, 200))
                phrasing.set_details(store, lesson_id, details)
            else:
                out["accepted"] += 1
                phrasing.set_model_text(store, lesson_id, text, details, iso(now))
    return out
