#!/usr/bin/env node
// An independent verifier of the Open Memory test vectors, written from PROTOCOL.md alone.
//
// Node.js 20, no dependencies: node:crypto for SHA-256 and Ed25519, everything else (strict
// CBOR, the record schema, the observation rule, content identity, the commons state machine,
// sync fingerprints and reconciliation) is written here from the specification's wording.
//
//   node spec/js/verify.mjs [--vectors DIR] [--protocol FILE] [--verbose]
//
// Prints one line per vector file ("valid.json: 123 passed, 0 failed"), then a total line, and
// exits 0 only when every check passed and every vector file was found.

import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));

// ----------------------------------------------------------------------------------------
// Bytes

const hex = (b) => Buffer.from(b).toString("hex");
const unhex = (s) => {
  if (typeof s !== "string" || !/^(?:[0-9a-f]{2})*$/.test(s)) throw new Error(`not lower-case hex: ${s}`);
  return Buffer.from(s, "hex");
};
const sha256 = (...parts) => {
  const h = crypto.createHash("sha256");
  for (const p of parts) h.update(p);
  return h.digest();
};
const compareBytes = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b));
const utf8 = (s) => Buffer.from(s, "utf8");

function varint(n) {
  // unsigned LEB128 (the multiformats unsigned-varint), minimal
  const out = [];
  let v = BigInt(n);
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) byte |= 0x80;
    out.push(byte);
  } while (v > 0n);
  return Buffer.from(out);
}

function readVarint(buf, pos) {
  // returns [value, newPos]; strict: minimal encoding, at most 9 bytes
  let value = 0n;
  let shift = 0n;
  const start = pos;
  for (;;) {
    if (pos >= buf.length) throw new SyncError("truncated varint");
    const byte = buf[pos++];
    value |= BigInt(byte & 0x7f) << shift;
    shift += 7n;
    if ((byte & 0x80) === 0) {
      if (byte === 0 && pos - start > 1) throw new SyncError("varint not minimal");
      break;
    }
    if (pos - start >= 9) throw new SyncError("varint too long");
  }
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) throw new SyncError("varint too big");
  return [Number(value), pos];
}

// ----------------------------------------------------------------------------------------
// Errors

class WireError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.code = code;
  }
}
const fail = (code, message) => {
  throw new WireError(code, message);
};

// ----------------------------------------------------------------------------------------
// Strict deterministic CBOR (PROTOCOL.md "Encoding")
//
// Decoded values: unsigned and negative integers are BigInt, byte strings Buffer, text strings
// string, arrays Array, maps CborMap (entries in wire order), false/true boolean.

class CborMap {
  constructor(entries = []) {
    this.entries = entries; // [[key, value], ...]
  }
  get(key) {
    for (const [k, v] of this.entries) if (k === key) return v;
    return undefined;
  }
  has(key) {
    return this.entries.some(([k]) => k === key);
  }
  keys() {
    return this.entries.map(([k]) => k);
  }
  without(key) {
    return new CborMap(this.entries.filter(([k]) => k !== key));
  }
}

const MAX_DEPTH = 2;
const utf8Strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function cborDecode(buf) {
  let pos = 0;
  const enc = (m) => fail("encoding", m);

  function head() {
    if (pos >= buf.length) enc("truncated: a head is missing");
    const ib = buf[pos++];
    const major = ib >> 5;
    const ai = ib & 0x1f;
    if (ai < 24) return [major, ai, BigInt(ai)];
    if (ai >= 28 && ai <= 30) enc(`reserved additional information ${ai}`);
    if (ai === 31) enc(major === 7 ? "break byte" : "indefinite length");
    const n = 1 << (ai - 24); // 1, 2, 4, 8 bytes
    if (major === 7) enc(ai === 24 ? "simple value" : "floating-point number");
    if (pos + n > buf.length) enc("truncated: a head's argument is cut");
    let arg = 0n;
    for (let i = 0; i < n; i++) arg = (arg << 8n) | BigInt(buf[pos++]);
    const minimum = [24n, 0x100n, 0x10000n, 0x100000000n][ai - 24];
    if (arg < minimum) enc(`non-shortest head (argument ${arg} in ${n} byte(s))`);
    return [major, ai, arg];
  }

  function length(arg, perItem) {
    // a length must fit in what is left of the input (each item takes at least one byte)
    const left = BigInt(buf.length - pos);
    if (arg * BigInt(perItem) > left) enc(`length ${arg} beyond the input`);
    return Number(arg);
  }

  function item(depth) {
    const [major, ai, arg] = head();
    switch (major) {
      case 0:
        return arg;
      case 1:
        return -1n - arg;
      case 2: {
        const n = length(arg, 1);
        const b = Buffer.from(buf.subarray(pos, pos + n));
        pos += n;
        return b;
      }
      case 3: {
        const n = length(arg, 1);
        const b = buf.subarray(pos, pos + n);
        pos += n;
        try {
          return utf8Strict.decode(b);
        } catch {
          return enc("text string is not valid UTF-8");
        }
      }
      case 4: {
        if (depth + 1 > MAX_DEPTH) enc(`containers nested deeper than ${MAX_DEPTH}`);
        const n = length(arg, 1);
        const out = [];
        for (let i = 0; i < n; i++) out.push(item(depth + 1));
        return out;
      }
      case 5: {
        if (depth + 1 > MAX_DEPTH) enc(`containers nested deeper than ${MAX_DEPTH}`);
        const n = length(arg, 2);
        const entries = [];
        let previous = null;
        for (let i = 0; i < n; i++) {
          const start = pos;
          const key = item(depth + 1);
          const keyBytes = buf.subarray(start, pos);
          if (previous !== null) {
            const c = compareBytes(previous, keyBytes);
            if (c === 0) enc("duplicate map key");
            if (c > 0) enc("map keys not in bytewise order of their encoding");
          }
          previous = keyBytes;
          entries.push([key, item(depth + 1)]);
        }
        return new CborMap(entries);
      }
      case 6:
        return enc("tag");
      case 7:
        if (ai === 20) return false;
        if (ai === 21) return true;
        return enc(ai === 22 ? "null" : ai === 23 ? "undefined" : "simple value");
    }
    return enc("unreachable");
  }

  const value = item(0);
  if (pos !== buf.length) enc(`${buf.length - pos} byte(s) after the data item`);
  return value;
}

function cborHead(major, n) {
  n = BigInt(n);
  const ib = major << 5;
  if (n < 24n) return Buffer.from([ib | Number(n)]);
  for (const [ai, size] of [[24, 1], [25, 2], [26, 4], [27, 8]]) {
    if (n < 1n << BigInt(8 * size)) {
      const b = Buffer.alloc(1 + size);
      b[0] = ib | ai;
      for (let i = size; i >= 1; i--) {
        b[i] = Number(n & 0xffn);
        n >>= 8n;
      }
      return b;
    }
  }
  throw new Error("integer too big for CBOR");
}

function cborEncode(v) {
  if (typeof v === "bigint") return v >= 0n ? cborHead(0, v) : cborHead(1, -1n - v);
  if (typeof v === "boolean") return Buffer.from([v ? 0xf5 : 0xf4]);
  if (typeof v === "string") {
    const b = utf8(v);
    return Buffer.concat([cborHead(3, b.length), b]);
  }
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) return Buffer.concat([cborHead(2, v.length), Buffer.from(v)]);
  if (Array.isArray(v)) return Buffer.concat([cborHead(4, v.length), ...v.map(cborEncode)]);
  if (v instanceof CborMap) {
    const pairs = v.entries.map(([k, x]) => [cborEncode(k), cborEncode(x)]);
    pairs.sort((a, b) => compareBytes(a[0], b[0])); // deterministic: bytewise order of encoded keys
    return Buffer.concat([cborHead(5, pairs.length), ...pairs.flat()]);
  }
  throw new Error(`cannot encode ${typeof v}`);
}

// ----------------------------------------------------------------------------------------
// Record schema (PROTOCOL.md "Common fields" .. "Vouch", "Text fields", "Limits")

const MAX_RECORD = 2048;
const MAX_CREATED = 2n ** 53n - 1n;
const MIN_CREATED = 1735689600n; // the protocol epoch, 2025-01-01T00:00:00Z (PROTOCOL.md, common fields)
const TYPES = ["lesson", "attestation", "revocation", "vouch"];
const domainOf = (type, version) => Buffer.concat([utf8(`openmemory/${type}/v${version}`), Buffer.from([0])]);
// Version 2 exists for lessons and attestations only (PROTOCOL.md "Versions").
const VERSIONS = { lesson: [1n, 2n], attestation: [1n, 2n], revocation: [1n], vouch: [1n] };
const COMMON_FIELDS = ["version", "type", "signer", "created", "signature"];
// JSON form order: id, version, type, the type's fields in PROTOCOL.md's table order, then signer,
// created, signature (what the vectors show; see the JS README).
const TYPE_FIELDS = {
  lesson: ["text", "kind", "strength", "provenance", "derived_from"],
  attestation: ["lesson_id", "verdict", "met_before", "evidence"],
  revocation: ["target", "reason_code", "reason"],
  vouch: ["subject"],
};
const TYPE_FIELDS_V2 = {
  lesson: ["text", "kind", "claim", "strength", "provenance", "derived_from"],
  attestation: ["lesson_id", "failure", "fix", "exposed", "met_before", "evidence"],
};
const fieldsOf = (type, version) => (version === 2n ? TYPE_FIELDS_V2 : TYPE_FIELDS)[type];
const CLAIM_PARTS = ["situation", "path", "failure", "fix", "fix_how"];
const PART_VERDICTS = ["confirmed", "failed", "untested"];
const EVIDENCE_FIELDS = ["sessions", "matched", "window"];
const VERDICTS = ["confirmed", "failed"];
const REASON_CODES = ["incorrect", "harmful", "instruction", "private", "spam", "withdrawn", "other"];

// The forbidden code points, copied from PROTOCOL.md's list (checked against it at run time).
const FORBIDDEN_TEXT = `0000..001F  007F..009F  00AD  034F  0600..0605  061C  06DD  070F  0890..0891  08E2
115F..1160  17B4..17B5  180B..180F  200B..200F  2028..202E  2060..206F  3164  FDD0..FDEF
FE00..FE0F  FEFF  FFA0  FFF0..FFFB  FFFE..FFFF  110BD  110CD  13430..13438  1BCA0..1BCA3
1D173..1D17A  E0000..E0FFF  1FFFE..1FFFF  2FFFE..2FFFF  3FFFE..3FFFF
4FFFE..4FFFF  5FFFE..5FFFF  6FFFE..6FFFF  7FFFE..7FFFF  8FFFE..8FFFF  9FFFE..9FFFF
AFFFE..AFFFF  BFFFE..BFFFF  CFFFE..CFFFF  DFFFE..DFFFF  EFFFE..EFFFF  FFFFE..FFFFF
10FFFE..10FFFF`;
// Unicode White_Space, copied from PROTOCOL.md "Content identity" (checked at run time).
const WHITE_SPACE_TEXT = `0009 000A 000B 000C 000D 0020 0085 00A0 1680 2000 2001 2002 2003 2004 2005 2006 2007 2008
2009 200A 2028 2029 202F 205F 3000`;

const parseRanges = (text) =>
  text
    .trim()
    .split(/\s+/)
    .map((r) => r.split("..").map((h) => parseInt(h, 16)))
    .map(([a, b]) => [a, b ?? a]);
const FORBIDDEN = parseRanges(FORBIDDEN_TEXT);
const WHITE_SPACE = new Set(parseRanges(WHITE_SPACE_TEXT).map(([a]) => a));
const isForbidden = (cp) => FORBIDDEN.some(([a, b]) => cp >= a && cp <= b);

// The code points assigned in Unicode 14.0 (PROTOCOL.md "Text fields"): the table in
// spec/unicode-14.0-assigned.txt, inclusive ranges. Node has its own, newer, Unicode: not used
// to decide what is assigned.
const UNICODE_TABLE = path.join(HERE, "..", "unicode-14.0-assigned.txt");
const ASSIGNED = parseRanges(
  fs
    .readFileSync(UNICODE_TABLE, "utf8")
    .split("\n")
    .filter((l) => !l.startsWith("#"))
    .join(" "),
);
function isAssigned(cp) {
  let lo = 0;
  let hi = ASSIGNED.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (cp < ASSIGNED[mid][0]) hi = mid - 1;
    else if (cp > ASSIGNED[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}
// the observation rule reads a code point unassigned in Unicode 14.0 as U+FFFD
const maskUnassigned = (s) => [...s].map((ch) => (isAssigned(ch.codePointAt(0)) ? ch : "\ufffd")).join("");

function checkText(name, s, minBytes, maxBytes) {
  if (typeof s !== "string") fail("schema", `${name} is not a text string`);
  const n = utf8(s).length;
  if (n < minBytes || n > maxBytes) fail("schema", `${name} is ${n} bytes, not ${minBytes} to ${maxBytes}`);
  for (const ch of s) {
    const cp = ch.codePointAt(0);
    const u = `U+${cp.toString(16).toUpperCase().padStart(4, "0")}`;
    if (isForbidden(cp)) fail("schema", `${name} holds the forbidden code point ${u}`);
    if (!isAssigned(cp)) fail("schema", `${name} holds ${u}, not assigned in Unicode 14.0`);
  }
}

const isUint = (v, max) => typeof v === "bigint" && v >= 0n && v <= BigInt(max);
const isBytes = (v, n) => Buffer.isBuffer(v) && v.length === n;
const isRecordId = (v) => isBytes(v, 34) && v[0] === 0x12 && v[1] === 0x20;

function checkFieldSet(map, expected, what) {
  for (const k of map.keys()) {
    if (typeof k !== "string") fail("schema", `${what} has a key that is not a text string`);
    if (!expected.includes(k)) fail("schema", `${what} has an unknown field ${JSON.stringify(k)}`);
  }
  for (const k of expected) if (!map.has(k)) fail("schema", `${what} lacks the field ${JSON.stringify(k)}`);
}

// Steps 3 to 5 of PROTOCOL.md "Validation", on a decoded value.
function checkRecord(rec) {
  // 3. version (a non-map, a missing or non-integer version: schema)
  if (!(rec instanceof CborMap)) fail("schema", "the record is not a map");
  const version = rec.get("version");
  if (typeof version !== "bigint") fail("schema", "version missing or not an integer");
  if (version !== 1n && version !== 2n) fail("version", `version ${version}`);
  // 4. type (missing or not text: schema); a version the type does not have: version
  const type = rec.get("type");
  if (typeof type !== "string") fail("schema", "type missing or not a text string");
  if (!TYPES.includes(type)) fail("type", `unknown record type ${JSON.stringify(type)}`);
  if (!VERSIONS[type].includes(version)) fail("version", `a ${type} has no version ${version}`);
  // 5. schema
  checkFieldSet(rec, [...COMMON_FIELDS, ...fieldsOf(type, version)], type);
  const signer = rec.get("signer");
  if (!isBytes(signer, 32)) fail("schema", "signer is not 32 bytes");
  if (!isUint(rec.get("created"), MAX_CREATED) || rec.get("created") < MIN_CREATED)
    fail("schema", "created is not an integer from the protocol epoch (1735689600) to 2^53-1");
  if (!isBytes(rec.get("signature"), 64)) fail("schema", "signature is not 64 bytes");
  if (version === 2n) checkRecordV2(rec, type);
  else if (type === "lesson") {
    const text = rec.get("text");
    checkText("text", text, 1, 512);
    if (![...text].some((ch) => !WHITE_SPACE.has(ch.codePointAt(0)))) fail("schema", "text is only white space");
    const kind = rec.get("kind");
    if (typeof kind !== "string" || !/^[a-z][a-z0-9-]{0,23}$/.test(kind)) fail("schema", "kind does not match [a-z][a-z0-9-]{0,23}");
    if (!isUint(rec.get("strength"), 1000000)) fail("schema", "strength is not an integer in 0..1000000");
    if (!isBytes(rec.get("provenance"), 32)) fail("schema", "provenance is not 32 bytes");
    const parents = rec.get("derived_from");
    if (!Array.isArray(parents) || parents.length > 16) fail("schema", "derived_from is not an array of 0 to 16 ids");
    parents.forEach((p, i) => {
      if (!isRecordId(p)) fail("schema", "a derived_from entry is not a record id");
      if (i > 0 && compareBytes(parents[i - 1], p) >= 0) fail("schema", "derived_from is not strictly ascending");
    });
  } else if (type === "attestation") {
    if (!isRecordId(rec.get("lesson_id"))) fail("schema", "lesson_id is not a record id");
    const verdict = rec.get("verdict");
    if (!VERDICTS.includes(verdict)) fail("schema", "unknown verdict");
    if (typeof rec.get("met_before") !== "boolean") fail("schema", "met_before is not a boolean");
    const matched = checkEvidence(rec.get("evidence"));
    if (verdict === "confirmed" && matched < 1n) fail("schema", "a confirmed attestation with matched 0");
  } else if (type === "revocation") {
    if (!isRecordId(rec.get("target"))) fail("schema", "target is not a record id");
    if (!REASON_CODES.includes(rec.get("reason_code"))) fail("schema", "unknown reason_code");
    checkText("reason", rec.get("reason"), 0, 280);
  } else if (type === "vouch") {
    const subject = rec.get("subject");
    if (!isBytes(subject, 32)) fail("schema", "subject is not 32 bytes");
    if (subject.equals(signer)) fail("schema", "a key vouching for itself");
  }
  return type;
}

// evidence (both versions): returns matched
function checkEvidence(ev) {
  if (!(ev instanceof CborMap)) fail("schema", "evidence is not a map");
  checkFieldSet(ev, EVIDENCE_FIELDS, "evidence");
  const sessions = ev.get("sessions");
  const matched = ev.get("matched");
  if (!isUint(sessions, 1000000)) fail("schema", "evidence.sessions out of limits");
  if (!isUint(matched, 1000000) || matched > sessions) fail("schema", "evidence.matched out of limits or over sessions");
  const window = ev.get("window");
  if (!isUint(window, 31622400) || window < 1n) fail("schema", "evidence.window out of limits");
  return matched;
}

// step 5 for version 2 (PROTOCOL.md "Lesson, version 2" and "Attestation, version 2")
function checkRecordV2(rec, type) {
  if (type === "lesson") {
    checkText("text", rec.get("text"), 1, 512);
    if (rec.get("kind") !== "error") fail("schema", "a version 2 lesson's kind is error");
    const claim = rec.get("claim");
    if (!(claim instanceof CborMap)) fail("schema", "claim is not a map");
    for (const k of claim.keys()) if (!CLAIM_PARTS.includes(k)) fail("schema", `unknown claim part ${JSON.stringify(k)}`);
    for (const k of ["situation", "failure"]) if (!claim.has(k)) fail("schema", `a claim has a ${k}`);
    for (const [k, v] of claim.entries) checkText(`claim.${k}`, v, 0, 512);
    if (!isUint(rec.get("strength"), 1000000)) fail("schema", "strength is not an integer in 0..1000000");
    if (!isBytes(rec.get("provenance"), 32)) fail("schema", "provenance is not 32 bytes");
    const parents = rec.get("derived_from");
    if (!Array.isArray(parents) || parents.length > 16) fail("schema", "derived_from is not an array of 0 to 16 ids");
    parents.forEach((p, i) => {
      if (!isRecordId(p)) fail("schema", "a derived_from entry is not a record id");
      if (i > 0 && compareBytes(parents[i - 1], p) >= 0) fail("schema", "derived_from is not strictly ascending");
    });
  } else {
    if (!isRecordId(rec.get("lesson_id"))) fail("schema", "lesson_id is not a record id");
    const failure = rec.get("failure");
    const fix = rec.get("fix");
    if (!PART_VERDICTS.includes(failure) || !PART_VERDICTS.includes(fix)) fail("schema", "a part verdict is unknown");
    if (typeof rec.get("exposed") !== "boolean") fail("schema", "exposed is not a boolean");
    if (typeof rec.get("met_before") !== "boolean") fail("schema", "met_before is not a boolean");
    const matched = checkEvidence(rec.get("evidence"));
    if (failure === "untested" && fix === "untested") fail("schema", "both parts untested");
    if (fix === "confirmed" && failure !== "confirmed") fail("schema", "a fix confirmed without its failure confirmed");
    if ((failure === "confirmed" || fix === "confirmed") && matched < 1n) fail("schema", "a part confirmed with matched 0");
  }
}

const recordId = (bytes) => Buffer.concat([Buffer.from([0x12, 0x20]), sha256(bytes)]);
const signingMessage = (rec) =>
  Buffer.concat([domainOf(rec.get("type"), rec.get("version")), cborEncode(rec.without("signature"))]);

// decode = steps 1 to 5
function decodeRecord(bytes) {
  if (bytes.length === 0 || bytes.length > MAX_RECORD) fail("size", `${bytes.length} bytes`);
  const rec = cborDecode(bytes);
  // belt and braces: the decoder enforces every determinism rule, so this must hold
  if (!cborEncode(rec).equals(bytes)) fail("encoding", "not the deterministic encoding of what it decodes to");
  checkRecord(rec);
  return rec;
}

// validate = steps 1 to 9
function validateRecord(bytes, { now, maxSkew, expectId = null }) {
  const rec = decodeRecord(bytes);
  const id = recordId(bytes);
  if (expectId !== null && !id.equals(expectId)) fail("id", `record ${hex(id)} is not ${hex(expectId)}`);
  const created = rec.get("created");
  if (created > BigInt(now) + BigInt(maxSkew)) fail("clock-skew", `created ${created - BigInt(now)} s after now`);
  const type = rec.get("type");
  if (type === "lesson" && rec.get("version") === 2n) {
    // step 8 for a version 2 lesson: the claim rules, then the text is the rendering
    const claim = claimOf(rec.get("claim"));
    const broken = claimError(claim);
    if (broken) fail(broken[0], `claim.${broken[1]}`);
    if (renderClaim(claim) !== rec.get("text")) fail("claim", "the text is not the rendering of the claim");
  }
  const texts = rec.get("version") === 2n ? [] : type === "lesson" ? [rec.get("text")] : type === "revocation" ? [rec.get("reason")] : [];
  for (const t of texts) {
    if (t === "") continue;
    const v = observationViolation(t);
    if (v) fail("observation", `${v.rule}: ${JSON.stringify(v.matched)}`);
  }
  const message = signingMessage(rec);
  if (!ed25519VerifyStrict(rec.get("signer"), message, rec.get("signature"))) fail("signature", "the signature does not verify");
  return { rec, id, message };
}

// ----------------------------------------------------------------------------------------
// Ed25519, strict (PROTOCOL.md "Signatures"): node:crypto does the cofactorless equation;
// the checks libsodium adds (S < L, canonical key, no small-order key or R) are done here.

const P = 2n ** 255n - 19n;
const L = 2n ** 252n + 27742317777372353535851937790883648493n;
const mod = (a, m = P) => ((a % m) + m) % m;
const powmod = (b, e, m = P) => {
  let r = 1n;
  b = mod(b, m);
  while (e > 0n) {
    if (e & 1n) r = (r * b) % m;
    b = (b * b) % m;
    e >>= 1n;
  }
  return r;
};
const inv = (a) => powmod(a, P - 2n);
const D = mod(-121665n * inv(121666n));
const SQRT_M1 = powmod(2n, (P - 1n) / 4n);
const leInt = (b) => {
  let n = 0n;
  for (let i = b.length - 1; i >= 0; i--) n = (n << 8n) | BigInt(b[i]);
  return n;
};
const leBytes = (n, len) => {
  const out = Buffer.alloc(len);
  for (let i = 0; i < len; i++) {
    out[i] = Number(n & 0xffn);
    n >>= 8n;
  }
  return out;
};

// RFC 8032 5.1.3 decoding; null when the bytes are not the canonical encoding of a point
function decodePoint(bytes) {
  const n = leInt(bytes);
  const y = n & ((1n << 255n) - 1n);
  const sign = n >> 255n;
  if (y >= P) return null;
  const u = mod(y * y - 1n);
  const v = mod(D * y * y + 1n);
  let x = mod(u * powmod(v, 3n) * powmod(u * powmod(v, 7n), (P - 5n) / 8n));
  const vx2 = mod(v * x * x);
  if (vx2 === mod(-u)) x = mod(x * SQRT_M1);
  else if (vx2 !== u) return null;
  if (x === 0n && sign === 1n) return null;
  if ((x & 1n) !== sign) x = P - x;
  return [x, y, 1n, mod(x * y)];
}

function pointDouble([X, Y, Z, T]) {
  // extended coordinates, a = -1
  const A = mod(X * X);
  const B = mod(Y * Y);
  const C = mod(2n * Z * Z);
  const Dd = mod(-A);
  const E = mod((X + Y) * (X + Y) - A - B);
  const G = mod(Dd + B);
  const F = mod(G - C);
  const H = mod(Dd - B);
  return [mod(E * F), mod(G * H), mod(F * G), mod(E * H)];
}

function hasSmallOrder(point) {
  let q = point;
  for (let i = 0; i < 3; i++) q = pointDouble(q);
  return q[0] === 0n && q[1] === q[2]; // [8]P is the identity
}

const SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
const PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

function ed25519VerifyStrict(publicKey, message, signature) {
  if (publicKey.length !== 32 || signature.length !== 64) return false;
  if (leInt(signature.subarray(32)) >= L) return false; // S < L
  const A = decodePoint(publicKey);
  if (A === null || hasSmallOrder(A)) return false; // canonical, not of small order
  const R = decodePoint(signature.subarray(0, 32));
  if (R !== null && hasSmallOrder(R)) return false; // a non-canonical R can never equal [S]B - [k]A's encoding
  try {
    const key = crypto.createPublicKey({ key: Buffer.concat([SPKI_PREFIX, publicKey]), format: "der", type: "spki" });
    return crypto.verify(null, message, key, signature);
  } catch {
    return false;
  }
}

function ed25519FromSeed(seed) {
  const key = crypto.createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, seed]), format: "der", type: "pkcs8" });
  const jwk = crypto.createPublicKey(key).export({ format: "jwk" });
  return { key, publicKey: Buffer.from(jwk.x, "base64url") };
}

// ----------------------------------------------------------------------------------------
// The observation rule (PROTOCOL.md "The observation rule")

// Python's re, for str patterns: \s is str.isspace() (the 25 White_Space code points and
// U+001C..U+001F), \w is str.isalnum() or "_" (exactly the categories L* and N*, and "_"),
// \d is category Nd, \b a boundary between \w and not \w. JavaScript's own \s, \w, \d and \b
// differ (\w, \d, \b are ASCII there), so the patterns are translated.
const PY_SPACE = String.raw`\t\n\v\f\r\x1c-\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000`;
const PY_WORD = String.raw`\p{L}\p{N}_`;
function pyRegex(pattern, flags = "u") {
  let out = "";
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "\\") {
      const e = pattern[++i];
      const cls = { s: PY_SPACE, w: PY_WORD, d: String.raw`\p{Nd}` }[e];
      if (cls) out += inClass ? cls : `[${cls}]`;
      else if (e === "b" && !inClass) out += `(?:(?<=[${PY_WORD}])(?![${PY_WORD}])|(?<![${PY_WORD}])(?=[${PY_WORD}]))`;
      else out += "\\" + e;
      continue;
    }
    if (c === "[" && !inClass) inClass = true;
    else if (c === "]" && inClass) inClass = false;
    out += c;
  }
  return new RegExp(out, flags);
}

// Python's re.IGNORECASE on str: a text character matches a pattern character when their simple
// lowercase mappings are equal, or they are one of re's extra equivalences (i and U+0131, s and
// U+017F, ...). The patterns are ASCII, so folding the text, code point by code point (lengths
// kept), to the simple lowercase, with U+0131 to i and U+017F to s, and matching the lower-case
// pattern case-sensitively is the same thing.
function pyIgnoreCaseFold(text) {
  let out = "";
  for (const ch of text) {
    const cp = ch.codePointAt(0);
    if (cp === 0x131) out += "i";
    else if (cp === 0x17f) out += "s";
    else if (cp === 0x130) out += "i"; // simple lowercase of U+0130 (the full one is "i\u0307")
    else {
      const low = ch.toLowerCase();
      out += [...low].length === 1 ? low : ch;
    }
  }
  return out;
}

// The rule's tables, from spec/observation/ (PROTOCOL.md lists them and says how each is made).
const TABLES = path.join(HERE, "..", "observation");
const tableLines = (name) =>
  fs
    .readFileSync(path.join(TABLES, name), "utf8")
    .split("\n")
    .filter((l) => l.trim() && !l.trim().startsWith("#"));
const tableRanges = (name) => parseRanges(tableLines(name).join(" "));
const inRanges = (ranges) => {
  const set = new Set();
  for (const [a, b] of ranges) for (let cp = a; cp <= b; cp++) set.add(cp);
  return set;
};
const IGNORABLE = inRanges(tableRanges("ignorable.txt"));
const MARKS = inRanges(tableRanges("marks.txt"));
const OTHER_SCRIPT = inRanges(tableRanges("other-script-letters.txt"));
const CONFUSABLES = new Map(
  tableLines("confusables-ascii.txt").map((l) => {
    const [src, dst] = l.split(";");
    return [parseInt(src, 16), dst.trim().split(/\s+/).map((h) => String.fromCodePoint(parseInt(h, 16))).join("")];
  }),
);
const VERBS = new Map(tableLines("verbs.txt").map((l) => l.trim().split(/\s+/)));
const PAST_BASES = new Map(tableLines("past-forms.txt").map((l) => l.trim().split(/\s+/)));
const PAST_FORMS = new Set(PAST_BASES.keys());
const ENGLISH = new Set(tableLines("english-words.txt").map((l) => l.trim()));
const FUNCTION_SECTIONS = {};
{
  let section = "";
  for (const line of tableLines("function-words.txt")) {
    const m = line.trim().match(/^\[(.*)\]$/);
    if (m) section = m[1];
    else {
      FUNCTION_SECTIONS[section] ||= new Set();
      for (const w of line.trim().split(/\s+/)) FUNCTION_SECTIONS[section].add(w);
    }
  }
}
const OBJECT_WORDS = FUNCTION_SECTIONS.object;
const FUNCTION_WORDS = new Set(Object.values(FUNCTION_SECTIONS).flatMap((set) => [...set]));

// The lists of PROTOCOL.md "The observation rule", copied here (checked against it at run time).
const ADDRESSED_PATTERNS_TEXT = String.raw`\b(?:ignore|disregard|forget|override|overrule|bypass|circumvent) (?:(?:all|any|the|your|these|those|every|my|of|previous|prior|above|earlier|preceding|following|other|original|existing|safety|system) )*(?:instructions?|prompts?|messages?|rules?|directions?|guidelines?|guardrails?|constraints?|restrictions?|filters?|polic(?:y|ies)|programming|training|context)\b
\b(?:ignore|disregard|forget) (?:(?:all|the|everything) )?(?:above|previous|prior|everything|that|rest|remainder)\b
\byou(?:'ll|'d|'re)\b
\b(?:you|u|ye) (?:(?:really|now|always|also|just|then|still|first|never|only) )*(?:must|should|shall|will|would|can|could|may|might|need|needs|have to|has to|ought|better|had better|gotta|are to|are required|are expected|are supposed|are allowed|are not allowed|are permitted|are now|are an?|are the|are my|are our|are no longer|are going to|are about to|are in|are playing|are called|are named|are free|are more|are less|are capable|are able|are unable|cannot|can't|won't|wont|mustn't|shouldn't)\b
\b(?:can|could|would|will|should|must|may|might|shall) you\b
\b(?:i|we) (?:[a-z]+ )?(?:need|want|would like|'d like|expect|require|order|command|instruct|ask|advise|urge|beg|invite|encourage|recommend) you to\b
\byour (?:training|programming|guidelines|instructions|rules|creators?|developers?|system prompt|prompts?|responses?|answers?|outputs?|replies|knowledge|purpose|task|goal|job|role|persona|character|name|identity|capabilities|limitations|restrictions|function|abilities|mission)\b
\b(?:agents?|assistants?|models?|llms?|ais?|bots?|chatbots?|claude|gpt|chatgpt|copilot|codex|gemini) (?:(?:really|now|always|also|just|then|still|first|never|only|from now on) )*(?:must|should|shall|will|can|cannot|can't|may|need|needs|has to|have to|ought|is to|are to|is required|are required|is expected|are expected|is supposed|are supposed|is allowed|are allowed|is permitted|are permitted|is not allowed|are not allowed|is free to|are free to|won't|wont)\b
\b(?:chatgpt|gpt|claude|copilot|gemini|the (?:ai|assistant|model|bot|chatbot))(?:'s)? now\b
<\|[a-z_ ]{1,40}\|>
</?(?:system|instructions?|assistant|user|human|developer|prompt|im_start|im_end|system-reminder|tool|function|context|admin)\b
\[/?(?:inst|sys|system|user|assistant|human|developer)\]
<</?sys>>
(?:^|[.!?;>"'(\[#|] ?)(?:system|assistant|user|human|developer|instructions?|prompt|admin|administrator|operator|ai|bot|model|dan|chatgpt|gpt|claude) ?:
\badmin(?:istrator)? (?:request|override|mode|note|message|instruction|command|access)\b
\b(?:please|pls|plz|kindly)\b
\b(?:from now on|from here on|going forward|henceforth|hereafter|from this (?:point|moment) on)\b
\b(?:new|updated|additional|revised|secret|hidden|real|true|actual|override|special) (?:rules?|instructions?|directives?|guidelines?|polic(?:y|ies)|orders?|task|prompt)\b
\b(?:system|developer|hidden|initial|original) (?:prompt|message|instructions?)\b
\bas an? (?:ai|assistant|language model|llm|chatbot)\b
\b(?:an?|the) (?:ai|large) language models?\b|\bartificial intelligence\b
\bact (?:as|like)\b
\b(?:let us|lets|let's) (?:act|play|pretend|imagine|roleplay)\b
\b(?:we|i) (?:are|am|'re|'m) going to\b
\bpretend (?:to be|that|you)\b
\brole-?play(?:s|ed|ing)?\b
\bdo not (?:tell|reveal|mention|disclose)\b
\b(?:jailbreak|jailbroken|developer[ _\\-]*mode|do anything now|dan mode|god mode|system override)\b
\b(?:amoral|unfiltered|uncensored|unethical|immoral|ethicality|legality|morality|morals)\b
\b(?:an?|the) (?:[a-z-]+ ){0,3}(?:ai|chatbot|assistant|bot|language model|character|persona|entity|being|demon|gpt)(?: [a-z-]+){0,2} (?:named|called|known as)\b
\b(?:is|was) an? (?:[a-z-]+ ){0,3}(?:ai|chatbot|language model|assistant)\b
\b(?:in|stays?|staying|breaks?|breaking|out of) character\b|\bpersona\b|\bcharacter (?:name|age|description|sheet|traits)\b
\bnever (?:refuses?|refusing|refused|declines?|denies|deny)\b|\banswers? any\b
\bconversation (?:with|between) (?:an? |the )?(?:ai|assistant|chatbot|user|human)\b`;
const OBLIGATION_PATTERNS_TEXT = String.raw`\b(?:must|mustn't|mustnt|should|shouldn't|shouldnt|shall|shan't|ought|oughtn't)\b
\b(?:have|has|having)(?: got)? to\b
\b(?:needs?|gotta) to\b|\bgotta\b
\b(?:is|are|be|am|being) (?:(?:not|also|always|never|now|still|strictly|absolutely) )?(?:required|expected|supposed|obliged|obligated|meant|advised|encouraged|urged|instructed|told|asked|ordered|forbidden|prohibited|allowed|permitted) to\b
\b(?:is|are|be) (?:(?:not|also|always|strictly|absolutely) )?(?:required|mandatory|compulsory|obligatory|necessary|essential|recommended|advised|advisable|preferred|discouraged|forbidden|prohibited|not allowed|not permitted)\b
\b(?:it|this|that)(?:'s| is| was) (?:(?:very|really|always|also|absolutely|extremely) )?(?:required|mandatory|compulsory|obligatory|necessary|essential|important|crucial|critical|vital|imperative|advisable|recommended|best|better|wise|preferable|a must|key)\b
\b(?:mandatory|compulsory|obligatory)\b|\brequired (?:that|to)\b
\b(?:is|are) to be\b|\b(?:is|are) (?:not )?to (?:always|never|only)\b
\b(?:make|be) (?:sure|certain)\b
\bhad better\b
\b(?:fix|solution|answer|workaround|way|trick|remedy|rule) is to\b
\b(?:it|this|that)(?:'s| is) (?:(?:also|always|generally|usually|very|really|considered|thought|seen as|regarded as) )*(?:expected|assumed|understood|customary|conventional|standard|usual|normal|common|good|best|better|advisable|desirable|preferable|wise|sensible|safer|safest|smart|prudent|polite|recommended|preferred|good practice|best practice|standard practice|common practice|the norm|the convention|the rule|house style|policy) (?:here |in this (?:repo|repository|project|codebase) )?(?:that|to|for)\b
\b(?:convention|norm|practice|policy|custom|habit|routine|procedure|expectation|house style)(?: [a-z']+){0,5}? (?:is|was) (?:to|that)\b
\bwhat (?:(?:finally|eventually|actually|really|ultimately|then|always) )?(?:worked|works|helped|helps|fixed|fixes|solved|solves|resolved|resolves|did the trick|does the trick|got it working|gets it working|made it work|makes it work)\b
(?<!'s )(?<!their )(?<!his )(?<!her )\b(?:fix|fixes|solution|answer|workaround|remedy|trick|cure|approach|way|key|thing|step|move|option|method|idea|plan)(?: [a-z']+){0,4}? (?:is|was|are|were|seems|seemed|turned out|proved|ended up|remains)(?: to be)? (?:(?:simply|just|always|usually|then|finally) )?(?:to (?!(?:the|a|an|this|that|its|their|our|my) )[a-z]+|by [a-z]+ing)\b
\b(?:fix|solution|answer|workaround|remedy|trick|cure|approach|way|thing|step|change|command|option|method) (?:that|which) (?:(?:finally|eventually|actually|really|then|always) )?(?:worked|works|helped|helps|fixed it|fixes it|solved it|solves it|did it|does it|succeeded|succeeds)\b
\b(?:is|are) (?:the|a|one) (?:(?:only|best|right|correct|proper|quickest|fastest|easiest|simplest|usual|standard|recommended|preferred|real|reliable|safe|safest|surest|one) )*(?:way|fix|solution|answer|workaround|approach|method|cure|remedy|trick|route|path|option|key)s? (?:to|for|around|past|of)\b
\b(?:is|are) how (?:to\b|(?:[a-z'-]+ ){1,3}(?:is|are|gets?) [a-z]+)
\b(?:sessions?|runs?|attempts?|agents?|builds?|commits?|pushes|tries|teams?|users?|developers?) (?:that|which|who|where|with|using|without|under)\b(?: [a-z0-9'-]+){1,8}? (?:finished|went|were|was|ran|completed|succeeded|passed|had|took|got|ended|did|worked)(?: [a-z0-9-]+){0,4}? (?:sooner|faster|quicker|better|earlier|easier|smoother|cheaper|shorter|fewer|less|more often|more reliably|more quickly|more smoothly|more successfully|half the time|in half)\b
(?:(?<![a-z0-9-])(?:sudo|doas|--no-verify|--insecure|--no-check-certificate|sslverify(?: |=)false|strict-ssl(?: |=)false|node_tls_reject_unauthorized=0)(?![a-z0-9-])|chmod (?:-r )?0?777)[^.;!?]{0,80}\b(?:succeeded|succeeds|passed|passes|worked|works|went through|goes through|fixed|fixes|resolved|resolves|solved|helped|helps|disappeared|went away|goes away|cleared|got past|gets past|got through)\b|\b(?:succeeded|succeeds|passed|passes|worked|works|went through|goes through|fixed|fixes|resolved|resolves|solved|helped|helps|disappeared|went away|goes away|cleared|got past|gets past|got through|stopped)\b[^.;!?]{0,80}(?:(?<![a-z0-9-])(?:sudo|doas|--no-verify|--insecure|--no-check-certificate|sslverify(?: |=)false|strict-ssl(?: |=)false|node_tls_reject_unauthorized=0)(?![a-z0-9-])|chmod (?:-r )?0?777)`;
const REPORTING_VERBS_TEXT = `advised advises asked asks begged begs demanded demands insisted insists instructed instructs
ordered orders reminded reminds said says tells told urged urges warned warns`;
const SKIPPED_OPENERS_TEXT = `absolutely actually afterwards again agent ai also always and assistant automatically basically
bot but carefully chatgpt claude codex consistently constantly continually copilot correctly dan
definitely directly ever explicitly finally first firstly forever gemini generally gently gpt
hello hence henceforth hereafter hey hi honestly ideally immediately instead just kindly later
literally manually maybe merely model mostly never next normally now oh ok okay once only or
otherwise perhaps please pls plz politely preferably primarily promptly properly quickly quietly
rather really regularly safely seriously silently simply so sometimes still strictly then
therefore thoroughly thus truly typically usually yes yet`;
const SKIPPED_PHRASES_TEXT = `in future
in the future
next time
each time
every time
at all times
by default
if needed
if necessary
if possible
as usual
as always
as a rule
for safety
to be safe
in general
of course
for now
right away
once again
no matter what
in all cases
without exception
whenever possible
for good
by all means`;
const LABELS_TEXT = `answer attention caution comment context debug error errors example fatal fix fyi hint hints
important info item lesson lessons nb note notes notice observation observations output part ps
reason remark remarks reminder result results rule solution step summary tip tips tldr todo
update warning warnings`;
const PREDICATE_WORDS_TEXT = `am are aren't can can't cannot could couldn't did didn't does doesn't had hadn't has hasn't have
haven't is isn't may might not was wasn't were weren't will won't would wouldn't`;
const NAMES_TEXT = `Open Memory
Merge conflict
Merge conflicts
merge conflict
merge conflicts`;
const STOP_WORDS_TEXT = `after although as because before but if lest once since so that then though till unless until
when whenever where whereas wherever whether which while whilst who whom whose yet`;
const HABIT_SUBJECTS_SINGULAR_TEXT = `agent assistant bot claude codex copilot gemini model session`;
const HABIT_SUBJECTS_PLURAL_TEXT = `agents assistants bots models sessions`;
const HABIT_ADVERBS_TEXT = `again also always automatically first generally here instead just never normally now often routinely
simply sometimes then typically usually`;
const HABIT_UNDERGOING_TEXT = `abort appear break close consume crash die end error exceed exit expire fail finish freeze get hang
hit keep last leak loop lose need outlive overflow panic reach receive see seem stall start stop
time timeout wait want`;
const ACTION_PARTICIPLES_TEXT = `added amended applied bypassed commented committed deactivated deleted disabled downgraded dropped
edited executed exported force-pushed forced ignored installed invoked muted overridden passed
patched pinned piped purged pushed re-run rebased recreated regenerated reinstalled removed rerun
restarted retried reverted run silenced skipped sourced stashed suppressed switched uninstalled
unset used wiped`;
const VERBS_WITH_OF_TEXT = `accuse approve assure avail beware boast clear complain conceive consist convince deprive despair
die disapprove dispose dream hear inform know learn partake reek relieve remind repent rid rob smell
speak taste tell think tire warn weary`;
const MARKUP_PATTERNS_TEXT = String.raw`!?\[[^\[\]]{0,200}\]\((?:[a-z][a-z0-9+.-]*:|//|www\.)[^() ]{0,300}\)
<(?:https?|ftp|file|data|javascript|vbscript):[^<> ]*>
\b(?:https?|ftp)://[^ \"'<>()]*\.(?:sh|bash|zsh|ps1|psm1|bat|cmd|exe|msi|vbs|scr|pl|rb|py|js|mjs)(?![a-z0-9_-])`;
const TAG_PATTERNS_TEXT = String.raw`</?(?:a|audio|base|body|button|embed|form|frame|frameset|head|html|iframe|img|input|link|marquee|meta|noscript|object|script|source|style|svg|textarea|video)(?=[ />])[^<>]{0,300}>
<[a-z][a-z0-9:_-]*(?: [^<>]{0,200}?)? (?:on[a-z]+|style|href|src|srcdoc|action|formaction|xlink:href) ?=[^<>]{0,300}>`;
const ENCODED_PATTERN_TEXT = String.raw`(?<![A-Za-z0-9+/=_.-])(?=[A-Za-z0-9+/]*[A-Z])(?=[A-Za-z0-9+/]*[a-z])(?=[A-Za-z0-9+/]*[0-9])(?:[A-Za-z0-9+/]{12,}={1,2}|[A-Za-z0-9+]{32,})(?![A-Za-z0-9+/=_-])`;
const wordSet = (text) => new Set(text.trim().split(/\s+/));
const ADDRESSED_PATTERNS = ADDRESSED_PATTERNS_TEXT.trim().split("\n");
const OBLIGATION_PATTERNS = OBLIGATION_PATTERNS_TEXT.trim().split("\n");
const REPORTING_VERBS = REPORTING_VERBS_TEXT.trim().split(/\s+/);
const SKIPPED_OPENERS = wordSet(SKIPPED_OPENERS_TEXT);
const SKIPPED_PHRASES = SKIPPED_PHRASES_TEXT.trim().split("\n").map((l) => l.trim().split(" "));
const LABELS = wordSet(LABELS_TEXT);
const PREDICATE_WORDS = wordSet(PREDICATE_WORDS_TEXT);
const STOP_WORDS = wordSet(STOP_WORDS_TEXT);
const NAMES = NAMES_TEXT.trim().split("\n").map((l) => l.trim().split(" "));
const CLAUSE_WORDS = new Set(["then", "so", "but", "otherwise", "else", "whereas"]);
const RULES = ["addressed-to-agent", "obligation", "markup", "imperative-opening", "other-script", "not-english"];

// Patterns are ASCII, over the lowered text; \b is ASCII (JavaScript's own, without the u flag).
const ADDRESSED_REGEXES = ADDRESSED_PATTERNS.map((p) => new RegExp(p));
const OBLIGATION_REGEXES = OBLIGATION_PATTERNS.map((p) => new RegExp(p));
const REPORTED_REGEX = new RegExp(
  String.raw`\b(?:${REPORTING_VERBS.join("|")})(?: [a-z']+){0,3}? to (?:(?:always|never|not|only|just|also|now|first) )*([a-z]+)\b`,
  "g",
);

// Habits and prescribed actions (obligation), markup
const HABIT_SUBJECTS_SINGULAR = wordSet(HABIT_SUBJECTS_SINGULAR_TEXT);
const HABIT_SUBJECTS_PLURAL = wordSet(HABIT_SUBJECTS_PLURAL_TEXT);
const HABIT_ADVERBS = wordSet(HABIT_ADVERBS_TEXT);
const HABIT_UNDERGOING = wordSet(HABIT_UNDERGOING_TEXT);
const ACTION_PARTICIPLES = wordSet(ACTION_PARTICIPLES_TEXT);
const VERBS_WITH_OF = wordSet(VERBS_WITH_OF_TEXT);
const HABIT_REGEX = new RegExp(
  String.raw`(?<![a-z0-9_'-])(${[...HABIT_SUBJECTS_SINGULAR, ...HABIT_SUBJECTS_PLURAL].sort().join("|")})((?: (?:${
    [...HABIT_ADVERBS].sort().join("|")}))*) ([a-z]+)\b`, "g");
const CONDITION_REGEX = new RegExp(
  String.raw`\b(?:when|whenever|if|once|each time|every time|any time)\b[^.;:!?,]{1,160}?, (?:[^.;:!?,]{0,80}? )?` +
  String.raw`(?:is|are|gets?) (?:(?:then|also|just|always|usually|simply|immediately|automatically|first) )*` +
  String.raw`([a-z]+(?:-[a-z]+)?)\b`, "g");
const MARKUP_PATTERNS = MARKUP_PATTERNS_TEXT.trim().split("\n");
const TAG_PATTERNS = TAG_PATTERNS_TEXT.trim().split("\n");
const MARKUP_REGEXES = MARKUP_PATTERNS.map((p) => new RegExp(p));
const TAG_REGEXES = TAG_PATTERNS.map((p) => new RegExp(p));
const ENCODED_REGEX = new RegExp(ENCODED_PATTERN_TEXT);
const UNQUOTED = /`+[^`]*`+|"[^"]*"/g;

function sFormBase(w) {
  if (w.length < 3 || !w.endsWith("s") || w.endsWith("ss")) return null;
  if (w.endsWith("ies") && VERBS.has(w.slice(0, -3) + "y")) return w.slice(0, -3) + "y";
  if (VERBS.has(w.slice(0, -1))) return w.slice(0, -1);
  if (w.endsWith("es") && VERBS.has(w.slice(0, -2))) return w.slice(0, -2);
  return null;
}

function prescription(L) {
  for (const m of L.matchAll(HABIT_REGEX)) {
    const [, subject, , w] = m;
    const base = HABIT_SUBJECTS_SINGULAR.has(subject) ? sFormBase(w) : VERBS.has(w) ? w : null;
    if (base !== null && !HABIT_UNDERGOING.has(base) && !FUNCTION_WORDS.has(w) && !SKIPPED_OPENERS.has(w) &&
        !PREDICATE_WORDS.has(w))
      return { rule: "obligation", matched: m[0] };
  }
  for (const m of L.matchAll(CONDITION_REGEX)) if (ACTION_PARTICIPLES.has(m[1])) return { rule: "obligation", matched: m[0] };
  return null;
}

function markup(L, C) {
  for (const re of MARKUP_REGEXES) {
    const m = re.exec(L);
    if (m) return { rule: "markup", matched: m[0] };
  }
  if (C.includes("<")) {
    const outside = lowered(C.replace(UNQUOTED, " "));
    for (const re of TAG_REGEXES) {
      const m = re.exec(outside);
      if (m) return { rule: "markup", matched: m[0] };
    }
  }
  const m = ENCODED_REGEX.exec(C);
  return m ? { rule: "markup", matched: "an encoded blob: " + m[0].slice(0, 40) } : null;
}

// the name of a program prefixing its message: "make: *** No rule" (not "Run: rm -rf /")
function programPrefix(cls, at, C) {
  const { tokens, quoted } = cls[at];
  if (at !== 0 || cls.length < 2 || quoted || tokens.length !== 1 || tokens[0].kind !== "word") return false;
  const w = tokens[0].text;
  return w === tokens[0].low && C.replace(/^ +/, "").startsWith(w + ":");
}

// a value named by the clause before it: "declared and not used: err" (not after a label: "Fix: revert")
function namedValue(cls, at, C) {
  const { tokens, quoted } = cls[at];
  if (at !== 1 || cls.length !== 2 || quoted || tokens.length !== 1 || tokens[0].kind !== "word") return false;
  const before = cls[0].tokens;
  if (!before.length || (before[0].kind === "word" && LABELS.has(before[0].low))) return false;
  const end = C.replace(/[ .\n]+$/, "");
  const w = tokens[0].text;
  return end.endsWith(w) && /:$/.test(end.slice(0, -w.length).replace(/ +$/, ""));
}

// \s of the rule: the 25 White_Space code points and U+001C..U+001F
const RULE_SPACE = new Set([...WHITE_SPACE, 0x1c, 0x1d, 0x1e, 0x1f]);
const LINE_BREAKS = new Set([0x0a, 0x0b, 0x0c, 0x0d, 0x85, 0x1c, 0x1d, 0x1e]);
const asciiLower = (s) => s.replace(/[A-Z]/g, (c) => c.toLowerCase());
const QUOTE_MARKS = new Set([0x201c, 0x201d, 0x201e, 0x201f, 0xab, 0xbb, 0x2039, 0x203a]);

// look-alike words: a run of [a-z0-9] with a letter and a digit, digits 0 1 3 4 5 7 read o i e a s t
const LOOK_ALIKE_WORD = /(?<![a-z0-9_])(?=[a-z0-9]*[a-z])(?=[a-z0-9]*[0-9])[a-z0-9]+(?![a-z0-9_])/g;
const LEET = { 0: "o", 1: "i", 3: "e", 4: "a", 5: "s", 7: "t" };
const unLeet = (w) => w.replace(/[013457]/g, (d) => LEET[d]);

// Step 1: F (folded) and C (canonical)
function ruleForms(text) {
  let t = maskUnassigned(text).normalize("NFKC");
  t = [...t].filter((ch) => !IGNORABLE.has(ch.codePointAt(0))).join("");
  t = [...t.normalize("NFD")].filter((ch) => !MARKS.has(ch.codePointAt(0))).join("");
  const F = t;
  const C = [...F]
    .map((ch) => {
      const cp = ch.codePointAt(0);
      if (QUOTE_MARKS.has(cp)) return '"';
      return CONFUSABLES.has(cp) ? CONFUSABLES.get(cp) : ch;
    })
    .join("");
  return { F, C };
}

// white space of the rule: line breaks to \n, the rest to a space (step 3's prose, step 4's F)
const spaceOut = (s) =>
  [...s].map((ch) => { const cp = ch.codePointAt(0); return LINE_BREAKS.has(cp) ? "\n" : RULE_SPACE.has(cp) ? " " : ch; }).join("");

function lowered(C) {
  const words = [];
  let cur = "";
  for (const ch of C.replace(/`/g, " ")) {
    if (RULE_SPACE.has(ch.codePointAt(0))) {
      if (cur) words.push(cur);
      cur = "";
    } else cur += ch;
  }
  if (cur) words.push(cur);
  return asciiLower(words.join(" "));
}

// Step 3: the prose, cut into clauses of tokens
const CODE_SPAN = /`+[^`]*`+/g;
const LINK = /!?\[([^\[\]]{0,200})\]\([^() \n]{0,300}\)/g;
const MARKUP = /<!--|-->|<\|[^|<>]{0,40}\|>|<\/?[A-Za-z][A-Za-z0-9:_-]*(?:[ \n][^<>]{0,200})?\/?>|[*~]+|(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])/g;

function prose(C) {
  const text = spaceOut(C);
  let out = "";
  let last = 0;
  const clean = (s) => s.replace(LINK, " $1 ").replace(MARKUP, " ");
  for (const m of text.matchAll(CODE_SPAN)) {
    out += clean(text.slice(last, m.index)) + m[0];
    last = m.index + m[0].length;
  }
  return out + clean(text.slice(last));
}

const isLetter = (c) => (c >= "a" && c <= "z") || (c >= "A" && c <= "Z");
function tokenKind(t) {
  if (/^[A-Za-z]+(?:'[A-Za-z]+)?$/.test(t)) return "word";
  if (!/[A-Za-z0-9]/.test(t)) return "symbol";
  if (/^[0-9][0-9.,]*$/.test(t)) return "number";
  if (t.includes("/") || "-~$.".includes(t[0])) return "target";
  return "other";
}

function clauses(C) {
  const p = prose(C);
  const out = [];
  const suspended = [];
  let current = [];
  const openQuotes = { '"': false, "'": false }; // each kind of quotation mark alternates on its own
  let word = "";
  const endClause = (asks = false) => {
    if (current.length) out.push({ tokens: current, quoted: suspended.length > 0, asks: asks && !suspended.length });
    current = [];
  };
  const flush = (call = false) => {
    if (!word) return;
    const kind = call ? "other" : tokenKind(word);
    if (kind === "word" && CLAUSE_WORDS.has(asciiLower(word))) endClause();
    else current.push({ kind, text: word, low: kind === "word" ? asciiLower(word) : word });
    word = "";
  };
  const isBreak = (c) => c === undefined || c === " " || c === "\n";
  let i = 0;
  while (i < p.length) {
    const ch = p[i];
    if (ch === "`") {
      const m = /^`+[^`]*`+/.exec(p.slice(i));
      flush();
      if (m) {
        current.push({ kind: "code", text: m[0], low: m[0] });
        i += m[0].length;
      } else i += 1; // a lone backtick separates tokens
      continue;
    }
    if (ch === " ") { flush(); i++; continue; }
    if (".!?;:".includes(ch)) {
      let j = i;
      while (j < p.length && ".!?;:".includes(p[j])) j++;
      if (j === p.length || ` \n"')]}`.includes(p[j])) { flush(); endClause(p.slice(i, j).includes("?")); i = j; continue; }
      word += p.slice(i, j); i = j; continue;
    }
    if (ch === "," || ch === "\n" || ch === "\u2014" || ch === "\u2015") { flush(); endClause(); i++; continue; }
    if (ch === "-" && isBreak(p[i - 1] === undefined ? undefined : p[i - 1]) && !word) {
      let j = i;
      while (p[j] === "-") j++;
      if (isBreak(p[j])) { flush(); endClause(); i = j; continue; }
    }
    const isQuote = ch === '"' || (ch === "'" && !(isLetter(p[i - 1] || "") && isLetter(p[i + 1] || "")));
    if (isQuote || "()[]{}".includes(ch)) {
      flush(ch === "("); // a word right before "(" is a call: expect(response)
      const opens = isQuote ? !openQuotes[ch] : "([{".includes(ch);
      if (isQuote) openQuotes[ch] = opens;
      if (opens) { suspended.push(current); current = []; }
      else {
        if (current.length) out.push({ tokens: current, quoted: true });
        current = suspended.length ? suspended.pop() : [];
      }
      i++;
      continue;
    }
    word += ch;
    i++;
  }
  flush();
  for (;;) {
    if (current.length) out.push({ tokens: current, quoted: suspended.length > 0 });
    if (!suspended.length) break;
    current = suspended.pop();
  }
  return out;
}

const isWord = (t) => t && t.kind === "word";
const isObject = (t) => t && ((t.kind === "word" && OBJECT_WORDS.has(t.low)) || t.kind === "code" || t.kind === "target");
const isContent = (t) =>
  (t && t.kind === "other" && /[A-Za-z]/.test(t.text)) ||
  (isWord(t) && !FUNCTION_WORDS.has(t.low) && !SKIPPED_OPENERS.has(t.low) && !t.low.endsWith("ly"));
function isPastForm(w) {
  if (PAST_FORMS.has(w)) return true;
  if (!w.endsWith("ed") || w.length < 4) return false;
  if (VERBS.has(w.slice(0, -2)) || VERBS.has(w.slice(0, -1))) return true;
  if (w.endsWith("ied") && VERBS.has(w.slice(0, -3) + "y")) return true;
  return w.length >= 5 && w[w.length - 3] === w[w.length - 4] && VERBS.has(w.slice(0, -3));
}
function isSFormOfVerbOnly(w) {
  if (!w.endsWith("s") || w.length < 3) return false;
  const bases = [w.slice(0, -1)];
  if (w.endsWith("es")) bases.push(w.slice(0, -2));
  if (w.endsWith("ies")) bases.push(w.slice(0, -3) + "y");
  return bases.some((b) => VERBS.get(b) === "o");
}
function hasPredicate(rest) {
  if (rest.length && isWord(rest[0]) && OBJECT_WORDS.has(rest[0].low)) return false;
  for (let j = 0; j < Math.min(6, rest.length); j++) {
    const t = rest[j];
    if (!isWord(t)) continue;
    if (STOP_WORDS.has(t.low)) return false;
    if (PREDICATE_WORDS.has(t.low) || isSFormOfVerbOnly(t.low)) return true;
    if (isPastForm(t.low) && !isContent(rest[j + 1])) return true;
  }
  return false;
}

function opener(tokens) {
  let i = 0;
  while (i < tokens.length) {
    let t = tokens[i];
    if (t.kind === "other" && /^[A-Za-z0-9]+$/.test(t.text) && /[A-Za-z]/.test(t.text) && /[0-9]/.test(t.text)) {
      t = tokens[i] = { kind: "word", text: t.text, low: unLeet(asciiLower(t.text)) }; // Alw4ys
    }
    if (t.kind === "symbol" || (t.kind === "number" && i === 0)) { i++; continue; }
    if (t.kind !== "word") return i;
    const w = t.low;
    if (SKIPPED_OPENERS.has(w) || (w.endsWith("ly") && w.length > 4 && !VERBS.has(w))) { i++; continue; }
    if (!VERBS.has(w) && !isEnglish(w)) { i++; continue; } // Sempre use ..., Dialyzer failed
    const phrase = SKIPPED_PHRASES.find((ph) => ph.every((x, k) => isWord(tokens[i + k]) && tokens[i + k].low === x));
    if (phrase) { i += phrase.length; continue; }
    if (w === "to" && isWord(tokens[i + 1]) && VERBS.has(tokens[i + 1].low)) {
      i += 2;
      if (isWord(tokens[i])) {
        if (["this", "it", "that", "these", "those"].includes(tokens[i].low)) i += 1;
        else if (["the", "a", "an", "your", "my", "our"].includes(tokens[i].low) && i + 1 < tokens.length) i += 2;
      }
      continue;
    }
    const after = tokens.slice(i + 1);
    if (LABELS.has(w) && after.length <= 1 && after.every((x) => x.kind === "number")) return tokens.length;
    return i;
  }
  return tokens.length;
}

function imperativeOf({ tokens, quoted }) {
  if (quoted && tokens.length === 1) return null;
  const i = opener(tokens);
  if (i >= tokens.length) return null;
  const t = tokens[i];
  if (NAMES.some((name) => name.every((x, k) => tokens[i + k] && tokens[i + k].text === x))) return null;
  let w;
  if (t.kind === "word") w = t.low;
  else if (t.kind === "other" && /^re-[a-z]+$/i.test(t.text)) w = asciiLower(t.text.slice(3));
  else return null;
  if (["do", "don't", "dont", "let's"].includes(w)) return w;
  const flag = VERBS.get(w);
  if (flag === undefined) return null;
  const rest = tokens.slice(i + 1);
  if (rest.length && rest.every((x) => x.kind === "number" || x.kind === "symbol")) return null;
  if (isWord(rest[0]) && rest[0].low === "of" && !VERBS_WITH_OF.has(w)) return null; // borrow of moved value
  if (PAST_BASES.has(w) && PAST_BASES.get(w) !== w) return null; // found `str` (find)
  if (flag === "n") {
    if (isWord(rest[0]) && OBJECT_WORDS.has(rest[0].low)) return w;
    if (rest.length && (rest[0].kind === "code" || rest[0].kind === "target")) return hasPredicate(rest) ? null : w;
    for (let j = 1; j < rest.length - 1; j++) {
      const x = rest[j];
      const next = rest[j + 1];
      if (isWord(x) && ["to", "into", "onto", "with"].includes(x.low) &&
          (["code", "target"].includes(next.kind) || (x.low === "to" && isWord(next) && VERBS.has(next.low))))
        return hasPredicate(rest) ? null : w;
    }
    return null;
  }
  return hasPredicate(rest) ? null : w;
}

// Step 4
// [ending, letters removed, letters added]
const SUFFIXES = [["s", 1, ""], ["es", 2, ""], ["ies", 3, "y"], ["ed", 2, ""], ["ed", 1, ""], ["ied", 3, "y"], ["ing", 3, ""],
  ["ing", 3, "e"], ["er", 2, ""], ["er", 1, ""], ["ier", 3, "y"], ["est", 3, ""], ["est", 2, ""], ["iest", 4, "y"], ["ly", 2, ""],
  ["ily", 3, "y"], ["ally", 4, ""], ["bly", 3, "ble"]];
function isEnglish(w) {
  if (ENGLISH.has(w)) return true;
  if (w.endsWith("'s") && ENGLISH.has(w.slice(0, -2))) return true;
  for (const [ending, cut, add] of SUFFIXES)
    if (w.endsWith(ending) && w.length - cut >= 2 && ENGLISH.has(w.slice(0, -cut) + add)) return true;
  for (const suffix of ["ed", "ing", "er", "est"]) {
    const stem = w.slice(0, -suffix.length);
    if (w.endsWith(suffix) && stem.length - 1 >= 2 && stem[stem.length - 1] === stem[stem.length - 2] && ENGLISH.has(stem.slice(0, -1)))
      return true;
  }
  return false;
}

function observationViolation(text) {
  const { F, C } = ruleForms(text);
  const L = lowered(C);
  // L, L without hyphen runs between letters, L with look-alike words rewritten
  const forms = [L, L.replace(/(?<=[a-z])-+(?=[a-z])/g, ""), L.replace(LOOK_ALIKE_WORD, unLeet)];
  for (const re of ADDRESSED_REGEXES)
    for (const form of forms) {
      const m = re.exec(form);
      if (m) return { rule: "addressed-to-agent", matched: m[0] };
    }
  for (const re of OBLIGATION_REGEXES)
    for (const form of forms) {
      const m = re.exec(form);
      if (m) return { rule: "obligation", matched: m[0] };
    }
  for (const m of L.matchAll(REPORTED_REGEX)) if (VERBS.has(m[1])) return { rule: "obligation", matched: m[0] };
  const prescribed = prescription(L);
  if (prescribed) return prescribed;
  const marked = markup(L, C);
  if (marked) return marked;
  const cls = clauses(C);
  for (let at = 0; at < cls.length; at++) {
    const clause = cls[at];
    if (clause.asks) return { rule: "addressed-to-agent", matched: "a question" };
    const w = imperativeOf(clause);
    if (w && !namedValue(cls, at, C) && !programPrefix(cls, at, C)) return { rule: "imperative-opening", matched: w };
  }
  // other-script: F without code spans and without runs of non-white-space holding a "/"
  const bare = spaceOut(F).replace(CODE_SPAN, " ").replace(/[^ \n]*\/[^ \n]*/g, " ");
  for (const ch of bare) if (OTHER_SCRIPT.has(ch.codePointAt(0))) return { rule: "other-script", matched: ch };
  let counted = 0;
  let foreign = 0;
  for (const { tokens } of cls) {
    let first = true;
    for (const t of tokens) {
      if (t.kind !== "word") continue;
      const capitalised = first && t.text[0] !== t.low[0] && t.text.slice(1) === t.low.slice(1);
      if (t.text === t.low || capitalised) {
        counted++;
        if (!isEnglish(t.low)) foreign++;
      }
      first = false;
    }
  }
  if (foreign >= 2 && 3 * foreign > counted) return { rule: "not-english", matched: `${foreign} of ${counted}` };
  const tokens = cls.flatMap((c) => c.tokens).filter((t) => t.kind !== "code");
  if (tokens.length >= 6 && 2 * tokens.filter((t) => t.kind === "symbol").length > tokens.length)
    return { rule: "not-english", matched: "symbols" };
  return null;
}

// ----------------------------------------------------------------------------------------
// Content identity (PROTOCOL.md "Content identity")

// Full case folding (CaseFolding.txt, statuses C and F). JavaScript has no casefold(): per code
// point, lower(upper(c)) is the full folding except where the table says otherwise, which for
// Unicode 14/15 is: U+1E9E (to "ss"), U+0131 (folds to itself), and Cherokee, which folds to
// the upper-case letters. (Checked against Python's str.casefold() over every code point.)
function caseFoldChar(cp) {
  if (cp === 0x1e9e) return "ss";
  if (cp === 0x131) return "\u0131";
  if (cp >= 0x13a0 && cp <= 0x13f5) return String.fromCodePoint(cp);
  if (cp >= 0x13f8 && cp <= 0x13fd) return String.fromCodePoint(cp - 8);
  if (cp >= 0xab70 && cp <= 0xabbf) return String.fromCodePoint(cp - 0xab70 + 0x13a0);
  return String.fromCodePoint(cp).toUpperCase().toLowerCase();
}
const caseFold = (s) => [...s].map((ch) => caseFoldChar(ch.codePointAt(0))).join("");

function normalise(text) {
  let s = text.normalize("NFKC");
  s = s.replace(/[\u2018\u2019]/g, "'").replace(/[\u201c\u201d]/g, '"');
  s = caseFold(s);
  s = s.normalize("NFKC");
  let out = "";
  let inRun = false;
  for (const ch of s) {
    if (WHITE_SPACE.has(ch.codePointAt(0))) {
      if (!inRun) out += " ";
      inRun = true;
    } else {
      out += ch;
      inRun = false;
    }
  }
  out = out.replace(/^ +| +$/g, "");
  return out.replace(/[. ]+$/, "");
}

const dedupKey = (text, kind) =>
  hex(sha256(utf8("openmemory/dedup/v1"), Buffer.from([0]), utf8(kind), Buffer.from([0]), utf8(normalise(text))));
// a lesson record's key: version 1 by its text and kind, version 2 by its claim
const lessonDedupKey = (rec) =>
  rec.get("version") === 2n ? dedupKeyV2(claimOf(rec.get("claim"))) : dedupKey(rec.get("text"), rec.get("kind"));

// ----------------------------------------------------------------------------------------
// Claims (PROTOCOL.md "Claims"): a version 2 lesson's parts, their one rendering, their shapes,
// the failure markers (C4), the unsafe-command table (C5) and the same claim (C6). The tables'
// patterns are read from PROTOCOL.md's lists. They are Python re patterns with the ASCII flag:
// \s, \S, \d and \w are ASCII there, so they are spelled out here; \b is ASCII in JavaScript
// (without the i flag) as in Python's ASCII mode; the u flag makes every quantifier count code
// points, as Python does.

const claimOf = (map) => Object.fromEntries(map.entries);
function asciiRegex(pattern) {
  let out = "";
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "\\") {
      const e = pattern[++i];
      const cls = { s: " \\t\\n\\r\\f\\v", d: "0-9", w: "A-Za-z0-9_" }[e];
      if (cls) out += inClass ? cls : `[${cls}]`;
      else if (e === "S" && !inClass) out += "[^ \\t\\n\\r\\f\\v]";
      else if ("SDW".includes(e)) throw new Error(`\\${e} in a class: not translated`);
      else out += "\\" + e;
      continue;
    }
    if (c === "[" && !inClass) inClass = true;
    else if (c === "]" && inClass) inClass = false;
    out += c;
  }
  return new RegExp(out, "u");
}
const PROTOCOL_TEXT = () => fs.readFileSync(PROTOCOL, "utf8");
function protocolNumbered(name) {
  const m = PROTOCOL_TEXT().match(new RegExp(`<!-- list: ${name} -->\\s*\`\`\`text\\n([\\s\\S]*?)\`\`\``));
  if (!m) throw new Error(`no list ${name} in PROTOCOL.md`);
  return m[1].trim().split("\n").map((l) => l.slice(l.indexOf(" ") + 1));
}
let UNSAFE = null; // [{code, pattern, re}] in the table's order
let MARKERS = null;
function claimTables() {
  if (UNSAFE) return;
  const codes = [...PROTOCOL_TEXT().matchAll(/^\| U\d+ \| `([a-z-]+)` \|/gm)].map((m) => m[1]);
  UNSAFE = protocolNumbered("unsafe-commands").map((p, i) => ({ code: codes[i], pattern: p, re: asciiRegex(p) }));
  MARKERS = protocolNumbered("failure-markers").map((p) => ({ pattern: p, re: asciiRegex(p) }));
}

const TOOL_RE = /^(?:[A-Z][A-Za-z0-9_]{0,63}|mcp__[A-Za-z0-9_-]{1,120})$/;
const HEAD_WORD_RE = /^[A-Za-z0-9._][A-Za-z0-9._+:@=\/-]{0,63}$/;
const LATER_WORD_RE = /^[A-Za-z0-9._-][A-Za-z0-9._+:@=\/-]{0,63}$/; // a head's second and third words
const FIX_TAILS = {
  changed: ["; `", "` succeeded."],
  instead: ["; `", "` succeeded on the same target."],
  after: ["; the same call succeeded after `", "`."],
  edited: ["; the same call succeeded after an edit of `", "`."],
  retried: ["; the same call succeeded when tried again."],
};
const isTool = (s) => TOOL_RE.test(s);

function renderClaim(c) {
  let label;
  if (isTool(c.situation)) label = `\`${c.situation}\``;
  else {
    const heads = c.situation.split(" && ").map((h) => `\`${h}\``);
    label = heads.length === 1 ? heads[0] : `${heads.slice(0, -1).join(", ")} and ${heads[heads.length - 1]}`;
  }
  if (c.path !== undefined && c.path !== null) label += ` on \`${c.path}\``;
  const how = c.fix_how;
  const tail = how === undefined || how === null ? "." : FIX_TAILS[how].length === 1 ? FIX_TAILS[how][0] : FIX_TAILS[how][0] + c.fix + FIX_TAILS[how][1];
  return `${label} failed: "${c.failure}"${tail}`;
}

// the parts a sentence is the rendering of, or null
function parseClaim(text) {
  const m = /^(`[^`]+`(?:(?:, `[^`]+`)* and `[^`]+`)?)(?: on `([^`]+)`)? failed: "([^"]+)"/u.exec(text);
  if (!m) return null;
  const names = [...m[1].matchAll(/`([^`]+)`/g)].map((x) => x[1]);
  const parts = { situation: names.length === 1 && isTool(names[0]) ? names[0] : names.join(" && ") };
  if (m[2] !== undefined) parts.path = m[2];
  parts.failure = m[3];
  const rest = text.slice(m[0].length);
  if (rest !== ".") {
    let found = false;
    for (const [how, t] of Object.entries(FIX_TAILS)) {
      if (t.length === 1) {
        if (rest === t[0]) {
          parts.fix_how = how;
          found = true;
          break;
        }
      } else if (rest.startsWith(t[0]) && rest.endsWith(t[1]) && rest.length > t[0].length + t[1].length) {
        const fix = rest.slice(t[0].length, rest.length - t[1].length);
        if (!fix.includes("`")) {
          parts.fix = fix;
          parts.fix_how = how;
          found = true;
          break;
        }
      }
    }
    if (!found) return null;
  }
  return renderClaim(parts) === text ? parts : null;
}

// C2: one line (PROTOCOL.md lists the code points a part must not hold, and Python's isspace)
const NOT_IN_PARTS = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb`"]/u;
const OTHER_SPACE = new RegExp(`[${PY_SPACE.replace(" ", "")}]`, "u");
function partLine(v, lo, hi) {
  const n = utf8(v).length;
  return lo <= n && n <= hi && !NOT_IN_PARTS.test(v) && !/^ | $|  /.test(v) && !OTHER_SPACE.test(v);
}
const relativePath = (v) => partLine(v, 1, 200) && !v.includes(" ") && !"/~$\\".includes(v[0]) && !/^[A-Za-z]:\\/.test(v);
const foldAscii = (t) => t.normalize("NFKC").replace(/[A-Z]/g, (c) => c.toLowerCase());
const PY_SPLIT = new RegExp(`[${PY_SPACE}]+`, "u");
function commandForm(text) {
  const t = foldAscii(text).replace(/["']/g, "").replace(new RegExp(`[${PY_SPACE}]*(\\|\\||&&|\\||;|&|\\(|\\))[${PY_SPACE}]*`, "gu"), " $1 ");
  return t.split(PY_SPLIT).filter((w) => w !== "").join(" ");
}
function unsafeRow(text) {
  claimTables();
  const form = commandForm(text);
  const i = UNSAFE.findIndex((u) => u.re.test(form));
  return i < 0 ? null : i + 1;
}
function markerRow(failure) {
  claimTables();
  const folded = foldAscii(failure);
  const i = MARKERS.findIndex((m) => m.re.test(folded));
  return i < 0 ? null : i + 1;
}

// the first rule a claim breaks, as [code, part], or null (PROTOCOL.md's order)
function claimError(c) {
  const s = c.situation;
  if (!partLine(s, 1, 200)) return ["claim", "situation"];
  if (!isTool(s)) {
    const heads = s.split(" && ");
    const ok = heads.length <= 3 && heads.every((h) => {
      const words = h.split(" ");
      return words.length >= 1 && words.length <= 3 && HEAD_WORD_RE.test(words[0]) && words.slice(1).every((w) => LATER_WORD_RE.test(w));
    });
    if (!ok) return ["claim", "situation"];
  }
  if (c.path !== undefined && !relativePath(c.path)) return ["claim", "path"];
  const f = c.failure;
  if (!partLine(f, 2, 300) || !/\p{L}/u.test(f)) return ["claim", "failure"];
  const how = c.fix_how;
  const fix = c.fix;
  if (how === undefined) {
    if (fix !== undefined) return ["claim", "fix_how"];
  } else if (!(how in FIX_TAILS)) return ["claim", "fix_how"];
  else if ((how === "retried") !== (fix === undefined)) return ["claim", "fix"];
  else if (fix !== undefined && (!partLine(fix, 1, 200) || (how === "edited" && !relativePath(fix)))) return ["claim", "fix"];
  if (utf8(renderClaim(c)).length > 512) return ["claim", "failure"];
  if (markerRow(f) !== null) return ["claim", "failure"];
  for (const name of ["fix", "failure", "situation", "path"]) if (c[name] !== undefined && unsafeRow(c[name]) !== null) return ["unsafe", name];
  return null;
}

// C6: the same claim
const PLACEHOLDER_RE = /<[a-z][a-z_-]{0,15}>|\{[a-z]{1,10}\}/gu;
function textKey(t) {
  const folded = caseFold(t.normalize("NFKC")).replace(PLACEHOLDER_RE, " <> ");
  return [...folded.matchAll(/<>|[\p{L}\p{N}]+/gu)].map((m) => (/^\p{Nd}+$/u.test(m[0]) ? "<>" : m[0])).join(" ");
}
const OPERATOR_WORDS = new Set(["|", "||", "&&", ";", "&", "(", ")"]);
function commandKey(c) {
  const words = commandForm(c).replace(PLACEHOLDER_RE, "<>").split(" ");
  const out = [];
  let current = [];
  const flush = () => {
    if (!current.length) return;
    // the program, then its other words (subcommand, options, arguments) as a sorted set
    const rest = [...new Set(current.slice(1))].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    out.push([current[0], ...rest].join(" "));
    current = [];
  };
  for (const w of words) {
    if (OPERATOR_WORDS.has(w)) {
      flush();
      out.push(w);
    } else if (w) current.push(w);
  }
  flush();
  return out.join(" ");
}
function claimKey(c) {
  const situation = isTool(c.situation) ? c.situation : c.situation.split(" && ").map(commandKey).join(" && ");
  const fix = c.fix ?? "";
  return ["error", situation, textKey(c.path ?? ""), textKey(c.failure), c.fix_how ?? "",
    c.fix_how === "edited" ? textKey(fix) : commandKey(fix)].join("\u0000");
}
const dedupKeyV2 = (c) => hex(sha256(utf8("openmemory/dedup/v2"), Buffer.from([0]), utf8(claimKey(c))));

// ----------------------------------------------------------------------------------------
// JSON form (PROTOCOL.md "JSON form")

const BYTES_FIELDS = { signer: 32, signature: 64, provenance: 32, lesson_id: 34, target: 34, subject: 32 };

function toJson(rec, id) {
  const type = rec.get("type");
  const out = { id: hex(id) };
  for (const k of ["version", "type", ...fieldsOf(type, rec.get("version")), "signer", "created", "signature"]) {
    const v = rec.get(k);
    if (k === "derived_from") out[k] = v.map(hex);
    else if (k === "claim") out[k] = Object.fromEntries(CLAIM_PARTS.filter((p) => v.has(p)).map((p) => [p, v.get(p)]));
    else if (k === "evidence") out[k] = Object.fromEntries(EVIDENCE_FIELDS.map((e) => [e, Number(v.get(e))]));
    else if (Buffer.isBuffer(v)) out[k] = hex(v);
    else if (typeof v === "bigint") out[k] = Number(v);
    else out[k] = v;
  }
  return out;
}

// Reading the JSON form is strict (PROTOCOL.md "JSON form"), so JSON.parse will not do: it keeps
// the last of duplicate names, reads 15E2 and -0 as numbers, and accepts lone surrogate escapes.
// parseJson reads RFC 8259 JSON into a tree: JsonObject (entries in order), JsonNumber (the
// number's spelling), strings, booleans, null, arrays. What the form refuses as `encoding` is
// refused here: syntax, duplicate names, NaN/Infinity (not JSON), lone surrogates, nesting
// deeper than 2 (the record object is depth 1).

class JsonObject {
  constructor(entries) {
    this.entries = entries;
  }
  has(key) {
    return this.entries.some(([k]) => k === key);
  }
  get(key) {
    const e = this.entries.find(([k]) => k === key);
    return e ? e[1] : undefined;
  }
}
class JsonNumber {
  constructor(raw) {
    this.raw = raw;
  }
}
const JSON_INTEGER = /^-?(?:0|[1-9][0-9]*)$/;

function parseJson(text) {
  let i = 0;
  const enc = (m) => fail("encoding", `${m} at ${i}`);
  const ws = () => {
    while (i < text.length && " \t\r\n".includes(text[i])) i++;
  };
  function string() {
    i++; // the opening quote
    let out = "";
    for (;;) {
      if (i >= text.length) enc("unterminated string");
      const c = text[i++];
      if (c === '"') return out;
      if (c.charCodeAt(0) < 0x20) enc("a control character in a string");
      if (c !== "\\") {
        out += c;
        continue;
      }
      const e = text[i++];
      const simple = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" }[e];
      if (simple !== undefined) {
        out += simple;
        continue;
      }
      if (e !== "u") enc("a bad escape");
      const unit = () => {
        const h = text.slice(i, i + 4);
        if (!/^[0-9a-fA-F]{4}$/.test(h)) enc("a bad \\u escape");
        i += 4;
        return parseInt(h, 16);
      };
      const u = unit();
      if (u >= 0xdc00 && u <= 0xdfff) enc("a lone surrogate escape");
      if (u >= 0xd800 && u <= 0xdbff) {
        if (text.slice(i, i + 2) !== "\\u") enc("a lone surrogate escape");
        i += 2;
        const low = unit();
        if (low < 0xdc00 || low > 0xdfff) enc("a lone surrogate escape");
        out += String.fromCharCode(u, low);
      } else out += String.fromCharCode(u);
    }
  }
  function value(depth) {
    ws();
    const c = text[i];
    if (c === "{" || c === "[") {
      if (depth >= 2) enc("objects and arrays nested deeper than 2");
      i++;
      const close = c === "{" ? "}" : "]";
      const items = [];
      ws();
      if (text[i] === close) {
        i++;
        return c === "{" ? new JsonObject(items) : items;
      }
      for (;;) {
        if (c === "{") {
          ws();
          if (text[i] !== '"') enc("a name is a string");
          const key = string();
          if (items.some(([k]) => k === key)) enc(`the duplicate name ${JSON.stringify(key)}`);
          ws();
          if (text[i++] !== ":") enc("':' expected");
          items.push([key, value(depth + 1)]);
        } else items.push(value(depth + 1));
        ws();
        const sep = text[i++];
        if (sep === close) return c === "{" ? new JsonObject(items) : items;
        if (sep !== ",") enc("',' expected");
      }
    }
    if (c === '"') return string();
    for (const [word, v] of [["true", true], ["false", false], ["null", null]]) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return v;
      }
    }
    const m = /^-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/.exec(text.slice(i, i + 64));
    if (!m) enc("not a JSON value");
    i += m[0].length;
    return new JsonNumber(m[0]);
  }
  const v = value(0);
  ws();
  if (i !== text.length) enc("data after the value");
  return v;
}

// steps 3 to 5 on a JSON tree, then the CBOR bytes it stands for (and step 6 for a given id)
function fromJsonTree(tree) {
  const schema = (m) => fail("schema", m);
  if (!(tree instanceof JsonObject)) schema("not an object");
  const int = (v) => {
    if (!(v instanceof JsonNumber) || !JSON_INTEGER.test(v.raw) || v.raw === "-0") schema("not an integer");
    return BigInt(v.raw);
  };
  // 3. version, then 4. type, before any other field
  if (!tree.has("version")) schema("no version");
  const version = int(tree.get("version"));
  if (version !== 1n && version !== 2n) fail("version", `version ${tree.get("version").raw}`);
  const type = tree.get("type");
  if (typeof type !== "string") schema("type missing or not a string");
  if (!TYPES.includes(type)) fail("type", `unknown type ${JSON.stringify(type)}`);
  if (!VERSIONS[type].includes(version)) fail("version", `a ${type} has no version ${version}`);
  // 5. schema: the JSON types, then the record's rules (decodeRecord)
  if (tree.has("id") && typeof tree.get("id") !== "string") schema("id is not a string");
  const fields = ["version", "type", ...fieldsOf(type, version), "signer", "created", "signature"];
  for (const [k] of tree.entries) if (k !== "id" && !fields.includes(k)) schema(`unknown field ${k}`);
  const hexOf = (v, n) => {
    if (typeof v !== "string" || v.length !== 2 * n || !/^[0-9a-f]*$/.test(v)) schema(`not ${n} bytes of lower-case hex`);
    return Buffer.from(v, "hex");
  };
  const cborInt = (v) => {
    const n = int(v);
    if (n >= 2n ** 64n || n < -(2n ** 64n)) schema("an integer out of every limit");
    return n;
  };
  const entries = fields.map((k) => {
    if (!tree.has(k)) schema(`missing ${k}`);
    const v = tree.get(k);
    if (k in BYTES_FIELDS) return [k, hexOf(v, BYTES_FIELDS[k])];
    if (k === "derived_from") {
      if (!Array.isArray(v)) schema("derived_from is not an array");
      return [k, v.map((x) => hexOf(x, 34))];
    }
    if (k === "evidence") {
      if (!(v instanceof JsonObject)) schema("evidence is not an object");
      return [k, new CborMap(v.entries.map(([ek, ev]) => [ek, cborInt(ev)]))];
    }
    if (k === "claim") {
      if (!(v instanceof JsonObject)) schema("claim is not an object");
      for (const [, part] of v.entries) if (typeof part !== "string") schema("a claim part is not a string");
      return [k, new CborMap(v.entries)];
    }
    if (["version", "created", "strength"].includes(k)) return [k, cborInt(v)];
    if ((k === "met_before" || k === "exposed") && typeof v !== "boolean") schema(`${k} is not a boolean`);
    if (k !== "met_before" && k !== "exposed" && typeof v !== "string") schema(`${k} is not a string`);
    return [k, v];
  });
  const bytes = cborEncode(new CborMap(entries));
  const rec = decodeRecord(bytes);
  // 6. id
  if (tree.has("id") && tree.get("id") !== hex(recordId(bytes))) fail("id", "the id is not the record's");
  return { rec, bytes };
}

const MAX_JSON_LINE = 16384;

// one line of JSON Lines (its bytes, maybe with its line break: LF, or CR LF)
function fromJsonLine(bytes) {
  let end = bytes.length;
  if (end > 0 && bytes[end - 1] === 0x0a) {
    end--;
    if (end > 0 && bytes[end - 1] === 0x0d) end--;
  }
  if (end > MAX_JSON_LINE) fail("size", `a line of ${end} bytes`);
  let text;
  try {
    text = utf8Strict.decode(bytes.subarray(0, end));
  } catch {
    fail("encoding", "not UTF-8");
  }
  if (text.includes("\n")) fail("encoding", "a line break inside the line");
  return fromJsonTree(parseJson(text));
}

// a JSON Lines file: split at LF, skip blank lines (JSON white space only), read on after errors
function readJsonLines(bytes) {
  const out = [];
  let start = 0;
  let number = 0;
  while (start < bytes.length) {
    let lf = bytes.indexOf(0x0a, start);
    if (lf < 0) lf = bytes.length;
    const line = bytes.subarray(start, Math.min(lf + 1, bytes.length));
    start = lf + 1;
    number++;
    if ([...line].every((b) => b === 0x20 || b === 0x09 || b === 0x0d || b === 0x0a)) continue;
    try {
      out.push({ line: number, cbor: hex(fromJsonLine(line).bytes) });
    } catch (e) {
      if (!(e instanceof WireError)) throw e;
      out.push({ line: number, error: e.code });
    }
  }
  return out;
}

// ----------------------------------------------------------------------------------------
// Sync (PROTOCOL.md "Sync: /openmemory/sync/1.0.0")

class SyncError extends Error {
  constructor(message) {
    super(`sync-bad-message: ${message}`);
    this.code = "sync-bad-message";
  }
}

const MODE = { skip: 0, fingerprint: 1, idlist: 2, missing: 3 };
const MODE_NAME = Object.fromEntries(Object.entries(MODE).map(([k, v]) => [v, k]));
const END = null; // the bound 0xFF
const BRANCH = 16;
const LEAF = 16;
const MAX_MESSAGE_SEND = 60000;
const MAX_MESSAGE_RECV = 131072;
const MAX_RANGES = 8192;
const TWO_256 = 2n ** 256n;

function fingerprint(ids) {
  let sum = 0n;
  for (const id of ids) sum = (sum + leInt(id.subarray(2))) % TWO_256;
  return sha256(leBytes(sum, 32), varint(ids.length)).subarray(0, 16);
}

// id versus bound: bytewise, a bound that is a prefix of the id is below it; END is above all
const belowBound = (id, bound) => bound === END || compareBytes(id, bound) < 0;
const boundAbove = (a, b) => (a === END ? b !== END : b !== END && compareBytes(a, b) > 0);

function encodeMessage(ranges) {
  const parts = [];
  for (const r of ranges) {
    parts.push(r.bound === END ? Buffer.from([0xff]) : Buffer.concat([Buffer.from([r.bound.length]), r.bound]));
    parts.push(Buffer.from([MODE[r.mode]]));
    if (r.mode === "fingerprint") parts.push(r.fingerprint);
    if (r.mode === "idlist" || r.mode === "missing") parts.push(varint(r.ids.length), ...r.ids);
  }
  return Buffer.concat(parts);
}

function decodeMessage(buf, { atResponder }) {
  if (buf.length > MAX_MESSAGE_RECV) throw new SyncError("message too long");
  const ranges = [];
  let pos = 0;
  let lower = Buffer.alloc(0);
  for (;;) {
    if (pos >= buf.length) throw new SyncError("the ranges do not end at 0xFF");
    if (ranges.length >= MAX_RANGES) throw new SyncError("too many ranges");
    let bound;
    const n = buf[pos++];
    if (n === 0xff) bound = END;
    else {
      if (n < 1 || n > 34) throw new SyncError(`bound of ${n} bytes`);
      if (pos + n > buf.length) throw new SyncError("truncated bound");
      bound = Buffer.from(buf.subarray(pos, pos + n));
      pos += n;
      if (bound[0] === 0xff) throw new SyncError("a bound begins with 0xFF");
      if (!boundAbove(bound, lower)) throw new SyncError("bound not above the previous one");
    }
    if (pos >= buf.length) throw new SyncError("truncated mode");
    const mode = MODE_NAME[buf[pos++]];
    if (mode === undefined) throw new SyncError("unknown mode");
    if (mode === "missing" && atResponder) throw new SyncError("MISSING at a responder");
    const r = { bound, mode };
    if (mode === "fingerprint") {
      if (pos + 16 > buf.length) throw new SyncError("truncated fingerprint");
      r.fingerprint = Buffer.from(buf.subarray(pos, pos + 16));
      pos += 16;
    } else if (mode === "idlist" || mode === "missing") {
      let k;
      [k, pos] = readVarint(buf, pos);
      if (pos + 34 * k > buf.length) throw new SyncError("truncated id list");
      r.ids = [];
      for (let i = 0; i < k; i++) {
        const id = Buffer.from(buf.subarray(pos, pos + 34));
        pos += 34;
        if (id[0] !== 0x12 || id[1] !== 0x20) throw new SyncError("an id is not a sha2-256 multihash");
        if (i > 0 && compareBytes(r.ids[i - 1], id) >= 0) throw new SyncError("ids not strictly ascending");
        if (compareBytes(id, lower) < 0 || !belowBound(id, bound)) throw new SyncError("an id outside its range");
        r.ids.push(id);
      }
    }
    ranges.push(r);
    if (bound === END) break;
    lower = bound;
  }
  if (pos !== buf.length) throw new SyncError("bytes after the last range");
  return ranges;
}

// the ids of a sorted list in [lower, upper)
function idsIn(sorted, lower, upper) {
  return sorted.filter((id) => compareBytes(id, lower) >= 0 && belowBound(id, upper));
}

// shortest prefix of `next` that is above `prev`
function boundBetween(prev, next) {
  let i = 0;
  while (i < prev.length && prev[i] === next[i]) i++;
  return Buffer.from(next.subarray(0, i + 1));
}

// 16 sub-ranges of about equal counts: sub-range i holds the ids at positions floor(i * n / 16)
// to floor((i + 1) * n / 16) - 1 (the split the transcript of sync.json shows)
function split(ids, upper) {
  const out = [];
  const n = ids.length;
  for (let i = 0; i < BRANCH; i++) {
    const start = Math.floor((i * n) / BRANCH);
    const end = Math.floor(((i + 1) * n) / BRANCH);
    const chunk = ids.slice(start, end);
    const bound = i === BRANCH - 1 ? upper : boundBetween(chunk[chunk.length - 1], ids[end]);
    out.push({ bound, mode: "fingerprint", fingerprint: fingerprint(chunk) });
  }
  return out;
}

// adjacent SKIPs merge: a SKIP that follows a SKIP replaces it
function appendMerged(ranges, more) {
  const out = ranges.map((r) => ({ ...r }));
  for (const r of more) {
    const last = out[out.length - 1];
    if (r.mode === "skip" && last && last.mode === "skip") last.bound = r.bound;
    else out.push({ ...r });
  }
  return out;
}

const FINAL_RANGE = 18; // 0xFF, FINGERPRINT, 16 bytes

// One side's answer to a received message. `role` is "initiator" or "responder"; `lacks`
// collects (at the initiator) the ids the other side announced that this side lacks.
// "Message size": each answer is written only if the message with it (SKIPs merged) is at most
// maxBytes - 18, or maxBytes for the answer to the last range; otherwise one FINGERPRINT of our
// ids from that range's lower bound to the end ends the message. At a responder answering an
// IDLIST, the MISSING that does not fit gives way to the split when we hold more than 16 ids.
function answer(mine, received, role, lacks, maxBytes = MAX_MESSAGE_SEND) {
  let out = [];
  const have = new Set(mine.map(hex));
  let lower = Buffer.alloc(0);
  for (const r of received) {
    const ours = idsIn(mine, lower, r.bound);
    const skip = [{ bound: r.bound, mode: "skip" }];
    let candidates;
    if (r.mode === "skip") candidates = [skip];
    else if (r.mode === "fingerprint") {
      if (fingerprint(ours).equals(r.fingerprint)) candidates = [skip];
      else if (ours.length <= LEAF) candidates = [[{ bound: r.bound, mode: "idlist", ids: ours }]];
      else candidates = [split(ours, r.bound)];
    } else if (role === "initiator") candidates = [skip];
    else {
      const theirs = new Set(r.ids.map(hex));
      const missing = ours.filter((id) => !theirs.has(hex(id)));
      if (missing.length === 0) candidates = [skip];
      else {
        candidates = [[{ bound: r.bound, mode: "missing", ids: missing }]];
        if (ours.length > LEAF) candidates.push(split(ours, r.bound));
      }
    }
    const limit = r.bound === END ? maxBytes : maxBytes - FINAL_RANGE;
    const written = candidates.map((c) => appendMerged(out, c)).find((m) => encodeMessage(m).length <= limit);
    if (written === undefined) {
      // does not fit: the rest of the id space, from this range's lower bound, as one FINGERPRINT
      out.push({ bound: END, mode: "fingerprint", fingerprint: fingerprint(idsIn(mine, lower, END)) });
      return out;
    }
    out = written;
    if (role === "initiator" && (r.mode === "idlist" || r.mode === "missing")) {
      for (const id of r.ids) if (!have.has(hex(id))) lacks.push(id); // note what we lack
    }
    if (r.bound === END) break;
    lower = r.bound;
  }
  return out;
}

const allSkip = (ranges) => ranges.every((r) => r.mode === "skip");

function firstMessage(mine) {
  return mine.length <= LEAF ? [{ bound: END, mode: "idlist", ids: mine }] : [{ bound: END, mode: "fingerprint", fingerprint: fingerprint(mine) }];
}

// ----------------------------------------------------------------------------------------
// The commons state machine (PROTOCOL.md "Commons state machine, independence, revocation, sync"):
// rules R1-R12 as openmemory_node/commons.py states them, computed over the whole set of records
// at once (no arrival order, hence none to get wrong). commonsView turns a record into what the
// machine reads; commonsMachine is the rules.

// A record as the machine reads it: id (bytes), idHex, type, signer (hex), created; a lesson's
// parents, dedup key, version and parts (R10: "claim" in version 1; "failure", and "fix" when the
// claim states one, in version 2); an attestation's lesson and vote; a revocation's target; a
// vouch's subject.
function commonsView(bytes) {
  const rec = decodeRecord(bytes);
  const id = recordId(bytes);
  const type = rec.get("type");
  const version = Number(rec.get("version"));
  const view = { id, idHex: hex(id), type, version, signer: hex(rec.get("signer")), created: rec.get("created") };
  if (type === "lesson") {
    view.parents = rec.get("derived_from").map(hex);
    view.key = version === 2 ? lessonDedupKey(rec) : dedupKey(rec.get("text"), rec.get("kind"));
    view.parts = version === 2 ? (rec.get("claim").has("fix_how") ? ["failure", "fix"] : ["failure"]) : ["claim"];
  } else if (type === "attestation") {
    view.lesson = hex(rec.get("lesson_id"));
    // R10: the parts it tested ([part, verdict]; "untested" is no voice); its step verdict:
    // failed if it failed a part, else confirmed
    const said = version === 2 ? [["failure", rec.get("failure")], ["fix", rec.get("fix")]] : [["claim", rec.get("verdict")]];
    const tested = said.filter(([, v]) => v === "confirmed" || v === "failed");
    view.vote = {
      tested,
      verdict: tested.some(([, v]) => v === "failed") ? "failed" : "confirmed",
      metBefore: rec.get("met_before"),
      exposed: version === 2 ? rec.get("exposed") : false,
    };
  } else if (type === "revocation") view.target = hex(rec.get("target"));
  else if (type === "vouch") view.subject = hex(rec.get("subject"));
  return view;
}

function commonsStatuses(config, recordBytes) {
  return commonsMachine(config, recordBytes.map(commonsView));
}

function commonsMachine(config, views) {
  const byId = new Map(views.map((r) => [r.idHex, r]));
  const ofType = (t) => [...byId.values()].filter((r) => r.type === t); // (a record given twice is one)
  const trustList = new Set(config.trust);
  const revokers = new Set(config.revokers);
  const team = new Set(config.team); // R8: trusted to vote
  const blocked = new Set(config.blocked); // R11
  const localRevocations = new Set(config.local_revocations);
  const status = new Map();
  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  const byCreatedThenId = (x, y) => cmp(x.created, y.created) || cmp(x.idHex, y.idHex); // lower-case hex: byte order

  // R1 groups by dedup key (for a version 2 lesson: the same claim); the head: smallest created, then id
  const groups = new Map();
  for (const l of ofType("lesson")) {
    if (!groups.has(l.key)) groups.set(l.key, []);
    groups.get(l.key).push(l);
  }
  for (const members of groups.values()) members.sort(byCreatedThenId);

  // R6: a revocation's effect
  const effect = (r) => {
    const t = byId.get(r.target);
    if (t && t.type === "revocation") return "no-effect"; // revocations are final
    if (revokers.has(r.signer)) return "effective"; // a revoker needs no target to check
    if (!t) return "pending";
    return t.signer === r.signer ? "effective" : "no-effect";
  };
  const revocationsOf = new Map();
  for (const r of ofType("revocation")) {
    const s = effect(r);
    status.set(r.idHex, s);
    if (!revocationsOf.has(r.target)) revocationsOf.set(r.target, []);
    revocationsOf.get(r.target).push({ signer: r.signer, effective: s === "effective" });
  }
  // R12: a member revoked locally, or by a revoker who is not its author, revokes its whole claim
  const claimRevokedBy = (m) =>
    localRevocations.has(m.idHex) ||
    (revocationsOf.get(m.idHex) ?? []).some((r) => r.effective && revokers.has(r.signer) && r.signer !== m.signer);
  const revokedDirectly = (idHex) => {
    const r = byId.get(idHex);
    if (r && r.type === "revocation") return false;
    if (localRevocations.has(idHex)) return true;
    if (r && r.type === "lesson" && blocked.has(r.signer)) return true; // R11
    if ((revocationsOf.get(idHex) ?? []).some((x) => x.effective)) return true;
    if (r && r.type === "lesson" && r.version >= 2) return groups.get(r.key).some((m) => m !== r && claimRevokedBy(m));
    return false;
  };
  // R7: closure over derived_from, through held lessons and from any revoked parent id
  const revokedMemo = new Map();
  const isRevoked = (idHex) => {
    if (revokedMemo.has(idHex)) return revokedMemo.get(idHex);
    let revoked = revokedDirectly(idHex);
    const r = byId.get(idHex);
    if (!revoked && r && r.type === "lesson") revoked = r.parents.some(isRevoked);
    revokedMemo.set(idHex, revoked);
    return revoked;
  };

  // R8: trusted keys: the trust list, the team, the subjects of unrevoked vouches by unblocked
  // keys in the trust list (one hop); less the blocked keys. R9: a vouch's status.
  const trusted = new Set([...trustList, ...team]);
  for (const v of ofType("vouch")) {
    const revoked = isRevoked(v.idHex);
    status.set(v.idHex, revoked ? "revoked" : trustList.has(v.signer) && !blocked.has(v.signer) ? "effective" : "no-effect");
    if (!revoked && trustList.has(v.signer) && !blocked.has(v.signer)) trusted.add(v.subject);
  }
  for (const k of blocked) trusted.delete(k);

  // R2, R3: each attestation's vote on its lesson's group, counted or refused by the policy
  const votesOf = new Map([...groups.keys()].map((k) => [k, []]));
  const refuses = (vote, a, members) => {
    // (corroborations vote with met_before = true: neither built-in policy counts them, and
    // they are no records with a status of their own)
    if (members.some((m) => m.signer === a.signer)) return "author";
    if (blocked.has(a.signer)) return "blocked";
    if (vote.metBefore) return "met-before";
    if (vote.exposed) return "exposed";
    if (!vote.tested.some(([part]) => members[0].parts.includes(part))) return "parts";
    if (config.policy === "trusted" && !trusted.has(a.signer)) return "untrusted";
    return null;
  };
  for (const a of ofType("attestation")) {
    const lesson = byId.get(a.lesson);
    let s;
    if (isRevoked(a.idHex)) s = "revoked"; // withdrawn by its attester or a revoker
    else if (!lesson) s = "pending"; // no record of that id here yet
    else if (lesson.type !== "lesson") s = "not-counted"; // here, and not a lesson: for good
    else {
      const counts = refuses(a.vote, a, groups.get(lesson.key)) === null;
      s = counts ? "counted" : "not-counted";
      if (counts) votesOf.get(lesson.key).push({ ...a.vote, key: a.signer, created: a.created, idHex: a.idHex });
    }
    status.set(a.idHex, s);
  }

  // R4, R5, R10: the replay, one voice per key per part; the guards read every part
  const N = BigInt(config.threshold);
  const window = BigInt(config.fade_window);
  for (const [key, members] of groups) {
    const head = members[0];
    const votes = votesOf.get(key).map((v) => ({ ...v, time: v.created > head.created ? v.created : head.created }));
    votes.sort((x, y) => cmp(x.time, y.time) || cmp(x.created, y.created) || cmp(x.idHex, y.idHex));
    const voices = new Map(head.parts.map((p) => [p, new Map()])); // part -> key -> {time, verdict}
    let groupStatus = "candidate";
    for (const v of votes) {
      for (const [part, verdict] of v.tested) if (voices.has(part)) voices.get(part).set(v.key, { time: v.time, verdict });
      const tallies = [...voices.values()].map((byKey) => {
        const current = [...byKey.values()];
        const inWindow = (x) => x.time > v.time - window && x.time <= v.time;
        return {
          confirmers: BigInt(current.filter((x) => x.verdict === "confirmed").length),
          Cw: current.filter((x) => x.verdict === "confirmed" && inWindow(x)).length,
          Fw: current.filter((x) => x.verdict === "failed" && inWindow(x)).length,
        };
      });
      const enough = tallies.every((t) => t.confirmers >= N);
      if (groupStatus === "candidate" && v.verdict === "confirmed" && enough) groupStatus = "common";
      else if (groupStatus === "common" && v.verdict === "failed" && tallies.some((t) => t.Fw > t.Cw)) groupStatus = "faded";
      else if (groupStatus === "faded" && v.verdict === "confirmed" && tallies.every((t) => t.Cw > t.Fw) && enough)
        groupStatus = "common";
    }
    for (const m of members) status.set(m.idHex, isRevoked(m.idHex) ? "revoked" : groupStatus);
  }
  return status;
}

// ----------------------------------------------------------------------------------------
// The checks

const args = process.argv.slice(2);
const argValue = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : dflt;
};
const VECTORS = argValue("--vectors", path.join(HERE, "..", "vectors"));
const PROTOCOL = argValue("--protocol", path.join(HERE, "..", "..", "PROTOCOL.md"));
const VERBOSE = args.includes("--verbose");

// --unicode-dump: for every code point assigned in Unicode 14.0 (surrogates aside), what this file's
// functions make of it, one line each: code point, \w, \d, \s (1 or 0), NFKC, full lowercase,
// full case folding (code points in hex), and the ASCII characters it matches case-insensitively.
// tests/wire/test_js_verifier.py compares it with Python's answers, code point by code point.
function unicodeDump() {
  const W = pyRegex("^\\w$");
  const Dg = pyRegex("^\\d$");
  const S = pyRegex("^\\s$");
  const cps = (s) => [...s].map((c) => c.codePointAt(0).toString(16)).join(" ");
  const ascii = [];
  for (let a = 0x20; a < 0x7f; a++) ascii.push(String.fromCharCode(a));
  const lines = [];
  for (const [lo, hi] of ASSIGNED) {
    for (let cp = lo; cp <= hi; cp++) {
      if (cp >= 0xd800 && cp <= 0xdfff) continue;
      const c = String.fromCodePoint(cp);
      const folded = pyIgnoreCaseFold(c);
      const matches = ascii.filter((a) => folded === (/[A-Za-z]/.test(a) ? a.toLowerCase() : a)).join("");
      const bits = [W, Dg, S].map((re) => (re.test(c) ? 1 : 0)).join("");
      lines.push(`${cp.toString(16)}|${bits}|${cps(c.normalize("NFKC"))}|${cps(c.toLowerCase())}|${cps(caseFold(c))}|${matches}`);
    }
  }
  process.stdout.write(lines.join("\n") + "\n");
}

const results = new Map(); // file -> {passed, failed}
function check(file, name, fn) {
  const r = results.get(file) || { passed: 0, failed: 0 };
  results.set(file, r);
  try {
    const outcome = fn();
    if (outcome === true) {
      r.passed++;
      if (VERBOSE) console.log(`  ok   ${file} ${name}`);
      return;
    }
    r.failed++;
    console.log(`  FAIL ${file} ${name}: ${outcome}`);
  } catch (e) {
    r.failed++;
    console.log(`  FAIL ${file} ${name}: ${e.stack || e}`);
  }
}
const same = (got, want) => (got === want ? true : `got ${got}, want ${want}`);
const load = (name) => JSON.parse(fs.readFileSync(path.join(VECTORS, name), "utf8"));

function checkProtocolLists() {
  const file = "PROTOCOL.md";
  const text = fs.readFileSync(PROTOCOL, "utf8");
  const list = (name) => {
    const m = text.match(new RegExp(`<!-- list: ${name} -->\\s*\`\`\`text\\n([\\s\\S]*?)\`\`\``));
    if (!m) throw new Error(`no list ${name} in PROTOCOL.md`);
    return m[1].trim();
  };
  const words = (s) => s.trim().split(/\s+/).join(" ");
  check(file, "forbidden-code-points list", () => same(words(list("forbidden-code-points")), words(FORBIDDEN_TEXT)));
  check(file, "white-space list", () => same(words(list("white-space")), words(WHITE_SPACE_TEXT)));
  const lines = (s) => s.trim().split("\n").map((l) => l.trim()).join("\n");
  check(file, "addressed-patterns list", () => same(lines(list("addressed-patterns")), lines(ADDRESSED_PATTERNS_TEXT)));
  check(file, "obligation-patterns list", () => same(lines(list("obligation-patterns")), lines(OBLIGATION_PATTERNS_TEXT)));
  check(file, "skipped-phrases list", () => same(lines(list("skipped-phrases")), lines(SKIPPED_PHRASES_TEXT)));
  check(file, "names list", () => same(lines(list("names")), lines(NAMES_TEXT)));
  check(file, "markup-patterns list", () => same(lines(list("markup-patterns")), lines(MARKUP_PATTERNS_TEXT)));
  check(file, "tag-patterns list", () => same(lines(list("tag-patterns")), lines(TAG_PATTERNS_TEXT)));
  check(file, "encoded-pattern list", () => same(lines(list("encoded-pattern")), lines(ENCODED_PATTERN_TEXT)));
  for (const [name, text] of [["reporting-verbs", REPORTING_VERBS_TEXT], ["skipped-openers", SKIPPED_OPENERS_TEXT],
    ["labels", LABELS_TEXT], ["predicate-words", PREDICATE_WORDS_TEXT], ["stop-words", STOP_WORDS_TEXT],
    ["habit-subjects-singular", HABIT_SUBJECTS_SINGULAR_TEXT], ["habit-subjects-plural", HABIT_SUBJECTS_PLURAL_TEXT],
    ["habit-adverbs", HABIT_ADVERBS_TEXT], ["habit-undergoing", HABIT_UNDERGOING_TEXT],
    ["action-participles", ACTION_PARTICIPLES_TEXT], ["verbs-with-of", VERBS_WITH_OF_TEXT]])
    check(file, `${name} list`, () => same(words(list(name)), words(text)));
  check(file, "White_Space has 25 code points", () => same(WHITE_SPACE.size, 25));
  const ex = fs.readFileSync(path.join(VECTORS, "worked-example.txt"), "utf8");
  check(file, "worked example in PROTOCOL.md is worked-example.txt", () =>
    text.includes(ex.trim()) ? true : "the worked example block differs from spec/vectors/worked-example.txt");
  return ex;
}

function checkWorkedExample(ex, valid) {
  const file = "worked-example.txt";
  const v = valid.vectors.find((x) => x.name === "lesson-worked-example");
  const blocks = ex.split(/\n\d\. /);
  const bytesOf = (block) =>
    block
      .split("\n")
      .slice(1)
      .map((l) => l.split(";")[0].trim())
      .filter((l) => /^[0-9a-f]+$/.test(l))
      .join("");
  check(file, "step 1 is the unsigned encoding", () => same(bytesOf(blocks[1]), v.signing_message.slice(42)));
  check(file, "step 4 is the record", () => same(bytesOf(blocks[4]), v.cbor));
  check(file, "step 3 is the signature", () => same(bytesOf(blocks[3]), v.signature));
  check(file, "step 5 is the id", () => same(ex.match(/id {5}= ([0-9a-f]+)/)[1], v.id));
}

function checkValid(valid) {
  const file = "valid.json";
  const opts = { now: valid.now, maxSkew: valid.max_skew };
  for (const v of valid.vectors) {
    const bytes = unhex(v.cbor);
    let res;
    check(file, `${v.name}: accepted`, () => {
      res = validateRecord(bytes, opts);
      return true;
    });
    if (!res) continue;
    check(file, `${v.name}: id`, () => same(hex(res.id), v.id));
    check(file, `${v.name}: id text form`, () => (/^1220[0-9a-f]{64}$/.test(v.id) ? true : `bad id form ${v.id}`));
    check(file, `${v.name}: signing message`, () => same(hex(res.message), v.signing_message));
    check(file, `${v.name}: re-encoding`, () => same(hex(cborEncode(res.rec)), v.cbor));
    check(file, `${v.name}: signature in the record`, () => same(hex(res.rec.get("signature")), v.signature));
    check(file, `${v.name}: public key from seed`, () => {
      const { publicKey } = ed25519FromSeed(unhex(v.seed));
      return same(hex(publicKey), v.public_key) === true ? same(hex(res.rec.get("signer")), v.public_key) : `public key ${hex(publicKey)}`;
    });
    check(file, `${v.name}: deterministic signature from seed`, () => {
      const { key } = ed25519FromSeed(unhex(v.seed));
      return same(hex(crypto.sign(null, unhex(v.signing_message), key)), v.signature);
    });
    check(file, `${v.name}: JSON form`, () => {
      const got = JSON.stringify(toJson(res.rec, res.id));
      return same(got, JSON.stringify(v.record)); // same keys, same order, same values
    });
    check(file, `${v.name}: JSON line`, () => same(JSON.stringify(toJson(res.rec, res.id)) + "\n", v.json_line));
    check(file, `${v.name}: JSON line back to CBOR`, () => same(hex(fromJsonLine(utf8(v.json_line)).bytes), v.cbor));
    if (res.rec.get("type") === "lesson") {
      check(file, `${v.name}: dedup key`, () => same(lessonDedupKey(res.rec), v.dedup_key));
    }
  }
}

function checkInvalid(invalid) {
  const file = "invalid.json";
  const codes = new Set();
  for (const v of invalid.vectors) {
    codes.add(v.error);
    check(file, `${v.name}: ${v.error}`, () => {
      try {
        validateRecord(unhex(v.cbor), { now: invalid.now, maxSkew: invalid.max_skew, expectId: v.expect_id ? unhex(v.expect_id) : null });
      } catch (e) {
        if (!(e instanceof WireError)) throw e;
        return same(e.code, v.error) === true ? true : `rejected with ${e.message}, want ${v.error}`;
      }
      return `accepted, want ${v.error}`;
    });
  }
  check(file, "every error code covered", () => same([...codes].sort().join(","), [...invalid.error_codes].sort().join(",")));
}

function checkJson(json) {
  const file = "json.json";
  check(file, "line limit", () => same(json.max_line_bytes, MAX_JSON_LINE));
  const codes = new Set();
  for (const v of json.lines) {
    check(file, `${v.name}: ${v.error || "valid"}`, () => {
      let got;
      try {
        got = hex(fromJsonLine(unhex(v.hex)).bytes);
      } catch (e) {
        if (!(e instanceof WireError)) throw e;
        return v.error ? same(e.code, v.error) : `refused (${e.message}), want the record`;
      }
      return v.error ? `accepted, want ${v.error}` : same(got, v.cbor);
    });
    if (v.error) codes.add(v.error);
  }
  check(file, "every code of the JSON form covered", () => same([...codes].sort().join(","), "encoding,id,schema,size,type,version"));
  for (const f of json.files) {
    check(file, `file ${f.name}`, () => same(JSON.stringify(readJsonLines(unhex(f.hex))), JSON.stringify(f.results)));
  }
}

function checkClaims(cv) {
  const file = "claims.json";
  claimTables();
  check(file, "PROTOCOL.md's unsafe-command table is the vectors'", () =>
    same(JSON.stringify(UNSAFE.map((u) => [u.code, u.pattern])), JSON.stringify(cv.unsafe_commands.map((r) => [r.code, r.pattern]))));
  check(file, "PROTOCOL.md's failure markers are the vectors'", () =>
    same(JSON.stringify(MARKERS.map((m) => m.pattern)), JSON.stringify(cv.failure_markers.map((r) => r.pattern))));
  const canon = (parts) => (parts === null ? "null" : JSON.stringify(Object.fromEntries(CLAIM_PARTS.filter((p) => p in parts).map((p) => [p, parts[p]]))));
  cv.render.forEach((v, i) => check(file, `render #${i}`, () => same(renderClaim(v.parts), v.text)));
  cv.parse.forEach((v, i) => check(file, `parse #${i} ${JSON.stringify(v.text).slice(0, 40)}`, () => same(canon(parseClaim(v.text)), canon(v.parts))));
  cv.shapes.forEach((v, i) =>
    check(file, `shapes #${i}`, () => same(JSON.stringify(claimError(v.parts)), JSON.stringify(v.error && [v.error.code, v.error.part]))));
  cv.unsafe.forEach((v) =>
    check(file, `unsafe ${JSON.stringify(v.command)}`, () => {
      const row = unsafeRow(v.command);
      const got = [commandForm(v.command), row, row ? UNSAFE[row - 1].code : null];
      return same(JSON.stringify(got), JSON.stringify([v.form, v.row, v.code]));
    }));
  cv.markers.forEach((v, i) => check(file, `marker #${i}`, () => same(markerRow(v.failure) === null, v.marker === null)));
  cv.same.forEach((v, i) =>
    check(file, `same #${i}`, () => {
      const ka = claimKey(v.a);
      const kb = claimKey(v.b);
      const got = [ka, kb, ka === kb, dedupKeyV2(v.a), dedupKeyV2(v.b)];
      return same(JSON.stringify(got), JSON.stringify([v.claim_key_a, v.claim_key_b, v.same, v.dedup_key_a, v.dedup_key_b]));
    }));
}

function checkDedup(dedup) {
  const file = "dedup.json";
  dedup.vectors.forEach((v, i) => {
    check(file, `#${i} normalise`, () => same(normalise(v.text), v.normalised));
    check(file, `#${i} dedup key`, () => same(dedupKey(v.text, v.kind), v.dedup_key));
  });
}

function checkObservation(obs) {
  const file = "observation.json";
  check(file, "rules", () => same(obs.rules.join(" "), RULES.join(" ")));
  check(file, "addressed patterns are PROTOCOL.md's", () => same(obs.addressed_patterns.join("\n"), ADDRESSED_PATTERNS.join("\n")));
  check(file, "obligation patterns are PROTOCOL.md's", () => same(obs.obligation_patterns.join("\n"), OBLIGATION_PATTERNS.join("\n")));
  check(file, "markup patterns are PROTOCOL.md's", () => same(obs.markup_patterns.join("\n"), MARKUP_PATTERNS.join("\n")));
  check(file, "tag patterns are PROTOCOL.md's", () => same(obs.tag_patterns.join("\n"), TAG_PATTERNS.join("\n")));
  check(file, "encoded pattern is PROTOCOL.md's", () => same(obs.encoded_pattern, ENCODED_PATTERN_TEXT));
  for (const [name, digest] of Object.entries(obs.tables))
    check(file, `table ${name}`, () => same(hex(sha256(fs.readFileSync(path.join(TABLES, name)))), digest));
  obs.vectors.forEach((v, i) => {
    check(file, `#${i} ${JSON.stringify(v.text)}`, () => {
      const got = observationViolation(v.text);
      if (v.observation) return got === null ? true : `refused (${got.rule}: ${JSON.stringify(got.matched)})`;
      if (got === null) return `accepted, want ${v.rule}`;
      return same(got.rule, v.rule);
    });
  });
}

function checkCommons(commons) {
  const file = "commons.json";
  const seen = { lesson: new Set(), attestation: new Set(), revocation: new Set(), vouch: new Set() };
  for (const v of commons.vectors) {
    const records = v.records.map(unhex);
    const types = new Map(records.map((b) => [hex(recordId(b)), cborDecode(b).get("type")]));
    check(file, `${v.name}: every record valid`, () => {
      // no clock in the commons: validate at the latest created, so clock skew never applies
      const now = Number(records.map((b) => cborDecode(b).get("created")).reduce((a, b) => (a > b ? a : b)));
      records.forEach((b) => validateRecord(b, { now, maxSkew: 0 }));
      return true;
    });
    const run = (order) => commonsStatuses(v.config, order);
    const orders = [records, [...records].reverse(), [...records.slice(1), ...records.slice(0, 1)]];
    orders.forEach((order, k) => {
      check(file, `${v.name} (order ${k})`, () => {
        const got = run(order);
        const wrong = Object.entries(v.statuses).filter(([id, s]) => got.get(id) !== s);
        if (got.size !== Object.keys(v.statuses).length) return `${got.size} statuses for ${Object.keys(v.statuses).length} records`;
        return wrong.length === 0 ? true : wrong.map(([id, s]) => `${types.get(id)} ${id.slice(0, 12)}: got ${got.get(id)}, want ${s}`).join("; ");
      });
    });
    for (const [id, s] of Object.entries(v.statuses)) seen[types.get(id)].add(s);
  }
  const all = {
    lesson: ["candidate", "common", "faded", "revoked"],
    attestation: ["counted", "not-counted", "pending", "revoked"],
    revocation: ["effective", "no-effect", "pending"],
    vouch: ["effective", "no-effect", "revoked"],
  };
  for (const [t, list] of Object.entries(all)) {
    check(file, `every ${t} status reached`, () => same([...seen[t]].sort().join(","), [...list].sort().join(",")));
  }
}

function describe(ranges) {
  return ranges.map((r) => {
    const o = { bound: r.bound === END ? "end" : hex(r.bound), mode: r.mode };
    if (r.fingerprint) o.fingerprint = hex(r.fingerprint);
    if (r.ids) o.ids = r.ids.map(hex);
    return o;
  });
}

function fromDescription(ranges) {
  return ranges.map((r) => {
    const o = { bound: r.bound === "end" ? END : unhex(r.bound), mode: r.mode };
    if (r.fingerprint !== undefined) o.fingerprint = unhex(r.fingerprint);
    if (r.ids !== undefined) o.ids = r.ids.map(unhex);
    return o;
  });
}

function checkSync(sync) {
  const file = "sync.json";
  sync.fingerprints.forEach((f, i) => {
    check(file, `fingerprint #${i} (${f.ids.length} ids)`, () => same(hex(fingerprint(f.ids.map(unhex))), f.fingerprint));
  });
  sync.messages.forEach((m, i) => {
    check(file, `message #${i} encodes`, () => same(hex(encodeMessage(fromDescription(m.ranges))), m.hex));
    check(file, `message #${i} decodes`, () => {
      const atResponder = !m.ranges.some((r) => r.mode === "missing");
      return same(JSON.stringify(describe(decodeMessage(unhex(m.hex), { atResponder }))), JSON.stringify(m.ranges));
    });
  });
  checkTranscript(file, "reconciliation", sync.reconciliation, MAX_MESSAGE_SEND);
  checkTranscript(file, "limit", sync.limit, sync.limit.max_message_bytes);
  check(file, "limit: a message reaches max_message_bytes exactly", () => {
    const sizes = sync.limit.transcript.flatMap((t) => [t.initiator.length / 2, t.responder.length / 2]);
    return same(Math.max(...sizes), sync.limit.max_message_bytes);
  });
  const role = (v) => ({ atResponder: v.at === "responder" });
  for (const v of sync.invalid_messages) {
    check(file, `invalid message ${v.name} (${v.check}) at the ${v.at}`, () => {
      try {
        decodeMessage(messageBytes(v), role(v));
      } catch (e) {
        if (e instanceof SyncError) return same(e.code, v.error);
        throw e;
      }
      return `accepted, want ${v.error}`;
    });
  }
  for (const v of sync.valid_messages) {
    check(file, `valid message ${v.name} at the ${v.at}`, () => {
      const buf = messageBytes(v);
      if (buf.length !== v.bytes) return `${buf.length} bytes, want ${v.bytes}`;
      const ranges = decodeMessage(buf, role(v));
      if (!encodeMessage(ranges).equals(buf)) return "does not re-encode to its bytes";
      return same(ranges.length, v.ranges);
    });
  }
}

// A message given as `hex`, or as `build` (sync.json's description): hex strings and counters
function messageBytes(v) {
  if (v.hex !== undefined) return unhex(v.hex);
  const parts = [];
  for (const item of v.build) {
    if (typeof item === "string") {
      parts.push(unhex(item));
      continue;
    }
    const c = item.counter;
    for (let i = c.from; i < c.from + c.count; i++) {
      parts.push(unhex(c.prefix), leBytes(BigInt(i), c.width).reverse(), unhex(c.suffix));
    }
  }
  return Buffer.concat(parts);
}

function checkTranscript(file, name, rec, maxBytes) {
  const ini = rec.initiator_ids.map(unhex).sort(compareBytes);
  const res = rec.responder_ids.map(unhex).sort(compareBytes);
  // the responder: answer each initiator message of the transcript
  rec.transcript.forEach((t, i) => {
    check(file, `${name} round ${i + 1}: responder's answer`, () => {
      const received = decodeMessage(unhex(t.initiator), { atResponder: true });
      const reply = encodeMessage(answer(res, received, "responder", null, maxBytes));
      if (reply.length > maxBytes) return `${reply.length} bytes, over ${maxBytes}`;
      return same(hex(reply), t.responder);
    });
  });
  // the initiator: run the whole exchange against our responder
  check(file, `${name}: initiator's messages and need`, () => {
    const lacks = [];
    let msg = firstMessage(ini);
    const sent = [];
    for (let round = 0; round < 64; round++) {
      sent.push(hex(encodeMessage(msg)));
      const reply = answer(res, decodeMessage(encodeMessage(msg), { atResponder: true }), "responder", null, maxBytes);
      msg = answer(ini, decodeMessage(encodeMessage(reply), { atResponder: false }), "initiator", lacks, maxBytes);
      if (allSkip(msg)) break;
    }
    const want = rec.transcript.map((t) => t.initiator);
    if (sent.join() !== want.join()) return `initiator messages differ from the transcript (${sent.length} sent, ${want.length} in the transcript)`;
    return same([...new Set(lacks.map(hex))].sort().join(","), [...rec.need].sort().join(","));
  });
  check(file, `${name}: need is what the responder has and the initiator lacks`, () => {
    const have = new Set(ini.map(hex));
    return same(res.map(hex).filter((x) => !have.has(x)).join(","), [...rec.need].sort().join(","));
  });
}

// ---- domains (PROTOCOL.md "Topics") -----------------------------------------------------

function domainTables() {
  const table = {};
  for (const line of protocolNumbered("domains")) {
    const [domain, ...programs] = line.split(" ");
    table[domain] = programs;
  }
  const wrappers = new Set(protocolNumbered("domain-wrappers")[0].split(" "));
  return { table, wrappers };
}

function programOf(word) {
  const name = word.slice(word.lastIndexOf("/") + 1).toLowerCase();
  const m = /^(python|pip|node|ruby|java|go|gcc|g\+\+|clang)-?\d+(\.\d+)*$/.exec(name);
  return m ? m[1] : name;
}

// a claim's situation -> its domains, sorted ("general" when none)
function domainsOf(situation, { table, wrappers }) {
  const ecosystem = new Map();
  for (const [domain, programs] of Object.entries(table)) for (const p of programs) ecosystem.set(p, domain);
  const found = new Set();
  const heads = isTool(situation) ? [] : situation.split(" && ");
  for (const head of heads) {
    for (const word of head.split(" ").filter((w) => w)) {
      if (word.includes("=") && !word.startsWith("=")) continue;
      const program = programOf(word);
      if (wrappers.has(program)) continue;
      if (ecosystem.has(program)) found.add(ecosystem.get(program));
      break;
    }
  }
  return found.size ? [...found].sort() : ["general"];
}

function domainTopics(type, domains) {
  return [...domains].sort().map((d) => (d === "general" ? `/openmemory/1/${type}` : `/openmemory/1/${type}/${d}`));
}

function checkDomains(dv) {
  const file = "domains.json";
  const tables = domainTables();
  check(file, "PROTOCOL.md's domain table is the vectors'", () => same(JSON.stringify(tables.table), JSON.stringify(dv.table)));
  check(file, "PROTOCOL.md's wrappers are the vectors'", () => same(JSON.stringify([...tables.wrappers].sort()), JSON.stringify(dv.wrappers)));
  dv.vectors.forEach((v) => {
    check(file, `domains of ${JSON.stringify(v.situation)}`, () => same(JSON.stringify(domainsOf(v.situation, tables)), JSON.stringify(v.domains)));
    check(file, `topics of ${JSON.stringify(v.situation)}`, () =>
      same(JSON.stringify([domainTopics("lesson", v.domains), domainTopics("attestation", v.domains)]),
        JSON.stringify([v.lesson_topics, v.attestation_topics])));
  });
}

// ----------------------------------------------------------------------------------------

function main() {
  const FILES = ["valid.json", "invalid.json", "json.json", "claims.json", "domains.json", "dedup.json", "observation.json", "commons.json", "sync.json", "worked-example.txt", "PROTOCOL.md"];
  let missing = 0;
  try {
    const ex = checkProtocolLists();
    const valid = load("valid.json");
    checkWorkedExample(ex, valid);
    checkValid(valid);
    checkInvalid(load("invalid.json"));
    checkJson(load("json.json"));
    checkClaims(load("claims.json"));
    checkDomains(load("domains.json"));
    checkDedup(load("dedup.json"));
    checkObservation(load("observation.json"));
    checkCommons(load("commons.json"));
    checkSync(load("sync.json"));
  } catch (e) {
    console.log(`ERROR: ${e.stack || e}`);
    missing++;
  }

  let passed = 0;
  let failed = 0;
  for (const f of FILES) {
    const r = results.get(f);
    if (!r) {
      console.log(`${f}: not checked`);
      missing++;
      continue;
    }
    console.log(`${f}: ${r.passed} passed, ${r.failed} failed`);
    passed += r.passed;
    failed += r.failed;
  }
  console.log(`TOTAL: ${passed} passed, ${failed} failed, ${results.size} files`);
  process.exitCode = failed === 0 && missing === 0 ? 0 : 1;
}

// --claims-eval FILE: for each string of a JSON array, what the claim rules say of it, as one
// JSON array per line: [command form, unsafe row, marker row, text key, command key, parse]
// (tests/wire/test_js_verifier.py compares it with the reference implementation).
function claimsEval(file) {
  const items = JSON.parse(fs.readFileSync(file, "utf8"));
  const lines = items.map((t) => JSON.stringify([commandForm(t), unsafeRow(t), markerRow(t), textKey(t), commandKey(t), parseClaim(t)]));
  process.stdout.write(lines.join("\n") + "\n");
}

if (args.includes("--unicode-dump")) unicodeDump();
else if (args.includes("--claims-eval")) claimsEval(argValue("--claims-eval", null));
else main();
