"""Read-only access to the project indexes, for a long-lived reader process.

``IndexReader`` keeps one read-only connection per project and reopens it when
``CURRENT`` points at a new generation (after ``lookback reindex``), so a server
never answers from a replaced file for longer than one request. It also caches,
per (file, session, leaf, epoch), the leaf's branch: a branch never changes once
its leaf exists, unless the session is reset (its ``epoch`` moves).

Connections are used for one short read transaction per call, so the WAL can be
checkpointed behind them. Thread safety: one lock per project connection.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import apsw
from lookback.index.layout import ProjectDir, find_project, project_dir
from lookback.index.store import IndexUnavailable, open_reader
from lookback.index.tree import PathEntry, branch
from lookback.ingest.pipeline import peek_header
from lookback.query.text.normalize import FoldedText

BRANCH_CACHE_SIZE = 64
HEADER_CACHE_SIZE = 1024


class NotIndexed(LookupError):
    """The project or session has no index (yet)."""


@dataclass(frozen=True)
class SessionView:
    """An open read transaction on one project index, about one session."""

    connection: apsw.Connection
    path: Path
    session_id: str


@dataclass(frozen=True)
class SessionRef:
    """Which project and session a request is about."""

    project: ProjectDir
    session_id: str
    file: str | None = None


class ProjectConnection:
    """One project's read-only connection and the lock serializing its use."""

    def __init__(self, project: ProjectDir) -> None:
        self.project = project
        self.lock = threading.Lock()
        self.path: Path | None = None
        self.connection: apsw.Connection | None = None

    def current(self) -> tuple[apsw.Connection, Path]:
        """The connection to the live generation (reopened after a swap)."""
        path = self.project.index_path()
        if path is None:
            raise NotIndexed("project not indexed")
        if self.connection is None or path != self.path:
            if self.connection is not None:
                self.connection.close()
                self.connection = None
            try:
                self.connection = open_reader(path)
            except IndexUnavailable:
                raise NotIndexed("project index cannot be opened") from None
            self.path = path
        return self.connection, path


class IndexReader:
    """Shared, read-only view of every project index under ``home``."""

    def __init__(self, home: Path, namespace: str = "") -> None:
        self.home = Path(home)
        self.namespace = namespace
        self._projects: dict[str, ProjectConnection] = {}
        self._lock = threading.Lock()
        self._branches: OrderedDict[tuple, list[PathEntry]] = OrderedDict()
        self._headers: OrderedDict[tuple, tuple[str, str]] = OrderedDict()
        # Memos of what is derived from immutable rows, each bounded for its item size:
        self.entries = EntryCache(50_000)  # per-row matches and classifications (small)
        self.evidence = EntryCache(4_096)  # built evidence items (up to ~12 KB each)
        self.scopes = EntryCache(64)  # allowed scopes of recent leaves (a rowid set each)
        self.vectors = EntryCache(8)  # semantic matrices (megabytes each)
        self.folded = FoldedCache()
        self._project_dirs: dict[str, ProjectDir] = {}

    # -- naming -----------------------------------------------------------------

    def resolve(self, *, session_file: str | None = None, project: str | None = None,
                session_id: str | None = None) -> SessionRef:
        """The project and session a request names (NotIndexed when unknown)."""
        if session_file:
            header_session, cwd = self._header(session_file)
            found = self._project_dirs.get(cwd)
            if found is None:  # hashing the cwd once per project, not per request
                found = self._project_dirs[cwd] = project_dir(self.home, cwd, self.namespace)
            return SessionRef(found, session_id or header_session, session_file)
        if project and session_id:
            try:
                return SessionRef(find_project(self.home, project, self.namespace), session_id)
            except LookupError:
                raise NotIndexed("project not indexed") from None
        raise NotIndexed("no session named")

    def _header(self, session_file: str) -> tuple[str, str]:
        # Pi may rewrite a file in place, but never changes its session id or cwd.
        key = (session_file, os.stat(session_file).st_ino)
        with self._lock:
            if key in self._headers:
                self._headers.move_to_end(key)
                return self._headers[key]
        found = peek_header(Path(session_file))
        with self._lock:
            self._headers[key] = found
            while len(self._headers) > HEADER_CACHE_SIZE:
                self._headers.popitem(last=False)
        return found

    # -- connections ------------------------------------------------------------

    @contextmanager
    def session(self, *, session_file: str | None = None, project: str | None = None,
                session_id: str | None = None) -> Iterator[SessionView]:
        """The named session's index, locked and inside one short read transaction.

        Raises NotIndexed when the project or its index is missing (and OSError
        when a session file cannot be read).
        """
        ref = self.resolve(session_file=session_file, project=project, session_id=session_id)
        holder = self.project_connection(ref.project)
        with holder.lock:
            connection, path = holder.current()
            with connection:
                yield SessionView(connection, path, ref.session_id)

    def project_connection(self, project: ProjectDir) -> ProjectConnection:
        with self._lock:
            holder = self._projects.get(project.name)
            if holder is None:
                holder = self._projects[project.name] = ProjectConnection(project)
            return holder

    # -- tree -------------------------------------------------------------------

    def branch(self, connection: apsw.Connection, path: Path, session_id: str,
               leaf_id: str, epoch: int | None = None) -> list[PathEntry]:
        """The leaf's branch (root first), cached while the session is not reset.

        ``epoch`` is the session's reset counter, if the caller read it already.
        """
        if epoch is None:
            row = connection.execute(
                "SELECT epoch FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
            if row is None:
                raise NotIndexed("session not indexed")
            epoch = row[0]
        key = (str(path), session_id, leaf_id, epoch)
        with self._lock:
            cached = self._branches.get(key)
            if cached is not None:
                self._branches.move_to_end(key)
                return cached
        found = self._extend_cached(connection, path, session_id, leaf_id, epoch)
        with self._lock:
            self._branches[key] = found
            while len(self._branches) > BRANCH_CACHE_SIZE:
                self._branches.popitem(last=False)
        return found

    def _extend_cached(self, connection: apsw.Connection, path: Path, session_id: str,
                       leaf_id: str, epoch: int) -> list[PathEntry]:
        """Walk up from the leaf a few steps looking for a cached ancestor's branch.

        Pi appends a few entries per turn, so the previous turn's leaf is usually
        a close ancestor: extending its cached branch costs a few lookups instead
        of a walk to the root.
        """
        steps: list[PathEntry] = []
        current: str | None = leaf_id
        for _ in range(64):
            if current is None:
                break
            with self._lock:
                cached = self._branches.get((str(path), session_id, current, epoch))
            if cached is not None:
                return [*cached, *reversed(steps)]
            row = connection.execute(
                "SELECT rowid, entry_id, type, first_kept_id, parent_id, seq FROM entries "
                "WHERE session_id = ? AND entry_id = ?", (session_id, current)).fetchone()
            if row is None:
                break
            steps.append(PathEntry(row[0], row[1], row[2], row[3], row[5]))
            current = row[4]
        return branch(connection, session_id, leaf_id)

    def close(self) -> None:
        with self._lock:
            for holder in self._projects.values():
                if holder.connection is not None:
                    holder.connection.close()
            self._projects.clear()


class EntryCache:
    """Bounded memo of what the reader derives from immutable rows.

    A row's text never changes under its rowid in one index file (a replaced entry
    gets a new rowid), so its privacy classification and its verified matches for
    a given query can be kept while the file is live. Pi asks about the same user
    message before every model call of a tool loop; this makes those calls cheap.
    """

    def __init__(self, max_items: int = 50_000) -> None:
        self.max_items = max_items
        self._items: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple) -> object | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: tuple, value: object) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)


class FoldedCache:
    """Folded texts of rows, kept up to a total size: folding is a per-character loop
    for non-ASCII text, and the same rows come back as candidates query after query.
    """

    def __init__(self, max_chars: int = 32_000_000, max_text_chars: int = 262_144) -> None:
        self.max_chars = max_chars
        self.max_text_chars = max_text_chars
        self._items: OrderedDict[tuple[str, int], FoldedText] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, index_file: str, rowid: int, text: str) -> FoldedText:
        key = (index_file, rowid)
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
                return found
        found = FoldedText(text)
        if len(text) <= self.max_text_chars:
            with self._lock:
                if key not in self._items:
                    self._items[key] = found
                    self._chars += len(text)
                    while self._chars > self.max_chars:
                        _, dropped = self._items.popitem(last=False)
                        self._chars -= len(dropped.original)
        return found
