"""Automatic retrieval: the policy around the pipeline's steps (``query.search.pipeline``).

``Retriever.retrieve(request)`` reads only committed index state and never waits
for ingestion. What is automatic retrieval's own: (1) the latest real user message,
(6, 7) the scope — the branch minus the entries in context, as SQL the steps apply
before any LIMIT — the opt-in semantic step (``query.semantic``), and (10) the
answer: bounded evidence messages within the token budget and the privacy policy.
Steps 2 to 9 (terms, literal and FTS5 searches, merge, verify, rank, deduplicate)
are the pipeline's, shared with history search.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import apsw

from lookback.index.store import IndexUnavailable
from lookback.index.tokens import CHARS_PER_TOKEN
from lookback.index.tree import context_entries
from lookback.query.context.evidence import (
    MAX_EXCERPT_CHARS,
    envelope,
    evidence_message,
)
from lookback.query.contract.answers import (
    Diagnostics,
    Evidence,
    EvidenceMessage,
    RetrieveAnswer,
    TextBlock,
    Withheld,
)
from lookback.query.contract.messages import estimate_message_tokens
from lookback.query.contract.request import RetrievalRequest
from lookback.query.privacy.policy import (
    ClassificationResult,
    PrivacyPolicy,
    classify_source,
)
from lookback.query.search.action import informative
from lookback.query.search.pipeline import (
    INELIGIBLE_WITH_TEXT,
    Rerank,
    SemanticStep,
    quote,
    rank,
    searched_of,
    times_of,
)
from lookback.query.search.reader import IndexReader, NotIndexed
from lookback.query.search.rows import entries_for, load_texts, session_state
from lookback.query.search.types import Ranked, Row, Scope, Searched
from lookback.query.text import tool_query
from lookback.query.text.terms import QueryTerms, Term, names

log = logging.getLogger("lookback.query")

#: Fitting an excerpt to the rest of the budget (docs/specification.md, "Budgets"):
#: below ``MIN_REMAINING_TOKENS`` the budget is full; otherwise the excerpt shrinks by
#: ``EXCERPT_SHRINK`` steps, centred on its first match, to no less than
#: ``MIN_EXCERPT_CHARS`` (48 tokens of quoted text), until its envelope fits.
MIN_REMAINING_TOKENS, EXCERPT_SHRINK = 48, 0.7
MIN_EXCERPT_CHARS = MIN_REMAINING_TOKENS * CHARS_PER_TOKEN

#: The confidence floor (issue 28; docs/specification.md, "Confidence floor"; chosen on
#: tuning data only, docs/benchmarks.md). A keyword candidate's confidence is the share
#: of the message's information its matches carry, alone or with its neighbour
#: (``Ranked.coverage``, ``unit_coverage``); an identifier or phrase match is decisive (1).
#: No evidence at all unless the best candidate reaches ``FLOOR``, and a keyword
#: candidate's confidence needs a matched topic of rarity ``MIN_PEAK`` or more (a match
#: on generic words alone never opens the answer); once open, a row qualifies with
#: ``MIN_CONFIDENCE`` or that share of the message. The first ``LEAD_ITEMS`` that qualify come
#: back; later ones only with the best share of the message (``FOLLOW_SHARE``). The first
#: item's excerpt is at most 6,000 characters times the cube of its share of the
#: message (no less than ``FOLLOW_CHARS``), the others' at most ``FOLLOW_CHARS``.
FLOOR, MIN_CONFIDENCE, MIN_PEAK = 0.3, 0.1, 0.45
LEAD_ITEMS, FOLLOW_SHARE, FOLLOW_CHARS = 5, 1.0, 300
#: With ``semantic: true``: a candidate whose similarity lies ``STANDOUT_NONE`` standard
#: deviations above the scope's mean has confidence 0, at ``STANDOUT_FULL`` 1, linear
#: between (``Ranked.standout``): absolute similarities differ by model and by corpus
#: (MiniLM's sit near 0.3 on coding sessions, near 0.5 on chat), their standing does not.
STANDOUT_NONE, STANDOUT_FULL = 2.0, 5.0


#: A user message that starts with this (after blanks, in any case) asks for no retrieval:
#: the answer is ``no-query`` and the agent gets its messages unchanged
#: (docs/data-controls.md). A backslash before it keeps it literal text.
SKIP_MARKER = "[lookback:skip]"


def skips_retrieval(message: str) -> bool:
    """True when the user's ``message`` opts out of retrieval (``SKIP_MARKER``)."""
    return message.lstrip()[:len(SKIP_MARKER)].casefold() == SKIP_MARKER


@dataclass(frozen=True)
class Allowed:
    """The entries automatic retrieval may return for this request, as SQL scopes."""

    scope: Scope  # on the branch and not in context
    ids: frozenset[str]
    context_scope: Scope  # on the branch and in context (for diagnostics)


class Retriever:
    def __init__(self, reader: IndexReader, policy: PrivacyPolicy | None = None,
                 embedder: str = "hashing", semantic: SemanticStep | None = None) -> None:
        self.reader = reader
        self.policy = policy or PrivacyPolicy()
        self.embedder = embedder  # used only for ``semantic: true``
        self.semantic = semantic  # query.semantic's step, wired by the shell (lookback.api)

    def retrieve(self, request: RetrievalRequest) -> RetrieveAnswer:
        started = time.perf_counter()
        diagnostics = Diagnostics()
        message, subjects = request.message, None
        if request.tool is not None:  # point-of-action evidence: the call's subjects
            found = tool_query(request.tool.name, request.tool.input, request.tool.cwd)
            message, subjects = (found.message, found.subjects) if found else (None, None)
        if message is None:
            return _answer("no-query", None, diagnostics, started)
        if skips_retrieval(message):
            diagnostics.warn(f"the message opts out of retrieval ({SKIP_MARKER})")
            return _answer("no-query", None, diagnostics, started)
        searched = searched_of(message)
        if not searched.terms.has_topic:
            return _answer("no-query", searched.terms, diagnostics, started)
        try:
            with self.reader.session(session_file=request.session_file,
                                     project=request.project,
                                     session_id=request.session_id) as view:
                return self._retrieve(view.connection, view.path, view.session_id, request,
                                      searched, diagnostics, started, message, subjects)
        except (NotIndexed, OSError):
            return _answer("not-indexed", searched.terms, diagnostics, started)
        except IndexUnavailable as error:  # damaged, busy, unreadable (the pool's): say why
            diagnostics.warn(f"index unavailable: {error}")
            return _answer("disabled", searched.terms, diagnostics, started)

    def _retrieve(self, connection: apsw.Connection, path: Any, session_id: str,
                  request: RetrievalRequest, searched: Searched, diagnostics: Diagnostics,
                  started: float, message: str, subjects: tuple[str, ...] | None,
                  ) -> RetrieveAnswer:
        terms = searched.terms
        state = session_state(connection, session_id)
        if state is None:
            raise NotIndexed("session not indexed")
        diagnostics.index_watermark = state.watermark
        allowed = self._allowed(connection, path, session_id, request, state.leaf_id,
                                state.epoch)
        unique = rank(connection, searched, allowed.scope, diagnostics, allowed_ids=allowed.ids,
                      context_scope=allowed.context_scope,
                      when=times_of(message, request.message_time_ms), names=names(message),
                      rerank=self._semantic(connection, str(path), session_id, allowed.scope,
                                            request, diagnostics))
        chosen = confident(unique)
        if subjects is not None:  # a tool call: only what says something about it
            load_texts(connection, (item.row for item in chosen if item.row.text is None))
            chosen = informative(chosen, subjects)
        evidence, excluded = self._evidence(chosen, request, connection, str(path),
                                            diagnostics)
        return _answer("ok", terms, diagnostics, started, evidence, excluded)

    def _semantic(self, connection: apsw.Connection, index_file: str, session_id: str,
                  scope: Scope, request: RetrievalRequest,
                  diagnostics: Diagnostics) -> Rerank | None:
        """The opt-in semantic step (``semantic: true``) as the pipeline's re-ranking:
        vector candidates of ``scope`` fused into the ranked ones (``query.semantic``)."""
        message = request.message
        if not request.semantic or message is None:
            return None
        semantic = self.semantic
        if semantic is None:
            diagnostics.warn("semantic step not available: lexical results only")
            return None

        def rerank(ranked: list[Ranked], rarity: dict[Term, float]) -> list[Ranked]:
            return semantic(connection, index_file, session_id, scope, message, ranked,
                                embedder_name=self.embedder, cache=self.reader.vectors,
                                max_results=request.max_results, diagnostics=diagnostics,
                                rarity=rarity)

        return rerank

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
            built = self._build_item(index_file, item, label, read_text,
                                     FOLLOW_CHARS if evidence else max(
                                         FOLLOW_CHARS,
                                         int(MAX_EXCERPT_CHARS * _share(item) ** 3)))
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
        # Terms as their fields: a tuple of strings hashes in C, and the memo hashes
        # its key several times per lookup.
        key = ("evidence", index_file, item.row.rowid, item.tier, tuple(item.parts),
               tuple((match.term.text, match.term.kind, match.term.stem, match.literal)
                     for match in item.matches), label, max_chars)
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


def confidence(item: Ranked) -> float:
    """How sure a candidate is to be what the message asks about, 0..1 (``FLOOR``)."""
    if item.tier != "other":
        return 1.0  # an identifier or a phrase, as written: decisive
    own = item.coverage if item.peak >= MIN_PEAK else 0.0  # generic words only: none
    unit = item.unit_coverage if item.unit_peak >= MIN_PEAK else 0.0
    lexical = max(own, unit) if item.matches else 0.0
    if item.standout is None:  # no semantic step
        return lexical
    # With the semantic step, a similarity that stands out in the scope counts too.
    semantic = (item.standout - STANDOUT_NONE) / (STANDOUT_FULL - STANDOUT_NONE)
    return max(lexical, min(1.0, semantic))


def confident(ranked: list[Ranked]) -> list[Ranked]:
    """The candidates above the confidence floor, in rank order (``FLOOR``): none when
    the best of them carries too little of the message; else those with confidence or
    a share of the message of ``MIN_CONFIDENCE`` or more; after the first
    ``LEAD_ITEMS``, only those nearly as confident as the best."""
    if max(map(confidence, ranked), default=0.0) < FLOOR:
        return []
    # Once a confident candidate opens the answer, a row needs only its share of the
    # message: its words may be the session's common ones (a pasted plan made "event",
    # "compaction" frequent) without being generic to the question.
    qualified = [item for item in ranked if max(confidence(item), _share(item)) >= MIN_CONFIDENCE]
    # Past the lead, even an identifier's rows must carry nearly the best share.
    best = max(map(_share, qualified))
    return [item for position, item in enumerate(qualified)
            if position < LEAD_ITEMS or _share(item) >= FOLLOW_SHARE * best]


def _share(item: Ranked) -> float:
    """The share of the message a candidate carries (vector finds: their confidence)."""
    return max(item.coverage, item.unit_coverage, confidence(item) if not item.matches else 0.0)


def _build_item(item: Ranked, classification: str,
                max_chars: int = MAX_EXCERPT_CHARS) -> Evidence:
    row = item.row
    quoted = quote(row.text, item.matches, max_chars)  # vector-only: no matches, from 0
    reasons = item.reasons
    text = envelope(session_id=row.session_id, entry_id=row.entry_id, timestamp=row.timestamp,
                    role=row.role, score=item.score, reasons=reasons, quoted=quoted)
    message = evidence_message(text, row.ts_ms)
    return Evidence(
        entry_id=row.entry_id,
        session_id=row.session_id,
        role=row.role,
        timestamp=row.timestamp,
        tier=item.tier,  # type: ignore[arg-type]  # ranking's tiers are the contract's
        score=item.score,
        reasons=tuple(reasons),
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
