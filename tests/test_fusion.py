"""Tests for fusing lexical and vector candidates: similarity as a bounded part of a lexical
candidate's score, strong lexical hits first, then RRF."""

from __future__ import annotations

import random

import pytest

from lookback.query.semantic.fusion import (
    HIGH,
    LOW,
    SEMANTIC_POINTS,
    STRONG,
    Candidate,
    FusedCandidate,
    fuse,
    semantic_points,
)

# Entry keys as the engine uses them: (session id, entry id) from the v3 fixture.
SESSION = "3f5b8f7e-pi-session-v3"


def key(entry: str) -> tuple[str, str]:
    return (SESSION, entry)


LEXICAL = [
    Candidate(key("00000004"), "identifier", 112.0, 1_765_233_600_000),
    Candidate(key("00000009"), "identifier", 104.0, 1_765_233_900_000),
    Candidate(key("00000005"), "phrase", 91.0, 1_765_233_700_000),
    Candidate(key("00000003"), "other", 75.0, 1_765_233_500_000),
    Candidate(key("00000006"), "other", 72.0, 1_765_233_800_000),
    Candidate(key("00000008"), "other", 64.0, 1_765_233_850_000),
]


def keys(result: list[FusedCandidate]) -> list[str]:
    return [candidate.key[1] for candidate in result]


def test_without_vectors_the_order_is_the_lexical_order() -> None:
    result = fuse(LEXICAL, [])
    assert keys(result) == ["00000004", "00000009", "00000005", "00000003", "00000006", "00000008"]
    assert [c.lexical_rank for c in result[3:]] == [1, 2, 3]
    assert all(c.semantic_rank is None and c.similarity is None for c in result)


def test_exact_hits_are_never_displaced() -> None:
    # The vector search loves the "other" candidates and new ones, and dislikes the exact hits.
    semantic = [(key(f"1{n:07d}"), 0.99 - n / 1000) for n in range(50)]
    semantic += [(key("00000008"), 0.995), (key("00000006"), 0.99)]
    semantic += [(key("00000004"), -0.2), (key("00000005"), 0.01)]
    result = fuse(LEXICAL, semantic)
    assert keys(result)[:3] == ["00000004", "00000009", "00000005"]
    assert [c.tier for c in result[:3]] == ["identifier", "identifier", "phrase"]
    assert all(c.tier == "other" for c in result[3:])
    assert result[0].similarity == -0.2  # recorded, but it orders nothing


def test_vectors_reorder_only_within_the_other_tier() -> None:
    result = fuse(LEXICAL, [(key("00000008"), 0.8), (key("00000006"), 0.7)])
    # 00000008 (lexical 3rd, semantic 1st) and 00000006 (2nd, 2nd) now beat 00000003
    # (1st, none); semantic ranks count twice by default, so the vectors' favourite leads.
    assert keys(result)[3:] == ["00000008", "00000006", "00000003"]
    by_key = {c.key[1]: c for c in result}
    assert by_key["00000006"].fused == pytest.approx(1 / 7 + 2 / 7)
    assert by_key["00000008"].fused == pytest.approx(1 / 8 + 2 / 6)
    assert by_key["00000003"].fused == pytest.approx(1 / 6)


def test_plain_rrf_with_equal_weights() -> None:
    result = fuse(LEXICAL, [(key("00000008"), 0.8), (key("00000006"), 0.7)],
                  semantic_weight=1.0)
    by_key = {c.key[1]: c for c in result}
    assert by_key["00000006"].fused == pytest.approx(1 / 7 + 1 / 7)
    assert by_key["00000008"].fused == pytest.approx(1 / 8 + 1 / 6)
    with pytest.raises(ValueError, match="semantic_weight"):
        fuse(LEXICAL, [], semantic_weight=0)


def test_vector_only_candidates_join_the_other_tier() -> None:
    result = fuse(LEXICAL, [(key("0000000a"), 0.9), (key("00000003"), 0.5)])
    joined = next(c for c in result if c.key == key("0000000a"))
    assert joined.tier == "other"
    assert joined.vector_only
    assert (joined.score, joined.timestamp, joined.lexical_rank) == (None, None, None)
    assert joined.semantic_rank == 1
    assert keys(result).index("0000000a") > keys(result).index("00000005")


def test_repeated_vector_keys_keep_their_best_chunk() -> None:
    result = fuse([], [(key("a"), 0.2), (key("b"), 0.5), (key("a"), 0.7)])
    assert keys(result) == ["a", "b"]
    assert result[0].similarity == 0.7


def test_semantic_ranks_skip_keys_already_in_a_literal_tier() -> None:
    result = fuse(LEXICAL, [(key("00000004"), 0.99), (key("00000003"), 0.5)])
    other = next(c for c in result if c.key == key("00000003"))
    assert other.semantic_rank == 1


def test_fusion_is_deterministic_whatever_the_input_order() -> None:
    semantic = [(key(f"v{n}"), round(0.3 + (n % 7) / 10, 2)) for n in range(30)]
    semantic += [(key("00000003"), 0.6), (key("00000008"), 0.6)]
    expected = fuse(LEXICAL, semantic)
    shuffler = random.Random(20251208)
    for _ in range(20):
        lexical, vectors = LEXICAL[:], semantic[:]
        shuffler.shuffle(lexical)
        shuffler.shuffle(vectors)
        assert fuse(lexical, vectors) == expected


def test_ties_break_by_timestamp_then_key() -> None:
    lexical = [
        Candidate(key("old"), "other", 60.0, 1_000),
        Candidate(key("new"), "other", 60.0, 2_000),
        Candidate(key("b-same"), "phrase", 85.0, 5_000),
        Candidate(key("a-same"), "phrase", 85.0, 5_000),
    ]
    assert keys(fuse(lexical, [])) == ["a-same", "b-same", "new", "old"]
    # Equal fused scores: a vector-only candidate (unknown time) goes after dated ones.
    tied = fuse([Candidate(key("lex"), "other", 60.0, 1_000)], [(key("vec"), 0.9)],
                semantic_weight=1.0)
    assert tied[0].fused == tied[1].fused
    assert keys(tied) == ["lex", "vec"]


@pytest.mark.parametrize(
    ("lexical", "semantic", "k", "message"),
    [
        ([Candidate(key("x"), "fuzzy", 1.0, 1.0)], [], 60, "unknown tier 'fuzzy'"),
        ([Candidate(key("x"), "other", 1.0, 1.0)] * 2, [], 60, "appears twice"),
        ([Candidate(key("x"), "other", float("nan"), 1.0)], [], 60, "non-finite"),
        ([], [(key("x"), float("inf"))], 60, "non-finite similarity"),
        ([], [], 0, "k must be at least 1"),
    ],
)
def test_bad_input_gets_a_clear_error(lexical, semantic, k, message) -> None:
    with pytest.raises(ValueError, match=message):
        fuse(lexical, semantic, k=k)


def _weak_matches(count: int) -> list[Candidate]:
    """``count`` FTS-only candidates of falling lexical score (one keyword each, say)."""
    return [Candidate(key(f"w{n:03d}"), "other", 40.0 - n, 1_765_233_000_000 + n)
            for n in range(count)]


def test_the_vectors_best_find_is_not_pushed_out_by_weak_keyword_matches() -> None:
    # Twenty weak keyword matches, the last ten of which the vectors also rank lower:
    # the vectors' favourite, which no keyword matched, stays ahead of every entry that
    # only keywords found (with k = 60 the first 8 of them came first).
    semantic = [(key("found"), 0.72)] + [(key(f"w{n:03d}"), 0.30 - n / 100)
                                          for n in range(10, 20)]
    result = fuse(_weak_matches(20), semantic)
    order = keys(result)
    assert order.index("found") < min(order.index(f"w{n:03d}") for n in range(10))
    assert order.index("found") <= 1
    flat = keys(fuse(_weak_matches(20), semantic, k=60))
    assert flat.index("found") > 5


def test_the_best_keyword_match_is_not_pushed_out_by_middling_vector_hits() -> None:
    # The top keyword match, which the vectors do not rank, against 24 vector-only hits:
    # it counts as much as the seventh of them (1 / (5 + 1) == 2 / (5 + 7)).
    semantic = [(key(f"v{n:03d}"), 0.9 - n / 100) for n in range(24)]
    result = fuse(_weak_matches(1), semantic)
    assert keys(result).index("w000") <= 7


def test_vector_finds_never_go_above_a_strong_lexical_hit() -> None:
    # Two strong keyword hits (they carry much of the question), one weak one, and 24
    # vector-only finds the vectors love: the strong hits keep the first places of the
    # tier; the vectors' favourites come before the weak hit only.
    lexical = [Candidate(key("strong1"), "other", 150.0, 3_000, 0.6),
               Candidate(key("strong2"), "other", 120.0, 2_000, STRONG),
               Candidate(key("weak"), "other", 110.0, 1_000, 0.05)]
    semantic = [(key(f"v{n:02d}"), 0.9 - n / 100) for n in range(24)]
    result = fuse(lexical, semantic)
    assert keys(result)[:2] == ["strong1", "strong2"]
    assert [c.strong for c in result[:3]] == [True, True, False]
    assert keys(result)[2] == "v00"
    assert keys(result).index("weak") > 2
    # Plain RRF (no hit strong) lets the vector finds push both out of the top 5.
    plain = keys(fuse(lexical, semantic, strong=2.0))
    assert plain.index("strong1") >= 5 and plain.index("strong2") >= 5


def test_among_strong_hits_the_similarity_part_decides_with_the_score() -> None:
    lexical = [Candidate(key("first"), "other", 150.0, 3_000, 0.5, 0.25),
               Candidate(key("second"), "other", 140.0, 2_000, 0.5, 0.6)]
    result = fuse(lexical, [(key("second"), 0.6), (key("new"), 0.9)])
    # second: 140 + 24 beats first: 150 + 3; the vector-only find stays below.
    assert keys(result) == ["second", "first", "new"]
    assert (result[0].fused, result[0].points) == (164.0, 24.0)
    assert (result[1].fused, result[1].points) == (153.0, 3.0)
    assert result[2].vector_only and not result[2].strong


def test_similarity_reorders_weak_lexical_hits_too() -> None:
    # The signal of issue 19: two weak keyword hits 10 points apart; the second is what the
    # question is about by the vectors (0.6, with its neighbours' share): it moves first
    # (its lexical rank counts the part), and without the part (points=0) it does not.
    lexical = [Candidate(key("incidental"), "other", 120.0, 2_000, 0.1, 0.15),
               Candidate(key("about-it"), "other", 110.0, 1_000, 0.1, 0.6)]
    result = fuse(lexical, [])
    assert keys(result) == ["about-it", "incidental"]
    assert [c.lexical_rank for c in result] == [1, 2]
    assert result[0].points == pytest.approx(SEMANTIC_POINTS * 0.8)
    assert result[1].points == 0  # below LOW: nothing, never a penalty
    assert keys(fuse(lexical, [], points=0)) == ["incidental", "about-it"]
    with pytest.raises(ValueError, match="points"):
        fuse(lexical, [], points=-1)


def test_similarity_earns_a_bounded_linear_part() -> None:
    assert semantic_points(None) == 0
    assert semantic_points(LOW) == 0 and semantic_points(LOW - 0.3) == 0
    assert semantic_points(HIGH) == SEMANTIC_POINTS == semantic_points(0.99)
    assert semantic_points((LOW + HIGH) / 2) == pytest.approx(SEMANTIC_POINTS / 2)


def test_the_similarity_part_never_reorders_the_literal_tiers() -> None:
    lexical = [Candidate(key("id-high"), "identifier", 112.0, 1_000, 0.9, 0.0),
               Candidate(key("id-low"), "identifier", 104.0, 2_000, 0.9, 0.99),
               Candidate(key("other"), "other", 60.0, 3_000, 0.9, 0.99)]
    result = fuse(lexical, [])
    assert keys(result) == ["id-high", "id-low", "other"]
    assert [c.points for c in result] == [0.0, 0.0, SEMANTIC_POINTS]


def test_a_strong_hit_leaves_the_top_5_only_for_other_strong_hits() -> None:
    lexical = [Candidate(key(f"s{n}"), "other", 200.0 - n, 9_000 - n, 0.4) for n in range(6)]
    # the vectors' favourite strong hit, 10 points behind the fifth
    lexical.append(Candidate(key("s6"), "other", 186.0, 8_994, 0.4, 0.9))
    # a weak hit the vectors love more, with a higher score than any strong one
    lexical.append(Candidate(key("weak"), "other", 300.0, 1_000, 0.1, 0.95))
    semantic = [(key("s6"), 0.9), (key("weak"), 0.95)] + [(key(f"v{n}"), 0.99) for n in range(9)]
    result = fuse(lexical, semantic)
    top5 = result[:5]
    assert all(c.strong for c in top5)
    assert keys(result).index("s6") == 0  # lifted by its similarity, among strong hits
    assert keys(result)[7] == "v0" and keys(result).index("weak") > 6


def test_a_non_finite_strength_gets_a_clear_error() -> None:
    with pytest.raises(ValueError, match="non-finite"):
        fuse([Candidate(key("x"), "other", 1.0, 1.0, float("nan"))], [])
