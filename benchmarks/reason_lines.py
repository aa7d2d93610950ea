"""How often the failure's reason line is the line a person would quote.

Over the committed table ``benchmarks/data/reason_lines.json`` (at least 60 real failure
outputs: the failed tool calls of ``../shared/data`` and outputs pasted into public issues),
the accuracy of :func:`openmemory_local.ingest.reason.reason_line`, against two baselines measured in
the same run: the first non-blank line, and the first line with an error word. Every miss is
printed with what was chosen and what was expected.

    python benchmarks/reason_lines.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from labelled import quoted, reason_rows  # noqa: E402
from openmemory_local.ingest.reason import reason_line  # noqa: E402

_ERROR_WORD = re.compile(r"error|fatal|fail|exception|denied|not found|no such|cannot|invalid", re.I)


def first_line(text: str) -> str:
    return next((l.strip() for l in text.replace("\\n", "\n").splitlines() if l.strip()), "")


def first_error_word_line(text: str) -> str:
    lines = [l.strip() for l in text.replace("\\n", "\n").splitlines() if l.strip()]
    return next((l for l in lines if _ERROR_WORD.search(l)), lines[0] if lines else "")


def main() -> int:
    rows = [r for r in reason_rows() if r.get("output")]
    missing = len(reason_rows()) - len(rows)
    methods = {
        "reason_line (the chooser)": lambda r: reason_line(r["output"], tool=r.get("tool")),
        "first non-blank line": lambda r: first_line(r["output"]),
        "first line with an error word": lambda r: first_error_word_line(r["output"]),
    }
    print(f"reason lines: {len(rows)} real failure outputs"
          + (f" ({missing} rows skipped: ../shared/data absent)" if missing else ""))
    shared = [r for r in rows if r["source"].startswith("shared-data:")]
    print(f"  {len(shared)} from ../shared/data transcripts, {len(rows) - len(shared)} from public issues and CI logs")
    misses = []
    for name, choose in methods.items():
        right = [quoted(choose(r), r["expected"]) for r in rows]
        acc = sum(right) / len(rows) if rows else 0.0
        print(f"  {name:32s} {sum(right):3d}/{len(rows)}  accuracy {acc:.3f}")
        if name.startswith("reason_line"):
            misses = [r for r, ok in zip(rows, right) if not ok]
    for r in misses:
        print(f"\n  miss: {r['source']}" + (f" line {r['line']}" if r.get("line") else ""))
        print(f"    chosen:   {reason_line(r['output'], tool=r.get('tool'))!r}")
        print(f"    expected: {r['expected']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
