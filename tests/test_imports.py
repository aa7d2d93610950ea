"""The house's import rules, read from the source (every import, function-level ones included):

* no module of ``openmemory_local``, ``openmemory_node`` or ``openmemory_protocol`` imports one
  that imports it back, however long the circle;
* ``openmemory_local``'s stages import only stages listed before them (the README's map), so a
  newcomer can read the engine from the bottom up;
* the engine imports nothing of the node, libp2p or trio (it reaches a node only through the
  node's local HTTP API), and the protocol package imports neither half;
* ``openmemory_local`` keeps its stages as sub-packages, with at most a dozen modules at its top.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("openmemory_local", "openmemory_node", "openmemory_protocol")
#: The engine's stages, in the order of the README's map: each imports only those before it.
STAGES = ("openmemory_local", "text", "core", "storage", "recall", "ingest", "sleep", "commons", "render", "run", "cli",
          "integrations", "eval", "ui")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of the three packages that ``name`` imports (an import of a package's name
    only, ``from pkg import submodule``, counts as the submodule)."""
    found: set[str] = set()
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                parent = ".".join(base + ([node.module] if node.module else []))
            else:
                parent = node.module or ""
            subs = [f"{parent}.{alias.name}" for alias in node.names if f"{parent}.{alias.name}" in modules]
            targets = subs + ([parent] if len(subs) < len(node.names) else [])
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_no_import_circle_in_the_three_packages(graph):
    assert _cycles(graph) == []


def test_the_circle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_engine_stages_import_only_earlier_stages(graph):
    wrong = []
    for module, targets in graph.items():
        if not module.startswith("openmemory_local"):
            continue
        here = _stage(module)
        assert here in STAGES, f"{module}: a stage the README's map does not list ({here})"
        for target in targets:
            if not target.startswith("openmemory_local"):
                continue
            there = _stage(target)
            if there != here and STAGES.index(there) > STAGES.index(here):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_the_halves_stay_apart(graph):
    for module, targets in graph.items():
        if module.startswith("openmemory_local"):
            assert not any(t.startswith("openmemory_node") for t in targets), module
        if module.startswith("openmemory_protocol"):
            assert not any(t.startswith(("openmemory_node", "openmemory_local")) for t in targets), module
    for path in (ROOT / "openmemory_local").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                assert name.split(".")[0] not in ("libp2p", "trio", "openmemory_node"), f"{path}: imports {name}"


def test_engine_keeps_its_stages_in_folders():
    top = [p.name for p in (ROOT / "openmemory_local").glob("*.py")]
    assert len(top) <= 12, top
    for stage in STAGES[1:]:
        assert (ROOT / "openmemory_local" / stage).is_dir() or (ROOT / "openmemory_local" / f"{stage}.py").is_file(), stage
