"""The labelled sets of issue 14, loaded for the benchmarks and the tests.

``data/reason_lines.json``: real failure outputs and the line a person would quote from each
(rows from ``shared-data:`` are read from the transcripts in ``$OPENMEMORY_TEST_DATA``, default
``../shared/data``; the others carry their output). ``data/corrections.json``: person messages
with what the agent did just before, labelled correction or not (real ones from the shared
transcripts, and hard cases written for the set, marked ``synthetic``);
``data/corrections_heldout*.json``: the sets of issue 32, each written before a revision of the
rule and held out from it (:func:`correction_parts` says which are still held out: G, whose
misses were never read while revising, J, and K, the newest).
"""

from __future__ import annotations

import json
from pathlib import Path

from shared_data import shared_data_dir  # (beside this file: the benchmarks' folder is on sys.path)

DATA = Path(__file__).resolve().parent / "data"


def _tool_results(path: Path) -> dict[str, str]:
    """call id -> failure text of every failed tool call of one transcript."""
    from openmemory_local.ingest.adapters.claude_code import ClaudeCodeAdapter
    from openmemory_local.ingest.episodes import ToolReturned
    from openmemory_local.ingest.rawstream import Line

    def lines():
        with open(path, "rb") as f:
            for number, raw in enumerate(f, 1):
                yield Line(number, 0, raw.rstrip(b"\n"), len(raw))

    return {ev.call_id: ev.text for ev in ClaudeCodeAdapter().events(path, lines())
            if isinstance(ev, ToolReturned) and ev.failure}


def reason_rows(data_dir: Path | None = None) -> list[dict]:
    """Every row of the reason-line table with its ``output`` (None where the data is absent)."""
    data_dir = data_dir or shared_data_dir()
    rows = json.loads((DATA / "reason_lines.json").read_text(encoding="utf-8"))["rows"]
    cache: dict[Path, dict] = {}
    for row in rows:
        if row["source"].startswith("shared-data:"):
            path = data_dir / row["source"][len("shared-data:"):]
            if path not in cache:
                cache[path] = _tool_results(path) if path.is_file() else {}
            row["output"] = cache[path].get(row["call_id"])
    return rows


def quoted(chosen: str, expected: list[str]) -> bool:
    """Whether a chosen line contains one of the accepted quotes (white space collapsed)."""
    norm = " ".join(chosen.split())
    return any(" ".join(e.split()) in norm for e in expected)


def correction_cases() -> list[dict]:
    return json.loads((DATA / "corrections.json").read_text(encoding="utf-8"))["cases"]


def correction_parts() -> list[tuple[str, str, list[dict]]]:
    """The labelled person messages by where they came from: (title, in-sample or held-out, cases)
    (see benchmarks/corrections.py for which set was read while writing the rule)."""
    cases = correction_cases()
    real = [c for c in cases if c["source"] != "synthetic"]
    def held(name: str) -> list[dict]:
        return json.loads((DATA / name).read_text(encoding="utf-8"))["cases"]

    return [
        ("real, shared data (spotter, public)", "in-sample", real),
        ("synthetic, issue 14", "in-sample", [c for c in cases if c["source"] == "synthetic"]),
        ("synthetic A, issue 32", "in-sample (held out for the first rule, read since)",
         held("corrections_heldout.json")),
        ("synthetic B, issue 32", "in-sample (held out for the first revision, read since)",
         held("corrections_heldout_b.json")),
        ("synthetic C, issue 32", "in-sample (held out for the second revision, read since)",
         held("corrections_heldout_c.json")),
        ("synthetic D, issue 32", "in-sample (held out for the third revision, read since)",
         held("corrections_heldout_d.json")),
        ("synthetic E, issue 32", "in-sample (held out for the fourth revision, read since)",
         held("corrections_heldout_e.json")),
        ("synthetic F, issue 32", "in-sample (held out for the fifth revision, read since)",
         held("corrections_heldout_f.json")),
        ("synthetic G, issue 32", "in-sample (held out from the sixth to the eighth revision, read for the ninth)",
         held("corrections_heldout_g.json")),
        ("synthetic H, issue 32", "in-sample (held out for the sixth revision, read for the seventh)",
         held("corrections_heldout_h.json")),
        ("synthetic I, issue 32", "in-sample (held out for the seventh revision, read for the eighth)",
         held("corrections_heldout_i.json")),
        ("synthetic J, issue 32", "in-sample (held out for the eighth revision, read for the ninth)",
         held("corrections_heldout_j.json")),
        ("synthetic K, issue 32", "in-sample (held out for the eighth revision, read for the ninth)",
         held("corrections_heldout_k.json")),
        ("synthetic L, issue 32, blind", "in-sample (blind, held out for the ninth revision, read for the tenth)",
         held("corrections_heldout_l.json")),
        ("synthetic M, issue 32, blind", "in-sample (blind, held out for the ninth revision, read for the tenth)",
         held("corrections_heldout_m.json")),
        ("synthetic N, issue 32, blind", "in-sample (blind, held out for the tenth revision, read for the eleventh)",
         held("corrections_heldout_n.json")),
        ("synthetic O, issue 32, blind", "in-sample (blind, held out for the tenth revision, read for the eleventh)",
         held("corrections_heldout_o.json")),
        ("synthetic P, issue 32, blind", "in-sample (blind, held out for the eleventh revision, read for the twelfth)",
         held("corrections_heldout_p.json")),
        ("synthetic Q, issue 32, blind", "in-sample (blind, held out for the eleventh revision, read for the twelfth)",
         held("corrections_heldout_q.json")),
        ("synthetic R, issue 32, blind", "in-sample (blind, held out for the eleventh revision, read for the twelfth)",
         held("corrections_heldout_r.json")),
        ("synthetic S, issue 32, blind", "in-sample (blind, held out for the eleventh revision, read for the twelfth)",
         held("corrections_heldout_s.json")),
        ("synthetic T, issue 32, blind", "HELD-OUT (blind, written while the twelfth revision was frozen; scored once "
         "as pre-registered, never tuned on)", held("corrections_heldout_t.json")),
        ("synthetic U, issue 32, blind", "HELD-OUT (blind, written while the twelfth revision was frozen; scored once "
         "as pre-registered, never tuned on)", held("corrections_heldout_u.json")),
        ("synthetic V, issue 32, blind", "HELD-OUT (blind, written while the twelfth revision was frozen; scored once "
         "as pre-registered, never tuned on)", held("corrections_heldout_v.json")),
        ("synthetic W, issue 32, blind", "HELD-OUT (blind, written while the twelfth revision was frozen; scored once "
         "as pre-registered, never tuned on)", held("corrections_heldout_w.json")),
    ]
