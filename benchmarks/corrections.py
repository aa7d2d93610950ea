"""Precision and recall of the correction detector on a labelled set of person messages.

``benchmarks/data/corrections.json``: every real person message of ``../shared/data`` that
follows an agent action (11 today, 2 of them corrections), and hard cases written for the set
(marked synthetic). Each case carries what the agent said and did just before. Printed for the
detector (:func:`openmemory_local.corrections.correction_cue`), against the baseline measured
in the same run: the former test on the opening word alone
(:func:`openmemory_local.episodes.correction_opening`). Every mistake is listed.

    python benchmarks/corrections.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from labelled import correction_cases  # noqa: E402
from openmemory_local.corrections import correction_cue  # noqa: E402
from openmemory_local.episodes import correction_opening  # noqa: E402


def detector(case: dict) -> bool:
    return correction_cue(case["message"], via=case["via"], agent_said=case.get("agent_said"),
                          actions=case.get("actions") or []) is not None


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
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    return (f"  {name:34s} precision {precision:.3f}  recall {recall:.3f}  (tp {tp}, fp {fp}, fn {fn}, tn {tn}; "
            f"{len(cases)} messages, {tp + fn} corrections)")


def main() -> int:
    cases = correction_cases()
    real = [c for c in cases if c["source"] != "synthetic"]
    synthetic = [c for c in cases if c["source"] == "synthetic"]
    print(f"corrections: {len(cases)} labelled person messages ({len(real)} real from ../shared/data, "
          f"{len(synthetic)} synthetic hard cases)")
    for title, subset in (("all", cases), ("real", real), ("synthetic", synthetic)):
        print(f" {title}:")
        print(line("correction_cue (with the agent's context)", subset, detector))
        print(line("opening word alone (baseline)", subset, opening_word))
    for c in cases:
        if detector(c) != c["correction"]:
            kind = "false positive" if not c["correction"] else "missed"
            print(f"\n  {kind}: {c['message']!r} ({c['source']}) -- {c['why']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
