"""Volatile tokens, project families, signatures and facets."""

from __future__ import annotations

import pytest

from openmemory_local.text.embed import embed
from openmemory_local.text.normalize import (command_segments, family, family_label, family_matches, normalise,
                                               shown_segments)
from openmemory_local.sleep.situations import facets, probes, signature

WT = "/home/me/src/app-worktrees"


@pytest.mark.parametrize("text, expected", [
    ("fatal: The current branch feature-x has no upstream branch.",
     "fatal: The current branch {branch} has no upstream branch."),
    ("commit 3f9c2e1d8a not found", "commit {hash} not found"),
    ("run 5b0f3c1e-9d2a-4c6e-8f00-1a2b3c4d5e6f failed", "run {id} failed"),
    ("at 2026-02-11T20:56:20.602Z the job", "at {time} the job"),
    ("started 14:03:22, took 806.5KB and 12 ms", "started {time}, took {num} and {num} ms"),
    ("Randomized with seed 48213", "Randomized with seed {num}"),
    ("cannot open /tmp/tmpab12cd/out.json", "cannot open /tmp/{id}/out.json"),
    ("python3 -m pytest", "python3 -m pytest"),  # digits inside a word stay
    ("   many    spaces  ", "many spaces"),
])
def test_volatile_tokens(text, expected):
    assert normalise(text, cwd=f"{WT}/feature-x", branch="feature-x") == expected


def test_project_paths_become_relative_in_every_form():
    cwd = f"{WT}/feature-x"
    assert normalise(f"cd {cwd} && ls {cwd}/lib/app.ex", cwd=cwd, branch="feature-x") == "cd && ls lib/app.ex"
    # the Claude Code folder name of the project, and a sibling worktree of the family
    assert normalise("/tmp/claude-1000/-home-me-src-app-worktrees-feature-x/tasks/bd0afab.output",
                     cwd=cwd, branch="feature-x") == "/tmp/claude-{num}/tasks/{hash}.output"
    assert normalise(f"see {WT}/other-branch/lib/a.ex", cwd=cwd, branch="feature-x") == "see lib/a.ex"
    # a path that only starts like the project is not the project
    assert normalise("/home/me/src/appendix/x", cwd="/home/me/src/app", branch="main") == "/home/me/src/appendix/x"


def test_the_same_failure_on_two_branches_is_one_surprise():
    def sig(branch):
        cwd = f"{WT}/{branch}"
        return signature({"kind": "error", "project": cwd, "fields": {
            "tool": "Bash", "command": f"cd {cwd} && git push 2>&1", "failure": "exit_code",
            "first_line": f"fatal: The current branch {branch} has no upstream branch.", "branch": branch}})

    expected = "git push: fatal: The current branch {branch} has no upstream branch."
    assert sig("spotter-gqc") == sig("spotter-a0y") == expected
    assert float(embed(sig("fix-login")) @ embed(sig("feat-two"))) == pytest.approx(1.0, abs=1e-6)


def test_families():
    assert family(f"{WT}/feature-x", "feature-x") == f"{WT}/*"
    assert family(f"{WT}/x", "team/x") == f"{WT}/*"  # a branch with a prefix: its last part names the folder
    assert family("/home/me/app", "main") == "/home/me/app"
    assert family("/home/me/app/", None) == "/home/me/app"
    assert family(None, "main") is None
    assert family_matches(f"{WT}/*", f"{WT}/brand-new")
    assert family_matches(f"{WT}/*", f"{WT}/brand-new/lib")
    assert not family_matches(f"{WT}/*", WT)
    assert not family_matches(f"{WT}/*", "/home/me/src/app-worktrees-old/x")
    assert family_matches("/home/me/app", "/home/me/app/sub")
    assert not family_matches("/home/me/app", "/home/me/apple")
    assert family_label(f"{WT}/*") == "app-worktrees/*" and family_label("/home/me/app") == "app"


def test_command_segments_drop_what_says_nothing_about_the_situation():
    line = ("cd /x && git add lib/a.ex priv/static/app.css && git commit -m \"$(cat <<'EOF'\nfeat: x\nEOF\n)\" "
            "2>&1 | tail -5")
    assert command_segments(line) == ["git add lib/a.ex priv/static/app.css", "git commit -m"]
    assert command_segments("FOO=1 mix test --seed 3 > /dev/null") == ["mix test --seed 3"]
    assert command_segments("") == []


def test_facets_of_a_session_show_programs_commands_and_files():
    ep = {"kind": "session", "project": f"{WT}/k2x", "fields": {
        "branch": "k2x", "commands": {"git push": 1, "mix test": 2},
        "command_lines": ["git push -u origin k2x 2>&1", "git add a.ex priv/static/assets/x.css"],
        "files_edited": [f"{WT}/k2x/lib/a.ex"], "files_read": ["lib/b.ex"]}}
    out = facets(ep)
    assert "git push" in out and "mix test" in out
    assert "git push -u origin {branch}" in out
    assert "git add priv/static/assets/x.css" in out  # one facet per path argument
    assert "Edit lib/a.ex" in out and "Read lib/b.ex" in out


def test_probes_of_a_lesson_name_its_situation():
    details = {"kind": "error", "subject": {"tool": "Bash", "heads": ["git add", "git commit"]},
               "anchor": "priv/static/assets"}
    got = probes(details, "sig")
    assert got[0] == {"text": "git add priv/static/assets", "require": "priv/static/assets", "role": "situation"}
    assert got[1]["text"] == "git commit priv/static/assets"
    assert got[-1] == {"text": "sig", "require": None, "role": "failure"}
    read = probes({"kind": "error", "subject": {"tool": "Read", "heads": []}, "paths": ["test/a/x.ex", "test/a/y.ex"]},
                  "sig")
    assert read[0] == {"text": "Read test/a", "require": "test/a", "role": "situation"}


def test_shown_segments_are_the_fix_as_another_agent_would_type_it():
    # what a call ran with is kept (the situation's segments drop it)
    assert command_segments("CGO_ENABLED=1 go test -race ./...") == ["go test -race ./..."]
    assert command_segments("CGO_ENABLED=1 go test -race ./...", setup=True) == ["CGO_ENABLED=1 go test -race ./..."]
    assert command_segments("cd service && go test ./...", setup=True) == ["cd service", "go test ./..."]
    assert shown_segments("cd service && CGO_ENABLED=1 go test ./... 2>&1") == ["cd service", "CGO_ENABLED=1 go test ./..."]
    # short quoted code as written, whitespace inside it too; prose and substitutions as placeholders
    assert shown_segments("sed -i 's/^    /\\t/' Makefile && make build") == ["sed -i 's/^    /\\t/' Makefile",
                                                                              "make build"]
    assert shown_segments('git commit -m "feat: add the telemetry spans" && git push') == [
        "git commit -m <text>", "git push"]
    assert shown_segments('git commit -m "$(cat <<EOF\nfix: a; b && c\nEOF\n)" | tee log') == ["git commit -m <text>",
                                                                                            "tee log"]
    assert shown_segments("docker run $(docker ps -q) > /dev/null") == ["docker run <command>"]
    # separators inside quotes do not split; a heredoc's body is not the command
    assert shown_segments("jq '.a | .b' x.json; make") == ["jq '.a | .b' x.json", "make"]
    assert shown_segments("cat <<EOF > f\nrm -rf /\nEOF") == ["cat"]
    assert shown_segments("") == []
