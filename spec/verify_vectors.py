#!/usr/bin/env python3
"""An independent verifier of the Open Memory wire format, written from PROTOCOL.md alone.

    python spec/verify_vectors.py        # checks every vector in spec/vectors/, exit 0 if all pass

It imports nothing from this repository: only cbor2, hashlib, PyNaCl and the standard library,
and it reads the observation rule's word lists and the text rules' code points out of
PROTOCOL.md itself (and the code points assigned in Unicode 14.0 out of
spec/unicode-14.0-assigned.txt, the table PROTOCOL.md points to). If it passes, PROTOCOL.md says enough to implement verification; if the
document and the reference implementation drift apart, it fails.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import unicodedata
from pathlib import Path

import cbor2
from nacl.bindings import crypto_sign_open
from nacl.exceptions import BadSignatureError
from nacl.exceptions import ValueError as NaclValueError

SPEC = Path(__file__).resolve().parent
PROTOCOL = SPEC.parent / "PROTOCOL.md"


class Invalid(Exception):
    def __init__(self, code: str, why: str):
        super().__init__(f"{code}: {why}")
        self.code = code


# --- the lists, read from PROTOCOL.md ---------------------------------------------------------


def protocol_list(name: str) -> str:
    """The fenced block that follows '<!-- list: NAME -->' in PROTOCOL.md."""
    text = PROTOCOL.read_text(encoding="utf-8")
    match = re.search(r"<!-- list: " + re.escape(name) + r" -->\s*```text\n(.*?)\n\s*```", text, re.S)
    if match is None:
        raise SystemExit(f"PROTOCOL.md has no list {name!r}")
    return match.group(1)


def code_point_ranges(block: str) -> list[tuple[int, int]]:
    out = []
    for item in block.split():
        low, _, high = item.partition("..")
        out.append((int(low, 16), int(high or low, 16)))
    return out


FORBIDDEN = code_point_ranges(protocol_list("forbidden-code-points"))
# The code points assigned in Unicode 14.0 (PROTOCOL.md, "Text fields"): spec/unicode-14.0-assigned.txt.
ASSIGNED = code_point_ranges(
    " ".join(line for line in (SPEC / "unicode-14.0-assigned.txt").read_text().splitlines() if not line.startswith("#"))
)
_gaps, _next = [], 0
for _low, _high in ASSIGNED:
    if _low > _next:
        _gaps.append((_next, _low - 1))
    _next = _high + 1
_gaps.append((_next, 0x10FFFF))
UNASSIGNED = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _gaps) + "]")
WHITE_SPACE = "".join(chr(int(x, 16)) for x in protocol_list("white-space").split())
OPENINGS = set(protocol_list("imperative-openings").split())
PATTERNS = [line.strip() for line in protocol_list("addressed-patterns").splitlines() if line.strip()]

# --- the observation rule (PROTOCOL.md, "The observation rule") ----------------------------

ADDRESSED = [re.compile(r"(?<![\w])" + p, re.IGNORECASE) for p in PATTERNS]
DECORATION = re.compile(r"^(?:[\s\"'*_>#~\-\u2022\u2013\u2014(\[]|\d+[.)]\s)+")
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def observation_rule(text: str) -> str | None:
    """None for an observation, else the rule broken."""
    t = UNASSIGNED.sub("\ufffd", text)  # unassigned in Unicode 14.0: read as U+FFFD
    t = unicodedata.normalize("NFKC", t).replace("\u2019", "'").replace("\u2018", "'")
    if any(p.search(t) for p in ADDRESSED):
        return "addressed-to-agent"
    for sentence in re.split(r"[.!?;:\n]+", t):
        rest = DECORATION.sub("", sentence, count=1).lower()
        if rest.startswith("`"):
            continue
        words = WORD.findall(rest[:80])[:2]
        if not words:
            continue
        if words[0] == "please" and len(words) > 1:
            return "imperative-opening"
        if words[0] in OPENINGS:
            return "imperative-opening"
    return None


# --- content identity -----------------------------------------------------------------------


def normalise(text: str) -> str:
    t = unicodedata.normalize("NFKC", text)
    t = t.translate({0x2018: "'", 0x2019: "'", 0x201C: '"', 0x201D: '"'})
    t = unicodedata.normalize("NFKC", t.casefold())
    t = re.sub("[" + WHITE_SPACE + "]+", " ", t).strip(" ")
    while t.endswith(".") or t.endswith(" "):
        t = t[:-1]
    return t


def dedup_key(text: str, kind: str) -> str:
    data = b"openmemory/dedup/v1\x00" + kind.encode() + b"\x00" + normalise(text).encode()
    return hashlib.sha256(data).hexdigest()


# --- records --------------------------------------------------------------------------------

MAX_RECORD = 2048
U53 = 2**53 - 1
EPOCH = 1_735_689_600  # the protocol epoch, 2025-01-01T00:00:00Z: the earliest created
REASON_CODES = {"incorrect", "harmful", "instruction", "private", "spam", "withdrawn", "other"}


def uint(v, lo, hi):
    return type(v) is int and lo <= v <= hi


def is_id(v):
    return type(v) is bytes and len(v) == 34 and v[:2] == b"\x12\x20"


def good_text(v, lo, hi):
    if type(v) is not str or not lo <= len(v.encode()) <= hi:
        return False
    if any(low <= ord(c) <= high for c in v for low, high in FORBIDDEN) or UNASSIGNED.search(v):
        return False
    return not (lo and all(c in WHITE_SPACE for c in v))


def ascending_ids(v):
    return type(v) is list and len(v) <= 16 and all(map(is_id, v)) and all(a < b for a, b in zip(v, v[1:]))


def evidence_ok(v):
    return (
        type(v) is dict and set(v) == {"sessions", "matched", "window"}
        and uint(v["sessions"], 0, 10**6) and uint(v["matched"], 0, v["sessions"])
        and uint(v["window"], 1, 31_622_400)
    )


FIELDS = {
    "lesson": {
        "text": lambda v: good_text(v, 1, 512),
        "kind": lambda v: type(v) is str and re.fullmatch(r"[a-z][a-z0-9-]{0,23}", v) is not None,
        "strength": lambda v: uint(v, 0, 10**6),
        "provenance": lambda v: type(v) is bytes and len(v) == 32,
        "derived_from": ascending_ids,
    },
    "attestation": {
        "lesson_id": is_id,
        "verdict": lambda v: v in ("confirmed", "failed") and type(v) is str,
        "met_before": lambda v: type(v) is bool,
        "evidence": evidence_ok,
    },
    "revocation": {
        "target": is_id,
        "reason_code": lambda v: type(v) is str and v in REASON_CODES,
        "reason": lambda v: good_text(v, 0, 280),
    },
    "vouch": {"subject": lambda v: type(v) is bytes and len(v) == 32},
}
COMMON = {
    "signer": lambda v: type(v) is bytes and len(v) == 32,
    "created": lambda v: uint(v, EPOCH, U53),
    "signature": lambda v: type(v) is bytes and len(v) == 64,
}


def plain(value, depth=0):
    """Only ints, bytes, text, bools, lists and maps, nesting at most 2 (PROTOCOL.md, Encoding)."""
    if type(value) in (int, bytes, str, bool):
        return True
    if type(value) in (list, dict) and depth < 2:
        items = list(value.items()) if type(value) is dict else [(None, x) for x in value]
        return all((k is None or plain(k, depth + 1)) and plain(x, depth + 1) for k, x in items)
    return False


def validate(data: bytes, now: int, max_skew: int, expect_id: str | None = None) -> dict:
    if not 0 < len(data) <= MAX_RECORD:
        raise Invalid("size", f"{len(data)} bytes")
    try:
        m = cbor2.loads(data)
    except Exception as exc:  # any decoding failure
        raise Invalid("encoding", str(exc)) from None
    if not plain(m) or cbor2.dumps(m, canonical=True) != data:
        raise Invalid("encoding", "not the deterministic encoding of the v1 data model")
    if type(m) is not dict or type(m.get("version")) is not int:
        raise Invalid("schema", "no map, or no integer version")
    if m["version"] != 1:
        raise Invalid("version", str(m["version"]))
    if type(m.get("type")) is not str:
        raise Invalid("schema", "type")
    if m["type"] not in FIELDS:
        raise Invalid("type", m["type"])
    table = {**FIELDS[m["type"]], **COMMON}
    if set(m) != set(table) | {"version", "type"}:
        raise Invalid("schema", "field set")
    for name, check in table.items():
        if not check(m[name]):
            raise Invalid("schema", name)
    if m["type"] == "attestation" and m["verdict"] == "confirmed" and m["evidence"]["matched"] < 1:
        raise Invalid("schema", "confirmed without a match")
    if m["type"] == "vouch" and m["subject"] == m["signer"]:
        raise Invalid("schema", "self vouch")
    record_id = "1220" + hashlib.sha256(data).hexdigest()
    if expect_id is not None and expect_id != record_id:
        raise Invalid("id", record_id)
    if m["created"] > now + max_skew:
        raise Invalid("clock-skew", str(m["created"] - now))
    text = m.get("text") if m["type"] == "lesson" else m.get("reason") if m["type"] == "revocation" else ""
    if text and observation_rule(text):
        raise Invalid("observation", text)
    body = {k: v for k, v in m.items() if k != "signature"}
    message = f"openmemory/{m['type']}/v1\x00".encode() + cbor2.dumps(body, canonical=True)
    try:
        crypto_sign_open(m["signature"] + message, m["signer"])  # libsodium: strict RFC 8032
    except (BadSignatureError, NaclValueError):
        raise Invalid("signature", "does not verify") from None
    return {"id": record_id, "map": m, "message": message}


def to_json(m: dict, record_id: str) -> dict:
    out = {"id": record_id}
    for k, v in m.items():
        out[k] = v.hex() if type(v) is bytes else [x.hex() for x in v] if k == "derived_from" else v
    return out


# --- run ------------------------------------------------------------------------------------


def main() -> int:
    failures: list[str] = []
    counts = {}

    def load(name):
        return json.loads((SPEC / "vectors" / name).read_text(encoding="utf-8"))

    valid = load("valid.json")
    for v in valid["vectors"]:
        try:
            r = validate(bytes.fromhex(v["cbor"]), valid["now"], valid["max_skew"])
        except Invalid as exc:
            failures.append(f"valid/{v['name']}: rejected ({exc})")
            continue
        checks = {
            "id": r["id"] == v["id"],
            "signing_message": r["message"].hex() == v["signing_message"],
            "signature": r["map"]["signature"].hex() == v["signature"],
            "public_key": r["map"]["signer"].hex() == v["public_key"],
            "json": json.dumps(to_json(r["map"], r["id"]), sort_keys=True) == json.dumps(v["record"], sort_keys=True),
            "dedup_key": r["map"]["type"] != "lesson" or dedup_key(r["map"]["text"], r["map"]["kind"]) == v["dedup_key"],
        }
        failures += [f"valid/{v['name']}: {k} differs" for k, ok in checks.items() if not ok]
    counts["valid"] = len(valid["vectors"])

    invalid = load("invalid.json")
    for v in invalid["vectors"]:
        try:
            validate(bytes.fromhex(v["cbor"]), invalid["now"], invalid["max_skew"], v.get("expect_id"))
            failures.append(f"invalid/{v['name']}: accepted")
        except Invalid as exc:
            if exc.code != v["error"]:
                failures.append(f"invalid/{v['name']}: {exc.code} instead of {v['error']} ({exc})")
    counts["invalid"] = len(invalid["vectors"])

    for v in load("dedup.json")["vectors"]:
        if normalise(v["text"]) != v["normalised"] or dedup_key(v["text"], v["kind"]) != v["dedup_key"]:
            failures.append(f"dedup: {v['text']!r}")
    counts["dedup"] = len(load("dedup.json")["vectors"])

    observation = load("observation.json")
    if sorted(OPENINGS) != observation["imperative_openings"] or PATTERNS != observation["addressed_patterns"]:
        failures.append("observation: PROTOCOL.md's lists differ from the vectors' lists")
    for v in observation["vectors"]:
        rule = observation_rule(v["text"])
        if (rule is None) != v["observation"] or (rule is not None and rule != v["rule"]):
            failures.append(f"observation: {v['text']!r}: got {rule}")
    counts["observation"] = len(observation["vectors"])

    for line in failures:
        print("FAIL", line)
    total = sum(counts.values())
    print(f"{total - len(failures)} passed, {len(failures)} failed  ({', '.join(f'{k} {n}' for k, n in counts.items())})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
