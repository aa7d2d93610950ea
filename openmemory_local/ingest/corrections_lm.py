"""The local model as a second opinion on borderline corrections (issue 32, optional, off by default).

The rule (:mod:`openmemory_local.ingest.corrections`) leaves one kind of message undecided: the agent
redid the very work the message refers to, and the message reads as asking for more on it ("make
it sticky on scroll"), though it may be a correction phrased so ("make it 2px, 4 is too heavy").
Without a second opinion such a message is not a correction. With one, :func:`load` gives a callable for
:func:`openmemory_local.ingest.corrections.decide`'s ``opinion``: a small instruction model, run locally
through llama-cpp-python (the ``agent-lm`` extra; a GGUF file named by ``OPENMEMORY_LM_MODEL``),
asked one yes/no question and read greedily. :func:`load` returns None, and the rule decides
alone, when the extra or the model file is absent: nothing here is required.

    python benchmarks/corrections.py --second-opinion   # figures with and without it
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from openmemory_local.ingest.corrections import Turn

__all__ = ["load", "question"]

MODEL_ENV = "OPENMEMORY_LM_MODEL"


def question(turn: Turn) -> str:
    """The one question put to the model (pure: what it reads is only the turn)."""
    did = "; ".join(f"{a.get('tool')} {str(a.get('command') or '')[:80]}" for a in list(turn.before)[-3:])
    after = "; ".join(f"{a.get('tool')} {str(a.get('command') or '')[:80]}" for a in list(turn.after or ())[:3])
    return (
        "A coding agent did this: " + did + ".\n"
        "It said: " + (turn.agent_said or "")[:300] + "\n"
        "The person then wrote: " + turn.message[:400] + "\n"
        "The agent then did: " + after + "\n"
        "Did the person say that what the agent had just done was wrong or unwanted (a correction), "
        "rather than ask for something new? Answer yes or no.\nAnswer:")


def load(model_path: str | os.PathLike | None = None) -> Callable[[Turn], bool] | None:
    """A second opinion from the local model, or None when the ``agent-lm`` extra or the model is absent."""
    try:
        import llama_cpp  # the agent-lm extra
    except ImportError:
        return None
    path = Path(model_path or os.environ.get(MODEL_ENV, ""))
    if not str(path) or not path.is_file():
        return None
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=1024, n_threads=2, verbose=False)

    def opinion(turn: Turn) -> bool:
        out = llm(question(turn), max_tokens=2, temperature=0.0)
        return out["choices"][0]["text"].strip().lower().startswith("y")

    return opinion
