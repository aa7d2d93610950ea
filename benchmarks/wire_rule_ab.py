#!/usr/bin/env python3
"""Wire validation with the hardened observation rule against the same validation with the rule's
first version, in one process, interleaved: what the rule change costs the node.

    python benchmarks/wire_rule_ab.py [--seconds 0.3] [--repeat 7] [--first-version FILE]

The first version is read from git (``openmemory_protocol/observation.py`` at commit 658f10b, the
last before the hardened rule) unless ``--first-version`` names a copy. Everything else of the
validation is this repository's code, so the difference is the rule's alone; the two are timed
in alternating rounds and on the process's CPU clock (``time.process_time``: the time another
process takes the core does not count), so that a shared, busy machine disturbs the ratio as little
as it can (a back-to-back run of benchmarks/wire.py on two trees cannot separate the rule from the
load).
Records: those of benchmarks/wire.py (64 of each type; the mix is all 256).
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from openmemory_node import wire  # noqa: E402
from openmemory_node.wire import records  # noqa: E402
from wire import NOW, make_records  # noqa: E402

FIRST_VERSION = "658f10b"


def first_version_rule(path: Path | None):
    """The rule's first version as a module (its one import, the Unicode 14.0 mask, is today's)."""
    if path is None:
        source = subprocess.run(["git", "show", f"{FIRST_VERSION}:openmemory_protocol/observation.py"], cwd=ROOT,
                                check=True, capture_output=True, text=True).stdout
        tmp = Path(tempfile.mkdtemp()) / "observation_v1.py"
        tmp.write_text(source, encoding="utf-8")
        path = tmp
    package = types.ModuleType("rule_v1")
    package.__path__ = []
    sys.modules["rule_v1"] = package
    sys.modules["rule_v1.unicode14"] = importlib.import_module("openmemory_protocol.unicode14")
    spec = importlib.util.spec_from_file_location("rule_v1.observation", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["rule_v1.observation"] = module
    spec.loader.exec_module(module)
    return module.observation_violation


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.3)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--first-version", type=Path)
    args = parser.parse_args()
    hardened = records.observation_violation
    first = first_version_rule(args.first_version)
    print(f"wire validation, one core, records per CPU second (best of {args.repeat} alternating rounds of "
          f"about {args.seconds}s); the first version of the rule is commit {FIRST_VERSION}'s")
    print(f"{'records':<12}{'first version':>15}{'hardened':>12}{'hardened/first':>16}")
    rows = make_records()
    ratios = {}
    for name, items in [*rows.items(), ("mix", [r for rs in rows.values() for r in rs])]:
        encoded = [wire.encode(r) for r in items]

        def one_pass() -> None:
            for data in encoded:
                wire.validate(data, now=NOW)

        loops = 1
        while True:
            start = time.process_time()
            for _ in range(loops):
                one_pass()
            if time.process_time() - start >= args.seconds / 4:
                break
            loops *= 2
        best = {"first": float("inf"), "hardened": float("inf")}
        for _ in range(args.repeat):
            for label, rule in (("first", first), ("hardened", hardened)):
                records.observation_violation = rule
                start = time.process_time()
                for _ in range(loops):
                    one_pass()
                best[label] = min(best[label], time.process_time() - start)
        records.observation_violation = hardened
        rate = {label: loops * len(encoded) / t for label, t in best.items()}
        ratios[name] = rate["hardened"] / rate["first"]
        print(f"{name:<12}{rate['first']:>15,.0f}{rate['hardened']:>12,.0f}{ratios[name]:>15.0%}")
    verdict = "within" if ratios["mix"] >= 0.8 else "BELOW"
    print(f"validation on the mix with the hardened rule: {ratios['mix']:.0%} of the first version's "
          f"({verdict} the 80% bound)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
