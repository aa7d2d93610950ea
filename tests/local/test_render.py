"""Rendering into the agent's memory folder: our files and section only, never the owner's."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from openmemory_local.core.config import Config
from openmemory_local.sleep.lessons import lesson_rows, unveto, veto
from openmemory_protocol.observation import check_observation
from openmemory_local.render.memory_folder import BEGIN, END, RenderError, render, split_index
from openmemory_local.sleep.passes import sleep
from openmemory_local.storage.store import Store

from .test_sleep import APP, _busy, add, at, correction, error, session

MEMORY = "-home-me-app"
OWNER_INDEX = "# My notes\n\n- [Testing](feedback_testing.md) — run the fast suite first\n- deploy on Fridays? no.\n"


@pytest.fixture
def claude(tmp_path) -> Path:
    root = tmp_path / "claude"
    (root / "projects" / MEMORY).mkdir(parents=True)
    return root


@pytest.fixture
def learned(tmp_path, claude):
    """A store with three lessons in /home/me/app: git push (strength 1.5), mix test (1.0), a correction (1.0)."""
    store = Store.open(Config(home=tmp_path / "home", claude_dir=claude))
    add(store, error("e1", "s1", 0), error("e2", "s2", 0), error("e3", "s3", 0),
        error("m1", "s1", 0, command="mix test", first="** (RuntimeError) no :secret_key_base configuration found"),
        error("m2", "s2", 0, command="mix test", first="** (RuntimeError) no :secret_key_base configuration found"),
        correction("c1", "s3", 0), *[session(f"s{i}", 0, ["git push", "mix test"]) for i in (1, 2, 3)])
    sleep(store, at(0, 23))
    yield store
    store.close()


def memdir(claude: Path) -> Path:
    return claude / "projects" / MEMORY / "memory"


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_one_file_per_lesson_and_a_managed_section(learned, claude):
    result = render(learned, at(1))
    folder = memdir(claude)
    lessons = lesson_rows(learned)
    assert sorted(files(folder)) == sorted(["MEMORY.md"] + [l["file_name"] for l in lessons])
    top = lessons[0]
    body = (folder / top["file_name"]).read_text()
    front, _, rest = body.partition("\n---\n")
    assert front.startswith("---\nname: ") and '\ndescription: "' in front and front.endswith("type: project")
    assert f"> {top['text']}\n" in rest
    for field in ("- kind: error", "- strength: 1.50", "- seen: 3 times, in 3 sessions", "- first seen: 2026-03-02",
                  "- last seen: 2026-03-02", "- predictions: 0 confirmed, 0 failed; open since",
                  "- provenance: Open Memory lesson"):
        assert field in rest, field
    assert "it is not an instruction" in rest
    index = (folder / "MEMORY.md").read_text()
    assert index.startswith(BEGIN) and index.rstrip().endswith(END)
    lines = [l for l in index.splitlines() if l.startswith("- [")]
    assert len(lines) == 3 and top["file_name"] in lines[0]  # strongest first
    for line in index.splitlines():
        if line and not line.startswith("<!--"):
            check_observation(line)
    correction_file = next(l for l in lessons if l["kind"] == "correction")["file_name"]
    assert "type: feedback" in (folder / correction_file).read_text()
    assert result.targets[0]["index"] == "created" and len(result.targets[0]["written"]) == 3


def test_the_owners_files_and_text_are_never_touched(learned, claude):
    folder = memdir(claude)
    folder.mkdir()
    own = {"MEMORY.md": OWNER_INDEX.encode(), "feedback_testing.md": b"---\nname: testing\n---\nfast suite\n",
           "notes.txt": b"\x00binary\xff"}
    for name, data in own.items():
        (folder / name).write_bytes(data)
    render(learned, at(1))
    after_first = (folder / "MEMORY.md").read_text()
    for name, data in own.items():
        if name != "MEMORY.md":
            assert (folder / name).read_bytes() == data
    before, block, after = split_index(after_first)
    assert before == OWNER_INDEX + "\n" and after == "\n"  # appended after one blank line
    # lessons change (a new one), the section is rewritten: outside it, byte for byte the same
    add(learned, correction("c9", "s9", 1, said="no, the staging database is read-only"), day=1)
    sleep(learned, at(1, 23))
    render(learned, at(2))
    again = (folder / "MEMORY.md").read_text()
    b2, block2, a2 = split_index(again)
    assert (b2, a2) == (before, after) and block2 != block
    # the owner writes around the section; we keep their words exactly
    (folder / "MEMORY.md").write_text("Top line\n" + again + "a line after\n")
    add(learned, correction("c10", "s10", 2, said="no, keep the old API"), day=2)
    sleep(learned, at(2, 23))
    render(learned, at(3))
    b3, _, a3 = split_index((folder / "MEMORY.md").read_text())
    assert b3 == "Top line\n" + before and a3 == after + "a line after\n"


def test_an_owner_file_without_final_newline(learned, claude):
    folder = memdir(claude)
    folder.mkdir()
    (folder / "MEMORY.md").write_bytes(b"just one line")
    render(learned, at(1))
    text = (folder / "MEMORY.md").read_text()
    assert text.startswith("just one line\n\n" + BEGIN)


def test_the_section_stays_within_claude_codes_budget(learned, claude):
    folder = memdir(claude)
    folder.mkdir()
    (folder / "MEMORY.md").write_text("".join(f"- note {i}\n" for i in range(190)))
    render(learned, at(1))
    text = (folder / "MEMORY.md").read_text()
    assert text.count("\n") <= 200
    listed = [l for l in text.splitlines() if l.startswith("- [")]
    assert len(listed) < 3 and "more lesson(s) not listed" in text
    # bytes count too
    (folder / "MEMORY.md").write_text("x" * 24_700 + "\n")
    render(learned, at(1))
    data = (folder / "MEMORY.md").read_bytes()
    assert len(data) <= 25_000 and data.startswith(b"x" * 24_700 + b"\n")


def test_deleting_a_lesson_file_vetoes_it_everywhere(learned, claude, tmp_path):
    other = tmp_path / "elsewhere"
    render(learned, at(1))
    render(learned, at(1), memory_dir=other)
    victim = lesson_rows(learned)[0]
    (memdir(claude) / victim["file_name"]).unlink()
    result = render(learned, at(2))
    assert result.vetoed == [victim["id"]]
    assert not (memdir(claude) / victim["file_name"]).exists()
    assert victim["file_name"] not in (memdir(claude) / "MEMORY.md").read_text()
    assert lesson_rows(learned, ids=[victim["id"]])[0]["vetoed"]
    render(learned, at(3), memory_dir=other)  # its copy elsewhere goes too
    assert not (other / victim["file_name"]).exists()
    event = learned.conn.execute("SELECT detail FROM events WHERE kind = 'vetoed'").fetchone()
    assert "deleted" in json.loads(event[0])["why"]
    # never written again, even when it recurs and strengthens...
    add(learned, error("e4", "s4", 3), day=3)
    sleep(learned, at(3, 23))
    render(learned, at(4))
    assert not (memdir(claude) / victim["file_name"]).exists()
    # ...until the owner says otherwise
    assert unveto(learned, victim["id"], at(5))
    render(learned, at(5))
    assert (memdir(claude) / victim["file_name"]).exists()


def test_the_veto_command_removes_the_files(learned, claude):
    render(learned, at(1))
    victim = lesson_rows(learned)[1]
    assert veto(learned, victim["id"], at(2)) and not veto(learned, victim["id"], at(2))
    render(learned, at(2))
    assert not (memdir(claude) / victim["file_name"]).exists()
    assert learned.conn.execute("SELECT COUNT(*) FROM predictions WHERE lesson_id = ? AND state = 'open'",
                                (victim["id"],)).fetchone()[0] == 0


def test_an_edited_lesson_file_is_left_alone(learned, claude):
    render(learned, at(1))
    lesson = lesson_rows(learned)[0]
    path = memdir(claude) / lesson["file_name"]
    path.write_text(path.read_text() + "\nMy own note: this happens when the worktree is new.\n")
    edited = path.read_bytes()
    add(learned, error("e4", "s4", 1), day=1)  # the lesson changes (seen 4)
    sleep(learned, at(1, 23))
    first = render(learned, at(2))
    assert first.edited == [str(path)] and path.read_bytes() == edited
    assert lesson["file_name"] in (memdir(claude) / "MEMORY.md").read_text()  # still indexed
    second = render(learned, at(3))
    assert second.edited == [] and path.read_bytes() == edited  # reported once
    veto(learned, lesson["id"], at(4))
    render(learned, at(4))
    assert path.read_bytes() == edited  # not even removed: it is the owner's now


def test_a_file_with_our_name_that_we_did_not_write(learned, claude):
    folder = memdir(claude)
    folder.mkdir()
    name = lesson_rows(learned)[0]["file_name"]
    (folder / name).write_text("mine\n")
    result = render(learned, at(1))
    assert (folder / name).read_text() == "mine\n"
    assert any("not Open Memory's" in p for p in result.problems)
    (folder / name).unlink()
    assert render(learned, at(2)).vetoed == []  # deleting a file that was never ours vetoes nothing


def test_damaged_markers_leave_the_index_alone(learned, claude):
    folder = memdir(claude)
    folder.mkdir()
    damaged = f"notes\n{BEGIN}\nhalf a section\n"
    (folder / "MEMORY.md").write_text(damaged)
    result = render(learned, at(1))
    assert (folder / "MEMORY.md").read_text() == damaged
    assert any("damaged" in p for p in result.problems)


def test_a_section_the_owner_removed_is_not_added_again(learned, claude):
    render(learned, at(1))
    folder = memdir(claude)
    before, _, after = split_index((folder / "MEMORY.md").read_text())
    (folder / "MEMORY.md").write_text("my own index\n")
    result = render(learned, at(2))
    assert (folder / "MEMORY.md").read_text() == "my own index\n"
    assert result.targets[0]["index"] == "removed by the owner"


def test_a_render_killed_before_its_write_is_no_veto(learned, claude):
    render(learned, at(1))
    lesson = lesson_rows(learned)[0]
    path = memdir(claude) / lesson["file_name"]
    # as a render killed between recording its intent and writing: record pending, file not there yet
    path.unlink()
    with learned.write():
        learned.conn.execute("UPDATE rendered_files SET sha256 = NULL, pending_sha256 = 'x' WHERE path = ?",
                             (str(path),))
    (path.parent / ".leftover.md.openmemory-tmp").write_text("half")
    result = render(learned, at(2))
    assert result.vetoed == [] and path.exists()
    assert not (path.parent / ".leftover.md.openmemory-tmp").exists()


def test_nothing_is_written_when_nothing_changed(learned, claude):
    render(learned, at(1))
    folder = memdir(claude)
    stamps = {p.name: (p.stat().st_mtime_ns, p.stat().st_ino) for p in folder.iterdir()}
    changes = learned.conn.total_changes
    result = render(learned, at(1))
    assert {p.name: (p.stat().st_mtime_ns, p.stat().st_ino) for p in folder.iterdir()} == stamps
    assert learned.conn.total_changes == changes and not result.changed


def test_a_symlinked_index_stays_a_symlink(learned, claude, tmp_path):
    folder = memdir(claude)
    folder.mkdir()
    shared = tmp_path / "shared-MEMORY.md"
    shared.write_text(OWNER_INDEX)
    (folder / "MEMORY.md").symlink_to(shared)
    render(learned, at(1))
    assert (folder / "MEMORY.md").is_symlink()
    assert BEGIN in shared.read_text() and shared.read_text().startswith(OWNER_INDEX)


def test_an_archived_lesson_leaves(learned, claude):
    render(learned, at(1))
    lesson = lesson_rows(learned)[-1]
    _busy(learned, range(2, 200))  # the project was active every day since
    sleep(learned, at(200))  # and everything faded
    assert lesson_rows(learned, ids=[lesson["id"]]) == []
    render(learned, at(200))
    assert not (memdir(claude) / lesson["file_name"]).exists()
    assert "No lessons at the moment." in (memdir(claude) / "MEMORY.md").read_text()


def test_projects_without_a_claude_code_folder_are_skipped(tmp_path):
    store = Store.open(Config(home=tmp_path / "home", claude_dir=tmp_path / "nothing"))
    add(store, error("e1", "s1", 0), error("e2", "s2", 0))
    add(store, session("s1", 0, ["git push"]))
    sleep(store, at(0, 23))
    result = render(store, at(1))
    assert result.targets == [] and any("no Claude Code folder" in s for s in result.skipped)
    with pytest.raises(RenderError):
        render(Store.open(Config(home=tmp_path / "h2")), at(1))
    store.close()


def test_worktrees_of_a_family_each_get_the_lessons(tmp_path):
    from .test_sleep import WT

    claude = tmp_path / "claude"
    for branch in ("spotter-gqc", "spotter-fum", "spotter-new"):
        (claude / "projects" / f"-home-me-src-shop-worktrees-{branch}").mkdir(parents=True)
    store = Store.open(Config(home=tmp_path / "home", claude_dir=claude))
    add(store, *[error(f"e-{b}", f"s-{b}", 0, cwd=f"{WT}/{b}", branch=b) for b in ("spotter-gqc", "spotter-fum")],
        *[session(f"s-{b}", 0, ["git push"], cwd=f"{WT}/{b}", branch=b)
          for b in ("spotter-gqc", "spotter-fum", "spotter-new")])
    sleep(store, at(0, 23))
    result = render(store, at(1))
    assert len(result.targets) == 3  # the new worktree too: same family
    digests = {hashlib.sha256((Path(t["memory_dir"]) / "MEMORY.md").read_bytes()).hexdigest() for t in result.targets}
    assert len(digests) == 1
    store.close()
    assert os.path.exists(claude / "projects" / "-home-me-src-shop-worktrees-spotter-new" / "memory" / "MEMORY.md")


def test_index_text_shortens_the_quote_not_the_fix():
    """Synthetic lesson texts of the shape lesson_text makes: a long quote, then the fix."""
    from openmemory_local.render.memory_folder import INDEX_TEXT_MAX, index_text

    fix = "; each time, `git push --set-upstream origin <branch>` succeeded right after."
    head = "`git push` failed in 3 sessions, on branches a, b and c: "
    long = head + '"' + "fatal: the current branch has no upstream branch " * 12 + '"' + fix
    short = index_text(long)
    assert len(short) <= INDEX_TEXT_MAX and short.endswith('\u2026"' + fix) and short.startswith(head + '"fatal: ')
    assert index_text(head + '"short"' + fix) == head + '"short"' + fix  # short enough: as it is
    # a cut that would leave a code span open stops before its backtick
    ticks = head + '"' + "x" * 200 + " see `" + "y" * 200 + '`"' + fix
    cut = index_text(ticks)
    assert cut.count("`") % 2 == 0 and cut.endswith(fix) and len(cut) <= INDEX_TEXT_MAX
    # no room for even a short quote: it goes, the rest stays whole
    tight = index_text(long, limit=len(head) + len(fix) + 10)
    assert tight == head.rstrip(": ") + fix or tight == head[:-2] + fix
    # no quote at all: clipped at the end
    assert index_text("x" * 400).endswith("\u2026") and len(index_text("x" * 400)) == INDEX_TEXT_MAX
