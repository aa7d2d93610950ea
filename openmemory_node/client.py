"""A client of the local API (standard library only), for the CLI, tests and the engine."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

from .config import ConfigError, parse_host_port


class ApiUnavailable(Exception):
    """No daemon answers on this data folder."""


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict | None = None):
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}  # the whole error object (e.g. "candidates")


class Client:
    def __init__(self, host: str, port: int, token: str, timeout: float = 30.0):
        self.host = host
        self.port = port
        self.token = token
        self.timeout = timeout

    @classmethod
    def for_home(cls, home: Path, timeout: float = 30.0) -> "Client":
        """The client of the daemon running on ``home`` (from its api.addr and api.token)."""
        home = Path(home)
        try:
            address = (home / "api.addr").read_text().strip()
        except FileNotFoundError:
            raise ApiUnavailable(f"no daemon is running on {home} (start it: openmemory-node start)")
        try:
            token = (home / "api.token").read_text().strip()
        except FileNotFoundError:
            raise ApiUnavailable(f"{home}/api.token is missing (run openmemory-node init)")
        try:
            host, port = parse_host_port(address)
        except ConfigError:
            raise ApiUnavailable(f"{home}/api.addr is damaged; is the daemon starting?") from None
        return cls(host, port, token, timeout)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (ConnectionRefusedError, FileNotFoundError, OSError) as exc:
            raise ApiUnavailable(f"the daemon at {self.host}:{self.port} does not answer ({exc})") from None
        finally:
            conn.close()
        try:
            data = json.loads(raw) if raw else None
        except ValueError:
            raise ApiError(response.status, "bad-response", raw[:200].decode("latin-1")) from None
        if response.status >= 400:
            err = (data or {}).get("error", {}) if isinstance(data, dict) else {}
            raise ApiError(response.status, err.get("code", "error"), err.get("message", ""), err)
        return data

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body)
