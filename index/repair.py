"""Detect a damaged index and rebuild it: from its event log when that still reads,
else as an empty generation the caller fills again from the session files.

A zeroed header, a truncated file or a file replaced by something else make
SQLite raise ``NotADBError``/``CorruptError``; ``check`` turns that into one line
per project. ``repair_from_log`` is an ordinary rebuild (``index.rebuild``) checked
afterwards; ``fresh_generation`` moves the damaged files aside (kept, renamed
``*.damaged``) and points ``CURRENT`` at a new empty file, holding only the project's
forget events (``index.tombstones``: the files read into it again stay forgotten where
the user forgot them). Both run under the
project's rebuild lock, taken by the caller with ``index.rebuild.exclusive``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import apsw

from lookback.index import tombstones
from lookback.index.layout import ProjectDir
from lookback.index.project import acquire_lock
from lookback.index.rebuild import RebuildReport, rebuild_locked
from lookback.index.store import IndexUnavailable, file_problem, open_reader, open_writer
from lookback.index.writer import append_events

#: The suffix damaged files get when they are moved aside.
DAMAGED = ".damaged"


def check(project: ProjectDir, *, thorough: bool = False) -> str | None:
    """None when the live index opens and reads; else what is wrong, in one line.

    The quick check reads the tables ``lookback status`` shows; ``thorough`` also
    runs SQLite's ``quick_check`` over every page (slower: the whole file is read).
    """
    path = project.index_path()
    if path is None:
        return "no live index (CURRENT is missing or unreadable)"
    if not path.is_file():
        return f"the live index file {path.name} is missing"
    problem = file_problem(path)
    if problem is not None:
        return f"the index is damaged: {problem}"
    try:
        connection = open_reader(path)
    except IndexUnavailable as error:
        return _reason(error)
    try:
        connection.execute("SELECT count(*) FROM entries").fetchone()
        connection.execute("SELECT count(*), max(seq) FROM events").fetchone()
        connection.execute("SELECT count(*) FROM files").fetchone()
        if thorough:
            rows = [row[0] for row in connection.execute("PRAGMA quick_check(5)")]
            if rows != ["ok"]:
                return f"the index is damaged (quick_check: {rows[0][:120]})"
    except apsw.Error as error:
        return f"the index is damaged ({error.__class__.__name__})"
    finally:
        connection.close()
    return None


def _reason(error: IndexUnavailable) -> str:
    text = str(error)
    return text.split(": ", 1)[1] if text.startswith("/") and ": " in text else text


def repair_from_log(project: ProjectDir, *, lock_timeout: float = 60.0) -> RebuildReport:
    """Rebuild from the damaged file's event log; raises IndexUnavailable when the
    log (or the file state beside it) cannot be read whole, or the result is not sound."""
    try:
        report = rebuild_locked(project, lock_timeout=lock_timeout)
    except apsw.Error as error:
        raise IndexUnavailable(f"the event log cannot be read ({error.__class__.__name__})") \
            from None
    problem = check(project, thorough=True)
    if problem is not None:
        raise IndexUnavailable(f"the rebuilt index is not sound: {problem}")
    return report


def fresh_generation(project: ProjectDir, *, lock_timeout: float = 60.0) -> int:
    """Move the live (damaged) files aside and make CURRENT name a new, empty index.

    Returns the new generation. The caller then reads the project's session files
    into it; until then retrieval finds nothing there (it failed open before too).
    """
    lock = acquire_lock(project.lock_path, lock_timeout)
    try:
        old = project.current_generation() or 0
        new = max([old, *_generations(project)]) + 1
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for suffix in ("", "-wal", "-shm"):
            source = Path(f"{project.generation_path(old)}{suffix}")
            if old and source.exists():
                os.replace(source, f"{source}.{stamp}{DAMAGED}")
        connection = open_writer(project.generation_path(new))
        try:
            append_events(connection, tombstones.kept(project.path))
        finally:
            connection.close()
        project.set_current(new)
        return new
    finally:
        os.close(lock)


def _generations(project: ProjectDir) -> list[int]:
    found = []
    for path in project.path.glob("index-*.sqlite"):
        number = path.stem.split("-", 1)[1]
        if number.isdigit():
            found.append(int(number))
    return found
