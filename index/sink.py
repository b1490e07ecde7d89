"""The embedded sink: ingest writes straight into each project's index.

Used when no Redis is configured. Writers are opened per project on first use and
at most ``max_open`` stay open, so memory and file handles stay flat however many
projects and sessions a run touches.

Small batches (the new lines of many short sessions) are gathered per project and
committed together, up to ``flush_events`` events: one transaction per file would
cost more than the file's rows. Each file's state is committed with its events,
so an interrupted run still resumes exactly where its last commit stopped.

A project whose index cannot be written (damaged, unreadable, locked too long) is
set aside for the rest of the run: its files are skipped with one error line, its
gathered events dropped uncommitted (their files are read again next run), and
every other project goes on. Events that cannot be stored are set aside one by one
(``index.writer``) and counted in ``set_aside``.

The reader's freshness engine (``lookback.freshness``) writes through this sink too,
as a *yielding* one (``index.project``: writers take turns): it commits every batch
(``flush_events=1``), waits for a busy lock at most ``lock_timeout``, and after each
commit gives the project up when another writer waits for it. ``only_project``
(the project a request was authorized for) refuses a file whose header names
another project, or that would move out of one (ForeignProject), before writing.
``keep_held`` (``lookback watch`` when ``server.tokens`` is set) refuses every move: a
file stays in the project that holds it, whatever its header says later.
"""

from __future__ import annotations

import errno
from collections import OrderedDict
from pathlib import Path

import apsw

from lookback.errors import ForeignProject
from lookback.index.layout import MOVE_REFUSED, project_key, refuse_foreign
from lookback.index.paths import PathRegistry, forget_moved
from lookback.index.project import ProjectWriter, WriterBusy
from lookback.index.store import IndexUnavailable, sync_all
from lookback.ingest.events import Event
from lookback.ingest.pipeline import SinkUnavailable
from lookback.ingest.reader import Batch, FileState

#: Errors that make a project's index unusable for this run (others are bugs).
PROJECT_ERRORS = (IndexUnavailable, WriterBusy, apsw.Error, OSError)


class ProjectUnavailable(SinkUnavailable):
    """This run cannot write the project's index; its files are skipped. ``busy``:
    only because another writer holds (or waits for) its lock; ``out_of_files``: because
    the process had no descriptor left to open its files."""

    def __init__(self, message: str, *, busy: bool = False, out_of_files: bool = False) -> None:
        super().__init__(message)
        self.busy = busy
        self.out_of_files = out_of_files


class EmbeddedSink:
    def __init__(self, home: Path, *, namespace: str = "", max_open: int = 8,
                 flush_events: int = 2000, bulk: bool = False, lock_timeout: float = 30.0,
                 yields: bool = False, keep_held: bool = False) -> None:
        self.bulk = bulk  # writers skip fsyncs; close() syncs once (index.store.sync_all)
        self.home = Path(home)
        self.namespace = namespace
        self.max_open = max_open
        self.flush_events = flush_events
        self.lock_timeout = lock_timeout
        self.yields = yields
        #: set: the one project this sink may write (a request's grant), others refused
        self.only_project: str | None = None
        self.keep_held = keep_held  # set: a file never moves out of the project holding it
        self._writers: OrderedDict[str, ProjectWriter] = OrderedDict()
        self._pending: dict[str, tuple[list[Event], dict[str, FileState]]] = {}
        self.failures: dict[str, str] = {}  # cwd -> why its project was set aside
        self.set_aside = 0  # events that could not be stored
        self.moved = 0  # sessions moved to another project (their header's cwd changed)
        self.paths = PathRegistry(self.home, namespace)

    def writer(self, cwd: str) -> ProjectWriter:
        if cwd in self.failures:
            raise ProjectUnavailable(self.failures[cwd])
        writer = self._writers.pop(cwd, None)
        if writer is None:
            try:
                writer = ProjectWriter(self.home, cwd, namespace=self.namespace,
                                       bulk=self.bulk, lock_timeout=self.lock_timeout,
                                       yields=self.yields)
            except PROJECT_ERRORS as error:
                raise self._unavailable(cwd, error) from None
        self._writers[cwd] = writer
        while len(self._writers) > self.max_open:
            name, oldest = self._writers.popitem(last=False)
            try:
                self._flush(name, oldest)
            except ProjectUnavailable:
                pass  # noted in failures; this file's project is another one
            oldest.close()
        return writer

    def file_state(self, path: str, cwd: str) -> FileState | None:
        pending = self._pending.get(cwd)
        if pending is not None and path in pending[1]:
            return pending[1][path]
        writer = self.writer(cwd)
        try:
            return writer.file_state(path)
        except PROJECT_ERRORS as error:
            raise self._unavailable(cwd, error) from None

    def claim(self, path: str, cwd: str) -> None:
        """Make the project of ``cwd`` the only one holding ``path``: a session whose
        header now names another cwd is forgotten by its old project first."""
        refuse_foreign(self.only_project, project_key(cwd, self.namespace))
        previous = self.paths.get(path)
        if previous == cwd:
            return
        if previous is not None:  # moving it out of another project writes into that one
            refuse_foreign(self.only_project, project_key(previous, self.namespace))
            if self.keep_held:
                raise ForeignProject(MOVE_REFUSED)
        if previous is not None:
            self._forget(previous, path)
        self.paths.set(path, cwd)

    def _forget(self, cwd: str, path: str) -> None:
        self._flush_if_pending(cwd)
        writer = self.writer(cwd)
        try:
            self.moved += forget_moved(writer, path)
        except PROJECT_ERRORS as error:
            raise self._unavailable(cwd, error) from None

    def _flush_if_pending(self, cwd: str) -> None:
        if cwd in self._pending:
            self._flush(cwd, self.writer(cwd))

    def write(self, batch: Batch) -> None:
        cwd = batch.state.cwd
        refuse_foreign(self.only_project, project_key(cwd, self.namespace))
        if cwd in self.failures:
            raise ProjectUnavailable(self.failures[cwd])
        events, states = self._pending.setdefault(cwd, ([], {}))
        events.extend(batch.events)
        states[batch.state.path] = batch.state
        if len(events) >= self.flush_events:
            writer = self.writer(cwd)
            self._flush(cwd, writer)
            if self.yields and writer.wanted():  # its turn; the rest is read later
                raise self._unavailable(cwd, WriterBusy(
                    f"another writer waits for project {project_key(cwd, self.namespace)}"))

    def flush(self) -> None:
        """Commit everything gathered so far (projects that fail are set aside)."""
        for cwd in list(self._pending):
            try:
                self._flush(cwd, self.writer(cwd))
            except ProjectUnavailable:
                self._pending.pop(cwd, None)
        self.paths.flush()  # after the projects: a record never runs ahead of its rows

    def _flush(self, cwd: str, writer: ProjectWriter) -> None:
        pending = self._pending.pop(cwd, None)
        if pending is None:
            return
        try:
            writer.write(pending[0], states=pending[1].values(), on_set_aside=self._count)
        except PROJECT_ERRORS as error:
            raise self._unavailable(cwd, error) from None

    def _count(self, event: Event, error: BaseException) -> None:
        self.set_aside += 1

    def _unavailable(self, cwd: str, error: BaseException) -> ProjectUnavailable:
        """Set the project aside (its writer closed) and say why."""
        message = self._fail(cwd, error)
        self._close_writer(cwd)
        return ProjectUnavailable(message, busy=isinstance(error, WriterBusy),
                                  out_of_files=isinstance(error, OSError)
                                  and error.errno in (errno.EMFILE, errno.ENFILE))

    def _fail(self, cwd: str, error: BaseException) -> str:
        """Set the project aside for this run; returns the one line that says why."""
        if isinstance(error, IndexUnavailable | WriterBusy):
            reason = str(error)
        elif isinstance(error, OSError) and error.strerror:  # the file and the system's words
            reason = f"{error.filename}: {error.strerror}" if error.filename else error.strerror
        else:
            reason = f"{error.__class__.__name__}: {error}"
        name = project_key(cwd, self.namespace)
        message = reason if name in reason else f"project {name}: {reason}"
        self.failures[cwd] = message
        self._pending.pop(cwd, None)
        return message

    def _close_writer(self, cwd: str) -> None:
        writer = self._writers.pop(cwd, None)
        if writer is not None:
            try:
                writer.close()
            except apsw.Error:
                pass

    def release_wanted(self) -> None:
        """Commit and close the writers another process waits for (a yielding sink,
        between its jobs)."""
        for cwd, writer in list(self._writers.items()):
            if writer.wanted():
                try:
                    self._flush(cwd, writer)
                except ProjectUnavailable:
                    pass  # noted in failures
                self._close_writer(cwd)

    def idle(self) -> None:
        """Between a watcher's rounds: commit, release every writer lock, and forget the
        failures, so the next round tries those projects again (say, after a repair)."""
        self.close()
        self.failures.clear()

    def close(self) -> None:
        """Commit and close every writer (``failures`` keeps what went wrong)."""
        try:
            self.flush()
        finally:
            self.paths.close()
            while self._writers:
                cwd, _ = next(iter(self._writers.items()))
                self._close_writer(cwd)
            if self.bulk:
                sync_all()  # the run is durable when it returns

    def __enter__(self) -> EmbeddedSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
