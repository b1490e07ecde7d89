"""``lookback compact``: give a project's index back the space it no longer needs.

Two steps, each optional, under the project's rebuild lock and writer lock:

- **The event log** (``superseded_events``): an entry or leaf event of a session
  before that session's latest ``reset`` (the file was rewritten and read again from its
  start), and an entry event whose key a later entry event replaced (last write wins),
  change nothing a replay ends with. They are deleted; a ``reindex`` of the compacted
  log gives the same entries, texts and tree (only rowids and reset counters differ,
  which no answer shows). Every other event stays: the log remains the truth.
- **The file** (``compact_file``): FTS5 segments merged into one (``optimize``: the
  terms of deleted rows dropped), ``VACUUM`` (free pages returned to the disk), the WAL
  checkpointed and truncated; and the older generation a ``reindex`` leaves beside the
  live one deleted (``remove_older_generations``).

What each costs, measured on a 100,000-entry index, is in docs/data-controls.md.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import apsw

from lookback.errors import NotFound
from lookback.index.layout import ProjectDir
from lookback.index.project import ProjectWriter
from lookback.index.rebuild import exclusive
from lookback.index.repair import DAMAGED
from lookback.index.store import (
    IndexCorrupt,
    driver_errors,
    one_row,
    open_reader,
    read_meta,
    write_transaction,
)
from lookback.ingest import jsonio


@dataclass
class CompactReport:
    project: str
    events_before: int = 0
    events_dropped: int = 0
    generations_removed: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    seconds: float = 0.0


def compact(home: Path, project: ProjectDir, *, log: bool = True,
            lock_timeout: float = 60.0) -> CompactReport:
    """Compact ``project``'s event log (unless ``log`` is False) and its file."""
    started = time.monotonic()
    report = CompactReport(project.name, bytes_before=folder_bytes(project))
    with driver_errors(f"project {project.name}"):
        cwd, namespace = project_identity(project)
        guard = exclusive(project, wait=lock_timeout)  # no reindex copies the log meanwhile
        try:
            with ProjectWriter(home, cwd, namespace=namespace,
                               lock_timeout=lock_timeout) as writer:
                connection = writer.connection
                report.events_before = one_row(connection.execute(
                    "SELECT count(*) FROM events"))[0]
                if log:
                    dropped = superseded_events(connection)
                    with write_transaction(connection):
                        connection.execute("DELETE FROM events WHERE seq IN"
                                           " (SELECT value FROM json_each(?))",
                                           (jsonio.dumps(dropped),))
                    report.events_dropped = len(dropped)
                compact_file(connection)
            report.generations_removed = remove_older_generations(project)
        finally:
            os.close(guard)
    report.bytes_after = folder_bytes(project)
    report.seconds = time.monotonic() - started
    return report


def superseded_events(connection: apsw.Connection) -> list[int]:
    """The seqs of the events no replay needs (see the module notes), in one pass."""
    last_reset = dict(connection.execute(
        "SELECT session_id, max(seq) FROM events WHERE kind = 'reset' GROUP BY session_id"))
    latest: dict[tuple[str, str], int] = {}
    dropped: list[int] = []
    for seq, kind, session_id, entry_id in connection.execute(
            "SELECT seq, kind, session_id, json_extract(payload, '$.entry.id') FROM events"
            " WHERE kind IN ('entry', 'leaf') ORDER BY seq"):
        if seq < last_reset.get(session_id, 0):
            dropped.append(seq)
        elif kind == "entry" and isinstance(entry_id, str):
            earlier = latest.get((session_id, entry_id))
            if earlier is not None:
                dropped.append(earlier)
            latest[(session_id, entry_id)] = seq
    return sorted(dropped)


def compact_file(connection: apsw.Connection) -> None:
    """Rewrite the index file with nothing but its live rows: FTS5 segments merged into
    one (deleted terms dropped), ``VACUUM``, the WAL checkpointed and truncated."""
    connection.execute("INSERT INTO entries_fts(entries_fts) VALUES ('optimize')")
    connection.execute("VACUUM")
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def remove_older_generations(project: ProjectDir) -> int:
    """Delete the generations other than the live one (a reindex keeps the one before it);
    readers still holding one keep its inode until they reopen (at their next request).
    Damaged copies a repair kept aside stay. Returns how many were deleted."""
    live = project.current_generation()
    removed = 0
    for path in project.path.glob("index-*.sqlite*"):
        number = path.name.removeprefix("index-").split(".", 1)[0]
        if number.isdigit() and int(number) != live and not path.name.endswith(DAMAGED):
            path.unlink(missing_ok=True)
            removed += path.name.endswith(".sqlite")
    return removed


def project_identity(project: ProjectDir) -> tuple[str, str]:
    """(cwd, namespace) the project's index was written for (its writer needs them)."""
    path = project.index_path()
    if path is None:
        raise NotFound(f"no index for project {project.name}")
    try:
        connection = open_reader(path)
    except IndexCorrupt:
        raise IndexCorrupt(f"project {project.name}: the index is damaged; repair it with "
                           f"`lookback reindex --repair --project {project.name}`") from None
    try:
        cwd = read_meta(connection, "cwd")
        namespace = read_meta(connection, "namespace") or ""
    finally:
        connection.close()
    if cwd is None:
        raise NotFound(f"project {project.name}: its index does not name its folder")
    return cwd, namespace


def folder_bytes(project: ProjectDir) -> int:
    """Bytes of every file in the project folder (generations, WAL, kept records)."""
    return sum(path.stat().st_size for path in project.path.iterdir() if path.is_file())
