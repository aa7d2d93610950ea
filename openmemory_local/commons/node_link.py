"""The engine's link to its commons node: the node's local HTTP API, and nothing else.

The engine imports nothing of ``openmemory_node`` nor of libp2p (a user without a node still
has the whole single-agent memory). It finds the node from the node's data folder
(:attr:`openmemory_local.core.config.Config.node_home`: ``--node-home``, else
``$OPENMEMORY_NODE_HOME``, else ``[node] home`` in the engine's ``config.toml``, else the
node's default folder), where a running daemon leaves:

* ``api.addr``: ``HOST:PORT`` of its local API (removed when the daemon stops), and
* ``api.token``: the bearer token every request carries (mode 0600, the owner's only).

Only a loopback address is ever contacted: an ``api.addr`` that names another host is
refused (the token must never leave the machine).

Errors are two kinds, so that callers can tell "try again next run" from "the node said
no":

* :class:`NodeUnavailable`: no node runs on that folder, or it does not answer. Nothing is
  lost: work that needs the node waits for the next run (the report says so).
* :class:`NodeError`: the node answered with an error (``status``, ``code``, ``message``,
  from its ``{"error": {"code", "message"}}`` body).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["NodeLink", "NodeUnavailable", "NodeError", "open_link", "query_path", "KEY_LISTS"]

API_ADDR_FILE = "api.addr"
TOKEN_FILE = "api.token"
#: The largest answer read from the node (its lists are paged well below this).
MAX_RESPONSE_BYTES = 64 * 1024 * 1024


class NodeUnavailable(Exception):
    """No node answers on this data folder: the work waits for the next run."""


class NodeError(Exception):
    """The node answered with an error."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{code}: {message}" if message else code)
        self.status = status
        self.code = code
        self.message = message


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_port(text: str, where: Path) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise NodeUnavailable(f"{where} does not hold HOST:PORT ({text.strip()[:60]!r}); is the node starting?")
    if not _loopback(host):
        raise NodeUnavailable(f"{where} names {host}, not a loopback address: refused (the API token "
                              "never leaves this machine)")
    return host, int(port)


def query_path(path: str, **params: Any) -> str:
    """``path`` with the parameters that are not None as a query string."""
    given = {k: v for k, v in params.items() if v is not None}
    return f"{path}?{urlencode(given)}" if given else path


@dataclass
class NodeLink:
    """A connection recipe for one node's local API (each request is its own connection)."""

    home: Path
    host: str
    port: int
    token: str
    timeout: float = 10.0

    @classmethod
    def open(cls, node_home: Path, timeout: float = 10.0) -> "NodeLink":
        """The link to the daemon running on ``node_home``; :class:`NodeUnavailable` if none."""
        home = Path(node_home)
        addr_file, token_file = home / API_ADDR_FILE, home / TOKEN_FILE
        try:
            address = addr_file.read_text()
        except FileNotFoundError:
            if not home.exists():
                raise NodeUnavailable(f"no commons node at {home} (create one: openmemory-node init "
                                      f"--home {home}; then openmemory-node start --home {home})") from None
            raise NodeUnavailable(f"the commons node at {home} is not running "
                                  f"(start it: openmemory-node start --home {home})") from None
        except OSError as exc:
            raise NodeUnavailable(f"cannot read {addr_file}: {exc.strerror}") from None
        host, port = _host_port(address, addr_file)
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise NodeUnavailable(f"cannot read the node's token {token_file}: "
                                  f"{exc.strerror or exc}") from None
        if not token:
            raise NodeUnavailable(f"{token_file} is empty")
        return cls(home, host, port, token, timeout)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """One request; the decoded JSON answer. Raises NodeUnavailable or NodeError."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json",
                   "Host": self.address}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read(MAX_RESPONSE_BYTES + 1)
        except (OSError, http.client.HTTPException) as exc:
            raise NodeUnavailable(f"the commons node at {self.address} does not answer "
                                  f"({type(exc).__name__}: {exc})") from None
        finally:
            conn.close()
        if len(raw) > MAX_RESPONSE_BYTES:
            raise NodeError(response.status, "too-large", f"answer over {MAX_RESPONSE_BYTES} bytes")
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            raise NodeError(response.status, "bad-response", raw[:200].decode("latin-1")) from None
        if response.status >= 400:
            err = data.get("error", {}) if isinstance(data, dict) else {}
            err = err if isinstance(err, dict) else {}
            raise NodeError(response.status, str(err.get("code") or "error"), str(err.get("message") or ""))
        return data

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", query_path(path, **params))

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    # --- the calls the engine makes ------------------------------------------------------

    def node(self) -> dict:
        """``GET /v1/node``: the node's peer id, public key, addresses, version."""
        return self.get("/v1/node")

    def record(self, record_id: str) -> dict:
        return self.get(f"/v1/records/{quote(record_id, safe='')}")

    def commons(self, record_id: str) -> dict:
        """``GET /v1/commons/{id}``: a record, why it has its status, and its provenance chain."""
        return self.get(f"/v1/commons/{quote(record_id, safe='')}")

    # --- what `openmemory-node` commands ask, for the page's node view: the same endpoints
    # --- and the same bodies as the node's CLI (the engine never imports openmemory_node)

    def follow_domains(self, domains: list[str]) -> dict:
        """``PUT /v1/domains``: the domains this agent's projects touch (git, python, node...),
        which the node then follows with ``general`` (its gossip topics, its sync)."""
        return self.put("/v1/domains", {"domains": sorted(domains)})

    def status(self) -> dict:
        """``openmemory-node status``: ``GET /v1/status``."""
        return self.get("/v1/status")

    def peers(self) -> dict:
        """``openmemory-node peers``: ``GET /v1/peers``."""
        return self.get("/v1/peers")

    def records(self, **filters: Any) -> dict:
        """``openmemory-node records``: ``GET /v1/records`` (type, kind, status, author, limit, before)."""
        return self.get("/v1/records", **filters)

    def keys(self, name: str) -> dict:
        """``openmemory-node trust|revokers list``: ``GET /v1/trust`` or ``/v1/revokers``."""
        return self.get(f"/v1/{_key_list(name)}")

    def add_key(self, name: str, key: str, note: str = "") -> dict:
        """``openmemory-node trust|revokers add KEY [--note T]``: ``POST /v1/{name}``."""
        return self.post(f"/v1/{_key_list(name)}", {"key": key, "note": note or ""})

    def remove_key(self, name: str, key: str) -> dict:
        """``openmemory-node trust|revokers remove KEY``: ``DELETE /v1/{name}/{key}``."""
        return self.delete(f"/v1/{_key_list(name)}/{quote(key, safe='')}")

    def local_revocations(self) -> dict:
        """``GET /v1/revocations/local``."""
        return self.get("/v1/revocations/local")

    def revoke_local(self, record_id: str, reason: str = "", code: str | None = None) -> dict:
        """``openmemory-node revoke ID --local [--reason T] [--code C]``: revoked on this node
        only, nothing signed or published."""
        body: dict[str, Any] = {"id": record_id, "reason": reason or "", "local": True}
        if code:
            body["reason_code"] = code
        return self.post("/v1/revoke", body)

    def lift_local_revocation(self, record_id: str) -> dict:
        """``openmemory-node revoke ID --undo``: ``DELETE /v1/revoke/{id}``."""
        return self.delete(f"/v1/revoke/{quote(record_id, safe='')}")


#: The node's key lists: ``trust`` (whose attestations count) and ``revokers`` (whose
#: revocations take effect here).
KEY_LISTS = ("trust", "revokers", "team", "blocked")


def _key_list(name: str) -> str:
    if name not in KEY_LISTS:
        raise ValueError(f"unknown key list {name!r} ({', '.join(KEY_LISTS)})")
    return name


def open_link(config) -> NodeLink:
    """The link to the node of ``config`` (:attr:`Config.node_home`); NodeUnavailable if none."""
    from openmemory_local.core.config import default_node_home

    return NodeLink.open(config.node_home or default_node_home(), timeout=config.node_timeout)
