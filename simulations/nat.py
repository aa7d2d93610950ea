"""The commons across NATs, in network namespaces: two nodes, each behind its own NAT, reach
each other through a relay, then directly by hole punching.

    sudo python -m simulations.nat [--json] [--timeout 150] [--nat cone|symmetric] [--keep DIR]
    sudo python -m simulations.nat --cleanup        # remove what a crashed run left

Linux, root (``ip netns``, nftables). What it builds, all inside namespaces it creates (names
start with :data:`PREFIX`; nothing is made in the namespace it runs from, and no namespace has
a route out, so nothing outside is ever addressed; every address is in 10.0.0.0/8)::

    [a] 10.1.0.2 --lan-- [ra] 10.99.0.2 --+                 +-- 10.99.0.3 [rb] --lan-- 10.2.0.2 [b]
                          NAT             +-- br0 [pub] ---+             NAT
                                               10.99.0.1: relay + rendezvous + bootstrap node

* ``pub``: the "internet": a bridge and the public node (``[relay] enabled``,
  ``[discovery] rendezvous_server``).
* ``ra``/``rb``: home routers. nftables ``masquerade`` on the WAN side; forwarding and input
  from the WAN only for connections conntrack already knows (unsolicited packets are dropped,
  not answered with a reset, like a home router). NAT type (``--nat cone``, the default):
  Linux masquerade keeps the source port when it is free, so the mapping is endpoint-
  independent in practice (the same public port towards every destination) while filtering
  is address-and-port dependent: hole punching can work. ``--nat symmetric`` adds
  ``random``: a fresh public port per destination (endpoint-dependent mapping), where
  hole punching must fail and the nodes stay relayed.
* ``a``/``b``: a node each, a real ``openmemory-node start`` process (``ip netns exec``),
  configured with the public node as bootstrap, relay and rendezvous point, nothing else: each
  finds the other through the rendezvous point, reaches it through the relay, then DCUtR.

The scenario: both nodes reserve a slot on the relay and register their relayed address; they
connect through the relay; a lesson published on ``a`` reaches ``b`` (``from_peer`` says
from whom, the connection table says over what); once DCUtR has made a direct connection, ``a``
revokes the lesson and the time until ``b`` holds the revocation is measured. The summary
(stdout with ``--json``) names ``delivered_via_relay``, ``direct_after_holepunch``,
``revocation_reached_s`` and ``namespaces_left`` (counted after clean-up). Every namespace
(with its veths and nftables rules) is deleted on the way out, on an error, on Ctrl-C or
SIGTERM; ``--cleanup`` deletes leftovers of a run that was killed outright.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

PREFIX = "omnat-"
LOG_LEVEL = "info"
PORT = 4771
PUBLIC_IP = "10.99.0.1"
LESSONS = [
    "The user corrected the agent for using pip; this project uses uv.",
    "The agent ran pip install twice; the project has a uv.lock file.",
    "npm install failed with ERESOLVE; the project pins its peer dependencies.",
    "git push was rejected as non-fast-forward; the branch had new commits upstream.",
    "pytest found no tests; the project's tests run with python -m pytest from its root.",
    "The user corrected the agent for editing a generated file; the source is the schema.",
]


class SetupError(Exception):
    pass


def can_run() -> str | None:
    """None if this machine can run the scenario, else the reason it cannot."""
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"no `{tool}` command (iproute2 / nftables)"
    name = f"{PREFIX}probe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` refused: {made.stderr.strip()[:120]}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return None


def run(*cmd: str, ns: str | None = None, check: bool = True, input: str | None = None) -> str:
    full = (["ip", "netns", "exec", ns] if ns else []) + list(cmd)
    done = subprocess.run(full, capture_output=True, text=True, input=input, timeout=30)
    if check and done.returncode != 0:
        raise SetupError(f"{' '.join(full)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def our_namespaces(prefix: str = PREFIX) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]


def cleanup(prefix: str = PREFIX) -> int:
    """Kill every process in our namespaces, delete them (their veths and nftables rules go
    with them). Returns how many namespaces are left (0 unless deletion failed)."""
    for ns in our_namespaces(prefix):
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        for _ in range(50):
            if not subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split():
                break
            time.sleep(0.1)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return len(our_namespaces(prefix))


NFT_RULES = """
table ip omnat {{
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        oifname "wan" masquerade{random}
    }}
    chain forward {{
        type filter hook forward priority filter; policy drop;
        iifname "lan" oifname "wan" accept
        iifname "wan" ct state established,related accept
    }}
    chain input {{
        type filter hook input priority filter; policy accept;
        iifname "wan" ct state established,related accept
        iifname "wan" drop
    }}
}}
"""


class Topology:
    """The namespaces, links and NAT rules; :meth:`close` removes them all."""

    def __init__(self, tag: str, nat: str = "cone"):
        self.tag = tag
        self.nat = nat
        self.ns = {role: f"{PREFIX}{tag}-{role}" for role in ("pub", "ra", "rb", "a", "b")}

    def build(self) -> None:
        ns = self.ns
        for name in ns.values():
            run("ip", "netns", "add", name)
            run("ip", "link", "set", "lo", "up", ns=name)
        run("ip", "link", "add", "br0", "type", "bridge", ns=ns["pub"])
        run("ip", "addr", "add", f"{PUBLIC_IP}/24", "dev", "br0", ns=ns["pub"])
        run("ip", "link", "set", "br0", "up", ns=ns["pub"])
        for side, (wan_ip, lan_net) in {"a": ("10.99.0.2", "10.1.0"), "b": ("10.99.0.3", "10.2.0")}.items():
            router, node = ns[f"r{side}"], ns[side]
            # WAN: router <-> the public bridge
            run("ip", "link", "add", "wan", "netns", router, "type", "veth",
                "peer", "name", f"up{side}", "netns", ns["pub"])
            run("ip", "link", "set", f"up{side}", "master", "br0", "up", ns=ns["pub"])
            run("ip", "addr", "add", f"{wan_ip}/24", "dev", "wan", ns=router)
            run("ip", "link", "set", "wan", "up", ns=router)
            # LAN: router <-> the node
            run("ip", "link", "add", "lan", "netns", router, "type", "veth",
                "peer", "name", "eth0", "netns", node)
            run("ip", "addr", "add", f"{lan_net}.1/24", "dev", "lan", ns=router)
            run("ip", "link", "set", "lan", "up", ns=router)
            run("ip", "addr", "add", f"{lan_net}.2/24", "dev", "eth0", ns=node)
            run("ip", "link", "set", "eth0", "up", ns=node)
            run("ip", "route", "add", "default", "via", f"{lan_net}.1", ns=node)
            run("sysctl", "-q", "-w", "net.ipv4.ip_forward=1", ns=router)
            run("nft", "-f", "-", ns=router,
                input=NFT_RULES.format(random=" random" if self.nat == "symmetric" else ""))

    def node_ip(self, role: str) -> str:
        return {"pub": PUBLIC_IP, "a": "10.1.0.2", "b": "10.2.0.2"}[role]

    def close(self) -> int:
        return cleanup(f"{PREFIX}{self.tag}-")


class NodeProc:
    """One openmemory-node in a namespace, driven through a small shim process in the same
    namespace (the node's API listens on that namespace's loopback only)."""

    def __init__(self, name: str, ns: str, home: Path, listen: str, also: tuple[str, ...] = ()):
        self.name, self.ns, self.home, self.listen = name, ns, home, listen
        self.also = list(also)  # more listen addresses (QUIC: --quic)
        self.proc: subprocess.Popen | None = None
        self.shim: subprocess.Popen | None = None
        self.peer_id = ""

    def init(self, extra: str) -> "NodeProc":
        from openmemory_node import config as config_mod
        from openmemory_node.home import init_home

        cfg = config_mod.Config()
        cfg.node.listen = [self.listen, *self.also]
        cfg.api.address = "127.0.0.1:0"
        ident, _ = init_home(self.home, cfg)
        self.peer_id = ident.peer_id
        path = self.home / "config.toml"
        data = config_mod.tomllib.loads(path.read_text())
        for section, values in config_mod.tomllib.loads(extra).items():
            data.setdefault(section, {}).update(values)
        config_mod.write(self.home, config_mod.from_dict(data))
        return self

    @property
    def addr(self) -> str:
        return f"{self.listen}/p2p/{self.peer_id}"

    def start(self) -> None:
        log = open(self.home.parent / f"{self.name}.log", "ab")
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-m", "openmemory_node.cli",
             "--home", str(self.home), "start", "--log-level", LOG_LEVEL],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.shim = subprocess.Popen(
            ["ip", "netns", "exec", self.ns, sys.executable, "-m", "simulations.nat", "--shim", str(self.home)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        assert self.shim is not None and self.shim.stdin and self.shim.stdout
        self.shim.stdin.write(json.dumps({"method": method, "path": path, "body": body}) + "\n")
        self.shim.stdin.flush()
        line = self.shim.stdout.readline()
        if not line:
            raise SetupError(f"{self.name}: API shim exited")
        answer = json.loads(line)
        if "error" in answer:
            raise ApiProblem(answer["error"])
        return answer["result"]

    def reach(self) -> dict:
        try:
            return json.loads((self.home / "node.reach").read_text())
        except (OSError, ValueError):
            return {}

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise SetupError(f"{self.name} exited with {self.proc.returncode}: {self.log_tail()}")
        return (self.home / "api.addr").exists() and bool(self.reach())

    def status_of(self, rid: str) -> str | None:
        try:
            return self.call("GET", f"/v1/records/{rid}")["status"]
        except ApiProblem:
            return None

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join((self.home.parent / f"{self.name}.log").read_text().splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        for proc in (self.shim, self.proc):
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=10)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    try:
                        os.killpg(proc.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass


class ApiProblem(Exception):
    pass


def shim(home: str) -> int:
    """Inside a namespace: API requests from stdin (JSON lines), answers to stdout."""
    from openmemory_node.client import ApiError, Client

    client: Client | None = None
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if client is None:
                client = Client.for_home(Path(home), timeout=20)
            out = {"result": client.request(req["method"], req["path"], req.get("body"))}
        except ApiError as exc:
            out = {"error": f"{exc.status} {exc.code}: {exc}"}
        except Exception as exc:  # the node not up yet, a connection refused
            client = None
            out = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()
    return 0


def wait_for(what: str, predicate: Callable[[], Any], deadline: float, interval: float = 0.2) -> Any:
    while True:
        try:
            value = predicate()
        except ApiProblem:
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within the run's time limit")
        time.sleep(interval)


def node_config(relay: NodeProc, *, probe_after: float, interval: float) -> str:
    return f"""
[node]
bootstrap = ["{relay.addr}"]
[reachability]
mode = "auto"
relays = ["{relay.addr}"]
probe_after = {probe_after}
[discovery]
rendezvous = ["{relay.addr}"]
interval = {interval}
[sync]
interval = 5.0
"""


# The public node carries connections, not records: it refuses every record (none fits in 64
# bytes), without penalising the sender. So what b receives from a can only have travelled the
# connection between them (relayed, then direct), which is what the scenario measures; with a
# public node that also gossips, b would hear most lessons from it first (seen: 0 to 5 of 6).
RELAY_CONFIG = """
[limits]
max_record_bytes = 64
invalid_penalty = 0.0
[relay]
enabled = true
max_reservations = 16
[reachability]
mode = "public"
[discovery]
rendezvous_server = true
interval = 5.0
[sync]
interval = 5.0
"""


def scenario(root: Path, topo: Topology, timeout: float, log: Callable[[str], None],
             quic: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    deadline = started + timeout
    summary: dict[str, Any] = {"nat": topo.nat, "delivered_via_relay": False,
                               "direct_after_holepunch": False, "revocation_reached_s": None}
    relay = NodeProc("relay", topo.ns["pub"], root / "relay", f"/ip4/{PUBLIC_IP}/tcp/{PORT}")
    relay.init(RELAY_CONFIG)
    a, b = (NodeProc(side, topo.ns[side], root / side, f"/ip4/{topo.node_ip(side)}/tcp/{PORT}",
                     (f"/ip4/{topo.node_ip(side)}/udp/{PORT}/quic-v1",) if quic else ()) for side in "ab")
    summary["quic"] = quic
    for node in (a, b):
        node.init(node_config(relay, probe_after=5.0, interval=2.0))
    # b applies a's revocations (the author's key is a revoker there)
    b_cfg = b.home / "config.toml"
    from openmemory_node.identity import load as load_identity

    a_key = load_identity(a.home).public_key.hex()
    text = b_cfg.read_text().replace("revokers = []", f'revokers = ["{a_key}"]')
    b_cfg.write_text(text)
    nodes = [relay, a, b]
    try:
        relay.start()
        wait_for("relay ready", relay.ready, deadline)
        a.start()
        b.start()
        wait_for("a and b ready", lambda: a.ready() and b.ready(), deadline)
        log(f"nodes up ({time.monotonic() - started:.1f} s): relay {relay.peer_id[:12]}, "
            f"a {a.peer_id[:12]}, b {b.peer_id[:12]}")
        wait_for("reservations on the relay", lambda: a.reach().get("relayed_addrs") and b.reach().get("relayed_addrs"), deadline)
        summary["reachability"] = {"a": a.reach().get("state"), "b": b.reach().get("state")}
        summary["relayed_addr_a"] = a.reach()["relayed_addrs"][0]
        t_reserved = time.monotonic()
        log(f"both behind NAT ({summary['reachability']}), slots reserved; a at {summary['relayed_addr_a']}")
        kind = wait_for("a and b connected", lambda: b.reach().get("connections", {}).get(a.peer_id), deadline)
        summary["first_connection"] = kind
        summary["connected_after_reservation_s"] = round(time.monotonic() - t_reserved, 2)
        log(f"a and b connected: {kind}")

        def in_mesh(node: NodeProc, other: NodeProc) -> bool:
            peers = {p["peer_id"]: p for p in node.call("GET", "/v1/peers")["peers"]}
            return "/openmemory/1/lesson" in (peers.get(other.peer_id) or {}).get("mesh", [])

        wait_for("a and b in each other's lesson mesh", lambda: in_mesh(a, b) and in_mesh(b, a), deadline)
        summary["connection_at_publish"] = b.reach().get("connections", {}).get(a.peer_id)
        # Several lessons, each one's deliverer checked (``from_peer``): the public node refuses
        # records (RELAY_CONFIG), so a's connection to b is the only path.
        rids, from_a, times = [], 0, []
        for text in LESSONS:
            if b.reach().get("connections", {}).get(a.peer_id) != "relayed":
                break  # already upgraded: later lessons would not travel the circuit
            rid = a.call("POST", "/v1/lessons", {"text": text, "kind": "correction"})["id"]
            t0 = time.monotonic()
            view = wait_for("lesson on b", lambda: b.call("GET", f"/v1/records/{rid}"), deadline, 0.05)
            times.append(time.monotonic() - t0)
            rids.append(rid)
            from_a += view.get("from_peer") == a.peer_id
        rid = rids[0]
        summary["lessons_published_while_relayed"] = len(rids)
        summary["lessons_from_a_over_relayed_connection"] = from_a
        summary["lesson_reached_s_max"] = round(max(times), 3)
        summary["delivered_via_relay"] = from_a > 0
        log(f"{len(rids)} lessons published while a and b were connected through the relay; "
            f"{from_a} reached b from a over that connection (slowest {summary['lesson_reached_s_max']} s)")
        t1 = time.monotonic()
        direct_deadline = min(deadline - 15, time.monotonic() + 40)
        try:
            wait_for("direct connection", lambda: (a.reach().get("connections", {}).get(b.peer_id) == "direct"
                                                   and b.reach().get("connections", {}).get(a.peer_id) == "direct"),
                     direct_deadline, 0.2)
            summary["direct_after_holepunch"] = True
            summary["direct_after_s"] = round(time.monotonic() - t1, 2)
            log(f"direct connection after hole punching ({summary['direct_after_s']} s)")
        except TimeoutError:
            log("no direct connection: the nodes stay relayed")
        summary["connection_at_revocation"] = b.reach().get("connections", {}).get(a.peer_id)
        summary["transports_at_revocation"] = b.reach().get("transports", {}).get(a.peer_id)
        a.call("POST", "/v1/revoke", {"id": rid, "reason_code": "incorrect"})
        t2 = time.monotonic()
        try:
            wait_for("revocation on b", lambda: b.status_of(rid) == "revoked", deadline, 0.05)
            summary["revocation_reached_s"] = round(time.monotonic() - t2, 3)
            revocation = next((r for r in b.call("GET", "/v1/records?type=revocation")["records"]), {})
            summary["revocation_from"] = {a.peer_id: "a", relay.peer_id: "relay node"}.get(
                revocation.get("from_peer"), revocation.get("from_peer"))
            log(f"revocation on b in {summary['revocation_reached_s']} s")
        except TimeoutError:
            log("the revocation did not reach b in time")
        summary["relay_served"] = relay.reach().get("relay_served")
        summary["reach_a"] = a.reach()
        summary["reach_b"] = b.reach()
    finally:
        for node in nodes:
            node.stop()
        summary["logs"] = {n.name: n.log_tail(8) for n in nodes}
    summary["elapsed_s"] = round(time.monotonic() - started, 1)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.nat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--timeout", type=float, default=150.0, help="stop after this many seconds")
    parser.add_argument("--nat", choices=("cone", "symmetric"), default="cone")
    parser.add_argument("--quic", action="store_true",
                        help="a and b listen on QUIC (UDP) beside TCP: does QUIC help hole punching?")
    parser.add_argument("--keep", help="keep the nodes' folders and logs in this directory")
    parser.add_argument("--cleanup", action="store_true", help="remove leftovers of a killed run")
    parser.add_argument("--log-level", default="info", help="the nodes' log level (their logs: --keep)")
    parser.add_argument("--shim", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global LOG_LEVEL
    LOG_LEVEL = args.log_level
    if args.shim:
        return shim(args.shim)
    if args.cleanup:
        left = cleanup()
        print(json.dumps({"namespaces_left": left}))
        return 0 if left == 0 else 1
    reason = can_run()
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    log = (lambda m: print(m, file=sys.stderr)) if args.json else print
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="omnat-"))
    root.mkdir(parents=True, exist_ok=True)
    topo = Topology(f"{os.getpid() % 100000}", args.nat)

    def on_signal(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with it ignored
    summary: dict[str, Any] = {}
    code = 0
    try:
        topo.build()
        log(f"namespaces: {', '.join(topo.ns.values())} (NAT: {args.nat})")
        summary = scenario(root, topo, args.timeout, log, quic=args.quic)
    except KeyboardInterrupt as exc:
        summary["interrupted"] = str(exc) or "SIGINT"
        code = 130
    except (SetupError, TimeoutError) as exc:
        summary["error"] = str(exc)
        code = 1
    finally:
        # A second Ctrl-C must not cut the clean-up short: it runs with both signals ignored.
        previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            summary["namespaces_left"] = topo.close()
        finally:
            signal.signal(signal.SIGINT, previous_int)
            signal.signal(signal.SIGTERM, previous)
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True, default=str))
    else:
        for key in ("delivered_via_relay", "direct_after_holepunch", "revocation_reached_s",
                    "namespaces_left", "error"):
            if key in summary:
                print(f"{key}: {summary[key]}")
    ok = (summary.get("delivered_via_relay") and summary.get("revocation_reached_s") is not None
          and summary.get("namespaces_left") == 0)
    return code or (0 if ok else 1)


if __name__ == "__main__":
    sys.exit(main())
