"""The data folder's files, and ``init``: light (no libp2p import), so that the CLI is quick."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from . import config as config_mod, identity as identity_mod

TOKEN_FILE = "api.token"
LOCK_FILE = "node.lock"
API_ADDR_FILE = "api.addr"
ADDRS_FILE = "node.addrs"


class HomeError(Exception):
    pass


def ensure_token(home: Path) -> str:
    """The API token (created with mode 0600 on first use)."""
    path = Path(home) / TOKEN_FILE
    if not path.exists():
        token = secrets.token_urlsafe(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, (token + "\n").encode())
        finally:
            os.close(fd)
    st = path.stat()
    if st.st_mode & 0o077:
        raise HomeError(f"{path} is readable by other users: run `chmod 600 {path}`")
    return path.read_text().strip()


def init_home(home: Path, config: config_mod.Config) -> tuple[identity_mod.Identity, bool]:
    """Create the data folder, key, token and configuration. Returns (identity, created)."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    created = False
    if identity_mod.key_path(home).exists():
        ident = identity_mod.load(home)
    else:
        ident = identity_mod.create(home)
        created = True
    if not (home / config_mod.CONFIG_FILE).exists():
        config_mod.write(home, config)
    ensure_token(home)
    from .store import Store

    Store.open(home).close()
    return ident, created
