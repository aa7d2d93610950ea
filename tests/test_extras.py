"""An optional extra that is not installed: the same clear hint everywhere
(openmemory_protocol.extras.missing_extra), never a bare ModuleNotFoundError, and what can be done
without it is still done. Each command runs in a real process where the extra's module cannot be
imported (``sys.modules[name] = None``, which is what Python does for a module that is absent)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from openmemory_protocol.extras import EXTRAS, missing_extra


def _run(block: list[str], call: str, tmp_path, *, timeout: int = 240) -> subprocess.CompletedProcess:
    code = ("import sys\n"
            + "".join(f"sys.modules[{name!r}] = None\n" for name in block)
            + call)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          env={"HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"})


def test_the_hint_names_what_needs_it_the_extra_the_module_and_the_command():
    assert missing_extra("eval", "--plots", "matplotlib") == (
        "--plots needs the `eval` extra, which is not installed (no module matplotlib): pip install -e '.[eval]'")
    assert missing_extra("learned", "--learned", ModuleNotFoundError("x", name="sentence_transformers")).endswith(
        "(no module sentence_transformers): pip install torch==2.13.0 (the CPU build), then pip install -e '.[learned]'")
    assert set(EXTRAS) == {"eval", "ui", "learned", "node"}


def test_eval_plots_without_matplotlib_prints_the_measures_and_the_hint(tmp_path):
    plots = tmp_path / "plots"
    out = _run(["matplotlib"], "from openmemory_local.cli.main import main\n"
               f"sys.exit(main(['eval', '--plots', {str(plots)!r}]))", tmp_path)
    assert out.returncode == 2, out.stderr
    assert "1. repeat-yourself rate" in out.stdout and "6. retrieval quality" in out.stdout  # the measures, still
    assert "unexpected error" not in out.stderr and "ModuleNotFoundError" not in out.stderr
    assert (missing_extra("eval", "--plots", "matplotlib")) in out.stderr
    assert not plots.exists() or not list(plots.iterdir())


def test_the_page_without_its_extra_gives_the_same_hint(tmp_path):
    out = _run(["starlette"], "from openmemory_local.cli.main import main\nsys.exit(main(['ui', '--no-browser']))",
               tmp_path)
    assert out.returncode == 2
    assert "needs the `ui` extra, which is not installed (no module starlette): pip install -e '.[ui]'" in out.stderr


@pytest.mark.parametrize("module", ["trio", "libp2p"])
def test_the_node_without_its_extra_gives_the_same_hint(tmp_path, module):
    out = _run([module], "from openmemory_node.cli import main\n"
               f"main(['--home', {str(tmp_path / 'node')!r}, 'start'])", tmp_path)
    assert out.returncode == 1, out.stderr
    assert (f"openmemory-node start needs the `node` extra, which is not installed (no module {module}): "
            "pip install -e '.[node]'") in out.stderr
    assert "Traceback" not in out.stderr
