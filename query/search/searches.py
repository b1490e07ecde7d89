"""The read side's candidate searches: literal and FTS5 SQL over ``entries``.

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
(``query.search.rows.load_texts``).
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Sequence

import apsw

from lookback.index.store import one_int
from lookback.query.search.rows import COLUMNS
from lookback.query.search.types import LITERAL_SEPARATOR, Literals, Row, Scope
from lookback.query.text.fts_query import FtsQuery, build_phrase_query
from lookback.query.text.matching import find_literal


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


def count_fts(connection: apsw.Connection, fts_query: str, scope: Scope) -> int:
    """How many rows in ``scope`` match ``fts_query`` (for diagnostics)."""
    where, params = scope.where()
    join = " JOIN entries AS e ON e.rowid = entries_fts.rowid" if scope.needs_entries else ""
    sql = f"SELECT count(*) FROM entries_fts{join} WHERE entries_fts MATCH ? AND {where}"
    return one_int(connection.execute(sql, [fts_query, *params]))
