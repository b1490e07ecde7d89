"""Opt-in hybrid retrieval: vector candidates fused into the lexical ranking.

Called by :class:`query.search.retrieve.Retriever` as the pipeline's re-ranking step
(``query.search.pipeline.rank``), after verification and ranking, when the request
says ``semantic: true``. What it does, and why it is safe:

1. Loads the session's stored vectors (``index.embeddings``) that are *current*
   for the configured embedder (same model, dimensions, chunking version and
   entry text hash), once per index file, session, model and stored batch, into
   a numpy matrix kept in the reader's :class:`query.search.reader.EntryCache`.
2. Keeps only the rows of the request's allowed scope (on the branch, not in
   context, eligible type) -- the same :class:`query.search.types.Scope` the
   lexical searches use -- so vectors obey every branch, context and type rule.
3. Embeds the latest user message and scores each entry by its chunks' cosines
   (brute force: a dot product of the unit query with the stored vectors, whose
   lengths are the chunks' weights, ``index.chunking`` rule 5): the mean of its
   two best chunks, less a little per chunk (:func:`entry_scores`).
4. Fuses with :func:`query.semantic.fusion.fuse`: exact identifier and phrase hits keep
   their tiers and places; in ``other``, each lexical candidate's similarity (with its
   neighbours' share, :func:`context_scores`) is a bounded part of its score (the reason
   ``semantic similarity``), strong lexical hits (:func:`lexical_strength`) come first
   and vectors add candidates below them.
   The token budget and privacy policy apply later, to the fused list.

Any problem -- no embeddings table, an embedding set that is missing, partial
or stale for the allowed scope, an embedder that fails to load, a slow call --
returns the lexical ranking unchanged with a warning in
``diagnostics.warnings``; ``diagnostics.semantic`` carries the counts.
Nothing here logs or reports request or entry text.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import apsw
import numpy as np

from lookback.embedders.port import EmbeddingError, EmbeddingPort
from lookback.embedders.registry import get_embedder, is_loaded
from lookback.index.embeddings import EMBEDDABLE, EMBEDDINGS_SEQ_META, Stamp, decode, has_table
from lookback.index.store import all_rows, read_meta
from lookback.query.contract.answers import Diagnostics
from lookback.query.search.ranking import row_parts
from lookback.query.search.rows import rows_by_rowid
from lookback.query.search.types import Ranked, Row, Scope
from lookback.query.semantic.fusion import Candidate, CandidateKey, fuse

#: Vector candidates (entries) taken per query, as a multiple of ``max_results``.
SEMANTIC_FACTOR, SEMANTIC_FLOOR = 2, 12
#: Subtracted from an entry's score per natural log of its chunk count
#: (tuned on the golden set: MiniLM vectors alone, hit@5 7 -> 10 of 12).
CHUNK_PENALTY = 0.04
#: A vector-only candidate needs at least this similarity to be added.
MIN_SIMILARITY = 0.25
#: An entry's similarity counts its neighbours' too: ``(own + NEIGHBOUR_SHARE x the better
#: neighbour's) / (1 + NEIGHBOUR_SHARE)``, the neighbours being the entries just before and
#: after it in the allowed scope (a question and its answer: an answer seldom restates
#: what it answers; chosen on LoCoMo's tuning half, docs/semantic.md).
NEIGHBOUR_SHARE = 0.5
#: A vector-only candidate's score shown with it (it orders nothing: fusion ranks vector
#: finds by similarity): 60 x its similarity, as an FTS match's 60, and the active
#: branch's 15 (every vector candidate is on the branch), then the row's own parts.
VECTOR_MATCH, VECTOR_BRANCH = 60.0, 15.0
#: The whole semantic step must finish within this budget, or lexical results stand.
DEFAULT_TIMEOUT_MS = 250.0
#: Query vectors kept per process (1.5 KB each for MiniLM).
QUERY_MEMO = 256
#: Only the start of a very long message is embedded (MiniLM reads 256 word pieces).
MAX_QUERY_CHARS = 2000
#: An entry of this many tokens needs twice the matched rarity to be a strong hit.
STRENGTH_TOKENS = 1000


class SemanticFallback(Exception):
    """Vectors cannot be used for this call; ``str(error)`` is the warning (no user text)."""


@dataclass(frozen=True)
class SessionVectors:
    """A session's current chunk vectors: row ``i`` of ``matrix`` belongs to entry ``rowids[i]``."""

    rowids: np.ndarray  # int64, one per chunk row
    matrix: np.ndarray  # float32 (chunks, dimensions), each row as long as its chunk's weight
    embeddable: frozenset[int]  # rowids of the session's entries that should have vectors


def add_semantic(connection: apsw.Connection, index_file: str, session_id: str, scope: Scope,
                 message: str, ranked: list[Ranked], *, embedder_name: str, cache: Any,
                 max_results: int, diagnostics: Diagnostics,
                 timeout_ms: float | None = None,
                 rarity: Mapping[Any, float] | None = None) -> list[Ranked]:
    """``ranked`` with vector candidates fused in, or unchanged plus a warning.

    ``scope`` is the request's allowed scope in ``session_id`` (its ``rowids``, or
    the whole session when None); only its eligible entries can become candidates.
    ``timeout_ms`` defaults to ``DEFAULT_TIMEOUT_MS``. ``rarity`` is each searched
    term's rarity in the index (``query.search.pipeline.term_rarity``); without it no lexical hit
    counts as strong.
    """
    started = time.perf_counter()
    counts: dict[str, Any] = {"embedder": embedder_name, "used": False}
    diagnostics.semantic = counts
    try:
        embedder, load_ms = _embedder(embedder_name)
        if load_ms is not None:
            counts["load_ms"] = load_ms
        with connection:  # a savepoint: joins the caller's read snapshot
            vectors = session_vectors(connection, index_file, session_id, Stamp.of(embedder),
                                      cache)
            known = {item.row.rowid for item in ranked}
            hits, context, spread = _search(vectors, scope, message, embedder, max_results,
                                            counts, cache, index_file, known)
            _check_time(started, DEFAULT_TIMEOUT_MS if timeout_ms is None else timeout_ms,
                        embedder_name, load_ms)
            extra = rows_by_rowid(connection, [rowid for rowid, _ in hits if rowid not in known])
    except SemanticFallback as reason:
        diagnostics.warn(f"semantic: {reason}; lexical results only")
        counts["ms"] = _elapsed_ms(started)
        return ranked
    fused, strong = _fuse(ranked, hits, context, extra, rarity or {}, spread)
    counts.update(used=True, added=len(fused) - len(ranked), strong_lexical=strong,
                  ms=_elapsed_ms(started))
    return fused


def warm_up(embedder_name: str) -> bool:
    """Load the embedder and embed one text, so a long-lived reader's first semantic
    call does not pay the model's load (hundreds of ms for MiniLM). False when it
    cannot load: semantic calls will then fall back, saying why."""
    try:
        embedder, _ = _embedder(embedder_name)
        embedder.embed_queries(["warm up"])
    except (SemanticFallback, EmbeddingError):
        return False
    return True


def session_vectors(connection: apsw.Connection, index_file: str, session_id: str,
                    stamp: Stamp, cache: Any) -> SessionVectors:
    """The session's current vectors, cached until another batch is stored."""
    if not has_table(connection):
        raise SemanticFallback("this index has no embeddings yet")
    seq = read_meta(connection, EMBEDDINGS_SEQ_META) or "0"
    key = ("semantic-vectors", index_file, session_id, stamp, seq)
    found: SessionVectors | None = cache.get(key)
    if found is None:
        found = _load(connection, session_id, stamp)
        cache.put(key, found)
    return found


def _load(connection: apsw.Connection, session_id: str, stamp: Stamp) -> SessionVectors:
    current, params = stamp.sql()
    rows = all_rows(connection.execute(
        f"SELECT e.rowid, v.vector FROM embeddings v JOIN entries e ON "
        f"e.session_id = v.session_id AND e.entry_id = v.entry_id "
        f"WHERE v.session_id = ? AND {EMBEDDABLE} AND {current} ORDER BY e.rowid, v.chunk",
        [session_id, *params]))
    embeddable = frozenset(row[0] for row in connection.execute(
        f"SELECT e.rowid FROM entries e WHERE e.session_id = ? AND {EMBEDDABLE}", (session_id,)))
    return SessionVectors(
        rowids=np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows)),
        matrix=decode([row[1] for row in rows], stamp.dimensions),
        embeddable=embeddable)


def _search(vectors: SessionVectors, scope: Scope, message: str, embedder: EmbeddingPort,
            max_results: int, counts: dict[str, Any], cache: Any, index_file: str,
            known: set[int]) -> tuple[list[tuple[int, float]], dict[int, float],
                                      tuple[float, float]]:
    """The best (rowid, similarity) per entry in scope, best first; the similarity
    with the neighbours' share (:func:`context_scores`) of each ``known`` (lexical)
    entry in scope, by rowid; and the mean and standard deviation of every entry's
    similarity in scope (how far a candidate stands out, ``Ranked.standout``)."""
    scoped = _scoped(vectors, scope, cache, index_file)
    counts.update(entries_in_scope=scoped.needed, embedded_in_scope=scoped.covered)
    if scoped.covered < scoped.needed:
        raise SemanticFallback(f"embeddings cover {scoped.covered} of {scoped.needed} "
                               f"entries in scope")
    if scoped.needed == 0:
        return [], {}, (0.0, 0.0)
    query = _query_vector(embedder, message[:MAX_QUERY_CHARS], counts)
    # einsum, not `@`: BLAS runs a matrix-vector product on all its threads, which a
    # busy machine makes slower than einsum's single-threaded loop (docs/benchmarks.md,
    # "Figures behind code choices").
    similarity = np.einsum("ij,j->i", scoped.matrix, query)
    best = entry_scores(similarity, scoped.starts, scoped.counts) - scoped.penalty
    spread = (float(best.mean()), float(best.std()))
    limit = min(len(best), max(SEMANTIC_FLOOR, SEMANTIC_FACTOR * max_results))
    top = np.argpartition(-best, limit - 1)[:limit]
    top = top[np.lexsort((scoped.entries[top], -best[top]))]
    hits = {int(scoped.entries[position]): round(float(best[position]), 4) for position in top}
    counts["vector_candidates"] = len(hits)
    context: dict[int, float] = {}
    if known:
        wanted = np.fromiter(known, dtype=np.int64, count=len(known))
        positions = np.searchsorted(scoped.entries, wanted)
        inside = positions < len(scoped.entries)
        inside[inside] = scoped.entries[positions[inside]] == wanted[inside]
        shared = context_scores(best)
        context = {rowid: round(float(shared[position]), 4) for rowid, position
                   in zip(wanted[inside].tolist(), positions[inside].tolist(), strict=True)}
    return list(hits.items()), context, spread


def context_scores(scores: np.ndarray, share: float = NEIGHBOUR_SHARE) -> np.ndarray:
    """Each entry's score with its better neighbour's: ``(own + share x max(0, the better
    of the entries just before and after it)) / (1 + share)``, entries in session order.

    Why: in a conversation the turn that answers a question seldom repeats its words; the
    question is often the turn before it (on LoCoMo the best vector match was often the
    other speaker's question, the evidence its answer), so a turn next to a good match
    shares some of it. Dividing by ``1 + share`` keeps an entry without such neighbours
    on its own scale.
    """
    if len(scores) < 2 or share == 0:
        return scores
    before = np.concatenate(([-np.inf], scores[:-1]))
    after = np.concatenate((scores[1:], [-np.inf]))
    neighbour = np.maximum(0.0, np.maximum(before, after))
    return ((scores + share * neighbour) / (1 + share)).astype(np.float32)


def entry_scores(similarity: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Each entry's score before the chunk penalty: the mean of its two best chunks'
    similarities (its only chunk's, when it has one).

    ``similarity`` holds one value per chunk row, grouped by entry; entry ``i`` has
    ``counts[i]`` rows from ``starts[i]``. Why two: one chunk of a long entry can match
    a question by chance, two rarely do; on the tuning questions this beat the best
    chunk alone (docs/semantic.md).
    """
    if len(starts) == 0:
        return np.zeros(0, dtype=np.float32)
    best = np.maximum.reduceat(similarity, starts)
    is_best = similarity == np.repeat(best, counts)
    second = np.maximum.reduceat(np.where(is_best, -np.inf, similarity), starts)
    # The best value twice (a tie) is the second best too; a single chunk is its own.
    tied = np.add.reduceat(is_best.astype(np.int32), starts) > 1
    second = np.where(tied | (counts == 1), best, second)
    return ((best + second) / 2).astype(np.float32)


def _query_vector(embedder: EmbeddingPort, text: str, counts: dict[str, Any]) -> np.ndarray:
    """The message's vector. Memoized: an agent asks again with the same message on
    every model call of a turn, and a model takes milliseconds to embed it."""
    hits = _embed_query.cache_info().hits
    try:
        vector = _embed_query(embedder, text)
    except EmbeddingError as error:
        raise SemanticFallback(f"the query could not be embedded ({type(error).__name__})"
                               ) from None
    counts["query_cached"] = _embed_query.cache_info().hits > hits
    return vector


@lru_cache(maxsize=QUERY_MEMO)
def _embed_query(embedder: EmbeddingPort, text: str) -> np.ndarray:
    vector: np.ndarray = embedder.embed_queries([text])[0]
    vector.setflags(write=False)  # shared by every call that asks the same
    return vector


@dataclass(frozen=True)
class ScopedVectors:
    """The chunk vectors of one scope (a contiguous copy, so a query is one product)."""

    rowids: np.ndarray
    matrix: np.ndarray
    needed: int  # embeddable entries in scope
    covered: int  # ... of which have current vectors
    entries: np.ndarray  # the distinct rowids, in row order
    starts: np.ndarray  # index of each entry's first chunk row
    counts: np.ndarray  # each entry's chunk rows
    penalty: np.ndarray  # CHUNK_PENALTY * ln(chunks) per entry


def _scoped(vectors: SessionVectors, scope: Scope, cache: Any, index_file: str) -> ScopedVectors:
    """The scope's rows of ``vectors``, cached per session matrix and scope."""
    key = ("semantic-scope", index_file, id(vectors), scope)
    found: ScopedVectors | None = cache.get(key)
    if found is None:
        if scope.rowids is None:
            allowed = vectors.embeddable
        else:
            allowed = vectors.embeddable & scope.rowids
        mask = np.isin(vectors.rowids, np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
        rowids = vectors.rowids[mask]  # grouped by entry: loaded in rowid, chunk order
        entries, starts, chunks = np.unique(rowids, return_index=True, return_counts=True)
        found = ScopedVectors(rowids, np.ascontiguousarray(vectors.matrix[mask]), len(allowed),
                              len(entries), entries, starts, chunks,
                              (CHUNK_PENALTY * np.log(chunks)).astype(np.float32))
        cache.put(key, found)
    return found


def _embedder(name: str) -> tuple[EmbeddingPort, float | None]:
    """The embedder, and how long loading it took if this call had to (else None)."""
    started = None if is_loaded(name) else time.perf_counter()
    try:
        embedder = get_embedder(name)
        return embedder, None if started is None else _elapsed_ms(started)
    except EmbeddingError as error:
        raise SemanticFallback(f"embedder {name!r} is unavailable ({type(error).__name__})"
                               ) from None
    except Exception as error:  # a broken model file must never fail the call
        raise SemanticFallback(f"embedder {name!r} failed to load ({type(error).__name__})"
                               ) from None


def lexical_strength(item: Ranked, rarity: Mapping[Any, float]) -> float:
    """How much of the question a lexical candidate's verified matches carry (0..1): the
    share of the searched terms' rarity (``query.search.pipeline.term_rarity``) its distinct matched
    terms hold, times ``STRENGTH_TOKENS / (STRENGTH_TOKENS + tokens)``.

    Why rarity: a match on the speaker's name or the project's own vocabulary says little,
    the rare word that carries the question says much. Why the length discount: a long
    entry matches many of a question's words by chance (on the fixture, the 50 KB plan
    document and whole-file reads held 45-72% of many paraphrases' rarity).
    """
    weights = {term.text: weight for term, weight in rarity.items()}
    mass = math.fsum(weights.values())
    if mass <= 0:
        return 0.0
    matched = math.fsum(weights.get(text, 0.0) for text in {m.term.text for m in item.matches})
    return matched / mass * STRENGTH_TOKENS / (STRENGTH_TOKENS + max(0, item.row.tokens))


def _fuse(ranked: list[Ranked], hits: list[tuple[int, float]], context: dict[int, float],
          extra: dict[int, Row], rarity: Mapping[Any, float],
          spread: tuple[float, float] = (0.0, 0.0)) -> tuple[list[Ranked], int]:
    """Lexical items in their tiers, each of ``other`` with its similarity's part (of
    ``context``); vector candidates fused into ``other``; and how many lexical hits were
    strong."""
    by_key: dict[CandidateKey, Ranked] = {(item.row.session_id, item.row.entry_id): item
                                          for item in ranked}
    by_rowid = {item.row.rowid: item for item in ranked}
    lexical = [Candidate(key, item.tier, item.score, float(item.row.ts_ms or 0),  # type: ignore[arg-type]
                         round(lexical_strength(item, rarity), 4),
                         context.get(item.row.rowid))
               for key, item in by_key.items()]
    semantic: list[tuple[CandidateKey, float]] = []
    for rowid, similarity in hits:
        if rowid in by_rowid:  # a lexical candidate: vectors may reorder it within `other`
            row = by_rowid[rowid].row
        elif rowid in extra and similarity >= MIN_SIMILARITY:
            row = extra[rowid]
            by_key[(row.session_id, row.entry_id)] = _vector_only(row, similarity)
        else:
            continue
        semantic.append(((row.session_id, row.entry_id), similarity))
    mean, deviation = spread
    if deviation > 0:  # how far each candidate's similarity stands out in the scope
        for rowid, item in by_rowid.items():
            if rowid in context:
                item.standout = round((context[rowid] - mean) / deviation, 3)
        for rowid, similarity in hits:
            found = by_key.get((extra[rowid].session_id, extra[rowid].entry_id)) \
                if rowid in extra else None
            if found is not None:
                found.standout = round((similarity - mean) / deviation, 3)
    fused = fuse(lexical, semantic)
    for candidate in fused:
        if candidate.points:  # explained like every other part of the score
            item = by_key[candidate.key]
            item.add(candidate.points,
                     f"semantic similarity {context[item.row.rowid]:.2f}")
            item.score = round(item.score, 2)
    return [by_key[candidate.key] for candidate in fused], sum(c.strong for c in fused)


def _vector_only(row: Row, similarity: float) -> Ranked:
    """A candidate only the vectors found: tier ``other``, scored by its similarity, the
    active branch and the row's own parts (``ranking.row_parts``: authority, token cost)."""
    item = Ranked(row, [])
    item.add(round(VECTOR_MATCH * similarity, 2), f"vector match {similarity:.2f}")
    item.add(VECTOR_BRANCH, "active branch")
    for reason, points in row_parts(row):
        item.add(points, reason)
    item.score = round(item.score, 2)
    return item


def _check_time(started: float, timeout_ms: float, embedder_name: str,
                load_ms: float | None) -> None:
    if _elapsed_ms(started) <= timeout_ms:
        return
    if load_ms is not None:  # a fresh process: say why, and what keeps the model loaded
        raise SemanticFallback(
            f"took longer than {timeout_ms:g} ms: loading the embedder {embedder_name!r} "
            f"took {load_ms:.0f} ms in this fresh process (`lookback serve` keeps it loaded)")
    raise SemanticFallback(f"took longer than {timeout_ms:g} ms")


def _elapsed_ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
