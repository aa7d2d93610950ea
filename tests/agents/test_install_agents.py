"""``openmemory install codex|gemini`` on real files in a scratch home: --dry-run changes nothing
(every file hashed before and after), install registers the MCP server and the hooks,
uninstall gives every file back byte for byte; a file that does not parse, or a server of
the same name we did not add, stops it before anything is written."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from openmemory_local.integrations.agents import run
from openmemory_local.integrations.claude_code import EXIT_CONFLICT, EXIT_MALFORMED

EXE = "/opt/openmemory/bin/openmemory"  # the command registered (it need not exist to be written)
CONFIG_TOML = b'model = "gpt-5-codex"\n\n# my servers\n[mcp_servers.docs]\ncommand = "docs-mcp"'  # no final newline
SETTINGS = b'{\n  "theme": "GitHub",\n  "hooks": {\n    "AfterTool": []\n  }\n}\n'


@pytest.fixture
def home(tmp_path: Path) -> Path:
    user = tmp_path / "user"
    (user / ".codex").mkdir(parents=True)
    (user / ".gemini").mkdir()
    (user / ".codex" / "config.toml").write_bytes(CONFIG_TOML)
    (user / ".gemini" / "settings.json").write_bytes(SETTINGS)
    return user


def env(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "")}


def hashes(*roots: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for root in roots for p in sorted(root.rglob("*"))
            if p.is_file()}


def call(agent: str, action: str, home: Path, data: Path, **kw) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(agent, action, str(data), env=env(home), executable=EXE, out=out, err=err,
               dry_run=kw.pop("dry_run", False), as_json=kw.pop("as_json", False), **kw)
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("agent", ["codex", "gemini"])
def test_dry_run_changes_nothing_and_prints_the_diff(agent, home, tmp_path):
    before = hashes(tmp_path)
    code, text = call(agent, "install", home, tmp_path / "data", dry_run=True)
    assert code == 0
    assert "nothing was changed" in text and "+" in text and "openmemory" in text
    assert hashes(tmp_path) == before
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("agent", ["codex", "gemini"])
def test_install_then_uninstall_is_byte_identical(agent, home, tmp_path):
    data = tmp_path / "data"
    before = hashes(home)
    code, _ = call(agent, "install", home, data)
    assert code == 0
    if agent == "codex":
        config = tomllib.loads((home / ".codex" / "config.toml").read_text())
        assert config["mcp_servers"]["openmemory"] == {"command": EXE, "args": ["mcp", "--home", str(data)]}
        assert config["mcp_servers"]["docs"] == {"command": "docs-mcp"} and config["model"] == "gpt-5-codex"
        assert (home / ".codex" / "config.toml").read_bytes().startswith(CONFIG_TOML)
        hooks = json.loads((home / ".codex" / "hooks.json").read_text())["hooks"]
        assert set(hooks) == {"Stop", "SessionStart"}
        assert "openmemory_local.integrations.session_end" in hooks["Stop"][0]["hooks"][0]["command"]
        assert not (home / ".codex" / "AGENTS.override.md").exists()
    else:
        settings = json.loads((home / ".gemini" / "settings.json").read_text())
        assert settings["mcpServers"]["openmemory"]["args"] == ["mcp", "--home", str(data)]
        assert set(settings["hooks"]) == {"AfterTool", "SessionEnd", "SessionStart"}
        assert settings["hooks"]["SessionEnd"][0]["hooks"][0]["timeout"] == 15000  # milliseconds
        assert settings["theme"] == "GitHub"
    installed = hashes(home)
    code, text = call(agent, "install", home, data)
    assert code == 0 and "already installed" in text and hashes(home) == installed  # idempotent
    code, _ = call(agent, "uninstall", home, data)
    assert code == 0
    assert hashes(home) == before
    assert not (data / "integrations" / f"{agent}.json").exists()


def test_a_config_toml_that_does_not_parse_is_left_alone(home, tmp_path):
    (home / ".codex" / "config.toml").write_bytes(b"[mcp_servers\nbroken = ")
    before = hashes(home)
    code, text = call("codex", "install", home, tmp_path / "data")
    assert code == EXIT_MALFORMED and "Nothing was changed" in text
    assert hashes(home) == before


def test_a_server_of_that_name_we_did_not_add_is_a_conflict(home, tmp_path):
    (home / ".codex" / "config.toml").write_bytes(CONFIG_TOML + b'\n[mcp_servers.openmemory]\ncommand = "mine"\n')
    before = hashes(home)
    code, text = call("codex", "install", home, tmp_path / "data")
    assert code == EXIT_CONFLICT and "did not add" in text
    assert hashes(home) == before


def test_uninstall_keeps_what_the_owner_added_since(home, tmp_path):
    data = tmp_path / "data"
    call("codex", "install", home, data)
    path = home / ".codex" / "config.toml"
    path.write_bytes(path.read_bytes() + b'\n[mcp_servers.later]\ncommand = "later"\n')
    code, _ = call("codex", "uninstall", home, data)
    assert code == 0
    text = path.read_bytes()
    assert text.startswith(CONFIG_TOML) and b"openmemory" not in text and b"[mcp_servers.later]" in text
    tomllib.loads(text.decode())


def test_the_command_line_offers_codex_and_gemini(home, tmp_path):
    e = dict(os.environ, HOME=str(home))
    e.pop("CODEX_HOME", None)
    e.pop("GEMINI_CLI_HOME", None)
    before = hashes(home)
    for agent in ("codex", "gemini"):
        proc = subprocess.run([sys.executable, "-m", "openmemory_local.cli.main", "install", agent, "--dry-run", "--home",
                               str(tmp_path / "data")], capture_output=True, text=True, env=e, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert f"openmemory install {agent} --dry-run" in proc.stdout
    assert hashes(home) == before
