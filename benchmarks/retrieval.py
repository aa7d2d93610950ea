"""Retrieval quality on a labelled set of "same surprise" pairs: hashed, learned, BM25, fusion.

    python benchmarks/retrieval.py             # the table (learned: with the `learned` extra)
    python benchmarks/retrieval.py --rebuild   # re-read ../shared/data and rewrite the set
    python benchmarks/retrieval.py --json

The set, ``benchmarks/data/retrieval.json``: every failed tool call (and correction) that the
engine makes of the real transcripts in ``../shared/data/claude-code`` (spotter and the public
fixtures), with its episode text (what recall embeds), its session, its program, and a *surprise*
label given by hand (:data:`LABELS`, keyed by the tool call's id). How it was labelled:

* two failures are the *same surprise* when the memory of the first would have told the agent
  what the second was and what to do: the same cause, whatever the branch, file or session
  (``git push`` with no upstream on three branches; ``Read`` of a folder, in two projects; a
  file too large to ``Read``, by size or by tokens);
* failures that share a reason line but not a cause are left unlabelled, as distractors (the
  LiveView ``Assertion with =~ failed`` of two different tests; ``File does not exist`` for a
  temporary task file and for a guessed test helper);
* a *hard non-pair* of a query is a failure of the same program or tool (``mix test``,
  ``git add``/``git commit``, ``Read``, the file-editing tools) with another surprise or none:
  ``mix test`` failing for ``secret_key_base`` against ``mix test`` failing for ``lazy_html``.

Queries: each labelled failure with the same surprise in another session. The corpus for a query
is every other failure of the set except those of the query's own session (a retry in the same
session is no test of memory). Scores: recall@1/3/10, MRR, and ``confused`` (the share of queries
with a hard non-pair ranked above every relevant item). The figures are deterministic (no timing):
the machine's load does not change them. The learned method is skipped, and said so, without
the ``learned`` extra.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openmemory_local.core.embedders import learned_available  # noqa: E402
from openmemory_local.eval.retrieval import METHODS, rank, score  # noqa: E402

SET = Path(__file__).resolve().parent / "data" / "retrieval.json"
DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "claude-code"

#: tool call id -> surprise (hand labels; see the module docstring).
LABELS = {
    # spotter: `git push` on a new branch, no upstream (gqc, fum, a0y)
    "toolu_01CLY7LZY81zMjsfM27ZmeTa": "git-push-no-upstream",
    "toolu_01PHrH4SU2dMjEnjXufeChoj": "git-push-no-upstream",
    "toolu_011RYZA5XgCaFedsyZMnFcmD": "git-push-no-upstream",
    # spotter: `mix test` without the test configuration's secret_key_base (gqc, fum)
    "toolu_01PLQ59nPMTjqx8bjStFVShk": "mix-test-secret-key-base",
    "toolu_01YRzjaVCfFiyHG4ya1BhC9m": "mix-test-secret-key-base",
    # spotter: `mix test` without lazy_html among the test dependencies (gqc, fum)
    "toolu_013BAZF5AXKjsFLcp6VmcC1x": "mix-test-lazy-html",
    "toolu_01L12wsTg66D1GJZYPqCpGh4": "mix-test-lazy-html",
    # spotter: `git add` of the git-ignored priv/static/assets (fum, a0y)
    "toolu_015FbbF8GZborUDrwHW7ZA82": "git-add-ignored-assets",
    "toolu_01R5H4mAJCm75V8Tuw6DP67V": "git-add-ignored-assets",
    # spotter: the pre-commit hook's formatting check (4te, a0y)
    "toolu_01LbtdVUWbsLDTFPcZ2ShTTy": "pre-commit-format",
    "toolu_01ExXDymFKm57aBfmvtknDW8": "pre-commit-format",
    # spotter: a file too large for Read, by size (0rt) and by tokens (fum)
    "toolu_018TiKA6jnPf9h6xvakcbqCR": "read-too-large",
    "toolu_01QKgHsyMTCzfusHirKBAZNC": "read-too-large",
    # Read of a folder: Demo (public), spotter-fum, spotter (main)
    "toolu_01LmQjk73EEBPeCPZnEoJFE9": "read-a-folder",
    "toolu_01BpA1vfwwr5xWYsSu8M8H3T": "read-a-folder",
    "toolu_01LdecmEM8HVNM6T4ht7x8Gi": "read-a-folder",
    # Demo (public): editing a file not read first, two sessions
    "toolu_019ctBEHhLKehUi4xPDkYwvc": "edit-before-read",
    **{key: "edit-before-read" for key in (
        "toolu_01KomxuRAPQe1GetDWrXmx2V", "toolu_011M1FDmTQAU95dd8BNNteiW", "toolu_01EAqGij3DoXjmkFe395QYPA",
        "toolu_01Hufq5PmqFz31DEYp88JUN5", "toolu_013Eef4xqdxJNqPXe13yeakM", "toolu_01CK5HgKwqNU4viVtF21eESx",
        "toolu_01Xj6j41CPBrtuRzFMy1g8z7", "toolu_01M2nXw1qH4xKove26LBen4X", "toolu_01D31EGdFVQHVhKAbh4MMSNf",
        "toolu_01A6sqAjDv71DW7jVo1Q8pxk", "toolu_017KJGPgs537xQRbTujXTrfr", "toolu_016LtTvdDhRJhJ5Mvm6V7QA5",
        "toolu_01ARH886UKAiM4ZYwhYjUAXH")},
    # the same surprise within one session only (corpus items, never a query's answer)
    "toolu_01NkiH6UJoP8DhVQCaout4Wo": "edit-string-not-found",
    "toolu_01WWrDx5fzMNaU9jDJzyFTBx": "edit-string-not-found",
    **{key: "pre-commit-dialyzer" for key in (
        "toolu_01EGvi6agZyQcoGm6KtR4yjn", "toolu_01UnDE8JfasE2hsBrmFLwa24", "toolu_019MCyZ85iw9xKpwct7zfjuV",
        "toolu_017KTmYsMom3GiceahYbkKJe", "toolu_013pG5nAvZqKznWmBjiRXqVm")},
    **{key: "mix-credo-nested-modules" for key in (
        "toolu_01T3cg25dopHVQv19487bXFt", "toolu_01RB3Va8z3LVp7R1ngNFZuEZ", "toolu_01YcVWUReFzkXfgL36e21Efm")},
    **{key: "npm-build-generate" for key in (
        "toolu_01CSi16ZXnnQne2EuM8ZxNB4", "toolu_01EThVZotbk7xiuWTxGByr79", "toolu_014dpyR6f5VnFfPg7Anv8S34",
        "toolu_01DH2JFs47ZjoYNAsu6HcsL1")},
}

_EDITORS = {"Edit", "MultiEdit", "Write", "NotebookEdit"}


def _programs(ep: dict) -> list[str]:
    from openmemory_local.sleep.situations import subject

    sub = subject(ep)
    if sub["heads"]:
        return sorted(set(sub["heads"]))
    return ["(edit a file)" if sub["tool"] in _EDITORS else sub["tool"]]


def rebuild(data: Path = DATA, out: Path = SET) -> dict:
    """Ingest ``data`` into a throw-away store and write the set (to ``out``) with the hand labels."""
    from datetime import datetime, timezone

    from openmemory_local.core.config import Config
    from openmemory_local.ingest.transcripts import ingest
    from openmemory_local.storage.store import Store

    with tempfile.TemporaryDirectory() as tmp, Store.open(Config(home=Path(tmp) / "home")) as store:
        ingest(store, [data], now=datetime.now(timezone.utc))
        rows = store.episodes(kind=None)
        items = []
        for ep in rows:
            if ep["kind"] not in ("error", "correction"):
                continue
            if ep["kind"] == "error" and ep["fields"].get("failure") == "cancelled":
                continue  # a consequence of another failure, not a surprise
            items.append({
                "key": ep["key"], "kind": ep["kind"], "session": ep["session_id"], "project": ep["project"],
                "created": ep["created"], "programs": _programs(ep) if ep["kind"] == "error" else [],
                "surprise": LABELS.get(ep["key"]), "text": ep["text"],
                "source": f"{Path(ep['source_path'] or '').name}:{ep['source_line']}",
            })
    missing = set(LABELS) - {i["key"] for i in items}
    if missing:
        raise SystemExit(f"labels for tool calls not in the data: {sorted(missing)}")
    result = {"what": "failures of the real transcripts of ../shared/data/claude-code, labelled by surprise by hand "
                      "(see benchmarks/retrieval.py)", "items": items}
    Path(out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return result


def queries(items: list[dict]) -> tuple[list[int], list[set], list[set], list[set]]:
    """Query positions, and per query: the corpus positions excluded (its session), the relevant
    ones (its surprise, other sessions) and the hard non-pairs (its program, another surprise)."""
    qs, exclude, relevant, hard = [], [], [], []
    for q, item in enumerate(items):
        if not item["surprise"]:
            continue
        rel = {i for i, other in enumerate(items) if other["surprise"] == item["surprise"]
               and other["session"] != item["session"]}
        if not rel:
            continue
        qs.append(q)
        exclude.append({i for i, other in enumerate(items) if other["session"] == item["session"]})
        relevant.append(rel)
        hard.append({i for i, other in enumerate(items) if other["session"] != item["session"]
                     and other["surprise"] != item["surprise"] and set(other["programs"]) & set(item["programs"])})
    return qs, exclude, relevant, hard


def measure(items: list[dict], methods=METHODS) -> dict:
    qs, exclude, relevant, hard = queries(items)
    texts = [i["text"] for i in items]
    cache: dict = {}
    out = {}
    for method in methods:
        if method in ("learned", "fusion-all") and not learned_available():
            out[method] = {"skipped": "the `learned` extra is not installed (pip install torch==2.13.0, then "
                                      "pip install -e '.[learned]')"}
            continue
        started = time.perf_counter()
        ranking = rank(method, [texts[q] for q in qs], texts, exclude, cache)
        result = score(ranking, relevant, hard)
        # each surprise weighs the same, however many queries it has (edit-before-read has 14)
        by_surprise: dict[str, list[int]] = {}
        for n, q in enumerate(qs):
            by_surprise.setdefault(items[q]["surprise"], []).append(n)
        per = [score([ranking[n] for n in ns], [relevant[n] for n in ns])["mrr"] for ns in by_surprise.values()]
        result["mrr_by_surprise"] = round(sum(per) / len(per), 4) if per else None
        out[method] = dict(result, seconds=round(time.perf_counter() - started, 2))
    return {"items": len(items), "labelled": sum(1 for i in items if i["surprise"]), "queries": len(qs),
            "surprises": len({i["surprise"] for i in items if i["surprise"]}), "methods": out}


def table(result: dict) -> str:
    lines = [f"{result['items']} failures, {result['labelled']} labelled in {result['surprises']} surprises; "
             f"{result['queries']} queries (the same surprise in another session)", "",
             f"{'method':<12} {'recall@1':>9} {'recall@3':>9} {'recall@10':>10} {'MRR':>7} {'MRR/surprise':>13} "
             f"{'confused':>9} {'s':>6}"]
    for method, r in result["methods"].items():
        if "skipped" in r:
            lines.append(f"{method:<12} skipped: {r['skipped']}")
            continue
        confused = "-" if r.get("confused") is None else f"{r['confused']:.3f}"
        lines.append(f"{method:<12} {r['recall@1']:>9.3f} {r['recall@3']:>9.3f} {r['recall@10']:>10.3f} "
                     f"{r['mrr']:>7.3f} {r['mrr_by_surprise']:>13.3f} {confused:>9} {r['seconds']:>6.2f}")
    lines.append("")
    lines.append("MRR/surprise: the mean over surprises of their queries' MRR. "
                 "confused: share of queries (with a hard non-pair) where a failure of the same program with another "
                 "cause ranks above every relevant one. s: seconds for the method (load included; indicative).")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rebuild", action="store_true", help="re-read ../shared/data and rewrite the set")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    data = rebuild() if args.rebuild else json.loads(SET.read_text(encoding="utf-8"))
    result = measure(data["items"])
    print(json.dumps(result, indent=2) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
