"""One project's index for writing: the single writer, guarded by a file lock.

Exactly one ``ProjectWriter`` per project may be open at a time on this machine:
it holds an exclusive ``flock`` on the project's ``writer.lock`` for as long as it
is open (embedded ``lookback index``, a worker, a rebuild). A second writer waits
for the lock (or fails after ``lock_timeout`` seconds), so two writers can never
interleave their transactions or race a rebuild's swap.

Writers take turns: one that waits says so with a shared ``flock`` on the lock's
``.wait`` file for as long as it waits. A *yielding* writer (the reader's freshness
engine, which would otherwise keep a live session's project locked for good) checks
``wanted()`` between batches and jobs and closes when someone waits, and never takes
the lock while someone waits, so ``lookback index`` and ``reindex`` get it within a
batch's time.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import apsw

from lookback.errors import Unavailable
from lookback.index.layout import ProjectDir, project_dir
from lookback.index.store import (
    EVENT_ERRORS,
    defer_checkpoint,
    open_reader,
    open_writer,
    translate,
)
from lookback.index.writer import SetAside, append_events
from lookback.ingest.events import Event
from lookback.ingest.reader import FileState


class WriterBusy(Unavailable, TimeoutError):
    """Another writer holds the project's lock."""

    code = "writer-busy"


class ProjectWriter:
    """The open, locked writer of one project's index."""

    def __init__(self, home: Path, cwd: str, *, namespace: str = "",
                 lock_timeout: float = 30.0, bulk: bool = False,
                 yields: bool = False) -> None:
        """``bulk``: a ``lookback index`` run that syncs everything at its end
        (``index.store.sync_all``): a new file is created and written without fsyncs
        (and closes checkpointed, so readers open it fast); an existing file closes
        without a checkpoint (no fsync; the next writer folds its WAL in).

        ``yields``: this writer gives way to any other (see the module notes): it
        raises WriterBusy at once while another waits, and the caller closes it when
        ``wanted()``."""
        self.bulk = bulk
        self.project: ProjectDir = project_dir(home, cwd, namespace)
        self.project.make()
        if yields and waiting(self.project.lock_path):
            raise WriterBusy(f"another writer waits for {self.project.lock_path}")
        self._lock = acquire_lock(self.project.lock_path, lock_timeout, announce=not yields)
        try:
            generation = self.project.current_generation()
            path = self.project.generation_path(generation or 1)
            try:
                self.connection = open_writer(path, cwd=cwd, namespace=namespace, bulk=bulk,
                                              project=self.project.name)
            except apsw.Error as error:
                raise translate(error, f"project {self.project.name}",
                            self.project.name) from error
            self.created = generation is None
            if self.created:
                self.project.set_current(1, durable=not bulk)
        except BaseException:
            os.close(self._lock)
            raise

    def file_state(self, path: str) -> FileState | None:
        try:
            return _file_state(self.connection, path)
        except apsw.Error as error:
            raise translate(error, f"project {self.project.name}",
                            self.project.name) from error

    def write(self, events: Iterable[Event], *, state: FileState | None = None,
              states: Iterable[FileState] = (),
              source_ids: Iterable[str | None] | None = None,
              extra: Callable[[apsw.Connection], None] | None = None,
              on_set_aside: SetAside | None = None) -> int:
        """Append and apply ``events``; record the file ``state`` (or several ``states``,
        when the events come from several files) in the same transaction.

        Driver errors come out as the index's own (``index.store.translate``: disk
        full, not writable, busy, corrupt), except ``EVENT_ERRORS``."""
        recorded = [*states, *([state] if state is not None else [])]

        def record(connection: apsw.Connection) -> None:
            now = time.time()
            connection.executemany(
                "INSERT INTO files(path, session_id, state, updated_at) VALUES (?,?,?,?) "
                "ON CONFLICT(path) DO UPDATE SET session_id = excluded.session_id,"
                " state = excluded.state, updated_at = excluded.updated_at",
                [(s.path, s.session_id, s.to_json(), now) for s in recorded],
            )
            if extra is not None:
                extra(connection)

        try:
            return append_events(self.connection, events, source_ids=source_ids, extra=record,
                                 on_set_aside=on_set_aside)
        except EVENT_ERRORS:
            raise  # an event the caller may set aside, not the index's fault
        except apsw.Error as error:
            raise translate(error, f"project {self.project.name}",
                            self.project.name) from error

    def wanted(self) -> bool:
        """True when another writer waits for this project's lock."""
        return waiting(self.project.lock_path)

    def close(self) -> None:
        try:
            if self.bulk and not self.created:
                defer_checkpoint(self.connection)
            self.connection.close()
        finally:
            os.close(self._lock)

    def __enter__(self) -> ProjectWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def stored_file_state(home: Path, cwd: str, path: str, *,
                      namespace: str = "") -> FileState | None:
    """What the project's index says was read of ``path``, read-only: no writer, no
    lock (the reader's freshness engine asks before it may write). None when the
    project has no index yet or it cannot be read now."""
    index = project_dir(home, cwd, namespace).index_path()
    if index is None:
        return None
    try:
        connection = open_reader(index)
    except Unavailable:
        return None
    try:
        return _file_state(connection, path)
    except apsw.Error:  # locked or damaged: not known
        return None
    finally:
        connection.close()


def _file_state(connection: apsw.Connection, path: str) -> FileState | None:
    row = connection.execute("SELECT state FROM files WHERE path = ?", (path,)).fetchone()
    return None if row is None or row[0] is None else FileState.from_json(row[0])


def acquire_lock(path: Path, timeout: float, *, announce: bool = True) -> int:
    """Take the exclusive ``flock`` on ``path``, waiting up to ``timeout`` seconds;
    while waiting, ``announce`` it (a shared lock on ``<path>.wait``: ``waiting``)."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + timeout
    announced: int | None = None
    try:
        while True:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return descriptor
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(descriptor)
                    raise WriterBusy(f"another writer holds {path}") from None
                if announce and announced is None:
                    announced = os.open(_wait_path(path), os.O_RDWR | os.O_CREAT, 0o644)
                    fcntl.flock(announced, fcntl.LOCK_SH)
                time.sleep(0.05)
    finally:
        if announced is not None:
            os.close(announced)  # got the lock, or gave up: no longer waiting


def waiting(path: Path) -> bool:
    """True when a writer waits for the lock ``path`` (holds ``<path>.wait`` shared)."""
    try:
        descriptor = os.open(_wait_path(path), os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(descriptor)  # closing releases the probe's lock too
    return False


def _wait_path(path: Path) -> Path:
    return Path(f"{path}.wait")
