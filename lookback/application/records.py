"""Manifest records written on a background thread, off the request's critical path."""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable

from lookback.query.context.manifest import ManifestStore

log = logging.getLogger("lookback.server")


class ManifestWriter:
    """Writes manifest records on a background thread, off the request's critical path."""

    def __init__(self, store: ManifestStore) -> None:
        self.store = store
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=10_000)
        self._thread = threading.Thread(target=self._run, name="lookback-manifest", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            log.warning(json.dumps({"event": "manifest-dropped"}))

    def flush(self) -> None:
        """Wait until every submitted record is written."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                job()
            except Exception as error:  # a manifest problem never breaks serving
                log.error(json.dumps({"event": "manifest-error", "error": type(error).__name__}))
            finally:
                self._queue.task_done()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)
        self.store.close()
