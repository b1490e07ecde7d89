"""The read side's SQL over ``entries``: candidate searches, and the few lookups around them.

Every search applies the scope — the session, the allowed part of the branch and
the eligible entry types — in its ``WHERE`` clause, *before* its ``LIMIT``, so
rows of sibling branches or of the live context can never take the places of
authorized hits.

The scope is a set of FTS rowids, passed as ranges: a Pi branch is written as a
few runs of consecutive lines, so its rows are a few runs of consecutive rowids.
The ranges' envelope is a ``rowid BETWEEN`` constraint FTS5 itself uses to skip
other sessions, and the ranges are checked on the FTS rowid alone, so filtering
never reads an ``entries`` row; only the rows that survive the ``LIMIT`` are
joined. A scope too fragmented for ranges falls back to a rowid list.

Verification happens in the same statements (spec step 7), not in a Python scan
of candidate texts: the FTS5 auxiliary function ``lookback_phrases`` reports which
of the query's phrases (``query.text.fts_query.FtsQuery``) a row matches — FTS5 has
just matched them, token by token, with the index's own tokenizer — and the scalar
function ``lookback_literals`` reports which literal terms a row contains exactly
as written and not glued inside a longer word, once per distinct candidate. SQLite
evaluates the auxiliary function only for the rows that make the ``LIMIT``. Texts
reach Python only inside those functions and for the items an answer returns
(``load_texts``).
"""

from __future__ import annotations

import functools
import json
import math
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from lookback.index.memo import Memo
from lookback.index.store import all_rows, one_row
from lookback.index.tree import PathEntry
from lookback.query.search.types import LITERAL_SEPARATOR, Literals, Row, Scope
from lookback.query.text.fts_query import FtsQuery, build_phrase_query, stemmed_phrase
from lookback.query.text.matching import find_literal

#: A query of more phrases is searched by its rarest ``SELECTIVE_PHRASES`` (see
#: ``selective_expression``); a phrase in ``COMMON_ROWS`` rows, or in
#: ``1/COMMON_SHARE`` of the index if that is more, is common.
SELECTIVE_PHRASES = 8
COMMON_ROWS, COMMON_SHARE = 100, 1000

#: Everything but the text: it is read only for rows that need it (see load_texts).
COLUMNS = ("e.rowid, e.session_id, e.entry_id, e.seq, e.type, e.role, e.timestamp,"
           " e.ts_ms, e.text_hash, e.tokens")


def prepare(connection: apsw.Connection) -> None:
    """Register the verification functions on ``connection`` (once per connection)."""
    if connection in _PREPARED:
        return
    # apsw's stubs want functions of any arity; SQL calls these with the arity given
    connection.register_fts5_function("lookback_phrases", _phrases)  # type: ignore[arg-type]
    connection.create_scalar_function("lookback_literals", _literals, 2,  # type: ignore[arg-type]
                                      deterministic=True)
    _PREPARED.add(connection)


_PREPARED: weakref.WeakSet[apsw.Connection] = weakref.WeakSet()


def _phrases(api: apsw.FTS5ExtensionApi) -> int:
    columns = api.phrase_columns  # one attribute lookup: this runs per row and phrase
    mask = 0
    for number in range(api.phrase_count):
        if columns(number):
            mask |= 1 << number
    return mask


@functools.lru_cache(maxsize=256)
def _unpacked(packed: str) -> tuple[str, ...]:
    return tuple(packed.split(LITERAL_SEPARATOR))


def _literals(text: str | None, packed: str) -> int:
    if not text:
        return 0
    mask = 0
    for number, literal in enumerate(_unpacked(packed)):  # per row: split once per query
        if literal in text and find_literal(text, literal) is not None:
            mask |= 1 << number
    return mask


def literal_search(connection: apsw.Connection, literal: str, scope: Scope,
                   limit: int) -> list[Row]:
    """Rows containing ``literal`` exactly as written (case-sensitive), newest first.

    The FTS5 phrase of the literal narrows the rows (fast at a million entries);
    ``instr`` then checks the exact text. Walking FTS rowids downwards lets SQLite
    stop at ``limit`` rows. A literal with no searchable token falls back to
    ``instr`` over the scope alone, which is bounded by one session. The rows'
    phrase and literal bits are filled in once per distinct row after merging
    (``add_phrase_bits``, ``add_literal_bits``).
    """
    phrase = build_phrase_query(literal)
    if phrase is not None:
        where, params = scope.where()
        sql = (f"SELECT {COLUMNS} FROM entries_fts JOIN entries AS e "
               f"ON e.rowid = entries_fts.rowid WHERE entries_fts MATCH ? AND {where} "
               f"AND instr(e.text, ?) > 0 ORDER BY entries_fts.rowid DESC LIMIT ?")
        args = [phrase, *params, literal, limit]
    elif scope.rowids is not None or scope.session_id is not None:
        where, params = scope.where(fts="e")
        sql = (f"SELECT {COLUMNS} FROM entries AS e WHERE {where} "
               f"AND e.eligible = 1 AND instr(e.text, ?) > 0 ORDER BY e.rowid DESC LIMIT ?")
        args = [*params, literal, limit]
    else:
        return []
    return [Row(*values) for values in connection.execute(sql, args)]


def add_literal_bits(connection: apsw.Connection, literals: Literals,
                     rows: Sequence[Row]) -> None:
    """Set ``literals`` on every row, one function call per distinct row."""
    if not rows or not literals.texts:
        return
    by_rowid = {row.rowid: row for row in rows}
    prepare(connection)
    for rowid, mask in connection.execute(
            "SELECT rowid, lookback_literals(text, ?) FROM entries "
            "WHERE rowid IN (SELECT value FROM json_each(?))",
            (literals.packed, json.dumps(list(by_rowid)))):
        by_rowid[rowid].literals = mask


def add_phrase_bits(connection: apsw.Connection, query: FtsQuery, rows: Sequence[Row]) -> None:
    """Set ``phrases`` on rows the FTS search did not return, in one statement.

    The ``+`` keeps the rowid list out of FTS5's plan, so FTS5 walks the query's
    doclists once within the rows' rowid range instead of once per rowid.
    """
    if not rows:
        return
    by_rowid = {row.rowid: row for row in rows}
    sql = ("SELECT rowid, lookback_phrases(entries_fts) FROM entries_fts "
           "WHERE entries_fts MATCH ? AND rowid BETWEEN ? AND ? "
           "AND +rowid IN (SELECT value FROM json_each(?))")
    prepare(connection)
    for rowid, phrases in connection.execute(
            sql, (query.expression, min(by_rowid), max(by_rowid), json.dumps(list(by_rowid)))):
        by_rowid[rowid].phrases = phrases


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
    known = _count_tokens(connection, stamp, phrases)
    found = []
    for phrase in phrases:
        found.append(min((known.get(token.casefold()) or _token_rows(connection, stamp, token))[0]
                         for token in _tokens(phrase)))
    total = max(total, max(found), 1)
    ceiling = _idf(total, 1)
    return [min(1.0, _idf(total, max(count, 1)) / ceiling) if ceiling > 0 else 1.0
            for count in found]


def _stamp(connection: apsw.Connection) -> tuple[str, object] | None:
    """The index state the counts of ``_COUNTS`` are valid for: its file and watermark
    (None: a bare FTS table without the index's ``meta``, whose counts are not kept)."""
    try:
        (watermark,) = connection.execute(
            "SELECT value FROM meta WHERE key = 'applied_seq'").fetchone() or (None,)
    except apsw.SQLError:
        return None
    return connection.filename, watermark


def _tokens(phrase: str) -> list[str]:
    """The tokens of a quoted query phrase, as written (see ``fts_query._phrase``); a
    prefix phrase's (``"scherm"*``, an Italian keyword's forms) keeps its star."""
    if phrase.endswith("*"):
        return [phrase[1:-2].replace('""', '"') + "*"]  # one token (fts_query.form_prefix)
    return phrase[1:-1].replace('""', '"').split(" ")


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
        for token in _tokens(phrase):
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
    tokens = _tokens(phrase)
    if len(tokens) == 1 and tokens[0].isascii():
        count, ascii_counted = (known or {}).get(tokens[0].casefold()) or _token_rows(
            connection, stamp, tokens[0])
        if ascii_counted:
            return min(count, cap)
    key = None if stamp is None else (*stamp, "capped", phrase, cap)
    rows = None if key is None else _COUNTS.get(key)
    if rows is None:
        (rows,) = one_row(connection.execute(
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
    for position, byte in enumerate(found[0][:9]):  # SQLite's varint, as FTS5 writes it
        if position == 8:
            return value << 8 | byte
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            break
    return value


def fts_search(connection: apsw.Connection, query: FtsQuery, scope: Scope,
               limit: int, expression: str | None = None) -> list[Row]:
    """The best ``limit`` rows by ``bm25`` for the query's ``OR`` of phrases.

    Ranking and the scope filter run on the FTS table alone; only the ``limit``
    winners are joined to ``entries``, for their columns. With ``expression`` (a
    ``selective_expression``) the rows are ranked by it instead. The rows'
    ``phrases`` bits are left 0 for ``add_phrase_bits`` to fill in from the whole
    query, with the other candidates' (``merge_candidates``): computed here, in the
    sorted query, SQLite would evaluate ``lookback_phrases`` for every matching row
    of the scope before its ``LIMIT``, not only for the winners.
    """
    where, params = scope.where(fts="entries_fts")
    select = "entries_fts.rowid AS rowid, bm25(entries_fts) AS score"
    if scope.needs_entries:
        inner = (f"SELECT {select} FROM entries_fts JOIN entries AS e "
                 f"ON e.rowid = entries_fts.rowid "
                 f"WHERE entries_fts MATCH ? AND {where} ORDER BY score LIMIT ?")
    else:
        inner = (f"SELECT {select} FROM entries_fts "
                 f"WHERE entries_fts MATCH ? AND {where} ORDER BY score LIMIT ?")
    sql = (f"SELECT {COLUMNS}, hits.score FROM ({inner}) AS hits "
           f"JOIN entries AS e ON e.rowid = hits.rowid ORDER BY hits.score, e.rowid DESC")
    rows = []
    match = expression or query.expression
    for rank, values in enumerate(connection.execute(sql, [match, *params, limit])):
        row = Row(*values[:-1])
        row.bm25 = values[-1]
        row.fts_rank = rank
        rows.append(row)
    return rows


def load_texts(connection: apsw.Connection, rows: Iterable[Row]) -> None:
    """Fill in ``text`` for the rows that lack it, in one query."""
    missing = {row.rowid: row for row in rows if row.text is None}
    if not missing:
        return
    found = connection.execute(
        "SELECT rowid, text FROM entries WHERE rowid IN (SELECT value FROM json_each(?))",
        (json.dumps(list(missing)),))
    for rowid, text in found:
        missing[rowid].text = text
    for row in missing.values():  # gone since the search (a reset): nothing to show
        if row.text is None:
            row.text = ""


def rows_by_rowid(connection: apsw.Connection, rowids: Sequence[int]) -> dict[int, Row]:
    """The rows (without text) of ``rowids`` that still exist."""
    if not rowids:
        return {}
    sql = f"SELECT {COLUMNS} FROM entries AS e WHERE e.rowid IN (SELECT value FROM json_each(?))"
    return {row.rowid: row for row in (Row(*values) for values in
                                       connection.execute(sql, (json.dumps(list(rowids)),)))}


def count_fts(connection: apsw.Connection, fts_query: str, scope: Scope) -> int:
    """How many rows in ``scope`` match ``fts_query`` (for diagnostics)."""
    where, params = scope.where()
    join = " JOIN entries AS e ON e.rowid = entries_fts.rowid" if scope.needs_entries else ""
    sql = f"SELECT count(*) FROM entries_fts{join} WHERE entries_fts MATCH ? AND {where}"
    return one_row(connection.execute(sql, [fts_query, *params]))[0]


@dataclass(frozen=True)
class SessionState:
    """What a retrieval reads first about its session."""

    leaf_id: str | None
    epoch: int
    watermark: int  # the index's applied event sequence


def session_state(connection: apsw.Connection, session_id: str) -> SessionState | None:
    """The session's leaf, reset epoch and the index watermark (None: not indexed)."""
    found = connection.execute(
        "SELECT leaf_id, epoch, (SELECT value FROM meta WHERE key = 'applied_seq') "
        "FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
    if found is None:
        return None
    return SessionState(found[0], found[1], int(found[2] or 0))


def entries_for(connection: apsw.Connection, session_id: str,
                entry_ids: Sequence[str]) -> list[PathEntry]:
    """The indexed entries among caller-given ids (ids the index lacks are skipped)."""
    rows = all_rows(connection.execute(
        "SELECT rowid, entry_id, type, first_kept_id, seq, kept_ids FROM entries "
        "WHERE session_id = ? AND entry_id IN (SELECT value FROM json_each(?))",
        (session_id, json.dumps(list(entry_ids)))))
    return [PathEntry.of_row(*row) for row in rows]


@dataclass(frozen=True)
class Source:
    """One entry's full indexed text and where it comes from."""

    entry_id: str
    session_id: str
    type: str
    role: str | None
    timestamp: str | None
    text: str


def source_entry(connection: apsw.Connection, session_id: str, entry_id: str) -> Source | None:
    """One entry by its id in the session, with its text (None: not indexed)."""
    found = connection.execute(
        "SELECT entry_id, session_id, type, role, timestamp, text FROM entries "
        "WHERE session_id = ? AND entry_id = ?", (session_id, entry_id)).fetchone()
    return None if found is None else Source(*found)
