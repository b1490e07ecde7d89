"""HashingEmbedder: a dependency-free, deterministic embedder (numpy only).

Why it exists: semantic retrieval must work on any machine with no model
installed, and the query path must stay sub-millisecond. Feature hashing
("the hashing trick") maps features straight to vector slots, so there is no
vocabulary to load and no state to keep.

Features of a text, after case folding and Latin accent folding
(``"Café"`` -> ``"cafe"``):

- word unigrams (weight ``WORD_WEIGHT``) -- runs of word characters, plus
  each pictographic symbol such as an emoji as its own word;
- word bigrams (``BIGRAM_WEIGHT``) -- keeps a little word order;
- character 3-, 4- and 5-grams of each word with a space as boundary marker
  (``CHAR_WEIGHT``) -- so ``refactor`` / ``refactoring`` and
  ``tui-renderer`` / ``renderer`` share most of their features.

Each feature is hashed with a fixed function (crc32 for words, a polynomial
hash over code points for character n-grams, both finished with murmur3's
``fmix32``), never Python's per-process salted ``hash()``, so vectors are
identical across processes, machines and Python versions. The bucket comes
from the low bits and the sign from the top bit ("signed hashing"), so
collisions cancel out on average instead of piling up.

Change anything that alters the vectors and bump ``HASHING_VERSION``: it is
part of :attr:`HashingEmbedder.name`, which is what stored vectors are keyed by.
"""

from __future__ import annotations

import unicodedata
import zlib
from collections.abc import Sequence

import numpy as np
import regex

from lookback.embedders.port import EmbeddingPort, check_texts

#: Bump when the features, weights or hash functions change.
#: 2: entries are embedded whole up to 2,000 characters (``chunk_chars``), so a
#: query multiplies a quarter of the chunks version 1 had.
HASHING_VERSION = 2

#: No input window: one chunk holds this much of an entry.
HASHING_CHUNK_CHARS = 2000

#: Vector size; a power of two so the bucket is ``hash & (size - 1)``.
DEFAULT_DIMENSIONS = 256

WORD_WEIGHT = 1.0
BIGRAM_WEIGHT = 0.5
CHAR_WEIGHT = 0.3
CHAR_NGRAM_SIZES = (3, 4, 5)

_WORD = regex.compile(r"\w+|\p{So}", regex.VERSION1)
_SPACE = 32
_MULTIPLIER = np.uint32(0x01000193)  # FNV prime: odd, spreads code points
_UNIGRAM_SEED = 0x9E3779B1
_BIGRAM_SEED = 0x85EBCA77
_SIGN_BIT = np.uint32(31)


def fold(text: str) -> str:
    """Casefold and strip Latin accents (NFKD, drop combining marks)."""
    text = text.casefold()
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(char for char in decomposed if not unicodedata.combining(char))


def words_of(text: str) -> list[str]:
    """The folded words of ``text`` (word-character runs and single symbols)."""
    return _WORD.findall(fold(text))


def _fmix32(hashes: np.ndarray) -> np.ndarray:
    """murmur3's finaliser: makes every output bit depend on every input bit."""
    hashes = hashes ^ (hashes >> np.uint32(16))
    hashes = hashes * np.uint32(0x85EBCA6B)
    hashes = hashes ^ (hashes >> np.uint32(13))
    hashes = hashes * np.uint32(0xC2B2AE35)
    mixed: np.ndarray = hashes ^ (hashes >> np.uint32(16))
    return mixed


def _word_hashes(words: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the word unigrams and bigrams."""
    crcs = np.fromiter(
        (zlib.crc32(word.encode("utf-8")) for word in words), dtype=np.uint32, count=len(words)
    )
    unigrams = _fmix32(crcs ^ np.uint32(_UNIGRAM_SEED))
    bigrams = _fmix32((crcs[:-1] * _MULTIPLIER + crcs[1:]) ^ np.uint32(_BIGRAM_SEED))
    return unigrams, bigrams


def _char_ngram_hashes(words: list[str]) -> np.ndarray:
    """Hashes of the character n-grams inside each space-delimited word.

    The words are joined as ``" w1 w2 ... "``; an n-gram is kept when no
    space falls strictly inside it, so it stays within one word but may
    carry the boundary spaces at its ends (like fastText's ``<`` and ``>``).
    """
    padded = " " + " ".join(words) + " "
    codes = np.frombuffer(padded.encode("utf-32-le"), dtype="<u4").astype(np.uint32)
    spaces_before = np.concatenate(([0], np.cumsum(codes == _SPACE)))
    parts = []
    for size in CHAR_NGRAM_SIZES:
        count = len(codes) - size + 1
        if count <= 0:
            continue
        hashes = codes[:count].copy()
        for offset in range(1, size):
            hashes = hashes * _MULTIPLIER + codes[offset : offset + count]
        inner_spaces = spaces_before[size - 1 : size - 1 + count] - spaces_before[1 : 1 + count]
        parts.append(_fmix32(hashes[inner_spaces == 0] ^ np.uint32(size)))
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint32)


class HashingEmbedder(EmbeddingPort):
    """Feature-hashing embedder; see the module docstring for the features."""

    def __init__(self, dimensions: int = DEFAULT_DIMENSIONS) -> None:
        if dimensions < 16 or dimensions & (dimensions - 1):
            raise ValueError(f"dimensions must be a power of two >= 16, got {dimensions}")
        self.dimensions = dimensions
        self.name = f"hashing-v{HASHING_VERSION}-{dimensions}"
        self.chunk_chars = HASHING_CHUNK_CHARS
        self._mask = np.uint32(dimensions - 1)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into L2-normalised float32 rows (zero rows for featureless text)."""
        items = check_texts(texts)
        matrix = np.zeros((len(items), self.dimensions), dtype=np.float32)
        for row, text in enumerate(items):
            matrix[row] = self._embed_one(text)
        return matrix

    def _embed_one(self, text: str) -> np.ndarray:
        words = words_of(text)
        if not words:
            return np.zeros(self.dimensions, dtype=np.float32)
        unigrams, bigrams = _word_hashes(words)
        chars = _char_ngram_hashes(words)
        hashes = np.concatenate((unigrams, bigrams, chars))
        weights = np.concatenate(
            (
                np.full(len(unigrams), WORD_WEIGHT),
                np.full(len(bigrams), BIGRAM_WEIGHT),
                np.full(len(chars), CHAR_WEIGHT),
            )
        )
        signs = 1.0 - 2.0 * (hashes >> _SIGN_BIT)
        vector = np.bincount(
            hashes & self._mask, weights=weights * signs, minlength=self.dimensions
        )
        norm = np.linalg.norm(vector)
        return (vector / norm).astype(np.float32) if norm > 0 else vector.astype(np.float32)
