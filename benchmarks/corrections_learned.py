"""A learned reading of corrections, measured against the rule on blind sets (issue 32; not landed).

The rule (:func:`openmemory_local.ingest.corrections.decide`) decides; this benchmark asks whether
weighing the rule's own signals and the message's words, learned from the labelled sets, reads
blind sets better than the rule's hard steps do. The model: a logistic regression over

- the rule's signals, not its decision: the course change (undo, redo, conceded, stopped, none,
  unknown), an interrupt, a question to the person before, the reference, asking for more, the
  step-4 shapes, judging words, rejecting words, a stated preference, the agent's acknowledgement
  and concession after;
- the message's words and word pairs (its first 300 characters), and its first word;

L2 weight 3, 400 steps of gradient descent at rate 0.5, threshold 0.5 (fixed before any blind set
was scored with it; see docs/corrections.md). Trained on every labelled set except the ones
scored, which it never sees.

    python benchmarks/corrections_learned.py --test P,Q [--exclude L,M,N,O]

``--test``: the sets scored (letters of the issue-32 sets); ``--exclude``: sets left out of the
training as well (to train only on what existed before the sets scored were written).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corrections import _turn, line, rule  # noqa: E402
from labelled import correction_parts  # noqa: E402
from openmemory_local.ingest import corrections as C  # noqa: E402

L2, STEPS, RATE, THRESHOLD = 3.0, 400, 0.5, 0.5


def features(case: dict) -> dict[str, float]:
    """The rule's signals for one labelled message, and its words (not the rule's decision)."""
    t = _turn(case)
    norm = C._norm(t.message)
    before = list(t.before)
    f: dict[str, object] = {}
    change = C.course_change(t.before, t.after, t.after_said, t.agent_said) if t.after is not None else "unknown"
    f[f"change={change}"] = 1
    f["interrupted"] = t.interrupted
    f["asked"] = bool(t.agent_said and C._QUESTION_TO_PERSON.search(t.agent_said.strip()[-300:]))
    f["refers"] = C.refers(norm, t.agent_said, before)
    f["more"] = C._asks_for_more(norm)
    f["notone"] = bool(C._NOT_ONE.search(norm[:300]))
    f["judged"] = bool(C._JUDGED.search(norm[:300]))
    f["rejects"] = bool(C._REJECTS.search(norm[:300]))
    f["prefer"] = bool(C._PREFER.search(norm[:300]))
    f["ack"] = bool(t.after_said and C._ACK.search(t.after_said[:300]))
    f["concede"] = bool(t.after_said and C._CONCEDE.search(t.after_said[:300]))
    words = re.findall(r"[a-z']+", norm[:300])
    for w in set(words):
        f["w:" + w] = 1
    for a, b in set(zip(words, words[1:])):
        f[f"b:{a}_{b}"] = 1
    if words:
        f["first:" + words[0]] = 1
    return {k: float(v) for k, v in f.items() if v}


def _letter(title: str) -> str | None:
    match = re.match(r"synthetic ([A-Z]), issue 32", title)
    return match.group(1) if match else None


class Learned:
    """The logistic regression, trained on the given cases."""

    def __init__(self, cases: list[dict]):
        feats = [features(c) for c in cases]
        self.vocab: dict[str, int] = {}
        for f in feats:
            for key in f:
                self.vocab.setdefault(key, len(self.vocab))
        x = self._matrix(feats)
        y = np.array([c["correction"] for c in cases], float)
        self.w, self.b = np.zeros(x.shape[1]), 0.0
        for _ in range(STEPS):
            p = 1 / (1 + np.exp(-(x @ self.w + self.b)))
            self.w -= RATE * (x.T @ (p - y) / len(y) + L2 * self.w / len(y))
            self.b -= RATE * float((p - y).mean())

    def _matrix(self, feats: list[dict]) -> np.ndarray:
        x = np.zeros((len(feats), len(self.vocab)))
        for i, f in enumerate(feats):
            for key, v in f.items():
                if key in self.vocab:
                    x[i, self.vocab[key]] = v
        return x

    def __call__(self, case: dict) -> bool:
        p = 1 / (1 + np.exp(-(self._matrix([features(case)]) @ self.w + self.b)))
        return bool(p[0] > THRESHOLD)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--test", required=True, help="letters of the sets scored, e.g. P,Q")
    ap.add_argument("--exclude", default="", help="letters of sets also left out of the training")
    args = ap.parse_args()
    test = set(args.test.upper().split(","))
    left_out = test | {s for s in args.exclude.upper().split(",") if s}
    parts = correction_parts()
    train = [c for title, _, cases in parts if _letter(title) not in left_out for c in cases]
    model = Learned(train)
    print(f"trained on {len(train)} labelled messages (sets left out: {', '.join(sorted(left_out))})")
    pooled: list[dict] = []
    for title, _, cases in parts:
        if _letter(title) in test:
            pooled += cases
            print(f"{title}:")
            print(line("the rule", cases, rule))
            print(line("the learned reading", cases, model))
    print("pooled:")
    print(line("the rule", pooled, rule))
    print(line("the learned reading", pooled, model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
