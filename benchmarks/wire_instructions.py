#!/usr/bin/env python3
"""Machine instructions per record of validation, beside a bare PyNaCl verify (valgrind, callgrind).

    python benchmarks/wire_instructions.py [--base REV] [--records 16]

benchmarks/wire.py times the same operations; on a shared machine its ratios move by 10 % or
more from run to run. Instructions counted by callgrind do not depend on the load: they are the
same on every run. They are not time (the interpreter's instructions run at a lower rate than
the verify's), so this script says which change removed work, and wire.py how fast it is.

For each record type of wire.py (the same records), it counts the instructions of: the bare
verify of the signed message, ``wire.validate``, ``wire.decode`` and the observation rule on
the record's text, per record, and the rule on distinct texts (``real-texts``: the real
observations of benchmarks/data; wire.py's lesson texts differ only by a number); with
``--base REV``, the same for that revision's code (exported by ``git archive`` into a temporary
folder), then the ratios. Each operation is run once untimed first (tables, caches), then
counted alone: callgrind counts only what runs inside ``functools.reduce``, which nothing else
here calls. Needs valgrind (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import functools
import glob
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPERATIONS = ("nacl_verify", "validate", "decode", "rule")


def _child(root: Path, records: int) -> None:
    """Run inside callgrind: each operation over each type's records, once inside reduce()."""
    sys.path[:0] = [str(root), str(root / "benchmarks")]
    import wire as bench  # noqa: PLC0415 - the tree's own benchmarks/wire.py
    from nacl.bindings import crypto_sign_open  # noqa: PLC0415

    from openmemory_node import wire  # noqa: PLC0415
    from openmemory_protocol.observation import observation_violation  # noqa: PLC0415

    for record_type, items in bench.make_records().items():
        items = items[:records]
        encoded = [wire.encode(r) for r in items]
        texts = [getattr(r, "text", None) or getattr(r, "reason", None) for r in items]
        ops = {
            "nacl_verify": (lambda m: crypto_sign_open(m[0], m[1]),
                            [(r.signature + wire.signing_message(r), r.signer) for r in items]),
            "validate": (lambda d: wire.validate(d, now=bench.NOW), encoded),
            "decode": (wire.decode, encoded),
            "rule": (observation_violation, texts if all(texts) else []),
        }
        for name in OPERATIONS:
            fn, args = ops[name]
            for arg in args:
                fn(arg)
            functools.reduce(lambda _, arg: fn(arg), args, None)
            print(f"{record_type} {name} {len(args)}", flush=True)
    # distinct texts: the real observations of benchmarks/data (wire.py's lessons differ by a number)
    real = [line for name in ("observations-engine.txt", "observations-handwritten.txt")
            for line in (root / "benchmarks" / "data" / name).read_text(encoding="utf-8").splitlines()
            if line and not line.startswith("#")]
    for text in real:
        observation_violation(text)
    functools.reduce(lambda _, text: observation_violation(text), real, None)
    print(f"real-texts rule {len(real)}", flush=True)


def count(root: Path, records: int) -> dict[tuple[str, str], float]:
    """Instructions per record of each (record type, operation), for the code under ``root``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=functools_reduce",
             "--dump-after=functools_reduce", f"--callgrind-out-file={out}", sys.executable, __file__,
             "--child", str(root), "--records", str(records)],
            capture_output=True, text=True, check=True, cwd=root)
        order = [line.split() for line in done.stdout.splitlines() if line.strip()]
        dumps = sorted(glob.glob(f"{out}.*"), key=lambda p: int(p.rsplit(".", 1)[1].split("-")[0]))
        totals = [int(re.search(r"^totals: (\d+)", Path(p).read_text(), re.M).group(1)) for p in dumps]
    if len(totals) != len(order):
        raise SystemExit(f"callgrind wrote {len(totals)} dumps for {len(order)} operations")
    return {(t, op): total / int(n) for (t, op, n), total in zip(order, totals) if int(n)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="a git revision to count too, and compare against")
    parser.add_argument("--records", type=int, default=16, help="records of each type (of wire.py's 64)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        _child(args.child, args.records)
        return 0
    trees = {"this tree": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        if args.base:
            base = Path(tmp) / "base"
            base.mkdir()
            archive = subprocess.run(["git", "archive", args.base], cwd=ROOT, capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
            trees = {args.base: base, **trees}
        figures = {name: count(root, args.records) for name, root in trees.items()}
    print(f"machine instructions per record (callgrind; {args.records} records of each type of benchmarks/wire.py)")
    for name, f in figures.items():
        print(f"\n{name}:")
        print(f"{'record':<13}" + "".join(f"{op:>13}" for op in OPERATIONS) + f"{'validate/verify':>17}")
        for record_type in dict.fromkeys(t for t, _ in f):
            row = [f.get((record_type, op)) for op in OPERATIONS]
            verify, validate = f.get((record_type, "nacl_verify")), f.get((record_type, "validate"))
            print(f"{record_type:<13}" + "".join(f"{v:>13,.0f}" if v else f"{'-':>13}" for v in row)
                  + (f"{verify / validate:>16.1%}" if verify and validate else ""))
    if args.base:
        old, new = figures[args.base], figures["this tree"]
        print(f"\nthis tree / {args.base}:")
        for key in new:
            if key in old:
                print(f"  {key[0]:<12} {key[1]:<12} {new[key] / old[key]:.2f}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")  # (the children inherit it: the same hashes each run)
    sys.exit(main())
