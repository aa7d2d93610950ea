"""spec/: every vector against our implementation, the CDDL, the independent verifier, and
PROTOCOL.md against the code it documents."""

from __future__ import annotations

import importlib.util
import io
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from openmemory_protocol import observation as observation_rule
from openmemory_protocol.observation import ADDRESSED_PATTERNS, OBLIGATION_PATTERNS, RULES, observation_violation
from openmemory_protocol.tables import DATA_DIR
from openmemory_node import wire
from openmemory_node.wire import text as wire_text

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "spec"
VECTORS = SPEC / "vectors"
PROTOCOL = (ROOT / "PROTOCOL.md").read_text(encoding="utf-8")


def load(name: str) -> dict:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


VALID = load("valid.json")
INVALID = load("invalid.json")


@pytest.mark.parametrize("vector", VALID["vectors"], ids=lambda v: v["name"])
def test_valid_vector(vector):
    data = bytes.fromhex(vector["cbor"])
    record = wire.validate(data, now=VALID["now"], max_skew=VALID["max_skew"])
    assert record.id == vector["id"]
    assert record.signer.hex() == vector["public_key"]
    assert record.signature.hex() == vector["signature"]
    assert wire.signing_message(record).hex() == vector["signing_message"]
    assert wire.to_json(record) == vector["record"]
    assert wire.to_json_line(record) + "\n" == vector["json_line"]
    assert wire.from_json_line(vector["json_line"]) == record
    assert wire.from_json(vector["record"]) == record
    assert wire.encode(wire.from_json(vector["record"])) == data
    # The seed reproduces the signature (Ed25519 is deterministic).
    from nacl.signing import SigningKey

    key = SigningKey(bytes.fromhex(vector["seed"]))
    assert bytes(key.verify_key) == record.signer
    assert key.sign(wire.signing_message(record)).signature == record.signature
    if isinstance(record, wire.Lesson):
        assert wire.dedup_key(record) == vector["dedup_key"]


@pytest.mark.parametrize("vector", INVALID["vectors"], ids=lambda v: v["name"])
def test_invalid_vector(vector):
    data = bytes.fromhex(vector["cbor"])
    with pytest.raises(wire.WireError) as exc:
        wire.validate(data, now=INVALID["now"], max_skew=INVALID["max_skew"], expect_id=vector.get("expect_id"))
    assert exc.value.code == vector["error"], str(exc.value)


def test_every_error_code_has_a_vector():
    assert INVALID["error_codes"] == list(wire.ERROR_CODES)
    assert {v["error"] for v in INVALID["vectors"]} == set(wire.ERROR_CODES)
    names = [v["name"] for v in INVALID["vectors"] + VALID["vectors"]]
    assert len(names) == len(set(names))


def test_the_issue_asks_for_these_invalid_vectors():
    names = {v["name"] for v in INVALID["vectors"]}
    for wanted in [
        "encoding-non-shortest-integer", "encoding-indefinite-array", "encoding-unsorted-keys",
        "encoding-duplicate-key", "encoding-float-for-integer", "version-3", "type-unknown",
        "version-2-revocation", "claim-text-not-rendering", "unsafe-pipe-shell", "schema-v2-attestation-both-untested",
        "signature-bit-flip", "signature-other-domain", "clock-skew", "size-oversize", "observation-imperative",
    ]:
        assert wanted in names


JSON_FORM = load("json.json")


@pytest.mark.parametrize("vector", JSON_FORM["lines"], ids=lambda v: v["name"])
def test_json_line_vector(vector):
    data = bytes.fromhex(vector["hex"])
    inputs = [data] + ([vector["text"]] if "text" in vector else [])
    for line in inputs:  # bytes, and the same line as str when it is UTF-8
        if "error" in vector:
            with pytest.raises(wire.WireError) as exc:
                wire.from_json_line(line)
            assert exc.value.code == vector["error"], str(exc.value)
        else:
            assert wire.encode(wire.from_json_line(line)).hex() == vector["cbor"]


def test_json_file_vectors():
    for vector in JSON_FORM["files"]:
        errors: list[wire.WireError] = []
        stream = io.BytesIO(bytes.fromhex(vector["hex"]))
        got = [wire.encode(r).hex() for r in wire.read_jsonl_file(stream, on_error=errors.append)]
        assert got == [r["cbor"] for r in vector["results"] if "cbor" in r]
        assert [(e.line, e.code) for e in errors] == [(r["line"], r["error"]) for r in vector["results"] if "error" in r]


def test_json_vectors_cover_every_code_of_the_json_form():
    assert JSON_FORM["max_line_bytes"] == wire.MAX_JSON_LINE_BYTES
    assert {v["error"] for v in JSON_FORM["lines"] if "error" in v} == {
        "size", "encoding", "version", "type", "schema", "id"}
    assert sum("cbor" in v for v in JSON_FORM["lines"]) >= 10


@pytest.mark.parametrize("vector", load("dedup.json")["vectors"], ids=lambda v: v["text"][:30])
def test_dedup_vector(vector):
    assert wire.normalise_text(vector["text"]) == vector["normalised"]
    assert wire.dedup_key_for(vector["text"], vector["kind"]) == vector["dedup_key"]


def test_observation_vectors():
    data = load("observation.json")
    assert data["rules"] == list(RULES)
    assert data["addressed_patterns"] == list(ADDRESSED_PATTERNS)
    assert data["obligation_patterns"] == list(OBLIGATION_PATTERNS)
    for name, digest in data["tables"].items():
        assert hashlib.sha256((DATA_DIR / name).read_bytes()).hexdigest() == digest, name
    for vector in data["vectors"]:
        violation = observation_violation(vector["text"])
        assert (violation is None) == vector["observation"], vector
        if violation is not None:
            assert violation.rule == vector["rule"]


# --- the vectors are what the script makes --------------------------------------------------


def _generator():
    spec = importlib.util.spec_from_file_location("generate_vectors", SPEC / "generate_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_vectors_are_reproducible_from_the_script():
    gen = _generator()
    for name, obj in gen.build().items():
        assert gen.render(obj) == (VECTORS / name).read_text(encoding="utf-8"), f"{name} is stale: run spec/generate_vectors.py"
    assert gen.worked_example() == (VECTORS / "worked-example.txt").read_text(encoding="utf-8")


# --- the CDDL -------------------------------------------------------------------------------

# Invalid vectors the CDDL must accept: what they break is outside what CDDL says (the
# encoding's determinism, and the rules listed in records.cddl's header comment), or outside
# the record (id, clock, observation rule, signature).
CDDL_CANNOT_SAY = {
    "encoding-non-shortest-integer", "encoding-non-shortest-small-integer", "encoding-non-shortest-length",
    "encoding-non-shortest-map-head", "encoding-indefinite-array", "encoding-indefinite-text",
    "encoding-indefinite-map", "encoding-unsorted-keys", "encoding-keys-sorted-by-text",
    "schema-text-whitespace", "schema-text-newline", "schema-text-zero-width", "schema-text-bidi-override",
    "schema-derived-unsorted", "schema-derived-duplicate", "schema-derived-not-multihash",
    "schema-evidence-matched-over-sessions", "schema-confirmed-without-match", "schema-vouch-self",
    "schema-text-unassigned-unicode-16", "schema-text-unassigned-unicode-15", "schema-text-unassigned-bmp",
    "schema-reason-unassigned", "schema-text-forbidden-and-unassigned",
    # version 2: the claim parts' text rules and the attestation's cross-field rules are comments
    "schema-v2-claim-part-forbidden", "schema-v2-attestation-both-untested",
    "schema-v2-attestation-fix-without-failure", "schema-v2-attestation-fix-failure-failed",
    "schema-v2-attestation-confirmed-without-match", "schema-v2-attestation-matched-over-sessions",
}


def test_cddl_accepts_every_valid_record_and_refuses_what_it_can_express():
    import cddl_verifier  # in the test extra

    validator = cddl_verifier.Validator(SPEC / "records.cddl")
    for vector in VALID["vectors"]:
        result = validator.validate(bytes.fromhex(vector["cbor"]), root_type="record")
        assert result.valid, (vector["name"], [d.message for d in result.diagnostics])
    accepted = set()
    for vector in INVALID["vectors"]:
        if vector["error"] in {"id", "clock-skew", "observation", "claim", "unsafe", "signature"}:
            continue
        if validator.validate(bytes.fromhex(vector["cbor"]), root_type="record").valid:
            accepted.add(vector["name"])
    assert accepted == CDDL_CANNOT_SAY


# --- the independent verifier ---------------------------------------------------------------


def test_independent_verifier_passes_every_vector():
    out = subprocess.run(
        [sys.executable, str(SPEC / "verify_vectors.py")], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"^\d+ passed, 0 failed", out.stdout, re.M), out.stdout
    source = (SPEC / "verify_vectors.py").read_text(encoding="utf-8")
    assert "openmemory" not in re.sub(r'(""".*?"""|#.*|"openmemory/[^"]*"|b"openmemory/[^"]*")', "", source, flags=re.S)


def test_independent_verifier_catches_a_wrong_list(tmp_path):
    # Copy spec/ and PROTOCOL.md, drop one skipped opener from the copy: it must fail.
    import shutil

    shutil.copytree(SPEC, tmp_path / "spec")
    block = protocol_list("skipped-openers")
    broken = PROTOCOL.replace(block, re.sub(r"\balways\b ?", "", block, count=1))
    assert broken != PROTOCOL
    (tmp_path / "PROTOCOL.md").write_text(broken, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, str(tmp_path / "spec" / "verify_vectors.py")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 1 and "FAIL" in out.stdout


# --- PROTOCOL.md says what the code does ---------------------------------------------------


def protocol_list(name: str) -> str:
    match = re.search(r"<!-- list: " + re.escape(name) + r" -->\s*```text\n(.*?)\n\s*```", PROTOCOL, re.S)
    assert match, name
    return match.group(1)


def test_protocol_lists_are_the_code_lists():
    assert protocol_list("addressed-patterns").splitlines() == list(ADDRESSED_PATTERNS)
    assert protocol_list("obligation-patterns").splitlines() == list(OBLIGATION_PATTERNS)
    assert protocol_list("reporting-verbs").split() == sorted(observation_rule.REPORTING_VERBS)
    assert set(protocol_list("skipped-openers").split()) == observation_rule.SKIPPED_OPENERS
    assert [tuple(line.split()) for line in protocol_list("skipped-phrases").splitlines()] == list(
        observation_rule.SKIPPED_PHRASES)
    assert set(protocol_list("labels").split()) == observation_rule.LABELS
    assert set(protocol_list("predicate-words").split()) == observation_rule.PREDICATE_WORDS
    assert set(protocol_list("stop-words").split()) == observation_rule._STOPS
    assert [tuple(line.split(" ")) for line in protocol_list("names").splitlines()] == list(observation_rule.NAMES)
    for name, words in (("habit-subjects-singular", observation_rule.HABIT_SUBJECTS_SINGULAR),
                        ("habit-subjects-plural", observation_rule.HABIT_SUBJECTS_PLURAL),
                        ("habit-adverbs", observation_rule.HABIT_ADVERBS),
                        ("habit-undergoing", observation_rule.HABIT_UNDERGOING),
                        ("action-participles", observation_rule.ACTION_PARTICIPLES),
                        ("verbs-with-of", observation_rule.VERBS_WITH_OF)):
        assert set(protocol_list(name).split()) == words, name
    assert protocol_list("markup-patterns").splitlines() == list(observation_rule.MARKUP_PATTERNS)
    assert protocol_list("tag-patterns").splitlines() == list(observation_rule.TAG_PATTERNS)
    assert protocol_list("encoded-pattern").splitlines() == [observation_rule.ENCODED_PATTERN]
    ranges = []
    for item in protocol_list("forbidden-code-points").split():
        low, _, high = item.partition("..")
        ranges.append((int(low, 16), int(high or low, 16)))
    assert ranges == list(wire_text.FORBIDDEN_RANGES)
    spaces = "".join(chr(int(x, 16)) for x in protocol_list("white-space").split())
    assert spaces == wire_text.WHITE_SPACE


def test_protocol_shows_the_worked_example_verbatim():
    example = (VECTORS / "worked-example.txt").read_text(encoding="utf-8")
    assert example in PROTOCOL
    assert VALID["vectors"][0]["name"] == "lesson-worked-example"
    assert VALID["vectors"][0]["id"] in example and VALID["vectors"][0]["signature"][:64] in example


def test_protocol_states_the_limits_and_domains():
    for value in ["2048", "16384", "512 bytes", "280 bytes", "1,000,000", "0 to 16 ids", "2^53 - 1",
                  "31,622,400", "1356"]:
        assert value in PROTOCOL, value
    for record_type, domain in wire.DOMAINS.items():
        assert domain.hex() in PROTOCOL
    for code in wire.ERROR_CODES:
        assert f"| `{code}` |" in PROTOCOL
