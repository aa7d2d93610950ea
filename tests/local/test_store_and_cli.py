"""The store (schema, migrations, WAL, triggers), configuration, clock, and the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from openmemory_local.storage import store as store_module
from openmemory_local.cli.main import main
from openmemory_local.core.clock import ClockError, iso, parse_time, resolve_now
from openmemory_local.core.config import Config, default_sources, load_config, resolve_home
from openmemory_local.storage.store import SCHEMA_VERSION, Migration, Store, StoreError

from .transcripts import SESSION, T

CLI = [sys.executable, "-m", "openmemory_local.cli.main"]


# --- configuration and clock ---------------------------------------------------------


def test_home_precedence(tmp_path):
    env = {"HOME": str(tmp_path / "u"), "XDG_DATA_HOME": str(tmp_path / "xdg"),
           "OPENMEMORY_HOME": str(tmp_path / "om")}
    assert resolve_home(tmp_path / "opt", env) == tmp_path / "opt"
    assert resolve_home(None, env) == tmp_path / "om"
    del env["OPENMEMORY_HOME"]
    assert resolve_home(None, env) == tmp_path / "xdg" / "openmemory"
    del env["XDG_DATA_HOME"]
    assert resolve_home(None, env) == tmp_path / "u" / ".local" / "share" / "openmemory"
    assert resolve_home(None, {"HOME": "/h", "XDG_DATA_HOME": "relative"}) == Path("/h/.local/share/openmemory")


def test_sources_follow_claude_config_dir(tmp_path):
    assert default_sources({"HOME": "/h"}) == (Path("/h/.claude/projects"),)
    assert default_sources({"HOME": "/h", "CLAUDE_CONFIG_DIR": "/c"}) == (Path("/c/projects"),)


def test_environment_overrides(tmp_path):
    config = load_config(tmp_path, {"HOME": "/h", "OPENMEMORY_MAX_LINE_BYTES": "1024"})
    assert config.max_line_bytes == 1024
    from openmemory_local.core.config import ConfigError

    with pytest.raises(ConfigError):
        load_config(tmp_path, {"HOME": "/h", "OPENMEMORY_MAX_LINE_BYTES": "lots"})


def test_the_lesson_models_time_is_a_setting(tmp_path):
    """A local model on a busy CPU needs more than 20 s an answer: config.toml says how long."""
    from openmemory_local.core.config import ConfigError

    (tmp_path / "config.toml").write_text("[lessons]\nmodel_timeout = 180.0\nmodel_budget = 1800\n")
    config = load_config(tmp_path, {"HOME": "/h"})
    assert (config.lesson_model_timeout, config.lesson_model_budget) == (180.0, 1800.0)
    (tmp_path / "config.toml").write_text('[lessons]\nmodel_timeout = "long"\n')
    with pytest.raises(ConfigError):
        load_config(tmp_path, {"HOME": "/h"})


def test_clock():
    t = parse_time("2026-02-11T20:55:01.123Z")
    assert iso(t) == "2026-02-11T20:55:01.123Z"
    assert iso(parse_time("2026-02-11")) == "2026-02-11T00:00:00.000Z"
    assert iso(parse_time("2026-02-11T21:55:01+01:00")) == "2026-02-11T20:55:01.000Z"
    assert iso(resolve_now(None, {"OPENMEMORY_NOW": "2030-01-01T00:00:00Z"})) == "2030-01-01T00:00:00.000Z"
    assert iso(resolve_now("2031-01-01", {"OPENMEMORY_NOW": "2030-01-01"})) == "2031-01-01T00:00:00.000Z"
    with pytest.raises(ClockError):
        parse_time("yesterday")


# --- the store --------------------------------------------------------------------------


def test_a_new_store(store, config):
    assert store.schema_version() == SCHEMA_VERSION == len(store_module.MIGRATIONS)
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = set(store.db.table_names())
    assert {"schema_version", "meta", "counters", "transcripts", "episodes", "lessons", "lesson_members",
            "predictions", "events", "reports", "rendered_files"} <= tables
    assert store.get_meta("embedding") == "hash-wb-256-v1"
    assert config.db_path.exists()


def test_reopening_does_not_migrate_again(config):
    Store.open(config).close()
    with Store.open(config) as again:
        assert again.migrate() == []
        assert again.conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == SCHEMA_VERSION


def test_a_forward_migration_runs_once(config, monkeypatch):
    Store.open(config).close()
    extra = Migration(SCHEMA_VERSION + 1, "extra", store_module._sql("CREATE TABLE extra (id INTEGER PRIMARY KEY, text TEXT);"))
    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, extra])
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with Store.open(config) as s:
        assert s.schema_version() == SCHEMA_VERSION + 1 and "extra" in s.db.table_names()
    with Store.open(config) as s:
        assert s.migrate() == []


def test_a_failed_migration_changes_nothing(config, monkeypatch):
    Store.open(config).close()
    bad = Migration(SCHEMA_VERSION + 1, "broken", store_module._sql("CREATE TABLE half (x);\nTHIS IS NOT SQL;"))
    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, bad])
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError):
        Store.open(config)
    monkeypatch.undo()
    with Store.open(config) as s:
        assert s.schema_version() == SCHEMA_VERSION and "half" not in s.db.table_names()


def test_a_store_from_a_newer_version_is_refused(config, tmp_path, capsys):
    with Store.open(config) as s, s.write():
        s.conn.execute("INSERT INTO schema_version VALUES (99, 'future', '2030-01-01')")
    with pytest.raises(StoreError, match="newer"):
        Store.open(config)
    assert main(["stats", "--home", str(config.home)]) == 4
    assert "upgrade openmemory" in capsys.readouterr().err


def test_not_a_database_and_not_a_folder(tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / "openmemory.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError):
        Store.open(Config(home=home))
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["stats", "--home", str(afile)]) == 4
    assert "is not a folder" in capsys.readouterr().err


def test_triggers_keep_the_change_counters(store, now):
    from openmemory_local.ingest.episodes import Episode
    from openmemory_local.ingest.transcripts import add_episodes

    e = Episode("error", "k1", "make failed", {}, "s", None, "/p", iso(now), 1)
    add_episodes(store, [e], now=now)
    seq1 = store.counter("episode_seq")
    (row_seq,) = store.conn.execute("SELECT seq FROM episodes WHERE key = 'k1'").fetchone()
    assert row_seq == seq1 > 0
    with store.write():
        store.conn.execute("UPDATE episodes SET strength = 0.5 WHERE key = 'k1'")
    assert store.counter("episode_seq") == seq1 + 1
    epoch = store.counter("episode_epoch")
    with store.write():
        store.conn.execute("DELETE FROM episodes")
    assert store.counter("episode_epoch") == epoch + 1


def test_a_write_that_fails_is_rolled_back(store):
    with pytest.raises(RuntimeError):
        with store.write():
            store.set_meta("x", "1")
            raise RuntimeError("boom")
    assert store.get_meta("x") is None


# --- the CLI --------------------------------------------------------------------------------


def _env(tmp_path: Path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENMEMORY_HOME", "XDG_DATA_HOME",
                                                           "CLAUDE_CONFIG_DIR", "OPENMEMORY_NOW")}
    env.update(HOME=str(tmp_path / "user"), **extra)
    return env


def test_run_for_a_new_user_without_claude_code(tmp_path):
    out = subprocess.run([*CLI, "run"], capture_output=True, text=True, env=_env(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "No Claude Code transcripts yet" in out.stdout
    assert str(tmp_path / "user" / ".claude" / "projects") in out.stdout
    assert (tmp_path / "user" / ".local" / "share" / "openmemory" / "openmemory.db").exists()
    data = json.loads(subprocess.run([*CLI, "run", "--json"], capture_output=True, text=True,
                                     env=_env(tmp_path), check=True).stdout)
    assert data["ingest"]["files"] == [] and data["ingest"]["problems"] == 0


def test_run_ingests_the_claude_code_projects_folder(tmp_path):
    projects = tmp_path / "user" / ".claude" / "projects" / "-home-me-app"
    t = T()
    t.person("deploy")
    t.bash("git push", "toolu_p", "fatal: The current branch main has no upstream branch.", 128)
    t.write(projects / f"{SESSION}.jsonl")
    env = _env(tmp_path, OPENMEMORY_HOME=str(tmp_path / "om"), OPENMEMORY_NOW="2026-03-01T00:00:00Z")
    out = subprocess.run([*CLI, "run"], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "episodes added: error 1, session 1" in out.stdout
    assert str(tmp_path / "om") in out.stdout
    again = subprocess.run([*CLI, "run", "--json"], capture_output=True, text=True, env=env, check=True)
    assert json.loads(again.stdout)["ingest"]["totals"]["episodes_added"] == {}
    custom = _env(tmp_path, OPENMEMORY_HOME=str(tmp_path / "om2"),
                  CLAUDE_CONFIG_DIR=str(tmp_path / "user" / ".claude"))
    data = json.loads(subprocess.run([*CLI, "run", "--json"], capture_output=True, text=True, env=custom,
                                     check=True).stdout)
    assert data["ingest"]["totals"]["episodes_added"] == {"error": 1, "session": 1}


@pytest.fixture
def cli_home(tmp_path):
    folder = tmp_path / "projects"
    t = T()
    t.person("ship it")
    t.says("Pushing now.")
    t.bash("git push 2>&1", "toolu_push", "fatal: The current branch main has no upstream branch.", 128, "Push")
    t.person("no, open a pull request instead")
    t.says("Opening a pull request.")  # a message is decided with the agent's answer (issue 32)
    t.write(folder / f"{SESSION}.jsonl")
    other = T(session="77777777-0000-0000-0000-000000000000", cwd="/home/me/other")
    other.person("test")
    other.bash("npm test", "toolu_npm", "npm ERR! missing script: test", 1)
    other.write(folder / "other.jsonl")
    home = tmp_path / "home"
    assert main(["ingest", str(folder), "--home", str(home), "-q", "--now", "2026-03-01"]) == 0
    return home


def test_episodes_and_filters(cli_home, capsys):
    def listing(*args) -> list[dict]:
        assert main(["episodes", "--home", str(cli_home), "--json", *args]) == 0
        return json.loads(capsys.readouterr().out)

    assert len(listing()) == 5
    assert {e["kind"] for e in listing("--kind", "error")} == {"error"}
    assert len(listing("--kind", "correction")) == 1
    assert {e["project"] for e in listing("--project", "other")} == {"/home/me/other"}
    assert {e["project"] for e in listing("--project=-home-me-app")} == {"/home/me/app"}
    assert {e["session_id"] for e in listing("--session", "7777")} == {"77777777-0000-0000-0000-000000000000"}
    assert listing("--archived") == []
    assert len(listing("--limit", "2")) == 2
    assert main(["episodes", "--home", str(cli_home), "--kind", "error"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 2 and "git push" in out


def test_show_points_into_the_archive(cli_home, capsys):
    assert main(["episodes", "--home", str(cli_home), "--json", "--kind", "correction"]) == 0
    [c] = json.loads(capsys.readouterr().out)
    assert c["fields"]["agent_statement"] == "Pushing now."
    assert main(["show", str(c["id"]), "--raw", "--json", "--home", str(cli_home)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert json.loads(shown["raw"])["message"]["content"] == "no, open a pull request instead"
    assert main(["show", str(c["id"]), "--raw", "--home", str(cli_home)]) == 0
    assert "no, open a pull request instead" in capsys.readouterr().out
    assert main(["show", "9999", "--home", str(cli_home)]) == 2


def test_recall_and_stats(cli_home, capsys):
    assert main(["recall", "push has no upstream", "-k", "1", "--home", str(cli_home), "--now", "2026-03-01"]) == 0
    out = capsys.readouterr().out
    assert "[error]" in out and "rel " in out and "git push" in out
    assert main(["recall", "the and of", "--home", str(cli_home)]) == 2
    assert "nothing to search" in capsys.readouterr().err
    assert main(["recall", "x", "-k", "0", "--home", str(cli_home)]) == 2
    assert main(["recall", "push", "--now", "not a time", "--home", str(cli_home)]) == 2
    assert main(["stats", "--json", "--home", str(cli_home)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["episodes"]["by_kind"] == {"correction": 1, "error": 2, "session": 2}
    assert stats["transcripts"]["by_status"] == {"active": 2}
    assert stats["sessions"] == 2
    assert main(["stats", "--home", str(cli_home)]) == 0
    assert "episodes       5 active" in capsys.readouterr().out


def test_home_from_the_environment(tmp_path):
    env = _env(tmp_path, OPENMEMORY_HOME=str(tmp_path / "envhome"))
    subprocess.run([*CLI, "stats"], env=env, check=True, capture_output=True)
    assert (tmp_path / "envhome" / "openmemory.db").exists()
    env = _env(tmp_path, XDG_DATA_HOME=str(tmp_path / "xdg"))
    subprocess.run([*CLI, "stats"], env=env, check=True, capture_output=True)
    assert (tmp_path / "xdg" / "openmemory" / "openmemory.db").exists()


def test_a_progress_bar_only_on_a_terminal(tmp_path, cli_home):
    import pty

    folder = tmp_path / "projects"
    piped = subprocess.run([*CLI, "ingest", str(folder), "--home", str(tmp_path / "h1")],
                           capture_output=True, text=True, check=True)
    assert piped.stderr == ""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([*CLI, "ingest", str(folder), "--home", str(tmp_path / "h2")],
                              stdout=subprocess.PIPE, stderr=follower, check=True, timeout=60)
        os.close(follower)
        drawn = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(leader)
    assert b"ingesting [" in drawn and b"files" in drawn
    assert b"Read 2 of 2 files" in proc.stdout


def test_usage_errors_exit_2(tmp_path):
    out = subprocess.run([*CLI, "recall"], capture_output=True, text=True)
    assert out.returncode == 2
    out = subprocess.run([*CLI, "ingest", "x", "--from-archive", "--home", str(tmp_path / "h")],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "give no paths" in out.stderr
