"""What ``lookback status`` shows of one project's index."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import apsw

from lookback.index.layout import ProjectDir, project_dir
from lookback.index.repair import check
from lookback.index.schema import SCHEMA_VERSION, TOKENIZER_VERSION
from lookback.index.store import (
    IndexReadOnly,
    IndexUnavailable,
    all_rows,
    one_row,
    open_reader,
    read_meta,
    read_only_folder,
)
from lookback.index.tokens import estimate_tokens
from lookback.ingest.entries import MAX_TEXT_CHARS


def applied_events(home: Path, cwd: str, namespace: str = "") -> int:
    """How many events the project's live index has applied (0 when it has none yet)."""
    path = project_dir(home, cwd, namespace).index_path()
    if path is None:
        return 0
    connection = open_reader(path)
    try:
        return int(read_meta(connection, "applied_seq") or 0)
    finally:
        connection.close()


def project_status(project: ProjectDir) -> dict[str, Any]:
    """What the project's index holds; a damaged or unreadable index is reported as
    ``state: damaged`` with the problem and the command that repairs it, never raised."""
    try:
        return _status(project)
    except IndexReadOnly as error:
        return {"project": project.name, "state": "read-only", "problem": str(error),
                "generation": project.current_generation()}
    except (IndexUnavailable, apsw.Error, OSError) as error:
        problem = check(project) or f"the index cannot be read ({error.__class__.__name__})"
        return {"project": project.name, "state": "damaged", "problem": problem,
                "generation": project.current_generation(),
                "repair": f"lookback reindex --repair --project {project.name}"}


def _status(project: ProjectDir) -> dict[str, Any]:
    path = project.index_path()
    if path is None:
        return {"project": project.name, "state": "missing"}
    connection = open_reader(path)
    try:
        sessions, last = one_row(connection.execute(
            "SELECT count(*), max(updated_at) FROM sessions"))
        entries = one_row(connection.execute("SELECT count(*) FROM entries"))[0]
        by_type: dict[str, int] = dict(all_rows(connection.execute(
            "SELECT type, count(*) FROM entries GROUP BY type ORDER BY type")))
        meta: dict[str, str] = dict(all_rows(connection.execute("SELECT key, value FROM meta")))
        # ``tokens`` first: length() (which reads the text) runs only on the longest
        cut = one_row(connection.execute(
            "SELECT count(*) FROM entries WHERE tokens >= ? AND length(text) >= ?",
            (estimate_tokens("x" * MAX_TEXT_CHARS), MAX_TEXT_CHARS)))[0]
        files: list[str] = [row[0] for row in connection.execute(
            "SELECT file FROM sessions WHERE file IS NOT NULL")]
    finally:
        connection.close()
    size = sum(os.path.getsize(f"{path}{suffix}") for suffix in ("", "-wal")
               if os.path.exists(f"{path}{suffix}"))
    found: dict[str, Any] = {"state": "read-only"} if read_only_folder(path) else {}
    return found | {
        "project": project.name,
        "cwd": meta.get("cwd"),
        "namespace": meta.get("namespace") or "",
        "generation": project.current_generation(),
        "sessions": sessions,
        "entries": entries,
        "entries_by_type": by_type,
        "entries_cut": cut,  # text at the MAX_TEXT_CHARS limit: cut there when read
        # sessions whose file is gone (an agent's cleanup): the index keeps what it read
        "sessions_without_source": sum(1 for file in files if not os.path.exists(file)),
        "events_applied": int(meta.get("applied_seq") or 0),
        "last_indexed_at": last,
        "index_bytes": size,
        "schema_version": int(meta.get("schema_version") or 0),
        "tokenizer_version": int(meta.get("tokenizer_version") or 0),
        "needs_reindex": (int(meta.get("schema_version") or 0) < SCHEMA_VERSION
                          or int(meta.get("tokenizer_version") or 0) < TOKENIZER_VERSION),
    }


def recent_sessions(project: ProjectDir, limit: int = 5, *,
                    now: float | None = None) -> list[dict[str, Any]]:
    """The project's ``limit`` most recently indexed sessions and how far the index lags
    each one's file: ``behind_bytes`` the file holds past what was read, and
    ``lag_seconds``, how long ago the file was last written when it is behind (0 when
    it is not: nothing waits). Raises like ``open_reader`` when the index cannot be read.
    """
    path = project.index_path()
    if path is None:
        return []
    now = time.time() if now is None else now
    connection = open_reader(path)
    try:
        # The latest sessions first, then each one's file: the files table is scanned
        # ``limit`` times, not once per session of the project.
        rows = all_rows(connection.execute(
            "WITH latest AS (SELECT session_id, entry_count, updated_at FROM sessions"
            "   ORDER BY updated_at DESC LIMIT ?)"
            " SELECT l.session_id, l.entry_count, l.updated_at, f.path, f.state"
            " FROM latest AS l LEFT JOIN files AS f ON f.rowid = ("
            "   SELECT rowid FROM files WHERE session_id = l.session_id"
            "   ORDER BY updated_at DESC LIMIT 1)"
            " ORDER BY l.updated_at DESC", (limit,)))
    finally:
        connection.close()
    return [_lag(session_id, entries, indexed_at, file, state, now)
            for session_id, entries, indexed_at, file, state in rows]


def _lag(session_id: str, entries: int, indexed_at: float | None, file: str | None,
         state: str | None, now: float) -> dict[str, Any]:
    found: dict[str, Any] = {"session_id": session_id, "entries": entries, "file": file,
                             "indexed_at": indexed_at, "behind_bytes": 0, "lag_seconds": 0.0}
    if not file:
        return found
    try:
        info = os.stat(file)
    except OSError:
        found["file_missing"] = True
        return found
    try:
        read = int(json.loads(state or "{}").get("offset") or 0)
    except (ValueError, AttributeError, TypeError):
        read = 0
    if info.st_size > read:
        found["behind_bytes"] = info.st_size - read
        found["lag_seconds"] = max(0.0, now - info.st_mtime)
    return found


__all__ = ["project_status", "read_meta", "recent_sessions"]
