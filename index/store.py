"""Opening index files: one writer connection per project, read-only readers.

WAL lets readers read the last committed state while the single writer appends.
Readers keep their transactions short so the WAL can be checkpointed.
"""

from __future__ import annotations

import os
import tempfile
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import apsw

from lookback.errors import Unavailable
from lookback.index.schema import DDL, SCHEMA_VERSION, TOKENIZER_VERSION

PAGE_SIZE = 8192
BUSY_TIMEOUT_MS = 5000


class IndexUnavailable(Unavailable, RuntimeError):
    """An index file that cannot be opened or used."""

    code = "index-unavailable"


class IncompatibleIndex(IndexUnavailable):
    """The file's schema is newer than this code, or not an index at all."""

    code = "incompatible-index"


class IndexCorrupt(IndexUnavailable):
    """The file is damaged, truncated or not a database; ``lookback reindex --repair``
    rebuilds it from its event log or the session files."""

    code = "index-corrupt"


class IndexFull(IndexUnavailable):
    """The disk is full: the index is unchanged since its last complete batch."""

    code = "disk-full"


class IndexNotWritable(IndexUnavailable):
    """The index file or its folder cannot be written (permissions, read-only disk)."""

    code = "not-writable"


class IndexReadOnly(IndexUnavailable):
    """A read-only folder whose index cannot be read as it is (see ``open_reader``)."""

    code = "read-only"


class IndexBusy(IndexUnavailable):
    """SQLite's busy timeout ran out: another connection held the write lock."""

    code = "index-busy"


#: What the driver's errors mean here; the rest become plain IndexUnavailable.
_CORRUPT = (apsw.NotADBError, apsw.CorruptError, apsw.FormatError)
_NOT_WRITABLE = (apsw.ReadOnlyError, apsw.CantOpenError, apsw.PermissionsError)
#: Driver errors about one event, not the index: callers set the event aside
#: (the workers' poison rule, the writer's savepoints), so they pass untranslated.
EVENT_ERRORS = (apsw.ConstraintError, apsw.MismatchError, apsw.TooBigError)


def translate(error: apsw.Error, where: str = "index",
              project: str | None = None) -> IndexUnavailable:
    """The Lookback error for a driver ``error`` raised on the index at ``where`` (of the
    project folder ``project``, when known: the repair hint names it).

    The index edge: the CLI and the reader map these by class (lookback/errors.py),
    so nothing above ``index`` needs the driver to tell a full disk from a damaged file.
    """
    name = error.__class__.__name__
    if isinstance(error, apsw.FullError):
        return IndexFull(f"{where}: the disk is full; the index is unchanged since its "
                         "last complete batch")
    if isinstance(error, _NOT_WRITABLE):
        return IndexNotWritable(f"{where}: cannot write the index ({name}): check permissions")
    if isinstance(error, apsw.BusyError):
        return IndexBusy(f"{where}: the index is busy (another writer); try again")
    if isinstance(error, _CORRUPT):
        command = "lookback reindex --repair" + (f" --project {project}" if project else "")
        return IndexCorrupt(f"{where}: the index is damaged ({name}); repair it with "
                            f"`{command}`")
    return IndexUnavailable(f"{where}: cannot use the index ({name})")


@contextmanager
def driver_errors(where: str = "index") -> Iterator[None]:
    """Raise driver errors as the hierarchy's (``translate``); also a decorator.

    What opens, writes, rebuilds or embeds an index runs inside this. ``EVENT_ERRORS``
    pass unchanged for the callers that set one event aside.
    """
    try:
        yield
    except EVENT_ERRORS:
        raise
    except apsw.Error as error:
        raise translate(error, where) from error


@contextmanager
def read_errors(where: str = "index", project: str | None = None) -> Iterator[None]:
    """Raise every driver error of a read as the hierarchy's (``translate``).

    The reader's pool hands each connection out inside this (query.search.pool), so
    nothing that reads an index sees the driver: a damaged, busy or vanished index
    is an ``IndexUnavailable`` with a reason (and, for damage, the repair command).
    """
    try:
        yield
    except apsw.Error as error:
        raise translate(error, where, project) from error


_MAGIC = b"SQLite format 3\0"


def file_problem(path: Path) -> str | None:
    """What is visibly wrong with an existing index file from its 100-byte header
    (not a database, or shorter than the header says: truncated); None otherwise.

    SQLite itself notices a truncated file only when it reads a missing page, and a
    writer's ``CREATE TABLE IF NOT EXISTS`` would even recreate a lost table.

    Pages the main file lacks may be in the WAL: a checkpoint that ran out of disk
    writes the new header (page 1) and stops before the file grows, and the WAL's
    committed frames still hold every page. Such a file is whole; the next writer
    finishes the checkpoint once there is room (``_wal_pages``).
    """
    try:
        with open(path, "rb") as handle:
            header = handle.read(100)
            size = os.fstat(handle.fileno()).st_size
    except FileNotFoundError:
        return None
    if size == 0:
        return None  # created, not written yet
    if len(header) < 100 or not header.startswith(_MAGIC):
        return "not an index file (its header is not SQLite's)"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    valid = pages and header[92:96] == header[24:28]
    if not valid or pages * page_size <= size:
        return None
    in_wal, wal_pages = _wal_pages(Path(f"{path}-wal"), page_size)
    pages = wal_pages or pages  # the last commit in the WAL says how big the database is
    missing = [page for page in range(size // page_size + 1, pages + 1) if page not in in_wal]
    if missing:
        return f"truncated ({size:,} of {pages * page_size:,} bytes)"
    return None


_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER = 32
_FRAME_HEADER = 24


def _wal_pages(path: Path, page_size: int) -> tuple[set[int], int]:
    """(page numbers in the WAL's committed frames, database size in pages after its
    last commit; 0 without one), from the frame headers (format: sqlite.org/walformat).

    Frames count while their salts match the WAL header's (older ones are left over
    from before the WAL was restarted) and only up to the last commit frame. Their
    checksums are not verified: this looks for visible damage, SQLite does the rest.
    """
    committed: set[int] = set()
    last_size = 0
    try:
        with open(path, "rb") as handle:
            header = handle.read(_WAL_HEADER)
            if len(header) < _WAL_HEADER or int.from_bytes(header[:4], "big") not in _WAL_MAGIC \
                    or int.from_bytes(header[8:12], "big") != page_size:
                return committed, 0
            salts = header[16:24]
            wal_size = os.fstat(handle.fileno()).st_size
            pending: list[int] = []
            offset = _WAL_HEADER
            while offset + _FRAME_HEADER + page_size <= wal_size:  # whole frames only
                handle.seek(offset)
                frame = handle.read(_FRAME_HEADER)
                if frame[8:16] != salts:
                    break
                pending.append(int.from_bytes(frame[:4], "big"))
                after_commit = int.from_bytes(frame[4:8], "big")
                if after_commit:
                    committed.update(pending)
                    pending.clear()
                    last_size = after_commit
                offset += _FRAME_HEADER + page_size
    except FileNotFoundError:
        pass
    return committed, last_size


def _check_file(path: Path, project: str | None = None) -> None:
    problem = file_problem(path)
    if problem is not None:
        command = "lookback reindex --repair" + (f" --project {project}" if project else "")
        raise IndexCorrupt(f"{project and f'project {project}' or path}: the index is "
                           f"damaged: {problem}; repair it with `{command}`")


def open_writer(path: Path, *, cwd: str | None = None, namespace: str = "",
                bulk: bool = False, project: str | None = None) -> apsw.Connection:
    """Open (creating if needed) an index file for writing, schema in place.

    Raises IndexCorrupt for a file that is visibly damaged (``file_problem``;
    ``project``, the folder name, goes into the repair hint).

    ``bulk`` (a ``lookback index`` run, which calls ``sync_all`` at its end): a file
    this call creates is written without fsyncs (``synchronous=OFF``) — creating an
    index costs about four fsyncs, which dominate indexing many small projects; a
    process crash loses nothing (the OS has the pages), a power loss before the
    run's final sync may leave the new file damaged (``lookback reindex --repair``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    _check_file(path, project)
    creating = bulk and not path.exists()
    if creating:
        _write_empty_index(path)
    connection = apsw.Connection(str(path))
    connection.set_busy_timeout(BUSY_TIMEOUT_MS)
    connection.execute(f"PRAGMA page_size={PAGE_SIZE}")
    connection.execute("PRAGMA synchronous=OFF" if creating else "PRAGMA synchronous=NORMAL")
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA foreign_keys=OFF")
    _ensure_schema(connection, cwd, namespace)
    return connection


def open_reader(path: Path) -> apsw.Connection:
    """Open an index file read-only (raises IndexUnavailable when it cannot).

    No ``file_problem`` check here: while the writer checkpoints, the header may run
    ahead of the file's size for a moment, and a reader must not call that damage
    (the writer checks under its lock, where no checkpoint runs).

    A folder that cannot be written (a read-only mount) cannot take the WAL's
    shared-memory file, and SQLite refuses a plain open there. When no WAL holds
    pages (the last writer checkpointed), the file alone is the whole index: it is
    opened as an immutable snapshot (``immutable=1``), and ``snapshot_changed``
    tells the reader's pool when to open it again.
    """
    try:
        try:
            connection = _open_read_only(str(path))
        except apsw.CantOpenError:
            if not read_only_folder(path):
                raise
            if _wal_has_frames(Path(f"{path}-wal")):
                raise IndexReadOnly(
                    f"{path}: the folder is read-only and the index's WAL holds pages, "
                    "which SQLite reads only with a shared-memory file it cannot create "
                    "here: checkpoint the index where it is written, or copy its -shm "
                    "file too") from None
            stamp = _stamp(path)
            connection = _open_read_only(f"file:{quote(str(path))}?immutable=1",
                                         apsw.SQLITE_OPEN_URI)
            _SNAPSHOTS[connection] = (str(path), stamp)
        version = read_meta(connection, "schema_version")
    except _CORRUPT as error:
        raise translate(error, str(path)) from None
    except IndexReadOnly:
        raise
    except apsw.Error as error:
        # Chained: the reader's pool tells "out of file descriptors" from the cause.
        raise IndexUnavailable(f"cannot open index: {error.__class__.__name__}") from error
    if version is None or int(version) > SCHEMA_VERSION:
        raise IncompatibleIndex(f"index schema {version} is not readable by this version")
    return connection


def _open_read_only(name: str, flags: int = 0) -> apsw.Connection:
    connection = apsw.Connection(name, flags=apsw.SQLITE_OPEN_READONLY | flags)
    try:
        connection.set_busy_timeout(BUSY_TIMEOUT_MS)
        # Plans that never depend on bound values: otherwise FTS5's own lookup of a
        # term's segment page (``term <= ?`` on ``entries_fts_idx``) is compiled again
        # for every term of every query (SQLite built with STAT4; its cost is in
        # docs/benchmarks.md). Answers do not change: no plan here reads a bound value.
        connection.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
        connection.execute("PRAGMA query_only=1")
        connection.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the WAL
    except BaseException:
        connection.close()
        raise
    return connection


def read_only_folder(path: Path) -> bool:
    """True when the index's folder cannot be written (a read-only mount, or no
    permission): readers then read it as it is, writers cannot write it."""
    return not os.access(Path(path).parent, os.W_OK)


#: A database file's and its WAL's (inode, size, mtime in ns); None: the file is absent.
FileStamp = tuple[tuple[int, int, int] | None, ...]

#: Connections opened as immutable snapshots -> (path, the file's stamp then).
_SNAPSHOTS: weakref.WeakKeyDictionary[apsw.Connection, tuple[str, FileStamp]] = \
    weakref.WeakKeyDictionary()


def snapshot_changed(connection: apsw.Connection) -> bool:
    """True when ``connection`` is an immutable snapshot (see ``open_reader``) whose
    file changed since (a writer elsewhere): SQLite would not notice; reopen it."""
    found = _SNAPSHOTS.get(connection)
    return found is not None and _stamp(Path(found[0])) != found[1]


def _stamp(path: Path) -> FileStamp:
    stamps: list[tuple[int, int, int] | None] = []
    for name in (str(path), f"{path}-wal"):
        try:
            info = os.stat(name)
            stamps.append((info.st_ino, info.st_size, info.st_mtime_ns))
        except FileNotFoundError:
            stamps.append(None)
    return tuple(stamps)


def _wal_has_frames(path: Path) -> bool:
    try:
        return path.stat().st_size > _WAL_HEADER
    except FileNotFoundError:
        return False


#: An empty index (schema in place, WAL mode, no meta values), built once per process.
_EMPTY_INDEX: list[bytes] = []


def _write_empty_index(path: Path) -> None:
    """Create ``path`` as a copy of an empty index: running the schema's DDL for every
    new project was the largest cost left in indexing many small projects."""
    if not _EMPTY_INDEX:
        with tempfile.TemporaryDirectory() as folder:
            template = Path(folder) / "empty.sqlite"
            connection = apsw.Connection(str(template))
            connection.execute(f"PRAGMA page_size={PAGE_SIZE}")
            connection.execute("PRAGMA journal_mode=WAL")
            with connection:
                connection.execute(DDL)
            connection.close()  # checkpointed: every page is in the file
            _EMPTY_INDEX.append(template.read_bytes())
    partial = path.with_name(path.name + ".new")
    partial.write_bytes(_EMPTY_INDEX[0])
    os.replace(partial, path)  # a crash leaves no half-written index


def sync_all() -> None:
    """Flush every written file to disk: the end of a bulk run (see ``open_writer``)."""
    os.sync()


def defer_checkpoint(connection: apsw.Connection) -> None:
    """Close ``connection`` without checkpointing its WAL (and so without fsyncs): the
    next writer, or SQLite's auto-checkpoint, folds the WAL in later. Committed data
    stays in the WAL, consistent, with WAL + ``synchronous=NORMAL``'s guarantees."""
    connection.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)


def read_meta(connection: apsw.Connection, key: str) -> str | None:
    row = connection.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def one_row(cursor: apsw.Cursor) -> Any:
    """The row of a query that always returns one (an aggregate such as ``count(*)``, or
    a row the caller has just written); apsw types ``fetchone`` as maybe no row."""
    row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the query returned no row")
    return row


def one_int(cursor: apsw.Cursor) -> int:
    """The first column of ``one_row``, which the SQL makes an integer (``count(*)``)."""
    value: int = one_row(cursor)[0]
    return value


def all_rows(cursor: apsw.Cursor) -> list[Any]:
    """Every row of ``cursor``, typed as apsw types a row read by iterating a cursor: its
    columns are what the SQL makes them, which the caller names (``fetchall``'s rows are
    tuples of any SQLite value, one cast per column read)."""
    return list(cursor)


def write_meta(connection: apsw.Connection, key: str, value: object) -> None:
    connection.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, str(value)),
    )


class write_transaction:  # lower case: read as a `with` statement, like a function
    """``BEGIN IMMEDIATE`` … ``COMMIT`` (or ``ROLLBACK`` on error): take the write lock first.

    Every write to an index (events, projections, vectors) runs inside one, so a
    writer never upgrades a read transaction into a deadlock.
    """

    def __init__(self, connection: apsw.Connection) -> None:
        self.connection = connection

    def __enter__(self) -> apsw.Connection:
        self.connection.execute("BEGIN IMMEDIATE")
        return self.connection

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        if kind is None:
            self.connection.execute("COMMIT")
        elif self.connection.in_transaction:  # SQLITE_FULL may have rolled back already
            self.connection.execute("ROLLBACK")


#: Segments FTS5 merges at once (its ``usermerge``) in ``index.writer.merge_segments``:
#: with 2, the segments of an index grown by many small commits are a binary counter of
#: them, about log2(commits) at most; FTS5's default of 4 lets them pile up three a level
#: (docs/benchmarks.md, issue 19).
MERGE_SEGMENTS = 2


def set_merge_policy(connection: apsw.Connection) -> None:
    """Store ``MERGE_SEGMENTS`` as the FTS table's ``usermerge`` (kept in the file),
    written only when it differs, so opening a writer writes nothing otherwise."""
    row = connection.execute(
        "SELECT v FROM entries_fts_config WHERE k = 'usermerge'").fetchone()
    if row is None or row[0] != MERGE_SEGMENTS:
        connection.execute("INSERT INTO entries_fts(entries_fts, rank) VALUES ('usermerge', ?)",
                           (MERGE_SEGMENTS,))


def _ensure_schema(connection: apsw.Connection, cwd: str | None, namespace: str) -> None:
    with connection:
        connection.execute(DDL)
        set_merge_policy(connection)
        _add_missing_columns(connection)
        existing = read_meta(connection, "schema_version")
        if existing is not None and int(existing) > SCHEMA_VERSION:
            raise IncompatibleIndex(f"index schema {existing} is newer than this code")
        if existing is None:
            write_meta(connection, "schema_version", SCHEMA_VERSION)
            write_meta(connection, "tokenizer_version", TOKENIZER_VERSION)
            write_meta(connection, "created_at", time.time())
            write_meta(connection, "applied_seq", 0)
        if cwd is not None and read_meta(connection, "cwd") is None:
            write_meta(connection, "cwd", cwd)
            write_meta(connection, "namespace", namespace)


#: Columns a later schema added to a table, with their declarations: an older file gains
#: them on its next write (their NULL is right for every row it holds), so a reader's
#: query never meets a file without them; ``needs_rebuild`` still says it is older.
ADDED_COLUMNS = {"entries": {"kept_ids": "TEXT"}}


def _add_missing_columns(connection: apsw.Connection) -> None:
    for table, columns in ADDED_COLUMNS.items():
        present = {row[1] for row in connection.execute(f"PRAGMA table_info({table})")}
        for name, declaration in columns.items():
            if name not in present:
                connection.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")


def needs_rebuild(connection: apsw.Connection) -> bool:
    """True when the file was written by an older schema or tokenizer."""
    schema = int(read_meta(connection, "schema_version") or 0)
    tokenizer = int(read_meta(connection, "tokenizer_version") or 0)
    return schema < SCHEMA_VERSION or tokenizer < TOKENIZER_VERSION
