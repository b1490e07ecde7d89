"""A bounded pool of read-only index connections, shared by every request of a reader.

Why a pool: a team host holds thousands of projects, and a connection per project
kept forever runs the process out of file descriptors (answers then went wrong).
Why several connections per project: WAL lets many readers read one file at once,
so the agents of one busy project need not take turns.

The bound is in open files, the resource that runs out. SQLite holds two files per
connection (the index and its WAL) plus one per index file open in the process (the
shared-memory file, shared by its connections), so ``max_open_files`` bounds
``2 × connections + files``. When the pool is full, the least recently used idle
connection is closed first; when every connection is busy, a request waits for one
(up to ``wait_seconds``). A project has at most ``per_project`` connections.

Connections are handed out for one short read transaction each, so WAL checkpoints
are never held back for long. A driver error raised while one is out leaves as the
project's own (``index.store.read_errors``: ``IndexCorrupt``, ``IndexBusy``, ...), so
no caller needs the driver. A connection to a replaced generation (after
``lookback reindex``) is closed instead of reused.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import apsw

from lookback.errors import out_of_files
from lookback.index.store import (
    IndexUnavailable,
    open_reader,
    read_errors,
    snapshot_changed,
)

DEFAULT_MAX_OPEN_FILES = 256
DEFAULT_PER_PROJECT = 4
DEFAULT_WAIT_SECONDS = 10.0

class PoolExhausted(IndexUnavailable):
    """Every connection stayed busy for longer than the pool's wait."""


@dataclass(eq=False)
class _Slot:
    project: str
    path: Path
    connection: apsw.Connection
    number: int = field(default_factory=itertools.count().__next__)


@dataclass
class PoolStats:
    connections: int
    busy: int
    files: int
    open_files: int
    opened: int
    closed: int


class ConnectionPool:
    """Read connections keyed by project, bounded in open files, LRU closed first."""

    def __init__(self, *, max_open_files: int = DEFAULT_MAX_OPEN_FILES,
                 per_project: int = DEFAULT_PER_PROJECT,
                 wait_seconds: float = DEFAULT_WAIT_SECONDS,
                 opener: Callable[[Path], apsw.Connection] = open_reader) -> None:
        self.max_open_files = max(3, int(max_open_files))
        self.per_project = max(1, int(per_project))
        self.wait_seconds = wait_seconds
        self._open = opener
        self._ready = threading.Condition()
        self._idle: OrderedDict[int, _Slot] = OrderedDict()  # least recently used first
        self._idle_of: dict[str, dict[int, _Slot]] = {}  # the same, by project
        self._counts: dict[str, int] = {}  # project -> connections open (idle or busy)
        self._files: dict[Path, int] = {}  # index file -> connections open on it
        self._latest: dict[str, Path] = {}  # project -> newest generation seen
        self._total = 0
        self._busy = 0
        self.opened = 0
        self.closed = 0

    # -- use ---------------------------------------------------------------------

    @contextmanager
    def connection(self, project: str, path: Path) -> Iterator[apsw.Connection]:
        """A connection to ``path`` (the project's live index) for the ``with`` block;
        a driver error in the block leaves it translated (``read_errors``)."""
        slot = self._acquire(project, path)
        try:
            with read_errors(project=project):
                yield slot.connection
        finally:
            self._release(slot)

    def close(self) -> None:
        """Close every idle connection (busy ones close when they come back)."""
        with self._ready:
            while self._idle:
                self._close_slot(self._unpark_oldest())

    def stats(self) -> PoolStats:
        with self._ready:
            return PoolStats(self._total, self._busy, len(self._files), self._open_files(),
                             self.opened, self.closed)

    def close_idle(self) -> int:
        """Close every idle connection (after the process ran out of files); how many."""
        with self._ready:
            count = len(self._idle)
            while self._idle:
                self._close_slot(self._unpark_oldest())
            self._ready.notify_all()
            return count

    # -- acquiring -----------------------------------------------------------------

    def _acquire(self, project: str, path: Path) -> _Slot:
        deadline = time.monotonic() + self.wait_seconds
        with self._ready:
            while True:
                slot = self._take_idle(project, path)
                if slot is not None:
                    self._busy += 1
                    self._latest[project] = path
                    return slot
                if self._counts.get(project, 0) < self.per_project and self._make_room(path):
                    self._reserve(project, path)
                    self._latest[project] = path
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PoolExhausted(f"all {self._total} read connections stayed busy")
                self._ready.wait(remaining)
        return self._open_reserved(project, path)

    def _open_reserved(self, project: str, path: Path) -> _Slot:
        """Open the reserved connection; after "too many open files", close the idle
        connections and try once more."""
        for attempt in (1, 2):
            try:
                connection = self._open(path)
            except (IndexUnavailable, apsw.Error, OSError) as error:
                if attempt == 1 and _out_of_files_or_cant_open(error) and self.close_idle():
                    continue
                self._unreserve(project, path)
                if isinstance(error, IndexUnavailable):
                    raise
                raise IndexUnavailable(f"cannot open index: {_reason(error)}") from None
            with self._ready:
                self.opened += 1
                self._busy += 1
            return _Slot(project, path, connection)
        raise AssertionError("unreachable")

    def _take_idle(self, project: str, path: Path) -> _Slot | None:
        """The project's most recently used idle connection to ``path``; idle
        connections to a replaced generation, or snapshots of a read-only folder's
        file that changed since, are closed on the way."""
        parked = self._idle_of.get(project)
        while parked:
            slot = self._unpark(next(reversed(parked)))
            if slot.path == path and not snapshot_changed(slot.connection):
                return slot
            self._close_slot(slot)
            parked = self._idle_of.get(project)
        return None

    def _park(self, slot: _Slot) -> None:
        self._idle[slot.number] = slot
        self._idle_of.setdefault(slot.project, {})[slot.number] = slot

    def _unpark(self, number: int) -> _Slot:
        slot = self._idle.pop(number)
        parked = self._idle_of[slot.project]
        del parked[number]
        if not parked:
            del self._idle_of[slot.project]
        return slot

    def _unpark_oldest(self) -> _Slot:
        return self._unpark(next(iter(self._idle)))

    def _make_room(self, path: Path) -> bool:
        """Close least recently used idle connections until one more fits."""
        cost = 2 if path in self._files else 3
        while self._open_files() + cost > self.max_open_files and self._idle:
            self._close_slot(self._unpark_oldest())
            cost = 2 if path in self._files else 3
        return self._open_files() + cost <= self.max_open_files or self._total == 0

    def _reserve(self, project: str, path: Path) -> None:
        self._counts[project] = self._counts.get(project, 0) + 1
        self._files[path] = self._files.get(path, 0) + 1
        self._total += 1

    def _unreserve(self, project: str, path: Path) -> None:
        with self._ready:
            self._forget(project, path)
            self._ready.notify_all()

    # -- releasing -----------------------------------------------------------------

    def _release(self, slot: _Slot) -> None:
        with self._ready:
            self._busy -= 1
            stale = self._latest.get(slot.project) != slot.path
            if stale or self._open_files() > self.max_open_files:
                self._close_slot(slot)
            else:
                self._park(slot)
            self._ready.notify()

    def _close_slot(self, slot: _Slot) -> None:
        try:
            slot.connection.close()
        except apsw.Error:
            pass  # closing a read-only connection loses nothing
        self.closed += 1
        self._forget(slot.project, slot.path)

    def _forget(self, project: str, path: Path) -> None:
        self._total -= 1
        left = self._counts.get(project, 0) - 1
        if left > 0:
            self._counts[project] = left
        else:
            self._counts.pop(project, None)
            self._latest.pop(project, None)  # bounded by the projects with connections
        on_file = self._files.get(path, 0) - 1
        if on_file > 0:
            self._files[path] = on_file
        else:
            self._files.pop(path, None)

    def _open_files(self) -> int:
        return 2 * self._total + len(self._files)


def _out_of_files_or_cant_open(error: BaseException) -> bool:
    """True for errors a lack of file descriptors may cause, worth one retry after closing
    idle connections: SQLite says only CantOpen, so every CantOpen counts."""
    cause = error.__cause__ if isinstance(error, IndexUnavailable) else error
    return out_of_files(cause) or isinstance(cause, apsw.CantOpenError)


def _reason(error: BaseException) -> str:
    if out_of_files(error):
        return "too many open files"
    return error.__class__.__name__
