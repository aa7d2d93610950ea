"""The native modules' loader (openmemory_protocol.native): a build from another source, or from
other Python rules than the installed ones, is refused; a missing one or OPENMEMORY_PURE gives
the Python code. The modules here are made in a temporary folder (a plain Python module with the
constants setup.py compiles in, a ``.c`` file and the mirrored ``rule.py`` beside it), so the
checks do not depend on which native modules this tree has; the last test checks the tree's."""

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


def _module(root, name, source: bytes, built_from: bytes | None, mirrored: bytes = b"RULE = 1\n",
            mirrored_now: bytes | None = None):
    """A stand-in for a built module: ``name.py`` with the constants setup.py compiles in (built
    from ``built_from``, else ``source``, mirroring ``rule.py`` as ``mirrored``), its ``.c`` beside
    it, and ``rule.py`` as installed now (``mirrored_now``, else the same)."""
    (root / f"{name}.c").write_bytes(source)
    (root / "rule.py").write_bytes(mirrored)
    digest = hashlib.sha256(built_from if built_from is not None else source).hexdigest()
    mirrors = native.mirrors_digest(root, ("rule.py",))
    (root / "rule.py").write_bytes(mirrored_now if mirrored_now is not None else mirrored)
    (root / f"{name}.py").write_text(f"SOURCE_SHA256 = {digest!r}\nMIRRORS = 'rule.py'\nMIRRORS_SHA256 = {mirrors!r}\n")


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


def test_a_build_from_other_python_rules_is_refused_installed_or_not(package):
    # the rule the module mirrors changed since it was built: it would compute the old rule
    _module(package, "other", b"int x;\n", None, mirrored=b"RULE = 1\n", mirrored_now=b"RULE = 2\n")
    with pytest.warns(native.StaleAccelerator, match="another version of the Python it mirrors"):
        assert native.load("nativeprobe.other") is None
    _module(package, "otherwheel", b"int x;\n", None, mirrored=b"RULE = 1\n", mirrored_now=b"RULE = 3\n")
    (package / "otherwheel.c").unlink()  # an installed wheel: no source, and still checked
    with pytest.warns(native.StaleAccelerator, match="another version of the Python it mirrors"):
        assert native.load("nativeprobe.otherwheel") is None


def test_a_build_that_names_no_mirrored_python_is_refused(package):
    (package / "bare.c").write_bytes(b"int x;\n")
    (package / "bare.py").write_text(f"SOURCE_SHA256 = {hashlib.sha256(b'int x;').hexdigest()!r}\n")
    with pytest.warns(native.StaleAccelerator, match="without the record"):
        assert native.load("nativeprobe.bare") is None
    _module(package, "gone", b"int x;\n", None)
    (package / "rule.py").unlink()
    with pytest.warns(native.StaleAccelerator, match="not installed beside it"):
        assert native.load("nativeprobe.gone") is None


def test_every_c_file_names_the_python_it_mirrors_and_the_build_is_current():
    # the tree's native modules: each names its mirrored Python, and the build in this install
    # was made from the source and Python as they are (else: pip install -e .)
    from pathlib import Path

    root = Path(native.__file__).resolve().parents[1]
    sources = sorted(root.glob("openmemory_*/**/*.c"))
    assert sources, "no native module left: then drop native.py, setup.py's build and this test"
    for source in sources:
        names = native.mirrored_names(source.read_bytes())
        assert names and all((source.parent / name).is_file() for name in names), source
        name = ".".join(source.relative_to(root).with_suffix("").parts)
        module = __import__(name, fromlist=["_"])  # built by the test install: fails, not skips, if not
        assert native._refusal(module) is None, (name, native._refusal(module))


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
