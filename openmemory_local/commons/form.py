"""The commons form of a lesson: the claim every agent that met the same surprise publishes.

A lesson leaves the machine only as a *claim* (:mod:`openmemory_protocol.claims`): typed parts,
each redacted on its own, whose text is their one canonical rendering. Two agents that met the
same failure, and fixed it the same way, publish the same claim (its dedup key is the claim's,
whatever the bytes). From an error lesson's ``details``:

* *situation*: the programs of the failed call (``git push``; at most three heads), or the tool
  (``Read``), redacted as a situation;
* *path* (a file tool's lesson): the folder the failures share, when one survives redaction;
* *failure*: the lesson's most common failure line (``messages[0].text``), redacted, then
  shortened (whole, first sentence, first clause) until the claim passes its checks, a form
  that reads as an observation first (``the build broke`` before ``the build broke. Always run
  make clean first``); a quote of fewer than two words is no failure: the lesson is then not
  published;
* *fix*: what made the failure go away when the sessions show it (the top of
  ``details["resolutions"]``): ``changed`` (the same program called differently), ``instead``
  (another program on the same target), ``after`` (the same call worked after another program
  ran), ``edited`` (after an edit of a path), ``retried``; redacted; a fix that is a command
  never taken from the commons (:data:`openmemory_protocol.claims.UNSAFE_COMMANDS`: ``sudo``,
  ``curl | sh``, ``--no-verify``, ...) is left out and the lesson is published without a fix.

    `git push` failed: "fatal: The current branch <branch> has no upstream branch."; `git push --set-upstream origin <branch>` succeeded.

A correction, a rejection or an interrupt by the person has no commons form: a person's
preference is not a fact about the world, so it stays in the personal layer. Left out on
purpose: the number of sessions and messages, branch and path lists, the lesson id.
"""

from __future__ import annotations

from dataclasses import dataclass

from openmemory_protocol import claims as claim_rules

from openmemory_local.ingest.resolutions import step_commands, step_paths
from openmemory_local.sleep.lesson_text import quote_steps
from openmemory_protocol.observation import is_observation
from openmemory_local.text.redact import Identity, scrub

__all__ = ["CommonsText", "commons_text", "commons_claim", "KINDS", "MAX_TEXT_BYTES"]

#: The lesson kinds that have a commons form.
KINDS = ("error",)
#: The wire's limit for a lesson text (PROTOCOL.md, "Lesson").
MAX_TEXT_BYTES = claim_rules.MAX_TEXT_BYTES


@dataclass(frozen=True)
class CommonsText:
    """A lesson's commons form (its claim and the claim's text), or None and why there is none.
    ``notes``: what was left out on the way (a fix never published), for the report."""

    text: str | None
    why: str | None = None
    claim: claim_rules.Claim | None = None
    notes: tuple[str, ...] = ()


def _redact(text: str, ident: Identity, part: str) -> str:
    """One part, redacted: :func:`openmemory_local.text.redact.commons_scrub` (the allow-list) when
    this build has it, else the identity scrub."""
    from openmemory_local.text import redact
    allow = getattr(redact, "commons_scrub", None)
    if allow is not None:
        return " ".join(allow(text, ident, part)[0].split())
    return " ".join(scrub(text, ident).split())


def commons_text(details: dict, ident: Identity) -> CommonsText:
    """The commons form of a lesson (see the module docstring)."""
    kind = details.get("kind")
    if kind == "correction":
        return CommonsText(None, "a correction is the person's preference: it stays in the personal layer")
    if kind != "error":
        return CommonsText(None, f"lessons of kind {kind!r} have no commons form")
    if details.get("failure") in ("rejected", "interrupted"):
        return CommonsText(None, "a call the person rejected or interrupted is a preference: it stays personal")
    return commons_claim(details, ident)


def _situation(details: dict, ident: Identity) -> tuple[str | None, str | None]:
    raw = details.get("subject") or {}
    heads = []
    for head in raw.get("heads") or []:
        cleaned = _redact(str(head), ident, "situation")
        if cleaned and cleaned not in heads:
            heads.append(cleaned)
    if heads:
        return " && ".join(heads[:3]), None
    tool = str(raw.get("tool") or "")
    if not tool or tool.startswith("hook:"):
        return None, None
    path = None
    paths = [p for p in details.get("paths") or [] if p and p != "."]
    if paths:
        common = _common_prefix(paths)
        path = _redact(common, ident, "path") if common else None
    return tool, path or None


def _common_prefix(paths: list[str]) -> str:
    parts = [str(p).split("/") for p in paths]
    common = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return "/".join(common)


def _fix(details: dict, ident: Identity) -> tuple[str | None, str | None]:
    """(fix_how, fix) of the top resolution, redacted; (None, None) when none was seen."""
    found = details.get("resolutions") or []
    if not found or not isinstance(found[0], dict):
        return None, None
    top = found[0]
    kind = top.get("kind")
    if kind in ("changed", "instead"):
        command = _redact(str(top.get("command") or ""), ident, "command")
        return (kind, command) if command else (None, None)
    if kind != "retry":
        return None, None
    after = top.get("after") or []
    steps, edits = step_commands(after), step_paths(after, "edited")
    if steps:
        step = _redact(steps[0], ident, "command")
        return ("after", step) if step else (None, None)
    if edits:
        path = _redact(edits[0], ident, "path")
        return ("edited", path) if path else (None, None)
    return "retried", None  # (a read of the file before the same call: a claim has no form for it)


def commons_claim(details: dict, ident: Identity) -> CommonsText:
    """The claim of an error lesson (see the module docstring)."""
    situation, path = _situation(details, ident)
    if situation is None:
        return CommonsText(None, "no program or tool to name")
    messages = details.get("messages") or []
    message = _redact(str(messages[0].get("text") or ""), ident, "failure") if messages else ""
    how, fix = _fix(details, ident)
    notes: list[str] = []
    if fix is not None:
        unsafe = claim_rules.unsafe_command(fix)
        if unsafe is not None:
            notes.append(f"its fix `{fix[:80]}` {unsafe[1]} ({unsafe[0]}): never published, the claim goes without it")
            how, fix = None, None
    fixes = [(how, fix), (None, None)] if how is not None else [(None, None)]
    last: claim_rules.ClaimError | None = None
    fix_error: claim_rules.ClaimError | None = None
    quotes = [q for q in quote_steps(message) if len(q.split()) >= 2]
    # a quote that reads as an observation first (``the build broke`` rather than ``the build
    # broke. Always run make clean first``): quoted output is data, but the shorter clean form
    # says the same failure; a line that only instructs is quoted whole when nothing else is left
    quotes = [q for q in quotes if is_observation(q)] + [q for q in quotes if not is_observation(q)]
    for fix_how, fix_text in fixes:
        for quote in quotes:
            claim = claim_rules.Claim(situation=situation, path=path, failure=quote, fix=fix_text, fix_how=fix_how)
            last = claim_rules.claim_violation(claim)
            if last is None:
                if fix_how is None and fix_error is not None:
                    notes.append(f"its fix did not pass the claim's checks ({fix_error}): published without it")
                return CommonsText(claim_rules.render(claim), None, claim, tuple(notes))
            if fix_how is not None and last.part in ("fix", "fix_how"):
                fix_error = last
    why = f"no form of the claim passes its checks ({last})" if last else "no failure line of two words or more to quote"
    return CommonsText(None, why, None, tuple(notes))
