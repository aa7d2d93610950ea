"""Settling, decay and their writes (issue 16, sixth pass): each rewrite against the version it
replaced, on random data; what ``benchmarks/sleep_compare.py`` checks on whole sleeps, here piece
by piece."""

from __future__ import annotations

import random
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from openmemory_local.core.clock import iso
from openmemory_local.ingest.episodes import Episode
from openmemory_local.ingest.transcripts import add_episodes

START = datetime(2026, 3, 2, tzinfo=timezone.utc)


def _errors(n: int, rng: random.Random) -> list[Episode]:
    out = []
    for i in range(n):
        program = rng.choice(["git push", "mix test", "npm run build", "cargo build", "make lint", "go vet"])
        out.append(Episode("error", f"e{i}", f"{program} failed: error {rng.randrange(5)}",
                           {"tool": "Bash", "command": program, "failure": "exit_code",
                            "first_line": f"error: {program} {rng.randrange(5)}", "cwd": "/home/me/app",
                            "branch": rng.choice(["main", "dev"])},
                           f"s{i % 7}", None, "/home/me/app", iso(START + timedelta(hours=i)), 1))
    return out


def test_strengths_written_at_once_are_the_row_by_row_update(store):
    from openmemory_local.storage.episodes import set_strengths

    rng = random.Random(3)
    add_episodes(store, _errors(60, rng), now=START + timedelta(days=5))
    ids = [r[0] for r in store.conn.execute("SELECT id FROM episodes ORDER BY id")]
    counter = store.counter("episode_seq")
    for _ in range(5):
        chosen = rng.sample(ids, rng.randrange(1, len(ids)))
        rows = [(eid, rng.choice([0.0, 1.0, 5e-324, 1e-300, 0.1 + 0.2, rng.random()]), counter + n)
                for n, eid in enumerate(chosen, 1)]
        tables = []
        for way in ("row by row", "at once"):
            with pytest.raises(_Rollback), store.write():
                if way == "row by row":  # the version before
                    store.conn.executemany("UPDATE episodes SET strength = ?, seq = ? WHERE id = ?",
                                           [(s, q, eid) for eid, s, q in rows])
                else:
                    set_strengths(store, rows)
                tables.append((store.conn.execute("SELECT id, strength, seq, typeof(strength), * FROM episodes "
                                                  "ORDER BY id").fetchall(),
                               store.conn.execute("SELECT * FROM counters ORDER BY name").fetchall()))
                raise _Rollback
        assert tables[0] == tables[1]
        # the comparison can fail: the rows changed, each to its own value and seq (the trigger did not move them)
        written = {r[0]: r[1:3] for r in tables[1][0]}
        assert all(written[eid] == (strength, seq) for eid, strength, seq in rows)
    with store.write():  # and the temporary table is left empty
        set_strengths(store, rows)
    assert store.conn.execute("SELECT COUNT(*) FROM temp.om_strengths").fetchone()[0] == 0


class _Rollback(Exception):
    pass


def test_learn_writes_new_groups_once_and_checks_foreign_keys_again_after(store):
    from openmemory_local.sleep.passes import learn

    rng = random.Random(4)
    add_episodes(store, _errors(80, rng), now=START + timedelta(days=5))
    out = learn(store, START + timedelta(days=5))
    assert out["new_groups"] > 3 and out["learned"]
    assert store.conn.execute("PRAGMA defer_foreign_keys").fetchone()[0] == 0
    # every group is a settled row (its text, counts and details), every member's group exists
    rows = store.conn.execute("SELECT id, rule_text, seen, details FROM lessons").fetchall()
    assert len(rows) == out["new_groups"] and all(text and seen > 0 and details != "{}" for _, text, seen, details in rows)
    assert store.conn.execute("SELECT COUNT(*) FROM lesson_members m LEFT JOIN lessons l ON l.id = m.lesson_id "
                              "WHERE l.id IS NULL").fetchone()[0] == 0
    eid = store.conn.execute("SELECT id FROM episodes WHERE id NOT IN (SELECT episode_id FROM lesson_members)"
                             ).fetchone()
    if eid is None:
        eid = (store.conn.execute("INSERT INTO episodes (kind, key, text, created, last_touched, ingested, updated) "
                                  "VALUES ('error', 'x', 'x', ?, ?, ?, ?)", (iso(START),) * 4).lastrowid,)
    with pytest.raises(sqlite3.IntegrityError), store.write():  # checked at once again, not at the commit
        store.conn.execute("INSERT INTO lesson_members (episode_id, lesson_id, session_id, created, signature, joined) "
                           "VALUES (?, 999999, 's', ?, 'x', ?)", (eid[0], iso(START), iso(START)))


def _sessions(n: int, rng: random.Random) -> list[Episode]:
    out = []
    for i in range(n):
        created = START + timedelta(hours=7 * i)
        ended = rng.choice([iso(created + timedelta(hours=rng.randrange(1, 80))), None, "", "not a time", 17,
                            {"at": "2026-03-09"}, "2026-03-10"])
        fields = {"commands": {"git push": 1}, "cwd": rng.choice(["/home/me/app", "/home/me/other", None]),
                  "branch": rng.choice(["main", "dev", None])}
        if ended is not None:
            fields["ended"] = ended
        out.append(Episode("session", f"s{i}", f"Session {i}.", fields, f"s{i}", None,
                           rng.choice(["/home/me/app", None]), iso(created), 1))
    return out


def test_activity_of_one_scan_is_the_activity_query(store):
    from openmemory_local.sleep.passes import Activity, decay

    rng = random.Random(5)
    add_episodes(store, _sessions(60, rng) + _errors(40, rng), now=START + timedelta(days=30))
    until = (START + timedelta(days=40)).timestamp()
    for since in ("", iso(START + timedelta(days=3)), iso(START + timedelta(days=9, hours=5)), "2026-03-10"):
        start = since[:10]
        rows = set()  # what decay's scan collects
        for project, cwd, branch, created, ended in store.conn.execute(
                "SELECT project, json_extract(fields, '$.cwd'), json_extract(fields, '$.branch'), created, "
                "CASE WHEN kind = 'session' THEN json_extract(fields, '$.ended') END FROM episodes"):
            if created >= start:
                rows.add((project, cwd, branch, created[:10]))
            if isinstance(ended, str) and ended >= start:
                rows.add((project, cwd, branch, ended[:10]))
        one, query = Activity.of_days(rows), Activity(store, since)
        assert one._days == query._days and len(query._days) >= 3
        for fam in list(query._days) + [None, "nowhere"]:
            for moment in (None, "", since or None, iso(START + timedelta(days=2, hours=3)), "bad"):
                assert one.days(fam, moment, until) == query.days(fam, moment, until)
    assert decay(store, START + timedelta(days=40))["episodes_decayed"] == 100


def _quote_steps_before(text: str) -> list[str]:
    # the same steps, every one made at once: the whole quote, then cut at each end of a sentence
    # or clause (followed by a space, or a new line), the longest first, at most six cuts
    from openmemory_local.sleep.lesson_text import _MARKUP_START, _QUOTE_MAX, clip

    text = " ".join((text or "").replace('"', "'").split())
    markup = _MARKUP_START.search(text)
    if markup is not None:
        text = text[: markup.start()].rstrip()
    steps = []
    if text:
        steps.append(clip(text, _QUOTE_MAX))
        cuts = [i for i in range(1, min(len(text) - 1, _QUOTE_MAX + 1))
                if text[i] in ".!?;:," and (i + 1 == len(text) or text[i + 1].isspace())]
        steps.extend(clip(text[:i], _QUOTE_MAX) for i in sorted(cuts, reverse=True)[:6])
    steps.append("")
    return list(dict.fromkeys(s for s in steps if s or s == ""))


def _message(rng: random.Random) -> str:
    pieces = ["error", "failed", "Run", "it", "x" * 250, ".", ". ", ":", ": ", ";", "!", "?", "\n", '"', "<b>", "<!--",
              "-->", "<branch>", "<|im|>", "  ", "\t", "please", "use uv", "must", "zzkq", "bvx", "the build"]
    return "".join(rng.choice(pieces) + rng.choice(["", " "]) for _ in range(rng.randrange(0, 12)))


def test_quote_steps_and_failure_texts_made_one_at_a_time_are_those_made_at_once():
    from openmemory_local.sleep.lesson_text import _failure_candidates, _label, _sessions, quote_steps

    rng = random.Random(8)
    shorter = 0
    for _ in range(3000):
        message = _message(rng)
        steps = quote_steps(message)
        assert steps == _quote_steps_before(message), message
        shorter += len(steps) > 2
        subject = {"tool": "Bash", "heads": rng.choice([[], ["git push"]]), "path": None}
        details = {"tools": rng.choice([{}, {"Bash": 2, "Edit": 1}])}
        n = rng.randrange(1, 4)
        ends = rng.choice([[""], ["; each time, `x` succeeded right after.", ""]])
        eager = [f'H: "{q}"T{end}' if q else f"HT{end or '.'}" for end in ends for q in _quote_steps_before(message)]
        eager.append(f"A failure of {_label(subject, tools=details.get('tools'))} recurred {_sessions(n)}.")
        assert list(_failure_candidates("H", "T", ends, message, subject, details, n)) == eager
    assert shorter > 300  # the comparison can fail: quotes with several steps, in numbers
