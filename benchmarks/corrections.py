"""Precision and recall of the correction rule, on each labelled set, in-sample and held-out apart.

The sets, by where they came from and whether the rule was written looking at them (each
issue-32 set was written before a revision of the rule and run once against it, then read, so it
is in-sample for the revisions after it; the status of each is printed with it):

==========================  ========================================================  ============
part                        what                                                      status
==========================  ========================================================  ============
real (shared data)          every real person message of ``$OPENMEMORY_TEST_DATA``    in-sample
                            (spotter, public) that follows an agent action, with the
                            agent's calls before and after (``data/corrections.json``)
synthetic, issue 14         hard cases written with the former detector               in-sample
synthetic A to K, issue 32  406 sessions written alongside the rule's revisions       in-sample
                            (``data/corrections_heldout.json``, ``..._b`` to ``_k``)
synthetic L to S, issue 32  blind: 60 sessions each, written by helpers given only    in-sample
                            the issue and the format, each round while the rule was
                            frozen, scored once, then read for the next revision
synthetic T to W, issue 32  blind, 240 sessions, written while the twelfth revision   held-out
                            was frozen, scored once as pre-registered, never read
                            for a revision
==========================  ========================================================  ============

First runs, each set against the rule it was held out from (precision / recall):
A 1.00 / 0.82 (first rule), B 0.80 / 0.53 (first revision), C 0.86 / 0.67 (second revision),
D 0.77 / 0.63 (third revision), E 0.73 / 0.69 (fourth revision), F 0.92 / 0.69 (fifth revision),
G 0.86 / 0.79 (sixth revision), H 0.82 / 0.90 (sixth), I 0.80 / 0.80 (seventh), J 0.76 / 0.80
(eighth), K 1.00 / 0.90 (eighth); blind: L and M 0.84 / 0.78 (ninth), N and O 0.84 / 0.90 (tenth),
P and Q 0.83 / 0.80, R and S 0.93 / 0.85 (eleventh), **T to W 0.90 / 0.90 (twelfth, the current
one; 108 of 120 corrections found, 12 false positives)**. See docs/corrections.md.
Printed here for the rule
(:func:`openmemory_local.ingest.corrections.correction_cue`, with the calls after where the set has
them), the same rule with the calls after unknown (the words and the reference alone), and the
former opening-word test (:func:`openmemory_local.ingest.episodes.correction_opening`). Every mistake
of the rule is listed.

    python benchmarks/corrections.py [--second-opinion]

``--second-opinion`` adds the figures with the local model asked about the borderline messages
(:mod:`openmemory_local.ingest.corrections_lm`; skipped, and said so, without the ``agent-lm`` extra).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from labelled import correction_parts  # noqa: E402
from openmemory_local.ingest.corrections import Turn, correction_cue, decide, is_borderline  # noqa: E402
from openmemory_local.ingest.episodes import command_heads  # noqa: E402
from openmemory_local.ingest.episodes import correction_opening  # noqa: E402


_SHELL_TOOLS = {"Bash", "shell_command", "run_shell_command"}


def _calls(actions: list[dict] | None) -> list[dict] | None:
    """The calls as the episode builder sees them: a shell call's heads are the engine's own
    (:func:`openmemory_local.ingest.episodes.command_heads`), not the set's."""
    if actions is None:
        return None
    return [dict(a, heads=list(command_heads(a["command"]))[:4] if a["tool"] in _SHELL_TOOLS else a.get("heads") or [])
            for a in actions]


def rule(case: dict) -> bool:
    return decide(_turn(case)) is not None


def _turn(case: dict) -> Turn:
    after = _calls(case.get("after"))
    return Turn(case["message"], case["via"], case.get("agent_said"), tuple(_calls(case.get("actions") or [])),
                None if after is None else tuple(after), case.get("after_said"),
                interrupted=case.get("interrupted", False))


def words_alone(case: dict) -> bool:
    return correction_cue(case["message"], via=case["via"], agent_said=case.get("agent_said"),
                          actions=_calls(case.get("actions") or []),
                          interrupted=case.get("interrupted", False)) is not None


def opening_word(case: dict) -> bool:
    return case["via"] == "rejection" or correction_opening(case["message"]) is not None


def scores(cases: list[dict], predict) -> tuple[int, int, int, int]:
    tp = sum(1 for c in cases if c["correction"] and predict(c))
    fp = sum(1 for c in cases if not c["correction"] and predict(c))
    fn = sum(1 for c in cases if c["correction"] and not predict(c))
    tn = len(cases) - tp - fp - fn
    return tp, fp, fn, tn


def line(name: str, cases: list[dict], predict) -> str:
    tp, fp, fn, tn = scores(cases, predict)
    precision = f"{tp / (tp + fp):.3f}" if tp + fp else "  -  "
    recall = f"{tp / (tp + fn):.3f}" if tp + fn else "  -  "
    return (f"  {name:40s} precision {precision}  recall {recall}  (tp {tp}, fp {fp}, fn {fn}, tn {tn}; "
            f"{len(cases)} messages, {tp + fn} corrections)")


def main() -> int:
    parts = correction_parts()
    opinion = None
    if "--second-opinion" in sys.argv[1:]:
        from openmemory_local.ingest.corrections_lm import MODEL_ENV, load

        opinion = load()
        if opinion is None:
            print(f"second opinion: skipped (the agent-lm extra, llama-cpp-python, or the model named by {MODEL_ENV} "
                  "is absent)\n")
    for title, status, cases in parts:
        print(f"{title} [{status}]:")
        print(line("rule (words, reference, calls after)", cases, rule))
        borderline = sum(1 for c in cases if is_borderline(_turn(c)))
        if opinion is not None:
            print(line("rule + local model on the borderline", cases,
                       lambda c: decide(_turn(c), opinion) is not None))
        print(f"  {'borderline (left to a second opinion)':40s} {borderline} messages")
        print(line("bound: a second opinion always right", cases,
                   lambda c: decide(_turn(c), lambda t, c=c: c["correction"]) is not None))
        print(line("rule, calls after unknown", cases, words_alone))
        print(line("opening word alone (former baseline)", cases, opening_word))
    held = [c for _, status, cases in parts if status.startswith("HELD-OUT") for c in cases]
    mine = [c for _, status, cases in parts if not status.startswith("HELD-OUT") for c in cases]
    print("\npooled:")
    print(line("in-sample sets, the rule", mine, rule))
    print(line("held-out sets (T to W), the rule", held, rule))
    for title, status, cases in parts:
        for c in cases:
            if rule(c) != c["correction"]:
                kind = "false positive" if not c["correction"] else "missed"
                print(f"\n  {kind} ({title}): {c['message']!r} -- {c['why']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
