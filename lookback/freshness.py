"""Keep live sessions fresh inside the reader process (embedded mode).

A Pi user starts one thing, ``lookback serve``; from then on every entry Pi appends
must be retrievable at the next model call. In embedded mode (no Redis) the reader
therefore indexes session files itself, with the write path ``lookback index`` and
``lookback watch`` use: ``ingest.pipeline`` reads the new complete lines into an
``index.sink.EmbeddedSink`` (its writers bounded, a moved header handled there), and
an ``ingest.watch.Watcher`` finds changed files. What this module adds:

- **the urgent queue:** before a retrieve, search or source request (and on a nudge)
  the named session file's stamp (inode, size, mtime) is compared with the one this
  process last indexed. When it changed, the file is queued at the front and the
  request waits for it at most ``wait_ms`` (``ensure``: the freshness contract), then
  reads whatever is committed; a small append is indexed by the request itself.
- **rewrite detection:** a file that no longer starts with what was read of it (Pi
  migrating a v1/v2 file to v3 on open, any shrink or changed prefix) is told from an
  append before the index answers, even for a file this process never indexed (the
  index's stored state); while it is not re-indexed the answer has no evidence
  (``rewrite-pending``). The checked state is handed to the read, so the whole-prefix
  check runs once per append.
- **the tailer:** a background thread asks the watcher for changed files (``watch``
  settings: hot files every ``poll_ms``, every file every ``rescan_seconds``) and
  queues them behind the urgent ones, so a nudge Pi never sent is recovered.
- **rebuilds after an upgrade:** once at start, an index written by an older schema or
  tokenizer is rebuilt from its event log in the background (``index.rebuild``, the
  same swap ``lookback reindex`` and service mode's workers use).

One thread at a time writes (the indexing thread, or a request indexing its own
append). A job carries the project its requests were authorized for and writes only
there (the sink's ``only_project``), checked against the header as it is read when
written. In a reader with tokens (``bound``) the tailer's jobs are bound too: a file a
request was authorized for, or that the index already holds in a project, is written
only into that project, so a token that rewrites its own file in place to name
another project cannot have the tailer write it there. A refused file is counted
(``refused``, ``/v1/health``), nothing of it is written, what was indexed of it before
stays, and it is left alone until it changes again. The sink *yields* (``index.project``: writers
take turns): a busy lock is waited for at most ``lock_timeout_seconds``, a writer
another process waits for is given up after a batch and between jobs, and idle
writers are closed after ``idle_close_seconds``; the file stays stale and is retried
by the next request or poll. In service mode none of this runs: producers and
workers keep the indexes, the reader only reads (``lookback.application.keeping``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lookback.budget import MAX_WRITERS
from lookback.errors import ForeignProject, out_of_files
from lookback.index.layout import project_key
from lookback.index.memo import Memo
from lookback.index.project import stored_file_state
from lookback.index.rebuild import RebuildBusy, rebuild, stale_projects
from lookback.index.sink import EmbeddedSink, ProjectUnavailable
from lookback.ingest.pipeline import Excluded, IngestReport, ingest_file, peek_header
from lookback.ingest.reader import (
    DEFAULT_MAX_LINE_BYTES,
    Batch,
    FileState,
    NotASession,
    checked_state,
)
from lookback.ingest.scan import PathProblem, configured_roots
from lookback.ingest.storable import escape_surrogates
from lookback.ingest.watch import Stamp, Watcher, file_stamp
from lookback.query.contract.answers import Diagnostics, FreshnessOutcome, RetrieveAnswer
from lookback.query.contract.request import SessionNames
from lookback.query.search.reader import SessionRef
from lookback.settings import Freshness, Watch

log = logging.getLogger("lookback.freshness")

#: A request indexes at most this many appended bytes itself; more goes to the thread.
INLINE_MAX_BYTES = 1 << 20

#: Project writers the freshness thread keeps open at once (fewer under a low open-files
#: limit: ``lookback.budget``).
MAX_OPEN_WRITERS = MAX_WRITERS

#: Files whose authorized project (or refused stamp) a bound engine remembers at most.
MAX_REMEMBERED_FILES = 4096


@dataclass
class Outcome:
    """What ``ensure`` found, for the answer's diagnostics (no paths, no text)."""

    state: str  # fresh | indexed | pending | rewrite-pending | busy | missing | refused | error
    ms: float = 0.0
    entries: int = 0

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
        if self.state == "error":
            return "the session file could not be indexed now; newest entries may be missing"
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
    """Indexes named or changed session files on one background thread.

    It is an ``ingest.pipeline.Sink`` itself, over its ``EmbeddedSink``: what it adds
    to the sink is the rewrite check's state, handed to the read that follows."""

    def __init__(self, home: Path, *, namespace: str = "",
                 config: Freshness | None = None, watch: Watch | None = None,
                 roots: Iterable[Path] = (),
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, bound: bool = False,
                 excluded: Excluded | None = None,
                 max_writers: int = MAX_OPEN_WRITERS) -> None:
        self.home = Path(home)
        self.excluded = excluded  # projects switched off: never indexed
        #: a reader with tokens: every job writes only into the project its file is bound
        #: to (the one a request was authorized for, else the one holding it)
        self.bound = bound
        self._granted: Memo[str] = Memo(MAX_REMEMBERED_FILES)  # path -> authorized project
        self._refused: Memo[Stamp] = Memo(MAX_REMEMBERED_FILES)  # path -> stamp refused
        self.namespace = namespace
        self.max_line_bytes = max_line_bytes
        self.config = config or Freshness()
        self.refused = 0  # jobs not run: the file names a project the asker was not granted
        self.failed = 0  # jobs that ended in an error (retried when asked again)
        self.out_of_files = 0  # ... of them for lack of open files
        self.sink = EmbeddedSink(self.home, namespace=namespace, max_open=max_writers,
                                 flush_events=1, yields=True,
                                 lock_timeout=self.config.lock_timeout_seconds)
        polling = watch or Watch()
        self.watcher = Watcher(roots, self, poll_seconds=polling.poll_ms / 1000,
                               rescan_seconds=polling.rescan_seconds,
                               hot_seconds=polling.hot_seconds,
                               max_line_bytes=max_line_bytes)
        #: sink key -> the state checked or read last; while a job reads a file it keeps
        #: the state from before, so a request tells a rewrite being re-indexed (which
        #: no longer starts with it) from an append
        self._states: dict[str, FileState] = {}
        self._read_to: FileState | None = None  # the running job's last batch
        self._urgent: deque[_Job] = deque()
        self._background: deque[_Job] = deque()
        self._queued: dict[str, _Job] = {}
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()  # one indexing job at a time, thread or request
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.jobs_run = 0
        self.rebuilt: int | None = None  # stale indexes rebuilt since start (None: not done)

    def stats(self) -> dict[str, Any]:
        """Counts for ``/v1/health``, and a warning when freshness cannot keep up."""
        with self._cond:
            pending = len(self._queued)
        report: dict[str, Any] = {"jobs": self.jobs_run, "refused": self.refused,
                                  "pending": pending, "failed": self.failed,
                                  "out_of_files": self.out_of_files}
        if self.out_of_files:
            report["warning"] = (f"freshness cannot keep up: {self.out_of_files} indexing "
                                 "jobs failed for lack of open files; raise the open-files "
                                 "limit (ulimit -n) or lower reader.max_open_files")
        return report

    @property
    def set_aside(self) -> int:
        """Events the index could not store (counted, never raised)."""
        return self.sink.set_aside

    # -- life cycle -----------------------------------------------------------------

    def start(self) -> FreshnessEngine:
        """Start the indexing thread (requests then wait for it at most ``wait_ms``)."""
        if not self._threads:
            self._spawn(self._work, "lookback-fresh")
        return self

    def start_tailer(self) -> FreshnessEngine:
        """Also poll the session folders in the background (when configured), and
        rebuild the indexes an older version wrote (once, in the background)."""
        self.start()
        if len(self._threads) == 1:
            self._spawn(self._rebuild_stale, "lookback-reindex")
            if self.config.tail and self.watcher.roots:
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
            self._release()

    def __enter__(self) -> FreshnessEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ----------------------------------------------------------------------

    def ensure(self, session_file: str, wait_ms: float | None = None, *,
               project: str | None = None) -> Outcome:
        """Index ``session_file`` if it changed since this process last did, waiting at
        most ``wait_ms`` (default: the configured contract) for it.

        ``project``: the project (folder name) the request was authorized for; the file
        is then written only into it, and refused when its header names another."""
        started = time.perf_counter()
        path = os.path.realpath(session_file)
        stamp = file_stamp(path)
        if stamp is None:
            return Outcome("missing")
        if self.watcher.seen(Path(path)) == stamp:
            return Outcome(self._settled(path, stamp), _ms(started))
        if self._appended(path, stamp) and self._write_lock.acquire(blocking=False):
            # A few new lines and no job running: index them in this thread (no hand-off
            # to the indexing thread, whose wake-up costs milliseconds on a loaded machine).
            try:
                job = _Job(path, projects={project} if project else set())
                self._grant(path, project)
                self._run(job)
                self.sink.release_wanted()
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
        returns ``fresh``, ``queued``, ``missing``, or ``refused`` (this content named a project
        its asker was not granted)."""
        path = os.path.realpath(session_file)
        stamp = file_stamp(path)
        if stamp is None:
            return "missing"
        if self.watcher.seen(Path(path)) == stamp:
            return self._settled(path, stamp)
        self._schedule(path, urgent=True, project=project)
        return "queued"

    def _settled(self, path: str, stamp: Stamp) -> str:
        """``fresh``, or ``refused`` when this very content was refused."""
        return "refused" if self._refused.get(path) == stamp else "fresh"

    def _grant(self, path: str, project: str | None) -> None:
        """Remember the project a request was authorized to write ``path`` into: a bound
        engine's tailer then writes it nowhere else."""
        if project and self.bound:
            self._granted.put(path, project)

    def _bound_projects(self, job: _Job) -> set[str]:
        """The projects ``job`` may write into: its askers', and in a bound engine also
        the one its file was authorized for or is held by (a set of two or more: refused)."""
        projects = set(job.projects)
        if self.bound:
            granted = self._granted.get(job.path)
            held = self.sink.paths.get(escape_surrogates(job.path))
            projects.update(p for p in (granted, held and project_key(held, self.namespace))
                            if p)
        return projects

    def _appended(self, path: str, stamp: Stamp) -> bool:
        """Only a little was appended since this process indexed the file last."""
        known = self.watcher.seen(Path(path))
        if known is None or known[0] != stamp[0] or escape_surrogates(path) not in self._states:
            return False
        grown = stamp[1] - known[1]
        return 0 <= grown <= INLINE_MAX_BYTES and not self._rewritten(path)

    def _rewritten(self, path: str) -> bool:
        key = escape_surrogates(path)
        state = self._states.get(key) or self._stored_state(path)
        if state is None:
            return False
        try:
            checked = checked_state(path, state)
        except OSError:
            return False
        if checked is not None:
            self._states[key] = checked  # the read that follows needs no second check
        return checked is None

    def _stored_state(self, path: str) -> FileState | None:
        """What the index says was read of ``path`` — for a file this process has not
        indexed yet (the reader restarted, or its thread is still busy with others), so a
        rewrite is told from an append before the index answers with ids Pi no longer has.
        Read-only; remembered once found."""
        key = escape_surrogates(path)
        try:
            _, cwd = peek_header(Path(path), self.max_line_bytes)
            state = stored_file_state(self.home, cwd, key, namespace=self.namespace)
        except Exception:  # no header (yet), not a session, unreadable: not known
            return None
        if state is not None:
            self._states.setdefault(key, state)
        return state

    # -- the sink the read loop writes to (ingest.pipeline.Sink) -------------------------

    def claim(self, path: str, cwd: str) -> None:
        self.sink.claim(path, cwd)

    def file_state(self, path: str, cwd: str) -> FileState | None:
        state = self.sink.file_state(path, cwd)
        known = self._states.get(path)
        if state is not None and known is not None and replace(known, seen=state.seen) == state:
            state = known  # the same state, already checked against the file (_rewritten)
        if state is not None:  # known before reading, so a waiting request can tell a rewrite
            self._states[path] = state
        return state

    def write(self, batch: Batch) -> None:
        self._read_to = batch.state  # _states has it once the job is done (see _run)
        self.sink.write(batch)

    # -- queue ------------------------------------------------------------------------

    def _schedule(self, path: str, *, urgent: bool, project: str | None = None) -> _Job:
        with self._cond:
            job = self._queued.get(path)
            if job is None:
                job = self._queued[path] = _Job(path)
                (self._urgent if urgent else self._background).append(job)
            if project:  # still queued: the job runs with every asker's project
                job.projects.add(project)
                self._grant(path, project)
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
                self.sink.release_wanted()
            self._release()

    def _work(self) -> None:
        while not self._stop.is_set():
            job = self._next(self.config.idle_close_seconds)
            with self._write_lock:
                if job is None:
                    self._release()  # idle: let `lookback index`/`reindex` have the lock
                    continue
                self._run(job)
                self.sink.release_wanted()  # busy: still let them have their turn

    def _release(self) -> None:
        """Commit and close every writer (the sink stays usable)."""
        try:
            self.sink.idle()
        except Exception:  # closing must not stop the thread
            log.warning('{"event": "freshness-close-error"}')

    # -- indexing ---------------------------------------------------------------------

    def _run(self, job: _Job) -> None:
        path = job.path
        stamp = file_stamp(path)
        report = IngestReport()
        try:
            if stamp is None:
                job.state = "missing"
                return
            projects = self._bound_projects(job)
            if len(projects) > 1:  # askers granted different projects: one is wrong
                raise ForeignProject("the askers were granted different projects")
            self.sink.only_project = next(iter(projects), None)
            self._read_to = None
            ingest_file(Path(path), self, report, self.max_line_bytes, excluded=self.excluded)
            self.sink.flush()
            if self._read_to is not None:
                self._states[escape_surrogates(path)] = self._read_to
            self.watcher.mark(Path(path), stamp)
            job.entries = report.read.entries
            job.state = "indexed"
        except ProjectUnavailable as error:
            job.state = "busy" if error.busy else "error"
            if not error.busy:  # the index could not be written: counted, as other failures
                self.failed += 1
                self.out_of_files += error.out_of_files
        except ForeignProject:
            self.refused += 1
            log.warning('{"event": "freshness-refused", "refused": %d}', self.refused)
            job.state = "refused"
            if stamp is not None:  # not again (nor by the tailer) until the file changes
                self._refused.put(path, stamp)
                self.watcher.mark(Path(path), stamp)
        except NotASession:  # raised by reading the file, so only once it had a stamp
            if stamp is not None:  # not a session: not again until it changes
                self.watcher.mark(Path(path), stamp)
            job.state = "error"
        except Exception as error:  # one bad file never stops the others
            log.warning('{"event": "freshness-error", "error": "%s"}', type(error).__name__)
            self._release()  # a failed transaction: start clean
            job.state = "error"
            self.failed += 1
            if out_of_files(error, causes=True):
                self.out_of_files += 1
        finally:
            self.sink.only_project = None
            self.sink.failures.clear()  # each job is a run of its own: retried next time
            self.jobs_run += 1
            job.done.set()

    # -- tailing ----------------------------------------------------------------------

    def _rebuild_stale(self) -> None:
        """After an upgrade (a newer schema or tokenizer), rebuild each stale index from
        its event log, as service mode's workers do; readers answer from the old file
        until the new one is swapped in, and writers keep appending meanwhile."""
        rebuilt = 0
        for project in stale_projects(self.home):
            if self._stop.is_set():
                return
            try:
                rebuild(project, lock_timeout=self.config.lock_timeout_seconds * 4)
            except RebuildBusy:
                continue  # someone else (`lookback reindex`) is rebuilding it
            except Exception as error:  # one project's failure never stops the others
                log.warning("stale index not rebuilt: %s", error.__class__.__name__)
                continue
            rebuilt += 1
        self.rebuilt = rebuilt
        log.info("rebuilt %d stale indexes", rebuilt)

    def _tail(self) -> None:
        while not self._stop.wait(self.watcher.poll_seconds):
            try:  # a folder that cannot be listed is skipped, the others are tailed
                changed = self.watcher.changed(unreadable=[])
            except PathProblem:
                continue  # a folder vanished mid-walk: next rescan
            for path, _ in changed:
                self._schedule(os.path.realpath(path), urgent=False)


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
    """The engine an embedded reader process runs, or None (turned off)."""
    if not settings.freshness.enabled:
        return None
    from lookback.budget import file_budget

    return FreshnessEngine(settings.home, namespace=settings.namespace,
                           config=settings.freshness, watch=settings.watch,
                           roots=default_roots(settings),
                           max_line_bytes=settings.max_line_bytes,
                           bound=bool(settings.server.tokens), excluded=settings.excluded,
                           max_writers=file_budget(settings).writers)


def refresh(engine: FreshnessEngine | None, names: SessionNames,
            ref: SessionRef | None = None) -> Outcome | None:
    """Bring the session file a decoded request names up to date (within the contract).

    ``ref``: the session file as the request was resolved and authorized — its real path
    is indexed, and only into its project. Without one (a file not indexed yet) the file
    the request names is (the decoder took only an absolute path)."""
    if engine is None:
        return None
    if ref is not None and ref.file:
        return engine.ensure(ref.file, project=ref.project.name)
    if not names.session_file:
        return None
    return engine.ensure(names.session_file)


def annotate(response: RetrieveAnswer, outcome: Outcome | None) -> RetrieveAnswer:
    """Add the freshness outcome (and its warning) to a response's diagnostics."""
    if outcome is None:
        return response
    diagnostics = response.diagnostics
    diagnostics.freshness = FreshnessOutcome(state=outcome.state, ms=round(outcome.ms, 3),
                                             entries=outcome.entries)
    if outcome.warning:
        diagnostics.warn(outcome.warning)
    return response


def rewrite_pending_answer(outcome: Outcome) -> RetrieveAnswer:
    """The retrieve answer while a rewritten file is being re-indexed: no evidence, since
    every indexed id may be one the client no longer has."""
    return annotate(RetrieveAnswer(status="not-indexed", query={}, evidence=[],
                                   retrieved_event_ids=[], excluded=[],
                                   diagnostics=Diagnostics()), outcome)
