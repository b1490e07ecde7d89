"""What the word-piece encoders share (MiniLM in numpy or onnxruntime, e5): the
texts-to-rows loop around a tokenizer and a forward pass, and the padding of a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from lookback.embedders.port import check_texts

#: Characters of a text handed to a word-piece tokenizer: far more than a 256-piece
#: window, while sparing the tokenizer a megabyte-long tool output.
MAX_TOKENIZER_CHARS = 10_000

#: Characters per chunk for a 256-piece window: code and tool output are dense (often
#: two characters per piece), and 500 fits 99% of the fixtures' real chunks
#: (:mod:`lookback.index.chunking`, whose default this is).
WINDOW_CHUNK_CHARS = 500


class Pieces(Protocol):
    """One text's word pieces (a ``tokenizers.Encoding``, or e5's own)."""

    @property
    def ids(self) -> list[int]: ...


class WordPieceTokenizer(Protocol):
    """What the encoders need of a tokenizer (a ``tokenizers.Tokenizer``, or e5's
    :class:`lookback.embedders.e5.UnigramPieces`)."""

    def encode_batch(self, input: list[str], /) -> Sequence[Pieces]: ...


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """L2-normalise each row in place (all-zero rows stay zero) and return float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return matrix


def embed_word_pieces(
    texts: Sequence[str],
    dimensions: int,
    tokenizer: WordPieceTokenizer,
    batches: Callable[[list[int]], list[list[int]]],
    forward: Callable[[list[list[int]]], np.ndarray],
) -> np.ndarray:
    """The embed() of the word-piece encoders.

    ``batches`` groups positions by their token counts; ``forward`` maps one batch of
    token id lists to pooled rows. Blank texts get zero rows; the result is L2-normalised float32.
    """
    items = check_texts(texts)
    matrix = np.zeros((len(items), dimensions), dtype=np.float32)
    wanted = [index for index, text in enumerate(items) if text.strip()]
    if not wanted:
        return matrix
    pieces = token_ids(tokenizer, [items[i] for i in wanted])
    for batch in batches([len(ids) for ids in pieces]):
        matrix[[wanted[position] for position in batch]] = forward(
            [pieces[position] for position in batch])
    return normalize_rows(matrix)


def token_ids(tokenizer: WordPieceTokenizer, texts: list[str]) -> list[list[int]]:
    """The word-piece ids an encoder reads for each text (its first
    ``MAX_TOKENIZER_CHARS`` characters, then the tokenizer's own truncation)."""
    return [pieces.ids for pieces in tokenizer.encode_batch(
        [text[:MAX_TOKENIZER_CHARS] for text in texts])]


def pad_token_ids(token_ids: list[list[int]], mask_dtype: type,
                  ids_dtype: type = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mask) of one batch, right-padded with zeros to its longest member."""
    length = max(len(ids) for ids in token_ids)
    ids: np.ndarray = np.zeros((len(token_ids), length), dtype=ids_dtype)
    mask: np.ndarray = np.zeros((len(token_ids), length), dtype=mask_dtype)
    for row, row_ids in enumerate(token_ids):
        ids[row, : len(row_ids)] = row_ids
        mask[row, : len(row_ids)] = 1
    return ids, mask
