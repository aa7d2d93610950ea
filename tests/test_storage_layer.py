"""One storage layer: SQL is written in ``openmemory_local/storage/`` and nowhere else, but for a
short allow-list whose every entry says why.

Read from the source (ast), not by running anything: a module outside the storage layer *calls
SQL* when it calls ``.execute(``, ``.executemany(`` or ``.executescript(`` on anything, opens a
database itself (``sqlite3.connect``, ``sqlite_utils.Database``), or reaches a table through
sqlite-utils (``store.db[...]``, ``.db.query(``). A new module that does any of these fails this
test until its SQL moves into a storage module (a function named for what it reads or writes) or
it is added to :data:`ALLOWED` with its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINE = ROOT / "openmemory_local"
STORAGE = ENGINE / "storage"

SQL_METHODS = {"execute", "executemany", "executescript"}

#: Modules outside the storage layer that call SQL, and why. Shrink it; never grow it lightly.
ALLOWED: dict[str, str] = {
    "integrations/session_start.py": "the SessionStart hook's fast path opens the store read-only "
                                     "with the standard library only (storage.trust_boundary asks it)",
    "eval/retrieval.py": "builds a scratch in-memory FTS5 index (a baseline retriever), not the store",
}


def _sql_calls(path: Path) -> list[str]:
    """What in ``path`` calls SQL, as ``line: what`` strings."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                if func.attr in SQL_METHODS:
                    found.append(f"{node.lineno}: .{func.attr}(")
                elif (func.attr == "connect" and isinstance(func.value, ast.Name) and func.value.id == "sqlite3"):
                    found.append(f"{node.lineno}: sqlite3.connect(")
                elif func.attr == "Database" and isinstance(func.value, ast.Name) and func.value.id == "sqlite_utils":
                    found.append(f"{node.lineno}: sqlite_utils.Database(")
                elif func.attr == "query" and isinstance(func.value, ast.Attribute) and func.value.attr == "db":
                    found.append(f"{node.lineno}: .db.query(")
            elif isinstance(func, ast.Name) and func.id in {"connect", "Database"}:
                found.append(f"{node.lineno}: {func.id}(")  # from sqlite3 import connect, and the like
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "db":
            found.append(f"{node.lineno}: .db[...]")
        elif isinstance(node, ast.ImportFrom) and node.module in {"sqlite3", "sqlite_utils"}:
            names = {alias.name for alias in node.names}
            if names & {"connect", "Database"}:
                found.append(f"{node.lineno}: from {node.module} import {', '.join(sorted(names))}")
    return found


def modules_calling_sql() -> dict[str, list[str]]:
    """Every engine module outside ``storage/`` that calls SQL, by path relative to the package."""
    out = {}
    for path in sorted(ENGINE.rglob("*.py")):
        if STORAGE in path.parents:
            continue
        calls = _sql_calls(path)
        if calls:
            out[path.relative_to(ENGINE).as_posix()] = calls
    return out


def test_only_the_allow_list_calls_sql_outside_the_storage_layer():
    found = modules_calling_sql()
    unexpected = {name: calls for name, calls in found.items() if name not in ALLOWED}
    assert not unexpected, (
        "these modules call SQL outside openmemory_local/storage/: move it into a storage module "
        f"(a function named for what it reads or writes), or allow it with a reason: {unexpected}")
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"allowed but no longer calling SQL (take them off the list): {stale}"


def test_every_allowed_entry_has_a_reason_and_the_list_is_short():
    assert all(reason.strip() for reason in ALLOWED.values())
    assert len(ALLOWED) <= 5


def test_the_scan_sees_each_way_of_calling_sql(tmp_path):
    """The detector itself: each form is found, plain code is not (a synthetic module)."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import sqlite3\n"
        "from sqlite3 import connect\n"
        "def f(store, conn):\n"
        "    store.conn.execute('SELECT 1')\n"
        "    conn.executemany('INSERT INTO t VALUES (?)', [(1,)])\n"
        "    conn.executescript('SELECT 1;')\n"
        "    sqlite3.connect(':memory:')\n"
        "    store.db['t'].insert({'a': 1})\n"
        "    store.db.query('SELECT 1')\n"
        "    return [x for x in range(3)]\n"
    )
    lines = sorted(int(hit.split(":")[0]) for hit in _sql_calls(sample))
    assert lines == [2, 4, 5, 6, 7, 8, 9]
    clean = tmp_path / "clean.py"
    clean.write_text("def g(items):\n    return sorted(items)\n")
    assert _sql_calls(clean) == []


def test_the_session_start_fast_path_still_loads_only_the_standard_library(tmp_path):
    """The SessionStart hook's fast path asks the trust boundary (moved into storage/) without
    loading the rest of the storage layer, the engine's store, numpy or sqlite-utils: a real
    store file (made by another process), asked read-only, in a fresh interpreter."""
    import subprocess
    import sys

    home = tmp_path / "home"
    subprocess.run([sys.executable, "-c", "import sys; from openmemory_local.core.config import load_config; "
                    "from openmemory_local.storage.store import Store; Store.open(load_config(sys.argv[1])).close()",
                    str(home)], check=True, timeout=120)
    probe = (
        "import sys, json\n"
        "from openmemory_local.integrations import session_start\n"
        "from openmemory_local.core.config import load_config\n"
        "config = load_config(sys.argv[1], node_home_option=sys.argv[2])\n"
        "answer = session_start._fast_check(config)\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('openmemory') or m in ('numpy', 'sqlite_utils'))\n"
        "print(json.dumps({'answer': answer, 'loaded': loaded}))\n"
    )
    out = subprocess.run([sys.executable, "-P", "-c", probe, str(home), str(tmp_path / "no-node")],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    import json

    result = json.loads(out.strip().splitlines()[-1])
    assert result["answer"][:3] == [False, False, []]  # no node, nothing stale: asked and answered
    loaded = set(result["loaded"])
    assert "openmemory_local.storage.trust_boundary" in loaded
    assert not loaded & {"numpy", "sqlite_utils", "openmemory_local.storage.store", "openmemory_local.storage.commons",
                         "openmemory_local.storage.rendered", "openmemory_local.storage.episodes"}
