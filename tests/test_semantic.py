"""Opt-in hybrid retrieval on the real fixture ``before-compaction.jsonl``.

The golden set (tests/fixtures/semantic_golden.json) holds questions that
paraphrase user messages compacted out of the session's context while sharing
few words with them; recall@5 is measured with lexical retrieval alone and with
``semantic: true``, for each embedder.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from lookback.api import retrieve
from lookback.cli import main
from lookback.embedders import registry
from lookback.embedders.registry import get_embedder
from lookback.index.embeddings import EMBEDDINGS_SEQ_META, Stamp, build_embeddings, count_pending
from lookback.index.layout import project_dir
from lookback.index.rebuild import rebuild
from lookback.index.store import open_reader, open_writer, write_meta
from lookback.index.tree import branch, context_entries
from lookback.query.search.reader import IndexReader
from lookback.settings import load_settings
from tests.support import fixture_path, index_paths

BEFORE = fixture_path("before-compaction.jsonl")
CWD = "/Users/badlogic/workspaces/pi-mono"
SESSION = "ffae836b-9420-4060-ac13-7745215f90ff"
GOLDEN = json.loads((Path(__file__).parent / "fixtures" / "semantic_golden.json").read_text())
#: The golden question the fall-back tests ask.
FALLBACK_QUESTION = GOLDEN["cases"][6]["question"]
TUNING = json.loads((Path(__file__).parent / "fixtures" / "semantic_tuning.json").read_text())
HELDOUT = json.loads((Path(__file__).parent / "fixtures" / "semantic_heldout.json").read_text())
QUESTIONS = json.loads((Path(__file__).parent / "fixtures" / "semantic_questions.json").read_text())

#: Hybrid hits@5 each embedder must reach: (golden, of 12; tuning, of 28; held-out, of 20;
#: questions-tuning, of 25; questions-heldout, of 23). Measured with strong keyword hits
#: leading fusion (docs/semantic.md): hashing 4, 12, 4, 10, 13; minilm-onnx 10, 23, 15,
#: 13, 15; minilm+e5-onnx 12, 23, 18, 13, 15; with similarity a part of the keyword hits'
#: scores, minilm-onnx 11, 23, 15, 13, 15. minilm+e5-onnx's held-out bound is the
#: issue's target for that set (0.73 of 20: 15); on questions-heldout the target (17 of 23)
#: is not met, and the bound only guards today's 15.
# The confidence floor (issue 28) costs the question-style sets one question each with
# minilm-onnx (questions-tuning 11 before) and minilm+e5-onnx (questions-heldout 13).
MIN_HYBRID_HITS = {"hashing": (3, 10, 3, 8, 11), "minilm-onnx": (9, 21, 13, 10, 13),
                   "minilm+e5-onnx": (11, 21, 15, 11, 12)}
RECALL_SETS = {"golden": GOLDEN["cases"], "tuning": TUNING["cases"],
               "held-out": HELDOUT["cases"], "questions-tuning": QUESTIONS["tuning"],
               "questions-heldout": QUESTIONS["heldout"]}
#: The sets whose questions restate an entry: there hybrid must beat lexical. The question
#: sets ask about figures and names too, which keywords find (lexical 9/25 and 16/23).
RESTATEMENTS = ("golden", "tuning", "held-out")


def _answers_of(case: dict) -> set[str]:
    return set(case.get("answers") or [case["answer"]])


def _index(home: Path, embedder: str | None = "hashing") -> None:
    index_paths(home, BEFORE)
    if embedder is not None:
        build_embeddings(home, CWD, get_embedder(embedder))


def _asker(home: Path, embedder: str = "hashing"):
    settings = load_settings({"home": str(home), "retrieval": {"embedder": embedder}},
                             environ={})
    reader = IndexReader(home)

    def ask(message: str, semantic: bool = True, **fields) -> dict:
        request = {"session_file": str(BEFORE), "message": message, "semantic": semantic,
                   **fields}
        return retrieve(request, settings=settings, reader=reader)

    return ask


def _ids(response: dict) -> list[str]:
    return [item["entry_id"] for item in response["evidence"]]


def _index_file(home: Path) -> Path:
    return project_dir(home, CWD).index_path()


# Its 1,743 chunks (now 2,145) took 387 s with the load average at 10 (9 agents on 2 cores): 900 s
# bounds a loaded machine.
MINILM_SLOW = [pytest.mark.minilm, pytest.mark.slow, pytest.mark.timeout(900)]
# Both models: 3.5 times MiniLM's CPU per chunk (241 s for the 2,145 chunks at load 2-4),
# so some 1,700 s at load 10.
ENSEMBLE_SLOW = [pytest.mark.minilm, pytest.mark.e5, pytest.mark.slow,
                 pytest.mark.timeout(2400)]


@dataclass
class Answers:
    """What one question got, lexical and hybrid, while one embedder's vectors were current."""

    lexical: list[str]
    hybrid: list[str]
    warnings: list[str]
    used: bool


@dataclass
class IndexedFixture:
    """The fixture session indexed once (`lookback index`), shared by the recall tests."""

    home: Path
    lexical_before: dict[str, list[str]]  # every question's lexical answer before any vector
    allowed: set[str]  # the entries of the session's branch that are not in its live context
    answers: dict[str, dict[str, Answers]] = field(default_factory=dict)  # by embedder


@pytest.fixture(scope="module")
def indexed_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexedFixture]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path_factory.getbasetemp() / "no-claude"))
        home = tmp_path_factory.mktemp("recall") / "home"
        home.mkdir()
        index_paths(home, BEFORE)
        ask = _asker(home)
        lexical_before = {case["question"]: _ids(ask(case["question"], semantic=False))
                          for cases in RECALL_SETS.values() for case in cases}
        database = open_reader(_index_file(home))
        entries = branch(database, SESSION, "v1:1002")
        allowed = {e.entry_id for e in entries} - {e.entry_id for e in context_entries(entries)}
        database.close()
        yield IndexedFixture(home, lexical_before, allowed)


def _answers_with(indexed: IndexedFixture, name: str) -> dict[str, Answers]:
    """Build ``name``'s vectors in the shared index (`lookback index --embed` after
    switching `retrieval.embedder`: every vector of another model is stale and re-embedded)
    and ask every question lexically and hybrid; asked once per embedder per run."""
    if name not in indexed.answers:
        with pytest.MonkeyPatch.context() as patch:
            # Recall is what is measured, so a busy machine must not turn answers into
            # fallbacks: the 250 ms budget has its own test below.
            patch.setattr("lookback.query.semantic.hybrid.DEFAULT_TIMEOUT_MS", 60_000.0)
            report = build_embeddings(indexed.home, CWD, get_embedder(name))
            assert report.pending == 0 and report.entries > 0
            ask = _asker(indexed.home, name)
            answers = {}
            for question in indexed.lexical_before:
                hybrid = ask(question, semantic=True)
                answers[question] = Answers(
                    lexical=_ids(ask(question, semantic=False)), hybrid=_ids(hybrid),
                    warnings=hybrid["diagnostics"]["warnings"],
                    used=hybrid["diagnostics"]["semantic"]["used"])
        indexed.answers[name] = answers
    return indexed.answers[name]


@pytest.mark.parametrize("name", ["hashing", pytest.param("minilm-onnx", marks=MINILM_SLOW),
                                  pytest.param("minilm+e5-onnx", marks=ENSEMBLE_SLOW)])
def test_paraphrase_recall_at_5_hybrid_beats_lexical(indexed_fixture: IndexedFixture,
                                                      name: str) -> None:
    # One index serves every embedder (it is built once per run); each embedder's vectors
    # are built in it as `lookback index --embed` does. Bounded work: the ONNX embedders
    # embed the first 4 chunks of each entry and its prose chunk (2,145 chunks of the 990
    # entries). minilm+e5-onnx's held-out bound is the recall target.
    answers = _answers_with(indexed_fixture, name)
    found: list[int] = []
    lexical_found: list[int] = []
    restated = {"lexical": 0, "hybrid": 0}
    for set_name, cases in RECALL_SETS.items():
        hits = {"lexical": 0, "hybrid": 0}
        for case in cases:
            got = answers[case["question"]]
            # vectors change nothing in lexical answers
            assert got.lexical == indexed_fixture.lexical_before[case["question"]]
            assert got.warnings == []
            assert got.used is True
            # never the live context or another branch
            assert set(got.hybrid) <= indexed_fixture.allowed
            hits["lexical"] += bool(_answers_of(case) & set(got.lexical[:5]))
            hits["hybrid"] += bool(_answers_of(case) & set(got.hybrid[:5]))
        if set_name in RESTATEMENTS:
            assert hits["hybrid"] >= hits["lexical"], set_name
            restated["lexical"] += hits["lexical"]
            restated["hybrid"] += hits["hybrid"]
        found.append(hits["hybrid"])
        lexical_found.append(hits["lexical"])
    print(f"\n{name}: hybrid (lexical) hits@5 golden {found[0]} ({lexical_found[0]})/12, "
          f"tuning {found[1]} ({lexical_found[1]})/28, held-out {found[2]} "
          f"({lexical_found[2]})/20, questions-tuning {found[3]} ({lexical_found[3]})/25, "
          f"questions-heldout {found[4]} ({lexical_found[4]})/23")
    # On the sets that restate an entry the vectors must add hits, never lose one; on one
    # set alone lexical can tie the hybrid (docs/benchmarks.md), so the gain is summed.
    assert restated["hybrid"] > restated["lexical"]
    assert all(hits >= least for hits, least in zip(found, MIN_HYBRID_HITS[name], strict=True))


def test_vector_finds_never_displace_a_strong_lexical_hit(home: Path, monkeypatch) -> None:
    # Every question of every paraphrase set, on the real fixture: what fusion was given
    # and what it returned. A strong lexical hit (lexical_strength >= STRONG) is never
    # below a candidate that is not one, so one of the lexical top 5 keeps its top-5 place
    # unless only literal hits and other strong lexical hits are above it.
    from lookback.query.semantic import hybrid
    from lookback.query.semantic.fusion import STRONG, fuse

    calls = []

    def spy(lexical, semantic, **options):
        fused = fuse(lexical, semantic, **options)
        calls.append((lexical, semantic, fused))
        return fused

    monkeypatch.setattr(hybrid, "fuse", spy)
    _index(home)
    ask = _asker(home)
    questions = [case["question"] for cases in RECALL_SETS.values() for case in cases]
    for question in questions:
        ask(question)
    assert len(calls) == len(questions)
    kept = rescued = lifted = 0
    for lexical, semantic, fused in calls:
        others = sorted((c for c in lexical if c.tier == "other"),
                        key=lambda c: (-c.score, -c.timestamp, c.key))
        # similarity reorders the lexical hits too (issue 19: a part of their score)
        ranked_lexical = [c.key for c in fused if c.lexical_rank is not None]
        lifted += ranked_lexical[:5] != [c.key for c in others[:5]]
        strong = {c.key for c in others if c.strength >= STRONG}
        order = [c.key for c in fused]
        flags = [c.strong for c in fused if c.tier == "other"]
        assert flags == sorted(flags, reverse=True)  # strong hits lead the tier
        assert {c.key for c in fused if c.strong} == strong
        for candidate in others[:5]:
            if candidate.key not in strong:
                continue
            place = order.index(candidate.key)
            above = fused[:place]
            assert place < 5 or all(c.tier != "other" or c.strong for c in above)
            kept += place < 5
            # Plain RRF (no strong hits) would have let others push it out.
            plain = [c.key for c in fuse(lexical, semantic, strong=2.0)]
            rescued += place < 5 <= plain.index(candidate.key)
    assert kept > 0 and rescued > 0 and lifted > 0, (kept, rescued, lifted)


def test_exact_hits_keep_their_tiers_and_places(home: Path) -> None:
    _index(home)
    ask = _asker(home)
    # `collapseChangelog` is an identifier of the real v1:407 message (and others).
    message = "where does collapseChangelog come from, the settings or the session?"
    lexical, hybrid = ask(message, semantic=False), ask(message, semantic=True)
    exact = [(e["entry_id"], e["tier"]) for e in lexical["evidence"] if e["tier"] != "other"]
    assert exact, "the identifier must give exact hits"
    assert [(e["entry_id"], e["tier"]) for e in hybrid["evidence"]][:len(exact)] == exact
    assert hybrid["diagnostics"]["semantic"]["used"] is True


def test_vector_candidates_obey_context_and_budget(home: Path) -> None:
    _index(home)
    ask = _asker(home)
    database = open_reader(_index_file(home))
    in_context = {e.entry_id for e in context_entries(branch(database, SESSION, "v1:1002"))}
    database.close()
    question = GOLDEN["cases"][5]["question"]  # the legacy-code paraphrase
    response = ask(question)
    vector_only = [e for e in response["evidence"]
                   if any(r.startswith("vector match") for r in e["reasons"])]
    assert vector_only, "the paraphrase must bring vector-only candidates"
    assert all(e["tier"] == "other" for e in vector_only)
    assert not set(_ids(response)) & in_context
    small = ask(question, max_retrieved_history_tokens=600)
    assert sum(e["tokens"] for e in small["evidence"]) <= 600


def _warning(response: dict) -> str:
    warnings = [w for w in response["diagnostics"]["warnings"] if w.startswith("semantic:")]
    assert len(warnings) == 1, response["diagnostics"]["warnings"]
    return warnings[0]


def _assert_lexical(ask, message: str, response: dict) -> None:
    assert response["status"] == "ok"
    assert _ids(response) == _ids(ask(message, semantic=False))
    assert response["diagnostics"]["semantic"]["used"] is False


def _assert_falls_back(ask, needle: str) -> dict:
    """Asked `FALLBACK_QUESTION`, `ask` warns of the semantic step once (`needle` in the
    warning) and answers as lexical retrieval alone does."""
    response = ask(FALLBACK_QUESTION)
    assert needle in _warning(response)
    _assert_lexical(ask, FALLBACK_QUESTION, response)
    return response


def test_missing_embeddings_fall_back_to_lexical(home: Path) -> None:
    _index(home, embedder=None)
    ask = _asker(home)
    _assert_falls_back(ask, "cover 0 of")


def test_partial_embeddings_fall_back_to_lexical(home: Path) -> None:
    _index(home)
    writer = open_writer(_index_file(home))
    with writer:
        writer.execute("DELETE FROM embeddings WHERE session_id = ? AND entry_id = 'v1:195'",
                       (SESSION,))
        write_meta(writer, EMBEDDINGS_SEQ_META, 999)
    writer.close()
    counts = _assert_falls_back(_asker(home), "cover")["diagnostics"]["semantic"]
    assert counts["embedded_in_scope"] == counts["entries_in_scope"] - 1


def test_stale_embeddings_after_a_model_change_fall_back_then_rebuild(home: Path,
                                                                      monkeypatch) -> None:
    _index(home)
    from lookback.embedders.hashing import HashingEmbedder

    monkeypatch.setitem(registry.EMBEDDERS, "hashing-128", lambda: HashingEmbedder(128))
    ask = _asker(home, "hashing-128")
    _assert_falls_back(ask, "cover 0 of")  # every stored vector is of the old model
    report = build_embeddings(home, CWD, get_embedder("hashing-128"))
    assert report.entries > 0 and report.pending == 0
    assert ask(FALLBACK_QUESTION)["diagnostics"]["warnings"] == []


@pytest.mark.parametrize("name, needle", [("no-such-model", "unavailable"),
                                          ("broken", "failed to load")])
def test_an_embedder_that_cannot_load_falls_back(home: Path, monkeypatch, name: str,
                                                 needle: str) -> None:
    _index(home)

    def broken():
        raise OSError("weights unreadable")

    monkeypatch.setitem(registry.EMBEDDERS, "broken", broken)
    _assert_falls_back(_asker(home, name), needle)


def test_a_slow_semantic_step_falls_back(home: Path, monkeypatch) -> None:
    _index(home)
    monkeypatch.setattr("lookback.query.semantic.hybrid.DEFAULT_TIMEOUT_MS", 0.0)
    ask = _asker(home)
    _assert_falls_back(ask, "longer than 0 ms")


def test_an_index_without_the_embeddings_table_falls_back(home: Path) -> None:
    _index(home, embedder=None)
    writer = open_writer(_index_file(home))
    writer.execute("DROP TABLE embeddings")  # as written by a version before vectors
    writer.close()
    ask = _asker(home)
    response = ask(FALLBACK_QUESTION)
    assert "no embeddings" in _warning(response)


def test_building_is_incremental_and_a_rebuild_keeps_the_vectors(home: Path) -> None:
    _index(home, embedder=None)
    hashing = get_embedder("hashing")
    first = build_embeddings(home, CWD, hashing, batch_entries=100)
    assert first.entries > 0 and first.pending == 0 and first.batches > 1
    assert build_embeddings(home, CWD, hashing).entries == 0
    rebuild(project_dir(home, CWD))
    database = open_reader(_index_file(home))
    assert count_pending(database, Stamp.of(hashing)) == 0
    database.close()
    response = _asker(home)(FALLBACK_QUESTION)
    assert response["diagnostics"]["warnings"] == []


def test_lookback_index_embed_builds_the_vectors(home: Path, tmp_path: Path, capsys) -> None:
    config = tmp_path / "lookback.toml"
    config.write_text(f'home = "{home}"\n')
    assert main(["--config", str(config), "index", "--embed", str(BEFORE)]) == 0
    assert "entries (" in capsys.readouterr().out
    database = open_reader(_index_file(home))
    assert count_pending(database, Stamp.of(get_embedder("hashing"))) == 0
    assert database.execute("SELECT count(*) FROM embeddings").fetchone()[0] > 0
    database.close()
    assert main(["--config", str(config), "index", "--embed", "--queue", str(BEFORE)]) == 2
    assert "service mode" in capsys.readouterr().err


def test_a_cold_process_says_the_model_load_is_why_it_fell_back(home: Path,
                                                                monkeypatch) -> None:
    from lookback.embedders.hashing import HashingEmbedder

    _index(home)  # hashing vectors: the same model under a new name
    # A name no call has loaded yet, as in a fresh `lookback retrieve` process.
    monkeypatch.setitem(registry.EMBEDDERS, "cold-hashing", HashingEmbedder)
    monkeypatch.setattr("lookback.query.semantic.hybrid.DEFAULT_TIMEOUT_MS", 0.0)
    ask = _asker(home, "cold-hashing")
    message = FALLBACK_QUESTION
    response = ask(message)
    assert "loading the embedder 'cold-hashing' took" in _warning(response)
    assert "lookback serve" in _warning(response)
    assert response["diagnostics"]["semantic"]["load_ms"] >= 0
    _assert_lexical(ask, message, response)
    assert "loading" not in _warning(ask(message))  # loaded now: only the budget is named


def test_warm_up_loads_the_embedder_and_survives_a_missing_one() -> None:
    from lookback.embedders.registry import is_loaded
    from lookback.query.semantic.hybrid import warm_up

    assert warm_up("hashing") and is_loaded("hashing")
    assert warm_up("no-such-model") is False


def test_the_same_message_is_embedded_once(home: Path) -> None:
    _index(home)
    ask = _asker(home)
    message = GOLDEN["cases"][3]["question"] + " (a wording no other test asks)"
    first, again = ask(message), ask(message)
    assert first["diagnostics"]["semantic"]["query_cached"] is False
    assert again["diagnostics"]["semantic"]["query_cached"] is True
    assert _ids(again) == _ids(first)


def test_an_entry_scores_the_mean_of_its_two_best_chunks() -> None:
    from lookback.query.semantic.hybrid import entry_scores

    # Three entries: one chunk; three chunks with one chance hit; two tied best chunks.
    similarity = np.array([0.4, 0.9, 0.1, 0.3, 0.5, 0.5], dtype=np.float32)
    starts, counts = np.array([0, 1, 4]), np.array([1, 3, 2])
    np.testing.assert_allclose(entry_scores(similarity, starts, counts), [0.4, 0.6, 0.5],
                               rtol=1e-6)
    assert entry_scores(np.zeros(0, np.float32), np.array([], int), np.array([], int)).size == 0


def test_an_entry_shares_its_better_neighbours_similarity() -> None:
    # A question turn the vectors match well (0.6) and its answer (0.1): the answer gets a
    # share of the question's score; an entry with no better neighbour keeps its own scale.
    from lookback.query.semantic.hybrid import NEIGHBOUR_SHARE, context_scores

    scores = np.array([0.0, 0.6, 0.1, -0.3], dtype=np.float32)
    share = NEIGHBOUR_SHARE
    np.testing.assert_allclose(context_scores(scores, share), [
        (0.0 + share * 0.6) / (1 + share), (0.6 + share * 0.1) / (1 + share),
        (0.1 + share * 0.6) / (1 + share), (-0.3 + share * 0.1) / (1 + share)], rtol=1e-6)
    np.testing.assert_allclose(context_scores(scores, 0.0), scores)
    assert context_scores(np.array([0.4], dtype=np.float32), share).tolist() == [
        pytest.approx(0.4)]
