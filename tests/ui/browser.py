"""Debian's Chromium for the browser tests: installed by the tests themselves when missing.

Playwright never downloads a browser here (it cannot: the machine reaches package registries
only); it drives ``/usr/bin/chromium`` from Debian's ``chromium`` package, which this module
installs with ``apt-get`` on a clean machine (CI runs as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")

#: What Chromium needs on this machine: headless, no sandbox (root), and none of the background
#: connections that a closed network refuses (they would slow every start).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class NoChromium(RuntimeError):
    pass


def ensure_chromium(timeout: float = 900.0) -> Path:
    """``/usr/bin/chromium``, installed from Debian's packages first if it is missing."""
    if CHROMIUM.exists():
        return CHROMIUM
    if shutil.which("apt-get") is None:
        raise NoChromium(f"{CHROMIUM} is missing and there is no apt-get to install Debian's chromium")
    if os.geteuid() != 0:
        raise NoChromium(f"{CHROMIUM} is missing: run `apt-get install -y chromium` as root")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
    for argv in (["apt-get", "update", "-q"], install):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise NoChromium(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-2000:]}")
    if not CHROMIUM.exists():
        raise NoChromium(f"apt-get installed chromium but {CHROMIUM} is still missing")
    return CHROMIUM


if __name__ == "__main__":
    print(ensure_chromium())
