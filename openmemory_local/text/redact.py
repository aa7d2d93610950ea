"""What identifies this machine and project, replaced by placeholders; and the gate after it.

Pure code over data: :class:`Identity` says what is identifying here (user and host names,
home folders, the project's working directories and names, branch names, git remotes);
:mod:`openmemory_local.commons.publish` gathers it (the only I/O), this module uses it.

:func:`scrub` replaces, in this order (each pass sees the output of the one before):

=================================  ====================================================
what                               becomes
=================================  ====================================================
white space, invisible and         one space; left out (what the wire refuses in a text,
unassigned characters              ``Al<U+200B>ways`` included)
private-key blocks, JWTs, known    ``<secret>`` (AWS access key ids, GitHub, GitLab, npm,
token formats, ``password=...``,   PyPI, Slack, Stripe, Google, OpenAI/Anthropic and
``Bearer ...``                     Hugging Face tokens; the key of ``key=value`` is kept)
e-mail addresses                   ``<email>``
URLs                               credentials, query string and fragment left out; an IP
                                   host is ``<ip>``, a host that is this machine, a git
                                   remote's or internal (no dot, ``.local``, ``.internal``,
                                   ``.corp``, ``.lan``, ...) is ``<host>``; loopback kept; a
                                   clone URL (``.../x.git``) and ``git@host:owner/repo`` are
                                   ``<url>`` (the project's own repository)
IP addresses (not loopback)        ``<ip>``
the project's working directories  removed (``/home/me/app/lib/x.ex`` -> ``lib/x.ex``), also
                                   a sibling worktree of a ``/*`` family
home folders                       ``<home>`` before a dot folder (``<home>/.claude/...``),
                                   else the whole path is ``<path>``
other absolute paths               ``<path>``, except system ones (``/usr``, ``/bin``,
                                   ``/etc``, ``/tmp``, ``/dev``, ``/proc``, ``/nix``, ...)
branch names                       ``<branch>`` (``main``, ``master``, ... are not names)
project and directory names        ``<project>`` (also inside identifiers: ``SpotterWeb``
                                   -> ``<project>Web``, ``lib/spotter_web``)
host names, user names             ``<host>``, ``<username>`` (``root``, ``admin``, ``runner``,
                                   ... are not names; not ``<user>``: the observation rule
                                   reads ``<user`` as a prompt-injection marker)
volatile tokens                    the engine's own rules (:func:`normalise`): ``<id>``,
                                   ``<time>``, ``<hash>``, ``<num>``: what the engine counts
                                   as one failure is one text
high-entropy tokens                ``<secret>`` (20+ characters, letters and digits,
                                   above 3.5 bits of entropy per character)
=================================  ====================================================

Names are matched as identifier parts: case-insensitively for project names and hosts
(``Spotter``, ``SPOTTER_WEB``), case-sensitively for user names (and their capitalised form),
at a boundary: not a letter or digit, or a lower-to-upper case change.

:func:`gate` is the second pass, and it is wider than the first: it looks, in the text left
after the placeholders, for any identifying string as a *substring* of a word (``spotter2``,
``acmebillingapi``), home folder paths, git remotes, e-mail addresses, IP addresses, URL
credentials and query strings, any known secret format and shorter high-entropy tokens. Each
finding is a :class:`Finding`; a text with one is held back, never sent.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from openmemory_local.text.normalize import _family_re, _strip_dir, normalise
from openmemory_protocol.unicode14 import UNASSIGNED_RE

__all__ = [
    "Identity",
    "Finding",
    "PLACEHOLDERS",
    "GENERIC_BRANCHES",
    "GENERIC_DIRS",
    "GENERIC_USERS",
    "scrub",
    "commons_scrub",
    "COMMONS_PARTS",
    "gate",
    "project_names",
    "users_in_path",
    "entropy",
]

#: Every placeholder scrub writes.
PLACEHOLDERS = ("<secret>", "<email>", "<ip>", "<host>", "<url>", "<home>", "<path>", "<branch>", "<project>",
                "<username>", "<id>", "<time>", "<hash>", "<num>", "<name>")
#: Branch names that say nothing about anyone (not replaced, not looked for).
GENERIC_BRANCHES = frozenset("main master trunk develop development dev head staging production release".split())
#: Folder names that say nothing about anyone (a project's path parts that are not looked for).
GENERIC_DIRS = frozenset(
    """home users root projects project src source sources code work workspace workspaces dev devel
    development repos repo repositories git github gitlab sites apps tmp temp var srv opt mnt data documents
    desktop downloads private build builds worktrees checkouts checkout go usr local share lib bin media
    volumes clones""".split())
_WORKTREE_SUFFIX = re.compile(r"(?:[-_.](?:worktrees?|wt)|worktrees)$", re.I)
#: User names that name nobody in particular (not replaced, not looked for; as written:
#: ``USER``, a redaction's stand-in, is looked for).
GENERIC_USERS = frozenset("root admin administrator user nobody ubuntu debian runner vagrant ec2-user pi guest "
                          "docker node app www-data".split())


@dataclass(frozen=True)
class Identity:
    """What identifies this machine and one project (tuples of strings)."""

    users: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    #: Home folders (absolute paths) besides ``/home/*``, ``/Users/*`` and ``/root``.
    homes: tuple[str, ...] = ()
    #: The project family (``/src/app-worktrees/*`` or a folder) and its working directories.
    family: str | None = None
    projects: tuple[str, ...] = ()
    #: Project and folder names, replaced by ``<project>``.
    names: tuple[str, ...] = ()
    branches: tuple[str, ...] = ()
    #: Git remote URLs of the project (``git@github.com:acme/app.git``).
    remotes: tuple[str, ...] = ()
    emails: tuple[str, ...] = ()
    #: More strings the gate looks for and scrub does not replace: other projects' names and
    #: branches on this machine, the git user name, remote owners.
    watch: tuple[str, ...] = ()

    def remote_hosts(self) -> set[str]:
        return {h for h in (_remote_parts(r)[0] for r in self.remotes) if h}


@dataclass(frozen=True)
class Finding:
    """Something identifying left in a text: ``kind`` (``user``, ``host``, ``name``, ``home``,
    ``path``, ``remote``, ``email``, ``ip``, ``url``, ``secret``) and a short description."""

    kind: str
    what: str

    def __str__(self) -> str:
        return self.what


# --- secrets ------------------------------------------------------------------------------

#: Known secret formats: (description, pattern). The whole match becomes ``<secret>``.
SECRET_FORMATS: tuple[tuple[str, str], ...] = (
    ("a private key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY"
                      r"(?: BLOCK)?-----|.*)"),
    ("a JSON web token", r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}"),
    ("an AWS access key id", r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}\b"),
    ("a GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    ("a GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
    ("an npm token", r"\bnpm_[A-Za-z0-9]{30,}"),
    ("a PyPI token", r"\bpypi-[A-Za-z0-9_-]{30,}"),
    ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
    ("a Stripe key", r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"),
    ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
    ("an API key", r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}"),
    ("a Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}"),
)
_SECRET_RES = tuple((what, re.compile(p, re.S)) for what, p in SECRET_FORMATS)
_AUTH_HEADER = re.compile(r"(?i)\b(bearer|basic|token)(\s+)(?!<)[A-Za-z0-9._~+/=-]{8,}")
_KEY_VALUE = re.compile(
    r"(?i)(\b[\w.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"credentials?|authorization)\b[\"']?)(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|(?!<)[^\s,;&\"')\]}]+)")
_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b")
_URL = re.compile(r"\b([a-z][a-z0-9+.-]{1,15})://([^\s\"'`<>()\[\]{}]*)", re.I)
_SCP_REMOTE = re.compile(r"(?<![\w/.-])([\w.-]+)@([\w.-]+\.[a-z]{2,}|[\w-]+):([\w.~-]+/[\w./-]+)", re.I)
_IPV4 = re.compile(r"(?<![\w.])(?:\d{1,3}\.){3}\d{1,3}(?![\w.]*\w)")
_IPV6 = re.compile(r"(?<![\w:.])(?=[0-9A-Fa-f.]*:[0-9A-Fa-f.]*:)[0-9A-Fa-f:.]*[0-9A-Fa-f:](?![\w:])")
_TOKEN = re.compile(r"[A-Za-z0-9+/=_-]{16,}")
_PLACEHOLDER = re.compile(r"<(?:secret|email|ip|host|url|home|path|branch|project|username|id|time|hash|num|name)>")


def entropy(token: str) -> float:
    """Shannon entropy of ``token``, in bits per character."""
    if not token:
        return 0.0
    counts: dict[str, int] = {}
    for ch in token:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _secret_shaped(token: str, min_len: int, min_bits: float) -> bool:
    core = token.strip("=-_/+")
    if len(core) < min_len or not re.search(r"\d", core) or not re.search(r"[A-Za-z]", core):
        return False
    if re.fullmatch(r"[0-9a-fA-F]+", core):
        return False  # a hash (commit, digest): the volatile rules turn it into <hash>
    if "/" in core and not re.search(r"[A-Z]", core):
        return False  # a path of lower-case words and numbers, not a key
    if re.fullmatch(r"[a-z]+(?:[-_][a-z0-9]+)+", core) or re.fullmatch(r"[A-Za-z][a-z]+(?:[A-Z][a-z0-9]+)+", core):
        return False  # snake_case, kebab-case or CamelCase words
    return entropy(core) >= min_bits


def _high_entropy(text: str) -> str:
    return _TOKEN.sub(lambda m: "<secret>" if _secret_shaped(m.group(0), 20, 3.5) else m.group(0), text)


def mask_secrets(text: str) -> str:
    """``text`` with every secret the rules know (:data:`SECRET_FORMATS`, an authorization
    header, a ``password=``/``API_KEY=`` value, a long high-entropy token) as ``<secret>``, and
    nothing else changed: for what the engine shows of a command in the agent's own memory."""
    return _high_entropy(_secrets(text))


def _secrets(text: str) -> str:
    for _, pattern in _SECRET_RES:
        text = pattern.sub("<secret>", text)
    text = _AUTH_HEADER.sub(lambda m: f"{m.group(1)}{m.group(2)}<secret>", text)
    return _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}<secret>", text)


# --- hosts and URLs -------------------------------------------------------------------------

_INTERNAL_SUFFIXES = (".local", ".lan", ".internal", ".intranet", ".corp", ".home", ".localdomain", ".private",
                      ".home.arpa", ".test", ".example", ".invalid", ".svc", ".cluster.local")


_INTERNAL_HOST = re.compile(r"(?<![\w.@/-])[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9-]+)*(?:"
                            + "|".join(re.escape(s) for s in _INTERNAL_SUFFIXES) + r")(?![\w.-]*\w)")


def _loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain") or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


def _host_placeholder(host: str, ident: Identity) -> str:
    """``host`` as a commons text may show it."""
    bare = host.lower().rstrip(".")
    if _loopback(bare):
        return host
    if _is_ip(bare):
        return "<ip>"
    mine = {h.lower() for h in _host_names(ident)} | (ident.remote_hosts() - _PUBLIC_FORGES)
    if ("." not in bare or bare.endswith(_INTERNAL_SUFFIXES) or bare in mine
            or any(bare.endswith("." + h) for h in mine if "." in h)):
        return "<host>"
    return host


#: Public code forges: a remote's host there names nobody (its owner and repository do).
_PUBLIC_FORGES = frozenset({"github.com", "gitlab.com", "bitbucket.org", "codeberg.org", "sr.ht", "git.sr.ht"})


def _url(match: re.Match, ident: Identity) -> str:
    scheme, rest = match.group(1), match.group(2)
    trail = ""
    while rest and rest[-1] in ".,:;!?":
        trail = rest[-1] + trail
        rest = rest[:-1]
    authority, slash, path = rest.partition("/")
    authority = authority.rpartition("@")[2]  # credentials left out
    host, port = authority, ""
    if authority.startswith("["):
        host, _, port = authority[1:].partition("]")
        host = f"[{host}]"
    elif authority.count(":") == 1:
        host, _, port = authority.partition(":")
        port = ":" + port
    shown = _host_placeholder(host.strip("[]") if host.startswith("[") else host, ident)
    if shown == host.strip("[]"):
        shown = host
    path = path.split("?", 1)[0].split("#", 1)[0]  # query string and fragment left out
    if re.search(r"\.git(?:/|$)", path):
        return "<url>" + trail  # a clone URL: the project's own repository
    if shown in ("<ip>", "<host>"):
        return f"{scheme}://{shown}{slash}{path}{trail}" if path else f"{scheme}://{shown}{trail}"
    return f"{scheme}://{shown}{port}{slash}{path}{trail}"


def _ips(text: str) -> str:
    def ip(m: re.Match) -> str:
        value = m.group(0)
        try:
            address = ipaddress.ip_address(value)
        except ValueError:
            return value
        return value if address.is_loopback or address.is_unspecified else "<ip>"

    text = _IPV4.sub(ip, text)
    return _IPV6.sub(ip, text) if ":" in text else text


def _remote_parts(remote: str) -> tuple[str | None, str | None]:
    """(host, owner/repository) of a git remote URL."""
    remote = remote.strip()
    m = re.match(r"^[a-z][a-z0-9+.-]*://(?:[^@/]*@)?([^/:]+)(?::\d+)?/(.+)$", remote, re.I)
    if not m:
        m = re.match(r"^(?:[^@/]+@)?([^/:]+):(.+)$", remote)
    if not m:
        return None, None
    path = m.group(2).strip("/")
    if path.endswith(".git"):
        path = path[:-4]
    return m.group(1).lower(), path or None


# --- paths ------------------------------------------------------------------------------------

_SYSTEM_ROOTS = frozenset("usr bin sbin lib lib32 lib64 libexec etc dev proc sys tmp run nix System Library "
                          "Applications private var".split())
_PATH_CHARS = r"[^\s'\"`()\[\]{}<>,;|&=*]"
_ABS_PATH = re.compile(r"(?<![\w.:/~<>-])/" + _PATH_CHARS + r"*")
_HOME_PATH = re.compile(r"(?<![\w.:/-])(?:/home/[^/\s'\"`]+|/Users/[^/\s'\"`]+|/root(?=/|\b)|~(?=/))(/"
                        + _PATH_CHARS + r"*)?")
_WIN_HOME = re.compile(r"\b[A-Za-z]:\\Users\\[^\\\s'\"`]+((?:\\[^\\\s'\"`]*)*)")
_VAR_PUBLIC = ("/var/tmp", "/var/log", "/var/lib/apt", "/var/cache", "/var/folders", "/var/run")


def _home_path(match: re.Match, home: str = "<home>") -> str:
    rest = match.group(1) or ""
    if not rest or rest == "/":
        return home + rest
    first = rest[1:].split("/", 1)[0]
    return home + rest if first.startswith(".") else "<path>"


def _abs_path(match: re.Match) -> str:
    path = match.group(0)
    parts = path.split("/")
    root = parts[1] if len(parts) > 1 else ""
    if not root:
        return path
    if root == "var":
        return path if path.startswith(_VAR_PUBLIC) else "<path>"
    return path if root in _SYSTEM_ROOTS else "<path>"


def _relative(text: str, root: str) -> str:
    """Paths inside the project's folder become relative (``/home/me/app/lib/x.ex`` ->
    ``lib/x.ex``), and the folder itself ``.`` (``could not find `Cargo.toml` in `.```), not
    nothing (which left ``in ``` `` ``)."""
    text = re.sub(r"(?<![\w./~-])" + re.escape(root) + r"/?(?![\w./-])", ".", text)
    return _strip_dir(text, root)


def _paths(text: str, ident: Identity) -> str:
    fam = ident.family
    if fam and fam.endswith("/*") and fam[:-2] in text:  # a worktree itself is `.`, a path in it relative
        text = _family_re(fam).sub(lambda m: "" if m.group(0).endswith("/") else ".", text)
    for root in sorted({p.rstrip("/") for p in ident.projects if p and p.strip("/")}, key=len, reverse=True):
        if root in text:
            text = _relative(text, root)
        dashed = re.sub(r"[^A-Za-z0-9]", "-", root)
        if dashed in text:
            text = _strip_dir(text, dashed)
    for home in sorted({h.rstrip("/") for h in ident.homes if h and h.strip("/")}, key=len, reverse=True):
        if home in text:
            text = re.sub(r"(?<![\w.-])" + re.escape(home) + r"(/" + _PATH_CHARS + r"*)?(?![\w.-])",
                          _home_path, text)
    if "/" in text:
        text = _HOME_PATH.sub(_home_path, text)
        text = _ABS_PATH.sub(_abs_path, text)
    if ":\\" in text:
        text = _WIN_HOME.sub(lambda m: "<home>" + m.group(1) if m.group(1)[1:2] == "." else "<path>", text)
    return text


# --- names -------------------------------------------------------------------------------------


@lru_cache(maxsize=1024)
def _name_re(name: str, ignore_case: bool) -> re.Pattern:
    parts = [p for p in re.split(r"[-_. ]+", name) if p]
    body = r"[-_. ]?".join(re.escape(p) for p in parts) if len(parts) > 1 else re.escape(name)
    return re.compile(body, re.I if ignore_case else 0)


def _at_boundary(text: str, start: int, end: int) -> bool:
    if start > 0:
        before, first = text[start - 1], text[start]
        if before.isalnum() and not (before.islower() and first.isupper()):
            return False
    if end < len(text):
        last, after = text[end - 1], text[end]
        if after.isalnum() and not (last.islower() and after.isupper()):
            return False
    return True


def _replace_name(text: str, name: str, placeholder: str, ignore_case: bool) -> str:
    if not name or (name.lower() not in text.lower() and "-" not in name and "_" not in name and "." not in name):
        return text
    out, at = [], 0
    for m in _name_re(name, ignore_case).finditer(text):
        if m.start() < at or not _at_boundary(text, m.start(), m.end()):
            continue
        out.append(text[at:m.start()])
        out.append(placeholder)
        at = m.end()
    out.append(text[at:])
    return "".join(out)


#: Where git's own messages name a branch: a name there is a branch even when no transcript
#: field said so (``The current branch feature-x has no upstream branch``, ``On branch x``,
#: ``[x 1a2b3c4] message``, ``--set-upstream origin x``, ``branch 'x'``, ``HEAD -> x``).
_GIT_BRANCH = re.compile(
    r"(?:current branch |On branch |HEAD -> |refs/heads/|(?:--set-upstream|--set-upstream-to|-u) (?:origin |upstream )?"
    r"|(?<![\w-])branch '|Switched to (?:a new )?branch '|'origin/|origin/)([\w][\w./-]*[\w]|[\w])"
    r"|^\[([\w][\w./-]*) [0-9a-f]{7,40}\]|(?<=\s)\[([\w][\w./-]*) [0-9a-f]{7,40}\]")
#: Words that follow those phrases in git's prose, not names ("the current branch and set ...").
_GIT_BRANCH_WORDS = frozenset("""a an and are as at be by does for from has have in is it not of on or origin set that
    the this to up upstream was which with you your""".split())


def git_branches(text: str) -> set[str]:
    """The branch names git's messages in ``text`` name (generic ones, ``main``, left out)."""
    out = set()
    for m in _GIT_BRANCH.finditer(text):
        name = next(g for g in m.groups() if g)
        if name.lower() not in GENERIC_BRANCHES and name.lower() not in _GIT_BRANCH_WORDS and "<" not in name:
            out.add(name)
    return out


def _names(text: str, ident: Identity, skip: str | None = None) -> str:
    """Branch, project, host and user names replaced (``skip``: one name left alone)."""
    passes = (
        (sorted(_branches(ident) | git_branches(text), key=len, reverse=True), "<branch>", False),
        (sorted({n for n in ident.names if len(n) >= 2}, key=len, reverse=True), "<project>", True),
        (sorted(_host_names(ident), key=len, reverse=True), "<host>", True),
        (sorted(_user_forms(ident.users), key=len, reverse=True), "<username>", False),
    )
    for names, placeholder, ignore_case in passes:
        for name in names:
            if name != skip:
                text = _replace_name(text, name, placeholder, ignore_case)
    return text


def _host_names(ident: Identity) -> set[str]:
    return {h for h in ident.hosts if len(h) >= 3 and not _loopback(h.lower())}


def _branches(ident: Identity) -> set[str]:
    out = set()
    for branch in ident.branches:
        if not branch or branch.lower() in GENERIC_BRANCHES:
            continue
        out.add(branch)
        tail = branch.rsplit("/", 1)[-1]
        if len(tail) >= 3 and tail.lower() not in GENERIC_BRANCHES:
            out.add(tail)
    return {b for b in out if len(b) >= 2}


def _user_forms(users) -> set[str]:
    out = set()
    for user in users:
        if not user or len(user) < 2 or user in GENERIC_USERS:
            continue
        out.add(user)
        if user.islower():
            out.add(user.capitalize())
    return out


def project_names(paths, family: str | None = None, users=()) -> tuple[str, ...]:
    """The identifying folder names of working directories: each one's own name (a worktree's
    is its branch's), its ``-worktrees`` folder and that folder's project name, and any other
    folder of the path that is not a generic one (:data:`GENERIC_DIRS`) or a user name."""
    names: list[str] = []
    skip = {u.lower() for u in users}
    for path in paths:
        parts = [p for p in (path or "").split("/") if p and p != "*"]
        if not parts:
            continue
        if len(parts) >= 2 and parts[0] in ("home", "Users"):
            parts = parts[2:]
        elif parts[0] == "root":
            parts = parts[1:]
        for part in parts:
            if part.lower() in GENERIC_DIRS or part.lower() in skip or len(part) < 2:
                continue
            names.append(part)
            stripped = _WORKTREE_SUFFIX.sub("", part)
            if stripped != part and len(stripped) >= 2:
                names.append(stripped)
    if family and family.endswith("/*"):
        base = family[:-2].rstrip("/").rsplit("/", 1)[-1]
        stripped = _WORKTREE_SUFFIX.sub("", base)
        names.extend(n for n in (base, stripped) if len(n) >= 2 and n.lower() not in GENERIC_DIRS)
    return tuple(dict.fromkeys(names))


def users_in_path(path: str | None) -> str | None:
    """The user of a home folder path (``/home/me/...``, ``/Users/me/...``), or None."""
    m = re.match(r"^/(?:home|Users)/([^/]+)", path or "")
    return m.group(1) if m else None


# --- the passes ----------------------------------------------------------------------------------

# What the wire refuses in a text (PROTOCOL.md, "Text fields"): controls, separators, invisible
# format characters, noncharacters; and code points Unicode 14.0 has not assigned.
_INVISIBLE = re.compile(
    "[\u0000-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufdd0-\ufdef\ufe00-\ufe0f\ufeff\uffa0"
    "\ufff0-\ufffb\ufffe\uffff\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
    "|[\U0001fffe-\U0001ffff\U0002fffe-\U0002ffff\U0003fffe-\U0003ffff\U0004fffe-\U0004ffff"
    "\U0005fffe-\U0005ffff\U0006fffe-\U0006ffff\U0007fffe-\U0007ffff\U0008fffe-\U0008ffff"
    "\U0009fffe-\U0009ffff\U000afffe-\U000affff\U000bfffe-\U000bffff\U000cfffe-\U000cffff"
    "\U000dfffe-\U000dffff\U000efffe-\U000effff\U000ffffe-\U000fffff\U0010fffe-\U0010ffff]")

_VOLATILE = {"{id}": "<id>", "{time}": "<time>", "{hash}": "<hash>", "{num}": "<num>", "{branch}": "<branch>"}
_VOLATILE_RE = re.compile(r"\{(?:id|time|hash|num|branch)\}")


def scrub(text: str, ident: Identity) -> str:
    """``text`` with everything identifying replaced (see the module docstring)."""
    if not text:
        return ""
    text = " ".join(text.split())  # white space first: a line break is a control character
    text = UNASSIGNED_RE.sub("", _INVISIBLE.sub("", text))
    text = _URL.sub(lambda m: _url(m, ident), text)
    text = _SCP_REMOTE.sub("<url>", text)  # git@host:owner/repo.git: the project's own remote
    text = _secrets(text)
    text = _EMAIL.sub("<email>", text)
    text = _INTERNAL_HOST.sub("<host>", text)
    text = _ips(text)
    text = _paths(text, ident)
    text = _names(text, ident)
    # The engine's volatile-token rules (uuids, times, hashes, numbers, paths with ids); the
    # placeholders above hold no digit, so they pass through unchanged.
    text = normalise(text)
    text = _VOLATILE_RE.sub(lambda m: _VOLATILE[m.group(0)], text)
    text = _high_entropy(text)
    return " ".join(text.split())


def _compact(word: str) -> str:
    return re.sub(r"[-_.]", "", word.lower())


_WORDS = re.compile(r"[^\s'\"`()\[\]{}<>,;|&=:/\\@!?*]+")


def _path_in(path: str, text: str) -> bool:
    """``path`` in ``text`` as a path of its own: ``/root`` in ``cat /root/.netrc`` but not in
    ``cmd/root.go`` (a Go project's file, which held every lesson naming it back when the user
    is root, as in a container)."""
    return re.search(r"(?<![\w.-])" + re.escape(path) + r"(?![\w.-])", text) is not None


def gate(text: str, ident: Identity) -> list[Finding]:
    """What identifying is left in ``text`` (see the module docstring); [] if nothing."""
    findings: list[Finding] = []
    seen: set[str] = set()

    def found(kind: str, what: str) -> None:
        if what not in seen:
            seen.add(what)
            findings.append(Finding(kind, what))

    bare = _PLACEHOLDER.sub(" ", text)
    words = [w for w in _WORDS.findall(bare) if w]
    compact_words = [_compact(w) for w in words]

    def has_name(name: str, case_sensitive: bool = False) -> bool:
        if case_sensitive:  # a user name: inside any word if long, else as an identifier part
            if len(name) >= 5:
                return any(name in w for w in words)
            return _replace_name(bare, name, "\x00", False) != bare
        c = _compact(name)
        if len(c) < 2:
            return False
        if len(c) < 4:
            return c in compact_words
        return any(c in w for w in compact_words)

    lowered = text.lower()

    def partly_replaced(name: str) -> bool:
        # A name whose part another name replaced (``dana-thinkpad2`` -> ``<username>-thinkpad2``).
        form = _names(name, ident, skip=name)
        rest = _PLACEHOLDER.sub("", form)
        return form != name and len(re.sub(r"[^A-Za-z0-9]", "", rest)) >= 3 and form.lower() in lowered

    for user in _user_forms(ident.users):
        if has_name(user, case_sensitive=True):
            found("user", f"the user name {user!r}")
    for host in _host_names(ident):
        if has_name(host) or partly_replaced(host):
            found("host", f"the host name {host!r}")
    for branch in _branches(ident):
        if has_name(branch) or partly_replaced(branch):
            found("name", f"the branch name {branch!r}")
    for name in ident.names:
        if len(name) >= 2 and (has_name(name) or partly_replaced(name)):
            found("name", f"the project's folder name {name!r}")
    for name in ident.watch:
        if len(name) >= 3 and (has_name(name) or partly_replaced(name)):
            found("name", f"the name {name!r} (another project, branch or account on this machine)")
    for home in ident.homes:
        if home and home.rstrip("/") and _path_in(home.rstrip("/"), bare):
            found("home", f"the home folder {home!r}")
    if re.search(r"(?<![\w.-])(?:/home/|/Users/|/root/)|\b[A-Za-z]:\\Users\\", bare):
        found("home", "a home folder path")
    for project in ident.projects:
        if project and project.strip("/") and _path_in(project.rstrip("/"), bare):
            found("path", f"the project's folder {project!r}")
    for remote in ident.remotes:
        host, path = _remote_parts(remote)
        if remote in bare or (path and path.lower() in bare.lower()):
            found("remote", f"the git remote {remote!r}")
        if host and host not in _PUBLIC_FORGES and has_name(host):
            found("remote", f"the git remote's host {host!r}")
    for email in ident.emails:
        if email and email.lower() in bare.lower():
            found("email", f"the e-mail address {email!r}")
    if _EMAIL.search(bare):
        found("email", "an e-mail address")
    if _SCP_REMOTE.search(bare):
        found("remote", "a git remote (user@host:path)")
    if _INTERNAL_HOST.search(bare):
        found("host", "an internal host name")
    for m in [*_IPV4.finditer(bare), *_IPV6.finditer(bare)]:
        try:
            address = ipaddress.ip_address(m.group(0))
        except ValueError:
            continue
        if not (address.is_loopback or address.is_unspecified):
            found("ip", "an IP address")
    for m in _URL.finditer(bare):
        rest = m.group(2)
        if "@" in rest.split("/", 1)[0] or "?" in rest:
            found("url", "credentials or a query string in a URL")
    for what, pattern in _SECRET_RES:
        m = pattern.search(text)
        if m:
            found("secret", f"{what} ({_mask(m.group(0))})")
    if _AUTH_HEADER.search(text):
        found("secret", "an authorization header")
    if _KEY_VALUE.search(text):
        found("secret", "a password, token or key value")
    for m in _TOKEN.finditer(bare):
        if _secret_shaped(m.group(0), 16, 3.2):
            found("secret", f"a high-entropy token ({_mask(m.group(0))})")
    return findings


def _mask(secret: str) -> str:
    return secret[:4] + "\u2026" if len(secret) > 4 else "\u2026"


# --- the commons form: an allow-list ---------------------------------------------------------------

#: What a part of a claim is, for :func:`commons_scrub`.
COMMONS_PARTS = ("failure", "command", "path", "situation")
_ALLOW_DIR = Path(__file__).parent.parent / "data" / "commons-allow"
#: The lists whose words are allowed in any case (lower, Capitalised, UPPER); the others
#: (packages, file names, words) are allowed as written, and a word written there in lower case
#: only in lower case (``acme`` the package is not ``ACME`` the company).
_ANY_CASE_LISTS = ("programs", "hosts", "errors", "errors-python", "paths")


@dataclass(frozen=True)
class _Allow:
    exact: frozenset[str]     # as written: TypeError, GitHub, Dockerfile, DATABASE_URL
    shouted: frozenset[str]   # English verbs and function words, allowed in upper case (STOP, NOT, FORMAT)
    any_case: frozenset[str]  # lower-cased, allowed in any case: git, github.com, enoent, forbidden, src, json
    lower: frozenset[str]     # allowed in lower case only: packages (react, acme), lower-case words of the lists
    extensions: frozenset[str]
    hosts: frozenset[str]
    scopes: frozenset[str]    # npm scopes of listed packages (@types, @testing-library)

    def folded(self, word: str) -> bool:
        """Whether ``word`` (not mixed case) is allowed by the folded lists."""
        lower = word.lower()
        return lower in self.any_case or (word == lower and lower in self.lower)


def _list_words(path: Path) -> list[str]:
    return _list_words_text(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _allow() -> _Allow:
    import openmemory_protocol

    exact: set[str] = set()
    any_case: set[str] = set()
    lower: set[str] = set()
    extensions: set[str] = set()
    for path in sorted(_ALLOW_DIR.glob("*.txt")):
        name = path.stem
        text = path.read_text(encoding="utf-8")
        if name == "files" and "# extensions" in text:
            extensions.update(w.lower() for w in _list_words_text(text.split("# extensions", 1)[1]))
        for word in _list_words_text(text):
            exact.add(word)
            if name in _ANY_CASE_LISTS:
                any_case.add(word.lower())
            elif word.islower() or not any(c.isalpha() for c in word):
                lower.add(word)
    # user, branch and folder names that name nobody (scrub does not replace them either)
    lower.update(GENERIC_USERS | GENERIC_BRANCHES | GENERIC_DIRS | GENERIC_QUOTED)
    data = Path(openmemory_protocol.__file__).parent / "data"
    any_case.update(w.lower() for w in _list_words(data / "tech-words.txt"))
    function_words = {w for w in _list_words(data / "function-words.txt") if not w.startswith("[")}
    any_case.update(function_words)
    verbs = {line.split()[0] for line in _list_words_lines(data / "verbs.txt")}
    hosts = frozenset(w.lower() for w in _list_words(_ALLOW_DIR / "hosts.txt"))
    scopes = frozenset(w[1:].split("/", 1)[0] for w in lower if w.startswith("@") and "/" in w)
    return _Allow(frozenset(exact), frozenset(verbs | function_words), frozenset(any_case), frozenset(lower),
                  frozenset(extensions), hosts, scopes)


def _list_words_lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")]


def _list_words_text(text: str) -> list[str]:
    return [w for line in text.splitlines() if not line.startswith("#") for w in line.split()]


def _english(word: str) -> bool:
    from openmemory_protocol.observation import is_english_word

    return word.isascii() and is_english_word(word)


#: Top-level domains a host name ends with (a dotted word ending so is a host, not a module).
_TLDS = frozenset("""com org net io dev app co ai sh me cloud info biz us eu uk de fr nl se no fi dk pl cz es it
    pt ch at be ru cn jp kr in au ca br mx tech xyz online site gg tv fm so to ly gl ms page run codes
    systems group company studio works email network services solutions digital agency""".split())
_VERSION = re.compile(r"^v?\d+(?:[._-]\d+)*(?:[._-]?(?:a|b|rc|dev|post|alpha|beta|pre)\d*)?$", re.I)
_CODE = re.compile(r"^[A-Z]{1,4}\d{2,6}$")  # an error code: E0425, TS2307, C2065, SC2086
_ALNUM_DIGITS = re.compile(r"^([A-Za-z]+)(\d+)([A-Za-z]*)$")
#: A word of a commons text: letters, digits and the marks that join an identifier's parts.
_COMMONS_WORD = re.compile(r"[^\W_](?:[\w.+-]*[^\W_])?(?:'[A-Za-z]+\b)?|_+[^\W_][\w.+-]*[^\W_]|_+[^\W_]")
_COMMONS_PLACEHOLDER = re.compile(r"<(?:secret|email|ip|host|url|home|path|branch|project|username|id|time|hash|num"
                                  r"|name)>")
#: Where a clause starts, in prose: what may stand before a word (after spaces) for a
#: Capitalised English word there to be a sentence's first word, not a name.
_CLAUSE_MARKS = frozenset(".!?:;])|*#-\u2014\u2013")


def _plain_word_allowed(word: str, clause_start: bool, glued: bool, a: _Allow) -> bool:
    """A word of letters only (no separators)."""
    if len(word) == 1 or word in a.exact:
        return True
    lower = word.lower()
    if word.islower():
        return a.folded(word) or _english(lower) or _prefixed_english(lower)
    if word.isupper():  # ACME is a name; ERROR, JSON, PATH, STOP, NOT are not
        return a.folded(word) or lower in a.shouted
    if word[0].isupper() and word[1:].islower():
        if a.folded(word):
            return True
        return (clause_start or glued) and (_english(lower) or _prefixed_english(lower))
    return False  # camel case not allowed whole


_PREFIXES = ("un", "re", "non", "pre", "de", "dis", "mis", "sub", "over", "under", "multi", "auto", "co")


def _prefixed_english(word: str) -> bool:
    """An English word with a prefix WordNet does not list it with (``unterminated``)."""
    return any(word.startswith(p) and len(word) - len(p) >= 4 and _english(word[len(p):]) for p in _PREFIXES)


def _word_allowed(word: str, clause_start: bool, glued: bool, a: _Allow, *, flag: bool = False) -> bool:
    """Whether one word of a commons text may stay (see :func:`commons_scrub`)."""
    if word in a.exact or (not _mixed_case(word) and a.folded(word)):
        return True
    core = word.strip("_-.+")
    if not core:
        return True
    if core != word:
        return _word_allowed(core, clause_start, True, a, flag=flag)
    if _VERSION.match(word) or word.isdigit():
        return True
    if "'" in word:  # doesn't, user's, I'm: English as a whole, or a word and its 's
        head, _, tail = word.partition("'")
        lower = word.lower()
        if (word.islower() or clause_start or glued or word[0] == "I") and _english(lower):
            return True
        return tail.lower() in ("s", "t") and _word_allowed(head, clause_start, glued, a)
    if "." in word:
        return _dotted_allowed(word, a)
    if flag and re.search(r"[-_]", word):
        return all(_word_allowed(p, False, True, a) for p in re.split(r"[-_]+", word) if p)
    if re.search(r"[-_+]", word):
        return False  # an identifier with separators: a name unless allowed whole
    if _CODE.match(word):
        return True
    m = _ALNUM_DIGITS.match(word)
    if m:  # python3, sha256, utf8, http2, ipv6; dana2 is a name
        head, _, tail = m.groups()
        # the head on a list of programs, tools, errors or paths, not any English word or
        # package: acme2 may name a machine (boto3, psycopg2 are listed whole)
        return (not tail or tail.lower() in ("s", "x", "d", "k", "m", "g", "b", "ms")) and (
            head.lower() in a.any_case or len(head) == 1)
    if not word.isalpha():
        return False
    return _plain_word_allowed(word, clause_start, glued, a)


@lru_cache(maxsize=65536)
def _allowed_cached(word: str, clause_start: bool, glued: bool, flag: bool) -> bool:
    return _word_allowed(word, clause_start, glued, _allow(), flag=flag)


def _mixed_case(word: str) -> bool:
    """camelCase or a capital inside (``McDonald``): a word the folded lists do not cover."""
    letters = re.sub(r"[^A-Za-z]", "", word)
    return len(letters) > 1 and not (letters.islower() or letters.isupper() or letters[1:].islower())


def _looks_like_host(word: str) -> bool:
    labels = word.lower().split(".")
    return (len(labels) >= 2 and labels[-1] in _TLDS and all(re.fullmatch(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?", p)
                                                            for p in labels))


def _dotted_allowed(word: str, a: _Allow) -> bool:
    """A word with dots: a file name, a host, a module path (``os.path``, ``Ecto.Repo``)."""
    lower = word.lower()
    if lower in a.hosts:
        return True
    stem, _, ext = word.rpartition(".")
    if ext.lower() in a.extensions and stem and not _looks_like_host(word):
        return _word_allowed(stem, False, True, a)
    if _looks_like_host(word):
        return False
    return all(p and _word_allowed(p, False, True, a) for p in word.split("."))


_KINDS = {"<secret>": "secret", "<email>": "email", "<ip>": "ip", "<host>": "host", "<url>": "remote",
          "<home>": "home", "<path>": "path", "<branch>": "name", "<project>": "name", "<username>": "user",
          "<name>": "name"}
_WHAT = {"<secret>": "a secret", "<email>": "an e-mail address", "<ip>": "an IP address", "<host>": "a host name",
         "<url>": "a git remote or clone URL", "<home>": "a home folder", "<path>": "an absolute path",
         "<branch>": "a branch name", "<project>": "the project's name", "<username>": "a user name",
         "<name>": "a word not on the allow-list"}


def _masked(value: str, placeholder: str) -> str:
    value = value.strip("'\"`()[]{},;:")
    if placeholder == "<secret>":
        return f"{len(value)} characters"
    return (value[:2] + "\u2026" if len(value) > 3 else "\u2026") + f" {len(value)} characters"


def _scrub_findings(before: str, after: str) -> list[Finding]:
    """What :func:`scrub` replaced, from the words it changed (volatile tokens, which name
    nobody, are not findings). Scrub replaces words in place, a run of words at most by one
    placeholder word (a key block, a header's value): the two word lists are walked together,
    a changed word's original run ending where the next word of the output is met again
    (looked for at most 64 words ahead): linear in the text, unlike a general diff."""
    old, new = before.split(), after.split()
    findings = []
    i = 0
    for j, word in enumerate(new):
        if i < len(old) and old[i] == word:
            i += 1
            continue
        following = new[j + 1] if j + 1 < len(new) else None
        k = i + 1
        if following is not None:
            for ahead in range(i + 1, min(len(old), i + 65)):
                if old[ahead] == following:
                    k = ahead
                    break
        else:
            k = len(old)
        gone = " ".join(old[i:k])
        for placeholder in _COMMONS_PLACEHOLDER.findall(word):
            if placeholder in _KINDS and placeholder not in gone:
                findings.append(Finding(_KINDS[placeholder], f"{_WHAT[placeholder]} ({_masked(gone, placeholder)})"))
        i = max(k, i + 1)
    return findings


#: Hosts whose first path segments are an owner and a repository or image: names whatever
#: their words (``github.com/orange/warehouse``).
_OWNER_HOSTS = ("github.com", "gitlab.com", "bitbucket.org", "codeberg.org", "ghcr.io", "quay.io", "docker.io",
                "hub.docker.com", "registry.gitlab.com", "raw.githubusercontent.com", "gist.github.com", "gcr.io",
                "sr.ht", "git.sr.ht", "huggingface.co")
_OWNER_PATH = re.compile(r"(?<![\w.-])((?:https?://|ssh://|git://)?(?:www\.)?(?:" + "|".join(re.escape(h) for h in _OWNER_HOSTS)
                         + r")[/:])(~?[\w.-]+)(?:/([\w.-]+))?", re.I)
#: ``owner/repo.git``: both are names.
_REPO_PATH = re.compile(r"(?<![\w/.<>-])([\w.-]+)/([\w.-]+?)(\.git)\b")
#: ``user@host`` without a top-level domain (``deploy@buildbox``): a user and a host.
_USER_AT = re.compile(r"(?<![\w.@/-])([A-Za-z_][\w.-]*)@([A-Za-z][\w-]*(?:\.[\w-]+)*)(?![\w@-])")
#: Nouns whose quoted value is a name, whatever its words (``role "reporting"``,
#: ``namespace "payments"``); GENERIC_QUOTED values name nobody.
_NAMING_NOUNS = ("user", "username", "role", "database", "db", "schema", "namespace", "bucket", "host", "hostname",
                 "organization", "organisation", "org", "owner", "repository", "repo", "project", "customer", "tenant",
                 "account", "team", "cluster", "queue", "topic", "channel", "workspace", "realm", "server",
                 "domain", "group", "company", "client", "service", "app", "application", "container", "volume",
                 "network", "index", "keyspace", "vhost", "login", "member", "person", "author", "committer")
_QUOTED_NAME = re.compile(r"(?i)\b((?:" + "|".join(_NAMING_NOUNS) + r")s?)(:?\s+|=)(['\"`\u2018\u201c])([^'\"`\u2019\u201d<>]{1,80})"
                          r"(['\"`\u2019\u201d])")
GENERIC_QUOTED = frozenset("""default postgres template0 template1 public root admin main master origin test dev
    development prod production staging kube-system kube-public kube-node-lease localhost local none null
    nobody system mysql information_schema sys guest anonymous""".split())


def _context_names(text: str, a: "_Allow") -> tuple[str, list[Finding]]:
    """What the shape around a word says is a name, even if the word is English: a forge's
    owner and repository, ``owner/repo.git``, ``user@host``, a quoted value after a naming
    noun (``role "reporting"``)."""
    findings: list[Finding] = []

    def name(value: str, placeholder: str = "<name>") -> str:
        if _COMMONS_PLACEHOLDER.fullmatch(value) or not value:
            return value
        findings.append(Finding(_KINDS[placeholder], f"{_WHAT[placeholder]} ({_masked(value, placeholder)})"))
        return placeholder

    def owner(m: re.Match) -> str:
        repo = m.group(3)
        return m.group(1) + name(m.group(2)) + ("/" + (name(repo) if repo else "") if repo is not None else "")

    text = _OWNER_PATH.sub(owner, text)
    text = _REPO_PATH.sub(lambda m: f"{name(m.group(1))}/{name(m.group(2))}{m.group(3)}", text)

    def user_at(m: re.Match) -> str:
        user, host = m.group(1), m.group(2)
        shown_user = user if user.lower() in GENERIC_USERS or user.lower() in ("git", "postgres") else name(user)
        shown_host = host if host.lower() in a.hosts or _loopback(host.lower()) else name(host, "<host>")
        return f"{shown_user}@{shown_host}"

    if "@" in text:
        text = _USER_AT.sub(user_at, text)

    def quoted(m: re.Match) -> str:
        value = m.group(4)
        if value.lower() in GENERIC_QUOTED or _COMMONS_PLACEHOLDER.fullmatch(value) or value.lower() in a.hosts:
            return m.group(0)
        kind = "<host>" if m.group(1).lower() in ("host", "hostname", "server", "domain") else "<name>"
        return f"{m.group(1)}{m.group(2)}{m.group(3)}{name(value, kind)}{m.group(5)}"

    text = _QUOTED_NAME.sub(quoted, text)
    return text, findings


#: A tag (``<tool_use_error>``, not a placeholder) or an arrow (``->``, ``=>``) ends here: a
#: clause starts after it.
_TAG_OR_ARROW = re.compile(r"(?:<(?!(?:secret|email|ip|host|url|home|path|branch|project|username|id|time|hash|num"
                           r"|name)>)/?[A-Za-z_][\w-]*>|[-=]>)\Z")
_OPTION_START = re.compile(r"(?:^|(?<=[\s=\"'(]))--?\Z")


def _allow_pass(text: str, part: str) -> tuple[str, list[Finding]]:
    a = _allow()
    text, findings = _context_names(text, a)
    out: list[str] = []
    at = 0
    prose = part == "failure"
    command = part in ("command", "situation")
    for m in _COMMONS_WORD.finditer(text):
        start, end = m.start(), m.end()
        word = m.group(0)
        if start < at:
            continue
        # a placeholder's name is not a word: <project>, <num>
        if start > 0 and text[start - 1] == "<" and text.startswith(">", end) and \
                _COMMONS_PLACEHOLDER.fullmatch(text[start - 1:end + 1]):
            continue
        # what stands before the word, spaces skipped (scrub left single spaces): not a copy of
        # the text before it, which made a long text quadratic
        stop = start - 1 if start > 0 and text[start - 1] == " " else start
        mark = text[stop - 1] if stop > 0 else ""
        glued = start > 0 and text[start - 1] in ">_-." and _COMMONS_PLACEHOLDER.search(text, max(0, start - 12), start)
        clause_start = (prose and (not mark or mark in _CLAUSE_MARKS or text.endswith("<num>", 0, stop)
                                   or mark == ">" and _TAG_OR_ARROW.search(text, max(0, stop - 40), stop) is not None
                                   or (not mark.isascii() and not mark.isalnum()))
                        or command and mark in ("'", '"') and (stop < 2 or text[stop - 2] in " ="))
        flag = _OPTION_START.search(text, max(0, start - 3), start) is not None  # -n, --set-upstream
        if _allowed_cached(word, clause_start, bool(glued), flag):
            continue
        if text[start - 1:start] == "@" and text.startswith("/", end) and word.lower() in a.scopes:
            continue  # a listed package's npm scope: @types/node
        if "." in word.strip(".") and not _looks_like_host(word):
            # a file name keeps its extension, a module path its allowed parts (lib/<name>.ex,
            # <name>.Repo): each part that is not allowed becomes <name>
            parts = word.split(".")
            ext = parts[-1].lower() in a.extensions and len(parts) > 1
            shown = []
            for i, p in enumerate(parts):
                if not p or (ext and i == len(parts) - 1) or _word_allowed(p, False, True, a):
                    shown.append(p)
                else:
                    findings.append(Finding("name", f"{_WHAT['<name>']} ({_masked(p, '<name>')})"))
                    shown.append("<name>")
            shown_text = ".".join(shown)
            # adjacent <name>s say no more than one
            shown_text = re.sub(r"<name>(?:\.<name>)+", "<name>", shown_text)
            out.append(text[at:start])
            out.append(shown_text)
            at = end
            continue
        placeholder = "<host>" if _looks_like_host(word) else "<name>"
        findings.append(Finding("host" if placeholder == "<host>" else "name",
                                f"{'a host name not on the allow-list' if placeholder == '<host>' else _WHAT['<name>']}"
                                f" ({_masked(word, placeholder)})"))
        out.append(text[at:start])
        out.append(placeholder)
        at = end
    out.append(text[at:])
    return "".join(out), findings


def commons_scrub(text: str, ident: Identity, part: str) -> tuple[str, list[Finding]]:
    """``text`` as it may leave the machine in one ``part`` of a commons claim (``failure``:
    an error line, prose; ``command``: a shell command line; ``path``: a relative path;
    ``situation``: program heads), and what was replaced.

    First :func:`scrub` (this machine's identity, secrets, paths, volatile tokens), then the
    allow-list: every word that is not a program, well-known public tool, package or host, a
    word of the error vocabulary, a file name or extension, a common path segment, or an
    English word in the case the rule allows, becomes ``<name>`` (``<host>`` when it is shaped
    as a host name); see docs/sharing.md for the lists and the rule. The findings say what was
    replaced: a kind and a masked description, never the replaced text itself."""
    if not isinstance(text, str):
        raise TypeError(f"commons_scrub takes text (str), not {type(text).__name__}")
    if part not in COMMONS_PARTS:
        raise ValueError(f"unknown part {part!r}: one of {', '.join(COMMONS_PARTS)}")
    if not text:
        return "", []
    flat = " ".join(text.split())
    scrubbed = scrub(text, ident)
    findings = _scrub_findings(flat, scrubbed)
    allowed, more = _allow_pass(scrubbed, part)
    return allowed, findings + more
