"""Ingest session files into a sink: the loop shared by embedded and service mode.

The sink decides where events go (``index.sink.EmbeddedSink`` writes the project's
index directly; the Redis sink appends to the project's stream). Each batch carries
the file state after it, and the sink stores both together, so an interrupted run
resumes exactly where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lookback.ingest.reader import (
    Batch,
    FileState,
    NotASession,
    ReadStats,
    read_session,
    session_identity,
)


class Sink(Protocol):
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
    errors: list[str] = field(default_factory=list)
    read: ReadStats = field(default_factory=ReadStats)


def peek_header(path: Path) -> tuple[str, str]:
    """(session id, cwd) of a Pi or Claude Code session file, without reading further."""
    return session_identity(str(path))


def ingest_files(files: Iterable[Path], sink: Sink, *,
                 on_file: Callable[[Path, IngestReport], None] | None = None,
                 strict: bool = False) -> IngestReport:
    """Read every file's new lines into ``sink``; problems are collected, not raised.

    With ``strict`` a file that is not a Pi session counts as an error (the user named
    it); otherwise it is noted and skipped (a folder may hold other JSONL files).
    """
    report = IngestReport()
    for path in files:
        report.files += 1
        try:
            _ingest_one(path, sink, report)
        except NotASession as problem:
            (report.errors if strict else report.not_sessions).append(str(problem))
        except OSError as error:
            report.errors.append(f"{path}: {error.strerror or error}")
        if on_file is not None:
            on_file(path, report)
    return report


def _ingest_one(path: Path, sink: Sink, report: IngestReport) -> None:
    session_id, cwd = peek_header(path)
    state = sink.file_state(str(path), cwd)
    for batch in read_session(str(path), state, stats=report.read):
        sink.write(batch)
        report.events += len(batch.events)
    report.sessions.add(session_id)
    report.projects.add(cwd)
