"""The JavaScript verifier's commons state machine (spec/js/verify.mjs) against the reference
(openmemory_node/commons.py), beyond the fixed scenarios of spec/vectors/commons.json:

- a differential test: random scenarios (synthetic, from fixed seeds: real signed version 1 and
  version 2 records, near-copies of the same claim, votes per part, exposure, derived lessons,
  revocations by authors, strangers and revokers, vouches, and random trust, team, blocked,
  revokers and local-revocation lists) get, from the JavaScript machine, in each of the three
  orders it tries, exactly the statuses the reference gives;
- the new scenarios can fail: flipped expectations are reported.

Without ``node`` on PATH these tests skip, saying so (as tests/wire/test_js_verifier.py does).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from openmemory_node.commons import CommonsConfig, evaluate
from openmemory_protocol import claims

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"
VERIFIER = SPEC / "js" / "verify.mjs"
VECTORS = SPEC / "vectors"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_commons_vectors", SPEC / "generate_commons_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


G = _generator()
KEYS = [f"k{i}" for i in range(10)]
CLAIMS = [
    G.PUSH,
    dataclasses.replace(G.PUSH, failure=G.PUSH.failure.upper()),  # the same claim
    dataclasses.replace(G.PUSH, fix="git push origin --set-upstream <branch>"),  # the same claim
    G.LOCK,
    dataclasses.replace(G.LOCK, failure=G.LOCK.failure.lower()),  # the same claim
    G.MODULE,  # no fix: one part
    dataclasses.replace(G.MODULE, failure=G.MODULE.failure + "."),  # the same claim
    G.PYTEST,
    claims.Claim(situation="make", failure="make: *** No rule to make target <target>.", fix_how="retried"),
]
TEXTS = [G.TEXT, G.TEXT.upper(), "The nightly build failed when the disk cache was full."]


def _random_scenario(rng: random.Random) -> tuple[dict, list]:
    """One synthetic scenario: a config (as commons.json has it) and valid records."""
    lessons: list = []
    for _ in range(rng.randint(1, 4)):
        author, created = rng.choice(KEYS + ["guardian"]), G.T0 + rng.randint(0, 5) * 3600
        parents = tuple(rng.sample(lessons, 1)) if lessons and rng.random() < 0.3 else ()
        if rng.random() < 0.75:
            made = G.claim_lesson(author, rng.choice(CLAIMS), created=created, parents=parents)
        else:
            made = G.lesson(author, rng.choice(TEXTS), created=created, parents=parents)
        if all(made.id != other.id for other in lessons):
            lessons.append(made)
    others: list = []
    for _ in range(rng.randint(3, 20)):
        if rng.random() < 0.95:
            target = rng.choice(lessons + others[:2])
        else:  # a lesson that is not here
            target = G.lesson(rng.choice(KEYS), "The formatter rewrote the lock file.", kind="error")
        signer = rng.choice(KEYS)
        created = G.T0 + rng.randint(-2, 40) * 3600 * rng.choice([1, 24])
        v2 = getattr(target, "version", 1) == 2
        if rng.random() < (0.9 if v2 else 0.1):
            failure = rng.choice(["confirmed", "confirmed", "failed", "untested"])
            fix = rng.choice(["confirmed", "failed", "failed", "untested"])
            if fix == "confirmed":
                failure = "confirmed"  # a fix confirmed without its failure is not a record
            if failure == fix == "untested":
                fix = "failed"
            others.append(G.attest2(signer, target, failure=failure, fix=fix, created=created,
                                    exposed=rng.random() < 0.1, met_before=rng.random() < 0.05))
        else:
            others.append(G.attest(signer, target, rng.choice(["confirmed", "confirmed", "failed"]), created=created,
                                   met_before=rng.random() < 0.05))
    for _ in range(rng.randint(0, 2)):
        voucher = rng.choice(KEYS)
        subject = rng.choice([k for k in KEYS + ["z"] if k != voucher])  # (never itself: not a record)
        others.append(G.vouch(voucher, subject, created=G.T0 + rng.randint(0, 100)))
    for _ in range(rng.randint(0, 3)):
        pick = rng.random()
        target = rng.choice(lessons) if pick < 0.5 else rng.choice(lessons + others) if pick < 0.9 else "1220" + "ab" * 32
        others.append(G.revoke(rng.choice(KEYS + ["guardian"] * 3), target, created=G.T0 + rng.randint(0, 100) * 60,
                               code=rng.choice(["incorrect", "withdrawn"])))
    if rng.random() < 0.2:
        others.append(G.revoke(rng.choice(KEYS + ["guardian"]), others[-1]))  # of a revocation, maybe
    if rng.random() < 0.3:  # a revoker (when it is one) withdraws its own copy of a claim
        own = G.claim_lesson("guardian", rng.choice(CLAIMS), created=G.T0 + rng.randint(0, 5) * 3600)
        if all(own.id != other.id for other in lessons):
            lessons.append(own)
            others.append(G.revoke("guardian", own, code="withdrawn"))
    records = lessons + others

    def keys() -> list[str]:
        return sorted(G.pub(k) for k in rng.sample(KEYS + ["guardian"], rng.randint(0, 3)))

    config = {"policy": rng.choice(["open", "open", "trusted"]), "threshold": rng.randint(1, 3),
              "fade_window": rng.choice([G.DAY, 10 * G.DAY, 30 * G.DAY]), "trust": keys(),
              "revokers": sorted(set(keys()) | ({G.pub("guardian")} if rng.random() < 0.5 else set())),
              "local_revocations": sorted(rng.sample([r.id for r in rng.choice((lessons, records))], 1))
              if rng.random() < 0.2 else [],
              "team": keys(), "blocked": keys() if rng.random() < 0.4 else []}
    return config, records


def _reference(config: dict, records: list) -> dict[str, str]:
    hexes = lambda name: frozenset(bytes.fromhex(k) for k in config[name])  # noqa: E731
    return evaluate(records, CommonsConfig(
        policy=config["policy"], threshold=config["threshold"], fade_window=config["fade_window"],
        trust=hexes("trust"), revokers=hexes("revokers"), local_revocations=frozenset(config["local_revocations"]),
        team=hexes("team"), blocked=hexes("blocked")))


def _run_on(tmp_path: Path, commons: dict) -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH: the JavaScript verifier (spec/js/verify.mjs) needs Node.js 20+")
    vectors = tmp_path / "vectors"
    shutil.copytree(VECTORS, vectors)
    (vectors / "commons.json").write_text(json.dumps(commons), encoding="utf-8")
    proc = subprocess.run([node, str(VERIFIER), "--vectors", str(vectors)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert "commons.json:" in proc.stdout, proc.stdout + proc.stderr
    return proc.stdout


def test_the_js_commons_machine_gives_the_reference_statuses_on_random_scenarios(tmp_path):
    rng = random.Random(20261203)
    scenarios = []
    for n in range(60):
        config, records = _random_scenario(rng)
        scenarios.append({"name": f"random-{n}", "description": "synthetic", "config": config,
                          "records": [G.wire.encode(r).hex() for r in records],
                          "statuses": dict(sorted(_reference(config, records).items()))})
    reached = {s for v in scenarios for s in v["statuses"].values()}
    assert {"common", "faded", "revoked", "counted", "not-counted", "pending"} <= reached  # the seed is not idle
    out = _run_on(tmp_path, {"vectors": scenarios})
    failures = [line for line in out.splitlines() if line.startswith("  FAIL commons.json random-")]
    assert failures == [], "\n".join(failures[:20])
    passed = int(re.search(r"^commons\.json: (\d+) passed", out, re.MULTILINE)[1])
    assert passed >= 4 * len(scenarios)  # each: valid, then three orders


def test_the_js_commons_machine_fails_on_flipped_claim_scenarios(tmp_path):
    commons = json.loads((VECTORS / "commons.json").read_text(encoding="utf-8"))
    by_name = {v["name"]: v for v in commons["vectors"]}
    flips = {"claim-parts": ("common", "candidate"), "exposed": ("not-counted", "counted"),
             "same-claim-revoked": ("revoked", "candidate"), "team": ("common", "candidate"),
             "blocked": ("revoked", "candidate")}
    for name, (was, now) in flips.items():
        statuses = by_name[name]["statuses"]
        statuses[next(i for i, s in statuses.items() if s == was)] = now
    out = _run_on(tmp_path, commons)
    for name, (was, now) in flips.items():
        for order in range(3):
            line = next((line for line in out.splitlines() if line.startswith(f"  FAIL commons.json {name} (order {order})")), "")
            assert f"got {was}, want {now}" in line, (name, order, out)
