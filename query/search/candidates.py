"""Candidate searches: case-sensitive literals and FTS5 ``bm25``, filtered in SQL.

Every search applies the scope — the session, the allowed part of the branch and
the eligible entry types — in its ``WHERE`` clause, *before* its ``LIMIT``, so
rows of sibling branches or of the live context can never take the places of
authorized hits.

The scope is a set of FTS rowids, passed as ranges: a Pi branch is written as a
few runs of consecutive lines, so its rows are a few runs of consecutive rowids.
The ranges' envelope is a ``rowid BETWEEN`` constraint FTS5 itself uses to skip
other sessions, and the ranges are checked on the FTS rowid alone, so filtering
never reads an ``entries`` row; only the rows that survive the ``LIMIT`` are
joined for their text. A scope too fragmented for ranges falls back to a rowid
list.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

import apsw
from lookback.query.text.fts_query import build_phrase_query

MAX_RANGES = 64

#: Everything but the text: it is read only for rows that need it (see load_texts).
_COLUMNS = ("e.rowid, e.session_id, e.entry_id, e.seq, e.type, e.role, e.timestamp,"
            " e.ts_ms, e.text_hash, e.tokens")


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
    literal_hits: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Scope:
    """Which rows a search may return: a rowid set, a whole session, or everything."""

    rowids: frozenset[int] | None = None  # None: not restricted to a rowid set
    session_id: str | None = None  # with rowids None: the whole session
    _sql: list = field(default_factory=list, compare=False, repr=False)

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
        bounds = [ranges[0][0], ranges[-1][1]]
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


def literal_search(connection: apsw.Connection, literal: str, scope: Scope,
                   limit: int) -> list[Row]:
    """Rows containing ``literal`` exactly as written (case-sensitive), newest first.

    The FTS5 phrase of the literal narrows the rows (fast at a million entries);
    ``instr`` then checks the exact text. Walking FTS rowids downwards lets SQLite
    stop at ``limit`` verified rows. A literal with no searchable token falls back
    to ``instr`` over the scope alone, which is bounded by one session.
    """
    where, params = scope.where()
    phrase = build_phrase_query(literal)
    if phrase is not None:
        sql = (f"SELECT {_COLUMNS} FROM entries_fts JOIN entries AS e "
               f"ON e.rowid = entries_fts.rowid WHERE entries_fts MATCH ? AND {where} "
               f"AND instr(e.text, ?) > 0 ORDER BY entries_fts.rowid DESC LIMIT ?")
        args = [phrase, *params, literal, limit]
    elif scope.rowids is not None or scope.session_id is not None:
        where, params = scope.where(fts="e")
        sql = (f"SELECT {_COLUMNS} FROM entries AS e WHERE {where} AND e.eligible = 1 "
               f"AND instr(e.text, ?) > 0 ORDER BY e.rowid DESC LIMIT ?")
        args = [*params, literal, limit]
    else:
        return []
    return [Row(*row) for row in connection.execute(sql, args)]


def fts_search(connection: apsw.Connection, fts_query: str, scope: Scope,
               limit: int) -> list[Row]:
    """The best ``limit`` rows by ``bm25`` for an OR query of quoted terms.

    Ranking and the scope filter run on the FTS table alone; only the ``limit``
    winners are joined to ``entries`` for their text.
    """
    where, params = scope.where(fts="entries_fts")
    if scope.needs_entries:
        inner = (f"SELECT entries_fts.rowid AS rowid, bm25(entries_fts) AS score "
                 f"FROM entries_fts JOIN entries AS e ON e.rowid = entries_fts.rowid "
                 f"WHERE entries_fts MATCH ? AND {where} ORDER BY score LIMIT ?")
    else:
        inner = (f"SELECT rowid, bm25(entries_fts) AS score FROM entries_fts "
                 f"WHERE entries_fts MATCH ? AND {where} ORDER BY score LIMIT ?")
    sql = (f"SELECT {_COLUMNS}, hits.score FROM ({inner}) AS hits "
           f"JOIN entries AS e ON e.rowid = hits.rowid ORDER BY hits.score, e.rowid DESC")
    rows = []
    for rank, values in enumerate(connection.execute(sql, [fts_query, *params, limit])):
        row = Row(*values[:-1])
        row.bm25, row.fts_rank = values[-1], rank
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


def count_fts(connection: apsw.Connection, fts_query: str, scope: Scope) -> int:
    """How many rows in ``scope`` match ``fts_query`` (for diagnostics)."""
    where, params = scope.where()
    join = " JOIN entries AS e ON e.rowid = entries_fts.rowid" if scope.needs_entries else ""
    sql = f"SELECT count(*) FROM entries_fts{join} WHERE entries_fts MATCH ? AND {where}"
    return connection.execute(sql, [fts_query, *params]).fetchone()[0]
