"""Scoring and ordering candidates with the ranking table of docs/specification.md.

=======================  =========================================
exact identifier         100 (tier ``identifier``)
exact phrase              85 (tier ``phrase``)
FTS match                 60 (tier ``other``)
matched topics           40 x rarity (0..1, the term's IDF in the index) per term
active branch             15
same file / symbol / error  12 / 10 / 12 per matched term of that kind
next to a match          0.25 x the topics of the candidate just before or after, <= 20
user / assistant, tool output authority  8 / 5
FTS order                0..6 (bm25 rank among the FTS hits)
recency                  0..8 (newest candidate 8; by ``recency_position``), unless
                         the message names a time:
time in the question     0..8 instead (8 inside that time, less near it)
token penalty            0..12 (12 at 3,000 tokens and beyond)
long entry               past 100 tokens, the topic points x (1 - (100 / tokens) ** 0.25)
=======================  =========================================

Tiers come first (identifier, phrase, other), then score descending, timestamp
descending, entry id. The non-topic parts (authority, FTS order, recency or time)
add up to at most 22, so they never outweigh one more matched topic of comparable
weight (40 x rarity, rarity 0.55 or more).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from lookback.query.search.types import Ranked, Row
from lookback.query.text.dates import TimeSpan
from lookback.query.text.fts_query import stemmed_phrase
from lookback.query.text.matching import Match
from lookback.query.text.terms import ERROR_KINDS, FILE_KINDS, PHRASE, SYMBOL_KINDS, Term

TIERS = ("identifier", "phrase", "other")
EXACT_IDENTIFIER, EXACT_PHRASE, FTS_MATCH = 100.0, 85.0, 60.0
#: Each distinct matched term earns this much times its rarity in the index (0..1).
TOPIC_POINTS = 40.0
ACTIVE_BRANCH = 15.0
SAME_FILE, SAME_SYMBOL, SAME_ERROR = 12.0, 10.0, 12.0
#: A tool's own output is what happened: it counts as much as the assistant's prose,
#: which often re-quotes it later (without a part of its own it lost to that prose).
AUTHORITY = {"user": 8.0, "assistant": 5.0, "toolResult": 5.0, "bashExecution": 5.0}
MAX_FTS_ORDER, MAX_RECENCY, MAX_TOKEN_PENALTY = 6.0, 8.0, 12.0
TOKENS_FOR_FULL_PENALTY = 3000
#: Time in the question (``query/text/dates.py``): an entry dated inside a time the
#: message names earns ``MAX_TIME_MATCH``; one dated near it less, down to 0 at a
#: distance as long as that time (at least ``MIN_NEAR_MS``). It takes recency's place
#: (and its at most 8 points), so the non-topic parts still add up to at most 22.
MAX_TIME_MATCH = 8.0
MIN_NEAR_MS = 7 * 86_400_000
#: A long entry's topics are spread thin: a plan or a task description that names
#: every word of the message once matches it less than a short line that is about it.
#: Past ``SHORT_ENTRY_TOKENS`` an entry keeps ``(SHORT_ENTRY_TOKENS / tokens) **
#: DILUTION`` of its topic points (a 400-token entry 71%, a 3,000-token one 43%).
SHORT_ENTRY_TOKENS, DILUTION = 100, 0.25


def score(item: Ranked, *, on_branch: bool, fts_hits: int, oldest: int, newest: int,
          static: tuple[str, list[tuple[str, float]]] | None = None,
          when: Sequence[TimeSpan] = (), across_sessions: bool = False) -> None:
    """Fill in ``tier``, ``score`` and ``parts`` (``matches`` must be non-empty).

    ``static`` is what ``static_parts`` returned for this row and query, if the
    caller memoized it; the parts that depend on the other candidates (FTS order,
    recency) or on the message's time (``when``) are always computed here.
    ``oldest`` and ``newest`` are the candidates' extreme ``recency_position``s, with
    the same ``across_sessions``.
    """
    item.tier, static_list = static if static is not None else static_parts(item, on_branch)
    row = item.row
    parts = item.parts = list(static_list)
    if row.tokens > SHORT_ENTRY_TOKENS:
        diluted = _dilution(row.tokens, sum(points for reason, points in static_list
                                            if reason.startswith("topic ")))
        if diluted:
            parts.append(("long entry", diluted))
    if row.fts_rank is not None and fts_hits > 0:
        parts.append(("FTS order", _fts_order(row.fts_rank, fts_hits)))
    if when:  # the message says when: that, not recency, places the entry in time
        dated = time_part(row, when)
        if dated is not None:
            parts.append(dated)
    else:
        span = newest - oldest
        position = recency_position(row, across_sessions)
        position = oldest if position is None else position
        parts.append(("recency", round(
            MAX_RECENCY if span <= 0 else MAX_RECENCY * (position - oldest) / span, 2)))
    item.score = round(sum([points for _, points in parts]), 2)


def recency_position(row: Row, across_sessions: bool) -> int | None:
    """Where ``row`` lies in time, for recency: its position in its session (``seq``);
    when the candidates come from several sessions (history search of a project), its
    timestamp instead, since positions in different sessions do not compare (entry 500
    of last year's session is not newer than entry 3 of today's). None: across
    sessions, a row without a timestamp (it counts as the oldest)."""
    return row.ts_ms if across_sessions else row.seq


# ``round(x, 2)`` goes through a decimal conversion (a few microseconds); these values
# recur across rows and messages, so they are rounded once.
@functools.lru_cache(maxsize=4096)
def _fts_order(fts_rank: int, fts_hits: int) -> float:
    return round(MAX_FTS_ORDER * (1 - fts_rank / fts_hits), 2)


@functools.lru_cache(maxsize=4096, typed=True)
def _topic_points(weight: float) -> float:
    return round(TOPIC_POINTS * weight, 2)


@functools.lru_cache(maxsize=4096)
def _token_penalty(tokens: int) -> float:
    return -round(MAX_TOKEN_PENALTY * min(1.0, tokens / TOKENS_FOR_FULL_PENALTY), 2)


@functools.lru_cache(maxsize=4096)
def _dilution(tokens: int, topic_points: float) -> float:
    kept: float = (SHORT_ENTRY_TOKENS / tokens) ** DILUTION  # a float's power may be complex
    return -round(topic_points * (1 - kept), 2)


def time_part(row: Row, when: Sequence[TimeSpan]) -> tuple[str, float] | None:
    """The entry's closeness to the times the message names, as a score part.

    Inside one: ``MAX_TIME_MATCH``; outside, less in proportion to the distance, none
    from the span's own length away (a week at least). The closest span counts.
    """
    if not when or row.ts_ms is None:
        return None
    best: tuple[float, TimeSpan, int] | None = None
    for span in when:
        offset = span.offset_ms(row.ts_ms)
        closeness = 1 - abs(offset) / max(MIN_NEAR_MS, span.end_ms - span.start_ms)
        if closeness > 0 and (best is None or closeness > best[0]):
            best = (closeness, span, offset)
    if best is None:
        return None
    closeness, span, offset = best
    points = round(MAX_TIME_MATCH * closeness, 2)
    where = "in" if offset == 0 else "near"
    return (f"dated {where} {_quote(span.text)}", points) if points else None


def static_parts(item: Ranked, on_branch: bool, rarity: Mapping[Term, float] | None = None
                 ) -> tuple[str, list[tuple[str, float]]]:
    """Tier and the score parts that depend only on the row and the query's terms."""
    tier, topic = topic_parts(item.matches, on_branch, rarity)
    return tier, [*topic, *row_parts(item.row)]


def topic_parts(matches: list[Match], on_branch: bool,
                rarity: Mapping[Term, float] | None = None) -> tuple[str, list[tuple[str, float]]]:
    """Tier and the parts that depend only on which terms matched, and how.

    Each distinct matched term (terms of the same stems are one: ``topic_key``) adds
    ``TOPIC_POINTS``
    times its ``rarity`` (0..1, see
    ``term_stats.rarity``; 1 for a term missing from it), so a word in most entries
    weighs little and the rare word that carries the question decides.

    Rows with the same matches share them (a query's candidates often do), so the
    caller may compute them once per distinct set of matches.
    """
    parts: list[tuple[str, float]] = []
    first_id = first_phrase = None
    files: set[str] = set()
    symbols: set[str] = set()
    errors: set[str] = set()
    distinct: dict[tuple[str, ...], Term] = {}  # one topic per stemmed phrase
    for match in matches:
        term = match.term
        distinct.setdefault(topic_key(term), term)
        if not match.literal:
            continue
        kind = term.kind
        if kind == PHRASE:
            first_phrase = first_phrase or term.text
            continue
        first_id = first_id or term.text
        if kind in FILE_KINDS:
            files.add(term.text)
        elif kind in SYMBOL_KINDS:
            symbols.add(term.text)
        elif kind in ERROR_KINDS:
            errors.add(term.text)
    if first_id is not None:
        tier = "identifier"
        parts.append((f"exact identifier {_quote(first_id)}", EXACT_IDENTIFIER))
    elif first_phrase is not None:
        tier = "phrase"
        parts.append((f"exact phrase {_quote(first_phrase)}", EXACT_PHRASE))
    else:
        tier = "other"
        parts.append((f"term match {_quote(matches[0].term.text)}", FTS_MATCH))
    for term in distinct.values():
        weight = 1.0 if rarity is None else rarity.get(term, 1.0)
        parts.append((f"topic {_quote(term.text)}", _topic_points(weight)))
    if on_branch:
        parts.append(("active branch", ACTIVE_BRANCH))
    for found, points, label in ((files, SAME_FILE, "same file"),
                                 (symbols, SAME_SYMBOL, "same symbol"),
                                 (errors, SAME_ERROR, "same error")):
        if found:
            count = len(found)
            parts.append((label if count == 1 else f"{label} ×{count}", points * count))
    return tier, parts


def topic_key(term: Term) -> tuple[str, ...]:
    """What makes terms one topic: an Italian keyword's Snowball stem (``Term.stem``),
    else the term's Porter stems (``schermata`` and ``schermate``, ``messages`` and
    ``Message``, are one)."""
    if term.stem is not None:
        return (term.stem,)
    return stemmed_phrase(term.text) or (term.text,)


def row_parts(row: Row) -> list[tuple[str, float]]:
    """The parts that depend only on the row: its author's authority, its token cost."""
    parts: list[tuple[str, float]] = []
    authority = AUTHORITY.get(row.role or "")
    if authority:
        parts.append((f"{row.role} authority", authority))
    penalty = _token_penalty(row.tokens)
    if penalty:
        parts.append(("token cost", penalty))
    return parts


def sort_key(item: Ranked) -> tuple[int, float, int, str, str]:
    row = item.row
    return (TIERS.index(item.tier), -item.score, -(row.ts_ms or 0), row.session_id, row.entry_id)


def _quote(text: str) -> str:
    # Reasons end up on one line of the evidence envelope: no line breaks, bounded.
    flat = " ".join(text.split())
    return "`" + (flat if len(flat) <= 80 else flat[:77] + "...") + "`"


#: A neighbour's topics add this share of their points, at most ``MAX_NEIGHBOUR``
#: (half of one full topic of the row's own; see ``add_neighbours``).
NEIGHBOUR_SHARE, MAX_NEIGHBOUR = 0.25, 20.0
#: How far a neighbour may be: the candidates up to this many places before or after
#: (2: chosen on LoCoMo's tuning split, docs/benchmarks.md).
NEIGHBOUR_REACH = 2


def topics(item: Ranked) -> dict[str, float]:
    """The points ``item`` earns from each of its own matched topics, by reason."""
    return {reason: points for reason, points in item.parts if reason.startswith("topic ")}


def add_neighbours(ranked: list[Ranked]) -> None:
    """Add to each candidate a share of the topics that the candidate just before or
    after it in its session matched and it did not (a question and its answer, a call
    and its result): an answer seldom repeats the words of the question it answers.
    Rows that match the same words gain nothing from each other, nor do rows of
    different tiers. Only candidates take part, so a row still needs its own verified
    match to be here at all."""
    by_position = {(item.row.session_id, item.row.seq): item for item in ranked}
    # Topics are read only for rows with a neighbour among the candidates (most have
    # none); a share gained is not a topic, so reading them late finds the same.
    own: dict[int, dict[str, float]] = {}

    def topics_of(item: Ranked) -> dict[str, float]:
        found = own.get(id(item))
        if found is None:
            found = own[id(item)] = topics(item)
        return found

    for item in ranked:
        row = item.row
        best = 0.0
        for step in range(-NEIGHBOUR_REACH, NEIGHBOUR_REACH + 1):
            other = by_position.get((row.session_id, row.seq + step)) if step else None
            if other is not None and other.tier == item.tier:
                mine = topics_of(item)
                best = max(best, sum(points for reason, points in topics_of(other).items()
                                     if reason not in mine))
        if best:
            item.add(round(min(MAX_NEIGHBOUR, NEIGHBOUR_SHARE * best), 2), "next to a match")
