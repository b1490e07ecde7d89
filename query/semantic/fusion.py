"""Merge lexical and semantic candidates: similarity ranks, vectors add (issue 19, item 6).

Exact and FTS retrieval stay authoritative (docs/specification.md, step 10). So fusion never
touches the two literal tiers: ``identifier`` candidates come first, then ``phrase``
candidates, each in the specification's within-tier order (score descending, timestamp
descending, key ascending), whatever the vectors say. Inside the ``other`` tier:

0. **Similarity is a part of a lexical candidate's score.** A lexical candidate the
   vectors scored earns ``semantic_points`` of its ``similarity`` -- at most
   ``SEMANTIC_POINTS`` (30), in proportion to where it lies between ``LOW`` (0.2: none)
   and ``HIGH`` (0.7: all) -- like the date signal, a bounded part of the score: it
   reorders lexical candidates of the tier (their *lexical rank* below counts it), it never
   lifts one into or above a literal tier and never makes one eligible. The engine shows
   it among the candidate's reasons (``semantic similarity 0.52 +19.2``).
1. **Strong lexical hits first.** A lexical candidate is *strong* when its ``strength``
   -- the share of the question's term rarity its verified matches carry, discounted for
   length (``hybrid.lexical_strength``) -- is at least ``STRONG`` (0.25). Strong hits
   lead the tier, ordered by their scores with the similarity part: the vectors'
   agreement lifts a strong hit above another strong hit, but nothing else comes above
   any of them.
2. **Then everything else** -- weak lexical hits and the candidates only the vectors
   found -- by ``1 / (k + lexical_rank) + w / (k + semantic_rank)`` with ``w = 2``: where
   the keywords matched only incidental words, the vectors' finds lead.

A missing rank adds nothing; ``k = 5``. So a vector-only candidate never displaces a
strong lexical hit, and a strong lexical hit leaves the top 5 only for other strong
lexical hits: semantic similarity never pushes a verified lexical hit of higher weight out
of the top 5 (``tests/test_fusion.py``, and on the real fixture ``tests/test_semantic.py``).
Why the split: on LoCoMo's questions, where the evidence shares the question's rare
words, the candidates only the vectors found are rarely evidence (3-4% of vector-only
first places with MiniLM), while the first lexical hit is in a quarter to two fifths of
questions; on the paraphrase sets, where the question avoids the answer's words, it is
the other way round, and the lexical hits are weak there. Plain RRF with ``w = 2`` (the
fusion before) lost LoCoMo's lexical finds; with ``w = 1`` the paraphrases' vector
finds. A score part for every candidate, vector-only ones included (one order for the
tier), lost most of the paraphrases' vector finds. ``STRONG``, the length discount, the
points and the two weights were chosen on the tuning halves only and are not a fitted
optimum (figures in docs/semantic.md).
Both ranks are 1-based and counted inside the ``other`` tier, so a vector hit on
an identifier candidate cannot push ``other`` ranks down.
Ties break by fused score descending, timestamp descending (unknown
timestamps last), then key ascending -- the same input in any order gives
the same output.

The candidate type is deliberately small; the retrieval engine adapts its
rows to it and joins the result back by key.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

#: Tier names in precedence order (docs/specification.md, "Ranking": identifiers,
#: phrases, the rest).
TIERS = ("identifier", "phrase", "other")
Tier = Literal["identifier", "phrase", "other"]

#: An entry's identity, e.g. ``(session_id, entry_id)``. All keys passed to one
#: call must be of one comparable type, since ties are broken by key.
CandidateKey = str | tuple[str, ...]

#: The RRF constant. Not the usual 60: with 60, rank 1 and rank 20 differ by a third,
#: so an entry with a weak keyword match *and* a middling vector rank beat the vectors'
#: best find.
DEFAULT_RRF_K = 5

#: How much a semantic rank counts against a lexical one below the strong lexical hits.
DEFAULT_SEMANTIC_WEIGHT = 2.0

#: A lexical candidate at least this strong (``Candidate.strength``) is a strong hit.
STRONG = 0.25

#: The most points similarity adds to a lexical candidate's score, and the similarities
#: that earn none and all of them (MiniLM's scale: the other embedders map onto it).
SEMANTIC_POINTS, LOW, HIGH = 30.0, 0.2, 0.7


@dataclass(frozen=True)
class Candidate:
    """One lexical candidate.

    ``tier`` is ``identifier`` (verified exact identifier hit), ``phrase``
    (verified exact phrase hit) or ``other`` (FTS and everything else);
    ``score`` is the deterministic lexical score of docs/specification.md's ranking table;
    ``timestamp`` is the entry time in epoch milliseconds (newer is larger);
    ``strength`` (0..1) is how much of the question its verified matches carry
    (``hybrid.lexical_strength``); ``STRONG`` or more makes it a strong hit;
    ``similarity`` is the vectors' score of the entry that earns it ``semantic_points``
    (None: no part; ``hybrid.context_scores``).
    """

    key: CandidateKey
    tier: Tier
    score: float
    timestamp: float
    strength: float = 0.0
    similarity: float | None = None


@dataclass(frozen=True)
class FusedCandidate:
    """A candidate in final order, with what each retriever said about it.

    ``score`` and ``timestamp`` are ``None`` for vector-only candidates (the
    engine fills them in from the index). ``fused`` is the score that ordered
    the ``other`` tier: score plus ``points`` for a strong hit, the RRF score
    for the rest (``0.0`` in the literal tiers, which it never orders). Ranks
    are 1-based within the ``other`` tier; ``similarity`` is the best cosine
    similarity the vector search gave the key, in any tier; ``points`` is the
    part of the score a lexical candidate's ``Candidate.similarity`` earned (0 in
    the literal tiers); ``strong`` marks a strong lexical hit of the ``other`` tier.
    """

    key: CandidateKey
    tier: Tier
    score: float | None
    timestamp: float | None
    fused: float
    lexical_rank: int | None
    semantic_rank: int | None
    similarity: float | None
    strong: bool = False
    points: float = 0.0

    @property
    def vector_only(self) -> bool:
        """True when only the vector search found this candidate."""
        return self.score is None


def semantic_points(similarity: float | None, weight: float = SEMANTIC_POINTS,
                    low: float = LOW, high: float = HIGH) -> float:
    """The score part a similarity earns: 0 at ``low`` or less, ``weight`` at ``high`` or
    more, linear between (rounded to hundredths, as every score part)."""
    if similarity is None:
        return 0.0
    return round(weight * min(1.0, max(0.0, (similarity - low) / (high - low))), 2)


def fuse(
    lexical: list[Candidate],
    semantic: list[tuple[CandidateKey, float]],
    k: int | None = None,
    semantic_weight: float | None = None,
    strong: float | None = None,
    points: float = SEMANTIC_POINTS,
) -> list[FusedCandidate]:
    """Return ``lexical`` and ``semantic`` candidates merged in final order.

    ``semantic`` holds ``(key, cosine similarity)`` pairs; a key may repeat
    (one per chunk) and keeps its best similarity. ``strong`` is the strength a
    strong lexical hit needs (default ``STRONG``; above 1, none is strong: plain RRF).
    ``points`` is the most a lexical candidate's ``similarity`` adds to its score
    (0: the lexical order, as before similarity was a part).
    Raises ``ValueError`` for an unknown tier, a repeated lexical key, a non-finite
    number, ``k < 1`` or negative ``points``.
    """
    k = DEFAULT_RRF_K if k is None else k
    semantic_weight = DEFAULT_SEMANTIC_WEIGHT if semantic_weight is None else semantic_weight
    strong = STRONG if strong is None else strong
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if not (math.isfinite(semantic_weight) and semantic_weight > 0):
        raise ValueError(f"semantic_weight must be positive, got {semantic_weight}")
    if not (math.isfinite(points) and points >= 0):
        raise ValueError(f"points must be a non-negative number, got {points}")
    by_key = _check_lexical(lexical)
    similarity = _best_similarity(semantic)

    literal: list[FusedCandidate] = []
    for tier in TIERS[:2]:
        members = sorted((c for c in lexical if c.tier == tier), key=_lexical_order)
        literal.extend(
            FusedCandidate(
                c.key, c.tier, c.score, c.timestamp, 0.0, None, None, similarity.get(c.key)
            )
            for c in members
        )

    part = {c.key: semantic_points(c.similarity, points) for c in lexical if c.tier == "other"}
    others = sorted((c for c in lexical if c.tier == "other"),
                    key=lambda c: (-(c.score + part[c.key]), -c.timestamp, c.key))
    lexical_rank = {c.key: rank for rank, c in enumerate(others, start=1)}
    semantic_keys = [key for key in similarity if key not in by_key or by_key[key].tier == "other"]
    semantic_keys.sort(key=lambda key: (-similarity[key], key))
    semantic_rank = {key: rank for rank, key in enumerate(semantic_keys, start=1)}

    is_strong = {c.key for c in others if c.strength >= strong}
    fused_others = [
        _fuse_other(key, by_key.get(key), lexical_rank, semantic_rank, similarity, k,
                    semantic_weight, part.get(key, 0.0), key in is_strong)
        for key in lexical_rank.keys() | semantic_rank.keys()
    ]
    # Strong lexical hits first: nothing the vectors alone found goes above them.
    fused_others.sort(key=lambda c: (not c.strong, *_fused_order(c)))
    return literal + fused_others


def _check_lexical(lexical: Iterable[Candidate]) -> dict[CandidateKey, Candidate]:
    by_key: dict[CandidateKey, Candidate] = {}
    for candidate in lexical:
        if candidate.tier not in TIERS:
            raise ValueError(f"unknown tier {candidate.tier!r}; expected one of {TIERS}")
        numbers = (candidate.score, candidate.timestamp, candidate.strength,
                   0.0 if candidate.similarity is None else candidate.similarity)
        if not all(math.isfinite(value) for value in numbers):
            raise ValueError(f"candidate {candidate.key!r} has a non-finite score, timestamp, "
                             f"strength or similarity")
        if candidate.key in by_key:
            raise ValueError(f"lexical candidate {candidate.key!r} appears twice")
        by_key[candidate.key] = candidate
    return by_key


def _best_similarity(semantic: Iterable[tuple[CandidateKey, float]]) -> dict[CandidateKey, float]:
    best: dict[CandidateKey, float] = {}
    for key, value in semantic:
        value = float(value)
        if not math.isfinite(value):
            raise ValueError(f"semantic candidate {key!r} has a non-finite similarity")
        if key not in best or value > best[key]:
            best[key] = value
    return best


def _fuse_other(
    key: CandidateKey,
    candidate: Candidate | None,
    lexical_rank: dict[CandidateKey, int],
    semantic_rank: dict[CandidateKey, int],
    similarity: dict[CandidateKey, float],
    k: int,
    semantic_weight: float,
    points: float,
    strong: bool,
) -> FusedCandidate:
    lex = lexical_rank.get(key)
    sem = semantic_rank.get(key)
    if strong:  # among strong hits, the score with its similarity part decides
        fused = round((candidate.score if candidate else 0.0) + points, 2)
    else:
        fused = (1.0 / (k + lex) if lex is not None else 0.0) + (
            semantic_weight / (k + sem) if sem is not None else 0.0)
    return FusedCandidate(
        key=key,
        tier="other",
        score=candidate.score if candidate else None,
        timestamp=candidate.timestamp if candidate else None,
        fused=fused,
        lexical_rank=lex,
        semantic_rank=sem,
        similarity=similarity.get(key),
        strong=strong,
        points=points,
    )


def _lexical_order(candidate: Candidate) -> tuple[float, float, CandidateKey]:
    return (-candidate.score, -candidate.timestamp, candidate.key)


def _fused_order(candidate: FusedCandidate) -> tuple[float, float, CandidateKey]:
    newest_first = -candidate.timestamp if candidate.timestamp is not None else math.inf
    return (-candidate.fused, newest_first, candidate.key)
