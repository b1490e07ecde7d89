"""Embedding models: text to vectors for opt-in semantic retrieval (docs/semantic.md).

A layer beside ``lookback.index``: it imports nothing of Lookback's other layers, and
the index (which stores vectors) and the query layer (which embeds questions) use it.
One job per module:

- :mod:`lookback.embedders.port` -- the port every embedder implements, its errors;
- :mod:`lookback.embedders.registry` -- the shipped embedders by name, loaded once;
- :mod:`lookback.embedders.word_pieces` -- what the word-piece encoders share;
- :mod:`lookback.embedders.hashing` -- feature hashing, numpy only;
- :mod:`lookback.embedders.minilm` -- all-MiniLM-L6-v2 in numpy;
- :mod:`lookback.embedders.onnx_graph` -- the BERT encoder as an ONNX graph;
- :mod:`lookback.embedders.onnx_encoder` -- that graph on onnxruntime (``minilm-onnx``);
- :mod:`lookback.embedders.e5` -- multilingual-e5-small, alone and with MiniLM.
"""
