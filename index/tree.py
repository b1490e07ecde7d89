"""The session tree in SQL: a leaf's branch, and the entries in the model's context.

``branch`` is Pi's ``SessionManager.getBranch()``: walk ``parent_id`` from the leaf to
the root (root first). A missing parent ends the walk (orphans); a parent cycle ends
it at the first repeat. ``context_entries`` is Pi's ``buildContextEntries()`` rule on
that path: the latest compaction, the entries from its ``firstKeptEntryId`` up to it,
and everything after it; the whole path when there is no compaction. A compaction that
names the entries it keeps by id (``kept_ids``: Codex's ``replacement_history``, which
keeps the user's messages wherever they stand) keeps exactly those before it instead of
a run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import apsw

from lookback.index.store import one_row

_PATH_SQL = """
WITH RECURSIVE path(rid, entry_id, parent_id, type, first_kept_id, seq, kept_ids, depth) AS (
    SELECT rowid, entry_id, parent_id, type, first_kept_id, seq, kept_ids, 0
      FROM entries WHERE session_id = :session AND entry_id = :leaf
    UNION ALL
    SELECT e.rowid, e.entry_id, e.parent_id, e.type, e.first_kept_id, e.seq, e.kept_ids,
           path.depth + 1
      FROM entries AS e JOIN path ON e.session_id = :session AND e.entry_id = path.parent_id
     WHERE path.depth < :limit
)
SELECT rid, entry_id, type, first_kept_id, seq, kept_ids FROM path ORDER BY depth DESC
"""


@dataclass(frozen=True)
class PathEntry:
    rowid: int
    entry_id: str
    type: str
    first_kept_id: str | None
    seq: int
    kept_ids: frozenset[str] | None = None  # a compaction's kept entries, when named by id

    @classmethod
    def of_row(cls, rowid: int, entry_id: str, entry_type: str, first_kept_id: str | None,
               seq: int, kept_ids: str | None) -> PathEntry:
        """One entry from its columns (``kept_ids`` as the index stores it: JSON or NULL)."""
        return cls(rowid, entry_id, entry_type, first_kept_id, seq, parse_kept_ids(kept_ids))


def parse_kept_ids(value: str | None) -> frozenset[str] | None:
    if value is None:
        return None
    try:
        ids = json.loads(value)
    except ValueError:
        return frozenset()  # unreadable: nothing kept, so nothing is wrongly withheld
    return frozenset(i for i in ids if isinstance(i, str)) if isinstance(ids, list) \
        else frozenset()


def leaf_of(connection: apsw.Connection, session_id: str) -> str | None:
    """The session's leaf: the last entry appended (or moved to by a leaf record)."""
    row = connection.execute(
        "SELECT leaf_id FROM sessions WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else row[0]


def branch(connection: apsw.Connection, session_id: str, leaf_id: str) -> list[PathEntry]:
    """The path from the root to ``leaf_id`` (empty when the leaf is unknown)."""
    limit = _entry_count(connection, session_id)
    rows = connection.execute(_PATH_SQL, {"session": session_id, "leaf": leaf_id,
                                          "limit": limit}).fetchall()
    path: list[PathEntry] = []
    seen: set[str] = set()
    # Rows come root first; a cycle repeats ids from the leaf's side, so keep the
    # walk from the leaf up to the first repeat.
    for rid, entry_id, entry_type, first_kept, seq, kept_ids in reversed(rows):
        if entry_id in seen:
            break
        seen.add(entry_id)
        path.append(PathEntry.of_row(rid, entry_id, entry_type, first_kept, seq, kept_ids))
    path.reverse()
    return path


def context_entries(path: list[PathEntry]) -> list[PathEntry]:
    """The entries of ``path`` that Pi keeps in the model's context.

    An entry a Pi 1.x ``context_edit`` on the path targets (stored as its ``first_kept_id``)
    is not: its original content no longer reaches the model, whether the edit omits it or
    replaces it.
    """
    edited = {e.first_kept_id for e in path if e.type == "context_edit" and e.first_kept_id}
    selected = _selected(path)
    return [e for e in selected if e.entry_id not in edited] if edited else selected


def _selected(path: list[PathEntry]) -> list[PathEntry]:
    """Pi's ``buildContextEntries()``: the latest compaction and what it keeps, then the rest."""
    latest = next((i for i in range(len(path) - 1, -1, -1)
                   if path[i].type == "compaction"), None)
    if latest is None:
        return list(path)
    compaction = path[latest]
    if compaction.kept_ids is not None:
        return [compaction, *(e for e in path[:latest] if e.entry_id in compaction.kept_ids),
                *path[latest + 1:]]
    # A retain-none compaction names its own id: nothing before it is kept.
    kept = next((i for i in range(latest) if path[i].entry_id == compaction.first_kept_id),
                latest)
    return [compaction, *path[kept:latest], *path[latest + 1:]]


def _entry_count(connection: apsw.Connection, session_id: str) -> int:
    row = one_row(connection.execute(
        "SELECT count(*) FROM entries WHERE session_id = ?", (session_id,)))
    return int(row[0]) + 1
