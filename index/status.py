"""What ``lookback status`` shows of one project's index."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import apsw
from lookback.index.layout import ProjectDir, project_dir
from lookback.index.repair import check
from lookback.index.schema import SCHEMA_VERSION, TOKENIZER_VERSION
from lookback.index.store import IndexUnavailable, open_reader, read_meta


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
        sessions, last = connection.execute(
            "SELECT count(*), max(updated_at) FROM sessions").fetchone()
        entries = connection.execute("SELECT count(*) FROM entries").fetchone()[0]
        by_type = dict(connection.execute(
            "SELECT type, count(*) FROM entries GROUP BY type ORDER BY type").fetchall())
        meta = dict(connection.execute("SELECT key, value FROM meta").fetchall())
    finally:
        connection.close()
    size = sum(os.path.getsize(f"{path}{suffix}") for suffix in ("", "-wal")
               if os.path.exists(f"{path}{suffix}"))
    return {
        "project": project.name,
        "cwd": meta.get("cwd"),
        "namespace": meta.get("namespace") or "",
        "generation": project.current_generation(),
        "sessions": sessions,
        "entries": entries,
        "entries_by_type": by_type,
        "events_applied": int(meta.get("applied_seq") or 0),
        "last_indexed_at": last,
        "index_bytes": size,
        "schema_version": int(meta.get("schema_version") or 0),
        "tokenizer_version": int(meta.get("tokenizer_version") or 0),
        "needs_reindex": (int(meta.get("schema_version") or 0) < SCHEMA_VERSION
                          or int(meta.get("tokenizer_version") or 0) < TOKENIZER_VERSION),
    }


__all__ = ["project_status", "read_meta"]
