"""Where a simulated agent lives: in this process (:class:`LocalAgent`), or in a container of
its own, reached over the compose network (:class:`RemoteAgent`, served by ``python -m
simulations.agent_host serve``).

The experiment's runner (:mod:`simulations.two_agents`) and the commons arm
(:mod:`simulations.commons_arm`) talk to an agent only through these methods, so the same
run works with every agent here, as local processes, and with one container per agent
(engine and node together), as ``docker-compose.yml`` runs it:

* the agent's day and night: :meth:`LocalAgent.run_day` (its sessions, written as Claude Code
  transcripts), :meth:`LocalAgent.night` (``openmemory run --now``), what it has in mind
  (:meth:`memory`, :meth:`memory_index`), the ingest check, what its engine published
  (:meth:`published`), opting in and installing the hooks, a session start (the SessionStart
  hook);
* its node: init, configure, start on the world's clock (:meth:`set_clock` writes the clock
  file its node reads, :mod:`openmemory_node.simclock`), stop, and its local API
  (:meth:`node_request`; the API token never leaves the agent's machine or container), and the
  node's command line (:meth:`node_cli`: ``openmemory-node revoke ID`` as a person types it).

A *node-only* host (no engine, no sessions) is what the drill's rogue and revoker are.

The service (``serve``) answers ``POST /call`` with ``{"method", "args"}`` for one of
:data:`METHODS` and nothing else; it is meant for the simulation's own compose network (an
internal network: no route out), never for a network people use.
"""

from __future__ import annotations

import argparse
import http.client
import json
import sqlite3
import subprocess
import sys
import signal
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .agents import ENGINES, ROOT, Agent, MemoryLesson, ingest_check, session_start

__all__ = ["SimNode", "LocalAgent", "RemoteAgent", "RemoteError", "METHODS", "serve", "main"]

#: What a remote agent may be asked (the service refuses anything else).
METHODS = ("describe", "run_day", "night", "memory", "memory_index", "ingest_check", "published", "link_node",
           "publish_enable", "install", "session_start", "node_init", "node_configure", "node_start", "node_stop",
           "node_running", "node_request", "node_cli", "set_clock", "close")


def _harness():
    from tests.node import harness  # the node tests' harness: real node processes

    return harness


class SimNode:
    """One agent's node process (``openmemory-node start --clock-file``), on loopback by
    default; in a container it listens on every interface and peers reach it by name
    (``announce``: ``/dns4/agent-a/tcp/4771``)."""

    def __init__(self, home: Path, name: str, *, listen: str | None = None, announce: str | None = None):
        harness = _harness()

        class _Node(harness.Node):
            @property
            def listen(inner) -> str:  # noqa: N805
                return listen or f"/ip4/127.0.0.1/tcp/{inner.port}"

            @property
            def multiaddr(inner) -> str:  # noqa: N805
                assert inner.peer_id
                return f"{announce or inner.listen}/p2p/{inner.peer_id}"

        self.node = _Node(Path(home), name=name)
        self.wait_until = harness.wait_until

    def init(self) -> dict:
        self.node.init()
        return {"peer_id": self.node.peer_id, "public_key": self.node.public_key, "multiaddr": self.node.multiaddr}

    def running(self) -> bool:
        return self.node.proc is not None and self.node.proc.poll() is None


class LocalAgent:
    """An agent in this process: its folders and sessions (:class:`Agent`), its engine, and its
    node when it has one (``agent`` None: a node only)."""

    def __init__(self, name: str, agent: Agent | None, engine_name: str, root: Path, *,
                 listen: str | None = None, announce: str | None = None):
        self.name = name
        self.agent = agent
        self.engine = ENGINES[engine_name]()
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.node_home = agent.node_home if agent is not None else self.root / "node"
        self.clock_path = self.root / "clock.json"
        self._listen, self._announce = listen, announce
        self.sim_node: SimNode | None = None

    # -- the agent ------------------------------------------------------------------------
    def _need_agent(self) -> Agent:
        if self.agent is None:
            raise RuntimeError(f"{self.name} is a node only: no engine, no sessions")
        return self.agent

    def describe(self) -> dict:
        return {"name": self.name, "agent": self.agent is not None, "engine": self.engine.name,
                "root": str(self.root), "node_home": str(self.node_home),
                "cwd": self.agent.cwd if self.agent else None}

    def run_day(self, day: int, date: datetime) -> list[dict]:
        return [plan.to_dict() for plan in self._need_agent().run_day(day, date)]

    def night(self, now: datetime) -> dict:
        return self.engine.run(self._need_agent(), now)

    def memory(self) -> list[MemoryLesson]:
        return self._need_agent().memory()

    def memory_index(self) -> str:
        try:
            return (self._need_agent().memory_dir / "MEMORY.md").read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""

    def ingest_check(self) -> dict:
        return ingest_check(self._need_agent())

    def published(self) -> list[dict]:
        """What this agent's engine published (``published`` table, read-only), each record
        with the pitfalls whose failed sessions taught its lesson (the simulation's bookkeeping)."""
        agent = self._need_agent()
        db = agent.data / "openmemory.db"
        if not db.exists():
            return []
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            try:
                rows = con.execute("SELECT record_id, lesson_id, text, kind, published_at, revoked_at FROM published "
                                   "ORDER BY published_at, rowid").fetchall()
            except sqlite3.OperationalError:  # no such table: nothing published yet
                return []
            out = []
            for record, lesson, text, kind, at, revoked in rows:
                sessions = [s for (s,) in con.execute(
                    "SELECT DISTINCT e.session_id FROM lesson_members m JOIN episodes e ON e.id = m.episode_id "
                    "WHERE m.lesson_id = ? AND e.session_id IS NOT NULL", (lesson,))]
                pitfalls = sorted({agent.failed_in[s] for s in sessions if s in agent.failed_in})
                out.append({"record": record, "lesson": lesson, "text": text, "kind": kind, "published_at": at,
                            "revoked_at": revoked, "pitfalls": pitfalls})
            return out
        finally:
            con.close()

    def link_node(self, engine_config: str = "") -> None:
        """``[node] home`` (and ``engine_config``, more TOML) in the engine's config.toml, so
        that ``openmemory run`` finds this agent's node."""
        agent = self._need_agent()
        home = json.dumps(str(self.node_home))
        (agent.data / "config.toml").write_text(f"[node]\nhome = {home}\n{engine_config}", encoding="utf-8")

    def publish_enable(self, now: datetime) -> dict:
        return self.engine.publish_enable(self._need_agent(), now)

    def install(self, now: datetime) -> None:
        self.engine.install(self._need_agent(), now)

    def session_start(self, now: datetime) -> dict:
        return session_start(self._need_agent(), now)

    # -- the node -------------------------------------------------------------------------
    def _node(self) -> SimNode:
        if self.sim_node is None:
            raise RuntimeError(f"{self.name} has no node (node_init first)")
        return self.sim_node

    def node_init(self) -> dict:
        self.sim_node = SimNode(self.node_home, self.name, listen=self._listen, announce=self._announce)
        return self.sim_node.init()

    def node_configure(self, toml: str) -> None:
        self._node().node.configure(toml)

    def set_clock(self, world: float, wall: float, rate: float) -> None:
        from openmemory_node.simclock import write_clock_file

        write_clock_file(self.clock_path, world, rate, wall=wall)

    def node_start(self, timeout: float = 120.0) -> None:
        node = self._node().node
        node.start_args = ["--clock-file", str(self.clock_path)]
        node.start(wait=False)
        node.wait_ready(timeout)

    def node_stop(self) -> float:
        node = self._node()
        return node.node.stop(timeout=30) if node.running() else 0.0

    def node_running(self) -> bool:
        return self.sim_node is not None and self.sim_node.running()

    def node_request(self, method: str, path: str, body: Any = None) -> Any:
        return self._node().node.client(timeout=60).request(method, path, body)

    def node_cli(self, *args: str) -> dict:
        """``openmemory-node --home NODE ARGS...`` as a process: ``{"code", "stdout", "stderr"}``."""
        proc = subprocess.run([sys.executable, "-m", "openmemory_node.cli", "--home", str(self.node_home), *args],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        return {"code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}

    def close(self) -> None:
        if self.sim_node is not None:
            self.sim_node.node.kill()


# -- over the network ---------------------------------------------------------------------------

class RemoteError(RuntimeError):
    """The agent service answered with an error (its message says what failed there)."""


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"$datetime": value.isoformat()}
    if isinstance(value, MemoryLesson):
        return {"$memory": {"file": value.file, "texts": list(value.texts), "sessions": list(value.sessions),
                            "commons": value.commons}}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"$datetime"}:
            return datetime.fromisoformat(value["$datetime"])
        if set(value) == {"$memory"}:
            m = value["$memory"]
            return MemoryLesson(m["file"], tuple(m["texts"]), tuple(m["sessions"]), m["commons"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


class RemoteAgent:
    """The same methods as :class:`LocalAgent`, each one a ``POST /call`` to the agent's
    service (``url``: ``http://agent-a:8470``), for the agent ``name`` of ``arm`` there."""

    def __init__(self, url: str, name: str, *, timeout: float = 1800.0):
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"an agent service is http://HOST:PORT, not {url!r}")
        self.url, self.host, self.port = url, parts.hostname, parts.port or 80
        self.name = name
        self.timeout = timeout
        self.scope: dict = {}  # what the service needs to make the agent: world, arm

    def attach(self, **scope: Any) -> "RemoteAgent":
        self.scope = scope
        self.call("describe")
        return self

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        body = json.dumps({"method": method, "agent": self.name, "scope": _encode(self.scope),
                           "args": _encode(list(args)), "kwargs": _encode(kwargs)}).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("POST", "/call", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            raw = response.read()
        except OSError as exc:
            raise RemoteError(f"the agent service {self.url} does not answer ({type(exc).__name__}: {exc})") from None
        finally:
            conn.close()
        answer = json.loads(raw)
        if response.status != 200:
            raise RemoteError(f"{self.url} {method} for {self.name}: {answer.get('error')}")
        return _decode(answer["result"])

    def __getattr__(self, method: str):
        if method not in METHODS:
            raise AttributeError(method)
        return lambda *args, **kwargs: self.call(method, *args, **kwargs)

    def shutdown(self) -> None:
        """Stop the service (and the nodes it started): the run is over."""
        try:
            self.call("shutdown")
        except RemoteError:
            pass

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
                conn.request("GET", "/ready")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RemoteError(f"the agent service {self.url} was not ready within {timeout:g} s")
            time.sleep(0.5)


# -- the service ----------------------------------------------------------------------------------

class _Service:
    """The agents this service hosts, made on first use from the scope the runner sends."""

    def __init__(self, root: Path, listen: str | None, announce: str | None):
        self.root = Path(root)
        self.listen, self.announce = listen, announce
        self.hosts: dict[tuple, LocalAgent] = {}
        self.lock = threading.Lock()

    def host(self, name: str, scope: dict) -> LocalAgent:
        key = (name, json.dumps(scope, sort_keys=True, default=str))
        with self.lock:
            found = self.hosts.get(key)
            if found is None:
                found = self.hosts[key] = self._make(name, scope)
            return found

    def _make(self, name: str, scope: dict) -> LocalAgent:
        from .two_agents import World, WorldConfig

        arm = scope.get("arm", "commons")
        root = self.root / "world" / arm
        config = WorldConfig.from_dict(scope["world"])
        if scope.get("node_only"):
            return LocalAgent(name, None, config.engine, root / name, listen=self.listen, announce=self.announce)
        world = World(config, root)
        return LocalAgent(name, world.make_agent(name), config.engine, root / name, listen=self.listen,
                          announce=self.announce)

    def close(self) -> None:
        with self.lock:
            hosts, self.hosts = list(self.hosts.values()), {}
        for host in hosts:
            host.close()


def serve(root: Path, address: tuple[str, int], *, listen: str | None = None, announce: str | None = None,
          ready=None) -> None:
    service = _Service(root, listen, announce)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):  # one line per call on stderr, without the noise
            pass

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(_encode(body), default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._answer(200 if self.path == "/ready" else 404, {"ready": self.path == "/ready"})

        def do_POST(self):
            if self.path != "/call":
                return self._answer(404, {"error": "POST /call only"})
            try:
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length))
                method = request["method"]
                if method == "shutdown":  # the run is over: stop the agents' nodes, then this service
                    service.close()
                    self._answer(200, {"result": "stopping"})
                    return service.stop()
                if method not in METHODS:
                    return self._answer(400, {"error": f"unknown method {method!r}"})
                host = service.host(str(request["agent"]), _decode(request.get("scope") or {}))
                started = time.monotonic()
                result = getattr(host, method)(*_decode(request.get("args") or []), **_decode(request.get("kwargs")
                                                                                              or {}))
                print(f"agent_host: {request['agent']} {method} {time.monotonic() - started:.2f} s", file=sys.stderr,
                      flush=True)
                self._answer(200, {"result": result})
            except Exception as exc:  # reported to the runner, which stops the run with it
                print(f"agent_host: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                self._answer(500, {"error": f"{type(exc).__name__}: {exc}"})

    server = ThreadingHTTPServer(address, Handler)
    server.daemon_threads = True
    service.stop = lambda: threading.Thread(target=server.shutdown, daemon=True).start()
    if ready is not None:
        ready(server.server_address)
    previous = signal.signal(signal.SIGTERM, lambda *_: service.stop()) \
        if threading.current_thread() is threading.main_thread() else None
    try:
        server.serve_forever()
    finally:
        service.close()
        server.server_close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.agent_host",
                                     description="Serve simulated agents (engine and node) to the two-agent runner.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="answer the runner's calls on HOST:PORT")
    p.add_argument("--address", default="0.0.0.0:8470", help="HOST:PORT to listen on (default 0.0.0.0:8470)")
    p.add_argument("--root", type=Path, required=True, help="where the agents' folders go")
    p.add_argument("--node-listen", help="the node's libp2p listen address, e.g. /ip4/0.0.0.0/tcp/4771")
    p.add_argument("--announce", help="how peers reach the node, e.g. /dns4/agent-a/tcp/4771")
    args = parser.parse_args(argv)
    host, _, port = args.address.rpartition(":")
    print(f"agent_host: serving on {args.address}, agents under {args.root}", file=sys.stderr, flush=True)
    serve(args.root, (host or "0.0.0.0", int(port)), listen=args.node_listen, announce=args.announce)
    return 0


if __name__ == "__main__":
    sys.exit(main())
