"""Verify's situation texts are the Python reference's: the C accelerator
(``openmemory_local/_facets_c.c``) gives ``_command_facets_uncached``'s facets exactly (the same
strings in the same order, the same errors), and the faster paths around it (a command without
anything of its cwd or branch normalised as without them, ``facet_texts``' facets and times
beside each other) give what the code they replaced gave. The module is imported directly: these
tests fail, not skip, when it is not built or its build is stale."""

from __future__ import annotations

import importlib
import os
import random
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from openmemory_local.text import normalize

from openmemory_local.sleep import situations
from openmemory_protocol import native

from .transcripts import real_records


@pytest.fixture(scope="module")
def fc():
    module = importlib.import_module("openmemory_local._facets_c")  # fails when not built
    assert native._current(module), "openmemory_local._facets_c is stale: rebuild it (pip install -e .)"
    return module


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


def _tail():
    situations._facets_native()
    return situations._TAIL


def _workload_episodes(n: int = 600, seed: int = 3):
    from simulations.workload import Workload

    return Workload(seed=seed).episodes(n, datetime(2026, 1, 1, tzinfo=timezone.utc), 3)


def _commands_in(value, out: list) -> None:
    if isinstance(value, dict):
        for key, v in value.items():
            if key == "command" and isinstance(v, str):
                out.append(v)
            else:
                _commands_in(v, out)
    elif isinstance(value, list):
        for v in value:
            _commands_in(v, out)


def _transcript_commands(shared_data) -> list[str]:
    """Every tool call's ``command`` in the real transcripts."""
    out: list[str] = []
    for record in real_records(shared_data):
        _commands_in(record, out)
    return out


def test_command_facets_are_the_python_facets(fc, shared_data):
    tail = _tail()
    rng = random.Random(61)
    lines = ["", " ", "\n", "git push", "cd x && git push 2>&1 | tail -3", "git add " + " ".join(f"d/f{i}.py" for i in
             range(30)), "x <<EOF\nbody\nEOF", "a 'b\nc' d", "$(a\n(b)\n)", "x " * 3000 + "git add a/b c/d",
             "git add a/b c/d " + "y" * 4100, "\x1c\x1fgit\x1cpush\x1d"]
    lines += [_line(rng) for _ in range(60000)]
    generated = len(lines)
    for ep in _workload_episodes():
        lines += ep.fields.get("command_lines") or []
        lines.append(ep.fields.get("command") or "")
    lines += _transcript_commands(shared_data)
    assert len(lines) - generated > 1000  # the workload's and the transcripts' commands were read
    for line in lines:
        got = fc.command_facets(line, tail)
        if not line.isascii():
            assert got is None
            continue
        assert got == situations._command_facets_uncached(line, None, None), repr(line)
    assert fc.command_facets("caf\u00e9 && git push", tail) is None


def test_command_facets_errors_are_the_callers(fc):
    with pytest.raises(TypeError):
        fc.command_facets(b"git push", _tail())
    with pytest.raises(TypeError):
        fc.command_facets("git push", None)
    with pytest.raises(TypeError):
        fc.command_facets("git push")

    def broken(text):
        raise RuntimeError("tail")

    with pytest.raises(RuntimeError):
        fc.command_facets("git push", broken)
    with pytest.raises(TypeError):
        fc.command_facets("git push", lambda text: 5)
    with pytest.raises(TypeError):
        fc.command_facets("git push", lambda text: "caf\u00e9")
    assert fc.command_facets("cd x", broken) == []  # no segment left: the tail is not asked


CONTEXTS = [(None, None), ("/home/dev/src/app", None), ("/home/dev/src/app", "main"), ("/home/dev/src/app/", "HEAD"),
            ("/home/dev/src/app-worktrees/feat-x", "feat-x"), ("/home/dev/src/app-worktrees/feat-x", "user/feat-x"),
            ("/", "x"), ("", "a/"), ("/home/dev/my app", "b"), ("/home/dev/src/app", "fix/ab12")]


def test_a_command_without_its_cwd_or_branch_has_the_facets_it_has_with_them(fc):
    rng = random.Random(62)
    pieces = ATOMS + ["/home/dev/src/app/lib/x.ex", "-home-dev-src-app", "main", "feat-x", "ab12", "fix/ab12",
                      "/home/dev/src/app-worktrees/other/lib", "app-worktrees", "/home/dev/my app/x", "HEAD"]
    for k in range(20000):
        cwd, branch = CONTEXTS[k % len(CONTEXTS)]
        line = " ".join(rng.choice(pieces) for _ in range(rng.randrange(0, 9)))
        expected = situations._command_facets_uncached(line, cwd, branch)
        assert situations._command_facets(line, cwd, branch) == expected, (line, cwd, branch)
        if normalize.context_free(line, cwd, branch):
            assert expected == situations._command_facets_uncached(line, None, None)
            assert normalize.normalise(line, cwd=cwd, branch=branch) == normalize.normalise(line)
    assert not normalize.context_free("x", "/home/dev/my app", None)  # white space in the cwd: not told
    assert not normalize.context_free("x", None, "a/")  # an empty branch part: not told


def test_untimed_facets_are_the_distinct_facets_of_the_heads_and_lines(fc):
    tail = _tail()
    rng = random.Random(64)
    pieces = ATOMS + ["/home/dev/src/app/lib/x.ex", "-home-dev-src-app", "main", "ab12", "caf\u00e9"]
    for k in range(5000):
        cwd, branch = CONTEXTS[k % len(CONTEXTS)]
        lines = [" ".join(rng.choice(pieces) for _ in range(rng.randrange(0, 7))) for _ in range(rng.randrange(0, 6))]
        if rng.random() < 0.05:  # more than 200 facets
            lines += ["git add " + " ".join(f"d/f{i}.py" for i in range(j, j + 20)) for j in range(0, 400, 20)]
        before = rng.sample(["git push", "", "mix test", "git push", "fatal: x"], rng.randrange(0, 4))
        needles = normalize._context(cwd, branch)[4]
        if needles is None:
            continue
        cap = rng.choice([200, 200, 3, 0])
        got = fc.untimed_facets(before, lines, needles, tail, cap)
        if all(line.isascii() and normalize.context_free(line, cwd, branch) for line in lines):
            made = [f for line in lines for f in situations._command_facets_uncached(line, cwd, branch)]
            assert got == tuple(dict.fromkeys(filter(None, before + made)))[:cap]
        else:
            assert got is None
        # what facet_texts asks (None with OPENMEMORY_PURE=1: line by line, in Python)
        assert situations._untimed_native(before, lines, cwd, branch) == (
            fc.untimed_facets(before, lines, needles, tail, 200) if situations._facets_native() else None)
    assert fc.untimed_facets([], ["git push", 5], (), tail, 200) is None  # not a str: the caller's
    assert fc.untimed_facets([5], ["git push"], (), tail, 200) is None
    assert fc.untimed_facets([], ["git push"], ("caf\u00e9",), tail, 200) == ("git push",)  # not in an ASCII line
    assert fc.untimed_facets([], ["git push x/main"], ("main",), tail, 200) is None
    assert fc.untimed_facets(["a", "a", ""], [], ("main",), tail, 200) == ("a",)
    for bad in ((("git push",), [], (), tail, 200), ([], ["git push"], ("",), tail, 200),
                ([], ["git push"], (5,), tail, 200), ([], ["git push"], (), tail, "200"), ([], ["git push"], ()),
                ([], ["git push"], (), None, 200)):
        with pytest.raises(TypeError):
            fc.untimed_facets(*bad)
    with pytest.raises(ValueError):
        fc.untimed_facets([], [], (), tail, -1)


def test_normalise_is_the_python_reference_in_every_context(fc, monkeypatch):
    from openmemory_local.text import embed
    rng = random.Random(65)
    pieces = ATOMS + ["/home/dev/src/app/lib/x.ex", "-home-dev-src-app", "main", "feat-x", "ab12", "fix/ab12",
                      "/home/dev/src/app-worktrees/other/lib", "/home/dev/my app/x", "caf\u00e9", "HEAD", ""]
    cases = [(" ".join(rng.choice(pieces) for _ in range(rng.randrange(0, 9))), *CONTEXTS[k % len(CONTEXTS)])
             for k in range(20000)]
    got = [normalize.normalise(text, cwd=cwd, branch=branch) for text, cwd, branch in cases]
    monkeypatch.setattr(embed, "_NATIVE", None)  # the regular expressions, no accelerator
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


def test_facet_texts_are_the_timed_facets_the_code_before_gave(fc):
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


def test_the_facets_accelerator_is_what_the_engine_uses_unless_turned_off(fc):
    code = ("import openmemory_local.sleep.situations as s; s._command_facets('git push', None, None); "
            "print(s._FACETS_NATIVE is not None)")
    env = {k: v for k, v in os.environ.items() if k != "OPENMEMORY_PURE"}
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "OPENMEMORY_PURE": "1"}).stdout
    assert on.split() == ["True"] and off.split() == ["False"]


def _ordered(value):
    """A dict's items in their order, all the way down (insertion order decides ties in _verdict)."""
    if isinstance(value, dict):
        return [(k, _ordered(v)) for k, v in value.items()]
    return value


def test_record_hits_changes_the_dictionaries_as_the_python_loop_does(fc):
    import copy

    from openmemory_local.sleep import passes as sleep_module
    rng = random.Random(66)
    days = [f"2026-01-0{d}T{h:02d}:00:00.000Z" for d in range(1, 5) for h in (9, 12)]
    vocabulary = [f"facet {k}" for k in range(12)]
    for case in range(400):
        table = {facet: tuple((rng.randrange(6), rng.choice(["situation", "failure", "resolution", "first"]),
                               rng.choice(days), rng.random()) for _ in range(rng.randrange(0, 4)))
                 for facet in vocabulary}
        asked = {"c": [], "p": []}

        def maker(key):
            def hits_for(facet):
                asked[key].append(facet)
                return table[facet]
            return hits_for

        fam_c, fam_p = {}, {}
        for facet in rng.sample(vocabulary, 4):
            fam_c[facet] = fam_p[facet] = table[facet]
        found_c: dict = {}
        for _ in range(rng.randrange(1, 30)):
            names = tuple(rng.sample(vocabulary, rng.randrange(0, 6)))
            sid, eid = rng.choice(["s1", "s2", "episode:3"]), rng.randrange(100)
            created, now = rng.choice(days), rng.choice(days[3:])
            is_session = rng.random() < 0.5
            found_p = copy.deepcopy(found_c)
            errors = []
            for call in (lambda: fc.record_hits(names, fam_c, maker("c"), found_c, sid, eid, created, now, is_session),
                         lambda: sleep_module._record_hits(names, None, fam_p, maker("p"), found_p, sid, eid, created,
                                                           now, is_session)):
                try:
                    call()
                    errors.append(None)
                except TypeError:  # a role named "first" makes a match of the session's first time
                    errors.append(TypeError)
            assert errors[0] == errors[1] and _ordered(found_c) == _ordered(found_p), case
            if errors[0]:
                found_c = {}
            assert list(fam_c.items()) == list(fam_p.items()) and asked["c"] == asked["p"]
    # errors are the Python loop's
    with pytest.raises(TypeError):  # a time that is not comparable
        fc.record_hits(("a",), {"a": ((0, "situation", None, 0.5),)}, None, {}, "s", 1, "2026", "2027", False)
    with pytest.raises(TypeError):
        sleep_module._record_hits(("a",), None, {"a": ((0, "situation", None, 0.5),)}, None, {}, "s", 1, "2026",
                                  "2027", False)

    def broken(facet):
        raise LookupError(facet)

    with pytest.raises(LookupError):
        fc.record_hits(("a",), {}, broken, {}, "s", 1, "2026", "2027", False)
    with pytest.raises(TypeError):
        fc.record_hits(("a",), {}, lambda facet: [], {}, "s", 1, "2026", "2027", False)
    with pytest.raises(TypeError):
        fc.record_hits(["a"], {}, broken, {}, "s", 1, "2026", "2027", False)
    found = {0: None}  # found.get: None is missing
    fc.record_hits(("a",), {"a": ((0, "situation", "2025", 0.5),)}, broken, found, "s", 1, "2026", "2027", False)
    assert found == {0: {"s": {"first": "2026", "situation": (1, "2026", "a", 0.5)}}}
