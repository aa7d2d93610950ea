"""The local model asked about every message of the held-out correction sets, not only the
borderline ones: its probability of "yes" read from the next token's logits (not its text).

Prints, per held-out set, precision and recall of the rule, of the model alone (P(yes) > 0.5),
of "the rule or the model" and of "the rule and the model". Needs the ``agent-lm`` extra and the
model (``python -m simulations.lm fetch``; ``$OPENMEMORY_LM_MODEL`` names another GGUF). About
10 s a message on a loaded 2-core machine.

    python benchmarks/corrections_lm_all.py
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import corrections as bench  # noqa: E402  (beside this script)
from labelled import correction_parts  # noqa: E402
from openmemory_local.ingest.corrections import decide  # noqa: E402
from openmemory_local.ingest.corrections_lm import MODEL_ENV, question  # noqa: E402

DEFAULT_MODEL = Path.home() / ".cache/openmemory/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def main() -> int:
    try:
        import llama_cpp
    except ImportError:
        print("skipped: the agent-lm extra (llama-cpp-python) is not installed: pip install -e '.[agent-lm]'")
        return 0
    path = Path(os.environ.get(MODEL_ENV) or DEFAULT_MODEL)
    if not path.is_file():
        print(f"skipped: no model at {path} (python -m simulations.lm fetch, or ${MODEL_ENV})")
        return 0
    # logits_all: llama-cpp-python keeps the logits of the last position only when asked to (else scores
    # stay zero and every P(yes) reads 0.5)
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_threads=2, verbose=False, logits_all=True)
    yes = [llm.tokenize(w, add_bos=False)[0] for w in (b" yes", b" Yes")]
    no = [llm.tokenize(w, add_bos=False)[0] for w in (b" no", b" No")]

    def p_yes(turn) -> float:
        llm.reset()
        llm.eval(llm.tokenize(question(turn).encode()))
        logits = llm.scores[llm.n_tokens - 1]
        top = max(logits[t] for t in yes + no)
        y = sum(math.exp(logits[t] - top) for t in yes)
        n = sum(math.exp(logits[t] - top) for t in no)
        return y / (y + n)

    for title, status, cases in correction_parts():
        if not status.startswith("HELD-OUT"):
            continue
        rows = [(c["correction"], decide(bench._turn(c)) is not None, p_yes(bench._turn(c))) for c in cases]
        print(f"{title} [{status}], {len(rows)} messages:")
        for name, pred in (("rule", lambda r, p: r), ("model alone, P(yes) > 0.5", lambda r, p: p > 0.5),
                           ("rule or model", lambda r, p: r or p > 0.5), ("rule and model", lambda r, p: r and p > 0.5)):
            tp = sum(1 for g, r, p in rows if g and pred(r, p))
            fp = sum(1 for g, r, p in rows if not g and pred(r, p))
            fn = sum(1 for g, r, p in rows if g and not pred(r, p))
            print(f"  {name:28s} precision {tp / (tp + fp) if tp + fp else 0:.2f}  recall {tp / (tp + fn) if tp + fn else 0:.2f}"
                  f"  (tp {tp}, fp {fp}, fn {fn})")
        print(f"  P(yes): max {max(p for _, _, p in rows):.2f}, median {sorted(p for _, _, p in rows)[len(rows) // 2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
