"""Keep live sessions fresh inside the reader process (embedded mode).

A Pi user starts one thing, ``lookback serve``; from then on every entry Pi appends
must be retrievable at the next model call. In embedded mode (no Redis) the reader
therefore indexes session files itself:

- **inline:** before a retrieve, search or source request (and on a nudge) the named
  session file's identity (inode, size, mtime) is compared with what this process
  last indexed. When it changed, the file is queued at the front and the request
  waits for it at most ``wait_ms`` (the freshness contract), then reads whatever is
  committed. Only the new complete lines are read (``ingest.reader`` remembers the
  file state); a rewrite (Pi migrating a v1/v2 file to v3 on open, or any shrink or
  changed prefix) is detected by that same file state and re-indexed whole.
- **tailer:** a background thread polls the configured session folders (hot files
  every ``poll_ms``, every file every ``rescan_seconds``) and queues changed files
  behind the inline ones, so a nudge Pi never sent (a print-mode run that ends with
  a compaction) is recovered without any request.

One indexing thread does all writing, through ``index.project.ProjectWriter`` and
its per-project ``flock``: a busy lock (``lookback index``, ``lookback reindex``
running) is not waited for beyond a short timeout; the file stays stale and is
retried by the next request or poll. The engine's writers *yield*: between batches
and jobs a writer another process waits for is closed (and not reopened while it
waits), so maintenance gets a live session's project within a batch's time; idle
writers are closed after a short time too. In service mode none of this runs: producers and
workers keep the indexes, the reader only reads.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Iterable, Set
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lookback.errors import ForeignProject
from lookback.index.layout import project_dir, project_key
from lookback.index.paths import PathRegistry, forget_moved
from lookback.index.project import ProjectWriter, WriterBusy
from lookback.index.store import open_reader
from lookback.ingest.pipeline import peek_header
from lookback.ingest.reader import (
    DEFAULT_MAX_LINE_BYTES,
    Batch,
    FileState,
    NotASession,
    checked_state,
    read_session,
)
from lookback.ingest.scan import PathProblem, configured_roots, session_files
from lookback.ingest.storable import escape_surrogates
from lookback.settings import Freshness

log = logging.getLogger("lookback.freshness")

#: A request indexes at most this many appended bytes itself; more goes to the thread.
INLINE_MAX_BYTES = 1 << 20

#: File identity: (inode, size, mtime in ns). Pi appends (size grows) or rewrites.
Stamp = tuple[int, int, int]


#: How the reader keeps sessions fresh: the ``freshness`` settings section (its fields
#: and defaults are declared in lookback/settings.py).
FreshnessConfig = Freshness

#: Project writers the freshness thread keeps open at once.
MAX_OPEN_WRITERS = 8


@dataclass
class Outcome:
    """What ``ensure`` found, for the answer's diagnostics (no paths, no text)."""

    state: str  # fresh | indexed | pending | rewrite-pending | busy | missing | refused | error
    ms: float = 0.0
    entries: int = 0

    def diagnostics(self) -> dict[str, Any]:
        found: dict[str, Any] = {"state": self.state, "ms": round(self.ms, 3)}
        if self.entries:
            found["entries"] = self.entries
        return found

    @property
    def warning(self) -> str | None:
        if self.state == "rewrite-pending":
            return "session file rewritten; re-indexing it is pending, no evidence until done"
        if self.state == "pending":
            return "index catching up with the session file; newest entries may be missing"
        if self.state == "busy":
            return "another writer holds the project index; newest entries may be missing"
        if self.state == "refused":
            return "the session file's header names another project now; nothing was indexed"
        return None


@dataclass
class _Job:
    path: str
    done: threading.Event = field(default_factory=threading.Event)
    state: str = "pending"
    entries: int = 0
    #: The projects the requests asking for this job were authorized for (empty: the
    #: tailer's own job): the job writes only into that one project.
    projects: set[str] = field(default_factory=set)


class FreshnessEngine:
    """Indexes named or changed session files on one background thread."""

    def __init__(self, home: Path, *, namespace: str = "",
                 config: FreshnessConfig | None = None,
                 roots: Iterable[Path] = (),
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.home = Path(home)
        self.namespace = namespace
        self.max_line_bytes = max_line_bytes
        self.set_aside = 0  # events the index could not store (counted, never raised)
        self.refused = 0  # jobs not run: the file names a project the asker was not granted
        self.paths = PathRegistry(self.home, namespace)  # which project holds each file
        self.config = config or FreshnessConfig()
        self.roots = [Path(root) for root in roots]
        self._known: dict[str, Stamp] = {}  # path -> stamp indexed last
        self._states: dict[str, FileState] = {}  # path -> file state after that
        self._hot: dict[str, float] = {}
        self._urgent: deque[_Job] = deque()
        self._background: deque[_Job] = deque()
        self._queued: dict[str, _Job] = {}
        self._writers: dict[str, ProjectWriter] = {}
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()  # one indexing job at a time, thread or request
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.jobs_run = 0

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> FreshnessEngine:
        """Start the indexing thread (requests then wait for it at most ``wait_ms``)."""
        if not self._threads:
            self._spawn(self._work, "lookback-fresh")
        return self

    def start_tailer(self) -> FreshnessEngine:
        """Also poll the session folders in the background (when configured)."""
        self.start()
        if self.config.tail and self.roots and len(self._threads) == 1:
            self._spawn(self._tail, "lookback-tail")
        return self

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def close(self) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()
        with self._write_lock:
            self._close_writers()
            self.paths.close()

    # -- requests ----------------------------------------------------------------------

    def ensure(self, session_file: str, wait_ms: float | None = None, *,
               project: str | None = None) -> Outcome:
        """Index ``session_file`` if it changed since this process last did, waiting at
        most ``wait_ms`` (default: the configured contract) for it.

        ``project``: the project (folder name) the request was authorized for; the file
        is then written only into it, and refused when its header names another."""
        started = time.perf_counter()
        path, stamp = _identity(session_file)
        if stamp is None:
            return Outcome("missing")
        if self._known.get(path) == stamp:
            return Outcome("fresh", _ms(started))
        if self._appended(path, stamp) and self._write_lock.acquire(blocking=False):
            # A few new lines and no job running: index them in this thread (no hand-off
            # to the indexing thread, whose wake-up costs milliseconds on a loaded machine).
            try:
                job = _Job(path, projects={project} if project else set())
                self._run(job)
                self._yield_writers()
            finally:
                self._write_lock.release()
            return Outcome(job.state, _ms(started), job.entries)
        job = self._schedule(path, urgent=True, project=project)
        wait = self.config.wait_ms if wait_ms is None else wait_ms
        if self._rewritten(path):  # once per old session Pi opens: worth waiting for
            wait = max(wait, self.config.rewrite_wait_ms)
        if not job.done.wait(max(0.0, wait - _ms(started)) / 1000):
            state = "rewrite-pending" if self._rewritten(path) else "pending"
            return Outcome(state, _ms(started))
        if job.state == "busy" and self._rewritten(path):
            return Outcome("rewrite-pending", _ms(started))
        return Outcome(job.state, _ms(started), job.entries)

    def nudge(self, session_file: str, *, project: str | None = None) -> str:
        """Queue ``session_file`` without waiting (``project`` as for ``ensure``);
        returns ``fresh``, ``queued`` or ``missing``."""
        path, stamp = _identity(session_file)
        if stamp is None:
            return "missing"
        if self._known.get(path) == stamp:
            return "fresh"
        self._schedule(path, urgent=True, project=project)
        return "queued"

    def _appended(self, path: str, stamp: Stamp) -> bool:
        """Only a little was appended since this process indexed the file last."""
        known = self._known.get(path)
        if known is None or known[0] != stamp[0] or path not in self._states:
            return False
        grown = stamp[1] - known[1]
        return 0 <= grown <= INLINE_MAX_BYTES and not self._rewritten(path)

    def _rewritten(self, path: str) -> bool:
        state = self._states.get(path) or self._stored_state(path)
        if state is None:
            return False
        try:
            checked = checked_state(path, state)
        except OSError:
            return False
        if checked is not None:
            self._states[path] = checked  # the read that follows needs no second check
        return checked is None

    def _stored_state(self, path: str) -> FileState | None:
        """What the index says was read of ``path`` — for a file this process has not
        indexed yet (the reader restarted, or its thread is still busy with others), so a
        rewrite is told from an append before the index answers with ids Pi no longer has.
        Read-only; remembered once found."""
        try:
            _, cwd = peek_header(Path(path), self.max_line_bytes)
            index = project_dir(self.home, cwd, self.namespace).index_path()
            if index is None:
                return None
            connection = open_reader(index)
            try:
                row = connection.execute("SELECT state FROM files WHERE path = ?",
                                         (escape_surrogates(path),)).fetchone()
            finally:
                connection.close()
        except Exception:  # no index, no header, a locked or damaged file: not known
            return None
        if row is None or row[0] is None:
            return None
        state = FileState.from_json(row[0])
        self._states.setdefault(path, state)
        return state

    # -- queue ------------------------------------------------------------------------

    def _schedule(self, path: str, *, urgent: bool, project: str | None = None) -> _Job:
        with self._cond:
            job = self._queued.get(path)
            if job is None:
                job = self._queued[path] = _Job(path)
                (self._urgent if urgent else self._background).append(job)
            if project:  # still queued: the job runs with every asker's project
                job.projects.add(project)
            elif urgent and job in self._background:
                self._background.remove(job)
                self._urgent.append(job)
            self._cond.notify()
        if not self._threads:  # not started (one-shot use): run it here
            self._run_queued()
        return job

    def _next(self, timeout: float) -> _Job | None:
        with self._cond:
            if not self._urgent and not self._background:
                self._cond.wait(timeout)
            queue = self._urgent or self._background
            if not queue:
                return None
            job = queue.popleft()
            del self._queued[job.path]
            return job

    def _run_queued(self) -> None:
        with self._write_lock:
            while (job := self._next(0)) is not None:
                self._run(job)
                self._yield_writers()
            self._close_writers()

    def _work(self) -> None:
        while not self._stop.is_set():
            job = self._next(self.config.idle_close_seconds)
            with self._write_lock:
                if job is None:
                    self._close_writers()  # idle: let `lookback index`/`reindex` have the lock
                    continue
                self._run(job)
                self._yield_writers()  # busy: still let them have their turn

    # -- indexing ---------------------------------------------------------------------

    def _run(self, job: _Job) -> None:
        path = job.path
        _, stamp = _identity(path)
        try:
            if stamp is None:
                job.state = "missing"
                return
            job.entries = self._index(path, job.projects)
            self._known[path] = stamp
            self._hot[path] = time.monotonic()
            job.state = "indexed"
        except WriterBusy:
            job.state = "busy"
        except ForeignProject:
            self.refused += 1
            log.warning('{"event": "freshness-refused", "refused": %d}', self.refused)
            job.state = "refused"
        except NotASession:
            self._known[path] = stamp  # not a Pi session: do not look again until it changes
            job.state = "error"
        except Exception as error:  # one bad file never stops the others
            log.warning('{"event": "freshness-error", "error": "%s"}', type(error).__name__)
            self._close_writers()  # a failed transaction: start clean
            job.state = "error"
        finally:
            self.jobs_run += 1
            job.done.set()

    def _index(self, path: str, projects: Set[str] = frozenset()) -> int:
        """Read the file's new lines into its project's index; returns entries read.

        With ``projects`` (what the askers were authorized for) the header read here —
        the one the write follows — must name that one project, and the file must not
        move out of another: ForeignProject otherwise, and nothing is written."""
        _, cwd = peek_header(Path(path), self.max_line_bytes)
        key = escape_surrogates(path)
        previous = self.paths.get(key)
        if projects and (projects != {project_key(cwd, self.namespace)} or (
                previous is not None and project_key(previous, self.namespace) not in projects)):
            raise ForeignProject("the header names a project the request was not granted")
        if previous is not None and previous != cwd:  # its header names another project now
            forget_moved(self._writer(previous), key)
        if previous != cwd:
            self.paths.set(key, cwd)
        writer = self._writer(cwd)
        state = writer.file_state(key)
        known = self._states.get(path)
        if state is not None and known is not None and replace(known, seen=state.seen) == state:
            state = known  # the same state, already checked against the file (_rewritten)
        if state is not None:  # known before reading, so a waiting request can tell a rewrite
            self._states[path] = state
        entries = 0
        for batch in read_session(path, state, max_line_bytes=self.max_line_bytes):
            writer.write(batch.events, state=batch.state, on_set_aside=self._count_set_aside)
            entries += _entries(batch)
            self._states[path] = batch.state
            if writer.wanted():  # another writer waits: its turn; the rest is read later
                self._close_writer(cwd)
                raise WriterBusy("another writer waits for this project")
        self.paths.flush()
        return entries

    def _count_set_aside(self, event: object, error: BaseException) -> None:
        self.set_aside += 1

    def _writer(self, cwd: str) -> ProjectWriter:
        writer = self._writers.pop(cwd, None)
        if writer is None:
            writer = ProjectWriter(self.home, cwd, namespace=self.namespace,
                                   lock_timeout=self.config.lock_timeout_seconds, yields=True)
        self._writers[cwd] = writer  # most recently used last
        # Bounded: a team host's thousands of projects must not each keep a writer
        # (its files and its lock) open; the least recently used one closes first.
        while len(self._writers) > MAX_OPEN_WRITERS:
            oldest = next(iter(self._writers))
            self._writers.pop(oldest).close()
        return writer

    def _close_writer(self, cwd: str) -> None:
        writer = self._writers.pop(cwd, None)
        if writer is not None:
            try:
                writer.close()
            except Exception:  # closing must not stop the thread
                pass

    def _yield_writers(self) -> None:
        """Close the writers another process waits for (``lookback index``, ``reindex``)."""
        for cwd, writer in list(self._writers.items()):
            if writer.wanted():
                self._close_writer(cwd)

    def _close_writers(self) -> None:
        while self._writers:
            _, writer = self._writers.popitem()
            try:
                writer.close()
            except Exception:  # closing must not stop the thread
                pass

    # -- tailing ----------------------------------------------------------------------

    def _tail(self) -> None:
        last_rescan = float("-inf")
        while not self._stop.wait(self.config.poll_ms / 1000):
            now = time.monotonic()
            if now - last_rescan >= self.config.rescan_seconds:
                last_rescan = now
                candidates = self._all_files()
            else:
                candidates = [p for p, at in list(self._hot.items())
                              if now - at < self.config.hot_seconds]
            for path in candidates:
                _, stamp = _identity(path)
                if stamp is not None and self._known.get(path) != stamp:
                    self._schedule(path, urgent=False)

    def _all_files(self) -> list[str]:
        found: list[str] = []
        for root in self.roots:
            if not root.exists():
                continue
            try:
                found.extend(str(p) for p in session_files([root]))
            except PathProblem:
                continue  # a folder vanished mid-walk: next rescan
        return found


def _identity(session_file: str) -> tuple[str, Stamp | None]:
    path = os.path.realpath(session_file)
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return path, None
    if not stat.S_ISREG(info.st_mode):  # a FIFO or /dev/zero would hang the indexer
        return path, None
    return path, (info.st_ino, info.st_size, info.st_mtime_ns)


def _entries(batch: Batch) -> int:
    return sum(1 for event in batch.events if event.kind == "entry")


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def default_roots(settings: Any) -> list[Path]:
    """The folders to tail: ``sessions_dirs`` when set, else Pi's sessions folder, Claude
    Code's projects folder and Codex's sessions folder (each when it exists and its
    ``read_by_default``)."""
    return configured_roots(settings.sessions_dirs,
                            claude_code=settings.claude_code.read_by_default,
                            claude_projects_dir=settings.claude_code.projects_dir,
                            codex=settings.codex.read_by_default,
                            codex_sessions_dir=settings.codex.sessions_dir)


def engine_for(settings: Any) -> FreshnessEngine | None:
    """The engine a reader process runs, or None (service mode, or turned off)."""
    if settings.service_mode or not settings.freshness.enabled:
        return None
    return FreshnessEngine(settings.home, namespace=settings.namespace,
                           config=settings.freshness, roots=default_roots(settings),
                           max_line_bytes=settings.max_line_bytes)


def refresh(engine: FreshnessEngine | None, body: Any, ref: Any = None) -> Outcome | None:
    """Bring the session file a request names up to date (within the contract).

    ``ref`` (a ``SessionRef``): the session file as the request was resolved and
    authorized — its real path is indexed, and only into its project."""
    if engine is None:
        return None
    if ref is not None and ref.file:
        return engine.ensure(ref.file, project=ref.project.name)
    session_file = body.get("session_file") if isinstance(body, dict) else None
    if not isinstance(session_file, str) or not session_file.startswith("/"):
        return None
    return engine.ensure(session_file)


def annotate(response: dict[str, Any], outcome: Outcome | None) -> dict[str, Any]:
    """Add the freshness outcome (and its warning) to a response's diagnostics."""
    if outcome is None or not isinstance(response, dict):
        return response
    diagnostics = response.setdefault("diagnostics", {})
    if isinstance(diagnostics, dict):
        diagnostics["freshness"] = outcome.diagnostics()
        if outcome.warning:
            diagnostics.setdefault("warnings", []).append(outcome.warning)
    return response


def rewrite_pending_answer(outcome: Outcome) -> dict[str, Any]:
    """The retrieve answer while a rewritten file is being re-indexed: no evidence, since
    every indexed id may be one the client no longer has."""
    return annotate({"status": "not-indexed", "query": {}, "evidence": [],
                     "retrieved_event_ids": [], "excluded": [],
                     "diagnostics": {"warnings": []}}, outcome)
