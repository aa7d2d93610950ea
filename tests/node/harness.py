"""Real openmemory-node processes on loopback, for the network tests and the benchmark.

Every node is a separate ``python -m openmemory_node.cli start`` process with its own data
folder, a free TCP port on 127.0.0.1 and an API on a port of its own choosing (``api.addr``).
Everything is bounded in time; :class:`Cluster` kills what it started.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from openmemory_node import config as config_mod
from openmemory_node.client import ApiError, ApiUnavailable, Client
from openmemory_node.home import init_home

START_TIMEOUT = 60.0  # generous: a loaded 2-core machine starting many interpreters


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out by itself (bind(0), outgoing connections)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORTS = random.Random(os.getpid() ^ time.time_ns())


def free_port() -> int:
    """A loopback port free now, chosen below the kernel's ephemeral range: a node's port is
    chosen before the node binds it (bootstrap lists and restarts need it), and a port the
    kernel hands to any ``bind(0)`` or outgoing connection meanwhile (another node's API, a
    dial) would otherwise take it from under the node."""
    low = _ephemeral_low()
    for _ in range(200):
        port = _PORTS.randrange(max(1024, low - 12000), low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.05,
               what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (ApiUnavailable, ApiError, OSError) as exc:
            last_exc = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what} not reached within {timeout:g} s (last error: {last_exc})")
        time.sleep(interval)


def cli(home: Path, *args: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "openmemory_node.cli", "--home", str(home), *args],
        capture_output=True, text=True, timeout=timeout, check=check,
    )


class Node:
    def __init__(self, home: Path, port: int | None = None, *, name: str = "node",
                 extra_config: str = "", log_level: str = "info"):
        self.home = Path(home)
        self.port = port or free_port()
        self.name = name
        self.log_level = log_level
        self.proc: subprocess.Popen | None = None
        self.log_path = self.home.parent / f"{self.home.name}.log"
        self.extra_config = extra_config
        self.peer_id: str | None = None
        #: more options for ``openmemory-node start`` (e.g. ``["--clock-file", PATH]``)
        self.start_args: list[str] = []

    @property
    def listen(self) -> str:
        return f"/ip4/127.0.0.1/tcp/{self.port}"

    @property
    def multiaddr(self) -> str:
        assert self.peer_id
        return f"{self.listen}/p2p/{self.peer_id}"

    def init(self, bootstrap: list[str] = ()) -> "Node":
        """What ``openmemory-node init --listen L --api 127.0.0.1:0 --bootstrap B...`` does
        (in this process, to save an interpreter start per node; tests/node/test_cli.py
        runs the command itself)."""
        cfg = config_mod.Config()
        cfg.node.listen = [self.listen]
        cfg.node.bootstrap = list(bootstrap)
        cfg.api.address = "127.0.0.1:0"
        ident, _ = init_home(self.home, cfg)
        self.peer_id = ident.peer_id
        if self.extra_config:
            path = self.home / "config.toml"
            path.write_text(_merge_toml(path.read_text(), self.extra_config))
        return self

    def configure(self, extra: str) -> "Node":
        """Overlay ``[section] key = value`` lines onto config.toml (the node must be stopped
        to take them)."""
        path = self.home / "config.toml"
        path.write_text(_merge_toml(path.read_text(), extra))
        return self

    @property
    def public_key(self) -> str:
        from openmemory_node.identity import load

        return load(self.home).public_key.hex()

    def start(self, wait: bool = True) -> "Node":
        assert self.proc is None or self.proc.poll() is not None, "already running"
        try:
            (self.home / "api.addr").unlink()
        except FileNotFoundError:
            pass
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "openmemory_node.cli", "--home", str(self.home), "start",
             "--log-level", self.log_level, *self.start_args],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        def ready() -> bool:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")
            if not (self.home / "api.addr").exists():
                return False
            return bool(self.client().get("/v1/node"))

        wait_until(ready, timeout, 0.05, f"{self.name} ready")

    def client(self, timeout: float = 10.0) -> Client:
        return Client.for_home(self.home, timeout=timeout)

    def get(self, path: str) -> Any:
        return self.client().get(path)

    def post(self, path: str, body: Any) -> Any:
        return self.client().post(path, body)

    def status(self) -> dict:
        return self.get("/v1/status")

    def has(self, record_id: str) -> dict | None:
        try:
            return self.get(f"/v1/records/{record_id}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def publish(self, text: str, kind: str = "correction", **extra: Any) -> dict:
        return self.post("/v1/lessons", {"text": text, "kind": kind, **extra})

    def records(self) -> dict[str, dict]:
        """Every stored record (id -> its view), all pages."""
        out: dict[str, dict] = {}
        before = None
        while True:
            page = self.get("/v1/records?limit=1000" + (f"&before={before}" if before else ""))
            out.update((r["id"], r) for r in page["records"])
            if len(page["records"]) < 1000:
                return out
            before = page["next_before"]

    def statuses(self) -> dict[str, str]:
        return {rid: r["status"] for rid, r in self.records().items()}

    def status_of(self, record_id: str) -> str | None:
        view = self.has(record_id)
        return view["status"] if view else None

    def mesh(self, topic: str = "/openmemory/1/lesson") -> int:
        return self.status()["gossip"]["mesh"].get(topic, 0)

    def connected(self) -> set[str]:
        return {p["peer_id"] for p in self.get("/v1/peers")["peers"] if p["connected"]}

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)

    def stop(self, timeout: float = 20.0) -> float:
        """SIGTERM; returns how long the process took to exit."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        finally:
            self.kill()
        return time.monotonic() - started

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def _merge_toml(base: str, extra: str) -> str:
    """Overlay ``extra`` ([section] key = value lines) onto the config ``base``."""
    section = None
    overrides: dict[tuple[str, str], str] = {}
    for line in extra.strip().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and section:
            key = line.split("=", 1)[0].strip()
            overrides[(section, key)] = line
    out, section = [], None
    for line in base.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            section = stripped.strip("[]")
        elif "=" in stripped and section:
            key = stripped.split("=", 1)[0].strip()
            line = overrides.pop((section, key), line)
        out.append(line)
    if overrides:
        raise ValueError(f"unknown config keys: {sorted(overrides)}")
    return "\n".join(out) + "\n"


class Cluster:
    """Nodes made under one folder; :meth:`close` kills every one of them."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.nodes: list[Node] = []

    def node(self, name: str | None = None, **kwargs: Any) -> Node:
        name = name or f"n{len(self.nodes)}"
        node = Node(self.root / name, name=name, **kwargs)
        self.nodes.append(node)
        return node

    def line(self, count: int | None = None, *, names: str | list[str] | None = None, **kwargs: Any) -> list[Node]:
        """``count`` nodes in a line (or one per name of ``names``), each bootstrapping from the
        one before, all started."""
        nodes: list[Node] = []
        for name in list(names) if names is not None else [None] * int(count or 0):
            node = self.node(name, **kwargs)
            node.init([nodes[-1].multiaddr] if nodes else [])
            nodes.append(node)
        for node in nodes:
            node.start(wait=False)
        for node in nodes:
            node.wait_ready()
        return nodes

    def wait_line_meshed(self, nodes: list[Node], timeout: float = 30.0) -> None:
        """Every node has its line neighbours connected and in its lesson mesh."""
        for i, node in enumerate(nodes):
            want = (i > 0) + (i < len(nodes) - 1)
            wait_until(lambda: node.mesh() >= want, timeout, 0.1, f"{node.name} meshed with {want}")

    def close(self) -> None:
        for node in self.nodes:
            node.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {n.name} ---\n{n.log_tail()}" for n in self.nodes)
