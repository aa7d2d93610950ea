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
    json_form = _vectors("json.json")
    return {
        "valid.json": 11 * len(_vectors("valid.json")["vectors"]),
        "invalid.json": len(_vectors("invalid.json")["vectors"]) + 1,
        "json.json": len(json_form["lines"]) + len(json_form["files"]) + 2,
        "claims.json": sum(len(_vectors("claims.json")[k]) for k in ("render", "parse", "shapes", "unsafe", "markers",
                                                                     "same")) + 2,
        "domains.json": 2 * len(_vectors("domains.json")["vectors"]) + 2,
        "dedup.json": 2 * len(_vectors("dedup.json")["vectors"]),
        "observation.json": len(_vectors("observation.json")["vectors"]) + 2,
        "commons.json": 4 * len(_vectors("commons.json")["vectors"]),  # valid, then three orders
        "sync.json": (len(sync["fingerprints"]) + 2 * len(sync["messages"])
                      + len(sync["reconciliation"]["transcript"]) + 2
                      + len(sync["limit"]["transcript"]) + 3
                      + len(sync["invalid_messages"]) + len(sync["valid_messages"])),
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
    json_form = _vectors("json.json")
    next(v for v in json_form["lines"] if v["name"] == "exponent")["error"] = "encoding"  # 15E2 is JSON: schema
    (vectors / "json.json").write_text(json.dumps(json_form), encoding="utf-8")
    proc = _run("--vectors", str(vectors))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL invalid.json signature-small-order-key: schema" in proc.stdout
    assert "FAIL json.json exponent: encoding: got schema, want encoding" in proc.stdout
    assert re.search(r"^invalid\.json: \d+ passed, 1 failed$", proc.stdout, re.MULTILINE), proc.stdout
    assert re.search(r"^json\.json: \d+ passed, 1 failed$", proc.stdout, re.MULTILINE), proc.stdout


def test_js_verifier_fails_on_changed_commons_and_sync_vectors(tmp_path):
    # The settled commons rules and the strict sync checks can fail too: an attestation of a
    # non-lesson said pending, an invalid message made valid, a limit answer one byte longer.
    vectors = tmp_path / "vectors"
    shutil.copytree(VECTORS, vectors)
    commons = _vectors("commons.json")
    scenario = next(v for v in commons["vectors"] if v["name"] == "attestation-of-a-non-lesson")
    flipped = next(i for i, s in scenario["statuses"].items() if s == "not-counted")
    scenario["statuses"][flipped] = "pending"
    (vectors / "commons.json").write_text(json.dumps(commons), encoding="utf-8")
    sync = _vectors("sync.json")
    next(v for v in sync["invalid_messages"] if v["name"] == "bound-begins-with-ff")["hex"] = "01fe00ff00"
    sync["limit"]["max_message_bytes"] = 4097
    (vectors / "sync.json").write_text(json.dumps(sync), encoding="utf-8")
    proc = _run("--vectors", str(vectors))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "got not-counted, want pending" in proc.stdout
    assert "FAIL sync.json invalid message bound-begins-with-ff (a bound begins with the byte 0xFF) at the " \
           "responder: accepted, want sync-bad-message" in proc.stdout
    assert "FAIL sync.json limit: a message reaches max_message_bytes exactly: got 4096, want 4097" in proc.stdout


def test_js_unicode_functions_agree_with_python_on_every_code_point_assigned_in_unicode_14():
    # PROTOCOL.md pins Unicode 14.0 and refuses code points unassigned in it: then NFKC, case
    # folding and the observation rule's classes must give the same answer in every Unicode
    # version from 14.0 on. Node has its own, newer, Unicode (17.0 in Node 20.20); Python 3.11 has
    # 14.0. verify.mjs --unicode-dump says what its functions make of each assigned code point;
    # Python must say the same, code point by code point (no difference is allowed).
    import unicodedata

    from openmemory_protocol.unicode14 import ASSIGNED_RANGES

    proc = _run("--unicode-dump")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    word, digit, space = re.compile(r"\w"), re.compile(r"\d"), re.compile(r"\s")
    ascii_chars = [chr(a) for a in range(0x20, 0x7F)]
    ignorecase = {a: re.compile(re.escape(a), re.IGNORECASE) for a in ascii_chars}

    def cps(text):
        return " ".join(f"{ord(c):x}" for c in text)

    def matches(c):
        if c.lower() == c.upper() == c.casefold() == c and c not in "\u0131\u017f":
            return c if c in ascii_chars else ""  # caseless: matches itself only
        return "".join(a for a in ascii_chars if ignorecase[a].fullmatch(c))

    expected = []
    for low, high in ASSIGNED_RANGES:
        for cp in range(low, high + 1):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            c = chr(cp)
            bits = "".join("1" if p.fullmatch(c) else "0" for p in (word, digit, space))
            expected.append(f"{cp:x}|{bits}|{cps(unicodedata.normalize('NFKC', c))}|{cps(c.lower())}|"
                            f"{cps(c.casefold())}|{matches(c)}")
    assert len(lines) == len(expected) == 282_230
    differ = [(want, got) for want, got in zip(expected, lines) if want != got]
    assert differ == [], f"{len(differ)} code points differ, e.g. (python, node): {differ[:5]}"


# -- the claim rules' regular expressions: the same answers in Python and JavaScript ---------------

def _claims_eval(tmp_path, items):
    path = tmp_path / "items.json"
    path.write_text(json.dumps(items), encoding="utf-8")
    proc = _run("--claims-eval", str(path))
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _python_answers(text):
    from openmemory_protocol import claims

    form = claims._command_form(text)
    row = next((i for i, (_, _, _p) in enumerate(claims.UNSAFE_COMMANDS, 1) if claims._UNSAFE[i - 1][2].search(form)),
               None)
    marker = next((i for i, (_, p) in enumerate(claims._MARKERS, 1) if p.search(claims._folded(text))), None)
    parsed = claims.parse(text)
    return [form, row, marker, claims.text_key(text), claims.command_key(text),
            parsed.parts() if parsed is not None else None]


def test_claim_regexes_answer_the_same_in_python_and_javascript(tmp_path):
    """Synthetic strings: every vector's commands and failures, each cut and recombined, with
    non-ASCII letters, digits and spaces around the words the patterns look for (\\b, \\d, \\s
    and \\S are ASCII in both), and rendered claims (the parser)."""
    import random

    from openmemory_protocol import claims

    vectors = _vectors("claims.json")
    seeds = [u["command"] for u in vectors["unsafe"]] + [m["failure"] for m in vectors["markers"]] + [
        r["text"] for r in vectors["render"]] + [p["text"] for p in vectors["parse"]]
    rng = random.Random(27)
    noise = ["\u00e9", "\u0660", "\u00b2", "\u2003", "\u00a0", "\u3000", "\uff53\uff55\uff44\uff4f", "\u0131",
             "\U0001f600", "_", "-", "9", " ", "|", "&&", ";", "(", ")", "'", '"', "<x>", "<home>", "{id}", "\u212a"]
    items = list(seeds)
    for _ in range(1500):
        a, b = rng.choice(seeds), rng.choice(seeds)
        i, j = rng.randrange(len(a) + 1), rng.randrange(len(b) + 1)
        mixed = a[:i] + rng.choice(noise) + b[j:]
        items.append(mixed)
        items.append(rng.choice(noise) + a + rng.choice(noise))
    got = _claims_eval(tmp_path, items)
    assert len(got) == len(items)
    differ = [(t, js, _python_answers(t)) for t, js in zip(items, got) if js != _python_answers(t)]
    assert not differ, differ[:5]
    assert sum(row[1] is not None for row in got) > 100 and sum(row[2] is not None for row in got) > 20
    assert sum(row[5] is not None for row in got) >= len(vectors["render"])
    assert claims.unsafe_command(items[0]) is not None
