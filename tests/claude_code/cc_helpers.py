"""Helpers for the Claude Code integration tests: a temporary HOME holding realistic Claude Code
settings, the ``openmemory`` command run as a subprocess against it, and stand-ins for the
two system services that cannot be used here.

Fakes, named as such: this machine has no systemd user manager (``systemctl --user`` cannot
reach a bus) and no ``crontab``, and a test must never touch the real user's crontab or
timers anyway. ``fake_bin`` puts two small executables first in PATH:

- ``systemctl``: logs its arguments; ``--user show-environment`` succeeds (a user manager
  "answers"); ``enable``/``disable`` create/remove the ``<WantedBy>.wants/`` symlink as
  systemd does; ``daemon-reload`` does nothing.
- ``crontab``: ``-l``, ``-`` and ``-r`` over a file, with cron's "no crontab for <user>" error.

The unit files themselves are checked with the real ``systemd-analyze verify`` when it exists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

OPENMEMORY = Path(sys.executable).parent / "openmemory"

# A ~/.claude.json as Claude Code writes it (JSON.stringify(config, null, 2), no final newline).
CLAUDE_JSON = """{
  "numStartups": 184,
  "installMethod": "native",
  "autoUpdates": false,
  "tipsHistory": {
    "new-user-warmup": 7,
    "memory-command": 31
  },
  "mcpServers": {
    "github": {
      "type": "stdio",
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-github"
      ],
      "env": {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_redacted"
      }
    },
    "sentry": {
      "type": "http",
      "url": "https://mcp.sentry.dev/mcp"
    }
  },
  "projects": {
    "/home/dev/code/spotter": {
      "allowedTools": [],
      "mcpServers": {},
      "hasTrustDialogAccepted": true,
      "lastCost": 1.2345,
      "lastSessionId": "258c7280-ae70-4798-800f-63464d01a85d"
    }
  },
  "userID": "0123456789abcdef",
  "firstStartTime": "2026-01-02T09:10:11.123Z"
}"""

# A hand-edited ~/.claude/settings.json: tabs, inline arrays, escapes, non-ASCII, other hooks
# (one of them already on SessionEnd), CRLF line ends.
SETTINGS_JSON = (
    '{\r\n'
    '\t"$schema": "https://json.schemastore.org/claude-code-settings.json",\r\n'
    '\t"model" : "opus",\r\n'
    '\t"env": {"EDITOR": "vim", "GREETING": "caf\\u00e9 \u2615 \\/ok"},\r\n'
    '\t"permissions": { "allow": [ "Bash(git status)", "Bash(npm run test:*)" ], "deny": [] },\r\n'
    '\t"hooks": {\r\n'
    '\t\t"PreToolUse": [\r\n'
    '\t\t\t{ "matcher": "Bash", "hooks": [ { "type": "command", "command": "~/bin/guard.sh" } ] }\r\n'
    '\t\t],\r\n'
    '\t\t"SessionEnd": [\r\n'
    '\t\t\t{ "hooks": [ { "type": "command", "command": "notify-send \\"bye\\"" } ] }\r\n'
    '\t\t]\r\n'
    '\t},\r\n'
    '\t"cleanupPeriodDays": 99999\r\n'
    '}\r\n'
)


def snapshot(root: Path) -> dict[str, object]:
    """Every file (bytes), symlink (target) and directory under ``root``."""
    state: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                state[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                state[rel] = "dir"
            else:
                state[rel] = path.read_bytes()
    return state


def write_script(path: Path, body: str) -> None:
    path.write_text(f"#!{sys.executable}\n" + body, encoding="utf-8")
    path.chmod(0o755)


FAKE_SYSTEMCTL = r'''
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["FAKE_SYSTEMCTL_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
if os.environ.get("FAKE_SYSTEMD_DOWN"):
    print("Failed to connect to bus: No medium found", file=sys.stderr)
    sys.exit(1)
config = Path(os.environ.get("XDG_CONFIG_HOME") or Path(os.environ["HOME"]) / ".config")
units = config / "systemd" / "user"
words = [a for a in args if not a.startswith("--")]
verb, names = (words[0], words[1:]) if words else ("", [])
if verb == "show-environment":
    print("HOME=" + os.environ["HOME"])
elif verb in ("enable", "disable"):
    for name in names:
        unit = units / name
        wanted = []
        if unit.exists():
            section = None
            for line in unit.read_text().splitlines():
                if line.startswith("["):
                    section = line.strip()
                elif section == "[Install]" and line.startswith("WantedBy="):
                    wanted += line.split("=", 1)[1].split()
        elif verb == "enable":
            print(f"Failed to enable unit: Unit file {name} does not exist.", file=sys.stderr)
            sys.exit(1)
        for target in wanted or ["timers.target"]:
            link = units / (target + ".wants") / name
            if verb == "enable":
                link.parent.mkdir(parents=True, exist_ok=True)
                if not os.path.lexists(link):
                    link.symlink_to(unit)
                    print(f"Created symlink {link} -> {unit}.", file=sys.stderr)
            elif os.path.lexists(link):
                link.unlink()
                print(f"Removed {link}.", file=sys.stderr)
elif verb in ("daemon-reload", "start", "stop"):
    pass
else:
    print(f"fake systemctl: unsupported {args}", file=sys.stderr)
    sys.exit(2)
'''

FAKE_CRONTAB = r'''
import os, sys
store = os.environ["FAKE_CRONTAB_FILE"]
args = sys.argv[1:]
if args == ["-l"]:
    if not os.path.exists(store):
        print("no crontab for tester", file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(open(store).read())
elif args == ["-"]:
    data = sys.stdin.read()
    open(store, "w").write(data)
elif args == ["-r"]:
    if not os.path.exists(store):
        print("no crontab for tester", file=sys.stderr)
        sys.exit(1)
    os.unlink(store)
else:
    print("usage: crontab [-l | -r | -]", file=sys.stderr)
    sys.exit(1)
'''


def openmemory(*args: str, env: dict[str, str], check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the ``openmemory`` command line in a subprocess."""
    result = subprocess.run([str(OPENMEMORY), *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} exited {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    return result


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8-sig"))
