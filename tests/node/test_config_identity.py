"""Data folder resolution, the TOML configuration, and the node key."""

from __future__ import annotations

import os
import stat

import nacl.signing
import pytest

from openmemory_node import config as config_mod, identity
from openmemory_node.home import ensure_token, init_home, HomeError


def test_home_precedence_option_then_environment_then_xdg(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENMEMORY_NODE_HOME", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert config_mod.resolve_home(tmp_path / "opt") == tmp_path / "opt"
    assert config_mod.resolve_home(None) == tmp_path / "env"
    monkeypatch.delenv("OPENMEMORY_NODE_HOME")
    assert config_mod.resolve_home(None) == tmp_path / "xdg" / "openmemory-node"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert config_mod.resolve_home(None) == tmp_path / "h" / ".local" / "share" / "openmemory-node"


def test_rendered_configuration_round_trips_and_lists_every_key(tmp_path):
    cfg = config_mod.Config()
    cfg.node.bootstrap = ["/ip4/127.0.0.1/tcp/1/p2p/12D3KooWx"]
    cfg.limits = cfg.limits.__class__(author_rate=2.5)
    config_mod.write(tmp_path, cfg)
    loaded = config_mod.load(tmp_path)
    assert loaded == cfg
    text = (tmp_path / "config.toml").read_text()
    for section, values in cfg.to_dict().items():
        assert f"[{section}]" in text
        for key in values:
            assert f"\n{key} = " in text


@pytest.mark.parametrize("toml, message", [
    ("[node]\nlisen = []\n", "unknown key 'lisen' in [node]"),
    ("[nodes]\n", "unknown section [nodes]"),
    ("[limits]\nauthor_rate = \"fast\"\n", "expected float"),
    ("[gossip]\ndegree = 1.5\n", "expected int"),
    ("[api]\naddress = \"localhost\"\n", "not HOST:PORT"),
    ("[gossip]\ndegree_low = 9\n", "degree_low <= degree"),
    ("[limits]\npeer_rate = 0\n", "peer_rate must be positive"),
    ("[log]\nformat = \"xml\"\n", "format"),
    ("this is not toml", "config.toml"),
])
def test_bad_configuration_is_a_clear_error(tmp_path, toml, message):
    (tmp_path / "config.toml").write_text(toml)
    with pytest.raises(config_mod.ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config_mod.load(tmp_path)


def test_missing_keys_take_defaults(tmp_path):
    (tmp_path / "config.toml").write_text("[limits]\nauthor_burst = 5\n")
    cfg = config_mod.load(tmp_path)
    assert cfg.limits.author_burst == 5.0
    assert cfg.limits.author_rate == config_mod.Limits().author_rate
    assert cfg.node.listen == [config_mod.DEFAULT_LISTEN]


def test_init_makes_a_private_key_token_and_config_and_is_idempotent(tmp_path):
    home = tmp_path / "home"
    ident, created = init_home(home, config_mod.Config())
    assert created
    for name in ("identity.key", "api.token"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    again, created_again = init_home(home, config_mod.Config())
    assert not created_again and again.public_key == ident.public_key
    assert identity.load(home).peer_id == ident.peer_id


def test_key_is_refused_when_others_can_read_it_or_it_is_damaged(tmp_path):
    identity.create(tmp_path)
    with pytest.raises(identity.IdentityError, match="already exists"):
        identity.create(tmp_path)
    path = tmp_path / "identity.key"
    os.chmod(path, 0o644)
    with pytest.raises(identity.IdentityError, match="chmod 600"):
        identity.load(tmp_path)
    os.chmod(path, 0o600)
    path.write_text("ed25519:abcd\n")
    with pytest.raises(identity.IdentityError, match="32 bytes"):
        identity.load(tmp_path)
    path.write_text("rsa:00\n")
    with pytest.raises(identity.IdentityError, match="not an ed25519"):
        identity.load(tmp_path)
    with pytest.raises(identity.IdentityError, match="openmemory-node init"):
        identity.load(tmp_path / "nowhere")


def test_token_file_readable_by_others_is_refused(tmp_path):
    ensure_token(tmp_path)
    os.chmod(tmp_path / "api.token", 0o640)
    with pytest.raises(HomeError, match="chmod 600"):
        ensure_token(tmp_path)


def test_one_key_is_the_peer_id_and_the_record_signer():
    from libp2p.crypto.ed25519 import Ed25519PublicKey
    from libp2p.peer.id import ID

    from openmemory_node import wire

    for _ in range(50):
        ident = identity.Identity(nacl.signing.SigningKey.generate())
        expected = ID.from_pubkey(Ed25519PublicKey.from_bytes(ident.public_key)).to_base58()
        assert ident.peer_id == expected
        assert identity.public_key_of_peer(ident.peer_id) == ident.public_key
        pair = ident.key_pair()
        assert pair.public_key.to_bytes() == ident.public_key
    lesson = wire.new_lesson(ident.signing_key, text="The build failed twice on Fridays.",
                             kind="error", strength=1000, provenance=bytes(32), created=wire.MIN_CREATED)
    assert lesson.signer == ident.public_key
    # libp2p's signature under the same key verifies with PyNaCl, and vice versa.
    sig = pair.private_key.sign(b"message")
    ident.signing_key.verify_key.verify(b"message", sig)
    assert pair.public_key.verify(b"other", ident.signing_key.sign(b"other").signature)
