"""The read side's row loading: an entry's columns, texts, state and source.

A search (``query.search.searches``) returns rows without their text; the text is
read only for the rows an answer shows (``load_texts``). The session's state, the
entries of caller-given ids and one entry's source are single lookups by key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import apsw

from lookback.index.store import all_rows
from lookback.index.tree import PathEntry
from lookback.query.search.types import Row

#: Everything but the text: it is read only for rows that need it (see load_texts).
COLUMNS = ("e.rowid, e.session_id, e.entry_id, e.seq, e.type, e.role, e.timestamp,"
           " e.ts_ms, e.text_hash, e.tokens")


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
