"""Ingest session files into a sink: the loop shared by embedded and service mode.

The sink decides where events go (``index.sink.EmbeddedSink`` writes the project's
index directly; the Redis sink appends to the project's stream). Each batch carries
the file state after it, and the sink stores both together, so an interrupted run
resumes exactly where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from lookback.ingest.reader import Batch, FileState, NotASession, ReadStats, read_session


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
    """(session id, cwd) from the file's header, without reading further."""
    with open(path, "rb") as handle:
        for line in iter(lambda: handle.readline(1 << 20), b""):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and obj.get("type") == "session" and obj.get("id"):
                cwd = obj.get("cwd")
                return str(obj["id"]), cwd if isinstance(cwd, str) else ""
            break
    raise NotASession(f"{path}: not a Pi session file (no session header)")


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
