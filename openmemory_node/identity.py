"""The node's identity: one Ed25519 key, the libp2p peer id and the records' signer.

The key lives in ``<home>/identity.key`` as a line of text, ``ed25519:<64 hex digits of the
32-byte seed>``, created with mode 0600. A key file that other users can read is refused, as
ssh refuses one: the key signs everything this node publishes.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import nacl.signing

KEY_FILE = "identity.key"
_PREFIX = "ed25519:"


class IdentityError(Exception):
    pass


@dataclass(frozen=True)
class Identity:
    signing_key: nacl.signing.SigningKey

    @property
    def public_key(self) -> bytes:
        return bytes(self.signing_key.verify_key)

    @property
    def seed(self) -> bytes:
        return bytes(self.signing_key)

    def key_pair(self):
        """The libp2p KeyPair wrapping the same key (imports libp2p lazily)."""
        from libp2p.crypto.ed25519 import Ed25519PrivateKey
        from libp2p.crypto.keys import KeyPair

        private = Ed25519PrivateKey(self.signing_key)
        return KeyPair(private, private.get_public_key())

    @property
    def peer_id(self) -> str:
        return peer_id_of(self.public_key)


_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"


def _base58(data: bytes) -> str:
    number = int.from_bytes(data, "big")
    out = ""
    while number:
        number, digit = divmod(number, 58)
        out = _B58[digit] + out
    return "1" * (len(data) - len(data.lstrip(b"\0"))) + out


def peer_id_of(public_key: bytes) -> str:
    """The libp2p peer id (base58 text) of a 32-byte Ed25519 public key.

    As the libp2p spec defines it, without importing libp2p (so that ``init`` and ``id``
    start fast): the identity multihash (0x00, length 36) of the protobuf PublicKey
    {Type: Ed25519 (1), Data: the 32 bytes}, in base58btc."""
    if len(public_key) != 32:
        raise ValueError("an Ed25519 public key has 32 bytes")
    protobuf = b"\x08\x01\x12\x20" + public_key
    return _base58(b"\x00" + bytes([len(protobuf)]) + protobuf)


def _unbase58(text: str) -> bytes:
    number = 0
    for char in text:
        digit = _B58.find(char)
        if digit < 0:
            raise ValueError(f"{char!r} is not a base58 character")
        number = number * 58 + digit
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    return b"\0" * (len(text) - len(text.lstrip("1"))) + body


_PEER_ID_HEAD = b"\x00\x24\x08\x01\x12\x20"  # identity multihash of an Ed25519 PublicKey


def parse_public_key(text: str) -> bytes:
    """An Ed25519 public key from its 64 hex digits or from a peer id (12D3KooW...) that
    inlines it; ValueError otherwise. No libp2p import (the CLI stays quick)."""
    if not isinstance(text, str):
        raise ValueError("a key is text: 64 hex digits or a peer id")
    text = text.strip()
    if len(text) == 64:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    try:
        raw = _unbase58(text)
    except ValueError:
        raw = b""
    if len(raw) == len(_PEER_ID_HEAD) + 32 and raw.startswith(_PEER_ID_HEAD):
        return raw[len(_PEER_ID_HEAD):]
    raise ValueError(f"{text[:70]!r} is neither 64 hex digits nor an Ed25519 peer id")


def public_key_of_peer(peer_id: str) -> bytes | None:
    """The Ed25519 public key inlined in a peer id, or None if it is not one."""
    from libp2p.peer.id import ID

    try:
        key = ID.from_base58(peer_id).extract_public_key()
    except Exception:
        return None
    if key is None or key.get_type().name.lower() != "ed25519":
        return None
    return key.to_bytes()


def key_path(home: Path) -> Path:
    return Path(home) / KEY_FILE


def create(home: Path) -> Identity:
    """Make a new key in ``home`` (mode 0600). Refuses to overwrite an existing one."""
    path = key_path(home)
    key = nacl.signing.SigningKey.generate()
    text = (_PREFIX + bytes(key).hex() + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise IdentityError(f"{path} already exists; refusing to replace a node identity")
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text)
        os.fsync(fd)
    finally:
        os.close(fd)
    return Identity(key)


def load(home: Path) -> Identity:
    path = key_path(home)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise IdentityError(f"no identity at {path}: run `openmemory-node init` first")
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise IdentityError(
            f"{path} is readable by other users (mode {stat.S_IMODE(st.st_mode):o}); "
            f"run `chmod 600 {path}`"
        )
    text = path.read_text().strip()
    if not text.startswith(_PREFIX):
        raise IdentityError(f"{path}: not an ed25519 key file")
    try:
        seed = bytes.fromhex(text[len(_PREFIX):])
    except ValueError:
        raise IdentityError(f"{path}: the key is not hexadecimal")
    if len(seed) != 32:
        raise IdentityError(f"{path}: an ed25519 seed has 32 bytes, found {len(seed)}")
    return Identity(nacl.signing.SigningKey(seed))
