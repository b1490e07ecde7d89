"""Which project holds each session file, so a file whose header ``cwd`` changed
moves to its new project instead of being in both.

One small SQLite file, ``$LOOKBACK_HOME/paths.sqlite`` (WAL), shared by every writer
of the data directory (``lookback index``, ``watch``, the reader's freshness
engine). New records are gathered and written in one transaction per ``flush``,
so a first run over thousands of files pays one commit, not one per file; a record
lost to a crash costs at most one move noticed late, never an entry.
"""

from __future__ import annotations

from pathlib import Path

import apsw

from lookback.index.layout import make_home
from lookback.index.project import ProjectWriter
from lookback.ingest.events import Event

PATHS_FILE = "paths.sqlite"
BUSY_TIMEOUT_MS = 5000


class PathRegistry:
    def __init__(self, home: Path, namespace: str = "") -> None:
        self.file = Path(home) / PATHS_FILE
        self.namespace = namespace
        self._connection: apsw.Connection | None = None
        self._pending: dict[str, str] = {}

    def _open(self) -> apsw.Connection:
        if self._connection is None:
            make_home(self.file.parent)
            connection = apsw.Connection(str(self.file))
            connection.set_busy_timeout(BUSY_TIMEOUT_MS)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute("CREATE TABLE IF NOT EXISTS paths (namespace TEXT NOT NULL,"
                               " path TEXT NOT NULL, cwd TEXT NOT NULL,"
                               " PRIMARY KEY (namespace, path)) WITHOUT ROWID")
            self._connection = connection
        return self._connection

    def get(self, path: str) -> str | None:
        """The cwd of the project that holds ``path``, or None when none is known (or the
        registry cannot be read: tracking moves never stops indexing)."""
        if path in self._pending:
            return self._pending[path]
        try:
            row = self._open().execute(
                "SELECT cwd FROM paths WHERE namespace = ? AND path = ?",
                (self.namespace, path)).fetchone()
        except apsw.Error:
            return None
        return None if row is None else row[0]

    def recorded(self) -> list[tuple[str, str]]:
        """Every (path, project cwd) recorded for this namespace: what ``lookback reindex
        --repair`` reads again when an index cannot be rebuilt from itself (none when
        the registry cannot be read)."""
        if not self.file.exists():
            return []
        try:
            return [(path, cwd) for path, cwd in self._open().execute(
                "SELECT path, cwd FROM paths WHERE namespace = ? ORDER BY path",
                (self.namespace,))]
        except apsw.Error:
            return []

    def set(self, path: str, cwd: str) -> None:
        """Record that ``cwd``'s project holds ``path`` (written at the next ``flush``)."""
        self._pending[path] = cwd

    def flush(self) -> None:
        """Write the gathered records; on a storage error they are dropped (moves of
        those files are then noticed late), indexing goes on."""
        if not self._pending:
            return
        rows = [(self.namespace, path, cwd) for path, cwd in self._pending.items()]
        self._pending.clear()
        try:
            connection = self._open()
            with connection:
                connection.executemany(
                    "INSERT INTO paths(namespace, path, cwd) VALUES (?, ?, ?) ON CONFLICT"
                    " (namespace, path) DO UPDATE SET cwd = excluded.cwd", rows)
        except apsw.Error:
            pass

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._connection is not None:
                self._connection.close()
                self._connection = None


def forget_moved(writer: ProjectWriter, path: str) -> bool:
    """Tell the project of ``writer`` to forget the session file ``path`` (its header
    now names another project): entries, session row and file state go. Returns
    False when the project did not hold it."""
    state = writer.file_state(path)
    if state is None:
        return False
    writer.write([Event("reset", state.session_id, state.cwd,
                        {"reason": "moved", "file": path})])
    return True
