"""The local model asked about every message of the labelled correction sets, not only the
borderline ones: its probability of "yes" read from the next token's logits (not its text).

Two ways of asking:

* zero-shot (the default): :func:`openmemory_local.ingest.corrections_lm.question` about every
  message of the held-out sets; prints precision and recall of the rule, of the model alone
  (P(yes) > 0.5), of "the rule or the model" and of "the rule and the model".
* ``--few-shot`` (issue 32, set K): the model's chat template, a system line saying what a
  correction is and is not, and ten labelled examples from in-sample sets (A, D, H: ``SHOTS``,
  left out of the figures), then the agent's statement and the person's reply only (the tool
  calls made it worse: ``--with-calls`` adds them, and a content-free baseline, the same turn with
  the message "N/A", whose logit is subtracted). Prints per set the AUC of logit P(yes) vs P(no),
  the model alone (logit > 0), the rule, and the two ways of combining them fixed on the in-sample
  sets before set K was scored: *rescue* (the model decides where the calls after are unknown or
  the rule leaves the message borderline: yes when the logit > 1.0) and *rescue + veto* (also: a
  yes of the rule's words alone, not of a strong cue or a course change, is dropped when the
  logit < 0). ``--sets G,J,K`` limits the sets (about 2.5 s a message on one thread).

Needs the ``agent-lm`` extra and the model (``python -m simulations.lm fetch``;
``$OPENMEMORY_LM_MODEL`` names another GGUF). One thread (``n_threads=1``): the machine is shared.

    python benchmarks/corrections_lm_all.py [--few-shot [--with-calls] [--sets A,B,...]]
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
from openmemory_local.ingest.corrections import _decide, decide  # noqa: E402
from openmemory_local.ingest.corrections_lm import MODEL_ENV, question  # noqa: E402

DEFAULT_MODEL = Path.home() / ".cache/openmemory/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"

SYSTEM = ("You read a moment of a coding session between a person and a coding agent. Decide whether the "
          "person's message is a correction: it says that what the agent had just done or said was wrong, "
          "unwanted, or did not work. These are not corrections: asking for more or for something new, "
          "answering the agent's question, praise or thanks, a reminder of a step not yet taken, a bug report "
          "about the product, a question. Answer yes or no.")
#: The examples (in-sample sets A, D, H), alternating corrections and not.
SHOTS = ("heldout-06", "heldout-20", "heldout-d-16", "heldout-34", "heldout-h-14", "heldout-h-30",
         "heldout-h-03", "heldout-27", "heldout-01", "heldout-h-28")
#: Cues that come from a strong phrase or from the course change (a veto never drops them).
STRUCTURAL = frozenset(("rejected", "restated", "why", "omitted", "reminder", "undo", "wrong", "changed"))
RESCUE, VETO = 1.0, 0.0  # fixed on the in-sample sets before set K was scored


def _calls(actions) -> str:
    if actions is None:
        return "(not known)"
    return "; ".join(f"{a['tool']} {a['command'][:80]}" for a in actions[:3]) or "(no tool calls)"


def shown(case: dict, with_calls: bool, message: str | None = None) -> str:
    """One turn as the few-shot prompt shows it."""
    said = (case.get("agent_said") or "")[:300]
    text = case["message"][:400] if message is None else message
    if not with_calls:
        return (f"The agent said: {said}\nThe person replied: {text}\n"
                "Does the person say the agent's work was wrong or unwanted?")
    return (f"The agent ran: {_calls(case.get('actions') or [])}\nThe agent said: {said}\n"
            + ("(The person interrupted the agent.)\n" if case.get("interrupted") else "")
            + f"The person wrote: {text}\nThe agent then ran: {_calls(case.get('after'))}\n"
            f"The agent then said: {(case.get('after_said') or '(not known)')[:200]}\n"
            "Is the person's message a correction?")


def _turn(role: str, text: str) -> str:
    return f"<|im_start|>{role}\n{text}<|im_end|>\n"


def _auc(rows) -> float:
    pos = [s for g, _, s in rows if g]
    neg = [s for g, _, s in rows if not g]
    if not pos or not neg:
        return float("nan")
    return sum((p > n) + 0.5 * (p == n) for p in pos for n in neg) / (len(pos) * len(neg))


def _line(name, rows, pred) -> str:
    """Precision and recall of ``pred`` over ``rows`` (each row's first item: whether it is a
    correction), counted as benchmarks/corrections.py counts them."""
    tp, fp, fn, _ = bench.scores([{"correction": r[0], "row": r} for r in rows], lambda c: pred(c["row"]))
    p = f"{tp / (tp + fp):.2f}" if tp + fp else " -  "
    rc = f"{tp / (tp + fn):.2f}" if tp + fn else " -  "
    return f"  {name:34s} precision {p}  recall {rc}  (tp {tp}, fp {fp}, fn {fn})"


def few_shot(llm, with_calls: bool, sets: list[str] | None) -> int:
    import llama_cpp  # noqa: F401

    parts = correction_parts()
    by_session = {c["session"]: c for _, _, cases in parts for c in cases if c.get("session")}
    prefix = _turn("system", SYSTEM) + "".join(
        _turn("user", shown(by_session[s], with_calls)) + _turn("assistant", "yes" if by_session[s]["correction"]
                                                                 else "no") for s in SHOTS)
    yes = [llm.tokenize(w, add_bos=False)[0] for w in (b"yes", b"Yes")]
    no = [llm.tokenize(w, add_bos=False)[0] for w in (b"no", b"No")]
    llm.reset()
    llm.eval(llm.tokenize(prefix.encode(), add_bos=False, special=True))
    kept = llm.n_tokens

    def logit(text: str) -> float:
        llm._ctx.kv_cache_seq_rm(-1, kept, -1)  # keep the examples' cache, drop the last question
        llm.n_tokens = kept
        llm.eval(llm.tokenize((_turn("user", text) + "<|im_start|>assistant\n").encode(), add_bos=False, special=True))
        scores = llm.scores[llm.n_tokens - 1]
        top = max(scores[t] for t in yes + no)
        return math.log(sum(math.exp(scores[t] - top) for t in yes) / sum(math.exp(scores[t] - top) for t in no))

    for title, status, cases in parts:
        name = title.split(",")[0].replace("synthetic ", "")
        if sets and name not in sets:
            continue
        rows = []
        for c in cases:
            if c.get("session") in SHOTS:
                continue
            score = logit(shown(c, with_calls))
            if with_calls:
                score -= logit(shown(c, with_calls, "N/A"))  # the content-free baseline of this turn
            cue = _decide(bench._turn(c))
            rows.append((c["correction"], (cue, c.get("after") is None), score))

        def rule(r):
            return r[1][0] not in (None, "borderline")

        def rescue(r):
            cue, unknown = r[1]
            return rule(r) or ((unknown or cue == "borderline") and r[2] > RESCUE)

        def veto(r):
            cue = r[1][0]
            if rule(r) and cue not in STRUCTURAL:
                return r[2] > VETO
            return rescue(r)

        print(f"{title} [{status}], {len(rows)} messages (examples left out): AUC {_auc(rows):.2f}")
        print(_line("the rule", rows, rule))
        print(_line("the model alone (logit > 0)", rows, lambda r: r[2] > 0))
        print(_line(f"rule + model rescue (> {RESCUE})", rows, rescue))
        print(_line(f"rule + rescue + veto (< {VETO})", rows, veto), flush=True)
    return 0


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
    args = sys.argv[1:]
    # logits_all: llama-cpp-python keeps the logits of the last position only when asked to (else scores
    # stay zero and every P(yes) reads 0.5); one thread, for prompts as for generation
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=4096 if "--few-shot" in args else 1024, n_threads=1,
                          n_threads_batch=1, verbose=False, logits_all=True)
    if "--few-shot" in args:
        sets = args[args.index("--sets") + 1].split(",") if "--sets" in args else None
        return few_shot(llm, "--with-calls" in args, sets)
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
            print(_line(name, rows, lambda row, pred=pred: pred(row[1], row[2])))
        print(f"  P(yes): max {max(p for _, _, p in rows):.2f}, median {sorted(p for _, _, p in rows)[len(rows) // 2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
