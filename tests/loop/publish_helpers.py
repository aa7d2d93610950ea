"""Engine homes for the publishing tests: the real spotter transcripts ingested and slept,
as this machine has them, and as a second machine would (another user, paths, branches)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

from openmemory_local.cli import main as cli
from openmemory_local.core.clock import parse_time
from openmemory_local.core.config import load_config
from openmemory_local.storage.store import Store

NOW = "2026-02-13T00:00:00Z"
WORKTREE = "/home/USER/projects/spotter-worktrees/spotter-gqc"
FAMILY = "/home/USER/projects/spotter-worktrees/*"
#: How the second machine differs: its user, its folders, its branch names.
SECOND_MACHINE = {
    "/home/USER/projects/": "/Users/alice/code/",
    "/home/marco/projects/": "/Users/alice/code/",
    "spotter-gqc": "feat-upstream",
    "spotter-fum": "feat-assets",
    "spotter-a0y": "feat-review",
    "spotter-4te": "feat-format",
    "spotter-0rt": "feat-reader",
    "/home/marco/": "/Users/alice/",
    "/home/USER/": "/Users/alice/",
    "-home-USER-projects-": "-Users-alice-code-",
    "-home-marco-projects-": "-Users-alice-code-",
    "-home-USER-": "-Users-alice-",
    "-home-marco-": "-Users-alice-",
}
SECOND_WORKTREE = "/Users/alice/code/spotter-worktrees/feat-upstream"


def om(*args: str) -> tuple[int, str]:
    """``openmemory ARGS`` in this process: (exit code, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as exc:  # argparse refusing the arguments
            code = exc.code
    return code, out.getvalue()


def om_json(*args: str):
    code, out = om(*args, "--json")
    assert code == 0, out
    return json.loads(out)


def transcript_branches(folder: Path) -> set[str]:
    branches = set()
    for path in folder.rglob("*.jsonl"):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                branch = json.loads(line).get("gitBranch")
            except (ValueError, AttributeError):
                continue
            if branch:
                branches.add(branch)
    return branches


def rewrite(source: Path, target: Path, mapping: dict[str, str]) -> Path:
    """A copy of a transcript folder with every occurrence of each key replaced."""
    for path in source.rglob("*"):
        dest = target / path.relative_to(source)
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        data = path.read_bytes()
        for old, new in mapping.items():
            data = data.replace(old.encode(), new.encode())
        dest.write_bytes(data)
    return target


def build_home(home: Path, transcripts: Path, *, min_strength: float | None = None) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    if min_strength is not None:
        (home / "config.toml").write_text(f"[publish]\nmin_strength = {min_strength}\n")
    code, out = om("ingest", "-q", "--home", home, transcripts)
    assert code == 0, out
    code, out = om("sleep", "--no-report", "--home", home, "--now", NOW)
    assert code == 0, out
    return home


def copy_home(base: Path, target: Path) -> Path:
    shutil.copytree(base, target)
    return target


def open_store(home: Path, node_home: Path | None = None) -> Store:
    return Store.open(load_config(home, node_home_option=node_home))


def now():
    return parse_time(NOW)


def lesson_texts(node) -> list[str]:
    return [r["record"]["text"] for r in node.records().values() if r["type"] == "lesson"]
