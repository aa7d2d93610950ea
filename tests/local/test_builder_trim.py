"""The episode builder's bounded memory of the conversation tree (``refs``: uid -> the agent
statement in force there; ``statements``: the recent statements) is trimmed exactly as the
straightforward rule says, whatever the order of events, across resumes.

The builder keeps a count of refs per statement so that the trim need not rebuild the set of
live statements at every statement; the reference below is the plain rule (the code before
that change), and the two must agree event by event on random conversations.
"""

from __future__ import annotations

import json
import random

import pytest

from openmemory_local.ingest.episodes import _MAX_REFS, _MAX_STATEMENTS, AgentSaid, EpisodeBuilder, Link, PersonSaid


class _Reference:
    """refs and statements, trimmed by the plain rule."""

    def __init__(self):
        self.refs: dict = {}
        self.statements: dict = {}
        self.last_statement = None
        self.next_statement = 0
        self.dropped = {"no ref": 0, "oldest": 0}  # statements trimmed, by rule

    def link(self, uid, parent, statement=None):
        if not uid:
            return
        if statement is None:
            statement = self.refs.get(parent) if parent in self.refs else self.last_statement
        self.refs[uid] = statement
        if len(self.refs) > _MAX_REFS + _MAX_REFS // 4:
            for key in list(self.refs)[: len(self.refs) - _MAX_REFS]:
                del self.refs[key]

    def agent(self, ev: AgentSaid):
        if not ev.text.strip():
            self.link(ev.uid, ev.parent)
            return
        index = self.next_statement
        self.next_statement += 1
        self.statements[str(index)] = {"text": ev.text.strip(), "line": ev.line}
        if len(self.statements) > 2 * _MAX_STATEMENTS:
            live = set(self.refs.values()) | {index}
            for key in list(self.statements):
                if len(self.statements) <= _MAX_STATEMENTS:
                    break
                if int(key) not in live:
                    del self.statements[key]
                    self.dropped["no ref"] += 1
            while len(self.statements) > 4 * _MAX_STATEMENTS:
                del self.statements[next(iter(self.statements))]
                self.dropped["oldest"] += 1
        self.last_statement = index
        self.link(ev.uid, ev.parent, index)

    def before(self, parent):
        index = self.refs.get(parent) if parent and parent in self.refs else self.last_statement
        return None if index is None else self.statements.get(str(index))


def _events(seed: int, n: int, said: float):
    rng = random.Random(seed)
    uids: list[str] = []
    for line in range(1, n + 1):
        uid = None if rng.random() < 0.1 else f"u{seed}-{line}"
        if uids and rng.random() < 0.05:
            uid = rng.choice(uids)  # a uid seen before (several events of one record)
        # mostly the previous record, sometimes one far back (a branch of the conversation)
        parent = (uids[-1] if rng.random() < 0.8 else rng.choice(uids)) if uids else None
        kind = rng.random()
        if kind < said:
            yield AgentSaid(line, None, rng.choice(["", " ", f"statement {line}"]), uid, parent)
        elif kind < said + 0.05:
            yield PersonSaid(line, None, f"thanks {line}", uid, parent)
        else:
            yield Link(line, None, uid or f"l{seed}-{line}", parent)
        if uid:
            uids.append(uid)


@pytest.mark.parametrize("seed, said", [(0, 0.35), (1, 0.35), (2, 0.35), (3, 0.8), (4, 0.8), (5, 0.6)])
def test_refs_and_statements_trim_as_the_plain_rule(seed, said):
    builder, reference = EpisodeBuilder(), _Reference()
    for i, ev in enumerate(_events(seed, 4000, said)):
        if isinstance(ev, PersonSaid):
            assert builder._statement_before(ev.parent) == reference.before(ev.parent)
            reference.link(ev.uid, ev.parent)
        elif isinstance(ev, AgentSaid):
            reference.agent(ev)
        else:
            reference.link(ev.uid, ev.parent)
        builder.feed(ev)
        assert builder.s.refs == reference.refs
        assert builder.s.statements == reference.statements
        if i % 997 == 0:  # resume from the saved state, as the next ingest of a grown file does
            builder = EpisodeBuilder(json.loads(json.dumps(builder.state())))
        builder.take()
    assert reference.dropped["no ref"]  # the trim was exercised
    if said >= 0.6:
        assert reference.dropped["oldest"]  # and its second rule: more live statements than it keeps
