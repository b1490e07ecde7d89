"""Tail session folders (Pi, Claude Code, Codex): read new complete lines of every session file
into a sink.

Polling, not inotify, so it works the same on every OS and on network mounts, and it
needs no extra dependency. Files that changed recently ("hot") are looked at every
``poll_seconds``; every file is looked at again (and folders walked for new files)
every ``rescan_seconds`` (the ``watch`` settings: ``lookback watch`` and the reader's
freshness engine poll the same way). A file whose identity (inode, size, modification
time) changed is handed to ``ingest.pipeline.ingest_files``, which asks the sink what
was read before — so a restarted watcher resumes from the sink's stored file states,
and neither re-sends nor skips anything. ``changed`` and ``mark`` are the two halves
for a caller that ingests on its own schedule (``lookback.freshness`` queues them).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lookback.ingest.pipeline import Excluded, IngestReport, Sink, ingest_files
from lookback.ingest.reader import DEFAULT_MAX_LINE_BYTES
from lookback.ingest.scan import PathProblem, session_files

#: A file's identity: (inode, size, mtime in ns). Agents append (size grows) or rewrite.
Stamp = tuple[int, int, int]


@dataclass
class WatchRound:
    """What one polling round did (counts only)."""

    files_changed: int = 0
    events: int = 0
    errors: list[str] = field(default_factory=list)


class Watcher:
    """Polls ``roots`` and ingests changed session files into ``sink``."""

    def __init__(self, roots: Iterable[Path], sink: Sink, *, poll_seconds: float = 0.05,
                 rescan_seconds: float = 2.0, hot_seconds: float = 600.0,
                 on_idle: Callable[[], None] | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 excluded: Excluded | None = None) -> None:
        self.roots = [Path(root) for root in roots]
        self.sink = sink
        self.poll_seconds = poll_seconds
        self.rescan_seconds = rescan_seconds
        self.hot_seconds = hot_seconds
        self.on_idle = on_idle
        self.max_line_bytes = max_line_bytes
        self.excluded = excluded  # projects switched off: their files are not read
        self._seen: dict[Path, Stamp] = {}  # path -> its stamp when ingested
        self._hot: dict[Path, float] = {}  # path -> when it last changed (monotonic)
        self._last_rescan = float("-inf")
        self.totals = WatchRound()

    def poll(self) -> WatchRound:
        """One round: look at hot files (all files, on a rescan) and ingest changes."""
        unreadable: list[str] = []  # folders that cannot be listed: the others go on
        try:
            changed = self.changed(unreadable)
        except PathProblem as problem:  # a folder vanished mid-walk: next rescan
            return WatchRound(errors=[str(problem)])
        result = WatchRound(files_changed=len(changed), errors=unreadable)
        if changed:
            report = ingest_files([path for path, _ in changed], self.sink,
                                  max_line_bytes=self.max_line_bytes, excluded=self.excluded)
            result.events = report.events
            result.errors = [*unreadable, *report.errors]
            self._remember(changed, report, time.monotonic())
        self.totals.files_changed += result.files_changed
        self.totals.events += result.events
        return result

    def changed(self, unreadable: list[str] | None = None) -> list[tuple[Path, Stamp]]:
        """The hot files (every file, when a rescan is due) whose stamp is not the one
        ingested last; a folder that cannot be listed is noted in ``unreadable`` (when
        given) and skipped. Raises PathProblem when a folder vanished mid-walk."""
        now = time.monotonic()
        if now - self._last_rescan >= self.rescan_seconds:
            self._last_rescan = now
            candidates = list(session_files([r for r in self.roots if r.exists()],
                                            unreadable=unreadable))
        else:
            candidates = [p for p, at in list(self._hot.items()) if now - at < self.hot_seconds]
        return [(path, stamp) for path in candidates
                if (stamp := file_stamp(path)) is not None and self._seen.get(path) != stamp]

    def seen(self, path: Path) -> Stamp | None:
        """The stamp ``path`` had when it was ingested last (None: not yet)."""
        return self._seen.get(path)

    def mark(self, path: Path, stamp: Stamp) -> None:
        """``path`` was ingested up to ``stamp`` (by whoever): it is hot from now on."""
        self._seen[path] = stamp
        self._hot[path] = time.monotonic()

    def run(self, stop: threading.Event,
            on_round: Callable[[WatchRound], None] | None = None) -> None:
        """Poll until ``stop`` is set."""
        while not stop.is_set():
            result = self.poll()
            if on_round is not None:
                on_round(result)
            if self.on_idle is not None:
                self.on_idle()
            stop.wait(self.poll_seconds)

    def _remember(self, changed: list[tuple[Path, Stamp]], report: IngestReport,
                  now: float) -> None:
        failed = set(report.failed_files)  # read again on the next rescan
        for path, stamp in changed:
            if path in failed:
                self._seen.pop(path, None)
                continue
            self._seen[path] = stamp
            self._hot[path] = now
        for path in [p for p, at in self._hot.items() if now - at >= self.hot_seconds]:
            del self._hot[path]


def file_stamp(path: Path | str) -> Stamp | None:
    """``path``'s stamp, or None when it is missing or not a regular file (a FIFO or
    /dev/zero would hang the reader)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns
