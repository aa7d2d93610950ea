"""The JavaScript verifier (spec/js/verify.mjs), written from PROTOCOL.md alone, passes every vector.

It is a second implementation in another language: if PROTOCOL.md and the vectors drift apart
(or a vector changes), it fails here. Node.js is on the CI machines; without `node` on PATH the
test skips, saying so.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VERIFIER = ROOT / "spec" / "js" / "verify.mjs"
VECTORS = ROOT / "spec" / "vectors"
SUMMARY = re.compile(r"^(?P<file>[\w.-]+): (?P<passed>\d+) passed, (?P<failed>\d+) failed$", re.MULTILINE)
TOTAL = re.compile(r"^TOTAL: (?P<passed>\d+) passed, (?P<failed>\d+) failed, (?P<files>\d+) files$", re.MULTILINE)


def _vectors(name):
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


def _minimum_checks():
    """At least this many checks per file: one or more per vector, so a verifier that silently
    skips vectors fails."""
    sync = _vectors("sync.json")
    return {
        "valid.json": 9 * len(_vectors("valid.json")["vectors"]),
        "invalid.json": len(_vectors("invalid.json")["vectors"]) + 1,
        "dedup.json": 2 * len(_vectors("dedup.json")["vectors"]),
        "observation.json": len(_vectors("observation.json")["vectors"]) + 2,
        "commons.json": len(_vectors("commons.json")["vectors"]),
        "sync.json": len(sync["fingerprints"]) + 2 * len(sync["messages"]) + len(sync["reconciliation"]["transcript"]) + 1,
        "worked-example.txt": 4,
        "PROTOCOL.md": 4,
    }


def _run(*args):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH: the JavaScript verifier (spec/js/verify.mjs) needs Node.js 20+")
    return subprocess.run([node, str(VERIFIER), *args], capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_js_verifier_passes_every_vector():
    proc = _run()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = {m["file"]: (int(m["passed"]), int(m["failed"])) for m in SUMMARY.finditer(proc.stdout)}
    minimum = _minimum_checks()
    assert set(found) == set(minimum), proc.stdout
    for name, (passed, failed) in found.items():
        assert failed == 0, f"{name}: {failed} failed\n{proc.stdout}"
        assert passed >= minimum[name], f"{name}: only {passed} checks, expected at least {minimum[name]}"
    total = TOTAL.search(proc.stdout)
    assert total is not None, proc.stdout
    assert int(total["failed"]) == 0
    assert int(total["passed"]) == sum(p for p, _ in found.values())
    assert int(total["files"]) == len(minimum)


def test_js_verifier_fails_on_a_changed_vector(tmp_path):
    # The verifier must be able to fail: one flipped expectation in a copy of the vectors.
    vectors = tmp_path / "vectors"
    shutil.copytree(VECTORS, vectors)
    invalid = _vectors("invalid.json")
    target = next(v for v in invalid["vectors"] if v["name"] == "signature-small-order-key")
    target["error"] = "schema"
    (vectors / "invalid.json").write_text(json.dumps(invalid), encoding="utf-8")
    proc = _run("--vectors", str(vectors))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL invalid.json signature-small-order-key: schema" in proc.stdout
    assert re.search(r"^invalid\.json: \d+ passed, 1 failed$", proc.stdout, re.MULTILINE), proc.stdout
