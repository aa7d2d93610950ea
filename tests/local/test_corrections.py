"""Issue 32: corrections found from the words, the reference and the agent's next calls.

The labelled sets are in benchmarks/data (synthetic ones marked so); the builder tests feed the
agent-neutral events any adapter yields, with tools named as Codex and Gemini name them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from openmemory_local.ingest.corrections import correction_cue, correction_terms, course_change, same_correction
from openmemory_local.ingest.episodes import (AgentSaid, command_heads, EpisodeBuilder, Interrupted, Meta, PersonSaid, ToolCalled,
                                       ToolReturned)
from openmemory_local.eval.measures import _restated

DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "data"


def _cue(c: dict) -> str | None:
    return correction_cue(c["message"], via=c["via"], agent_said=c.get("agent_said"), actions=c.get("actions") or [],
                          after=c.get("after"), after_said=c.get("after_said"), interrupted=c.get("interrupted", False))


def test_in_sample_sets_are_all_right():
    cases = json.loads((DATA / "corrections.json").read_text(encoding="utf-8"))["cases"]
    wrong = [c["message"] for c in cases if (_cue(c) is not None) != c["correction"]]
    assert wrong == []


def test_the_spotter_bug_report_is_not_a_correction():
    cases = json.loads((DATA / "corrections.json").read_text(encoding="utf-8"))["cases"]
    [c] = [c for c in cases if c["message"].startswith("scrolling back in xterm.js")]
    assert c["correction"] is False and c["after"]  # labelled from the real transcript, with its calls after
    assert _cue(c) is None
    assert correction_cue(c["message"], agent_said=c["agent_said"], actions=c["actions"]) is None


@pytest.mark.parametrize("before,after,said,expected", [
    ([{"tool": "Edit", "command": "app/validators.py"}],
     [{"tool": "Bash", "command": "git checkout -- app/validators.py"}], None, "undo"),
    ([{"tool": "write_file", "command": "scripts/backup.sh"}],
     [{"tool": "run_shell_command", "command": "rm scripts/backup.sh"}], None, "undo"),
    ([{"tool": "shell_command", "heads": ["kubectl --context"], "command": "kubectl --context prod get pods"}],
     [{"tool": "shell_command", "heads": ["kubectl --context"], "command": "kubectl --context staging get pods"}],
     "Here is staging.", "redo"),
    ([{"tool": "apply_patch", "command": "src/a.py"}], [{"tool": "apply_patch", "command": "src/a.py"}], None, "redo"),
    ([{"tool": "Bash", "command": "terraform apply"}], [], "Sorry, I will not apply again.", "conceded"),
    ([{"tool": "Bash", "command": "make release"}], [], "Stopped.", "stopped"),
    ([{"tool": "Edit", "command": "src/a.py"}], [{"tool": "Edit", "command": "src/b.py"}], "Added b.", None),
    ([{"tool": "Edit", "command": "src/a.py"}], None, None, None),  # not known
])
def test_course_change(before, after, said, expected):
    assert course_change(before, after, said) == expected


def test_the_calls_after_decide_a_weak_cue():
    before = [{"tool": "Edit", "heads": [], "command": "src/retry.py"}]
    went_on = [{"tool": "Write", "heads": [], "command": "src/other.py"}]
    undone = [{"tool": "Bash", "heads": ["git checkout"], "command": "git checkout -- src/retry.py"}]
    msg = "no, the retry helper should back off"
    assert correction_cue(msg, agent_said="Added the retry helper.", actions=before, after=undone) == "no"
    assert correction_cue(msg, agent_said="Added the retry helper.", actions=before, after=went_on,
                          after_said="Added other.py.") is None


def _feed(builder: EpisodeBuilder, shell: str, write: str, message: str, after: list) -> list:
    """A short session as normalised events (tools named ``shell``/``write``, as an agent names them)."""
    events = [Meta(1, "2026-12-01T10:00:00Z", session_id="s1", cwd="/home/me/app"),
              PersonSaid(2, "2026-12-01T10:00:01Z", "install lodash"),
              ToolCalled(3, "2026-12-01T10:00:02Z", "c1", shell, command="npm install lodash", shell=True),
              ToolReturned(4, "2026-12-01T10:00:03Z", "c1"),
              AgentSaid(5, "2026-12-01T10:00:04Z", "Installed lodash with npm."),
              PersonSaid(6, "2026-12-01T10:00:05Z", message)]
    line = 7
    for i, (command, is_shell) in enumerate(after):
        events.append(ToolCalled(line, "2026-12-01T10:00:06Z", f"a{i}", shell if is_shell else write, command=command,
                                 shell=is_shell))
        events.append(ToolReturned(line + 1, "2026-12-01T10:00:07Z", f"a{i}"))
        line += 2
    events.append(AgentSaid(line, "2026-12-01T10:00:08Z", "Done."))
    builder.feed_all(events)
    return [e for e in builder.take() if e.kind == "correction"]


@pytest.mark.parametrize("shell,write", [("Bash", "Edit"), ("shell_command", "apply_patch"),
                                         ("run_shell_command", "replace")])
def test_any_agents_events_get_the_same_corrections(shell, write):
    """Claude Code, Codex and Gemini tool names: the same decision from the same normalised events."""
    [c] = _feed(EpisodeBuilder(), shell, write, "please use yarn here, the lockfile is yarn.lock",
                [("rm package-lock.json", True), ("git checkout -- package.json", True), ("yarn add lodash", True)])
    assert c.fields["cue"] == "prefer" and c.fields["course"] == "undo" and c.source_line == 6
    assert _feed(EpisodeBuilder(), shell, write, "the login page still does not load on Safari, search the web for it",
                 [("src/Login.tsx", False)]) == []


def test_a_message_waits_for_the_agents_answer_across_reads():
    b = EpisodeBuilder()
    b.feed_all([Meta(1, "2026-12-01T10:00:00Z", session_id="s1"), PersonSaid(2, None, "format the code"),
                ToolCalled(3, None, "c1", "Bash", command="black .", shell=True), ToolReturned(4, None, "c1"),
                AgentSaid(5, None, "Formatted everything with black."),
                PersonSaid(6, None, "we use ruff format here, not black")])
    assert b.take() == []  # not answered yet: it waits in the state
    b2 = EpisodeBuilder(json.loads(json.dumps(b.state())))
    b2.feed_all([ToolCalled(7, None, "c2", "Bash", command="git checkout -- .", shell=True)])
    [c] = [e for e in b2.take() if e.kind == "correction"]
    assert c.fields["course"] == "undo" and c.source_line == 6


PIP = {"tool": "Bash", "command": "pip install requests"}
PIP2 = {"tool": "Bash", "command": "pip install -r requirements.txt"}
NPM = {"tool": "Bash", "command": "npm install lodash"}
PUSH = {"tool": "Bash", "command": "git push --force origin main"}
PUSH2 = {"tool": "Bash", "command": "git push -f origin main"}
TEST = {"tool": "Write", "command": "test/user_test.rb"}
MAIN = {"tool": "Bash", "command": "git push origin main"}
COMMIT = {"tool": "Bash", "command": "git commit -am wip"}


# The table of pairs of docs/corrections.md: (first, its action), (later, its action), the same?
SAME_PAIRS = [
    (("no, use uv instead of pip", PIP), ("this project is on uv, not pip", PIP2), True),
    (("no, use uv instead of pip", PIP), ("don't use pip here, we use uv add", PIP2), True),
    (("no, use uv instead of pip", PIP), ("use poetry, not pip", PIP2), False),
    (("please use yarn here", NPM), ("yarn, not npm!", NPM), True),
    (("please use yarn here", NPM), ("no, use uv instead of pip", PIP), False),
    (("never force push to main", PUSH), ("don't force push to main, people pull from it", PUSH2), True),
    (("never force push to main", PUSH), ("the tests are in spec/, not test/", TEST), False),
    (("the tests live under spec/, not test/", TEST), ("tests go in spec/ here", TEST), True),
    # other inflections of the same words ("pushing" / "push"): one form each
    (("stop pushing straight to main, open a PR", MAIN), ("never push to main directly", MAIN), True),
    (("never force push to main", PUSH), ("please don't commit for me", COMMIT), False),
]


@pytest.mark.parametrize("first,later,same", SAME_PAIRS)
def test_the_same_correction_in_other_words(first, later, same):
    assert same_correction(correction_terms(*first), correction_terms(*later)) is same


def test_the_repeat_yourself_rate_counts_a_restatement_in_another_session_of_the_family():
    said = [(1, "s1", "2026-12-01T10:00:00Z", "fam", correction_terms("no, use uv instead of pip", PIP)),
            (2, "s2", "2026-12-02T10:00:00Z", "fam", correction_terms("this project is on uv, not pip", PIP2)),
            (3, "s3", "2026-12-03T10:00:00Z", "other", correction_terms("this project is on uv, not pip", PIP2)),
            (4, "s2", "2026-12-02T11:00:00Z", "fam", correction_terms("use poetry, not pip", PIP2))]
    assert _restated(said, 2, "s2", "2026-12-02T10:00:00Z") is True
    assert _restated(said, 3, "s3", "2026-12-03T10:00:00Z") is False  # another project family
    assert _restated(said, 4, "s2", "2026-12-02T11:00:00Z") is False  # another preference
    assert _restated(said, 1, "s1", "2026-12-01T10:00:00Z") is False  # nothing before it


def test_a_second_opinion_is_asked_only_about_borderline_messages_and_is_off_by_default(tmp_path):
    from openmemory_local.ingest.corrections import Turn, decide, is_borderline
    from openmemory_local.ingest.corrections_lm import load, question

    before = ({"tool": "Edit", "heads": [], "command": "src/Header.tsx"},)
    redo = ({"tool": "Edit", "heads": [], "command": "src/Header.tsx"},)
    # the agent edits the header again: a correction or the next request? nothing else tells
    borderline = Turn("make the header sticky on scroll", agent_said="The header shows the avatar now.",
                      before=before, after=redo, after_said="The header is sticky.")
    plain = Turn("undo that change", agent_said="The header shows the avatar now.", before=before, after=redo)
    asked = []

    def opinion(turn):
        asked.append(turn.message)
        return True

    assert is_borderline(borderline) and not is_borderline(plain)
    assert decide(borderline) is None  # the rule alone: not a correction
    assert decide(borderline, opinion) == "second_opinion"
    assert decide(plain, opinion) == "undo" and asked == ["make the header sticky on scroll"]
    assert "sticky on scroll" in question(borderline) and "src/Header.tsx" in question(borderline)
    # without the agent-lm extra or a model file, no second opinion: the rule decides alone
    assert load(tmp_path / "absent.gguf") is None


def test_openmemory_eval_counts_the_same_preference_in_other_words_and_not_another(store):
    """Through the store and ``evaluate``: "we're a uv shop" restates "use uv instead of pip" (a lesson
    apart from it), "use poetry, not pip" does not (though it joins the first one's lesson)."""
    from openmemory_local.eval.measures import evaluate
    from openmemory_local.sleep.replay import replay

    from .test_sleep import add, at, correction, session

    add(store, session("s1", 0, ["pip install"]), correction("c1", "s1", 0, "no, use uv instead of pip"), day=0)
    add(store, session("s2", 2, ["pip install"]),
        correction("c2", "s2", 2, "we're a uv shop, quit reaching for pip", action="pip install -r requirements.txt"),
        day=2)
    add(store, session("s3", 3, ["pip install"]),
        correction("c3", "s3", 3, "use poetry, not pip", action="pip install flask"), day=3)
    replay(store, at(5, 9))
    m = evaluate(store, at(5, 9))["measures"]["repeat_yourself"]["overall"]
    assert m == {"corrections": 3, "repeats": 1, "rate": 0.3333}


_SHELL_TOOLS = {"Bash", "shell_command", "run_shell_command"}


def _as_events(case: dict) -> list:
    """A labelled case as the normalised events an adapter yields (synthetic: the sets are)."""
    events, line = [Meta(1, None, session_id=case.get("session") or "s"), PersonSaid(2, None, "the task")], 3

    def calls(actions, prefix):
        nonlocal line
        for i, a in enumerate(actions):
            events.append(ToolCalled(line, None, f"{prefix}{i}", a["tool"], command=a["command"],
                                     shell=a["tool"] in _SHELL_TOOLS))
            events.append(ToolReturned(line + 1, None, f"{prefix}{i}"))
            line += 2

    calls(case["actions"], "b")
    if case.get("agent_said"):
        events.append(AgentSaid(line, None, case["agent_said"]))
        line += 1
    if case.get("interrupted"):
        events.append(Interrupted(line, None))
        line += 1
    events.append(PersonSaid(line, None, case["message"]))
    line += 1
    if case.get("after_said") is not None:
        events.append(AgentSaid(line, None, case["after_said"]))
        line += 1
    calls(case["after"] or [], "a")
    return events


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("corrections_heldout*.json")))
def test_the_builder_decides_as_the_rule_on_every_labelled_session(name):
    """The episode builder applies the one rule: on every session of the issue-32 sets it finds a
    correction exactly where ``correction_cue`` does on the same session (the builder reads the
    calls after the message itself, and its own command heads)."""
    from openmemory_local.ingest.episodes import command_heads

    for case in json.loads((DATA / name).read_text(encoding="utf-8"))["cases"]:
        b = EpisodeBuilder()
        b.feed_all(_as_events(case))
        found = [e for e in b.take() if e.kind == "correction"]

        def norm(actions):
            return [dict(a, heads=list(command_heads(a["command"]))[:4] if a["tool"] in _SHELL_TOOLS else [])
                    for a in actions]

        expected = correction_cue(case["message"], agent_said=case.get("agent_said"), actions=norm(case["actions"]),
                                  after=norm(case["after"] or []), after_said=case.get("after_said"),
                                  interrupted=case.get("interrupted", False))
        assert (found[0].fields["cue"] if found else None) == expected, case["message"]


def test_a_correction_lesson_is_never_planned_for_the_commons(store):
    """A correction found by the rule becomes a lesson; with its project opted in and the lesson
    strong enough to publish, the plan gives it no commons form (it stays personal)."""
    from openmemory_local.commons import publish
    from openmemory_local.sleep.replay import replay

    from .test_sleep import APP, add, at, correction, session

    for day, key in ((0, "s1"), (1, "s2"), (2, "s3")):
        add(store, session(key, day, ["pip install"]),
            correction(f"c{day}", key, day, "no, use uv instead of pip"), day=day)
    replay(store, at(4, 9))
    publish.enable(store, APP, at(4, 9))
    planned = publish.plan(store, at(4, 9))
    mine = [c for c in planned if c.kind == "correction"]
    assert mine and all(c.strength >= 1.5 for c in mine)  # eligible by strength and opt-in
    assert all(c.action == "none" and c.text is None for c in mine), [(c.action, c.text) for c in mine]


# --- the sixth revision (issue 32): general principles read from sets A-F and the real data.
# Every example below is synthetic, written for these tests.

EDIT_STYLES = ({"tool": "Edit", "heads": [], "command": "src/styles/theme.css"},)


@pytest.mark.parametrize("message,cue", [
    # the agent redid the work the message refers to, and the message asks for nothing more: a correction
    ("the accent colour was #0055ff, the brand guide has not changed", "changed"),
    ("the theme.css tokens are generated from figma, hand edits get overwritten", "changed"),
    # a request for more, a new property, a look: still left to a second opinion (borderline, None)
    ("theme.css: add a high-contrast variant as well", None),
    ("nice, the theme works. try a warmer grey for the borders", None),
    ("could you make the theme.css focus rings thicker?", None),
])
def test_a_redo_answers_a_correction_unless_the_message_asks_for_more(message, cue):
    from openmemory_local.ingest.corrections import Turn, decide

    turn = Turn(message, agent_said="Changed the accent colour in theme.css to #0066ff.", before=EDIT_STYLES,
                after=EDIT_STYLES, after_said="Updated theme.css.")
    assert decide(turn) == cue


def test_asking_to_keep_what_the_work_changed_is_a_stated_preference():
    before = [{"tool": "Edit", "heads": [], "command": "src/api/routes.py"}]
    said = "Renamed the endpoint /v1/export to /v1/exports."
    assert correction_cue("clients call /v1/export, keep the endpoint name", agent_said=said,
                          actions=before) == "prefer"
    assert correction_cue("clients call /v1/export, leave the endpoint as it was", agent_said=said,
                          actions=before) == "prefer"
    # about other work: not one
    assert correction_cue("keep me posted on the export", agent_said=said, actions=before) is None


def test_a_promise_to_work_otherwise_is_a_concession():
    before = [{"tool": "Bash", "command": "terraform destroy -target=module.cache"}]
    for said in ("Understood. I won't run destroy without asking again.", "Noted, from now on I'll ask first."):
        assert course_change(before, [], said) == "conceded"
        assert correction_cue("check with me before you destroy anything", agent_said="Destroyed the cache module.",
                              actions=before, after=[], after_said=said) == "changed"
    assert course_change(before, [], "The cache module is gone.") == "stopped"


def test_removing_a_file_the_agent_says_it_made_is_undoing_it():
    before = [{"tool": "Bash", "command": "python manage.py makemigrations"}]
    after = [{"tool": "Bash", "command": "rm app/migrations/0057_rename_title.py"}]
    assert course_change(before, after, None, "Created migration 0057.") == "undo"
    assert course_change(before, after, None, "The migrations are up to date.") is None  # it did not say it made it


def test_an_objection_taken_back_or_a_resumption_is_not_a_correction():
    before = [{"tool": "Edit", "heads": [], "command": "pubspec.yaml"}]
    for message in ("no wait, you're right, 3.2.0 is the one, I had the old lockfile open",
                    "hmm no, the pubspec is fine. I was looking at the wrong branch"):
        assert correction_cue(message, agent_said="Set the version to 3.2.0.", actions=before, after=[],
                              after_said="OK.") is None
    assert correction_cue("sorry, go on, hit escape by accident", agent_said="Editing pubspec.yaml.", actions=before,
                          after=before, interrupted=True) is None


def test_a_rejection_of_the_last_work_counts_when_the_agent_does_not_go_on():
    before = [{"tool": "Write", "heads": [], "command": "db/migrate/20261201_add_index.rb"}]
    said = "Added an index on orders.customer_id."
    msg = "the index you added breaks the bulk import"
    assert correction_cue(msg, agent_said=said, actions=before) == "rejects"  # the calls after not known
    assert correction_cue(msg, agent_said=said, actions=before,
                          after=[{"tool": "Write", "heads": [], "command": "app/models/invoice.rb"}],
                          after_said="Added the invoice model.") is None  # it went on: the person's words alone
    assert correction_cue("the import totals are off until the backfill, that is expected; the index is fine",
                          agent_said=said, actions=before) is None


def _interrupted_session(agent: str, path: Path) -> Path:
    """The same session, synthetic, as Claude Code and Codex write it: the agent runs ``npm
    install zod``, the person interrupts it and says the project is on pnpm, the agent adds zod
    with pnpm."""
    if agent == "claude-code":
        from .transcripts import T

        t = T()
        t.person("add zod for the form validation")
        t.says("Installing zod.")
        t.call("Bash", {"command": "npm install zod"}, "c1")
        t.result("c1", "The user doesn't want to proceed with this tool use. The tool use was rejected.", True)
        t.person("[Request interrupted by user for tool use]")
        t.person("this repo is on pnpm")
        t.call("Bash", {"command": "pnpm add zod"}, "c2")
        t.result("c2", "ok", False)
        t.says("Added zod with pnpm.")
        return t.write(path / "s.jsonl")
    records = [
        {"type": "session_meta", "payload": {"id": "0199aaaa-0000-7000-8000-000000000001", "cwd": "/home/me/app",
                                             "originator": "codex_cli_rs", "cli_version": "0.66.0"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "add zod for the form validation"}]}},
        {"type": "response_item", "payload": {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Installing zod."}]}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "shell_command",
                                              "arguments": json.dumps({"command": "npm install zod"}),
                                              "call_id": "call_1"}},
        {"type": "event_msg", "payload": {"type": "turn_aborted", "reason": "interrupted"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "this repo is on pnpm"}]}},
        {"type": "response_item", "payload": {"type": "function_call", "name": "shell_command",
                                              "arguments": json.dumps({"command": "pnpm add zod"}),
                                              "call_id": "call_2"}},
        {"type": "response_item", "payload": {"type": "function_call_output", "call_id": "call_2",
                                              "output": "Exit code: 0\nWall time: 1 seconds\nOutput:\nok\n"}},
        {"type": "response_item", "payload": {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Added zod with pnpm."}]}},
    ]
    target = path / "rollout-2026-12-01T10-00-00-0199aaaa-0000-7000-8000-000000000001.jsonl"
    ts = "2026-12-01T10:00:00.000Z"
    target.write_text("".join(json.dumps({"timestamp": ts, **r}) + "\n" for r in records))
    return target


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_a_correction_after_an_interrupt_is_found_the_same_way_in_claude_code_and_codex(tmp_path, agent):
    from openmemory_local.ingest.adapters.claude_code import ClaudeCodeAdapter
    from openmemory_local.ingest.adapters.codex import CodexAdapter
    from openmemory_local.ingest.rawstream import Line

    path = _interrupted_session(agent, tmp_path)
    parser = (ClaudeCodeAdapter() if agent == "claude-code" else CodexAdapter()).parser(path)
    events = []
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            events += list(parser.feed(Line(number, 0, raw.rstrip(b"\n"), len(raw))))
    b = EpisodeBuilder()
    b.feed_all(events)
    found = [e for e in b.take() if e.kind == "correction"]
    assert [(c.fields["message"], c.fields["cue"]) for c in found] == [("this repo is on pnpm", "prefer")]
    # the rule alone: after an interrupt the stopped work needs no course change after it to be
    # what the words object to; without the interrupt, the agent going on to other work says no
    npm = [{"tool": "Bash", "heads": ["npm install"], "command": "npm install zod"}]
    went_on = [{"tool": "Edit", "heads": [], "command": "src/forms/signup.ts"}]
    for interrupted, cue in ((True, "prefer"), (False, None)):
        assert correction_cue("this repo is on pnpm", agent_said="Installing zod.", actions=npm, after=went_on,
                              after_said="Wrote the signup schema.", interrupted=interrupted) == cue


def test_doing_what_an_objection_names_in_place_of_its_own_work_is_not_going_on():
    before = [{"tool": "write_file", "heads": [], "command": "src/helpers/slugify.ts"}]
    said = "Created src/helpers/slugify.ts."
    moved = [{"tool": "replace", "heads": [], "command": "src/lib/strings.ts"}]
    other = [{"tool": "replace", "heads": [], "command": "src/pages/index.tsx"}]
    msg = "no, that belongs in lib/strings.ts with the others"
    assert correction_cue(msg, agent_said=said, actions=before, after=moved, after_said="Moved it.") == "no"
    assert correction_cue(msg, agent_said=said, actions=before, after=other, after_said="Wired it up.") is None
    # asking for something else, on a file it names: a request, not a correction
    assert correction_cue("instead of the helper, can you add tests in lib/strings.ts?", agent_said=said,
                          actions=before, after=moved, after_said="Added tests.") is None


@pytest.mark.parametrize("message,after,cue", [
    # approval first, then the next run with other arguments: the next step, not a correction
    ("great. now with a batch size of 64 and compare", [{"tool": "Bash", "command": "python bench.py --batch 64"}],
     None),
    # a weak opening word that goes on to ask for the same elsewhere: a request
    ("actually, while I think of it, we need the same for the staging config",
     [{"tool": "Bash", "command": "python bench.py --batch 32 --config staging"}], None),
    ("wait for the warmup and then rerun it", [{"tool": "Bash", "command": "python bench.py --batch 32 --warm"}], None),
    # the calls after unknown: a rejection of what was just run ("fails") still counts
    ("the bench run with batch 32 fails the memory budget on the CI runner", None, "rejects"),
])
def test_approval_then_more_is_a_request_and_a_failure_of_the_last_run_a_rejection(message, after, cue):
    before = [{"tool": "Bash", "heads": [], "command": "python bench.py --batch 32"}]
    assert correction_cue(message, agent_said="Ran the bench with batch 32: 1.2k items/s.", actions=before,
                          after=after, after_said=None if after is None else "Done.") == cue


def test_deleting_what_a_call_before_created_is_undoing_it():
    before = [{"tool": "run_shell_command", "command": "az vm create -n ci-runner --size Standard_D32s_v5"}]
    deleted = [{"tool": "run_shell_command", "command": "az vm delete -n ci-runner --yes"}]
    other = [{"tool": "run_shell_command", "command": "az vm delete -n old-runner-2019 --yes"}]
    assert course_change(before, deleted, "Deleted it.") == "undo"
    assert course_change(before, other, "Deleted the old runner.") != "undo"  # something it did not create


@pytest.mark.parametrize("message,said,after,after_said,cue", [
    # a question that is no reminder is decided by the rest of the rule: here the agent concedes
    ("did you pick the threshold on the holdout set? then the score is meaningless",
     "Picked the threshold 0.62: F1 0.91 on the holdout set.", [], "You're right, I tuned on the holdout.", "changed"),
    # "X, not Y", the calls after unknown
    ("that compares the cached copy, not the live table", "Compared the two tables: no differences.", None, None,
     "prefer"),
    ("the retries are handled by the queue, not by us", "Compared the two tables: no differences.", None, None,
     None),
    # the agent asked which to undo: the undo answers it
    ("the third one", "Which of the three migrations should I roll back?",
     [{"tool": "Bash", "command": "git revert a1b2c3d"}], "Reverted it.", None),
    # relief, and a suggestion for some day
    ("no flicker anymore. now the header please", "Compared the two tables: no differences.",
     [{"tool": "Bash", "command": "python compare.py --table orders --live"}], "Done.", None),
])
def test_questions_contrasts_and_answers(message, said, after, after_said, cue):
    before = [{"tool": "Bash", "heads": [], "command": "python compare.py --table orders"}]
    assert correction_cue(message, agent_said=said, actions=before, after=after, after_said=after_said) == cue


# The ninth revision's readings (synthetic rows, written for these tests). Each row but the last
# is decided wrongly by the eighth revision; the last guards the ninth's reading of a trailing
# "instead" (a change of plan is not a correction).
_SH, _ED = "shell_command", "apply_patch"
NINTH = [
    # a flag the person names without its dashes is the agent's flag
    ("never auto-approve in the shared workspace", "Applying.", [(_SH, "terraform apply -auto-approve")],
     [(_SH, "terraform plan")], "Here is the plan.", True, True),
    # a house rule naming the action, the calls after unknown
    ("we never commit the lockfile by hand. take it out", "Committed.", [(_SH, "git add -A && git commit -m deps")],
     None, None, False, True),
    # an alternative in place of the work, said at the end
    ("polling just burns the quota. subscribe to the webhook instead", "Added a poll every 10 seconds.",
     [(_ED, "src/sync.ts")], None, None, False, True),
    # "you used X" and X is going away
    ("you used the old SDK, it is deprecated since May", "Called the SDK's upload().", [(_ED, "src/upload.py")],
     None, None, False, True),
    # denying what the agent said it did
    ("that regex doesn't match unicode letters", "The regex now matches unicode letters.", [(_ED, "src/slug.py")],
     None, None, False, True),
    # a preference the agent conceded to, though the message ends in "too"
    ("please use rebase here, the release branch takes merges too", "Merged main in.", [(_SH, "git merge main")],
     [], "You're right, I will rebase from now on.", False, True),
    # an answer yes to the agent's question, opening with "actually"
    ("actually yes, go ahead and drop it", "The old column is unused. Should I drop it?", [(_SH, "psql -c '\\d users'")],
     [(_SH, "psql -c 'alter table users drop column legacy'")], "Dropped.", False, False),
    # a message of questions only
    ("wait, so the retries never stop? what ends a storm then?", "Added retries with backoff.",
     [(_ED, "src/client.py")], [], "The circuit breaker opens after 5 failures.", False, False),
    # the same change asked for elsewhere: another file of the same name is other work
    ("do the same thing for the two other workers", "The billing worker retries now.",
     [(_ED, "workers/billing/retry.py")], [(_ED, "workers/mail/retry.py"), (_ED, "workers/search/retry.py")],
     "Done for mail and search.", False, False),
    # praise with "stop" and "don't", then the next task
    ("stop, that's exactly right, leave it alone. let's do the pagination", "Trimmed the whitespace only.",
     [(_ED, "src/form.py")], [(_ED, "src/pagination.py")], "On the pagination.", False, False),
    # more, opening with "and", with a "no" inside a condition
    ("and show a placeholder when there is no avatar", "The header shows the avatar.", [(_ED, "src/Header.tsx")],
     [(_ED, "src/Header.tsx")], "Placeholder added.", False, False),
    # "instead of me doing X" is the person's own process
    ("instead of me tagging releases, add a workflow that does it", "Tagged v1.2.0.", [(_SH, "git tag v1.2.0")],
     [(_ED, ".github/workflows/release.yml")], "Added the workflow.", False, False),
    # an opening "instead" that asks for the next step
    ("instead, run eslint --fix for the easy ones, then list what is left", "ESLint: 30 problems.",
     [(_SH, "eslint src")], [(_SH, "eslint --fix src"), (_SH, "eslint src")], "7 left.", False, False),
    # the person asks for time
    ("no, I haven't looked at it yet, give me a minute", "Added the retry.", [(_ED, "src/client.py")],
     [], "Sure.", False, False),
    # putting the work aside for another task
    ("actually let's park the billing page, finance is changing the plan. do the settings page instead",
     "Started the billing page.", [(_ED, "src/Billing.tsx")], [(_ED, "src/Settings.tsx")], "On settings.", False,
     False),
]




# The tenth revision's readings (synthetic rows, written for these tests; all but the reopened
# ticket are decided wrongly by the ninth revision).
TENTH = [
    # a denial opening the message
    ("that's not our registry, ours is ghcr.io/acme", "Pushed the image to docker.io/acme/api.",
     [(_SH, "docker push docker.io/acme/api")], None, None, False, True),
    # "you should have", "we agreed"
    ("you should have drained the node first", "Rebooted node-3.", [(_SH, "kubectl delete node node-3")], None, None,
     False, True),
    ("we agreed on UTC everywhere in the logs", "Log timestamps are in local time now.", [(_ED, "src/log.py")],
     None, None, False, True),
    # after an interrupt, "don't ..." is about the stopped work, named or not
    ("dont start it in the foreground, it blocks the terminal", "Starting the dev server.", [(_SH, "npm run dev")],
     [(_ED, "Procfile")], "Added a Procfile entry instead.", True, True),
    # the inverse of its own call
    ("ENG-42 isn't finished, nothing of it is merged", "Closed ENG-42.", [(_SH, "linear close ENG-42")],
     [(_SH, "linear reopen ENG-42")], "Reopened ENG-42.", False, True),
    # a redo of one program of a compound command line
    ("the message should say what changed, not 'update'", "Committed.", [(_SH, "git add -A && git commit -m update")],
     [(_SH, "git commit --amend -m 'Parse dates as UTC'")], "Amended.", False, True),
    # the agent put its work back, though the message also says a part is fine
    ("you loosened the assertion until it passed. the fixture is fine, the parser is the bug",
     "Relaxed the assertion.", [(_ED, "tests/test_parser.py")], [(_ED, "tests/test_parser.py")],
     "Restored the assertion; looking at the parser.", False, True),
    # taking back one's own words: the work followed them
    ("ignore what I said about the rename, the old name reads better. put it back", "Renamed Loader to Fetcher.",
     [(_ED, "src/loader.py")], [(_ED, "src/loader.py")], "Reverted the rename.", False, False),
    # approval first: what follows is about the next work
    ("sounds good. don't mock the database for that one, use the test container", "Next I'll add the repo test.",
     [(_SH, "pytest -q")], [(_ED, "tests/test_repo.py"), (_SH, "pytest -q tests/test_repo.py")],
     "Added the test against the container.", False, False),
    # reassurance
    ("don't worry about the lint warning, it's from the generated file", "Lint shows a warning in gen/api.py.",
     [(_SH, "ruff check .")], [(_SH, "ruff check src")], "Lint is clean for src.", False, False),
]



# The eleventh revision's readings (synthetic rows, written for these tests; five of the seven are
# decided wrongly by the tenth revision).
ELEVENTH = [
    # the person says it is no objection
    ("why sqlite and not postgres here? not objecting, just curious", "Used sqlite for the job queue.",
     [(_ED, "src/queue.py")], [(_ED, "src/queue.py")], "Good point, switched to postgres.", False, False),
    ("no complaints about the schema. now add an index on email", "Created the users table.",
     [(_ED, "migrations/001.sql")], [(_ED, "migrations/001.sql")], "Index added.", False, False),
    # "no X" naming what the agent did
    ("no --force on the shared branch. push a new branch", "Force-pushing the rebase.",
     [(_SH, "git push --force origin dev")], [(_SH, "git push origin HEAD:dev-rebased")], "Pushed dev-rebased.", True,
     True),
    # "roll it back" inside a sentence, and a reply admitting the work was wrong
    ("that was the staging db?? roll it back please", "Applied the migration.", [(_SH, "alembic upgrade head")],
     [(_SH, "alembic downgrade -1")], "Rolled back. Sorry.", False, True),
    ("chmod 777, seriously?", "Made the cache directory writable.", [(_SH, "chmod -R 777 var/cache")],
     [(_SH, "chmod -R 750 var/cache")], "Fair, that was too broad. 750 now.", False, True),
    # a house rule the work broke, asked politely
    ("thanks! one thing: we've been avoiding default exports. could you switch to a named one?",
     "Exported the component as default.", [(_ED, "src/Card.tsx")], [(_ED, "src/Card.tsx")], "Named export now.",
     False, True),
    # more, asked with "too"
    ("oh wait, add dayjs too while it installs", "Installing dependencies.", [(_SH, "npm install")],
     [(_SH, "npm install && npm install dayjs")], "Installed, plus dayjs.", True, False),
]



# The twelfth revision's readings (synthetic rows, written for these tests; the not-ones guard
# that the new readings did not widen them).
TWELFTH = [
    # a question the agent concedes to
    ("are you sure that's the prod bucket?", "Uploaded the build to s3://acme-staging.",
     [(_SH, "aws s3 cp dist s3://acme-staging --recursive")],
     [(_SH, "aws s3 cp dist s3://acme-prod --recursive")], "You're right, it should go to prod. Uploaded there.", False,
     True),
    # a workaround rejected; the agent's check that checks nothing
    ("the retry just hides it, we need the root cause", "Added a retry around the flaky call.", [(_ED, "src/sync.py")],
     None, None, False, True),
    # an undo asked after a comma, a supposed-to, a "not as"
    ("that ticket stays open until QA signs off, reopen it", "Closed OPS-7.", [(_SH, "jira close OPS-7")], None, None,
     False, True),
    ("that was supposed to go out as a beta", "Published 3.0.0.", [(_SH, "npm publish")], None, None, False, True),
    ("not as root, the build dir ends up owned by root", "Ran the build as root.", [(_SH, "sudo make build")], None,
     None, False, True),
    # "great, so ..." is no approval
    ("great, so german users see dollars now. the locale formatter exists for a reason", "Formatted prices as $0.00.",
     [(_ED, "app/helpers/price.rb")], [(_ED, "app/helpers/price.rb")], "Switched to the locale formatter.", False,
     True),
    # a house rule said with "here"
    ("hotfixes always go through a PR here", "Pushed the hotfix to main.", [(_SH, "git push origin main")], None, None,
     False, True),
    # a polite request ending in thanks is not thanks
    ("this is too long for the changelog, could you cut it to three lines? thanks", "Wrote the changelog entry.",
     [(_ED, "CHANGELOG.md")], [(_ED, "CHANGELOG.md")], "Three lines now.", False, True),
    # not ones: yes to a plan, an offer declined, fyi, a reminder, the person's own doing, ok now
    ("yep go ahead", "The specs expect 400. I'll update them to 422.", [(_SH, "bundle exec rspec")],
     [(_ED, "spec/api_spec.rb")], "Updated.", False, False),
    ("no, 12 MB is fine. next: a --dry-run flag", "The binary is 12 MB. I can try to shrink it if size matters.",
     [(_SH, "go build ./cmd/tool")], [(_ED, "cmd/tool/main.go")], "Added --dry-run.", False, False),
    ("fyi the staging db was restored from last night's backup", "Migration failed: relation exists.",
     [(_SH, "rails db:migrate")], [(_SH, "rails db:migrate")], "Migrated.", False, False),
    ("don't forget to bump the chart version", "Updated the image tag in values.yaml.", [(_ED, "chart/values.yaml")],
     [(_ED, "chart/Chart.yaml")], "Bumped to 1.4.1.", False, False),
    ("wait, I had to restart the vpn. ok it's back, run it again", "Running the integration tests.",
     [(_SH, "make integration")], [(_SH, "make integration")], "All pass.", True, False),
    ("ok now make it read the port from the env", "The server listens on 8080.", [(_ED, "server.go")],
     [(_ED, "server.go")], "PORT is read from the environment.", False, False),
    ("you haven't tagged it yet btw", "Released 2.1.", [(_SH, "gh release create v2.1 --notes-file NOTES.md")],
     [(_SH, "git tag v2.1 && git push --tags")], "Tagged.", False, False),
]


@pytest.mark.parametrize("message,said,before,after,after_said,interrupted,expected",
                         NINTH + TENTH + ELEVENTH + TWELFTH)
def test_the_later_revisions_readings(message, said, before, after, after_said, interrupted, expected):
    """The ninth to twelfth revisions' readings, each a row (the tables above)."""
    calls = lambda xs: None if xs is None else [  # noqa: E731
        {"tool": t, "heads": command_heads(c) if t == _SH else [], "command": c} for t, c in xs]
    cue = correction_cue(message, agent_said=said, actions=calls(before), after=calls(after), after_said=after_said,
                         interrupted=interrupted)
    assert (cue is not None) is expected, cue
