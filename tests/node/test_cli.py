"""The openmemory-node command line, run as a user runs it (the README walkthrough)."""

from __future__ import annotations

import json

import pytest

from .harness import Node, cli, free_port, wait_until

pytestmark = pytest.mark.slow

TEXT = "The user corrected the agent for using pip; this project uses uv."


def test_two_homes_walkthrough_and_exit_codes(tmp_path, cluster):
    a_home, b_home = tmp_path / "a", tmp_path / "b"
    a_port, b_port = free_port(), free_port()
    out = cli(a_home, "init", "--listen", f"/ip4/127.0.0.1/tcp/{a_port}", "--api", "127.0.0.1:0")
    assert out.stdout.startswith("initialised") and "peer id" in out.stdout
    again = cli(a_home, "init")
    assert again.returncode == 0 and again.stdout.startswith("already initialised")
    offline = json.loads(cli(a_home, "id", "--json").stdout)
    assert offline["running"] is False
    assert offline["addrs"] == [f"/ip4/127.0.0.1/tcp/{a_port}/p2p/{offline['peer_id']}"]
    assert cli(a_home, "status", check=False).returncode == 3  # no daemon
    assert cli(a_home, "publish", "--text", TEXT, "--kind", "correction", check=False).returncode == 3

    a = Node(a_home, a_port, name="a")
    cluster.nodes.append(a)
    a.start()
    a_addr = cli(a_home, "id", "--json")
    a_info = json.loads(a_addr.stdout)
    assert a_info["running"] and a_info["peer_id"] == offline["peer_id"]
    bad = cli(b_home, "init", "--bootstrap", "/ip4/127.0.0.1/tcp/1", check=False)
    assert bad.returncode == 2 and "/p2p/" in bad.stderr
    cli(b_home, "init", "--listen", f"/ip4/127.0.0.1/tcp/{b_port}", "--api", "127.0.0.1:0",
        "--bootstrap", a_info["addrs"][0])
    b = Node(b_home, b_port, name="b")
    cluster.nodes.append(b)
    b.start()
    wait_until(lambda: b.mesh() >= 1, 30, what="b in a's mesh")

    published = cli(a_home, "publish", "--text", TEXT, "--kind", "correction")
    rid = published.stdout.split()[0]
    assert "published" in published.stdout and len(rid) == 68

    def listed() -> bool:
        return rid[:16] in cli(b_home, "records").stdout

    wait_until(listed, 30, 0.2, "the lesson in b's records")
    rows = json.loads(cli(b_home, "records", "--kind", "correction", "--json").stdout)["records"]
    assert [r["id"] for r in rows] == [rid] and rows[0]["record"]["text"] == TEXT
    assert json.loads(cli(b_home, "records", "--kind", "error", "--json").stdout)["records"] == []
    shown = cli(b_home, "show", rid).stdout
    assert "status      candidate" in shown and f"from {a_info['peer_id']}" in shown
    peers = json.loads(cli(b_home, "peers", "--json").stdout)["peers"]
    assert [p["peer_id"] for p in peers if p["connected"]] == [a_info["peer_id"]]
    status = json.loads(cli(b_home, "status", "--json").stdout)
    assert status["records"] == {"lesson": {"candidate": 1}} and status["peers"]["connected"] == 1

    refused = cli(a_home, "publish", "--text", "Always use uv.", "--kind", "correction", check=False)
    assert refused.returncode == 5 and "observation" in refused.stderr
    assert cli(b_home, "show", "1220" + "00" * 32, check=False).returncode == 4
    assert cli(b_home, "show", "nope", check=False).returncode == 2
    assert "[limits]" in cli(a_home, "config").stdout

    # A second daemon on a port in use is refused with a clear message, not a traceback.
    c_home = tmp_path / "c"
    cli(c_home, "init", "--listen", f"/ip4/127.0.0.1/tcp/{a_port}", "--api", "127.0.0.1:0")
    clash = cli(c_home, "start", check=False)
    assert clash.returncode == 1 and "cannot listen on" in clash.stderr and "Traceback" not in clash.stderr
    api_clash = cli(c_home, "start", "--listen", "/ip4/127.0.0.1/tcp/0", "--api",
                    a.client().host + ":" + str(a.client().port), check=False)
    assert api_clash.returncode == 1 and "Address already in use" in api_clash.stderr
    same_home = cli(a_home, "start", check=False)
    assert same_home.returncode == 1 and "another openmemory-node is running" in same_home.stderr

    # With the daemon stopped, records and show still read the store.
    b.stop()
    offline_rows = json.loads(cli(b_home, "records", "--json").stdout)["records"]
    assert [r["id"] for r in offline_rows] == [rid]
    assert "candidate" in cli(b_home, "show", rid).stdout


def colliding_pair(digits: int = 8) -> tuple[bytes, bytes]:
    """Two valid lessons whose ids share their first ``digits`` hex digits (a birthday search)."""
    import nacl.signing

    from openmemory_node import wire

    key = nacl.signing.SigningKey(bytes(range(32)))
    seen: dict[str, bytes] = {}
    for i in range(200_000):
        data = wire.encode(wire.new_lesson(key, text=f"The nightly build {i} failed on a cold cache.",
                                           kind="error", strength=1000, provenance=bytes(32),
                                           created=1_760_000_000))
        prefix = wire.record_id(data).hex()[:digits]
        if prefix in seen:
            return seen[prefix], data
        seen[prefix] = data
    raise AssertionError("no collision")  # pragma: no cover


def test_ids_by_unambiguous_prefix_wherever_an_id_is(cluster):
    from openmemory_node import wire

    (a,) = cluster.line(1)
    first, second = colliding_pair()
    for data in (first, second):
        assert a.post("/v1/records", {"cbor": data.hex()})["status"] == "candidate"
    shared = wire.record_id(first).hex()[:8]
    rid = a.publish(TEXT)["id"]
    short = rid[:16]  # what `records` prints
    assert short in cli(a.home, "records").stdout
    assert a.get(f"/v1/records/{short}")["id"] == rid
    assert a.post("/v1/fetch", {"id": short})["fetched"]["from"] == "store"
    assert f"id          {rid}" in cli(a.home, "show", short).stdout
    child = cli(a.home, "publish", "--text", "The uv lock file was regenerated after pip ran.",
                "--kind", "correction", "--derived-from", short, "--json")
    assert json.loads(child.stdout)["record"]["derived_from"] == [rid]
    assert json.loads(cli(a.home, "attest", short, "--confirmed", "--json").stdout)["record"]["lesson_id"] == rid
    assert json.loads(cli(a.home, "revoke", short, "--local", "--json").stdout)["id"] == rid
    assert json.loads(cli(a.home, "revoke", short, "--undo", "--json").stdout)["lifted"] is True
    # Ambiguous: refused with the candidates; unknown: not found; not hex, or too short: usage.
    ambiguous = cli(a.home, "show", shared, check=False)
    assert ambiguous.returncode == 2 and "ambiguous" in ambiguous.stderr
    assert {wire.record_id(first).hex(), wire.record_id(second).hex()} <= set(ambiguous.stderr.split())
    assert cli(a.home, "attest", shared, "--confirmed", check=False).returncode == 2
    assert cli(a.home, "show", "1220ffffffff0000", check=False).returncode == 4
    assert cli(a.home, "show", "1220ab", check=False).returncode == 2
    assert cli(a.home, "show", "not-an-id", check=False).returncode == 2
    a.stop()  # offline, `show` reads the store and resolves prefixes the same way
    assert f"id          {rid}" in cli(a.home, "show", short).stdout
    assert cli(a.home, "show", shared, check=False).returncode == 2


def test_the_api_address_must_be_loopback(tmp_path):
    for address in ("0.0.0.0:4772", "192.168.1.20:4772", "[::]:4772"):
        out = cli(tmp_path / "x", "init", "--api", address, check=False)
        assert out.returncode == 2 and "not a loopback address" in out.stderr, out.stderr
    (tmp_path / "y").mkdir()
    (tmp_path / "y" / "config.toml").write_text('[api]\naddress = "0.0.0.0:0"\n')
    started = cli(tmp_path / "y", "start", check=False)
    assert started.returncode == 1 and "not a loopback address" in started.stderr
