"""Ingest session files into a sink: the loop shared by embedded and service mode.

The sink decides where events go (``index.sink.EmbeddedSink`` writes the project's
index directly; the Redis sink appends to the project's stream). Each batch carries
the file state after it, and the sink stores both together, so an interrupted run
resumes exactly where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lookback.errors import ForeignProject, Unavailable
from lookback.ingest.reader import (
    DEFAULT_MAX_LINE_BYTES,
    Batch,
    FileState,
    HeaderPending,
    NotASession,
    ReadStats,
    read_session,
    session_identity,
)
from lookback.ingest.storable import escape_surrogates


class SinkUnavailable(Unavailable):
    """The sink cannot take this file's events now (say, its project's index is
    unusable); the file is skipped and retried on the next run, other files go on."""

    code = "sink-unavailable"


class Sink(Protocol):
    def claim(self, path: str, cwd: str) -> None:
        """Make ``cwd``'s project the one holding ``path`` (called before
        ``file_state``), so a file whose header now names another cwd moves there."""

    def file_state(self, path: str, cwd: str) -> FileState | None:
        """What was read of ``path`` before (None: nothing yet)."""

    def write(self, batch: Batch) -> None:
        """Store the batch's events and its file state atomically."""


@dataclass
class IngestReport:
    files: int = 0
    sessions: set[str] = field(default_factory=set)
    projects: set[str] = field(default_factory=set)
    events: int = 0
    not_sessions: list[str] = field(default_factory=list)
    pending_headers: int = 0  # files whose header line Pi is still writing
    errors: list[str] = field(default_factory=list)
    failed_files: list[Path] = field(default_factory=list)  # to be read again
    excluded: int = 0  # files of projects switched off (settings' ``excluded_projects``)
    unreadable: list[Path] = field(default_factory=list)  # could not be opened or read
    read: ReadStats = field(default_factory=ReadStats)

    def fail(self, path: Path, message: str) -> None:
        """Note a file that could not be read now; one line per distinct problem."""
        self.failed_files.append(path)
        if message not in self.errors:
            self.errors.append(message)


#: ``Settings.excluded``: True for the folder of a project Lookback must leave alone.
Excluded = Callable[[str], bool]


def peek_header(path: Path, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> tuple[str, str]:
    """(session id, cwd) of a Pi, Claude Code or Codex session file, without reading further.

    Raises NotASession for any other file, HeaderPending while its first line is
    still being written.
    """
    return session_identity(str(path), max_line_bytes)


def ingest_files(files: Iterable[Path], sink: Sink, *,
                 on_file: Callable[[Path, IngestReport], None] | None = None,
                 strict: bool | Container[Path] = False,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 on_batch: Callable[[Path, int], None] | None = None,
                 excluded: Excluded | None = None) -> IngestReport:
    """Read every file's new lines into ``sink``; problems are collected, not raised.

    With ``strict`` (True, or the files the user named: ``ingest.scan.named_files``) a
    file that is not a session counts as an error; otherwise it is noted and skipped
    (a folder may hold other JSONL files). A file that fails for any reason is
    reported and the others go on. ``on_batch(path, offset)`` follows a long file
    batch by batch (the byte offset read up to), ``on_file`` file by file. A file whose
    project ``excluded(cwd)`` switches off is not read (counted in ``excluded``).
    """
    report = IngestReport()
    for path in files:
        report.files += 1
        try:
            ingest_file(path, sink, report, max_line_bytes, on_batch, excluded)
        except HeaderPending:
            report.pending_headers += 1
            report.failed_files.append(path)
        except NotASession as problem:
            named = strict is True or (strict is not False and path in strict)
            (report.errors if named else report.not_sessions).append(str(problem))
        except OSError as error:
            # The system may name another file than this one: the data directory's
            # (read-only, full), which must not read as if the session file were.
            named = error.filename
            elsewhere = named is not None and str(named) != str(path)
            where = f"{path}: cannot index it: {named}" if elsewhere else str(path)
            report.fail(path, f"{where}: {error.strerror or error}")
            if not elsewhere:
                report.unreadable.append(path)
        except (SinkUnavailable, ForeignProject) as error:
            report.fail(path, f"{path}: {error}" if isinstance(error, ForeignProject)
                        else str(error))
        except Exception as error:  # one file never stops the run
            report.fail(path, f"{path}: could not be read ({error.__class__.__name__})")
        if on_file is not None:
            on_file(path, report)
    return report


def ingest_file(path: Path, sink: Sink, report: IngestReport,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                on_batch: Callable[[Path, int], None] | None = None,
                excluded: Excluded | None = None) -> None:
    """Read one file's new lines into ``sink``, counting into ``report``; its problems
    are raised (``ingest_files`` collects them; the reader's freshness engine tells a
    busy project from a refused or broken file by them)."""
    session_id, cwd = peek_header(path, max_line_bytes)
    if excluded is not None and excluded(cwd):
        report.excluded += 1
        return
    key = escape_surrogates(str(path))
    sink.claim(key, cwd)
    state = sink.file_state(key, cwd)
    for batch in read_session(str(path), state, stats=report.read,
                              max_line_bytes=max_line_bytes):
        sink.write(batch)
        report.events += len(batch.events)
        if on_batch is not None:
            on_batch(path, batch.state.offset)
    report.sessions.add(session_id)
    report.projects.add(cwd)
