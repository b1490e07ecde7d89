"""The retrieval pipeline's shared types: what its steps pass each other.

``Row`` (a candidate entry, its text loaded on demand), ``Scope`` (which rows a search
may return, as SQL), ``Literals`` and ``Searched`` (one query's compiled form) and
``Ranked`` (a verified, scored candidate). The steps (``query.search.pipeline``), the
SQL (``searches``, ``term_stats``, ``rows``), ranking, automatic retrieval, history
search and ``query.semantic`` all import them from here; this module imports nothing of theirs, so
no import goes round in a circle. What a retrieval reports about itself,
``Diagnostics``, is part of the answer and lives with the answers
(``query.contract.answers``), which import nothing of the project either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from lookback.query.text.fts_query import FtsQuery, compile_query
from lookback.query.text.matching import Match
from lookback.query.text.terms import QueryTerms

#: A scope of more runs of consecutive rowids than this is passed as a rowid list.
MAX_RANGES = 64

#: Separates the literal terms packed into one SQL parameter (never inside a term:
#: control characters are blanked by term extraction).
LITERAL_SEPARATOR = "\x1f"


@dataclass
class Row:
    rowid: int
    session_id: str
    entry_id: str
    seq: int
    type: str
    role: str | None
    timestamp: str | None
    ts_ms: int | None
    text_hash: str | None
    tokens: int
    text: str | None = None  # loaded on demand by load_texts
    bm25: float | None = None
    fts_rank: int | None = None
    #: Bit i: the row matches phrase i of the query (FTS5, folded, whole tokens).
    phrases: int = 0
    #: Bit i: the row holds literal term i of ``Literals`` as written, not glued.
    literals: int = 0


@dataclass(frozen=True)
class Scope:
    """Which rows a search may return: a rowid set, a whole session, or everything."""

    rowids: frozenset[int] | None = None  # None: not restricted to a rowid set
    session_id: str | None = None  # with rowids None: the whole session
    _sql: list[tuple[str, list[object]]] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def of_rows(cls, rowids: Iterable[int]) -> Scope:
        return cls(rowids=frozenset(rowids))

    def where(self, fts: str = "entries_fts", entries: str = "e") -> tuple[str, list[object]]:
        """The WHERE clause (on the FTS rowid where possible) and its parameters."""
        if not self._sql:
            self._sql.append(self._build())
        clause, params = self._sql[0]
        return clause.format(fts=fts, e=entries), list(params)

    def _build(self) -> tuple[str, list[object]]:
        if self.rowids is None:
            if self.session_id is None:
                return "{e}.eligible = 1", []
            return "{e}.eligible = 1 AND {e}.session_id = ?", [self.session_id]
        if not self.rowids:
            return "0", []
        ranges = runs(sorted(self.rowids))
        envelope = "{fts}.rowid BETWEEN ? AND ?"
        bounds: list[object] = [ranges[0][0], ranges[-1][1]]
        if len(ranges) == 1:
            return envelope, bounds
        if len(ranges) <= MAX_RANGES:
            clause = " OR ".join("{fts}.rowid BETWEEN ? AND ?" for _ in ranges)
            return f"{envelope} AND ({clause})", bounds + [v for pair in ranges for v in pair]
        listed = json.dumps(sorted(self.rowids))
        return f"{envelope} AND {{fts}}.rowid IN (SELECT value FROM json_each(?))", [
            *bounds, listed]

    @property
    def needs_entries(self) -> bool:
        """True when the clause filters on ``entries`` columns (session/eligible)."""
        return self.rowids is None


def runs(numbers: list[int]) -> list[tuple[int, int]]:
    """Runs of consecutive numbers: [1, 2, 3, 7, 8] → [(1, 3), (7, 8)]."""
    ranges: list[tuple[int, int]] = []
    for number in numbers:
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], number)
        else:
            ranges.append((number, number))
    return ranges


@dataclass(frozen=True)
class Literals:
    """The literal terms of a query, numbered as ``Row.literals`` bits."""

    texts: tuple[str, ...]

    @property
    def packed(self) -> str:
        return LITERAL_SEPARATOR.join(self.texts)


@dataclass(frozen=True)
class Searched:
    """One query's compiled form: its terms, FTS5 phrases and literal terms."""

    terms: QueryTerms
    query: FtsQuery | None
    literals: Literals

    @classmethod
    def of(cls, terms: QueryTerms) -> Searched:
        return cls(terms, compile_query(terms), Literals(tuple(t.text for t in terms.literals)))


@dataclass
class Ranked:
    row: Row
    matches: list[Match]
    tier: str = "other"
    score: float = 0.0
    parts: list[tuple[str, float]] = field(default_factory=list)
    #: The row is on the caller's branch: the one fact behind "active branch".
    on_branch: bool = True
    #: The share of the message's information (its topics' rarity) that the row's own
    #: verified matches carry, 0..1 (``pipeline.coverage``); the confidence floor's input.
    coverage: float = 0.0
    #: The rarity of the row's rarest matched topic, 0..1: low when it matched only
    #: generic words.
    peak: float = 0.0
    #: The same two for the row with its neighbour (a call and its result, a question
    #: and its answer): the unit's share, at most ``coverage`` + what the neighbour adds.
    unit_coverage: float = 0.0
    unit_peak: float = 0.0
    #: How many standard deviations its similarity lies above the scope's mean (the
    #: semantic step's), else None.
    standout: float | None = None

    def add(self, points: float, reason: str) -> None:
        if points:
            self.score += points
            self.parts.append((reason, points))

    @property
    def reasons(self) -> list[str]:
        """Each part of the score, e.g. ``exact identifier `X` +100``."""
        return [f"{reason} {'+' if points > 0 else '-'}{abs(points):g}"
                for reason, points in self.parts if points]
