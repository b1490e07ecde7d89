"""The retrieval pipeline, step by step as docs/specification.md numbers it.

``Retriever.retrieve(request)`` reads only committed index state and never waits
for ingestion. Steps: (1) latest real user message, (2) terms, (3) literal search,
(4) FTS5 ``bm25`` search, (5) merge by entry key, (6) drop rows in context and
(7) off the branch — both in SQL, before any LIMIT — and verify each lexical row's
match, (8) rank, (9) deduplicate, (10) bounded evidence messages, privacy policy.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import apsw

from lookback.index.store import IndexUnavailable, read_errors
from lookback.index.tokens import CHARS_PER_TOKEN
from lookback.index.tree import context_entries
from lookback.query.context.evidence import (
    MAX_EXCERPT_CHARS,
    envelope,
    evidence_message,
    excerpt,
)
from lookback.query.context.messages import estimate_message_tokens
from lookback.query.privacy.policy import (
    ClassificationResult,
    PrivacyPolicy,
    classify_source,
)
from lookback.query.search.answers import (
    Diagnostics,
    Evidence,
    EvidenceMessage,
    RetrieveAnswer,
    TextBlock,
    Withheld,
)
from lookback.query.search.candidates import (
    Literals,
    Row,
    Scope,
    add_literal_bits,
    add_phrase_bits,
    count_fts,
    entries_for,
    fts_search,
    literal_search,
    load_texts,
    rarity,
    selective_expression,
    session_state,
)
from lookback.query.search.ranking import (
    Ranked,
    add_neighbours,
    row_parts,
    score,
    sort_key,
    topic_parts,
)
from lookback.query.search.reader import IndexReader, NotIndexed
from lookback.query.search.request import RetrievalRequest
from lookback.query.semantic.hybrid import add_semantic
from lookback.query.text.dates import TimeSpan, time_spans
from lookback.query.text.fts_query import FtsQuery, compile_query, folded_phrase, form_prefix
from lookback.query.text.matching import Match, PhraseFinder, find_literal
from lookback.query.text.terms import QueryTerms, Term, extract_terms

log = logging.getLogger("lookback.query")

#: Entry types that have indexed text but are never evidence (their rows stay out
#: of every automatic scope).
INELIGIBLE_WITH_TEXT = frozenset({"compaction", "branch_summary"})

#: Rows fetched per literal and for the FTS query; the scope filters apply before
#: these limits. They never depend on ``max_results``: the pool is the same however
#: many results are asked for, so the first k answers never change (issue 19).
LITERAL_POOL, FTS_POOL = 24, 48

#: Fitting an excerpt to the rest of the budget (docs/specification.md, "Budgets"):
#: below ``MIN_REMAINING_TOKENS`` the budget is full; otherwise the excerpt shrinks by
#: ``EXCERPT_SHRINK`` steps, centred on its first match, to no less than
#: ``MIN_EXCERPT_CHARS`` (48 tokens of quoted text), until its envelope fits.
MIN_REMAINING_TOKENS, EXCERPT_SHRINK = 48, 0.7
MIN_EXCERPT_CHARS = MIN_REMAINING_TOKENS * CHARS_PER_TOKEN


@dataclass(frozen=True)
class Allowed:
    """The entries automatic retrieval may return for this request, as SQL scopes."""

    scope: Scope  # on the branch and not in context
    ids: frozenset[str]
    context_scope: Scope  # on the branch and in context (for diagnostics)


@dataclass(frozen=True)
class Searched:
    """One query's compiled form: its terms, FTS5 phrases and literal terms."""

    terms: QueryTerms
    query: FtsQuery | None
    literals: Literals

    @classmethod
    def of(cls, terms: QueryTerms) -> Searched:
        return cls(terms, compile_query(terms), Literals(tuple(t.text for t in terms.literals)))


class Retriever:
    def __init__(self, reader: IndexReader, policy: PrivacyPolicy | None = None,
                 embedder: str = "hashing") -> None:
        self.reader = reader
        self.policy = policy or PrivacyPolicy()
        self.embedder = embedder  # used only for ``semantic: true`` (query.semantic)

    def retrieve(self, request: RetrievalRequest) -> RetrieveAnswer:
        started = time.perf_counter()
        diagnostics = Diagnostics()
        if request.message is None:
            return _answer("no-query", None, diagnostics, started)
        searched = searched_of(request.message)
        if not searched.terms.has_topic:
            return _answer("no-query", searched.terms, diagnostics, started)
        try:
            with self.reader.session(session_file=request.session_file,
                                     project=request.project,
                                     session_id=request.session_id) as view:
                return self._retrieve(view.connection, view.path, view.session_id, request,
                                      searched, diagnostics, started)
        except (NotIndexed, OSError):
            return _answer("not-indexed", searched.terms, diagnostics, started)
        except IndexUnavailable as error:  # damaged, busy, unreadable (the pool's): say why
            diagnostics.warn(f"index unavailable: {error}")
            return _answer("disabled", searched.terms, diagnostics, started)

    def _retrieve(self, connection: apsw.Connection, path: Any, session_id: str,
                  request: RetrievalRequest, searched: Searched, diagnostics: Diagnostics,
                  started: float) -> RetrieveAnswer:
        terms = searched.terms
        state = session_state(connection, session_id)
        if state is None:
            raise NotIndexed("session not indexed")
        diagnostics.index_watermark = state.watermark
        allowed = self._allowed(connection, path, session_id, request, state.leaf_id,
                                state.epoch)
        scope = allowed.scope
        # A failed exact search fails the request open (the pool's translated error,
        # caught in ``retrieve``); a failed FTS step only loses its rows and bits.
        rows = literal_rows(connection, searched, scope, LITERAL_POOL)
        fts_rows: list[Row] = []
        if searched.query is not None:
            try:
                with read_errors("FTS5 index"):
                    selective = selective_expression(connection, searched.query)
                    fts_rows = fts_search(connection, searched.query, scope, FTS_POOL,
                                          selective)
                    diagnostics.in_context_removed = count_fts(
                        connection, selective or searched.query.expression,
                        allowed.context_scope)
            except IndexUnavailable as error:
                diagnostics.warn(f"FTS search failed: {error}")
        try:
            with read_errors("FTS5 index"):
                merged = merge_candidates(connection, searched, rows, fts_rows)
        except IndexUnavailable as error:  # rows keep their literal matches
            diagnostics.warn(f"FTS search failed: {error}")
            merged = merge_rows(rows, fts_rows)
        diagnostics.candidates = len(merged)
        rarity = term_rarity(connection, searched)
        ranked = verify_and_rank(merged, searched, allowed.ids, len(fts_rows), diagnostics,
                                 rarity=rarity,
                                 when=times_of(request.message, request.message_time_ms))
        if request.semantic and request.message is not None:
            ranked = add_semantic(connection, str(path), session_id, scope, request.message,
                                  ranked, embedder_name=self.embedder,
                                  cache=self.reader.vectors,
                                  max_results=request.max_results, diagnostics=diagnostics,
                                  rarity=rarity)
        unique = deduplicate(ranked, diagnostics)
        evidence, excluded = self._evidence(unique, request, connection, str(path),
                                            diagnostics)
        return _answer("ok", terms, diagnostics, started, evidence, excluded)

    # -- steps 6 and 7: what may be returned -------------------------------------

    def _allowed(self, connection: apsw.Connection, path: Any, session_id: str,
                 request: RetrievalRequest, session_leaf: str | None, epoch: int) -> Allowed:
        """Steps 6 and 7 as SQL scopes: the branch minus the entries in context.

        ``branch_ids``/``context_ids`` from the caller are authoritative; otherwise
        both come from the index for the leaf. The result is cached per leaf and
        inputs, since every call of a tool loop asks about the same branch.
        """
        leaf = request.leaf_id or (request.branch_ids[-1] if request.branch_ids else None)
        leaf = leaf or session_leaf
        if leaf is None:
            raise NotIndexed("session has no entries")
        branch = self.reader.branch(connection, path, session_id, leaf, epoch)
        key = ("allowed", str(path), session_id, leaf, epoch,
               request.branch_ids, request.context_ids, request.quoted_ids)
        cached = self.reader.scopes.get(key)
        if cached is not None:
            return cached  # type: ignore[return-value]
        if request.branch_ids is not None and [e.entry_id for e in branch] != list(
                request.branch_ids):
            branch = entries_for(connection, session_id, request.branch_ids)
        if request.context_ids is not None:
            context_ids = set(request.context_ids)
        else:
            context_ids = {e.entry_id for e in context_entries(branch)}
        if request.quoted_ids:  # quoted earlier and still re-sent: in context, in effect
            context_ids |= set(request.quoted_ids)
        # Only message-like rows may come back; summaries are indexed but never evidence.
        on_branch = [e for e in branch if e.entry_id not in context_ids
                     and e.type not in INELIGIBLE_WITH_TEXT]
        allowed = Allowed(
            scope=Scope.of_rows(e.rowid for e in on_branch),
            ids=frozenset(e.entry_id for e in on_branch),
            context_scope=Scope.of_rows(e.rowid for e in branch
                                        if e.entry_id in context_ids
                                        and e.type not in INELIGIBLE_WITH_TEXT),
        )
        self.reader.scopes.put(key, allowed)
        return allowed

    # -- step 10 ------------------------------------------------------------------

    def _evidence(self, ranked: list[Ranked], request: RetrievalRequest,
                  connection: apsw.Connection, index_file: str,
                  diagnostics: Diagnostics) -> tuple[list[Evidence], list[Withheld]]:
        """Steps 10: bounded evidence, within the token budget and the privacy policy.

        Each source is classified whole (all of its indexed text, not only the
        excerpt), so a secret just outside the excerpt still withholds it. Texts
        are read here, for the items considered, and only on a memo miss. A source
        larger than the rest of the budget is shrunk to fit (``_fitted``); when even
        that fails the budget is full, and no lower-ranked source takes its place.
        """
        budget = request.max_retrieved_history_tokens
        used = 0
        evidence: list[Evidence] = []
        excluded: list[Withheld] = []
        for position, item in enumerate(ranked):
            if len(evidence) >= request.max_results:
                break

            def read_text(position: int = position) -> None:
                # Only on a memo miss; then read the next few texts together.
                if ranked[position].row.text is None:
                    load_texts(connection, (i.row for i in ranked[position:position + 8]))

            verdict = self.policy.gate(self._classification(index_file, item.row, read_text),
                                       request.provider)
            label = verdict.classification.label
            built = self._build_item(index_file, item, label, read_text)
            if verdict.reason is not None:
                excluded.append(_withheld(built, verdict.reason))
                continue
            fitted = self._fitted(index_file, item, label, read_text, built, budget - used)
            if fitted is None:
                excluded.append(_withheld(built, "retrieval budget"))
                break
            evidence.append(fitted)
            used += fitted.tokens
        diagnostics.tokens_used = used
        return evidence, excluded

    def _fitted(self, index_file: str, item: Ranked, label: str,
                read_text: Callable[[], None], built: Evidence,
                remaining: int) -> Evidence | None:
        """``built``, or a shorter excerpt of the same source that fits ``remaining``.

        The excerpt shrinks by ``EXCERPT_SHRINK`` steps, still centred on its first
        match; None when fewer than ``MIN_REMAINING_TOKENS`` remain or the envelope
        does not fit even with a ``MIN_EXCERPT_CHARS`` excerpt.
        """
        if built.tokens <= remaining:
            return built
        if remaining < MIN_REMAINING_TOKENS:
            return None
        chars = len(built.excerpt)
        while chars > MIN_EXCERPT_CHARS:
            chars = max(MIN_EXCERPT_CHARS, int(chars * EXCERPT_SHRINK))
            smaller = self._build_item(index_file, item, label, read_text, chars)
            if smaller.tokens <= remaining:
                return smaller
        return None

    def _build_item(self, index_file: str, item: Ranked, label: str,
                    read_text: Callable[[], None],
                    max_chars: int = MAX_EXCERPT_CHARS) -> Evidence:
        """The evidence item, memoized: same row, score parts and size, same message
        (frozen, so every answer that carries it shares the one built)."""
        key = ("evidence", index_file, item.row.rowid, item.tier, tuple(item.parts),
               tuple((match.term, match.literal) for match in item.matches), label,
               max_chars)
        built = self.reader.evidence.get(key)
        if built is None:
            read_text()
            built = _build_item(item, label, max_chars)
            self.reader.evidence.put(key, built)
        return built  # type: ignore[return-value]

    def _classification(self, index_file: str, row: Row,
                        read_text: Callable[[], None]) -> ClassificationResult:
        """The row's whole-text classification, memoized per row (rows never change)."""
        key = ("classification", index_file, row.rowid)
        result = self.reader.entries.get(key)
        if result is None:
            read_text()
            result = classify_source(row.text)
            self.reader.entries.put(key, result)
        return result  # type: ignore[return-value]


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


def terms_of(message: str) -> QueryTerms:
    """``extract_terms``, memoized (see ``searched_of``)."""
    return searched_of(message).terms


def literal_rows(connection: apsw.Connection, searched: Searched, scope: Scope,
                 limit: int) -> list[Row]:
    """Step 3: for each literal term, the newest ``limit`` rows holding it as written."""
    found: list[Row] = []
    for literal in searched.literals.texts:
        found.extend(literal_search(connection, literal, scope, limit))
    return found


def find_candidates(connection: apsw.Connection, searched: Searched, scope: Scope,
                    literal_limit: int, fts_limit: int) -> tuple[list[Row], int]:
    """Steps 3 to 5 in ``scope``: merged literal and FTS rows, and the FTS hit count."""
    rows = literal_rows(connection, searched, scope, literal_limit)
    fts_rows: list[Row] = []
    if searched.query is not None:
        fts_rows = fts_search(connection, searched.query, scope, fts_limit,
                              selective_expression(connection, searched.query))
    return merge_candidates(connection, searched, rows, fts_rows), len(fts_rows)


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
    """Each term's rarity in the index (``candidates.rarity``), by its FTS5 phrase."""
    query = searched.query
    if query is None:
        return {}
    weights = rarity(connection, query.phrases)
    return {term: weights[number] for term, number in zip(searched.terms, query.term_phrases,
                                                          strict=True) if number is not None}


def verify_and_rank(rows: list[Row], searched: Searched, allowed_ids: frozenset[str] | None,
                    fts_hits: int, diagnostics: Diagnostics,
                    on_branch: Callable[[Row], bool] | None = None,
                    rarity: dict[Term, float] | None = None,
                    when: Sequence[TimeSpan] = ()) -> list[Ranked]:
    """Steps 7 (verification) and 8: keep rows with a verified match, score, order.

    ``allowed_ids`` None skips the defensive branch check (explicit project search).
    ``on_branch`` says whether a row is on the caller's branch; None means every row
    is (automatic retrieval searches nothing else). Each item keeps that fact, and
    its "active branch" part comes from it, so a reason and the row cannot disagree.
    ``rarity`` weighs each matched term (``term_rarity``); ``when`` is the times the
    message names (``time_spans``), a signal inside each tier.
    """
    ranked: list[Ranked] = []
    on_scope = [row for row in rows if allowed_ids is None or row.entry_id in allowed_ids]
    rejected_branch = len(rows) - len(on_scope)  # defensive: SQL already filtered
    unverified = 0
    # Many rows share their bits, so their matches and topic parts are computed once.
    seen: dict[tuple[int, int, bool], tuple[list[Match], tuple | None]] = {}
    topics = []
    for row in on_scope:
        branch = on_branch is None or on_branch(row)
        bits = (row.phrases, row.literals, branch)
        found = seen.get(bits)
        if found is None:
            matches = matches_of(row, searched)
            found = seen[bits] = (matches, topic_parts(matches, branch, rarity) if matches
                                  else None)
        if found[1] is None:
            unverified += 1
            continue
        ranked.append(Ranked(row, list(found[0]), on_branch=branch))
        topics.append(found[1])
    if ranked:
        oldest = min(item.row.seq for item in ranked)
        newest = max(item.row.seq for item in ranked)
        for item, (tier, topic) in zip(ranked, topics, strict=True):
            score(item, on_branch=item.on_branch, fts_hits=fts_hits, oldest=oldest,
                  newest=newest, static=(tier, [*topic, *row_parts(item.row)]), when=when)
    add_neighbours(ranked)
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


def _build_item(item: Ranked, classification: str,
                max_chars: int = MAX_EXCERPT_CHARS) -> Evidence:
    row = item.row
    first = first_position(row.text or "", item.matches)  # vector-only: no matches, 0
    quoted = excerpt(row.text or "", first, max_chars)
    text = envelope(session_id=row.session_id, entry_id=row.entry_id, timestamp=row.timestamp,
                    role=row.role, score=item.score, reasons=item.reasons, quoted=quoted)
    message = evidence_message(text, row.ts_ms)
    return Evidence(
        entry_id=row.entry_id,
        session_id=row.session_id,
        role=row.role,
        timestamp=row.timestamp,
        tier=item.tier,  # type: ignore[arg-type]  # ranking's tiers are the contract's
        score=item.score,
        reasons=tuple(item.reasons),
        # What the message costs the planner too, so a source fitted to the budget
        # here is never dropped there for a few tokens of message overhead.
        tokens=estimate_message_tokens(message),
        classification=classification,  # type: ignore[arg-type]  # a Classification label
        group_id=f"retrieval:{row.session_id}:{row.entry_id}",
        excerpt=quoted,
        message=EvidenceMessage(role="user", content=(TextBlock(type="text", text=text),),
                                timestamp=message["timestamp"]),
    )


def _withheld(item: Evidence, reason: str) -> Withheld:
    """What ``excluded`` lists of a source kept out: its ids, level and why, never text."""
    return Withheld(source=item.source, entry_id=item.entry_id, session_id=item.session_id,
                    classification=item.classification, reason=reason)


def _answer(status: str, terms: QueryTerms | None, diagnostics: Diagnostics,
            started: float, evidence: list[Evidence] | None = None,
            excluded: list[Withheld] | None = None) -> RetrieveAnswer:
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    diagnostics.latency_ms = latency_ms
    evidence = evidence or []
    log.info("retrieve status=%s terms=%d evidence=%d excluded=%d latency_ms=%.3f",
             status, len(terms) if terms else 0, len(evidence), len(excluded or []), latency_ms)
    return RetrieveAnswer(
        status=status,  # type: ignore[arg-type]  # one of the contract's statuses
        query=terms.by_kind() if terms else {},
        evidence=evidence,
        retrieved_event_ids=[item.source for item in evidence],
        excluded=excluded or [],
        diagnostics=diagnostics,
    )
