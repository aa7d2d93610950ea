"""`openmemory install claude-code` / `uninstall claude-code` against a temporary HOME.

The command runs as a subprocess, as a user runs it; HOME, PATH and the data folder are
temporary. Reversibility is checked on whole trees: every file, symlink and directory under
HOME (and the fake crontab) is the same, byte for byte, after install + uninstall.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from cc_helpers import CLAUDE_JSON, SETTINGS_JSON, load, openmemory, snapshot

from openmemory_local.integrations.claude_code import EXIT_CONFLICT, EXIT_MALFORMED


def _install(data: Path, env: dict[str, str], *extra: str, check: bool = True):
    return openmemory("install", "claude-code", "--home", str(data), "--schedule", "none", *extra, env=env, check=check)


def _uninstall(data: Path, env: dict[str, str], *extra: str, check: bool = True):
    return openmemory("uninstall", "claude-code", "--home", str(data), *extra, env=env, check=check)


def _hook_commands(settings: dict) -> list[str]:
    return [h["command"] for group in settings["hooks"]["SessionEnd"] for h in group["hooks"]]


def test_install_registers_server_and_hook_and_uninstall_restores_every_byte(claude_home, data, env):
    before = snapshot(claude_home)
    _install(data, env)

    config = load(claude_home / ".claude.json")
    server = config["mcpServers"]["openmemory"]
    assert server["type"] == "stdio"
    assert Path(server["command"]).name == "openmemory" and Path(server["command"]).is_absolute()
    assert server["args"] == ["mcp", "--home", str(data)]
    assert server["env"] == {}
    # the user's servers and state are all still there, in their order
    assert list(config["mcpServers"]) == ["github", "sentry", "openmemory"]
    assert list(config)[:5] == ["numStartups", "installMethod", "autoUpdates", "tipsHistory", "mcpServers"]
    assert config["projects"]["/home/dev/code/spotter"]["mcpServers"] == {}  # local scope untouched

    settings = load(claude_home / ".claude" / "settings.json")
    commands = _hook_commands(settings)
    assert commands[0] == 'notify-send "bye"'  # the user's own SessionEnd hook comes first, kept
    assert "openmemory_local.integrations.session_end" in commands[1] and str(data) in commands[1]
    assert settings["hooks"]["PreToolUse"][0]["matcher"] == "Bash"
    assert settings["env"]["GREETING"] == "caf\u00e9 \u2615 /ok"

    # everything outside our additions is byte for byte what it was: the text before our
    # insertion point and after it are unchanged (CRLF, tabs, escapes and all)
    raw = (claude_home / ".claude" / "settings.json").read_bytes()
    assert raw.startswith(SETTINGS_JSON.encode()[: SETTINGS_JSON.index('\t\t]\r\n\t},')])
    assert b"\r\n" in raw and b"\n" not in raw.replace(b"\r\n", b"")  # no bare LF introduced
    assert b'"caf\\u00e9 \xe2\x98\x95 \\/ok"' in raw  # escapes as the user wrote them

    # a backup of each changed file is kept in the data folder
    backups = sorted((data / "integrations" / "backups").iterdir())
    assert {b.read_bytes() for b in backups} == {CLAUDE_JSON.encode(), SETTINGS_JSON.encode()}

    _uninstall(data, env)
    assert snapshot(claude_home) == before
    assert not (data / "integrations" / "claude-code.json").exists()


def test_install_twice_changes_nothing_the_second_time(claude_home, data, env):
    first = _install(data, env)
    assert "installed" in first.stdout
    after_first = snapshot(claude_home)
    manifest = (data / "integrations" / "claude-code.json").read_bytes()
    mtimes = {p: p.stat().st_mtime_ns for p in [claude_home / ".claude.json", claude_home / ".claude" / "settings.json"]}

    second = _install(data, env, "--json")
    report = json.loads(second.stdout)
    assert report["changes"] == [] and report["changed"] is False and report["ok"] is True
    assert snapshot(claude_home) == after_first
    assert (data / "integrations" / "claude-code.json").read_bytes() == manifest
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes  # not even rewritten
    assert len(list((data / "integrations" / "backups").iterdir())) == 2  # no new backups


def test_fresh_home_without_claude_files_is_left_empty_again(home, data, env):
    assert snapshot(home) == {}
    _install(data, env)
    assert load(home / ".claude.json")["mcpServers"]["openmemory"]["args"][0] == "mcp"
    assert len(_hook_commands(load(home / ".claude" / "settings.json"))) == 1
    assert oct((home / ".claude.json").stat().st_mode & 0o777) == "0o600"
    _uninstall(data, env)
    assert snapshot(home) == {}  # the files and the ~/.claude folder we created are gone


def test_dry_run_shows_the_diff_and_changes_nothing(claude_home, data, env):
    before = snapshot(claude_home)
    result = _install(data, env, "--dry-run")
    assert snapshot(claude_home) == before
    assert not data.exists()
    out = result.stdout
    assert "nothing was changed" in out
    assert f"modify {claude_home / '.claude.json'}" in out
    assert '+    "openmemory": {' in out
    assert "+\t\t\t{" in out  # the hook group, indented with the file's tabs
    assert "session_end" in out
    assert "backup of the current file to" in out

    _install(data, env)
    result = _uninstall(data, env, "--dry-run")
    assert '-    "openmemory": {' in result.stdout
    assert load(claude_home / ".claude.json")["mcpServers"]["openmemory"]  # still installed


def test_malformed_settings_are_reported_and_left_untouched(claude_home, data, env):
    broken = b'{\n  "model": "opus",\n  "hooks": {},\n}\n'  # trailing comma
    (claude_home / ".claude" / "settings.json").write_bytes(broken)
    before = snapshot(claude_home)
    result = _install(data, env, check=False)
    assert result.returncode == EXIT_MALFORMED
    assert "settings.json" in result.stderr and "line 4" in result.stderr and "Nothing was changed" in result.stderr
    assert snapshot(claude_home) == before  # ~/.claude.json was not changed either
    assert not (data / "integrations" / "claude-code.json").exists()

    for bad in (b"", b"[1, 2]", b"\xff\xfe{}", b'{"hooks": "none"}'):
        (claude_home / ".claude" / "settings.json").write_bytes(bad)
        result = _install(data, env, check=False)
        assert result.returncode == EXIT_MALFORMED, (bad, result.stderr)
        assert (claude_home / ".claude" / "settings.json").read_bytes() == bad
        assert load(claude_home / ".claude.json") == json.loads(CLAUDE_JSON)


def test_a_server_named_openmemory_that_we_did_not_add_is_a_conflict(claude_home, data, env):
    text = CLAUDE_JSON.replace('"sentry": {', '"openmemory": {"command": "/opt/other/openmemory"},\n    "sentry": {')
    (claude_home / ".claude.json").write_text(text)
    before = snapshot(claude_home)
    result = _install(data, env, check=False)
    assert result.returncode == EXIT_CONFLICT
    assert "did not add" in result.stderr and "claude mcp remove openmemory -s user" in result.stderr
    assert snapshot(claude_home) == before


def test_uninstall_keeps_changes_made_by_others_since_install(claude_home, data, env):
    _install(data, env)
    # Claude Code rewrites ~/.claude.json all the time; the user adds a server of their own
    config_path = claude_home / ".claude.json"
    text = config_path.read_text()
    text = text.replace('"numStartups": 184', '"numStartups": 185')
    text = text.replace('"sentry": {', '"linear": {\n      "type": "http",\n      "url": "https://mcp.linear.app/mcp"\n    },\n    "sentry": {')
    config_path.write_text(text)
    expected = CLAUDE_JSON.replace('"numStartups": 184', '"numStartups": 185').replace(
        '"sentry": {', '"linear": {\n      "type": "http",\n      "url": "https://mcp.linear.app/mcp"\n    },\n    "sentry": {'
    )
    _uninstall(data, env)
    assert config_path.read_text() == expected
    assert (claude_home / ".claude" / "settings.json").read_bytes() == SETTINGS_JSON.encode()


def test_an_entry_edited_since_install_is_left_unless_forced(claude_home, data, env):
    _install(data, env)
    path = claude_home / ".claude.json"
    config = path.read_text().replace('"env": {}\n    }\n  },', '"env": {"DEBUG": "1"}\n    }\n  },')
    path.write_text(config)
    result = _uninstall(data, env, check=False)
    assert result.returncode == EXIT_CONFLICT
    assert "changed since install" in result.stderr
    assert load(path)["mcpServers"]["openmemory"]["env"] == {"DEBUG": "1"}
    assert "openmemory" not in json.dumps(load(claude_home / ".claude" / "settings.json")["hooks"]["SessionEnd"])
    _uninstall(data, env, "--force")
    assert path.read_text() == CLAUDE_JSON


def test_reinstall_with_another_data_folder_moves_the_entries(claude_home, tmp_path, env):
    first, second = tmp_path / "data1", tmp_path / "data2"
    _install(first, env)
    # the same manifest is found only in the data folder it was written to: a second data
    # folder is a second install, whose entry conflicts with the first one's
    result = _install(second, env, check=False)
    assert result.returncode == EXIT_CONFLICT
    _uninstall(first, env)
    _install(second, env)
    assert load(claude_home / ".claude.json")["mcpServers"]["openmemory"]["args"][-1] == str(second)
    _uninstall(second, env)
    assert (claude_home / ".claude.json").read_text() == CLAUDE_JSON


def test_symlinked_settings_stay_links(claude_home, data, env, tmp_path):
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    settings = claude_home / ".claude" / "settings.json"
    shutil.move(settings, dotfiles / "settings.json")
    settings.symlink_to(dotfiles / "settings.json")
    before, before_dotfiles = snapshot(claude_home), snapshot(dotfiles)
    _install(data, env)
    assert settings.is_symlink()
    assert "session_end" in (dotfiles / "settings.json").read_text()
    _uninstall(data, env)
    assert snapshot(claude_home) == before and snapshot(dotfiles) == before_dotfiles


def test_claude_config_dir_is_respected(home, data, env, tmp_path):
    config_dir = tmp_path / "xdg" / "claude"
    config_dir.mkdir(parents=True)
    (config_dir / ".claude.json").write_text('{"numStartups": 1}')
    env = dict(env, CLAUDE_CONFIG_DIR=str(config_dir))
    _install(data, env)
    assert load(config_dir / ".claude.json")["mcpServers"]["openmemory"]
    assert load(config_dir / "settings.json")["hooks"]["SessionEnd"]
    assert snapshot(home) == {}  # nothing written to ~/.claude or ~/.claude.json
    _uninstall(data, env)
    assert snapshot(config_dir) == {".claude.json": b'{"numStartups": 1}'}


# --- the nightly schedule ------------------------------------------------------------------


def _systemctl_calls(env: dict[str, str]) -> list[list[str]]:
    log = Path(env["FAKE_SYSTEMCTL_LOG"])
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_systemd_timer_is_written_enabled_and_removed(claude_home, data, env, fake_bin, tmp_path):
    env = dict(env, PATH=f"{fake_bin}:{env['PATH']}")
    before = snapshot(claude_home)
    result = openmemory("install", "claude-code", "--home", str(data), "--at", "04:05", env=env, check=True)
    assert "loginctl enable-linger" in result.stdout
    units = claude_home / ".config" / "systemd" / "user"
    service = (units / "openmemory-run.service").read_text()
    timer = (units / "openmemory-run.timer").read_text()
    assert f"run --home {data}" in service and "Type=oneshot" in service
    assert "OnCalendar=*-*-* 04:05:00" in timer and "Persistent=true" in timer
    assert (units / "timers.target.wants" / "openmemory-run.timer").is_symlink()
    calls = _systemctl_calls(env)
    assert ["--user", "daemon-reload"] in calls
    assert ["--user", "enable", "--now", "openmemory-run.timer"] in calls

    analyze = shutil.which("systemd-analyze")
    if analyze:  # the real systemd parser checks the unit files
        runtime = tmp_path / "runtime"
        runtime.mkdir(mode=0o700)
        check = subprocess.run(
            [analyze, "verify", "--user", str(units / "openmemory-run.timer"), str(units / "openmemory-run.service")],
            capture_output=True, text=True, env=dict(os.environ, XDG_RUNTIME_DIR=str(runtime), HOME=str(claude_home)),
            timeout=60,
        )
        assert check.returncode == 0, check.stderr

    calls_before = len(calls)
    again = openmemory("install", "claude-code", "--home", str(data), "--at", "04:05", "--json", env=env, check=True)
    assert json.loads(again.stdout)["changes"] == []
    assert len(_systemctl_calls(env)) == calls_before + 1  # only the detection probe ran

    openmemory("uninstall", "claude-code", "--home", str(data), env=env, check=True)
    assert ["--user", "disable", "--now", "openmemory-run.timer"] in _systemctl_calls(env)
    assert snapshot(claude_home) == before  # units, the wants link and ~/.config: all gone


def test_systemd_unit_quotes_paths_with_spaces_and_percent(claude_home, tmp_path, env, fake_bin):
    env = dict(env, PATH=f"{fake_bin}:{env['PATH']}")
    data = tmp_path / "my data 100%"
    openmemory("install", "claude-code", "--home", str(data), env=env, check=True)
    service = (claude_home / ".config" / "systemd" / "user" / "openmemory-run.service").read_text()
    assert f'"{str(data).replace("%", "%%")}"' in service
    openmemory("uninstall", "claude-code", "--home", str(data), env=env, check=True)


def test_cron_entry_is_added_once_and_removed_exactly(claude_home, data, env, fake_bin):
    env = dict(env, PATH=f"{fake_bin}:{env['PATH']}", FAKE_SYSTEMD_DOWN="1")  # systemctl present, no bus
    crontab = Path(env["FAKE_CRONTAB_FILE"])
    mine = "MAILTO=dev@example.org\n0 * * * * /usr/bin/backup --quiet"  # no final newline
    crontab.write_text(mine)
    before = snapshot(claude_home)
    openmemory("install", "claude-code", "--home", str(data), env=env, check=True)
    lines = crontab.read_text().splitlines()
    assert lines[:2] == mine.splitlines()
    entry = [line for line in lines if "openmemory" in line and not line.startswith("#")]
    assert len(entry) == 1 and entry[0].startswith("17 3 * * * ") and f"run --home {data}" in entry[0]
    assert "nightly.log" in entry[0]

    once = crontab.read_text()
    result = openmemory("install", "claude-code", "--home", str(data), "--json", env=env, check=True)
    assert json.loads(result.stdout)["changes"] == [] and crontab.read_text() == once

    openmemory("uninstall", "claude-code", "--home", str(data), env=env, check=True)
    assert crontab.read_text() == mine
    assert snapshot(claude_home) == before


def test_cron_without_a_previous_crontab_leaves_none(claude_home, data, env, fake_bin):
    env = dict(env, PATH=f"{fake_bin}:{env['PATH']}")
    crontab = Path(env["FAKE_CRONTAB_FILE"])
    openmemory("install", "claude-code", "--home", str(data), "--schedule", "cron", env=env, check=True)
    assert "openmemory" in crontab.read_text()
    openmemory("uninstall", "claude-code", "--home", str(data), env=env, check=True)
    assert not crontab.exists()


def test_no_scheduler_prints_instructions(claude_home, data, env):
    result = openmemory("install", "claude-code", "--home", str(data), env=env, check=True)
    assert "schedule the nightly run yourself" in result.stdout
    assert "crontab -e" in result.stdout and "OnCalendar=" in result.stdout
    assert load(data / "integrations" / "claude-code.json")["schedule"] == {"kind": "none"}


def test_a_moved_installation_updates_its_entries_in_place(claude_home, data, env):
    """After the virtual environment moved, install again: the entries follow, uninstall still restores."""
    from openmemory_local.integrations import claude_code

    old = claude_code.Context.from_env(str(data), env, executable="/old/venv/bin/openmemory")
    old.python = "/old/venv/bin/python"
    claude_code.execute(old, claude_code.plan_install(old, "none"))
    assert load(claude_home / ".claude.json")["mcpServers"]["openmemory"]["command"] == "/old/venv/bin/openmemory"

    new = claude_code.Context.from_env(str(data), env, executable="/new/venv/bin/openmemory")
    new.python = "/new/venv/bin/python"
    plan = claude_code.plan_install(new, "none")
    assert [c.path.name for c in plan.changes] == [".claude.json", "settings.json"]
    claude_code.execute(new, plan)
    assert load(claude_home / ".claude.json")["mcpServers"]["openmemory"]["command"] == "/new/venv/bin/openmemory"
    commands = _hook_commands(load(claude_home / ".claude" / "settings.json"))
    assert len(commands) == 2 and commands[1].startswith("/new/venv/bin/python -P -m")  # replaced, not added

    claude_code.execute(new, claude_code.plan_uninstall(new))
    assert (claude_home / ".claude.json").read_text() == CLAUDE_JSON
    assert (claude_home / ".claude" / "settings.json").read_bytes() == SETTINGS_JSON.encode()


def test_setting_claude_config_dir_later_moves_the_entries(claude_home, data, env, tmp_path):
    before = snapshot(claude_home)
    _install(data, env)
    config_dir = tmp_path / "claude-config"
    config_dir.mkdir()
    moved = dict(env, CLAUDE_CONFIG_DIR=str(config_dir))
    _install(data, moved)
    assert snapshot(claude_home) == before  # taken out of ~/.claude.json and ~/.claude/settings.json
    assert load(config_dir / ".claude.json")["mcpServers"]["openmemory"]
    assert len(_hook_commands(load(config_dir / "settings.json"))) == 1
    _uninstall(data, moved)
    assert snapshot(config_dir) == {}
    assert snapshot(claude_home) == before
