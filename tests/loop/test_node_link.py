"""The engine finds its node from the node's data folder and talks only to its local API."""

from __future__ import annotations

import pytest

from openmemory_local.cli import main as cli
from openmemory_local.core.config import ConfigError, load_config, read_config_file
from openmemory_local.commons.node_link import NodeError, NodeLink, NodeUnavailable, open_link


def test_node_home_precedence(tmp_path):
    home = tmp_path / "engine"
    home.mkdir()
    env = {"HOME": str(tmp_path / "user")}
    assert load_config(home, env).node_home == tmp_path / "user" / ".local" / "share" / "openmemory-node"
    (home / "config.toml").write_text('[node]\nhome = "/srv/node-a"\n')
    assert load_config(home, env).node_home.as_posix() == "/srv/node-a"
    env["OPENMEMORY_NODE_HOME"] = "/srv/node-b"
    assert load_config(home, env).node_home.as_posix() == "/srv/node-b"
    assert load_config(home, env, node_home_option="/srv/node-c").node_home.as_posix() == "/srv/node-c"


@pytest.mark.parametrize("text, message", [
    ("[node]\nhom = '/x'\n", "unknown setting [node] hom"),
    ("[nod]\nhome = '/x'\n", "unknown setting [nod] home"),
    ("[node]\nhome = 3\n", "must be a path"),
    ("[node]\ntimeout = -1\n", "positive number"),
    ("[node\n", "does not parse"),
    ("node = 1\n", "must be a [section]"),
])
def test_config_file_errors_are_clear(tmp_path, text, message):
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        read_config_file(tmp_path)


def test_bad_config_file_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "config.toml").write_text("[node]\nhome = 3\n")
    assert cli.main(["stats", "--home", str(tmp_path)]) == cli.EXIT_USAGE
    assert "must be a path" in capsys.readouterr().err


def test_no_node_is_unavailable_with_the_way_out(tmp_path):
    with pytest.raises(NodeUnavailable, match="openmemory-node init"):
        NodeLink.open(tmp_path / "absent")
    (tmp_path / "stopped").mkdir()
    with pytest.raises(NodeUnavailable, match="not running"):
        NodeLink.open(tmp_path / "stopped")


@pytest.mark.parametrize("addr", ["10.1.2.3:4772", "example.com:80", "0.0.0.0:4772", "garbage", "127.0.0.1:0"])
def test_only_loopback_is_contacted(tmp_path, addr):
    (tmp_path / "api.addr").write_text(addr + "\n")
    (tmp_path / "api.token").write_text("t\n")
    with pytest.raises(NodeUnavailable):
        NodeLink.open(tmp_path)


def test_a_node_that_went_away_is_unavailable(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "api.addr").write_text(f"127.0.0.1:{port}\n")
    (tmp_path / "api.token").write_text("t\n")
    with pytest.raises(NodeUnavailable, match="does not answer"):
        NodeLink.open(tmp_path, timeout=5).node()


@pytest.mark.slow
def test_link_to_a_real_node(cluster, tmp_path):
    node = cluster.node("a")
    node.init()
    node.start()
    config = load_config(tmp_path / "engine", {"HOME": str(tmp_path)}, node_home_option=node.home)
    link = open_link(config)
    info = link.node()
    assert info["peer_id"] == node.peer_id
    with pytest.raises(NodeError) as err:
        link.record("1220" + "ab" * 32)
    assert err.value.status == 404
    bad = NodeLink(link.home, link.host, link.port, "not-the-token")
    with pytest.raises(NodeError) as err:
        bad.node()
    assert err.value.status == 401
    node.stop()
    with pytest.raises(NodeUnavailable):
        open_link(config).node()


@pytest.mark.slow
def test_the_engine_tells_its_node_the_domains_its_projects_touch(cluster, tmp_path, shared_data):
    """Real transcripts (the public ones in $OPENMEMORY_TEST_DATA) ingested into a real store:
    the domains of the programs its sessions ran reach a real node by PUT /v1/domains, and the
    node follows those and general (its gossip topics change with them)."""
    from datetime import datetime, timezone

    from openmemory_local.commons.receive import project_domains, report_domains
    from openmemory_local.core.config import Config
    from openmemory_local.ingest.transcripts import ingest
    from openmemory_local.storage.store import Store
    from openmemory_protocol.domains import DOMAINS, GENERAL

    store = Store.open(Config(home=tmp_path / "engine"))
    ingest(store, [shared_data / "claude-code" / "public"], now=datetime(2026, 12, 1, tzinfo=timezone.utc))
    domains = project_domains(store)
    heads = {row[0] for row in store.conn.execute(
        "SELECT DISTINCT j.key FROM episodes AS e, json_each(e.fields, '$.commands') AS j WHERE e.kind = 'session'")}
    assert heads, "the public transcripts ran commands"
    assert GENERAL in domains and set(domains) <= set(DOMAINS) and len(domains) > 1, (domains, sorted(heads)[:20])
    if any(h.split()[0] == "git" for h in heads):
        assert "git" in domains

    node = cluster.node("a")
    node.init()
    node.start()
    assert node.get("/v1/domains")["following"] == "every domain"
    config = load_config(tmp_path / "engine", {"HOME": str(tmp_path)}, node_home_option=node.home)
    reported = report_domains(store, open_link(config))
    assert reported == {"domains": domains, "changed": True}
    seen = node.get("/v1/domains")
    assert seen["following"] == domains and seen["reported"] == domains
    assert ("/openmemory/1/lesson/rust" in seen["topics"]) == ("rust" in domains)
    assert report_domains(store, open_link(config))["changed"] is False  # the same again: nothing changes
