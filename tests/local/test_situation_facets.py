"""Verify's situation texts: the memoised paths give what the work they save gives (a command's
facets, a text's normalised form, in every context), the branch is replaced where its regular
expression matches, and ``facet_texts``' facets and times beside each other give what the code
they replaced gave."""

from __future__ import annotations

import random
from datetime import datetime, timezone

from openmemory_local.sleep import situations
from openmemory_local.text import normalize


ATOMS = ["git", "push", "add", "a/b.py", "x.ex", "lib/app.ex", "-m", "'msg x'", "'unclosed", '"q \\" x"', '"a\\\nb"',
         '"open', "$(date)", "$(a (b) c)", "$(a (b c)", "$(x", "$()", "<<EOF", "<< 'X'", "<<-  \"Y\"", "<<-", "<<<",
         "<<",
         "2>&1", ">", ">>", "&>", "<", "/dev/null", "/dev/nullx", "&&", "||", "|", ";", "\n", "&", "FOO=1", "-x=1",
         "cd", "echo", "./bin/cat", "12", "3>", "1>&2", "2>", "a=b", "tail", "source", ".", "\\", '"', "'", "$", "(",
         ")", "\t", "\x1c", "\x0b", " ", "mix", "test", "x.py", "{num}", "deadbeef1", "2026-01-01T10:11:12Z", "10:11",
         "ab.cdefgh", "-f.py", ".x", "a.", "1.5KB", "/home/dev/x1/y", "a.b.c", "v1.2", "x.PY", "x.tar.gz", "--", "-u",
         "123e4567-e89b-12d3-a456-426614174000", "a/b/c", "=x"]


def _line(rng: random.Random) -> str:
    return rng.choice(["", " ", ""]).join(rng.choice(ATOMS) + rng.choice(["", " ", " ", "  ", "\t"])
                                          for _ in range(rng.randrange(0, 16)))


def _workload_episodes(n: int = 600, seed: int = 3):
    from simulations.workload import Workload

    return Workload(seed=seed).episodes(n, datetime(2026, 1, 1, tzinfo=timezone.utc), 3)


CONTEXTS = [(None, None), ("/home/dev/src/app", None), ("/home/dev/src/app", "main"), ("/home/dev/src/app/", "HEAD"),
            ("/home/dev/src/app-worktrees/feat-x", "feat-x"), ("/home/dev/src/app-worktrees/feat-x", "user/feat-x"),
            ("/", "x"), ("", "a/"), ("/home/dev/my app", "b"), ("/home/dev/src/app", "fix/ab12")]


def test_a_commands_memoised_facets_are_its_facets_in_every_context():
    rng = random.Random(62)
    pieces = ATOMS + ["/home/dev/src/app/lib/x.ex", "-home-dev-src-app", "main", "feat-x", "ab12", "fix/ab12",
                      "/home/dev/src/app-worktrees/other/lib", "app-worktrees", "/home/dev/my app/x", "HEAD"]
    for k in range(20000):
        cwd, branch = CONTEXTS[k % len(CONTEXTS)]
        line = " ".join(rng.choice(pieces) for _ in range(rng.randrange(0, 9)))
        expected = situations._command_facets_uncached(line, cwd, branch)
        assert situations._command_facets(line, cwd, branch) == expected, (line, cwd, branch)
        assert situations._command_facets(line, cwd, branch) == expected, (line, cwd, branch)  # (from the memo)


def test_memoised_normalise_is_the_regular_expressions_work_in_every_context():
    rng = random.Random(65)
    pieces = ATOMS + ["/home/dev/src/app/lib/x.ex", "-home-dev-src-app", "main", "feat-x", "ab12", "fix/ab12",
                      "/home/dev/src/app-worktrees/other/lib", "/home/dev/my app/x", "caf\u00e9", "HEAD", ""]
    cases = [(" ".join(rng.choice(pieces) for _ in range(rng.randrange(0, 9))), *CONTEXTS[k % len(CONTEXTS)])
             for k in range(20000)]
    got = [normalize.normalise(text, cwd=cwd, branch=branch) for text, cwd, branch in cases]
    assert got == [normalize._normalise_uncached(text, cwd=cwd, branch=branch) for text, cwd, branch in cases]


def test_the_branch_is_replaced_where_its_regular_expression_matches():
    rng = random.Random(67)
    branches = ["main", "feat-x", "user/feat-x", "fix/ab12", "a/b", "x", "ab", "v1.2", "caf\u00e9-1", "a/x/feat-x",
                "feat-x/", "--", "a.b-c_d"]
    pieces = ["", " ", "-", ".", "_", "/", "x", "1", "\u00e9", "\u0663", "{", "feat", "-x", "main", "mains", "fix/",
              "ab12", "user/", "feat-x", "a/b", "b", "v1.2", "caf\u00e9-1", "\n", "--"]
    for k in range(30000):
        branch = branches[k % len(branches)]
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 12)))
        pattern = normalize._branch_re(branch)
        expected = pattern.sub("{branch}", text) if pattern is not None else text
        assert normalize._sub_branch(text, normalize._branch_names(branch)) == expected, (text, branch)


def _timed_facets_before(ep: dict, sig=None, sub=None) -> list:
    # situations.timed_facets as it was before facet_texts (the reference)
    fields = ep.get("fields") or {}
    cwd, branch = situations._ctx(ep)
    out = []
    kind = ep["kind"]
    if kind == "session":
        times = fields.get("times") or {}
        for head in (fields.get("commands") or {}).keys():
            out.append((head, times.get(f"c {head}")))
        for line in fields.get("command_lines") or []:
            when = times.get(f"l {line}")
            out.extend((facet, when) for facet in situations._command_facets_uncached(line, cwd, branch))
        for path in fields.get("files_edited") or []:
            out.append((f"Edit {situations.rel_path(path, cwd, branch)}", times.get(f"e {path}")))
        for path in fields.get("files_read") or []:
            out.append((f"Read {situations.rel_path(path, cwd, branch)}", times.get(f"r {path}")))
    elif kind == "error":
        sub = sub or situations.subject(ep)
        out.append((sig or situations.signature(ep, sub), None))
        if sub["tool"] == "Bash":
            out.extend((head, None) for head in sub["heads"])
            out.extend((facet, None) for facet in
                       situations._command_facets_uncached(fields.get("command") or "", cwd, branch))
        elif sub["path"]:
            out.append((f"{sub['tool']} {sub['path']}", None))
    elif kind == "correction":
        out.append((sig or situations.signature(ep), None))
        action = situations._action_text(fields.get("agent_action") or {}, cwd, branch)
        if action:
            out.append((action, None))
    merged = {}
    for facet, when in out:
        if not facet:
            continue
        if facet not in merged:
            if len(merged) >= situations._MAX_FACETS:
                continue
            merged[facet] = list(when) if when else None
        elif when:
            seen = merged[facet]
            merged[facet] = list(when) if seen is None else [min(seen[0], when[0]), max(seen[1], when[1])]
    return [(facet, *(when or (None, None))) for facet, when in merged.items()]


def _random_episode(rng: random.Random) -> dict:
    cwd, branch = rng.choice(CONTEXTS)
    kind = rng.choice(["session", "session", "error", "correction", "other"])
    fields = {"cwd": cwd, "branch": branch}
    lines = [_line(rng) for _ in range(rng.randrange(0, 8))] + rng.sample(["git push", "mix test", "ls"], 2)
    if kind == "session":
        fields["command_lines"] = lines
        fields["commands"] = {head: 1 for line in lines for head in situations.command_heads(line)}
        if rng.random() < 0.1:  # more than 200 facets
            fields["command_lines"] = lines + ["git add " + " ".join(f"d/f{i}.py" for i in range(k, k + 20))
                                               for k in range(0, 400, 20)]
        fields["files_edited"] = rng.sample(["lib/a.ex", f"{cwd}/lib/b.ex", "x", "lib/a.ex"], rng.randrange(0, 3))
        fields["files_read"] = rng.sample(["lib/a.ex", "/tmp/ab12/c", "", "y"], rng.randrange(0, 3))
        if rng.random() < 0.6:
            times = {}
            for key in ([f"c {h}" for h in fields["commands"]] + [f"l {line}" for line in fields["command_lines"]]
                        + [f"e {p}" for p in fields["files_edited"]] + [f"r {p}" for p in fields["files_read"]]):
                if rng.random() < 0.7:
                    a, b = sorted(f"2026-01-0{rng.randrange(1, 4)}T{rng.randrange(10, 13)}:00:00Z" for _ in range(2))
                    times[key] = [a, b]
                elif rng.random() < 0.3:
                    times[key] = []
            fields["times"] = times
    elif kind == "error":
        fields.update(tool=rng.choice(["Bash", "Bash", "Read", "Edit", "WebFetch", None]), command=rng.choice(lines),
                      failure=rng.choice(["exit_code", "rejected", "interrupted", None]),
                      first_line=rng.choice(["fatal: no upstream 12", "", "error at /home/dev/src/app/x.ex:3"]))
    elif kind == "correction":
        fields.update(message=rng.choice(["no, use uv", "", "don't push to main"]),
                      agent_action=rng.choice([{}, {"tool": "Bash", "command": rng.choice(lines)},
                                               {"tool": "Edit", "command": "lib/a.ex"}, {"tool": "Grep"}]))
    return {"id": 1, "kind": kind, "project": rng.choice([None, cwd]), "fields": fields, "text": "said it"}


def test_facet_texts_are_the_timed_facets_the_code_before_gave():
    rng = random.Random(63)
    episodes = [_random_episode(rng) for _ in range(3000)]
    for ep in _workload_episodes(400, seed=9):
        episodes.append({"id": 2, "kind": ep.kind, "project": ep.project, "fields": ep.fields, "text": ep.text})
    for ep in episodes:
        expected = _timed_facets_before(ep)
        assert situations.timed_facets(ep) == expected, ep
        names, times = situations.facet_texts(ep)
        assert [(facet, *(when if times is not None else (None, None))) for facet, when in
                zip(names, times or names)] == expected
        assert times is None or all(type(when) is tuple for when in times)
        assert situations.facets(ep) == [facet for facet, _, _ in expected]
        if ep["kind"] == "error":  # with the subject and signature learn made
            sub = situations.subject(ep)
            sig = situations.signature(ep, sub)
            assert situations.timed_facets(ep, sig, sub) == _timed_facets_before(ep, sig, sub)


