"""Two ingests at once, and an ingest killed mid-write, on the real transcripts."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from openmemory_local.core.config import Config
from openmemory_local.ingest.transcripts import ingest
from openmemory_local.storage.store import Store
from simulations.transcripts import replicate

from .test_real_transcripts import _snapshot

CLI = [sys.executable, "-m", "openmemory_local.cli.main"]
NOW = "2026-03-01T09:00:00Z"


def _check_consistent(home: Path, files: int = 17) -> Store:
    """Every transcript read to its end, its archive exactly its bytes, no stray members."""
    store = Store.open(Config(home=home))
    rows = store.conn.execute("SELECT path, consumed_bytes, archive_path, archive_bytes FROM transcripts").fetchall()
    assert len(rows) == files
    for path, consumed, rel, archive_bytes in rows:
        original = Path(path).read_bytes()
        assert consumed == len(original), path
        data = (home / rel).read_bytes()
        assert len(data) == archive_bytes
        assert gzip.decompress(data) == original
    keys = store.conn.execute("SELECT kind, key FROM episodes").fetchall()
    assert len(keys) == len(set(keys))
    return store


def _transcripts(home: Path) -> int:
    import sqlite3

    try:
        # A reader waits out the ingest's write lock (else, on a loaded machine, it may read 0
        # until the ingest is over).
        conn = sqlite3.connect(f"file:{home / 'openmemory.db'}?mode=ro", uri=True, timeout=5)
        try:
            return conn.execute("SELECT COUNT(*) FROM transcripts").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def _reference(spotter_copy: Path, tmp_path: Path) -> list:
    from datetime import datetime, timezone

    ref = Store.open(Config(home=tmp_path / "reference"))
    ingest(ref, [spotter_copy], now=datetime(2026, 3, 1, 9, tzinfo=timezone.utc))
    return _snapshot(ref)


def test_two_ingests_at_once_neither_corrupt_nor_double_count(spotter_copy, tmp_path):
    home = tmp_path / "home"
    args = [*CLI, "ingest", str(spotter_copy), "--home", str(home), "--json", "--now", NOW]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        problems = [f for f in json.loads(out)["files"] if f["status"] not in ("new", "unchanged")] if out else []
        assert proc.returncode == 0, (proc.returncode, err, problems)
        outputs.append(json.loads(out))
    added: dict = {}
    for data in outputs:
        for kind, n in data["totals"]["episodes_added"].items():
            added[kind] = added.get(kind, 0) + n
    assert added == {"error": 49, "session": 8}
    store = _check_consistent(home)
    assert _snapshot(store) == _reference(spotter_copy, tmp_path)


def test_an_ingest_killed_mid_write_loses_nothing(spotter, tmp_path):
    # Three distinct copies of the real transcripts (51 files), so that every kill lands
    # while the ingest runs, however loaded the machine.
    source = tmp_path / "projects"
    replicate(spotter, source, 3 * 13.0)
    files = len(list(source.rglob("*.jsonl")))
    reference = _reference(source, tmp_path)
    home = tmp_path / "home"
    args = [*CLI, "ingest", str(source), "--home", str(home), "-q", "--now", NOW]
    killed_at = []
    for target in (2, 7, 12):
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while _transcripts(home) < target and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        killed_at.append(_transcripts(home))
    # Each kill landed while transcripts were still being written.
    assert all(n < files for n in killed_at), killed_at
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    store = _check_consistent(home, files)
    assert _snapshot(store) == reference
    # Large members spill to tmp/; a killed run may leave one, removed after an hour.
    leftovers = list((home / "tmp").iterdir()) if (home / "tmp").exists() else []
    assert all(p.stat().st_mtime > time.time() - 3600 for p in leftovers)


def test_ctrl_c_during_ingest_exits_130_and_keeps_the_store_whole(spotter, tmp_path):
    # Distinct copies of the real transcripts: an ingest long enough that the interrupt, sent
    # once 5 files are in, lands while it runs. On a loaded machine the poller below may get
    # too little CPU to see that before a fast ingest is done: then the run is repeated with
    # more copies (bounded: three tries), and one of them must land the interrupt.
    for attempt, copies_wanted in enumerate((5, 15, 40)):
        source = tmp_path / f"projects{attempt}"
        _, copies = replicate(spotter, source, copies_wanted * 13.0)
        files = len(list(source.rglob("*.jsonl")))
        assert copies >= copies_wanted and files >= 17 * copies_wanted
        home = tmp_path / f"home{attempt}"
        args = [*CLI, "ingest", str(source), "--home", str(home), "-q", "--now", NOW]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120

        def under_way() -> bool:  # archives appear as the ingest goes (commits may come later)
            archived = sum(1 for _ in (home / "archive").rglob("*.gz")) if (home / "archive").exists() else 0
            return archived >= 5 or _transcripts(home) >= 5

        while not under_way() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        if proc.returncode == 0 and _transcripts(home) == files:
            continue  # the ingest was over before the interrupt: try a longer one
        assert proc.returncode == 130, err
        assert "interrupted" in err and "Traceback" not in err
        assert _transcripts(home) < files
        subprocess.run(args, check=True, timeout=120)
        _check_consistent(home, files)
        return
    raise AssertionError("every ingest ended before its interrupt, even with 40 copies")
