"""Native code, by policy: loaded only when built, current, and built from the installed Python.

The policy (issue 31): every rule that decides validity on the wire, promotion or what leaves
the machine has one implementation, in Python, which every node and engine runs. A native
module is kept only where a benchmark shows it matters on a path a person waits for
(docs/performance.md, "Native code"); each mirrors a piece of Python exactly, and that Python
stays THE implementation: the native module is a faster way to compute the same bits, proved
equal by a differential test over generated and mutated inputs (hypothesis), in CI, and CI also
runs the whole suite with ``OPENMEMORY_PURE=1``.

``setup.py`` compiles every ``*.c`` file of the packages into a module of the same name, each
optional (an install without a C compiler goes on, and runs the Python code). A ``.c`` file
names the Python files it mirrors, relative to its folder, in a comment
``openmemory: mirrors NAME[, NAME...]``; the build records the SHA-256 of its own source
(``SOURCE_SHA256``), the names (``MIRRORS``) and the digest of those files (``MIRRORS_SHA256``,
:func:`mirrors_digest`). A module is used only when:

* ``OPENMEMORY_PURE`` is not set (it turns every native module off);
* it was built from the Python it mirrors as installed: the digest of the files it names, read
  now beside it, is the one it was built with (else it would compute what another version of
  the rules computed). Checked for every install, a wheel's too;
* its ``.c`` source, where it lies beside the module (an editable install), is the one it was
  built from.

A module that fails a check is refused with a warning (:class:`StaleAccelerator`) and the Python
code runs: ``pip install -e .`` rebuilds it.
"""

from __future__ import annotations

import importlib
import os
import re
import warnings
from pathlib import Path
from types import ModuleType

__all__ = ["load", "loaded", "mirrors_digest", "mirrored_names", "StaleAccelerator"]

_loaded: dict[str, ModuleType | None] = {}

#: How a ``.c`` file names the Python files it mirrors (relative to its folder).
MIRRORS_LINE = re.compile(rb"openmemory: mirrors ([\w./-]+(?:\s*,\s*[\w./-]+)*)")


class StaleAccelerator(UserWarning):
    """A native module built from another version of its source or of the Python it mirrors;
    the Python code runs instead."""


def _sha256():
    try:  # the built-in implementation: hashlib's loads OpenSSL into a one-shot command's start
        from _sha256 import sha256
    except ImportError:
        try:  # Python 3.12 and later
            from _sha2 import sha256
        except ImportError:
            from hashlib import sha256
    return sha256


def mirrored_names(source: bytes) -> tuple[str, ...]:
    """The Python files a ``.c`` source says it mirrors (``openmemory: mirrors a.py, b.py``)."""
    match = MIRRORS_LINE.search(source)
    if match is None:
        return ()
    return tuple(name.strip() for name in match.group(1).decode("ascii").split(","))


def mirrors_digest(folder: Path, names: tuple[str, ...]) -> str:
    """The SHA-256 of the files ``names`` (relative to ``folder``), each as its name, a NUL, its
    length, a NUL and its bytes: what the build records and the loader compares. Raises OSError
    when one cannot be read."""
    digest = _sha256()()
    for name in names:
        data = (folder / name).read_bytes()
        digest.update(b"%s\0%d\0%s" % (name.encode("ascii"), len(data), data))
    return digest.hexdigest()


def _refusal(module: ModuleType) -> str | None:
    """Why ``module`` must not be used, or None."""
    path = Path(getattr(module, "__file__", "") or "")
    names = getattr(module, "MIRRORS", None)
    if not isinstance(names, str) or not names:
        return "was built without the record of the Python it mirrors"
    try:
        now = mirrors_digest(path.parent, tuple(names.split(",")))
    except OSError as exc:
        return f"mirrors Python that is not installed beside it ({exc.strerror}: {names})"
    if now != getattr(module, "MIRRORS_SHA256", None):
        return f"was built from another version of the Python it mirrors ({names})"
    source = path.with_name(path.name.split(".", 1)[0] + ".c")
    try:
        data = source.read_bytes()
    except OSError:
        return None  # no source beside it: an installed build, checked against its Python above
    if _sha256()(data).hexdigest() != getattr(module, "SOURCE_SHA256", None):
        return "was built from another version of its source"
    return None


def load(name: str) -> ModuleType | None:
    """The native module ``name`` (a dotted module name), or None when it is not built, fails a
    check or native code is off. Decided once per process and name."""
    if name in _loaded:
        return _loaded[name]
    module = None
    if not os.environ.get("OPENMEMORY_PURE"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            module = None
        if module is not None:
            why = _refusal(module)
            if why is not None:
                warnings.warn(f"{name} {why}; the Python code runs instead (rebuild it: pip install -e .)",
                              StaleAccelerator, stacklevel=2)
                module = None
    _loaded[name] = module
    return module


def loaded() -> dict[str, bool]:
    """Which native modules this process asked for, and whether each is in use (for benchmarks)."""
    return {name: module is not None for name, module in _loaded.items()}
