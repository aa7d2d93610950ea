"""Resolutions: what made a failure go away in the same session, kept in the error episode and
stated in the lesson; and lesson names that fit a group of several tools."""

from __future__ import annotations

from openmemory_local.sleep.lesson_text import lesson_text
from openmemory_protocol.observation import is_observation

from .test_claude_code import kinds, run
from .conftest import NOW
from .transcripts import CWD, T

UPSTREAM = ("fatal: The current branch feature-x has no upstream branch.\nTo push the current branch and set the "
            "remote as upstream, use\n\n    git push --set-upstream origin feature-x\n")


def test_a_changed_call_right_after_is_the_resolution_and_the_text_says_so(tmp_path):
    t = T()
    t.person("push it")
    t.bash("git push 2>&1", "t1", UPSTREAM, 128)
    t.bash("git push --set-upstream origin main 2>&1", "t2", "branch 'main' set up to track 'origin/main'.")
    [error] = kinds(run(t, tmp_path / "s.jsonl")[0], "error")
    res = error.fields["resolution"]
    assert res["kind"] == "changed" and res["calls_after"] == 0
    assert res["command"] == "git push --set-upstream origin <branch>"  # the branch (main) is hidden
    assert "--set-upstream" in res["delta"]
    assert error.text.endswith("`git push --set-upstream origin <branch>` succeeded right after.")


def _fix_of(tmp_path, failing: str, output: str, fixing: str, name: str = "s.jsonl") -> dict:
    t = T()
    t.person("do it")
    t.bash(failing, "t1", output, 2)
    t.bash(fixing, "t2", "ok")
    [error] = kinds(run(t, tmp_path / name)[0], "error")
    return error.fields["resolution"]


#: (failed call, its output, the call that worked, the fix as the lesson shows it)
FIXES = [
    # a setup step before the same call (the call itself ran unchanged): the step is the fix
    ("make build", "Makefile:14: *** missing separator.  Stop.\n", "sed -i 's/^    /\t/' Makefile && make build",
     "sed -i 's/^    /\t/' Makefile && make build"),
    ("git checkout develop", "error: Your local changes would be overwritten by checkout",
     "git stash && git checkout develop", "git stash && git checkout develop"),
    ("go test ./...", "go: go.mod file not found in current directory", "cd service && go test ./...",
     "cd service && go test ./..."),
    # a variable the call ran with is part of the call: not "the same call succeeded"
    ("go test -race ./...", "go: -race requires cgo; enable cgo by setting CGO_ENABLED=1",
     "CGO_ENABLED=1 go test -race ./...", "CGO_ENABLED=1 go test -race ./..."),
    # prose in quotes (a commit message) is a placeholder: the same fix whatever the message
    ('git add -A && git commit -m "feat: add telemetry spans"', "[FORMAT] not formatted",
     'mix format && git add -A && git commit -m "feat: add telemetry spans"',
     "mix format && git add -A && git commit -m <text>"),
    # a secret the call ran with is never shown (a variable, a quoted header)
    ("npm run deploy", "Error: missing credentials", "API_KEY=sk-proj-abcdefghijklmnop1234567890 npm run deploy",
     "API_KEY=<secret> npm run deploy"),
    ("curl -fsS https://api.example.com/v1/me", "curl: (22) The requested URL returned error: 401",
     "curl -fsS -H 'Bearer Zk29aQ8xT7vLq2Wm' https://api.example.com/v1/me",
     "curl -fsS -H 'Bearer <secret>' https://api.example.com/v1/me"),
    # what ran before a *changed* call stays out (the commit is not the fix of a push)
    ("git push", UPSTREAM, 'git add -A && git commit -m "wip" && git status && git push --set-upstream origin main',
     "git push --set-upstream origin <branch>"),
]


def test_the_fix_shows_what_changed_even_outside_the_failed_programs_words(tmp_path):
    for n, (failing, output, fixing, shown) in enumerate(FIXES):
        res = _fix_of(tmp_path, failing, output, fixing, f"{n}.jsonl")
        assert (res["kind"], res["command"]) == ("changed", shown), (fixing, res)


def test_a_lesson_states_a_fix_only_from_members_that_failed_its_way(tmp_path):
    from openmemory_local.sleep.passes import _same_failure

    tree = {"tool": "Bash", "heads": ["tree"]}
    assert _same_failure({"tool": "Bash", "heads": ["tree"]}, tree)
    assert not _same_failure({"tool": "Bash", "heads": ["python"]}, tree)
    assert not _same_failure({"tool": "Read", "heads": []}, tree)
    assert _same_failure({"tool": "Bash", "heads": ["git push"]}, {"tool": "Bash", "heads": ["git add", "git push"]})


def test_a_retry_after_a_step_names_the_step_and_looking_is_not_a_step(tmp_path):
    t = T()
    t.person("commit")
    t.bash('git add -A && git commit -m "feat: x"', "t1", "Pre-commit validation failed:\n[FORMAT] Code is not "
           "formatted.\n", 1)
    t.bash("git status", "t2", "On branch main")
    t.bash("mix format", "t3", "")
    t.bash('git add -A && git commit -m "feat: x, formatted"', "t4", "[main abc1234] feat: x")
    [error] = kinds(run(t, tmp_path / "s.jsonl")[0], "error")
    res = error.fields["resolution"]
    assert (res["kind"], res["after"], res["calls_after"]) == ("retry", ["mix format"], 2)
    assert error.text.endswith("The same call succeeded after `mix format`.")


def test_a_failure_that_stops_showing_went_away_with_the_steps_before(tmp_path):
    t = T()
    t.person("fix the tests")
    t.bash("mix test test/a_test.exs", "t1", "** (RuntimeError) no :secret_key_base configuration found", 2)
    t.call("Edit", {"file_path": "/home/me/app/config/test.exs", "old_string": "a", "new_string": "b"}, "t2")
    t.result("t2", "The file /home/me/app/config/test.exs has been updated.", False)
    t.bash("mix test test/a_test.exs", "t3", "Assertion with == failed", 2)
    episodes = run(t, tmp_path / "s.jsonl")[0]
    first, second = sorted(kinds(episodes, "error"), key=lambda e: e.key)
    assert first.fields["resolution"]["went_away"] is True
    assert first.fields["resolution"]["after"] == ["edited config/test.exs"]
    assert second.fields["resolution"] is None  # still failing when the transcript ends


def test_the_same_failure_again_is_not_resolved_by_what_ran_before_it(tmp_path):
    t = T()
    t.person("go")
    t.bash("make", "t1", "make: *** No rule to make target 'all'.  Stop.", 2)
    t.bash("mix format", "t2", "")
    t.bash("make", "t3", "make: *** No rule to make target 'all'.  Stop.", 2)
    t.bash("make build", "t4", "ok")
    errors = sorted(kinds(run(t, tmp_path / "s.jsonl")[0], "error"), key=lambda e: e.key)
    assert [e.fields["resolution"]["kind"] for e in errors] == ["changed", "changed"]
    assert errors[0].fields["resolution"]["after"] == []  # mix format did not fix it: make failed again


def test_an_unrelated_success_resolves_nothing_and_a_window_closes(tmp_path):
    t = T()
    t.person("go")
    t.bash("git push", "t1", UPSTREAM, 128)
    for i in range(45):
        t.bash(f"echo {i}", f"e{i}", str(i))
    t.bash("git push -u origin main", "t9", "ok")
    [error] = kinds(run(t, tmp_path / "s.jsonl")[0], "error")
    assert error.fields["resolution"] is None  # 45 calls later is beyond the window of 40


def test_a_resolution_across_two_ingests_updates_the_stored_episode(tmp_path):
    from openmemory_local.core.config import Config
    from openmemory_local.ingest.transcripts import ingest
    from openmemory_local.storage.store import Store

    t = T()
    t.person("push it")
    t.bash("git push 2>&1", "t1", UPSTREAM, 128)
    path = t.write(tmp_path / "p" / "s.jsonl")
    with Store.open(Config(home=tmp_path / "home")) as store:
        ingest(store, [path], now=NOW)
        [before] = store.episodes(kind="error")
        assert before["fields"]["resolution"] is None
        n = len(t.records)
        t.bash("git push --set-upstream origin main 2>&1", "t2", "ok")
        t.write(path, append_from=n)
        ingest(store, [path], now=NOW)
        [after] = store.episodes(kind="error")
        assert after["id"] == before["id"]
        assert after["fields"]["resolution"]["command"] == "git push --set-upstream origin <branch>"


def _details(**extra):
    base = {"kind": "error", "sessions": 3, "seen": 3, "failure": "exit_code", "branches": ["a", "b", "c"],
            "subject": {"tool": "Bash", "heads": ["git push"], "path": None},
            "messages": [{"text": "fatal: The current branch c has no upstream branch.", "sessions": 3, "count": 3}]}
    base.update(extra)
    return base


def test_the_lesson_states_the_resolution_as_an_observation():
    every = [{"kind": "changed", "command": "git push --set-upstream origin <branch>", "sessions": 3,
              "right_after": True, "after": []}]
    text = lesson_text(_details(resolutions=every), 1)
    assert text.endswith("; each time, `git push --set-upstream origin <branch>` succeeded right after.")
    assert is_observation(text)
    some = [dict(every[0], sessions=2, right_after=False)]
    text = lesson_text(_details(resolutions=some), 1)
    assert "in 2 of 3 sessions, `git push --set-upstream origin <branch>` succeeded later in the session" in text
    assert "run" not in text.split(";")[-1].split()  # no imperative: the command is quoted as what happened


def test_a_group_of_several_edit_tools_is_named_for_what_they_share():
    details = _details(subject={"tool": "Write", "heads": [], "path": "types/index.ts"},
                       tools={"Edit": 5, "Write": 4, "MultiEdit": 2}, branches=[], paths=["types/index.ts"],
                       messages=[{"text": "File has not been read yet. Read it first before writing to it.",
                                  "sessions": 2, "count": 11}])
    text = lesson_text(details, 1)
    assert text.startswith("File edits (`Edit`, `Write` and `MultiEdit`) failed in 3 sessions")
    assert is_observation(text)
    mixed = lesson_text(dict(details, tools={"Read": 2, "Bash": 1}), 1)
    assert mixed.startswith("Tool calls (`Read` and `Bash`) failed")


def test_a_shadow_session_confirms_a_fix_shown_with_its_quoted_code(tmp_path):
    """The claim's fix is the shown command (short quoted code kept, prose a placeholder); a
    later session that ran the same fix confirms it, though its norm has no quoted strings."""
    from openmemory_local.commons.form import commons_claim
    from openmemory_local.commons.verify import fix_met
    from openmemory_local.text.redact import Identity

    cases = [("make build", "Makefile:14: *** missing separator.  Stop.\n", "sed -i 's/^    /\\t/' Makefile && make build"),
             ('git add -A && git commit -m "feat: x"', "Pre-commit validation failed: [FORMAT] Code is not formatted.\n",
              'mix format && git add -A && git commit -m "feat: the telemetry spans, formatted"')]
    for i, (failing, output, fixing) in enumerate(cases):
        res = _fix_of(tmp_path, failing, output, fixing, f"{i}.jsonl")
        details = {"kind": "error", "subject": {"tool": "Bash", "heads": ["make build"] if i == 0 else ["git add", "git commit"],
                                                "path": None}, "sessions": 3,
                   "messages": [{"text": output.strip(), "sessions": 3, "count": 3}],
                   "resolutions": [dict(res, sessions=3, right_after=True)]}
        claim = commons_claim(details, Identity()).claim
        assert claim is not None and claim.fix, (claim, res)
        other = _fix_of(tmp_path, failing, output, fixing.replace("telemetry", "tracing"), f"o{i}.jsonl")
        assert fix_met(claim, {"kind": "error", "fields": {"resolution": other}}), (claim.fix, other)
        # the norm alone (no quoted strings) does not carry the fix: the shown form is what matches
        assert not fix_met(claim, {"kind": "error", "fields": {"resolution": dict(other, command=None)}})


def _edit_read_edit(tmp_path, read: str, name: str):
    t = T()
    t.person("type the home page")
    edit = {"file_path": f"{CWD}/src/app/page.tsx", "old_string": "a", "new_string": "b"}
    t.call("Edit", edit, "t1")
    t.result("t1", "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>", True)
    t.call("Read", {"file_path": f"{CWD}/{read}"}, "t2")
    t.result("t2", "     1→export default function Home() {")
    t.call("Edit", edit, "t3")
    t.result("t3", "The file has been updated.")
    [error] = kinds(run(t, tmp_path / name)[0], "error")
    return error


def test_an_edit_refused_until_the_file_is_read_names_the_read(tmp_path):
    from openmemory_local.ingest.resolutions import step_commands, step_paths

    error = _edit_read_edit(tmp_path, "src/app/page.tsx", "s.jsonl")
    res = error.fields["resolution"]
    assert (res["kind"], res["after"]) == ("retry", ["read src/app/page.tsx"]), res
    assert error.text.endswith("The same call succeeded after a read of src/app/page.tsx."), error.text
    assert step_commands(res["after"]) == [] and step_paths(res["after"], "read") == ["src/app/page.tsx"]
    # a read of another file only looks
    assert _edit_read_edit(tmp_path, "README.md", "s2.jsonl").fields["resolution"]["after"] == []


def test_a_program_spelled_another_way_is_the_same_program_called_differently(tmp_path):
    res = _fix_of(tmp_path, "docker-compose up -d", "(eval):1: command not found: docker-compose\n",
                  "docker compose up -d", "dc.jsonl")
    assert (res["kind"], res["command"]) == ("changed", "docker compose up -d")
    res = _fix_of(tmp_path, "pip install requests", "(eval):1: command not found: pip\n",
                  "pip3 install requests", "pip.jsonl")
    assert (res["kind"], res["command"]) == ("changed", "pip3 install requests")
    # never another subcommand, nor a program that only ends in digits
    from openmemory_local.ingest.resolutions import _same_program

    assert not _same_program(["git push"], ["git pull"]) and not _same_program(["base64"], ["base32"])
