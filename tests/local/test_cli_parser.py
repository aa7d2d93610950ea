"""The one-command parser a one-shot command builds is the full parser's, for every command."""

from __future__ import annotations

import subprocess
import sys

from openmemory_local.cli import main as cli
def _shape(parser) -> list[tuple]:
    """What a parser accepts: each action's option strings, destination, default, choices, nargs."""
    return [(tuple(a.option_strings), a.dest, repr(a.default), tuple(a.choices or ()), a.nargs, a.required)
            for a in parser._actions if a.dest != "help"]


def test_every_command_alone_is_the_full_parsers_command():
    full = cli.build_parser()
    assert len(full.commands) >= 20
    for name, command in full.commands.items():
        alone = cli.build_parser(only=name)
        assert alone is not None, f"{name}: not built alone (is its module in cli._REGISTERED_BY?)"
        assert list(alone.commands) == [name]
        assert _shape(alone.commands[name]) == _shape(command), name
    assert cli.build_parser(only="no-such-command") is None
    assert set(cli._REGISTERED_BY) <= set(full.commands)
    assert set(cli._REGISTERED_BY.values()) == set(cli._REGISTERING)


def test_a_word_that_is_no_command_gets_the_full_parsers_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "openmemory_local.cli.main", "recal", "x"], capture_output=True,
                         text=True, env={"OPENMEMORY_HOME": str(tmp_path), "PATH": ""})
    assert out.returncode == 2
    assert "invalid choice: 'recal'" in out.stderr and "recall" in out.stderr  # the choices are listed
    help_ = subprocess.run([sys.executable, "-m", "openmemory_local.cli.main", "recall", "--help"], capture_output=True,
                           text=True, env={"OPENMEMORY_HOME": str(tmp_path), "PATH": ""})
    assert help_.returncode == 0 and "--no-touch" in help_.stdout


def test_the_width_is_the_one_shutil_finds(monkeypatch):
    import shutil

    for columns in ("123", "0", "-5", "wide", None):
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        assert cli._columns(80) == shutil.get_terminal_size((80, 24)).columns, columns
    monkeypatch.setenv("COLUMNS", "70")
    usage = cli.build_parser(only="recall").commands["recall"].format_help()
    assert max(len(line) for line in usage.splitlines()) <= 68 < 80  # argparse's width: the columns less 2
