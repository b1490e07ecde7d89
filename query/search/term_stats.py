"""Term statistics of one project's index: how many rows hold each query phrase.

``rarity`` weighs each matched term by its Okapi IDF in the index; a query of many
phrases (a pasted log) is searched by its rarest few (``selective_expression``). The
counts come from FTS5 itself and are memoized per index file and watermark, so the
same index state always gives the same numbers.
"""

from __future__ import annotations

import json
import math
import weakref
from collections.abc import Sequence
from typing import Any

import apsw

from lookback.index.memo import Memo
from lookback.index.store import one_int, one_row
from lookback.query.text.fts_query import FtsQuery, phrase_tokens, stemmed_phrase

#: A query of more phrases is searched by its rarest ``SELECTIVE_PHRASES`` (see
#: ``selective_expression``); a phrase in ``COMMON_ROWS`` rows, or in
#: ``1/COMMON_SHARE`` of the index if that is more, is common.
SELECTIVE_PHRASES = 8
COMMON_ROWS, COMMON_SHARE = 100, 1000


def selective_expression(connection: apsw.Connection, query: FtsQuery,
                         keep: int = SELECTIVE_PHRASES, cap: int | None = None) -> str | None:
    """An ``OR`` of the query's ``keep`` rarest phrases; None when it has no more.

    ``bm25`` counts the rows of every phrase over the whole index, whatever the
    scope, so a pasted log of 32 terms costs tens of milliseconds at 100,000 rows.
    The rare phrases carry nearly all of the ``bm25`` weight, so the search ranks by
    them alone. A phrase's rows are counted up to ``cap`` (one short walk of its
    doclist each; a phrase in ``cap`` rows or more is common; default: see
    ``COMMON_ROWS``), ties keep message order, so the choice depends only on the
    query and the index.
    """
    if len(query.phrases) <= keep:
        return None
    if cap is None:  # the largest rowid: the index's size, without counting its rows
        (last,) = one_row(connection.execute("SELECT max(rowid) FROM entries"))
        cap = max(COMMON_ROWS, (last or 0) // COMMON_SHARE)
    stamp = _stamp(connection)
    known = _count_tokens(connection, stamp, query.phrases)
    counted = [_capped_rows(connection, stamp, phrase, cap, known) for phrase in query.phrases]
    rarest = sorted(range(len(counted)), key=lambda number: (counted[number], number))[:keep]
    return " OR ".join(query.phrases[number] for number in sorted(rarest))


#: Rows per phrase and rows in the index, per index file and watermark (see ``rarity``):
#: ints, and (rows, counted in ASCII) pairs for single tokens, told apart by the key.
_COUNTS: Memo[Any] = Memo(100_000)


def rarity(connection: apsw.Connection, phrases: Sequence[str]) -> list[float]:
    """How informative a match of each phrase is in this index: 0 (every row) to 1 (one row).

    Okapi BM25's IDF, ``ln(1 + (N - n + 0.5) / (n + 0.5))`` for a phrase in ``n`` of
    the index's ``N`` rows, divided by its value for ``n = 1``. ``n`` comes from FTS5
    itself: the rows of the phrase's rarest token (with the index's own tokenizer; a
    phrase is at least that rare, and tokens recur across messages where whole phrases
    do not, while matching a long phrase of common tokens costs a millisecond), ``N``
    from FTS5's statistics record, so the numbers are those ``bm25`` uses. Both are
    memoized per index file and watermark: the same index state always gives the same
    weights, and a token is counted once however many messages ask for it.
    """
    if not phrases:
        return []
    stamp = _stamp(connection)
    total = None if stamp is None else _COUNTS.get((*stamp, None))
    if total is None:
        total = _row_count(connection)
        if stamp is not None:
            _COUNTS.put((*stamp, None), total)
    found = _phrase_rows(connection, stamp, phrases)
    total = max(total, max(found), 1)
    ceiling = _idf(total, 1)
    return [min(1.0, _idf(total, max(count, 1)) / ceiling) if ceiling > 0 else 1.0
            for count in found]


def unseen(connection: apsw.Connection, phrases: Sequence[str]) -> list[bool]:
    """Whether each phrase is in no row of this index (a rarest token it never saw);
    counted as ``rarity`` counts, from the same memo."""
    if not phrases:
        return []
    return [count == 0 for count in _phrase_rows(connection, _stamp(connection), phrases)]


def _phrase_rows(connection: apsw.Connection, stamp: tuple[str, object] | None,
                 phrases: Sequence[str]) -> list[int]:
    """The rows of each phrase's rarest token (``rarity``'s ``n``)."""
    known = _count_tokens(connection, stamp, phrases)
    return [min((known.get(token.casefold()) or _token_rows(connection, stamp, token))[0]
                for token in phrase_tokens(phrase)) for phrase in phrases]


def _stamp(connection: apsw.Connection) -> tuple[str, object] | None:
    """The index state the counts of ``_COUNTS`` are valid for: its file and watermark
    (None: a bare FTS table without the index's ``meta``, whose counts are not kept)."""
    try:
        (watermark,) = connection.execute(
            "SELECT value FROM meta WHERE key = 'applied_seq'").fetchone() or (None,)
    except apsw.SQLError:
        return None
    return connection.filename, watermark


def _token_rows(connection: apsw.Connection, stamp: tuple[str, object] | None, token: str
                ) -> tuple[int, bool]:
    """The rows holding ``token``, memoized per index state and folded token, and
    whether the spelling counted was ASCII."""
    key = None if stamp is None else (*stamp, token.casefold())
    found = None if key is None else _COUNTS.get(key)
    if found is None:
        prefix = token.endswith("*")  # tokens never hold a star: the tokenizer cuts there
        word = token[:-1] if prefix else token
        (count,) = one_row(connection.execute(
            "SELECT count(*) FROM entries_fts WHERE entries_fts MATCH ?",
            ('"' + word.replace('"', '""') + '"' + ("*" if prefix else ""),)))
        found = (count, token.isascii())
        if key is not None:
            _COUNTS.put(key, found)
    return found


#: FTS5's per-term row counts (``fts5vocab``, type ``row``), one per connection, in its
#: own temporary schema: nothing is written to the index.
_VOCAB = "temp.lookback_vocab"
_VOCABS: weakref.WeakKeyDictionary[apsw.Connection, bool] = weakref.WeakKeyDictionary()


def _vocab(connection: apsw.Connection) -> bool:
    """True when ``connection`` has the ``_VOCAB`` table (made on first use)."""
    ready = _VOCABS.get(connection)
    if ready is None:
        try:
            (query_only,) = one_row(connection.execute("PRAGMA query_only"))
            connection.execute("PRAGMA query_only=0")  # a temporary table only
            try:
                connection.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {_VOCAB} "
                                   "USING fts5vocab(main, 'entries_fts', 'row')")
                connection.execute(f"SELECT doc FROM {_VOCAB} WHERE term = ''").fetchall()
                ready = True
            finally:
                connection.execute(f"PRAGMA query_only={int(query_only)}")
        except apsw.Error:
            ready = False
        _VOCABS[connection] = ready
    return ready


def _count_tokens(connection: apsw.Connection, stamp: tuple[str, object] | None,
                  phrases: Sequence[str]) -> dict[str, tuple[int, bool]]:
    """Memoize ``_token_rows`` for every token of ``phrases`` not counted yet, in one
    statement: FTS5's vocabulary holds each stemmed term's rows (the same number
    ``count(*) ... MATCH`` finds, from the same doclist, without a query cursor per
    token; about 40% less work at 100,000 rows). A token that does not stem to one
    term is left to ``_token_rows``. Returns what is known now, by folded token (the
    caller need not look the memo up again)."""
    known: dict[str, tuple[int, bool]] = {}
    if stamp is None:
        return known
    missing: dict[str, list[tuple[tuple[str, object, str], bool]]] = {}  # by stem
    seen: set[str] = set()
    for phrase in phrases:
        for token in phrase_tokens(phrase):
            folded = token.casefold()
            if folded in seen:
                continue
            seen.add(folded)
            key = (*stamp, folded)
            counted = _COUNTS.get(key)
            if counted is not None:
                known[folded] = counted
                continue
            stems = stemmed_phrase(token)
            if len(stems) == 1:
                missing.setdefault(stems[0], []).append((key, token.isascii()))
    if not missing or not _vocab(connection):
        return known
    found = dict(connection.execute(
        f"SELECT term, doc FROM {_VOCAB} WHERE term IN (SELECT value FROM json_each(?))",
        (json.dumps(list(missing)),)))
    for stem, keys in missing.items():
        for key, ascii_spelling in keys:
            counted = (found.get(stem, 0), ascii_spelling)
            _COUNTS.put(key, counted)
            known[key[-1]] = counted
    return known


def _capped_rows(connection: apsw.Connection, stamp: tuple[str, object] | None,
                 phrase: str, cap: int, known: dict[str, tuple[int, bool]] | None = None
                 ) -> int:
    """The rows matching ``phrase``, counted up to ``cap``, memoized per index state.

    A one-token ASCII phrase matches the rows ``_token_rows`` counts for ``rarity``
    (which the same request asks for anyway; the tokenizer folds ASCII case as
    ``casefold`` does): its full count, capped, is the same number without another
    query. ``known``: what ``_count_tokens`` just returned, by folded token.
    """
    tokens = phrase_tokens(phrase)
    if len(tokens) == 1 and tokens[0].isascii():
        count, ascii_counted = (known or {}).get(tokens[0].casefold()) or _token_rows(
            connection, stamp, tokens[0])
        if ascii_counted:
            return min(count, cap)
    key = None if stamp is None else (*stamp, "capped", phrase, cap)
    rows: int | None = None if key is None else _COUNTS.get(key)
    if rows is None:
        rows = one_int(connection.execute(
            "SELECT count(*) FROM (SELECT 1 FROM entries_fts WHERE entries_fts MATCH ? "
            "LIMIT ?)", (phrase, cap)))
        if key is not None:
            _COUNTS.put(key, rows)
    return rows


def _idf(total: int, count: int) -> float:
    return math.log(1 + (total - count + 0.5) / (count + 0.5))


def _row_count(connection: apsw.Connection) -> int:
    """FTS5's own count of indexed rows: the first varint of its averages record."""
    found = connection.execute("SELECT block FROM entries_fts_data WHERE id = 1").fetchone()
    if not found or not found[0]:
        return 0
    value = 0
    block: bytes = found[0]
    for position, byte in enumerate(block[:9]):  # SQLite's varint, as FTS5 writes it
        if position == 8:
            return value << 8 | byte
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            break
    return value


