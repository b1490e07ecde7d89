"""The wire contract's answers, typed: retrieve, search, source and plan.

The pipeline builds these ``msgspec`` structs (``Retriever.retrieve``,
``HistorySearch.search`` and ``source``, the planner's ``decide``) and each edge encodes
them once: the HTTP reader (``lookback.server.app``, ``msgspec.json.encode``), the CLI
commands and the Python API (``lookback.api``: ``retrieve_answer`` and its siblings
return the structs; ``retrieve``, ``search`` and ``source`` return their
``msgspec.to_builtins`` dicts, the JSON's shape). The requests are in ``request.py``.

The JSON is the one docs/design.md describes ("Retrieval contract"): keys in the order
the fields are declared here, a field that does not apply to an answer left out
(``UNSET``: in ``Diagnostics``, the counts of a step never reached), and every ``None``
written as ``null``. ``tests/test_answers.py``
decodes real answers of every endpoint into these types, strictly, so the two cannot
drift apart.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

#: ``elsewhere``: not indexed on this reader's host but on another worker host, which a
#: diagnostics warning names; ``stale``: answered from this host's copy of a project
#: another worker host owns, whose reader could not be asked (service mode with several
#: hosts: docs/scaling.md). Clients use evidence only from ``ok``.
Status = Literal["ok", "no-query", "not-indexed", "disabled", "elsewhere", "stale"]
SourceStatus = Literal["ok", "withheld", "not-found", "not-indexed", "disabled", "elsewhere",
                       "stale"]
Tier = Literal["identifier", "phrase", "other"]
Label = Literal["normal", "internal", "sensitive", "local-only"]


class _Contract(msgspec.Struct, forbid_unknown_fields=True):
    """Every answer struct: a key the contract does not name fails a decode."""


class _Frozen(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """An answer struct nothing changes once built."""


class TextBlock(_Frozen, frozen=True):
    """One block of a message's ``content``."""

    type: Literal["text"]
    text: str


class EvidenceMessage(_Frozen, frozen=True):
    """The ready Pi user-role ``AgentMessage`` carrying one evidence envelope
    (``query.context.evidence.envelope``)."""

    role: Literal["user"]
    content: tuple[TextBlock, ...]
    timestamp: int  # epoch ms: the source entry's time


class RankedEntry(_Frozen, frozen=True):
    """What every ranked entry of an answer says of itself first (its fields lead the
    JSON object of an evidence item and of a search result)."""

    entry_id: str
    session_id: str
    role: str | None
    timestamp: str | None
    tier: Tier
    score: float
    reasons: tuple[str, ...]


class Evidence(RankedEntry, frozen=True):
    """One evidence item of a retrieve answer (frozen: the reader memoizes it)."""

    #: What ``message`` costs the planner (``estimate_message_tokens``).
    tokens: int
    classification: Label
    group_id: str
    excerpt: str
    message: EvidenceMessage

    @property
    def source(self) -> str:
        """``session_id:entry_id``, the planner's and the manifest's name for it."""
        return f"{self.session_id}:{self.entry_id}"


class Withheld(_Frozen, frozen=True):
    """A source the privacy gate or the budget kept out: ids, level and why, never text."""

    source: str
    entry_id: str | None
    session_id: str | None
    classification: Label | Literal["unclassified"]
    reason: str


class FreshnessOutcome(_Frozen, frozen=True, omit_defaults=True):
    """What the reader's freshness step did before answering (``lookback.freshness``)."""

    state: str
    ms: float
    entries: int = 0  # left out when none were indexed


class Diagnostics(_Contract):
    """What one retrieval reports about itself: counts, warnings and timings, never text.

    One object travels through the pipeline's steps; each sets the fields it knows. The
    answer's ``diagnostics`` holds ``warnings`` always and every other field that was
    set (``UNSET`` ones are left out: a ``not-indexed`` answer has no ``candidates``).
    """

    warnings: list[str] = msgspec.field(default_factory=list)  # reasons, never request text
    index_watermark: int | UnsetType = UNSET  # the index's applied event sequence
    candidates: int | UnsetType = UNSET  # rows the literal and FTS searches returned, merged
    in_context_removed: int | UnsetType = UNSET  # FTS hits (of the search as run) in context
    alternate_branch_candidates: int | UnsetType = UNSET  # defensive: SQL already filtered
    unverified_rejected: int | UnsetType = UNSET  # candidates with no verified term match
    deduplicated: int | UnsetType = UNSET  # candidates dropped as the same text as a better one
    tokens_used: int | UnsetType = UNSET  # evidence tokens, within the budget
    semantic: dict[str, Any] | UnsetType = UNSET  # the opt-in vector step's counts
    latency_ms: float | UnsetType = UNSET
    freshness: FreshnessOutcome | UnsetType = UNSET  # the HTTP reader's, in embedded mode

    def warn(self, reason: str) -> None:
        """Add a warning (a fixed reason or an error's class name, never user text)."""
        self.warnings.append(reason)


# -- the planner ---------------------------------------------------------------------


class Decision(_Frozen, frozen=True):
    """Where the evidence goes and which, in order: the client applies it."""

    insert_before: int  # index of the latest real user message
    sources: list[str]  # ``session_id:entry_id`` each


class Included(_Frozen, frozen=True):
    """A source the planner put in, with what it costs."""

    source: str
    entry_id: str
    session_id: str
    group_id: str | None
    tier: str | None
    score: float | None
    tokens: int
    priority: int


class PlanExcluded(_Frozen, frozen=True, kw_only=True):
    """A source the planner left out and why (ids only for an item that is an object)."""

    source: str
    reason: str
    entry_id: str | None | UnsetType = UNSET
    session_id: str | None | UnsetType = UNSET


class PlanTokens(_Frozen, frozen=True, kw_only=True):
    """The planner's token accounting: the budgets, the mandatory context by priority
    class (left out when the messages could not be read) and the evidence."""

    retrieval_budget: int
    input_target: int | None
    hard_limit: int | None
    recent: int | UnsetType = UNSET
    summaries: int | UnsetType = UNSET
    mandatory: int | UnsetType = UNSET
    evidence: int
    total: int | UnsetType = UNSET


class PlanAnswer(_Frozen, frozen=True):
    """``POST /v1/plan``, and a retrieve answer's ``plan``: ``decision`` None and
    ``fallback`` the reason when nothing is inserted on purpose (fail-open)."""

    decision: Decision | None
    included: list[Included]
    excluded: list[PlanExcluded]
    tokens: PlanTokens
    fallback: str | None


# -- retrieve, search, source ------------------------------------------------------------


class RetrieveAnswer(_Contract, kw_only=True):
    """``POST /v1/retrieve``, ``lookback retrieve``, ``lookback.api.retrieve``."""

    status: Status
    query: dict[str, list[str]]  # the extracted terms by kind
    evidence: list[Evidence]
    retrieved_event_ids: list[str]
    excluded: list[Withheld]
    diagnostics: Diagnostics
    #: The planner's decision, when the request carried ``plan`` and there is evidence.
    plan: PlanAnswer | UnsetType = UNSET


class SearchResult(RankedEntry, frozen=True):
    """One history search result."""

    on_branch: bool
    excerpt: str
    classification: Label


class SearchAnswer(_Frozen, frozen=True, kw_only=True):
    """``POST /v1/search``, ``lookback search``, ``lookback.api.search``."""

    status: Status
    scope: Literal["branch", "session", "project"] | UnsetType = UNSET  # ``ok`` only
    query: dict[str, list[str]]
    results: list[SearchResult]
    excluded: list[Withheld]
    warnings: list[str] | UnsetType = UNSET  # ``disabled``, or ``ok`` after a failed FTS step


class SourceEntry(_Frozen, frozen=True):
    """One entry read by id (the entry asked for, or a neighbour)."""

    entry_id: str
    session_id: str
    type: str
    role: str | None
    timestamp: str | None
    excerpt: str
    classification: Label


class SourceAnswer(_Frozen, frozen=True, kw_only=True):
    """``POST /v1/source``, ``lookback.api.source``: ``entry`` (null when ``withheld``)
    and ``excluded`` on ``ok``/``withheld``; ``before``/``after`` when neighbours were
    asked for; ``warnings`` on ``disabled``."""

    status: SourceStatus
    entry: SourceEntry | None | UnsetType = UNSET
    excluded: list[Withheld] | UnsetType = UNSET
    before: list[SourceEntry] | UnsetType = UNSET
    after: list[SourceEntry] | UnsetType = UNSET
    warnings: list[str] | UnsetType = UNSET


Answer = RetrieveAnswer | SearchAnswer | SourceAnswer | PlanAnswer

_ENCODER = msgspec.json.Encoder()


def encode_answer(answer: msgspec.Struct) -> bytes:
    """An answer as the JSON bytes of the contract (the one encoding at an edge)."""
    return _ENCODER.encode(answer)


def answer_dict(answer: msgspec.Struct) -> dict[str, Any]:
    """An answer as the JSON's dicts and lists, new ones (the Python API's shape; equal
    to decoding ``encode_answer(answer)``, without the text's round trip)."""
    built: dict[str, Any] = msgspec.to_builtins(answer)
    # to_builtins keeps tuples; the frozen items' tuples are the JSON's arrays.
    for key in ("evidence", "results"):
        for item in built.get(key) or ():
            item["reasons"] = list(item["reasons"])
            message = item.get("message")
            if message is not None:
                message["content"] = list(message["content"])
    return built
