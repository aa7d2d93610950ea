#!/usr/bin/env python3
"""The commons form's allow-list (``openmemory_local.text.redact.commons_scrub``) on real failures.

    python benchmarks/redaction.py [--data ../shared/data] [--project spotter] [--examples 12] [--json]

Reads the real Claude Code transcripts of one project (``DATA/claude-code/PROJECT``, default
spotter), takes every failed tool call (a tool result marked as an error): its failure line as
the engine picks it (``episodes.first_meaningful_line``), the Bash command and its program heads
(``episodes.command_heads``). Each is scrubbed twice with the identity publish would gather from
the transcript (the user of the home folder, the project's folder names, the git branch):

* before: :func:`scrub` alone (the deny-list: this machine's names, secrets, paths);
* after: :func:`commons_scrub` (scrub, then the allow-list).

Printed, per part (failure, command, situation): how many texts, the share of their words that
became a placeholder before and after, the share of texts the allow-list left as scrub left them
(unchanged: every word allowed), the share that keep at least 80 % of their words, the words the
allow-list replaced most often (so a missing public word shows), the time per text, and
--examples pairs of lines (before -> after). The machine is shared: times are indicative.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from openmemory_local.ingest.episodes import command_heads, first_meaningful_line  # noqa: E402
from openmemory_local.text.redact import Identity, commons_scrub, project_names, scrub, users_in_path  # noqa: E402

_PLACEHOLDER = re.compile(r"<[a-z]+>")


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(c.get("text") or "") for c in content if isinstance(c, dict))
    return ""


def failures(folder: Path):
    """(identity, tool, failure line, command or None) of every failed tool call under ``folder``."""
    for path in sorted(folder.rglob("*.jsonl")):
        calls: dict[str, tuple[str, dict]] = {}
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            message = record.get("message") if isinstance(record, dict) else None
            content = message.get("content") if isinstance(message, dict) else None
            if not isinstance(content, list):
                continue
            for item in content:
                if not isinstance(item, dict):
                    continue
                if item.get("type") == "tool_use":
                    calls[item.get("id")] = (item.get("name") or "", item.get("input") or {})
                elif item.get("type") == "tool_result" and item.get("is_error"):
                    tool, args = calls.get(item.get("tool_use_id"), ("", {}))
                    first = first_meaningful_line(_text(item.get("content")), tool=tool)
                    if first:
                        yield _identity(record), tool, first, (args.get("command") if tool == "Bash" else None)


def _identity(record: dict) -> Identity:
    cwd = record.get("cwd") or ""
    user = users_in_path(cwd)
    family = None
    m = re.match(r"^(.*-worktrees)/[^/]+", cwd)
    if m:
        family = m.group(1) + "/*"
    branch = record.get("gitBranch")
    return Identity(users=(user,) if user else (), homes=(), family=family, projects=(cwd,) if cwd else (),
                    names=project_names([cwd], family, [user] if user else []),
                    branches=(branch,) if branch and branch != "HEAD" else ())


def _words(text: str) -> list[str]:
    return text.split()


def measure(texts: list[tuple[Identity, str]], part: str) -> dict:
    before_words = before_ph = after_ph = unchanged = kept80 = 0
    replaced: Counter = Counter()
    pairs = []
    started = time.perf_counter()
    for ident, text in texts:
        before = scrub(text, ident)
        after, findings = commons_scrub(text, ident, part)
        words_before, words_after = _words(before), _words(after)
        before_words += len(words_before)
        before_ph += sum(1 for w in words_before if _PLACEHOLDER.search(w))
        after_ph += sum(1 for w in words_after if _PLACEHOLDER.search(w))
        if after == before:
            unchanged += 1
        new = sum(1 for a, b in zip(words_after, words_before) if a != b)
        if not words_before or new <= 0.2 * len(words_before):
            kept80 += 1
        for a, b in zip(words_after, words_before):
            if a != b:
                replaced[re.sub(r"[^\w.-]", "", b)[:40]] += 1
        pairs.append((before, after))
    elapsed = time.perf_counter() - started
    n = len(texts) or 1
    return {
        "part": part, "texts": len(texts), "words": before_words,
        "placeholder_words_before": round(before_ph / max(before_words, 1), 3),
        "placeholder_words_after": round(after_ph / max(before_words, 1), 3),
        "unchanged_by_allow_list": round(unchanged / n, 3),
        "keep_80_percent_of_words": round(kept80 / n, 3),
        "most_replaced": replaced.most_common(15),
        "ms_per_text": round(1000 * elapsed / n, 3),
        "pairs": pairs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("OPENMEMORY_TEST_DATA", str(ROOT.parent / "shared" / "data")))
    parser.add_argument("--project", default="spotter")
    parser.add_argument("--examples", type=int, default=12)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = Path(args.data) / "claude-code" / args.project
    if not folder.is_dir():
        sys.exit(f"no transcripts in {folder}")
    found = list(failures(folder))
    commons_scrub("warm up the lists", Identity(), "failure")
    parts = {
        "failure": [(i, f) for i, _, f, _ in found],
        "command": [(i, c) for i, _, _, c in found if c],
        "situation": [(i, " && ".join(command_heads(c))) for i, _, _, c in found if c and command_heads(c)],
    }
    results = [measure(texts, part) for part, texts in parts.items()]
    if args.json:
        print(json.dumps([{k: v for k, v in r.items() if k != "pairs"} for r in results], indent=2))
        return
    print(f"real transcripts: {folder} ({len(found)} failed tool calls)")
    for r in results:
        print(f"\n{r['part']}: {r['texts']} texts, {r['words']} words")
        print(f"  words that are placeholders: before (scrub) {r['placeholder_words_before']:.1%}, "
              f"after (commons_scrub) {r['placeholder_words_after']:.1%}")
        print(f"  texts the allow-list left unchanged: {r['unchanged_by_allow_list']:.1%}; "
              f"texts keeping >= 80% of their words: {r['keep_80_percent_of_words']:.1%}")
        print(f"  replaced most often: {', '.join(f'{w} ({c})' for w, c in r['most_replaced'])}")
        print(f"  {r['ms_per_text']} ms per text")
    failure = results[0]
    shown = [p for p in failure["pairs"] if p[0] != p[1]][: args.examples]
    if shown:
        print(f"\nexamples (failure lines the allow-list changed, {len(shown)}):")
        for before, after in shown:
            print(f"  - {before[:160]}\n    {after[:160]}")
    upstream = [p for p in failure["pairs"] if "has no upstream branch" in p[0]]
    for before, after in upstream[:1]:
        print(f"\nthe git push no-upstream line:\n  before: {before}\n  after:  {after}")


if __name__ == "__main__":
    main()
