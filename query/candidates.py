"""Candidate searches: case-sensitive literals and FTS5 ``bm25``, filtered in SQL.

Every search applies the scope — session, the allowed part of the branch, and the
eligible entry types — in its ``WHERE`` clause, *before* its ``LIMIT``, so rows of
sibling branches or of the live context can never take the places of authorized
hits. The allowed part of a branch is passed as ranges of entry positions (a Pi
branch is a handful of runs of consecutive lines), or as a rowid list when it is
too fragmented for ranges.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import apsw

from query.fts_query import build_phrase_query

MAX_RANGES = 64

_COLUMNS = ("e.rowid, e.session_id, e.entry_id, e.seq, e.type, e.role, e.timestamp,"
            " e.ts_ms, e.text, e.text_hash, e.tokens")


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
    text: str
    text_hash: str | None
    tokens: int
    bm25: float | None = None
    fts_rank: int | None = None
    literal_hits: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Scope:
    """Which rows a search may return.

    ``session_id`` None searches the whole project. ``allowed`` (session scope only)
    is the set of (seq, rowid) the caller may see; None means the whole session.
    """

    session_id: str | None
    allowed: frozenset[tuple[int, int]] | None = None
    eligible_only: bool = True

    def where(self) -> tuple[str, list[object]]:
        """The WHERE clause and its parameters (computed once per scope)."""
        cached = self.__dict__.get("_where")
        if cached is None:
            cached = self._build_where()
            object.__setattr__(self, "_where", cached)
        return cached

    def _build_where(self) -> tuple[str, list[object]]:
        clauses: list[str] = []
        params: list[object] = []
        if self.eligible_only:
            clauses.append("e.eligible = 1")
        if self.session_id is not None:
            clauses.append("e.session_id = ?")
            params.append(self.session_id)
        if self.allowed is not None:
            clause, values = _allowed_clause(self.allowed)
            clauses.append(clause)
            params.extend(values)
        return " AND ".join(clauses) or "1", params


def _allowed_clause(allowed: frozenset[tuple[int, int]]) -> tuple[str, list[object]]:
    if not allowed:
        return "0", []
    ranges = seq_ranges(sorted(seq for seq, _ in allowed))
    if len(ranges) <= MAX_RANGES:
        clause = " OR ".join("e.seq BETWEEN ? AND ?" for _ in ranges)
        return f"({clause})", [value for pair in ranges for value in pair]
    rowids = json.dumps(sorted(rowid for _, rowid in allowed))
    return "e.rowid IN (SELECT value FROM json_each(?))", [rowids]


def seq_ranges(seqs: list[int]) -> list[tuple[int, int]]:
    """Runs of consecutive numbers: [1, 2, 3, 7, 8] → [(1, 3), (7, 8)]."""
    ranges: list[tuple[int, int]] = []
    for seq in seqs:
        if ranges and seq == ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], seq)
        else:
            ranges.append((seq, seq))
    return ranges


def literal_search(connection: apsw.Connection, literal: str, scope: Scope,
                   limit: int) -> list[Row]:
    """Rows containing ``literal`` exactly as written (case-sensitive), newest first.

    The FTS5 phrase of the literal narrows the rows (fast at a million entries);
    ``instr`` then checks the exact bytes. A literal with no searchable token falls
    back to ``instr`` over the scope alone, which is bounded by one session.
    """
    where, params = scope.where()
    phrase = build_phrase_query(literal)
    if phrase is not None:
        sql = (f"SELECT {_COLUMNS} FROM entries_fts JOIN entries AS e "
               f"ON e.rowid = entries_fts.rowid WHERE entries_fts MATCH ? AND {where} "
               f"AND instr(e.text, ?) > 0 ORDER BY e.seq DESC LIMIT ?")
        args = [phrase, *params, literal, limit]
    elif scope.session_id is not None:
        sql = (f"SELECT {_COLUMNS} FROM entries AS e WHERE {where} AND instr(e.text, ?) > 0 "
               f"ORDER BY e.seq DESC LIMIT ?")
        args = [*params, literal, limit]
    else:
        return []
    return [Row(*row) for row in connection.execute(sql, args)]


def fts_search(connection: apsw.Connection, fts_query: str, scope: Scope,
               limit: int) -> list[Row]:
    """The best ``limit`` rows by ``bm25`` for an OR query of quoted terms."""
    where, params = scope.where()
    sql = (f"SELECT {_COLUMNS}, bm25(entries_fts) AS score FROM entries_fts "
           f"JOIN entries AS e ON e.rowid = entries_fts.rowid "
           f"WHERE entries_fts MATCH ? AND {where} ORDER BY score, e.seq DESC LIMIT ?")
    rows = []
    for rank, values in enumerate(connection.execute(sql, [fts_query, *params, limit])):
        row = Row(*values[:-1])
        row.bm25, row.fts_rank = values[-1], rank
        rows.append(row)
    return rows


def count_fts(connection: apsw.Connection, fts_query: str, scope: Scope) -> int:
    """How many rows in ``scope`` match ``fts_query`` (for diagnostics)."""
    where, params = scope.where()
    sql = (f"SELECT count(*) FROM entries_fts JOIN entries AS e "
           f"ON e.rowid = entries_fts.rowid WHERE entries_fts MATCH ? AND {where}")
    return connection.execute(sql, [fts_query, *params]).fetchone()[0]
