"""Bad input never crashes an ingest and never loses stored data (issue 2, item 10)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from openmemory_local.ingest import transcripts as ingest_module
from openmemory_local.cli.main import main
from openmemory_local.ingest.transcripts import ingest, rebuild_from_archive
from openmemory_local.storage.store import Store

from .transcripts import SESSION, T


def transcript(n_errors: int = 2, session: str = SESSION) -> T:
    t = T(session=session)
    t.person("fix the build")
    t.says("Looking at it.")
    for i in range(n_errors):
        t.bash(f"make target{i}", f"toolu_{session[:4]}_{i}", f"make: *** No rule to make target{i}", 2)
    t.says("Done.")
    return t


def result_for(summary, path: Path):
    [r] = [f for f in summary.files if f.path == str(path)]
    return r


def archived(store: Store, path: Path) -> bytes:
    (rel,) = store.conn.execute("SELECT archive_path FROM transcripts WHERE path = ?", (str(path),)).fetchone()
    return gzip.decompress((store.config.home / rel).read_bytes())


def test_invalid_json_lines_are_counted_and_skipped(tmp_path, store, now):
    t = transcript(2)
    lines = t.lines()
    lines.insert(3, b'{"type": "user", "message": \n')
    lines.insert(5, b"\x00\x01\x02 binary \xff\xfe\n")
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines))
    summary = ingest(store, [path], now=now)
    r = result_for(summary, path)
    assert r.status == "new"
    assert r.rejected == {"invalid JSON": 2}
    assert r.added == {"error": 2}
    assert summary.totals()["episodes_added"] == {"error": 2, "session": 1}
    assert summary.totals()["rejected_lines"] == {"invalid JSON": 2}
    assert archived(store, path) == path.read_bytes()  # the raw stream is kept whole
    (rejects,) = store.conn.execute("SELECT rejects FROM transcripts").fetchone()
    assert json.loads(rejects) == {"invalid JSON": 2}


def test_a_line_of_many_megabytes(tmp_path, store, now):
    t = transcript(0)
    t.call("Bash", {"command": "cat big.log"}, "toolu_big")
    t.result("toolu_big", "Exit code 1\n" + "x" * (24 * 1024 * 1024) + "\nerror: too big", True)
    path = t.write(tmp_path / "big.jsonl")
    assert path.stat().st_size > 24e6
    summary = ingest(store, [path], now=now)
    r = result_for(summary, path)
    assert r.status == "new" and r.rejected == {}
    [e] = store.episodes(kind="error")
    assert len(e["fields"]["output"]) == 1500  # stored clipped, archived whole
    assert archived(store, path) == path.read_bytes()


def test_an_oversized_line_is_skipped_in_pieces_and_still_archived(tmp_path, config, now):
    store = Store.open(config.with_(max_line_bytes=1 << 20))
    t = transcript(1)
    huge = b'{"type":"user","message":{"content":"' + b"y" * (3 << 20) + b'"}}\n'
    lines = t.lines()
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"".join(lines[:4]) + huge + b"".join(lines[4:]))
    summary = ingest(store, [path], now=now)
    r = result_for(summary, path)
    assert r.rejected == {"oversized line": 1}
    assert r.added == {"error": 1}
    assert archived(store, path) == path.read_bytes()


def test_an_oversized_line_still_being_written_is_left_for_the_next_run(tmp_path, config, now):
    store = Store.open(config.with_(max_line_bytes=1 << 16))
    t = transcript(1)
    done = b"".join(t.lines())
    partial = b'{"type":"user","message":{"content":"' + b"z" * (1 << 18)
    path = tmp_path / "t.jsonl"
    path.write_bytes(done + partial)
    ingest(store, [path], now=now)
    (consumed,) = store.conn.execute("SELECT consumed_bytes FROM transcripts").fetchone()
    assert consumed == len(done)
    assert archived(store, path) == done
    with open(path, "ab") as f:
        f.write(b'"}}\n')
    summary = ingest(store, [path], now=now)
    assert result_for(summary, path).rejected == {"oversized line": 1}
    assert archived(store, path) == path.read_bytes()


def test_a_truncated_last_line_is_left_for_the_next_run(tmp_path, store, now):
    t = transcript(2)
    lines = t.lines()
    path = tmp_path / "t.jsonl"
    cut = lines[-2][: len(lines[-2]) // 2]  # the last error's result, half written
    path.write_bytes(b"".join(lines[:-2]) + cut)
    first = result_for(ingest(store, [path], now=now), path)
    assert first.rejected == {} and first.added == {"error": 1}
    path.write_bytes(b"".join(lines))
    second = result_for(ingest(store, [path], now=now), path)
    assert second.status == "grown" and second.added == {"error": 1}
    assert second.rejected == {}


@pytest.mark.parametrize("content,reason", [
    (os.urandom(50_000).replace(b"\n", b""), "binary data"),
    (b"\n".join(os.urandom(200) for _ in range(100)) + b"\n", "no Claude Code record"),
    (b"".join(json.dumps({"a": i}).encode() + b"\n" for i in range(200)), "no Claude Code record"),
    (b"# notes\nnot json at all\n", "no Claude Code record"),
])
def test_files_that_are_not_transcripts(tmp_path, store, now, content, reason):
    folder = tmp_path / "projects"
    good = transcript(1).write(folder / "good.jsonl")
    other = folder / "other.jsonl"
    other.write_bytes(content)
    summary = ingest(store, [folder], now=now)
    r = result_for(summary, other)
    assert r.status == "not_transcript" and reason in r.reason
    assert result_for(summary, good).status == "new"
    assert summary.problems == []
    assert not (store.config.home / "archive" / "claude-code" / str(other)[1:]).exists()
    again = ingest(store, [folder], now=now)
    assert result_for(again, other).status == "not_transcript"
    assert len(store.episodes(kind="error")) == 1


def test_a_not_transcript_that_becomes_one_is_ingested(tmp_path, store, now):
    path = tmp_path / "later.jsonl"
    path.write_bytes(b'{"hello": "world"}\n')
    assert result_for(ingest(store, [path], now=now), path).status == "not_transcript"
    path.write_bytes(b"".join(transcript(1).lines()))
    summary = ingest(store, [path], now=now)
    r = result_for(summary, path)
    assert r.status == "new" and r.added == {"error": 1}
    assert summary.totals()["episodes_added"] == {"error": 1, "session": 1}


def test_an_empty_file_and_a_fifo_and_a_folder_named_like_a_transcript(tmp_path, store, now):
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "empty.jsonl").write_bytes(b"")
    os.mkfifo(folder / "pipe.jsonl")  # reading it would block forever
    (folder / "dir.jsonl").mkdir()
    summary = ingest(store, [folder, folder / "pipe.jsonl"], now=now)
    statuses = {Path(f.path).name: f.status for f in summary.files}
    assert statuses == {"empty.jsonl": "pending", "pipe.jsonl": "not_a_file"}
    assert store.episodes() == []


def _drop_read_permission(path: Path):
    """chmod 000 and, when we are root (who ignores permissions), a way to run without
    CAP_DAC_OVERRIDE."""
    path.chmod(0)
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a file unreadable")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, "--bounding-set", caps, "--inh-caps", caps]


def test_an_unreadable_file_is_reported_and_the_rest_ingested(tmp_path, now):
    folder = tmp_path / "p"
    good = transcript(1).write(folder / "good.jsonl")
    secret = transcript(1, session="22222222-0000-0000-0000-000000000000").write(folder / "secret.jsonl")
    prefix = _drop_read_permission(secret)
    home = tmp_path / "home"
    out = subprocess.run(
        [*prefix, sys.executable, "-m", "openmemory_local.cli.main", "ingest", str(folder), "--home", str(home),
         "--json", "--now", "2026-03-01T09:00:00Z"],
        capture_output=True, text=True,
    )
    assert out.returncode == 3, out.stderr
    data = json.loads(out.stdout)
    statuses = {Path(f["path"]).name: (f["status"], f["reason"]) for f in data["files"]}
    assert statuses["good.jsonl"][0] == "new"
    assert statuses["secret.jsonl"] == ("unreadable", "Permission denied")
    secret.chmod(0o644)
    with Store.open(store_config(home)) as store:
        summary = ingest(store, [folder], now=now)
        assert result_for(summary, secret).status == "new"
        assert result_for(summary, good).status == "unchanged"


def store_config(home: Path):
    from openmemory_local.core.config import Config

    return Config(home=home)


def test_a_transcript_deleted_before_it_is_read(tmp_path, store, now):
    folder = tmp_path / "p"
    a = transcript(1).write(folder / "a.jsonl")
    b = transcript(1, session="33333333-0000-0000-0000-000000000000").write(folder / "b.jsonl")

    def vanish(path: Path):
        if path.name == "b.jsonl":
            path.unlink()

    summary = ingest(store, [folder], now=now, before_file=vanish)
    assert result_for(summary, a).status == "new"
    assert result_for(summary, b).status == "vanished"
    assert [f.path for f in summary.problems] == [str(b)]


def test_a_transcript_deleted_while_it_is_read(tmp_path, store, now, monkeypatch):
    """Deleted after it was opened: the open file is read to its end, archived, ingested."""
    path = transcript(3).write(tmp_path / "p" / "gone.jsonl")
    original = path.read_bytes()
    real_parse = ingest_module._parse

    def parse_then_delete(store_, ad, path_, stream, *args, **kwargs):
        path_.unlink()
        return real_parse(store_, ad, path_, stream, *args, **kwargs)

    monkeypatch.setattr(ingest_module, "_parse", parse_then_delete)
    summary = ingest(store, [path], now=now)
    assert result_for(summary, path).status == "new"
    assert not path.exists()
    assert len(store.episodes(kind="error")) == 3
    assert archived(store, path) == original


def test_a_file_that_shrank_is_read_again_and_its_episodes_replaced(tmp_path, store, now):
    path = tmp_path / "t.jsonl"
    transcript(3).write(path)
    ingest(store, [path], now=now)
    ids = {e["key"]: e["id"] for e in store.episodes(kind="error")}
    assert len(ids) == 3
    transcript(1).write(path)  # rewritten shorter: one failure left, same call id as before
    r = result_for(ingest(store, [path], now=now), path)
    assert r.status == "shrank" and r.removed == 2
    left = store.episodes(kind="error")
    assert [(e["key"], e["id"]) for e in left] == [(k, ids[k]) for k in ids if k.endswith("_0")]
    assert archived(store, path) == path.read_bytes()
    superseded = list(store.config.home.rglob("*.superseded-*.gz"))
    assert len(superseded) == 1  # the previous raw stream is kept
    assert len(gzip.decompress(superseded[0].read_bytes()).splitlines()) == len(transcript(3).lines())
    [session] = store.episodes(kind="session")
    assert session["fields"]["failed"] == 1


def test_a_file_whose_earlier_bytes_changed_is_read_again(tmp_path, store, now):
    path = tmp_path / "t.jsonl"
    t = transcript(2)
    t.write(path)
    ingest(store, [path], now=now)
    changed = T()
    changed.person("a different first message")
    changed.says("Sure.")
    changed.bash("make other", "toolu_other", "make: *** No rule", 2)
    data = b"".join(changed.lines()) + b"".join(t.lines())  # longer, different start
    path.write_bytes(data)
    r = result_for(ingest(store, [path], now=now), path)
    assert r.status == "rewritten" and r.reason == "earlier bytes changed"
    assert {e["key"] for e in store.episodes(kind="error")} == {"toolu_other", f"toolu_{SESSION[:4]}_0",
                                                                f"toolu_{SESSION[:4]}_1"}
    assert archived(store, path) == data
    [session] = store.episodes(kind="session")
    assert session["fields"]["asked"] == "a different first message"
    # Rebuilding from the archive gives the same (current) state.
    before = [(e["kind"], e["key"], e["text"]) for e in store.episodes()]
    rebuild_from_archive(store, now=now)
    assert [(e["kind"], e["key"], e["text"]) for e in store.episodes()] == before


def test_a_torn_archive_append_is_truncated_before_the_next(tmp_path, store, now):
    """A process killed between appending to the archive and committing."""
    path = tmp_path / "t.jsonl"
    t = transcript(1)
    t.write(path)
    ingest(store, [path], now=now)
    (rel, size) = store.conn.execute("SELECT archive_path, archive_bytes FROM transcripts").fetchone()
    archive = store.config.home / rel
    with open(archive, "ab") as f:
        f.write(gzip.compress(b'{"type":"user"}\n')[:20])  # half a member, never committed
    more = transcript(2)
    with open(path, "ab") as f:
        f.write(more.lines()[-3])  # one more failed call...
        f.write(more.lines()[-2])
    r = result_for(ingest(store, [path], now=now), path)
    assert r.status == "grown"
    assert gzip.decompress(archive.read_bytes()) == path.read_bytes()


def test_a_failure_in_the_transaction_keeps_the_store_and_archive_as_they_were(tmp_path, store, now,
                                                                               monkeypatch):
    path = tmp_path / "t.jsonl"
    transcript(1).write(path)
    ingest(store, [path], now=now)
    before_rows = store.conn.execute("SELECT consumed_bytes, archive_bytes FROM transcripts").fetchall()
    before_episodes = store.episodes()
    (rel,) = store.conn.execute("SELECT archive_path FROM transcripts").fetchone()
    archive_before = (store.config.home / rel).read_bytes()
    with open(path, "ab") as f:
        f.write(b"".join(transcript(3).lines()[-4:]))

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(ingest_module, "_mark_dirty", boom)
    r = result_for(ingest(store, [path], now=now), path)
    assert r.status == "failed" and "disk full" in r.reason
    assert store.conn.execute("SELECT consumed_bytes, archive_bytes FROM transcripts").fetchall() == before_rows
    assert store.episodes() == before_episodes
    assert (store.config.home / rel).read_bytes() == archive_before
    monkeypatch.undo()
    r = result_for(ingest(store, [path], now=now), path)
    assert r.status == "grown" and r.added == {"error": 2}


def test_the_cli_reports_bad_input_with_exit_codes(tmp_path, capsys):
    home = tmp_path / "home"
    folder = tmp_path / "p"
    transcript(1).write(folder / "ok.jsonl")
    (folder / "junk.jsonl").write_bytes(b"\x00\x01junk\n" * 10)
    assert main(["ingest", str(folder), "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "not transcript" in out and "junk.jsonl" in out
    assert main(["ingest", str(tmp_path / "missing"), "--home", str(home)]) == 3
    assert "not found" in capsys.readouterr().out
