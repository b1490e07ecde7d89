"""The retrieval steps, in one place, as docs/specification.md numbers them.

Automatic retrieval (``query.search.retrieve``), history search and ``source``
(``query.search.history``) all run these; each caller keeps only its policy (which
scope, what to return, the budget). ``rank`` runs steps 3 to 9 over one scope: (3)
literal search, (4) FTS5 ``bm25`` search, (5) merge by entry key, (7) verify each
row's match (the scope, steps 6 and 7, is the caller's, applied in SQL before every
LIMIT), (8) rank, an optional re-ranking (the semantic step), (9) deduplicate.
``quote`` is the excerpt of step 10, centred on the first verified match.

One failure handling for every caller: a failed literal search fails the whole call
(the pool's translated ``IndexUnavailable``, which the caller answers as
``disabled``); a failed FTS step only loses its rows and phrase bits, with an
``FTS search failed`` warning in ``Diagnostics``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import apsw

from lookback.index.store import IndexUnavailable, read_errors
from lookback.query.context.evidence import excerpt
from lookback.query.contract.answers import Diagnostics
from lookback.query.privacy.policy import without_markers
from lookback.query.search.ranking import (
    add_neighbours,
    recency_position,
    row_parts,
    score,
    sort_key,
    topic_key,
    topic_parts,
)
from lookback.query.search.searches import (
    add_literal_bits,
    add_phrase_bits,
    count_fts,
    fts_search,
    literal_search,
)
from lookback.query.search.term_stats import rarity, selective_expression, unseen
from lookback.query.search.types import Ranked, Row, Scope, Searched
from lookback.query.text.dates import TimeSpan, time_spans
from lookback.query.text.fts_query import folded_phrase, form_prefix
from lookback.query.text.matching import Match, PhraseFinder, find_literal
from lookback.query.text.terms import Term, extract_terms

#: Entry types that have indexed text but are never evidence (their rows stay out
#: of every automatic scope).
INELIGIBLE_WITH_TEXT = frozenset({"compaction", "branch_summary"})

#: Rows fetched per literal and for the FTS query; the scope filters apply before
#: these limits. They never depend on ``max_results``: the pool is the same however
#: many results are asked for, so the first k answers never change (issue 19).
LITERAL_POOL, FTS_POOL = 24, 48

#: A literal term's share of the message's information, relative to a word's
#: (``information``; the confidence floor's input).
LITERAL_WEIGHT = 2.0

#: A candidate's share of the message's information, its rarest topic's weight, and
#: the topics it matches (``coverage``).
Coverage = tuple[float, float, frozenset[tuple[str, ...]]]

#: A candidate's tier and the score parts that depend only on its matches
#: (``ranking.topic_parts``).
TopicParts = tuple[str, list[tuple[str, float]]]


@functools.lru_cache(maxsize=1024)
def searched_of(message: str) -> Searched:
    """Terms and compiled query, memoized: a tool loop asks about one message many times."""
    return Searched.of(extract_terms(message))


def times_of(message: str | None, message_time_ms: int | None) -> tuple[TimeSpan, ...]:
    """The times ``message`` names, resolved against its time (None: now)."""
    if not message:
        return ()
    stamp = message_time_ms if message_time_ms is not None else int(time.time() * 1000)
    return _times_of(message, stamp)


@functools.lru_cache(maxsize=1024)
def _times_of(message: str, message_time_ms: int) -> tuple[TimeSpan, ...]:
    return time_spans(message, datetime.fromtimestamp(message_time_ms / 1000, UTC))


def literal_rows(connection: apsw.Connection, searched: Searched, scope: Scope,
                 limit: int) -> list[Row]:
    """Step 3: for each literal term, the newest ``limit`` rows holding it as written."""
    found: list[Row] = []
    for literal in searched.literals.texts:
        found.extend(literal_search(connection, literal, scope, limit))
    return found


def merge_candidates(connection: apsw.Connection, searched: Searched, literal: list[Row],
                     fts: list[Row]) -> list[Row]:
    """Step 5: merged rows, each knowing every phrase and literal term it matches."""
    merged = merge_rows(literal, fts)
    if searched.query is not None:  # no row has its phrase bits yet (see fts_search)
        add_phrase_bits(connection, searched.query, merged)
    add_literal_bits(connection, searched.literals, merged)
    return merged


def matches_of(row: Row, searched: Searched) -> list[Match]:
    """Step 7: the row's verified terms, from what SQL reported (literal bits, phrase bits).

    A literal term found as written is a ``literal`` match; otherwise a term whose
    phrase FTS5 matched (folded, whole tokens, in order) is a non-literal match.
    Positions are found later, only for the items returned (``first_position``).
    """
    matches: list[Match] = []
    literal_number = 0
    query = searched.query
    for index, term in enumerate(searched.terms):
        if term.is_literal:
            bit = literal_number
            literal_number += 1
            if row.literals >> bit & 1:
                matches.append(Match(term, -1, True))
                continue
        phrase = None if query is None else query.term_phrases[index]
        if phrase is not None and row.phrases >> phrase & 1:
            matches.append(Match(term, -1, False))
    return matches


def term_rarity(connection: apsw.Connection, searched: Searched) -> dict[Term, float]:
    """Each term's rarity in the index (``term_stats.rarity``), by its FTS5 phrase."""
    query = searched.query
    if query is None:
        return {}
    weights = rarity(connection, query.phrases)
    return {term: weights[number] for term, number in zip(searched.terms, query.term_phrases,
                                                          strict=True) if number is not None}


def unseen_names(connection: apsw.Connection, searched: Searched,
                 names: frozenset[str]) -> frozenset[Term]:
    """The message's names (``text.terms.names``: Redis, CORS, Cypress) when no row of
    the index holds any of them (``term_stats.unseen``): what the message names is
    something history never mentions. A message that also names something history
    knows (a person, a module) is about history, and its other names weigh as words."""
    query = searched.query
    if query is None or not names:
        return frozenset()
    named = [(term, number) for term, number in zip(searched.terms, query.term_phrases,
                                                     strict=True)
             if number is not None and term.text in names]
    if not named:
        return frozenset()
    absent = unseen(connection, [query.phrases[number] for _, number in named])
    return frozenset(term for term, _ in named) if all(absent) else frozenset()


def information(searched: Searched, rarity: Mapping[Term, float] | None,
                absent: frozenset[Term] = frozenset()) -> dict[tuple[str, ...], float]:
    """The message's topics (terms of one stem are one, ``ranking.topic_key``), each
    weighted by its rarity in the index (1 for a term without one: an identifier the
    index never saw is as informative as a word can be), an identifier, path, error,
    flag or quoted phrase ``LITERAL_WEIGHT`` times: the most specific thing the message
    says, so words around a name that matches nothing do not stand in for it. A name
    the index never saw (``absent``, ``unseen_names``) weighs as much: "the Cypress
    test" in a project that never mentions Cypress is not answered by its tests."""
    topics: dict[tuple[str, ...], float] = {}
    for term in searched.terms:
        weight = 1.0 if rarity is None else rarity.get(term, 1.0)
        decisive = term.is_literal or term in absent
        topics.setdefault(topic_key(term), weight * (LITERAL_WEIGHT if decisive else 1))
    return topics


def coverage(matches: Sequence[Match], topics: Mapping[tuple[str, ...], float]
             ) -> Coverage:
    """How much of the message's information ``matches`` carry: the share of its
    topics' weight they match, their rarest topic's weight, and the topics matched."""
    keys = frozenset(topic_key(match.term) for match in matches)
    total = math.fsum(topics.values())
    weights = [topics.get(key, 0.0) for key in keys]
    if total <= 0 or not weights:
        return 0.0, 0.0, keys
    # fsum: a set's order follows the hash seed, and a plain float sum follows the
    # order; the share decides what is kept, so it must not move between runs.
    return min(1.0, math.fsum(weights) / total), max(weights), keys


def add_unit_coverage(ranked: list[Ranked], topics: Mapping[tuple[str, ...], float],
                      matched: Mapping[int, frozenset[tuple[str, ...]]]) -> None:
    """Each candidate's coverage with the candidate just before or after it in its
    session (the better): a tool call and its result, a question and its answer, are
    one unit of meaning. ``matched`` holds each item's topics, by ``id``."""
    total = math.fsum(topics.values())
    by_position = {(item.row.session_id, item.row.seq): item for item in ranked}
    for item in ranked:
        best, peak = item.coverage, item.peak
        own = matched[id(item)]
        for step in (-1, 1):
            other = by_position.get((item.row.session_id, item.row.seq + step))
            if other is not None and total > 0:
                union = own | matched[id(other)]
                share = min(1.0, math.fsum(topics.get(key, 0.0) for key in union) / total)
                if share > best:
                    best, peak = share, max(item.peak, other.peak)
        item.unit_coverage, item.unit_peak = best, peak


def verify_and_rank(rows: list[Row], searched: Searched, allowed_ids: frozenset[str] | None,
                    fts_hits: int, diagnostics: Diagnostics,
                    on_branch: Callable[[Row], bool] | None = None,
                    rarity: dict[Term, float] | None = None,
                    when: Sequence[TimeSpan] = (),
                    absent: frozenset[Term] = frozenset()) -> list[Ranked]:
    """Steps 7 (verification) and 8: keep rows with a verified match, score, order.

    ``allowed_ids`` None skips the defensive branch check (explicit project search).
    ``on_branch`` says whether a row is on the caller's branch; None means every row
    is (automatic retrieval searches nothing else). Each item keeps that fact, and
    its "active branch" part comes from it, so a reason and the row cannot disagree.
    ``rarity`` weighs each matched term (``term_rarity``); ``when`` is the times the
    message names (``time_spans``), a signal inside each tier; ``absent`` its names
    the index never saw (``unseen_names``), for the confidence floor's ``information``.
    """
    ranked: list[Ranked] = []
    on_scope = [row for row in rows if allowed_ids is None or row.entry_id in allowed_ids]
    rejected_branch = len(rows) - len(on_scope)  # defensive: SQL already filtered
    unverified = 0
    # Many rows share their bits, so their matches and topic parts are computed once.
    seen: dict[tuple[int, int, bool], tuple[list[Match], TopicParts | None, Coverage]] = {}
    topics = []
    message = information(searched, rarity, absent)
    matched: dict[int, frozenset[tuple[str, ...]]] = {}
    for row in on_scope:
        branch = on_branch is None or on_branch(row)
        bits = (row.phrases, row.literals, branch)
        found = seen.get(bits)
        if found is None:
            matches = matches_of(row, searched)
            found = seen[bits] = (matches, topic_parts(matches, branch, rarity) if matches
                                  else None, coverage(matches, message))
        if found[1] is None:
            unverified += 1
            continue
        share, peak, keys = found[2]
        item = Ranked(row, list(found[0]), on_branch=branch, coverage=share, peak=peak)
        matched[id(item)] = keys
        ranked.append(item)
        topics.append(found[1])
    if ranked:
        first_session = ranked[0].row.session_id
        across = any(item.row.session_id != first_session for item in ranked)
        positions = [position for item in ranked
                     if (position := recency_position(item.row, across)) is not None]
        oldest, newest = min(positions, default=0), max(positions, default=0)
        for item, (tier, topic) in zip(ranked, topics, strict=True):
            score(item, on_branch=item.on_branch, fts_hits=fts_hits, oldest=oldest,
                  newest=newest, static=(tier, [*topic, *row_parts(item.row)]), when=when,
                  across_sessions=across)
    add_neighbours(ranked)
    add_unit_coverage(ranked, message, matched)
    ranked.sort(key=sort_key)
    diagnostics.alternate_branch_candidates = rejected_branch
    diagnostics.unverified_rejected = unverified
    return ranked


def first_position(text: str, matches: list[Match]) -> int:
    """Where the earliest verified term starts in ``text`` (to centre an excerpt)."""
    positions = []
    finder = PhraseFinder(text)
    for match in matches:
        if match.literal:
            found = find_literal(text, match.term.text)
        else:
            found = finder.find(folded_phrase(match.term.text))
        if found is not None:
            positions.append(found)
    if not positions:  # matched only in other forms (stems): look for those
        forms = (finder.find_form(folded_phrase(m.term.text), form_prefix(m.term))
                 for m in matches if not m.literal)
        positions = [found for found in forms if found is not None]
    return min(positions, default=0)


def merge_rows(*groups: list[Row]) -> list[Row]:
    """Step 5: one row per entry key; literal and phrase bits and the FTS rank combined."""
    merged: dict[tuple[str, str], Row] = {}
    for rows in groups:
        for row in rows:
            key = (row.session_id, row.entry_id)
            seen = merged.get(key)
            if seen is None:
                merged[key] = row
                continue
            seen.literals |= row.literals
            seen.phrases |= row.phrases
            if row.fts_rank is not None and seen.fts_rank is None:
                seen.bm25, seen.fts_rank = row.bm25, row.fts_rank
    return list(merged.values())


def deduplicate(ranked: list[Ranked], diagnostics: Diagnostics | None = None) -> list[Ranked]:
    """Step 9: keep the first (higher-ranked, then newer) of identical normalized texts."""
    seen: set[object] = set()
    unique: list[Ranked] = []
    for item in ranked:
        key = item.row.text_hash or ("rowid", item.row.rowid)
        if key in seen:
            continue
        seen.add(key)
        unique.append(item)
    if diagnostics is not None:
        diagnostics.deduplicated = len(ranked) - len(unique)
    return unique


#: What may re-rank the verified, ranked candidates before deduplication (automatic
#: retrieval's semantic step): given them and each term's rarity, the new list.
Rerank = Callable[[list[Ranked], dict[Term, float]], list[Ranked]]


class SemanticStep(Protocol):
    """The opt-in semantic step (``query.semantic.hybrid.add_semantic``): vector
    candidates of ``scope`` fused into ``ranked``. The shell hands it to the retriever,
    so ``query.search`` never imports ``query.semantic``, which builds on it."""

    def __call__(self, connection: apsw.Connection, index_file: str, session_id: str,
                 scope: Scope, message: str, ranked: list[Ranked], *, embedder_name: str,
                 cache: Any, max_results: int, diagnostics: Diagnostics,
                 timeout_ms: float | None = None,
                 rarity: Mapping[Any, float] | None = None) -> list[Ranked]: ...


def rank(connection: apsw.Connection, searched: Searched, scope: Scope,
         diagnostics: Diagnostics, *, allowed_ids: frozenset[str] | None = None,
         on_branch: Callable[[Row], bool] | None = None, context_scope: Scope | None = None,
         when: Sequence[TimeSpan] = (), rerank: Rerank | None = None,
         names: frozenset[str] = frozenset()) -> list[Ranked]:
    """Steps 3 to 9 in ``scope``: the verified, ranked, deduplicated candidates.

    ``allowed_ids``, ``on_branch`` and ``when`` are ``verify_and_rank``'s; ``names``
    the message's (``text.terms.names``), for the confidence floor (``unseen_names``);
    ``context_scope`` (the entries in context) counts the FTS hits left out there
    (``Diagnostics.in_context_removed``); ``rerank`` runs after ranking, before
    deduplication. A failed literal search raises; a failed FTS step only warns (see
    the module's docstring).
    """
    rows = literal_rows(connection, searched, scope, LITERAL_POOL)
    fts_rows: list[Row] = []
    if searched.query is not None:
        try:
            with read_errors("FTS5 index"):
                selective = selective_expression(connection, searched.query)
                fts_rows = fts_search(connection, searched.query, scope, FTS_POOL, selective)
                if context_scope is not None:
                    diagnostics.in_context_removed = count_fts(
                        connection, selective or searched.query.expression, context_scope)
        except IndexUnavailable as error:
            diagnostics.warn(f"FTS search failed: {error}")
    try:
        with read_errors("FTS5 index"):
            merged = merge_candidates(connection, searched, rows, fts_rows)
    except IndexUnavailable as error:  # rows keep their literal matches
        diagnostics.warn(f"FTS search failed: {error}")
        merged = merge_rows(rows, fts_rows)
    diagnostics.candidates = len(merged)
    weights = term_rarity(connection, searched)
    ranked = verify_and_rank(merged, searched, allowed_ids, len(fts_rows), diagnostics,
                             on_branch=on_branch, rarity=weights, when=when,
                             absent=unseen_names(connection, searched, names))
    if rerank is not None:
        ranked = rerank(ranked, weights)
    return deduplicate(ranked, diagnostics)


def quote(text: str | None, matches: Sequence[Match], max_chars: int) -> str:
    """Step 10's excerpt of ``text``: at most ``max_chars``, centred on the earliest
    verified match (``first_position``); from the start without matches (a source read
    whole, a candidate only the vectors found). The privacy markers are left out."""
    text = without_markers(text or "")
    if len(text) <= max_chars:  # the whole text, wherever its match is: no need to look
        return text
    return excerpt(text, first_position(text, list(matches)) if matches else 0, max_chars)
