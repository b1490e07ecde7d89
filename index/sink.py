"""The embedded sink: ingest writes straight into each project's index.

Used when no Redis is configured. Writers are opened per project on first use and
at most ``max_open`` stay open, so memory and file handles stay flat however many
projects and sessions a run touches.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from index.project import ProjectWriter
from ingest.reader import Batch, FileState


class EmbeddedSink:
    def __init__(self, home: Path, *, namespace: str = "", max_open: int = 8) -> None:
        self.home = Path(home)
        self.namespace = namespace
        self.max_open = max_open
        self._writers: OrderedDict[str, ProjectWriter] = OrderedDict()

    def writer(self, cwd: str) -> ProjectWriter:
        writer = self._writers.pop(cwd, None)
        if writer is None:
            writer = ProjectWriter(self.home, cwd, namespace=self.namespace)
        self._writers[cwd] = writer
        while len(self._writers) > self.max_open:
            _, oldest = self._writers.popitem(last=False)
            oldest.close()
        return writer

    def file_state(self, path: str, cwd: str) -> FileState | None:
        return self.writer(cwd).file_state(path)

    def write(self, batch: Batch) -> None:
        self.writer(batch.state.cwd).write(batch.events, state=batch.state)

    def close(self) -> None:
        while self._writers:
            _, writer = self._writers.popitem()
            writer.close()

    def __enter__(self) -> EmbeddedSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
