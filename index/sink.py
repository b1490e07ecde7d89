"""The embedded sink: ingest writes straight into each project's index.

Used when no Redis is configured. Writers are opened per project on first use and
at most ``max_open`` stay open, so memory and file handles stay flat however many
projects and sessions a run touches.

Small batches (the new lines of many short sessions) are gathered per project and
committed together, up to ``flush_events`` events: one transaction per file would
cost more than the file's rows. Each file's state is committed with its events,
so an interrupted run still resumes exactly where its last commit stopped.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from lookback.index.project import ProjectWriter
from lookback.ingest.events import Event
from lookback.ingest.reader import Batch, FileState


class EmbeddedSink:
    def __init__(self, home: Path, *, namespace: str = "", max_open: int = 8,
                 flush_events: int = 2000) -> None:
        self.home = Path(home)
        self.namespace = namespace
        self.max_open = max_open
        self.flush_events = flush_events
        self._writers: OrderedDict[str, ProjectWriter] = OrderedDict()
        self._pending: dict[str, tuple[list[Event], dict[str, FileState]]] = {}

    def writer(self, cwd: str) -> ProjectWriter:
        writer = self._writers.pop(cwd, None)
        if writer is None:
            writer = ProjectWriter(self.home, cwd, namespace=self.namespace)
        self._writers[cwd] = writer
        while len(self._writers) > self.max_open:
            name, oldest = self._writers.popitem(last=False)
            self._flush(name, oldest)
            oldest.close()
        return writer

    def file_state(self, path: str, cwd: str) -> FileState | None:
        pending = self._pending.get(cwd)
        if pending is not None and path in pending[1]:
            return pending[1][path]
        return self.writer(cwd).file_state(path)

    def write(self, batch: Batch) -> None:
        cwd = batch.state.cwd
        events, states = self._pending.setdefault(cwd, ([], {}))
        events.extend(batch.events)
        states[batch.state.path] = batch.state
        if len(events) >= self.flush_events:
            self._flush(cwd, self.writer(cwd))

    def flush(self) -> None:
        """Commit everything gathered so far."""
        for cwd in list(self._pending):
            self._flush(cwd, self.writer(cwd))

    def _flush(self, cwd: str, writer: ProjectWriter) -> None:
        pending = self._pending.pop(cwd, None)
        if pending is not None:
            writer.write(pending[0], states=pending[1].values())

    def close(self) -> None:
        try:
            self.flush()
        finally:
            while self._writers:
                _, writer = self._writers.popitem()
                writer.close()

    def __enter__(self) -> EmbeddedSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
