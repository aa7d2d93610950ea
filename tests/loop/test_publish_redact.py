"""The commons form and the redaction gate, as pure functions (no node, no store)."""

from __future__ import annotations

import pytest

from openmemory_local.commons.form import commons_text
from openmemory_protocol.observation import is_observation
from openmemory_local.text.redact import PLACEHOLDERS, Identity, gate, project_names, scrub

A = Identity(
    users=("USER", "marco"), hosts=("marcos-laptop",), homes=("/home/USER",),
    family="/home/USER/projects/spotter-worktrees/*",
    projects=("/home/USER/projects/spotter-worktrees/spotter-gqc", "/home/USER/projects/spotter-worktrees/spotter-a0y"),
    names=project_names(["/home/USER/projects/spotter-worktrees/spotter-gqc"],
                        "/home/USER/projects/spotter-worktrees/*", ["USER"]),
    branches=("spotter-gqc", "spotter-a0y", "master"))
B = Identity(
    users=("alice",), hosts=("build-07",), homes=("/Users/alice",),
    family="/Users/alice/code/spotter-worktrees/*",
    projects=("/Users/alice/code/spotter-worktrees/feat-review",),
    names=project_names(["/Users/alice/code/spotter-worktrees/feat-review"],
                        "/Users/alice/code/spotter-worktrees/*", ["alice"]),
    branches=("feat-review", "main"))


def test_project_names_of_a_worktree_family():
    assert A.names == ("spotter-worktrees", "spotter", "spotter-gqc")
    assert project_names(["/srv/acme/builds/billing-api"], None, ()) == ("acme", "billing-api")


@pytest.mark.parametrize("raw, a_path, b_path, expected", [
    ("fatal: The current branch {branch} has no upstream branch.", "", "",
     "fatal: The current branch <branch> has no upstream branch."),
    ("** (CompileError) {root}/lib/spotter_web/live/x.ex:12: undefined function SpotterWeb.foo/1", "", "",
     "** (CompileError) lib/<project>_web/live/x.ex:<num>: undefined function <project>Web.foo/<num>"),
    ("Permission denied: '{home}/.cache/mix/hex.lock'", "", "", "Permission denied: '<home>/.cache/mix/hex.lock'"),
    ("cannot read {home}/notes/plan.txt", "", "", "cannot read <path>"),
    # the project's folder itself is `.`, not nothing (the two-agent experiment's cargo lesson read "in ``")
    ("error: could not find `Cargo.toml` in `{root}` or any parent directory", "", "",
     "error: could not find `Cargo.toml` in `.` or any parent directory"),
    ("cd {root} && make test", "", "", "cd . && make test"),
    ("File content (85812 tokens) exceeds maximum allowed tokens (25000)", "", "",
     "File content (<num> tokens) exceeds maximum allowed tokens (<num>)"),
])
def test_the_same_failure_on_two_machines_is_one_text(raw, a_path, b_path, expected):
    def fill(ident, branch, root, home):
        return raw.format(branch=branch, root=root, home=home)

    a = scrub(fill(A, "spotter-a0y", A.projects[1], "/home/USER"), A)
    b = scrub(fill(B, "feat-review", B.projects[0], "/Users/alice"), B)
    assert a == b == expected
    assert gate(a, A) == [] and gate(b, B) == []


@pytest.mark.parametrize("text, gone, placeholder", [
    ("token ghp_R4nd0mT0k3nV4lu3F0rT3st1ngOnly012345 refused", "ghp_", "<secret>"),
    ("bad npm_SyntheticT0kenValue1234567890abcdEF", "npm_", "<secret>"),
    ("pypi-AgEIcHlwaS5vcmcCJGI4YzBlYjQ4LWM1ZTAtNDg5My1hYTY1 invalid", "pypi-", "<secret>"),
    ("The AWS Access Key Id AKIAIOSFODNN7EXAMPLE does not exist", "AKIA", "<secret>"),
    ("-----BEGIN RSA PRIVATE KEY----- MIIEpAIBAAKCAQEA7 -----END RSA PRIVATE KEY----- bad", "MIIE", "<secret>"),
    ("401: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJkYW5hIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk", "eyJ", "<secret>"),
    ("Authorization: Bearer 9f8a7b6c5d4e3f2a1b0c9dXY", "9f8a", "<secret>"),
    ("connect failed password=hunter2 for admin", "hunter2", "password=<secret>"),
    ("key X9fK2mQ7pL4vR8sT1wZ3yB6nC0dE5gH is bad", "X9fK", "<secret>"),
    ("mail from dana.kowalski@acme-corp.example bounced", "dana", "<email>"),
    ("ssh: connect to host 10.20.30.40 port 22", "10.20", "<ip>"),
    ("unreachable fe80::1ff:fe23:4567:890a", "fe80", "<ip>"),
    ("GET https://deploy:hunter2@build.acme.internal/api?token=abc#x failed", "hunter2", "https://<host>/api"),
    ("could not resolve db.acme.internal", "acme", "<host>"),
    ("fatal: unable to access 'https://github.com/acme/billing.git/'", "acme", "<url>"),
    ("git@github.com:acme/billing.git: Permission denied", "acme", "<url>"),
    ("running on marcos-laptop now", "marcos", "<host>"),
    ("owner marco of Marco's repo", "arco", "<username>"),
])
def test_scrub_replaces_each_kind(text, gone, placeholder):
    out = scrub(text, A)
    assert gone not in out and placeholder in out, out
    assert gate(out, A) == [], out


def test_a_projects_own_folder_is_dot_in_a_plain_project():
    ident = Identity(users=("a",), homes=("/home/a",), family="/home/a/src/shop", projects=("/home/a/src/shop",),
                     names=("shop",))
    assert scrub("error: could not find `Cargo.toml` in `/home/a/src/shop` or any parent directory", ident) \
        == "error: could not find `Cargo.toml` in `.` or any parent directory"
    assert scrub("/home/a/src/shop/lib/cart.ex: undefined", ident) == "lib/cart.ex: undefined"
    assert scrub("see /home/a/src/shopping/notes", ident) == "see <path>"  # another folder is not the project


def test_a_home_folder_is_found_as_a_path_not_inside_one():
    root = Identity(users=("root",), homes=("/root",), family="/srv/shop", projects=("/srv/shop",), names=("shop",))
    text = scrub("cmd/root.go:6:2: missing go.sum entry for module providing package github.com/spf13/cobra", root)
    assert text.startswith("cmd/root.go:<num>:<num>: missing go.sum") and gate(text, root) == []  # not root's home
    assert {f.kind for f in gate("cannot open /root/.netrc", root)} == {"home"}
    assert "path" in {f.kind for f in gate("see /srv/shop for more", root)}
    assert "path" not in {f.kind for f in gate("see /srv/shopping for more", root)}  # another folder


def test_loopback_public_hosts_and_system_paths_stay():
    out = scrub("http://localhost:4000/projects?id=3 https://hexdocs.pm/phoenix/Phoenix.html /usr/bin/env", A)
    assert out == "http://localhost:<num>/projects https://hexdocs.pm/phoenix/Phoenix.html /usr/bin/env"


@pytest.mark.parametrize("text, kind", [
    ("lib/spotterish/x.ex is missing", "name"),              # the project's name glued into a word
    ("ssh: Could not resolve hostname marcos-laptop2", "host"),
    ("see /home/someone/x", "home"),
    ("clone git@gitlab.example:team/app.git", "remote"),
    ("mail me at a@b.example.org", "email"),
    ("host 192.168.1.20 down", "ip"),
    ("token ghp_R4nd0mT0k3nV4lu3F0rT3st1ngOnly012345", "secret"),
    ("key aB3dE5gH7jK9mN1pQ3 is", "secret"),
    ("https://u:p@example.org/x", "url"),
    ("running on USER's machine", "user"),
])
def test_the_gate_finds_what_is_left(text, kind):
    assert kind in {f.kind for f in gate(text, A)}, gate(text, A)


def test_every_placeholder_passes_the_observation_rule():
    for placeholder in PLACEHOLDERS:
        text = f'`git push` failed: "fatal: {placeholder} refused {placeholder}."'
        assert is_observation(text), placeholder


def test_commons_text_leaves_out_counts_branches_and_unknown_details():
    details = {
        "kind": "error", "sessions": 3, "seen": 7, "failure": "exit_code",
        "subject": {"tool": "Bash", "heads": ["git push"], "path": None},
        "branches": ["spotter-gqc", "spotter-a0y"], "projects": list(A.projects), "paths": ["x/y"],
        "messages": [{"text": "fatal: The current branch spotter-a0y has no upstream branch.", "sessions": 3},
                     {"text": "other message", "sessions": 1}],
        # keys this module does not know (a later issue adds some): never in the text
        "resolution": {"text": "ran git push -u origin spotter-a0y as marco on marcos-laptop"},
        "note": "SECRET-NOTE",
    }
    form = commons_text(details, A)
    assert form.text == '`git push` failed: "fatal: The current branch <branch> has no upstream branch.".'
    assert form.claim.parts() == {"situation": "git push", "failure": "fatal: The current branch <branch> has no "
                                  "upstream branch."}  # a claim: its text is the rendering of its parts
    for leak in ("3", "7", "spotter", "marco", "SECRET", "resolution", "other message"):
        assert leak not in form.text
    other = dict(details, sessions=1, branches=["feat-review"],
                 messages=[{"text": "fatal: The current branch feat-review has no upstream branch."}])
    assert commons_text(other, B).text == form.text


def test_commons_text_says_what_made_the_failure_go_away_the_same_on_every_machine():
    def details(ident, branch, sessions, resolved_in):
        return {
            "kind": "error", "sessions": sessions, "failure": "exit_code",
            "subject": {"tool": "Bash", "heads": ["git push"], "path": None},
            "messages": [{"text": f"fatal: The current branch {branch} has no upstream branch.", "sessions": 3}],
            "resolutions": [{"kind": "changed", "command": f"git push --set-upstream origin {branch}",
                             "sessions": resolved_in, "count": resolved_in, "right_after": resolved_in > 1}],
        }

    form = commons_text(details(A, "spotter-a0y", 3, 3), A)
    assert form.text == ('`git push` failed: "fatal: The current branch <branch> has no upstream branch."; '
                         '`git push --set-upstream origin <branch>` succeeded.')
    # another machine, another branch, other counts and timing: the same text, one dedup key
    assert commons_text(details(B, "feat-review", 1, 1), B).text == form.text
    # a step before the same call worked again, with a path of this machine in it
    retry = details(A, "spotter-a0y", 2, 2)
    retry["resolutions"] = [{"kind": "retry", "command": "git push", "after": ["mix format"], "sessions": 2}]
    assert commons_text(retry, A).text.endswith("; the same call succeeded after `mix format`.")
    # a branch git names but no transcript field did; the remote's name stays
    for raw, want in [("git push --set-upstream origin <branch>", "git push --set-upstream origin <branch>"),
                      ("git push -u origin fix-login", "git push -u origin <branch>"),
                      ("To push the current branch and set the remote as upstream, use",
                       "To push the current branch and set the remote as upstream, use"),
                      ("[feat/x-1 1a2b3c4] add the thing", "[<branch> <hash>] add the thing"),
                      ("Your branch is ahead of 'origin/feature-z' by 2 commits.",
                       "Your branch is ahead of 'origin/<branch>' by <num> commits."),
                      ("On branch main", "On branch main")]:
        assert scrub(raw, Identity()) == want, raw
    # nothing of the resolution left after the scrub: the failure alone
    gone = details(A, "spotter-a0y", 2, 2)
    gone["resolutions"] = [{"kind": "changed", "command": "", "sessions": 2}]
    assert commons_text(gone, A).text == form.text.split("; ")[0] + "."
    # a fix never taken from the commons is left out, and the form says so
    unsafe = details(A, "spotter-a0y", 2, 2)
    unsafe["resolutions"] = [{"kind": "changed", "command": "git push --force origin main", "sessions": 2}]
    left = commons_text(unsafe, A)
    assert left.text == form.text.split("; ")[0] + "." and "force-pushes-default-branch" in left.notes[0]


def test_commons_text_of_rejections_corrections_and_nothing_to_say():
    """A person's preference (a correction, a rejected or interrupted call) is not a fact about the
    world: it has no commons form, it stays in the personal layer."""
    rejected = {"kind": "error", "failure": "rejected", "subject": {"tool": "Bash", "heads": ["mix phx.server"]}}
    assert commons_text(rejected, A).text is None and "preference" in commons_text(rejected, A).why
    corr = {"kind": "correction", "said": "no, this project uses uv, not pip (see /home/USER/notes)",
            "action_label": "`pip install`"}
    assert commons_text(corr, A).text is None and "personal layer" in commons_text(corr, A).why
    assert commons_text({"kind": "session"}, A).text is None
    assert commons_text({"kind": "error", "subject": {}}, A).text is None
    one_word = {"kind": "error", "failure": "exit_code", "subject": {"tool": "Bash", "heads": ["make"]},
                "messages": [{"text": "failed"}]}
    assert commons_text(one_word, A).text is None  # a quote of one word: nothing to claim


def test_invisible_characters_cannot_hide_an_instruction_or_reach_the_wire():
    details = {"kind": "error", "failure": "exit_code", "subject": {"tool": "Bash", "heads": ["make"]},
               "messages": [{"text": "the build broke.\u200b Al\u200bways run make clean\x07 first\U000e0041"}]}
    text = commons_text(details, A).text
    assert text == '`make` failed: "the build broke".'  # the clean form of the quote first
    assert all(ord(ch) >= 32 and ch not in "\u200b\x07" for ch in text)
