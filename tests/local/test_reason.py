"""The reason line: the line of a failure a person would quote, on the committed table of real outputs."""

from __future__ import annotations

import sys

import pytest

from openmemory_local.ingest.reason import reason_line

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from labelled import quoted, reason_rows  # noqa: E402


def test_the_table_holds_sixty_real_outputs_and_the_chooser_quotes_most_of_them(shared_data):
    rows = [r for r in reason_rows(shared_data) if r.get("output")]
    assert len(rows) >= 60
    right = sum(quoted(reason_line(r["output"], tool=r.get("tool")), r["expected"]) for r in rows)
    assert right / len(rows) >= 0.9, right


@pytest.mark.parametrize("output,tool,expected", [
    # git commit with nothing staged: the reason is the line after the banner
    ("On branch master\nnothing to commit, working tree clean\n", "Bash", "nothing to commit, working tree clean"),
    # progress and banners lose to the finding
    ("Pre-commit validation failed:\\n\\n[DIALYZER]\\nFinding suitable PLTs\nChecking PLT...\nStarting Dialyzer\n"
     "Total errors: 1, Skipped: 0\nlib/a.ex:57:13:pattern_match\nThe pattern can never match the type.\n", "Bash",
     "Pre-commit validation failed: [DIALYZER] lib/a.ex:57:13:pattern_match The pattern can never match the type."),
    # the last line of a traceback
    ('Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n    import y\n'
     "ModuleNotFoundError: No module named 'y'\n", "Bash", "ModuleNotFoundError: No module named 'y'"),
    # a header joined with the line after it
    ("The following paths are ignored by one of your .gitignore files:\npriv/static/assets\nhint: Use -f\n", "Bash",
     "The following paths are ignored by one of your .gitignore files: priv/static/assets"),
    # a generic summary loses to the specific line
    ("error: aborting due to previous error\nerror[E0425]: cannot find value `x` in this scope\n", "Bash",
     "error[E0425]: cannot find value `x` in this scope"),
    # a file tool's first line, never the echoed file text
    ("String to replace not found in file.\nString: {:error, reason} -> raise ArgumentError\n", "Edit",
     "String to replace not found in file."),
    ("", "Bash", ""),
])
def test_reason_lines(output, tool, expected):
    assert reason_line(output, tool=tool) == expected


def test_a_huge_output_is_read_at_its_start_and_its_end():
    noise = "Compiling 1 file (.ex)\n" * 50_000
    assert reason_line(noise + "** (CompileError) lib/a.ex:3: undefined function x/0\n") == (
        "** (CompileError) lib/a.ex:3: undefined function x/0")


def test_the_correction_detector_on_the_labelled_set():
    from labelled import correction_cases

    from openmemory_local.ingest.corrections import correction_cue

    cases = correction_cases()
    assert len(cases) >= 60 and any(c["source"] != "synthetic" for c in cases)
    got = [correction_cue(c["message"], via=c["via"], agent_said=c.get("agent_said"), actions=c.get("actions") or [])
           is not None for c in cases]
    tp = sum(1 for c, g in zip(cases, got) if g and c["correction"])
    fp = sum(1 for c, g in zip(cases, got) if g and not c["correction"])
    fn = sum(1 for c, g in zip(cases, got) if not g and c["correction"])
    assert tp / (tp + fp) >= 0.95 and tp / (tp + fn) >= 0.85, (tp, fp, fn)
