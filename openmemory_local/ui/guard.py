"""Who may use the page: the rules of ``openmemory ui``'s door, as pure code over a request.

The page is served on 127.0.0.1 only, to the person who started it. Every request passes
:meth:`Guard.check` before anything else runs:

1. The peer address must be a loopback address (the socket is bound to 127.0.0.1; this
   is a second lock on the same door).
2. ``Host`` must be ``127.0.0.1:<port>`` or ``localhost:<port>``: a page of another site
   whose name an attacker re-points at 127.0.0.1 (DNS rebinding) sends its own name, and is
   refused.
3. An ``Origin``, when a browser sends one, must be this page's: a cross-site ``fetch`` or
   form post is refused.
4. The request must belong to a session: ``openmemory ui`` prints a URL carrying a token (as
   Jupyter does), good while the page runs; a visit with it from a browser without a session
   gets one, a session cookie (``HttpOnly``, ``SameSite=Lax``, named after the port), and is
   redirected to the same URL without the token, so it stays out of the browser's history. A
   second tab, a second window or another browser on this machine signs in with the same link;
   a tab opened at ``localhost:<port>`` without a session there is sent to ``127.0.0.1:<port>``,
   where the browser keeps its cookie. An unknown or missing token without a session is
   refused. A second token, for the browser that ``openmemory ui`` opens itself, works the same
   way.
5. A request that changes something (any method but GET and HEAD) must come from the page
   (``Origin`` present and ours) and carry the session's CSRF token, in the
   ``X-CSRF-Token`` header or the ``csrf`` form field (:meth:`Guard.check_csrf`).

Refusals are 403 with the reason. No state changes on GET: opening a search result (which
touches the memory, as recall does) is a POST.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode

__all__ = ["Guard", "Session", "Verdict", "SAFE_METHODS"]

SAFE_METHODS = frozenset({"GET", "HEAD"})


@dataclass
class Session:
    id: str
    csrf: str
    flash: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    """``ok`` (go on, with ``session``), ``exchange`` (set the cookie, redirect to ``location``)
    or ``refuse`` (403, ``reason``)."""

    action: str
    session: Session | None = None
    reason: str = ""
    location: str = ""
    cookie: str = ""


def _loopback(host: str | None) -> bool:
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Guard:
    """Tokens, sessions and the checks of one running page (on ``port``)."""

    def __init__(self, port: int):
        self.port = port
        self.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})
        self.origins = frozenset(f"http://{host}" for host in self.hosts)
        self.cookie_name = f"openmemory-ui-{port}"
        self._tokens: set[str] = set()
        self._sessions: dict[str, Session] = {}

    # --- tokens and sessions -------------------------------------------------------------

    def new_token(self) -> str:
        """A token for a URL, good while the page runs (each browser that opens it gets a session)."""
        token = secrets.token_urlsafe(32)
        self._tokens.add(token)
        return token

    def url(self, token: str, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}?{urlencode({'token': token})}"

    def _known(self, token: str) -> bool:
        return any(hmac.compare_digest(known, token) for known in self._tokens)

    def _new_session(self) -> Session:
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32))
        self._sessions[session.id] = session
        return session

    def session(self, cookie_header: str | None) -> Session | None:
        value = _cookie(cookie_header or "", self.cookie_name)
        if not value:
            return None
        for sid, session in self._sessions.items():
            if hmac.compare_digest(sid, value):
                return session
        return None

    def set_cookie(self, session: Session) -> str:
        return f"{self.cookie_name}={session.id}; HttpOnly; SameSite=Lax; Path=/"

    # --- the checks ------------------------------------------------------------------------

    def check(self, method: str, path: str, query_string: str, headers: dict[str, str],
              client_host: str | None) -> Verdict:
        """The verdict on one request (``headers``: lower-case names)."""
        if not _loopback(client_host):
            return Verdict("refuse", reason="this page is served to this machine only")
        host = headers.get("host", "")
        if host not in self.hosts:
            return Verdict("refuse", reason=f"Host {host!r} is not this page's (127.0.0.1:{self.port})")
        origin = headers.get("origin")
        if origin is not None and origin not in self.origins:
            return Verdict("refuse", reason=f"Origin {origin!r} is not this page's: cross-site requests are refused")
        session = self.session(headers.get("cookie"))
        query = parse_qsl(query_string, keep_blank_values=True)
        token = next((value for key, value in query if key == "token"), None)
        if token is not None and method in SAFE_METHODS:
            rest = [(key, value) for key, value in query if key != "token"]
            location = path + (f"?{urlencode(rest)}" if rest else "")
            if session is not None:  # a browser that already has its session (a second tab): the same one
                return Verdict("exchange", session, location=location)
            if self._known(token):
                session = self._new_session()
                return Verdict("exchange", session, location=location, cookie=self.set_cookie(session))
            return Verdict("refuse", reason="this link's token is not this page's (a page started earlier?): "
                           "open the link that this `openmemory ui` printed")
        if session is None and method in SAFE_METHODS and host.startswith("localhost:"):
            # the browser keeps the session's cookie for 127.0.0.1: a tab opened at localhost goes there
            return Verdict("exchange", location=f"http://127.0.0.1:{self.port}{path}"
                           + (f"?{query_string}" if query_string else ""))
        if session is None:
            return Verdict("refuse", reason="open the link that `openmemory ui` printed (it carries the page's token)")
        if method not in SAFE_METHODS and origin is None:
            return Verdict("refuse", reason=f"a {method} must come from the page itself (no Origin)")
        return Verdict("ok", session)

    def check_csrf(self, session: Session, header: str | None, body: bytes, content_type: str) -> bool:
        """Whether a state-changing request carries ``session``'s CSRF token."""
        supplied = header
        if supplied is None and content_type.split(";", 1)[0].strip() == "application/x-www-form-urlencoded":
            supplied = next((v for k, v in parse_qsl(body.decode("latin-1"), keep_blank_values=True) if k == "csrf"),
                            None)
        return supplied is not None and hmac.compare_digest(supplied.encode(), session.csrf.encode())


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value.strip()
    return None
