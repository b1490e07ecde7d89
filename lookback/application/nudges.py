"""Service-mode nudges, off the request path: ``POST /v1/nudge`` never waits for Redis.

A nudge asks for what a session file gained to be published to Redis now
(``lookback.service.nudge_session``). That needs Redis; retrieval needs only the local
index. So a nudge is put on a bounded queue and answered at once; one daemon thread
publishes the queue, each nudge retrying an unreachable Redis for a few seconds at
most. A nudge is dropped, and counted, when the queue is full, when publishing it
failed, or when Redis failed a moment ago (the thread does not spend seconds on every
queued nudge while Redis is down). Dropping one loses nothing: Redis keeps each file's
read state, so the next nudge (or ``lookback watch``) publishes what it would have.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from lookback.errors import ForeignProject, UserError

log = logging.getLogger("lookback.server")

#: Nudges waiting at most; more are dropped (a nudge per turn end and per compaction).
QUEUE_SIZE = 64
#: How long one nudge retries an unreachable Redis before it is dropped.
GIVE_UP_SECONDS = 2.0
#: After a failed publish, queued nudges are dropped without trying for this long.
DOWN_SECONDS = 5.0

#: ``publish(session_file, project, stop)``: sends one nudge, raising when it could not.
Publish = Callable[[str, "str | None", threading.Event], Any]


class NudgeQueue:
    """A bounded queue of nudges and the one thread that publishes them."""

    def __init__(self, publish: Publish, *, size: int = QUEUE_SIZE,
                 down_seconds: float = DOWN_SECONDS) -> None:
        self.publish = publish
        self.down_seconds = down_seconds
        self._queue: queue.Queue[tuple[str, str | None]] = queue.Queue(size)
        self._pending: set[tuple[str, str | None]] = set()  # queued, not yet taken
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._down_until = float("-inf")
        self.published = 0
        self.dropped = 0
        self.refused = 0  # the file named a project the asker was not granted

    def submit(self, session_file: str, project: str | None) -> str:
        """``queued`` (or already queued) or ``dropped``; never blocks."""
        item = (session_file, project)
        with self._lock:
            if item in self._pending:
                return "queued"
            if self._stop.is_set():
                self.dropped += 1
                return "dropped"
            try:
                self._queue.put_nowait(item)
            except queue.Full:
                self.dropped += 1
                return "dropped"
            self._pending.add(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="lookback-nudge",
                                                daemon=True)
                self._thread.start()
        return "queued"

    def stats(self) -> dict[str, int]:
        return {"queued": self._queue.qsize(), "published": self.published,
                "dropped": self.dropped, "refused": self.refused}

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            with self._lock:
                self._pending.discard(item)
            if time.monotonic() < self._down_until or self._stop.is_set():
                self._drop("redis-down")
                continue
            try:
                self.publish(item[0], item[1], self._stop)
                self.published += 1
            except ForeignProject:
                self.refused += 1
                log.warning(json.dumps({"event": "nudge-refused", "refused": self.refused}))
            except UserError:  # not a session, unreadable: this file only
                self._drop("bad-file")
            except Exception as error:  # Redis unreachable, after a bounded retry
                self._down_until = time.monotonic() + self.down_seconds
                self._drop(type(error).__name__)

    def _drop(self, why: str) -> None:
        self.dropped += 1
        log.warning(json.dumps({"event": "nudge-dropped", "why": why[:40],
                                "dropped": self.dropped}))

    def close(self) -> None:
        """Stop at once: a nudge being published gives up (nothing waits for it)."""
        self._stop.set()
