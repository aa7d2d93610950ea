"""The commons form of a lesson: the text every agent that met the same surprise publishes.

The dedup key of a lesson record is a hash of its normalised text (PROTOCOL.md, "Content
identity"), so two agents group only if they publish the same text. The local text of a
lesson (:mod:`openmemory_local.lesson_text`) names this machine's branches and counts this
agent's sessions; its commons form is built from the same ``details`` with everything that
differs from one machine to the next replaced (:func:`openmemory_local.redact.scrub`) or
left out:

* a failed command: ```git push` failed: "fatal: The current branch <branch> has no
  upstream branch."; `git push --set-upstream origin <branch>` succeeded.`` (the lesson's most
  common failure message, scrubbed, and what made it go away when the sessions show it: the
  top resolution, scrubbed, without how often or how soon, which differ between agents);
* a rejection or interrupt: ```mix phx.server` was rejected by the person.``;
* a correction: ``The person corrected the agent, saying "no, this project uses uv",
  after it ran `pip install`.``

Left out on purpose: the number of sessions and of messages (every agent has its own), the
branch and path lists, the lesson id. The quote is shortened as the local text's is (whole,
first sentence, first clause, none; a failure's quote of one word is no quote) until the
text passes the observation rule.

Only these ``details`` keys are read: ``kind``, ``subject`` (``tool``, ``heads``),
``failure``, ``messages[0].text``, ``resolutions[0]`` (``kind``, ``command``, ``after``,
``went_away``), ``said``, ``action_label``. Any other key (later issues
add some) is left out until this module handles it: nothing reaches the commons by
accident. A lesson with nothing specific left to say (no quote, no program, no action)
has no commons form: it is not published.
"""

from __future__ import annotations

from dataclasses import dataclass

from .lesson_text import _label, quote_steps
from .observation import is_observation
from .redact import Identity, scrub

__all__ = ["CommonsText", "commons_text", "KINDS", "MAX_TEXT_BYTES"]

#: The lesson kinds that have a commons form.
KINDS = ("error", "correction")
#: The wire's limit for a lesson text (PROTOCOL.md, "Lesson").
MAX_TEXT_BYTES = 512


@dataclass(frozen=True)
class CommonsText:
    """A lesson's commons text, or None and why there is none."""

    text: str | None
    why: str | None = None


def _pick(candidates: list[str]) -> str | None:
    for text in candidates:
        if text and len(text.encode("utf-8")) <= MAX_TEXT_BYTES and is_observation(text):
            return text
    return None


def commons_text(details: dict, ident: Identity) -> CommonsText:
    """The commons form of a lesson (see the module docstring)."""
    kind = details.get("kind")
    if kind == "error":
        return _error_text(details, ident)
    if kind == "correction":
        return _correction_text(details, ident)
    return CommonsText(None, f"lessons of kind {kind!r} have no commons form")


def _subject(details: dict, ident: Identity) -> dict:
    raw = details.get("subject") or {}
    heads = [h for h in (scrub(str(h), ident) for h in raw.get("heads") or []) if h]
    tool = scrub(str(raw.get("tool") or ""), ident) or None
    return {"heads": heads, "tool": tool}


def _error_text(details: dict, ident: Identity) -> CommonsText:
    subject = _subject(details, ident)
    if not subject["heads"] and not subject["tool"]:
        return CommonsText(None, "no program or tool to name")
    label = _label(subject)
    failure = details.get("failure")
    if failure in ("rejected", "interrupted"):
        verb = "was rejected by the person" if failure == "rejected" else "was interrupted by the person"
        text = _pick([f"{label} {verb}."])
    else:
        messages = details.get("messages") or []
        message = scrub(str(messages[0].get("text") or ""), ident) if messages else ""
        quoted = [f'{label} failed: "{q}"' for q in quote_steps(message) if len(q.split()) >= 2]
        fixed = _resolution(details, ident)
        # the quote with the resolution, the quote alone, the resolution alone, the bare fact
        candidates = [f"{q}; {fixed}." for q in quoted] if fixed else []
        candidates += quoted
        if fixed:
            candidates.append(f"{label} failed; {fixed}.")
        candidates.append(f"{label} failed.")
        text = _pick(candidates)
    return CommonsText(text, None if text else "no form of the text passes the observation rule")


def _resolution(details: dict, ident: Identity) -> str:
    """What made the failure go away (the top of ``details["resolutions"]``), scrubbed, without
    how often or how soon; empty when none was seen or nothing of it survives the scrub."""
    from .resolutions import phrase

    found = details.get("resolutions") or []
    if not found or not isinstance(found[0], dict) or not found[0].get("kind"):
        return ""
    top = found[0]
    command = scrub(str(top.get("command") or ""), ident)
    after = [a for a in (scrub(str(step), ident) for step in (top.get("after") or [])[:3]) if a]
    if top["kind"] != "retry" and not command:
        return ""
    return phrase({"kind": top["kind"], "command": command, "after": after, "went_away": top.get("went_away")},
                  timing=False)


def _correction_text(details: dict, ident: Identity) -> CommonsText:
    said = scrub(str(details.get("said") or ""), ident)
    action = scrub(str(details.get("action_label") or ""), ident)
    after = f", after it ran {action}" if action else ""
    candidates = [f'The person corrected the agent, saying "{q}"{after}.' for q in quote_steps(said) if q.strip()]
    if action:
        candidates.append(f"The person corrected the agent after it ran {action}.")
    if not candidates:
        return CommonsText(None, "nothing specific to share: no words of the person, no action")
    text = _pick(candidates)
    return CommonsText(text, None if text else "no form of the text passes the observation rule")
