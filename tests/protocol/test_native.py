"""The C accelerators' loader (openmemory_protocol.native): a stale build is refused, a missing
one or OPENMEMORY_PURE gives the Python code. The modules here are made in a temporary folder
(a plain Python module with a ``SOURCE_SHA256`` and a ``.c`` file beside it), so the checks do
not depend on which accelerators this tree has."""

import hashlib
import sys

import pytest

from openmemory_protocol import native


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "nativeprobe"
    root.mkdir()
    (root / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.delenv("OPENMEMORY_PURE", raising=False)
    yield root
    for name in [n for n in sys.modules if n.startswith("nativeprobe")]:
        del sys.modules[name]


def _module(root, name, source: bytes, built_from: bytes | None):
    (root / f"{name}.c").write_bytes(source)
    digest = hashlib.sha256(built_from if built_from is not None else source).hexdigest()
    (root / f"{name}.py").write_text(f"SOURCE_SHA256 = {digest!r}\n")


def test_a_current_build_is_used(package):
    _module(package, "fresh", b"int x;\n", None)
    module = native.load("nativeprobe.fresh")
    assert module is not None and module.__name__ == "nativeprobe.fresh"
    assert native.loaded() == {"nativeprobe.fresh": True}


def test_a_stale_build_is_refused_with_a_warning(package):
    _module(package, "stale", b"int x = 2;\n", built_from=b"int x = 1;\n")
    with pytest.warns(native.StaleAccelerator, match="pip install -e"):
        assert native.load("nativeprobe.stale") is None
    assert native.load("nativeprobe.stale") is None  # decided once
    assert native.loaded() == {"nativeprobe.stale": False}


def test_an_installed_build_without_its_source_is_used(package):
    _module(package, "wheel", b"int x;\n", None)
    (package / "wheel.c").unlink()
    assert native.load("nativeprobe.wheel") is not None


def test_missing_or_turned_off(package, monkeypatch):
    assert native.load("nativeprobe.absent") is None
    _module(package, "off", b"int x;\n", None)
    monkeypatch.setenv("OPENMEMORY_PURE", "1")
    assert native.load("nativeprobe.off") is None


def test_the_loader_does_not_load_the_rule():
    """The package exports its names lazily: a recall that only asks for an accelerator does not
    pay for the observation rule's tables; the names still import as before."""
    import subprocess
    from pathlib import Path

    code = ("import sys, openmemory_protocol.native; "
            "print(sorted(m for m in sys.modules if m.startswith('openmemory_protocol')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['openmemory_protocol', 'openmemory_protocol.native']"
    import openmemory_protocol

    assert openmemory_protocol.dedup_key is openmemory_protocol.content.dedup_key
    assert set(openmemory_protocol.__all__) <= set(dir(openmemory_protocol))
    with pytest.raises(AttributeError):
        openmemory_protocol.no_such_name
