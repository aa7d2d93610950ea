"""A lesson on the wire is a claim: what failed, quoted, and what made it go away.

Everything that decides whether a claim is one lives in this file, pure and standard library
only, imported by both halves (the engine builds claims and checks what it receives, the node
validates version 2 lesson records with it). PROTOCOL.md ("Claims") says the same for other
implementations; spec/vectors/claims.json pins it.

RULES
=====

C1  Parts. A claim of kind ``error`` has a *situation* (the programs that ran, as command heads:
    ``git push``, ``cd && npm test``; or one tool: ``Read``), optionally the *path* it is about
    (relative to the project: ``test/support``), the *failure* (the failure's line, as the tool
    printed it, placeholders for what was redacted) and optionally a *fix*: how the failure went
    away (``fix_how``) and the command or step (``fix``):

        changed   the same program, called differently, succeeded: ``fix`` is that call
        instead   another program succeeded on the same target: ``fix`` is that call
        after     the same call succeeded after another program ran: ``fix`` is that program
        edited    the same call succeeded after an edit: ``fix`` is the edited path
        retried   the same call succeeded when tried again: no ``fix``

C2  Shapes. Each part is one line of printable text with single spaces (no leading, trailing or
    double space, no control or format character), without a backtick or a double quote:
    situation 1 to 3 heads joined by `` && ``, each head 1 to 3 words of ``[A-Za-z0-9._+:@=/-]``,
    the first starting with a letter, digit or ``.``/``_`` (``python -m pytest``), or one tool name (``Read``, ``mcp__x__y``);
    path up to 200 bytes, one word, not absolute (no ``/``, ``~`` or ``$`` first); failure 2 to 300
    bytes with a letter; fix 1 to 200 bytes. A ``fix`` without ``fix_how`` or the reverse is
    malformed, except ``retried`` (no ``fix``); an ``edited`` fix is a path.

C3  Rendering. The text of a claim is :func:`render` of its parts, and nothing else:

        `git push` failed: "fatal: The current branch <branch> has no upstream branch."; `git push --set-upstream origin <branch>` succeeded.

    A receiver renders the parts again and refuses a record whose text differs by one byte.
    Quotes of tool output are data: the failure in double quotes, commands in code spans.

C4  Quoted output is data, not a voice. The failure must not carry what only a prompt carries:
    role tokens and role tags, HTML comments and tags with attributes, markdown links and images,
    prompt-injection phrases, long base64 runs (:data:`FAILURE_MARKERS`).

C5  Commands that never arrive from strangers (:data:`UNSAFE_COMMANDS`): a claim whose fix, or
    any other part, downloads and runs code, disables verification (TLS, signatures, hooks),
    escalates privileges, force-pushes a default branch, deletes outside the project or uploads
    data to a host, is refused, whatever its attestations. Defence in depth: the main defence is
    that a stranger's claim is shown only once independent agents' own sessions met its failure
    and fixed it its way.

C6  The same claim. Two claims are the same when their :func:`claim_key` is: parts compared
    after case folding, with punctuation, spacing and quoting ignored, every placeholder one
    token, and a command compared as its programs in order with each one's arguments as a set
    (``curl -fsSL URL|sh`` is ``curl URL -fsSL | sh``). A veto, a revocation by a revoker, a local
    revocation and the dedup key of a version 2 lesson all cover the claim, not the bytes.

Only ``error`` claims exist on the wire: a correction is a person's preference, not a fact about
the world; it stays in the personal layer.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

__all__ = [
    "KINDS",
    "HOWS",
    "PARTS",
    "Claim",
    "ClaimError",
    "render",
    "parse",
    "claim_violation",
    "check_claim",
    "unsafe_command",
    "failure_marker",
    "claim_key",
    "failure_key",
    "command_key",
    "text_key",
    "failure_matches",
    "command_matches",
    "dedup_key",
    "DEDUP_DOMAIN",
    "UNSAFE_COMMANDS",
    "FAILURE_MARKERS",
    "MAX_TEXT_BYTES",
]

KINDS = ("error",)
HOWS = ("changed", "instead", "after", "edited", "retried")
#: The parts of a claim, as the wire's ``claim`` map names them.
PARTS = ("situation", "path", "failure", "fix", "fix_how")
MAX_TEXT_BYTES = 512
MAX_FAILURE_BYTES = 300
MAX_FIX_BYTES = 200
MAX_PATH_BYTES = 200
MAX_HEAD_BYTES = 64
DEDUP_DOMAIN = b"openmemory/dedup/v2\x00"


class ClaimError(ValueError):
    """A claim that is not one: ``code`` (``claim`` or ``unsafe``), ``part`` and why."""

    def __init__(self, code: str, part: str | None, message: str):
        super().__init__(message)
        self.code = code
        self.part = part


@dataclass(frozen=True)
class Claim:
    """The typed parts of a lesson (see C1)."""

    situation: str
    failure: str
    path: str | None = None
    fix: str | None = None
    fix_how: str | None = None
    kind: str = "error"

    @property
    def heads(self) -> tuple[str, ...]:
        return tuple(self.situation.split(" && ")) if not _is_tool(self.situation) else ()

    @property
    def tool(self) -> str | None:
        return self.situation if _is_tool(self.situation) else None

    @property
    def text(self) -> str:
        return render(self)

    def parts(self) -> dict[str, str]:
        """The wire's ``claim`` map: the parts that are present."""
        return {name: value for name in PARTS if (value := getattr(self, name)) is not None}

    @classmethod
    def from_parts(cls, parts: dict, kind: str = "error") -> "Claim":
        """From a ``claim`` map (types checked here, shapes by :func:`claim_violation`)."""
        if not isinstance(parts, dict):
            raise ClaimError("claim", None, f"the claim must be a map, not {type(parts).__name__}")
        unknown = sorted(str(k)[:40] for k in parts if k not in PARTS)
        if unknown:
            raise ClaimError("claim", None, f"unknown claim part(s): {', '.join(unknown)}")
        values = {}
        for name in PARTS:
            value = parts.get(name)
            if value is not None and type(value) is not str:
                raise ClaimError("claim", name, f"{name} must be text, not {type(value).__name__}")
            values[name] = value
        for name in ("situation", "failure"):
            if values[name] is None:
                raise ClaimError("claim", name, f"a claim has a {name}")
        return cls(kind=kind, **values)


# -- rendering (C3) --------------------------------------------------------------------------

def _and(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _label(claim: Claim) -> str:
    tool = claim.tool
    label = f"`{tool}`" if tool else _and([f"`{h}`" for h in claim.heads])
    return f"{label} on `{claim.path}`" if claim.path else label


_FIX_PHRASES = {
    "changed": "; `{fix}` succeeded.",
    "instead": "; `{fix}` succeeded on the same target.",
    "after": "; the same call succeeded after `{fix}`.",
    "edited": "; the same call succeeded after an edit of `{fix}`.",
    "retried": "; the same call succeeded when tried again.",
}


def render(claim: Claim) -> str:
    """The one text of a claim (C3): every text a claim has on the wire is this."""
    head = f'{_label(claim)} failed: "{claim.failure}"'
    if claim.fix_how is None:
        return head + "."
    return head + _FIX_PHRASES[claim.fix_how].format(fix=claim.fix)


_LABEL_RE = r"(?P<label>`[^`]+`(?:(?:, `[^`]+`)* and `[^`]+`)?)(?: on `(?P<path>[^`]+)`)?"
_FIX_RES = [(how, re.compile(re.escape(phrase).replace(re.escape("{fix}"), "(?P<fix>[^`]+)") + r"\Z"))
            for how, phrase in _FIX_PHRASES.items()]
_HEAD_RE = re.compile(_LABEL_RE + r' failed: "(?P<failure>[^"]+)"')


def parse(text: str, kind: str = "error") -> Claim | None:
    """The claim whose rendering ``text`` is, or None: how a sentence is published as a claim
    (``openmemory-node publish --text T``). Only an exact rendering parses."""
    if kind not in KINDS or not isinstance(text, str):
        return None
    match = _HEAD_RE.match(text)
    if match is None:
        return None
    rest = text[match.end():]
    how = fix = None
    if rest != ".":
        for name, pattern in _FIX_RES:
            found = pattern.match(rest)
            if found is not None:
                how, fix = name, found.groupdict().get("fix")
                break
        else:
            return None
    label = match.group("label")
    names = re.findall(r"`([^`]+)`", label)
    situation = names[0] if len(names) == 1 and _is_tool(names[0]) else " && ".join(names)
    claim = Claim(situation=situation, failure=match.group("failure"), path=match.group("path"), fix=fix,
                  fix_how=how, kind=kind)
    try:
        if render(claim) != text:
            return None
    except KeyError:  # pragma: no cover - every how has a phrase
        return None
    return claim


# -- shapes (C2) -----------------------------------------------------------------------------

_TOOL = re.compile(r"(?:[A-Z][A-Za-z0-9_]{0,63}|mcp__[A-Za-z0-9_-]{1,120})\Z")
_WORD = re.compile(r"[A-Za-z0-9._][A-Za-z0-9._+:@=/-]{0,63}\Z")
_LATER_WORD = re.compile(r"[A-Za-z0-9._-][A-Za-z0-9._+:@=/-]{0,63}\Z")  # (an option may follow: python -m x)
# printable, one line: no C0/C1 control, no format character, no line or paragraph separator
_BAD_CHAR = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff"
                       "\ufff9-\ufffb`\"]")


def _has_letter(text: str) -> bool:
    """A code point of general category L (Lu, Ll, Lt, Lm, Lo): the same answer in every
    language's Unicode tables, unlike a regex's idea of a word character."""
    return any(unicodedata.category(c)[0] == "L" for c in text)


def _is_tool(situation: str) -> bool:
    return _TOOL.match(situation) is not None


def _line(name: str, value: str, low: int, high: int) -> None:
    size = len(value.encode("utf-8"))
    if not low <= size <= high:
        raise ClaimError("claim", name, f"{name} must be {low} to {high} bytes of UTF-8, not {size}")
    bad = _BAD_CHAR.search(value)
    if bad is not None:
        what = {"`": "a backtick", '"': "a double quote"}.get(bad.group(), f"U+{ord(bad.group()):04X}")
        raise ClaimError("claim", name, f"{name} holds {what}: a claim's parts are one line, without backticks "
                                        "or double quotes")
    if value != " ".join(value.split(" ")) or value.strip(" ") != value or "  " in value:
        raise ClaimError("claim", name, f"{name} must have single spaces and none at either end")
    if any(c.isspace() and c != " " for c in value):
        raise ClaimError("claim", name, f"{name} holds white space other than a space")


def _situation(value: str) -> None:
    _line("situation", value, 1, 3 * MAX_HEAD_BYTES + 8)
    if _is_tool(value):
        return
    heads = value.split(" && ")
    if len(heads) > 3:
        raise ClaimError("claim", "situation", "a situation names at most 3 programs")
    for head in heads:
        words = head.split(" ")
        if not 1 <= len(words) <= 3 or _WORD.match(words[0]) is None or any(
                _LATER_WORD.match(w) is None for w in words[1:]):
            raise ClaimError("claim", "situation",
                             f"{head[:60]!r} is not a program head (1 to 3 words of letters, digits and ._+:@=/-)")


def _path(value: str) -> None:
    _line("path", value, 1, MAX_PATH_BYTES)
    if " " in value:
        raise ClaimError("claim", "path", "a path is one word")
    if value[0] in "/~$\\" or re.match(r"[A-Za-z]:\\", value):
        raise ClaimError("claim", "path", "a path is relative to the project (not /..., ~ or $...)")


def claim_violation(claim: Claim) -> ClaimError | None:
    """The first way a claim breaks C1 to C5, or None."""
    try:
        check_claim(claim)
    except ClaimError as exc:
        return exc
    return None


def check_claim(claim: Claim) -> Claim:
    """Return ``claim`` if it is one (C1 to C5), else raise :class:`ClaimError`."""
    if claim.kind not in KINDS:
        raise ClaimError("claim", "kind", f"claims of kind {claim.kind!r} do not exist on the wire "
                                          f"(only {', '.join(KINDS)}: a correction stays personal)")
    _situation(claim.situation)
    if claim.path is not None:
        _path(claim.path)
    _line("failure", claim.failure, 2, MAX_FAILURE_BYTES)
    if not _has_letter(claim.failure):
        raise ClaimError("claim", "failure", "a failure holds at least one letter")
    if claim.fix_how is None:
        if claim.fix is not None:
            raise ClaimError("claim", "fix_how", "a fix says how it made the failure go away (fix_how)")
    elif claim.fix_how not in HOWS:
        raise ClaimError("claim", "fix_how", f"fix_how must be one of {', '.join(HOWS)}, not {claim.fix_how!r:.40}")
    elif claim.fix_how == "retried":
        if claim.fix is not None:
            raise ClaimError("claim", "fix", "a retried call has no fix command")
    elif claim.fix is None:
        raise ClaimError("claim", "fix", f"a fix_how of {claim.fix_how!r} needs a fix")
    else:
        _line("fix", claim.fix, 1, MAX_FIX_BYTES)
        if claim.fix_how == "edited":
            _path_fix(claim.fix)
    size = len(render(claim).encode("utf-8"))
    if size > MAX_TEXT_BYTES:
        raise ClaimError("claim", "failure", f"the claim renders to {size} bytes; a lesson text is at most "
                                             f"{MAX_TEXT_BYTES}")
    marker = failure_marker(claim.failure)
    if marker is not None:
        raise ClaimError("claim", "failure", f"the failure carries {marker}: quoted output is data, not a prompt")
    for name in ("fix", "failure", "situation", "path"):
        value = getattr(claim, name)
        if value is not None:
            unsafe = unsafe_command(value)
            if unsafe is not None:
                code, why = unsafe
                raise ClaimError("unsafe", name, f"the {name} {why} ({code}): never taken from the commons")
    return claim


def _path_fix(value: str) -> None:
    try:
        _path(value)
    except ClaimError as exc:
        raise ClaimError("claim", "fix", f"an edited fix is a path: {exc}") from None


# -- quoted output is data (C4) --------------------------------------------------------------

#: What only a prompt carries: (what it is, pattern on the failure lowered to ASCII lower case).
FAILURE_MARKERS: tuple[tuple[str, str], ...] = (
    ("a role token", r"<\|[^|<>]{0,40}\|>|\[/?(?:inst|sys|system|user|assistant)\]|<</?sys>>"),
    ("a role tag", r"</?(?:system|assistant|user|human|developer|prompt|instructions?|im_start|im_end"
                   r"|system-reminder|tool_call|function_call|admin)\b[^<>]{0,200}>"),
    ("an HTML comment", r"<!--|-->"),
    ("an HTML tag", r"</[a-z][a-z0-9:_-]*>|<[a-z][a-z0-9:_-]*\s+[a-z_:-]+\s*=[^<>]{0,200}>"),
    ("a markdown link or image", r"!?\[[^\[\]]{0,200}\]\([^()]{0,300}\)"),
    ("a prompt-injection phrase",
     r"\b(?:ignore|disregard|forget|override|bypass) (?:(?:all|any|the|your|these|those|every|my|of|previous"
     r"|prior|above|earlier|preceding|other|original|existing|safety|system) )*(?:instructions?|prompts?|rules?"
     r"|directions?|guidelines?|guardrails?|constraints?|polic(?:y|ies)|context|messages?)\b"
     r"|\b(?:ignore|disregard|forget) (?:(?:all|the|everything) )?(?:above|previous|prior)\b"
     r"|\b(?:system|developer|hidden|initial|original) (?:prompt|message|instructions?)\b"
     r"|\b(?:from now on|going forward|henceforth)\b"
     r"|\b(?:new|updated|additional|secret|hidden|real|override) (?:rules?|instructions?|directives?|tasks?)\b"
     r"|\byou are (?:now|an? (?:ai|assistant|model|agent))\b|\bact as (?:an? |the )\b"
     r"|\b(?:jailbreak|developer mode|do anything now|dan mode)\b"
     r"|\b(?:the|an?|this|any) (?:ai|agent|assistant|model|llm|claude|codex|gemini) (?:must|should|shall|will|needs? to)\b"),
    ("a base64 run", r"[a-z0-9+/]{60,}={0,2}"),
)
# ASCII: \b, \d, \s, \S and \w mean what they mean in a JavaScript regex without the u flag
# (spec/js/verify.mjs runs these patterns as they are), whatever the text holds.
_MARKERS = tuple((what, re.compile(pattern, re.ASCII)) for what, pattern in FAILURE_MARKERS)
_ASCII_LOWER = str.maketrans({c: c.lower() for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"})


def _folded(text: str) -> str:
    """NFKC, then ASCII letters lowered: what the tables of C4 and C5 are written for."""
    return unicodedata.normalize("NFKC", text).translate(_ASCII_LOWER)


def failure_marker(failure: str) -> str | None:
    """What in ``failure`` only a prompt carries (C4), or None."""
    folded = _folded(failure)
    for what, pattern in _MARKERS:
        if pattern.search(folded) is not None:
            return what
    return None


# -- commands that never arrive from strangers (C5) --------------------------------------------

_SHELLS = r"(?:sh|bash|zsh|dash|ksh|mksh|fish|csh|tcsh|ash|busybox sh|pwsh|powershell|cmd|iex|invoke-expression)"
_INTERPRETERS = r"(?:python[0-9.]*|perl|ruby|node|nodejs|php|deno|bun|lua|tclsh|osascript)"
_DOWNLOAD = r"(?:curl|wget|fetch|aria2c|iwr|irm|invoke-webrequest|invoke-restmethod|http|https|xh|lwp-request)"
_SUDO = r"(?:(?:sudo|doas)(?: -[a-z-]+)* )?"
_DEFAULT_BRANCHES = r"(?:main|master|trunk|develop|development|production|prod|release|default|stable)"

#: (code, what it does, pattern). Each pattern reads the command as :func:`_command_form` writes
#: it: NFKC, ASCII lower case, quotes removed, one space between words, and one space on each
#: side of ``|``, ``||``, ``&&``, ``;``, ``&``, ``(``, ``)``. PROTOCOL.md ("Commands that never
#: arrive from strangers") has this table with the reasoning behind each row.
UNSAFE_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("runs-downloaded-code", "pipes something into a shell",
     r"(?:^| )\| " + _SUDO + r"(?:env (?:[a-z_][a-z0-9_]*=\S* )*)?" + _SHELLS + r"(?: -[a-z-]+)*(?: -)?(?: |$)"),
    ("runs-downloaded-code", "pipes something into an interpreter as code",
     r"(?:^| )\| " + _SUDO + _INTERPRETERS + r"(?: -(?![mce]\b)[a-z-]*)*(?: -)?(?: [;&|)]|$)"),
    ("runs-downloaded-code", "runs a downloaded script",
     r"(?:^| )(?:" + _SHELLS + "|" + _INTERPRETERS + r"|source|\.|eval|exec)\b[^|;&]* <? ?\( " + _DOWNLOAD + r"\b"
     r"|\$ \( " + _DOWNLOAD + r"\b|\$\( ?" + _DOWNLOAD + r"\b|`" + _DOWNLOAD + r"\b"),
    ("runs-downloaded-code", "downloads a file and runs it",
     r"(?:^| )" + _DOWNLOAD + r" [^;&|]*(?:-o|-O|--output|--output-document)[ =]?(\S+)[^|]*(?:&&|;) "
     r"(?:" + _SUDO + r"(?:" + _SHELLS + "|" + _INTERPRETERS + r"|source|\.|chmod [^;&|]*\+x)\b|\./)"),
    ("runs-downloaded-code", "installs a package from a URL",
     r"(?:^| )(?:pip[0-9.]*|uv pip|pipx|python[0-9.]* -m pip|poetry|pdm) (?:install|add)\b[^;&|]* "
     r"(?:git\+)?(?:https?|ssh|ftp)://"
     r"|(?:^| )(?:npm|pnpm|yarn|bun) (?:i|install|add)\b[^;&|]* (?:(?:git\+)?(?:https?|ssh)://|github:|gitlab:|git@)"
     r"|(?:^| )(?:npx|pnpx|bunx|pnpm dlx|yarn dlx) (?:-[a-z-]+ )*(?:(?:git\+)?https?://|github:|gitlab:)"
     r"|(?:^| )gem install\b[^;&|]* --source (?:https?://)"),
    ("disables-verification", "turns off a hook, TLS or signature check",
     r"(?:^| )--no-verify(?:-ssl)?\b|(?:^| )--insecure\b|(?:^| )--no-check-certificates?\b"
     r"|(?:^| )--(?:insecure-)?skip-tls-verify\b|(?:^| )--tls-verify[= ]false\b|(?:^| )--trusted-host\b"
     r"|(?:^| )--allow-(?:unauthenticated|insecure(?:-repositories)?)\b|(?:^| )--nogpgcheck\b|\bgpgcheck ?= ?0\b"
     r"|(?:^| )--no-gpg-checks\b|(?:^| )--disable-(?:ssl|tls|certificate)[a-z-]*\b"
     r"|\bssl_?verify(?:peer|host)?(?: ?= ?| )(?:false|0|no|off)\b|\bstrict-ssl(?: ?= ?| )false\b"
     r"|\bnode_tls_reject_unauthorized ?= ?0\b|\bpythonhttpsverify ?= ?0\b|\bgit_ssl_no_verify ?= ?(?:1|true)\b"
     r"|\bcurl_ca_bundle ?= ?(?:$| )|\brequests_ca_bundle ?= ?(?:$| )|\bcore\.hookspath(?: ?= ?| )/dev/null\b"
     r"|\bhusky(?:_skip_hooks)? ?= ?[01]\b|\bverify ?= ?false\b|\bsecurity\.(?:enforce|verify)[a-z_]* ?= ?false\b"),
    ("disables-verification", "turns off certificate checks (curl -k)",
     r"(?:^| )curl\b[^;&|]* -(?!-)[a-z0-9]*k[a-z0-9]*\b"),
    ("disables-verification", "commits without running the hooks (git commit -n)",
     r"(?:^| )git (?:-c \S+ )*commit\b[^;&|]* -(?!-)[a-z]*n[a-z]*(?: |$)"),
    ("escalates-privileges", "runs as another user (sudo, su, doas)",
     r"(?:^|[;&|(] |&& |\|\| )(?:sudo|doas|su|pkexec|runas|gosu|run0)\b"),
    ("escalates-privileges", "opens permissions to everyone or sets a setuid bit",
     r"(?:^| )chmod (?:-[a-z]+ )*(?:0?[0-7]?[0-7][0-7]7|0?[0-7]?[0-7]7[0-7]|a\+[rwx]*w[rwx]*|o\+[rwx]*w[rwx]*|\+?[ug]?\+s"
     r"|[ugoa]*\+[rwx]*s|[0-7]?[4-7][0-7]{3})\b|(?:^| )chown (?:-[a-z]+ )*root\b|(?:^| )setcap\b"
     r"|(?:^| )docker (?:run|create|exec)\b[^;&|]* --privileged\b|(?:^| )usermod\b[^;&|]* (?:sudo|wheel|docker|root)\b"
     r"|(?:^| )visudo\b|/etc/sudoers"),
    ("force-pushes-default-branch", "force-pushes a default branch",
     r"(?:^| )git (?:-c \S+ )*push\b(?=[^;&|]* (?:--force(?:-with-lease)?(?:=\S*)?|-[a-z]*f[a-z]*)(?: |$))"
     r"(?:[^;&|]* (?:\S+:)?\+?(?:refs/heads/)?" + _DEFAULT_BRANCHES + r"(?: |$)"
     r"|(?: (?:--force(?:-with-lease)?(?:=\S*)?|-[a-z]*f[a-z]*|--[a-z-]+|-[a-z]+))*(?: [a-z0-9._-]+)?(?:$| [;&|)]))"),
    ("force-pushes-default-branch", "force-pushes a default branch (a + refspec)",
     r"(?:^| )git (?:-c \S+ )*push\b[^;&|]* \+(?:\S+:)?(?:refs/heads/)?" + _DEFAULT_BRANCHES + r"(?: |$)"),
    ("deletes-outside-project", "deletes outside the project",
     r"(?:^| )" + _SUDO + r"rm (?:-[a-z-]+ )*(?:--no-preserve-root )?(?:\S+ )*?(?:/\S*|~\S*|\$home\S*|\$\{home\}\S*"
     r"|<home>\S*|<path>\S*|\.\.(?:/\S*)?|\*)(?: |$)"
     r"|(?:^| )find (?:/|~|\$home|<home>|<path>)\S*[^;&|]* (?:-delete|-exec rm)\b|(?:^| )(?:mkfs|mkfs\.\S+|wipefs|shred)\b"
     r"|(?:^| )dd\b[^;&|]* of=/dev/|> ?/dev/(?:sd|nvme|hd|disk)"),
    ("sends-data-out", "uploads data to a host",
     r"(?:^| )curl\b(?=[^;&|]* (?:-d|--data(?:-[a-z]+)?|-f|--form(?:-string)?|-t|--upload-file|--json"
     r"|-x (?:post|put|patch))(?: |=|@|$))(?![^;&|]* (?:https?://)?(?:localhost|127\.0\.0\.1|\[::1\]|0\.0\.0\.0)\b)"
     r"|(?:^| )wget\b[^;&|]* --post-(?:data|file)\b|(?:^| )(?:nc|ncat|netcat|socat|telnet)\b [^;&|]*\S+ \d+"
     r"|/dev/(?:tcp|udp)/|(?:^| )(?:scp|rsync|sftp)\b[^;&|]* [a-z0-9._-]*@?[a-z0-9.<>_-]+:\S*(?: |$)"
     r"|(?:^| )(?:sendmail|mail|mutt)\b"),
)
_UNSAFE = tuple((code, why, re.compile(pattern, re.ASCII)) for code, why, pattern in UNSAFE_COMMANDS)
_OPERATORS = re.compile(r"\s*(\|\||&&|\||;|&|\(|\))\s*")


def _command_form(text: str) -> str:
    """A command as :data:`UNSAFE_COMMANDS` reads it."""
    text = _folded(text).replace('"', "").replace("'", "")
    text = _OPERATORS.sub(lambda m: f" {m.group(1)} ", text)
    return " ".join(text.split())


def unsafe_command(text: str) -> tuple[str, str] | None:
    """``(code, what it does)`` of the first row of :data:`UNSAFE_COMMANDS` that ``text`` matches."""
    form = _command_form(text)
    for code, why, pattern in _UNSAFE:
        if pattern.search(form) is not None:
            return code, why
    return None


# -- the same claim (C6) ----------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"<[a-z][a-z_-]{0,15}>|\{[a-z]{1,10}\}")
_TOKEN = re.compile(r"<>|[^\W_]+")


def text_key(text: str) -> str:
    """A text with case, punctuation, spacing and quoting ignored, every placeholder ``<>``
    and every number ``<>``: ``Fatal: the branch 'x' (3)`` and ``fatal the branch x 4`` differ
    only by x, and not at all with x a placeholder."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    folded = _PLACEHOLDER.sub(" <> ", folded)
    tokens = ["<>" if t.isdigit() else t for t in _TOKEN.findall(folded)]
    return " ".join(tokens)


def failure_key(failure: str) -> str:
    """What a failure line is compared by (verification, met before): :func:`text_key`."""
    return text_key(failure)


def command_key(command: str) -> str:
    """A command's programs in order, each with its words (subcommand, options, arguments) as a
    sorted set (C6): ``npm ci --force`` and ``npm --force ci`` are one command."""
    form = _PLACEHOLDER.sub("<>", _command_form(command))
    segments, current = [], []
    for word in form.split(" "):
        if word in ("|", "||", "&&", ";", "&", "(", ")"):
            if current:
                segments.append(current)
            segments.append([word])
            current = []
        elif word:
            current.append(word)
    if current:
        segments.append(current)
    out = []
    for seg in segments:
        if len(seg) == 1 and seg[0] in ("|", "||", "&&", ";", "&", "(", ")"):
            out.append(seg[0])
            continue
        out.append(" ".join(seg[:1] + sorted(set(seg[1:]))))  # the program, then its words as a set
    return " ".join(out)


def _wild(claimed: list[str], seen: list[str]) -> bool:
    """Whether ``seen`` tokens are ``claimed`` with each placeholder ``<>`` standing for one to
    six tokens (what an agent redacted, another may have kept, and the other way round)."""
    if not claimed:
        return not seen
    head, rest = claimed[0], claimed[1:]
    if head == "<>":
        return any(_wild(rest, seen[n:]) for n in range(1, min(6, len(seen)) + 1)) or (
            bool(seen) and seen[0] == "<>" and _wild(rest, seen[1:]))
    return bool(seen) and (seen[0] == head or seen[0] == "<>") and _wild(rest, seen[1:])


def failure_matches(claimed: str, seen: str) -> bool:
    """Whether a failure line an agent met (normalised its own way: ``{branch}``, ``<path>``) is
    the failure a claim quotes: the same words in the same order, a placeholder on either side
    standing for what the other names. The program failing with something else never matches."""
    a, b = failure_key(claimed).split(), failure_key(seen).split()
    if len(a) > 80 or len(b) > 80:  # (long lines: exact keys only)
        return a == b
    return _wild(a, b)


def command_matches(claimed: str, seen: str) -> bool:
    """Whether a command an agent ran is the command a claim states: the same programs in the
    same order with the same arguments as sets, a placeholder standing for any one argument."""
    a, b = command_key(claimed).split(" "), command_key(seen).split(" ")
    if len(a) != len(b):
        return False
    return all(x == y or x == "<>" or y == "<>" for x, y in zip(a, b)) or sorted(
        t for t in a if t != "<>") == sorted(t for t in b if t != "<>") and a.count("<>") == b.count("<>")


def claim_key(claim: Claim) -> str:
    """The same claim, whatever its bytes (C6)."""
    situation = claim.tool or " && ".join(command_key(h) for h in claim.heads)
    fix = claim.fix or ""
    fix = text_key(fix) if claim.fix_how == "edited" else command_key(fix)
    return "\x00".join((claim.kind, situation, text_key(claim.path or ""), failure_key(claim.failure),
                        claim.fix_how or "", fix))


def dedup_key(claim: Claim) -> str:
    """A version 2 lesson's dedup key: lower-case hex SHA-256 of the v2 dedup domain and its
    :func:`claim_key` (PROTOCOL.md, "Content identity")."""
    return hashlib.sha256(DEDUP_DOMAIN + claim_key(claim).encode("utf-8")).hexdigest()
