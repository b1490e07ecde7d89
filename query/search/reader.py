"""Read-only access to the project indexes, for a long-lived reader process.

``IndexReader`` borrows a read-only connection from its ``ConnectionPool`` for each
request (bounded in open files, several per busy project, see query.search.pool)
and follows ``CURRENT`` to a new generation (after ``lookback reindex``), so a
server never answers from a replaced file for longer than one request. It also
memoizes, per (file, session, leaf, epoch), the leaf's branch: a branch never
changes once its leaf exists, unless the session is reset (its ``epoch`` moves).

Every memo is bounded (``index.memo.Memo``), so memory and open files stay flat
however many projects one reader serves.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import apsw

from lookback.errors import NotFound, out_of_files
from lookback.index.layout import ProjectDir, find_project, project_dir
from lookback.index.memo import Memo
from lookback.index.store import IndexUnavailable, one_row, read_meta
from lookback.index.tree import PathEntry, branch
from lookback.ingest.pipeline import peek_header
from lookback.ingest.reader import DEFAULT_MAX_LINE_BYTES, HeaderPending
from lookback.query.search.pool import (
    DEFAULT_MAX_OPEN_FILES,
    DEFAULT_PER_PROJECT,
    ConnectionPool,
    PoolStats,
)

BRANCH_CACHE_SIZE = 64
HEADER_CACHE_SIZE = 1024
PROJECT_DIR_CACHE_SIZE = 4096

_T = TypeVar("_T")


#: Most bytes a session's first line may take when it is read to name the session: the
#: indexer's own line limit, so a session it can index is never refused here (a Claude
#: Code session may start with a long pasted prompt).
HEADER_MAX_BYTES = DEFAULT_MAX_LINE_BYTES


class ProjectExcluded(IndexUnavailable):
    """The project is in the settings' ``excluded_projects``: answers say ``disabled``."""

    code = "project-excluded"


class NotIndexed(NotFound, LookupError):
    """The project or session has no index (yet)."""

    code = "not-indexed"


@dataclass(frozen=True)
class SessionView:
    """An open read transaction on one project index, about one session."""

    connection: apsw.Connection
    path: Path
    session_id: str


@dataclass(frozen=True)
class SessionRef:
    """Which project and session a request is about (``file``: the session file's real
    path, when the request named one)."""

    project: ProjectDir
    session_id: str | None  # None: the project's latest session, found when it is opened
    file: str | None = None


def _latest_session(connection: apsw.Connection) -> str:
    """The session a request naming only the project is about: the most recently updated
    one that has entries (a session just started, its file holding only its header, has
    no branch yet and would hide the project's history), else the newest."""
    row = connection.execute("SELECT session_id FROM sessions ORDER BY leaf_id IS NULL,"
                             " updated_at DESC, rowid DESC LIMIT 1").fetchone()
    if row is None:
        raise NotIndexed("the project has no indexed session")
    session_id: str = row[0]
    return session_id


class IndexReader:
    """Shared, read-only view of every project index under ``home``."""

    def __init__(self, home: Path, namespace: str = "", *,
                 max_open_files: int = DEFAULT_MAX_OPEN_FILES,
                 connections_per_project: int = DEFAULT_PER_PROJECT,
                 excluded: Callable[[str], bool] | None = None) -> None:
        self.home = Path(home)
        self.namespace = namespace
        #: ``Settings.excluded``: the projects switched off, never answered from
        self.excluded = excluded
        self.pool = ConnectionPool(max_open_files=max_open_files,
                                   per_project=connections_per_project)
        self._branches: Memo[list[PathEntry]] = Memo(BRANCH_CACHE_SIZE)
        self._headers: Memo[tuple[str, str]] = Memo(HEADER_CACHE_SIZE)
        self._project_dirs: Memo[ProjectDir] = Memo(PROJECT_DIR_CACHE_SIZE)
        # Memos of what is derived from immutable rows, each bounded for its item size:
        self.entries = EntryCache(50_000)  # per-row privacy classifications (small)
        self.evidence = EntryCache(1_024)  # built evidence items (up to ~12 KB each)
        self.scopes = EntryCache(64)  # allowed scopes of recent leaves (a rowid set each)
        self.vectors = EntryCache(8)  # semantic matrices (megabytes each)

    # -- naming -----------------------------------------------------------------

    def resolve(self, *, session_file: str | None = None, project: str | None = None,
                session_id: str | None = None) -> SessionRef:
        """The project and session a request names (NotIndexed when unknown); a project
        alone names its most recently updated session (``session`` finds which)."""
        if session_file:
            # Resolved once: the caller authorizes this ref and hands it on (``file`` is
            # the real path), so a symlink repointed later cannot change what is read.
            real = os.path.realpath(session_file)
            header_session, cwd = self._header(real)
            found = self._project_dirs.get(cwd)
            if found is None:  # hashing the cwd once per project, not per request
                found = project_dir(self.home, cwd, self.namespace)
                self._project_dirs.put(cwd, found)
            return SessionRef(found, session_id or header_session, real)
        if project:
            try:
                return SessionRef(find_project(self.home, project, self.namespace), session_id)
            except LookupError:
                raise NotIndexed("project not indexed") from None
        raise NotIndexed("no session named")

    def _header(self, session_file: str) -> tuple[str, str]:
        # Pi may rewrite a file in place, but never changes its session id or cwd.
        # (A FIFO or /dev/zero is refused by peek_header's open, as every session read.)
        key = (session_file, os.stat(session_file).st_ino)
        found = self._headers.get(key)
        if found is None:
            try:
                found = self._out_of_files_retry(
                    lambda: peek_header(Path(session_file), HEADER_MAX_BYTES))
            except HeaderPending:  # a brand-new session: nothing of it is indexed yet
                raise NotIndexed("session header not written yet") from None
            self._headers.put(key, found)
        return found

    def _out_of_files_retry(self, call: Callable[[], _T]) -> _T:
        """``call()``; when the process is out of file descriptors, close the idle
        connections and try once more, then report the index unavailable (never
        "not indexed": the project may well be indexed)."""
        for attempt in (1, 2):
            try:
                return call()
            except OSError as error:
                if not out_of_files(error):
                    raise
                if attempt == 2 or not self.pool.close_idle():
                    raise IndexUnavailable("too many open files") from error
        raise AssertionError("unreachable")

    # -- connections ------------------------------------------------------------

    @contextmanager
    def session(self, *, session_file: str | None = None, project: str | None = None,
                session_id: str | None = None) -> Iterator[SessionView]:
        """The named session's index, inside one short read transaction.

        Raises NotIndexed when the project or its index is missing, IndexUnavailable
        when it exists but cannot be opened or read now (too many open files, a
        corrupt or newer file: a driver error inside the block leaves translated, see
        ``query.search.pool``), and OSError when a session file cannot be read.
        """
        ref = self._out_of_files_retry(lambda: self.resolve(
            session_file=session_file, project=project, session_id=session_id))
        path = self._index_path(ref.project)
        with self.pool.connection(ref.project.name, path) as connection, connection:
            if self.excluded is not None and self.excluded(read_meta(connection, "cwd") or ""):
                raise ProjectExcluded(f"project {ref.project.name}: Lookback is switched off "
                                      "for it (excluded_projects)")
            yield SessionView(connection, path, ref.session_id or _latest_session(connection))

    def sessions_holding(self, *, project: str, entry_id: str) -> list[str]:
        """The ids of ``project``'s sessions that hold an entry ``entry_id`` (ids only:
        no text leaves here, so no gate is needed)."""
        with self.session(project=project) as view:
            return [row[0] for row in view.connection.execute(
                "SELECT DISTINCT session_id FROM entries WHERE entry_id = ?", (entry_id,))]

    def _index_path(self, project: ProjectDir) -> Path:
        path = self._out_of_files_retry(project.index_path)
        if path is None:
            raise NotIndexed("project not indexed")
        return path

    def watermark(self, project: ProjectDir) -> tuple[str, int, int] | None:
        """(live index file, applied event seq, embeddings seq): moves on every commit
        that can change an answer, and on every swap. None when there is no index."""
        try:
            path = self._index_path(project)
            with self.pool.connection(project.name, path) as connection:
                applied, embedded = one_row(connection.execute(
                    "SELECT (SELECT value FROM meta WHERE key = 'applied_seq'),"
                    " (SELECT value FROM meta WHERE key = 'embeddings_seq')"))
        except (LookupError, IndexUnavailable, OSError):
            return None
        return str(path), int(applied or 0), int(embedded or 0)

    def pool_stats(self) -> PoolStats:
        return self.pool.stats()

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
        cached = self._branches.get(key)
        if cached is not None:
            return cached
        found = self._extend_cached(connection, path, session_id, leaf_id, epoch)
        self._branches.put(key, found)
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
            cached = self._branches.get((str(path), session_id, current, epoch))
            if cached is not None:
                return [*cached, *reversed(steps)]
            row = connection.execute(
                "SELECT rowid, entry_id, type, first_kept_id, seq, kept_ids, parent_id "
                "FROM entries WHERE session_id = ? AND entry_id = ?",
                (session_id, current)).fetchone()
            if row is None:
                break
            steps.append(PathEntry.of_row(*row[:6]))
            current = row[6]
        return branch(connection, session_id, leaf_id)

    def close(self) -> None:
        self.pool.close()


class EntryCache(Memo[object]):
    """Bounded memo of what the reader derives from immutable rows.

    A row's text never changes under its rowid in one index file (a replaced entry
    gets a new rowid), so its privacy classification can be kept while the file is
    live (classifying a row never returned before costs about 0.4 ms per 4,500
    characters). Matches are not memoized: SQL verifies them with the search.
    """

    def __init__(self, max_items: int = 50_000) -> None:
        super().__init__(max_items)
