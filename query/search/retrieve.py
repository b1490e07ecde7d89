"""The retrieval pipeline, step by step as docs/specification.md numbers it.

``Retriever.retrieve(request)`` reads only committed index state and never waits
for ingestion. Steps: (1) latest real user message, (2) terms, (3) literal search,
(4) FTS5 ``bm25`` search, (5) merge by entry key, (6) drop rows in context and
(7) off the branch — both in SQL, before any LIMIT — and verify each lexical row's
match, (8) rank, (9) deduplicate, (10) bounded evidence messages, privacy policy.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import apsw
from lookback.index.store import IndexUnavailable
from lookback.index.tokens import estimate_tokens
from lookback.index.tree import PathEntry, context_entries
from lookback.query.context.evidence import envelope, evidence_message, excerpt
from lookback.query.privacy.policy import (
    Classification,
    PrivacyPolicy,
    classify_source,
    excluded_record,
)
from lookback.query.search.candidates import (
    Row,
    Scope,
    count_fts,
    fts_search,
    literal_search,
    load_texts,
)
from lookback.query.search.ranking import Ranked, score, sort_key, static_parts
from lookback.query.search.reader import EntryCache, FoldedCache, IndexReader, NotIndexed
from lookback.query.search.request import RetrievalRequest
from lookback.query.semantic.hybrid import add_semantic
from lookback.query.text.fts_query import build_fts_query
from lookback.query.text.matching import Match, TermMatcher
from lookback.query.text.terms import QueryTerms, extract_terms

log = logging.getLogger("lookback.query")

#: Entry types that have indexed text but are never evidence (their rows stay out
#: of every automatic scope).
INELIGIBLE_WITH_TEXT = frozenset({"compaction", "branch_summary"})

#: Rows fetched per literal and for the FTS query, as multiples of ``max_results``
#: (with a floor); the scope filters apply before these limits.
LITERAL_FACTOR, LITERAL_FLOOR = 2, 16
FTS_FACTOR, FTS_FLOOR = 2, 24


@dataclass(frozen=True)
class Allowed:
    """The entries automatic retrieval may return for this request, as SQL scopes."""

    scope: Scope  # on the branch and not in context
    ids: frozenset[str]
    context_scope: Scope  # on the branch and in context (for diagnostics)


class Retriever:
    def __init__(self, reader: IndexReader, policy: PrivacyPolicy | None = None,
                 embedder: str = "hashing") -> None:
        self.reader = reader
        self.policy = policy or PrivacyPolicy()
        self.embedder = embedder  # used only for ``semantic: true`` (query.semantic)

    def retrieve(self, request: RetrievalRequest) -> dict[str, Any]:
        started = time.perf_counter()
        diagnostics: dict[str, Any] = {"warnings": []}
        if request.message is None:
            return _answer("no-query", None, diagnostics, started)
        terms = terms_of(request.message)
        if not terms.has_topic:
            return _answer("no-query", terms, diagnostics, started)
        try:
            with self.reader.session(session_file=request.session_file,
                                     project=request.project,
                                     session_id=request.session_id) as view:
                return self._retrieve(view.connection, view.path, view.session_id, request,
                                      terms, diagnostics, started)
        except (NotIndexed, OSError):
            return _answer("not-indexed", terms, diagnostics, started)
        except IndexUnavailable as error:  # indexed, but not readable now: say why
            diagnostics["warnings"].append(f"index unavailable: {error}")
            return _answer("disabled", terms, diagnostics, started)
        except apsw.Error as error:  # a corrupt or unreadable index: fail open, say why
            diagnostics["warnings"].append(f"index unreadable: {type(error).__name__}")
            return _answer("disabled", terms, diagnostics, started)

    def _retrieve(self, connection: apsw.Connection, path: Any, session_id: str,
                  request: RetrievalRequest, terms: QueryTerms, diagnostics: dict[str, Any],
                  started: float) -> dict[str, Any]:
        state = connection.execute(
            "SELECT leaf_id, epoch, (SELECT value FROM meta WHERE key = 'applied_seq') "
            "FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
        if state is None:
            raise NotIndexed("session not indexed")
        diagnostics["index_watermark"] = int(state[2] or 0)
        allowed = self._allowed(connection, path, session_id, request, state[0], state[1])
        scope = allowed.scope
        literal_limit = max(LITERAL_FLOOR, LITERAL_FACTOR * request.max_results)
        fts_limit = max(FTS_FLOOR, FTS_FACTOR * request.max_results)
        try:
            rows = self._literal_rows(connection, terms, scope, literal_limit)
        except apsw.Error as error:
            diagnostics["warnings"].append(f"exact search failed: {type(error).__name__}")
            return _answer("disabled", terms, diagnostics, started)
        fts_query = build_fts_query(terms)
        fts_rows: list[Row] = []
        if fts_query is not None:
            try:
                fts_rows = fts_search(connection, fts_query, scope, fts_limit)
                diagnostics["in_context_removed"] = count_fts(
                    connection, fts_query, allowed.context_scope)
            except apsw.Error as error:
                diagnostics["warnings"].append(f"FTS search failed: {type(error).__name__}")
        merged = _merge(rows, fts_rows)
        diagnostics["candidates"] = len(merged)
        matcher = CachedMatcher(terms, self.reader.entries, str(path), connection,
                                self.reader.folded)
        ranked = verify_and_rank(merged, matcher, allowed.ids, len(fts_rows), diagnostics)
        if request.semantic and request.message is not None:
            ranked = add_semantic(connection, str(path), session_id, scope, request.message,
                                  ranked, embedder_name=self.embedder,
                                  cache=self.reader.vectors,
                                  max_results=request.max_results, diagnostics=diagnostics)
        unique = _deduplicate(ranked, diagnostics)
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
               request.branch_ids, request.context_ids)
        cached = self.reader.scopes.get(key)
        if cached is not None:
            return cached  # type: ignore[return-value]
        if request.branch_ids is not None and [e.entry_id for e in branch] != list(
                request.branch_ids):
            branch = _entries_for(connection, session_id, request.branch_ids)
        if request.context_ids is not None:
            context_ids = set(request.context_ids)
        else:
            context_ids = {e.entry_id for e in context_entries(branch)}
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

    # -- steps 3 to 5 -------------------------------------------------------------

    @staticmethod
    def _literal_rows(connection: apsw.Connection, terms: QueryTerms, scope: Scope,
                      limit: int) -> list[Row]:
        found: list[Row] = []
        for term in terms.literals:
            for row in literal_search(connection, term.text, scope, limit):
                row.literal_hits.add(term.text)
                found.append(row)
        return found

    # -- step 10 ------------------------------------------------------------------

    def _evidence(self, ranked: list[Ranked], request: RetrievalRequest,
                  connection: apsw.Connection, index_file: str,
                  diagnostics: dict[str, Any]) -> tuple[list[dict], list[dict]]:
        """Steps 10: bounded evidence, within the token budget and the privacy policy.

        Each source is classified whole (all of its indexed text, not only the
        excerpt), so a secret just outside the excerpt still withholds it.
        """
        budget = request.max_retrieved_history_tokens
        ceiling = self.policy.max_for(request.provider)
        used, evidence, excluded = 0, [], []
        for position, item in enumerate(ranked):
            if len(evidence) >= request.max_results:
                break

            def read_text(position: int = position) -> None:
                # Only on a memo miss; then read the next few texts together.
                if ranked[position].row.text is None:
                    load_texts(connection, (i.row for i in ranked[position:position + 16]))

            level = self._classification(index_file, item.row, read_text)
            built = self._build_item(index_file, item, level.label, read_text)
            if level > ceiling:
                excluded.append(excluded_record(built, level.label, f"privacy: {level.label} "
                                                f"exceeds {ceiling.label} for this provider"))
                continue
            if used + built["tokens"] > budget:
                excluded.append(excluded_record(built, level.label, "retrieval budget"))
                continue
            evidence.append(built)
            used += built["tokens"]
        diagnostics["tokens_used"] = used
        return evidence, excluded

    def _build_item(self, index_file: str, item: Ranked, label: str,
                    read_text: Callable[[], None]) -> dict[str, Any]:
        """The evidence item, memoized: same row and same score parts, same message."""
        key = ("evidence", index_file, item.row.rowid, item.tier, tuple(item.parts),
               item.matches[0].position if item.matches else None, label)
        built = self.reader.evidence.get(key)
        if built is None:
            read_text()
            built = _build_item(item, label)
            self.reader.evidence.put(key, built)
        return _copy_item(built)  # type: ignore[arg-type]

    def _classification(self, index_file: str, row: Row,
                        read_text: Callable[[], None]) -> Classification:
        key = ("classification", index_file, row.rowid)
        level = self.reader.entries.get(key)
        if level is None:
            read_text()
            level = classify_source(row.text).classification
            self.reader.entries.put(key, level)
        return level  # type: ignore[return-value]


@functools.lru_cache(maxsize=1024)
def terms_of(message: str) -> QueryTerms:
    """``extract_terms``, memoized: a tool loop asks about the same message many times."""
    return extract_terms(message)


class CachedMatcher:
    """``TermMatcher`` with per-row results memoized for this query's terms.

    Texts are read only for rows whose matches are not memoized yet.
    """

    def __init__(self, terms: QueryTerms, cache: EntryCache, index_file: str,
                 connection: apsw.Connection, folded: FoldedCache | None = None) -> None:
        self.matcher = TermMatcher(terms)
        self.cache = cache
        self.folded = folded or FoldedCache(max_chars=0)
        self.index_file = index_file
        self.connection = connection
        # A plain string hashes once and is cached by Python; a tuple of Terms is not.
        signature = "\x1f".join(f"{term.kind}\x1e{term.text}" for term in terms)
        self.prefix = ("matches", index_file, signature)

    def match_all(self, rows: list[Row]) -> list[tuple[list[Match], tuple | None]]:
        """Per row: its verified matches and its static score parts (None: no match)."""
        keys = [(*self.prefix, row.rowid) for row in rows]
        found = [self.cache.get(key) for key in keys]
        misses = [row for row, value in zip(rows, found, strict=True) if value is None]
        if misses:
            load_texts(self.connection, misses)
        for index, (row, key) in enumerate(zip(rows, keys, strict=True)):
            if found[index] is None:
                text = row.text or ""
                matches = self.matcher.match(
                    text, lambda text, rowid=row.rowid: self.folded.get(self.index_file,
                                                                        rowid, text))
                static = static_parts(Ranked(row, matches), True) if matches else None
                found[index] = (matches, static)
                self.cache.put(key, found[index])
        return found  # type: ignore[return-value]


def verify_and_rank(rows: list[Row], matcher: CachedMatcher, allowed_ids: frozenset[str] | None,
                    fts_hits: int, diagnostics: dict[str, Any]) -> list[Ranked]:
    """Steps 7 (verification) and 8: keep rows with a verified match, score, order.

    ``allowed_ids`` None skips the defensive branch check (explicit project search).
    """
    ranked: list[Ranked] = []
    on_scope = [row for row in rows if allowed_ids is None or row.entry_id in allowed_ids]
    rejected_branch = len(rows) - len(on_scope)  # defensive: SQL already filtered
    unverified = 0
    statics = []
    for row, (matches, static) in zip(on_scope, matcher.match_all(on_scope), strict=True):
        if not matches:
            unverified += 1
            continue
        ranked.append(Ranked(row, matches))
        statics.append(static)
    if ranked:
        oldest = min(item.row.seq for item in ranked)
        newest = max(item.row.seq for item in ranked)
        for item, static in zip(ranked, statics, strict=True):
            score(item, on_branch=True, fts_hits=fts_hits, oldest=oldest, newest=newest,
                  static=static)
    ranked.sort(key=sort_key)
    diagnostics["alternate_branch_candidates"] = rejected_branch
    diagnostics["unverified_rejected"] = unverified
    return ranked


def _entries_for(connection: apsw.Connection, session_id: str,
                 entry_ids: tuple[str, ...]) -> list[PathEntry]:
    """The indexed entries among caller-given ids (ids the index lacks are skipped)."""
    rows = connection.execute(
        "SELECT rowid, entry_id, type, first_kept_id, seq FROM entries "
        "WHERE session_id = ? AND entry_id IN (SELECT value FROM json_each(?))",
        (session_id, json.dumps(list(entry_ids))),
    ).fetchall()
    return [PathEntry(*row) for row in rows]


def _merge(*groups: list[Row]) -> list[Row]:
    """One row per entry key; literal hits and FTS rank combined."""
    merged: dict[tuple[str, str], Row] = {}
    for rows in groups:
        for row in rows:
            key = (row.session_id, row.entry_id)
            seen = merged.get(key)
            if seen is None:
                merged[key] = row
                continue
            seen.literal_hits |= row.literal_hits
            if row.fts_rank is not None and seen.fts_rank is None:
                seen.bm25, seen.fts_rank = row.bm25, row.fts_rank
    return list(merged.values())


def _deduplicate(ranked: list[Ranked], diagnostics: dict[str, Any]) -> list[Ranked]:
    """Keep the first (higher-ranked, then newer) of identical normalized texts."""
    seen: set[str] = set()
    unique: list[Ranked] = []
    for item in ranked:
        key = item.row.text_hash or item.row.text
        if key in seen:
            continue
        seen.add(key)
        unique.append(item)
    diagnostics["deduplicated"] = len(ranked) - len(unique)
    return unique


def _build_item(item: Ranked, classification: str) -> dict[str, Any]:
    row = item.row
    first = min((match.position for match in item.matches), default=0)  # vector-only: none
    quoted = excerpt(row.text, first)
    text = envelope(session_id=row.session_id, entry_id=row.entry_id, timestamp=row.timestamp,
                    role=row.role, score=item.score, reasons=item.reasons, quoted=quoted)
    return {
        "entry_id": row.entry_id,
        "session_id": row.session_id,
        "role": row.role,
        "timestamp": row.timestamp,
        "tier": item.tier,
        "score": item.score,
        "reasons": list(item.reasons),
        "tokens": estimate_tokens(text),
        "classification": classification,
        "group_id": f"retrieval:{row.session_id}:{row.entry_id}",
        "excerpt": quoted,
        "message": evidence_message(text, row.ts_ms),
    }


def _copy_item(built: dict[str, Any]) -> dict[str, Any]:
    """A copy the caller may change without touching the memoized item."""
    message = built["message"]
    return {**built, "reasons": list(built["reasons"]),
            "message": {**message, "content": [dict(block) for block in message["content"]]}}


def _answer(status: str, terms: QueryTerms | None, diagnostics: dict[str, Any],
            started: float, evidence: list[dict] | None = None,
            excluded: list[dict] | None = None) -> dict[str, Any]:
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    diagnostics["latency_ms"] = latency_ms
    evidence = evidence or []
    log.info("retrieve status=%s terms=%d evidence=%d excluded=%d latency_ms=%.3f",
             status, len(terms) if terms else 0, len(evidence), len(excluded or []), latency_ms)
    return {
        "status": status,
        "query": terms.by_kind() if terms else {},
        "evidence": evidence,
        "retrieved_event_ids": [f"{e['session_id']}:{e['entry_id']}" for e in evidence],
        "excluded": excluded or [],
        "diagnostics": diagnostics,
    }
