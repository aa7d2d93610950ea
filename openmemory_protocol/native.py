"""The optional C accelerators: loaded only when built, and built from the source beside them.

``setup.py`` compiles every ``*.c`` file of the packages into a module of the same name, each
optional (an install without a C compiler goes on, and runs the pure-Python code). The Python
code stays the reference: each accelerator is tested equal to it, answer for answer, and is used
only when it is present, current and not turned off:

* ``OPENMEMORY_PURE=1`` in the environment turns every accelerator off (benchmarks compare the two
  this way; the tests call both directly);
* a module whose compiled-in ``SOURCE_SHA256`` differs from the hash of the ``.c`` file beside it
  (an editable install whose source changed since its build) is refused with a warning, since
  it would answer for code that is not the code in the tree: ``pip install -e .`` rebuilds it.
  An installed wheel ships no source, and its module is taken as built.
"""

from __future__ import annotations

import importlib
import os
import warnings
from pathlib import Path
from types import ModuleType

__all__ = ["load", "loaded", "StaleAccelerator"]

_loaded: dict[str, ModuleType | None] = {}


class StaleAccelerator(UserWarning):
    """A C accelerator built from another version of its source; the Python code runs instead."""


def _sha256(data: bytes) -> str:
    try:  # the built-in implementation: hashlib's loads OpenSSL, 3 ms of a one-shot command's start
        from _sha256 import sha256
    except ImportError:
        try:  # Python 3.12 and later
            from _sha2 import sha256
        except ImportError:
            from hashlib import sha256
    return sha256(data).hexdigest()


def _current(module: ModuleType) -> bool:
    path = Path(getattr(module, "__file__", "") or "")
    source = path.with_name(path.name.split(".", 1)[0] + ".c")
    try:
        digest = _sha256(source.read_bytes())
    except OSError:
        return True  # no source beside it: an installed build
    return digest == getattr(module, "SOURCE_SHA256", None)


def load(name: str) -> ModuleType | None:
    """The accelerator ``name`` (a dotted module name), or None when it is not built, is stale or
    accelerators are off. Decided once per process and name."""
    if name in _loaded:
        return _loaded[name]
    module = None
    if not os.environ.get("OPENMEMORY_PURE"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            module = None
        if module is not None and not _current(module):
            warnings.warn(f"{name} was built from another version of its source; the Python code runs "
                          "instead (rebuild it: pip install -e .)", StaleAccelerator, stacklevel=2)
            module = None
    _loaded[name] = module
    return module


def loaded() -> dict[str, bool]:
    """Which accelerators this process asked for, and whether each is in use (for benchmarks)."""
    return {name: module is not None for name, module in _loaded.items()}
