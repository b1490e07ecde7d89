"""The EmbeddingPort: how the retrieval engine turns text into vectors.

Semantic retrieval is opt-in (``semantic: true``) and never authoritative:
exact and FTS hits decide first, vectors only add and reorder ``other``
candidates (see :mod:`lookback.query.semantic.fusion`). So everything here is
built to fail loudly and early with :class:`EmbeddingUnavailable`, which the
engine turns into "lexical results plus a warning".

An embedder is an :class:`EmbeddingPort`: a ``name``, a ``dimensions`` count,
a ``chunk_chars`` size and an ``embed`` method, with ``embed_queries`` and
``max_chunks`` declared here too (with their defaults), so callers never probe
for them. The ones that ship are in :mod:`lookback.embedders.registry`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from lookback.errors import Unavailable


class EmbeddingError(Unavailable, RuntimeError):
    """Embedding failed; the caller should fall back to lexical retrieval."""

    code = "embedding-failed"


class EmbeddingUnavailable(EmbeddingError):
    """The requested embedder cannot be used here (unknown name, missing extra, bad weights)."""

    code = "embedder-unavailable"


class EmbeddingPort(ABC):
    """What the retrieval engine needs from an embedding model.

    ``name`` identifies the model *and* its version, so stored vectors made
    by another model or an older version are never compared with new ones.
    ``embed`` returns a float32 array of shape ``(len(texts), dimensions)``
    whose rows are L2-normalised, so a dot product is the cosine similarity.
    A text with no usable features (e.g. empty) gets an all-zero row, which
    is similar to nothing.

    Questions are embedded with ``embed_queries``, which is ``embed`` unless an
    embedder overrides it: then ``embed`` is for the stored chunks only, and the dot
    product of a query row with a chunk row is the similarity; the rows need not be
    unit (:mod:`lookback.embedders.e5` maps a cosine affinely, which needs a negative
    constant that equal rows cannot give).
    """

    name: str
    dimensions: int
    #: Entries are embedded in chunks of at most this many characters (see
    #: :mod:`lookback.index.chunking`): a model's input window, or more for models
    #: without one.
    chunk_chars: int
    #: Only an entry's first that many chunks are embedded (None: all of them;
    #: :func:`lookback.index.embeddings.embed_entries`); when set it must be part of
    #: ``name``, since it changes what is stored.
    max_chunks: int | None = None

    @abstractmethod
    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Rows for stored chunks (and for questions, unless ``embed_queries`` differs)."""

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Rows for questions: the same as :meth:`embed` unless an embedder says otherwise."""
        return self.embed(texts)


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

