"""Who keeps the indexes a reader answers from fresh: one ``Keeper`` per reader process,
chosen once at start-up by the mode (``lookback.application.modes.open_keeper``).

- ``EmbeddedKeeper`` (the default, no Redis): this process writes. Before a retrieve,
  search or source request it indexes the named session file's new lines, waiting at
  most ``freshness.wait_ms``; a nudge queues the file; a tailer polls the session
  folders (``lookback.freshness``). With ``freshness.enabled = false`` it does none of
  that and the reader answers from what ``lookback index`` wrote.
- ``ServiceKeeper`` (``redis_url`` set): producers and workers write, the reader only
  reads. A nudge is published to Redis off the request path (``nudges``).
"""

from __future__ import annotations

import threading
from typing import Any, Literal, Protocol

from lookback.application.nudges import GIVE_UP_SECONDS, NudgeQueue
from lookback.freshness import FreshnessEngine, Outcome, refresh
from lookback.query.contract.request import SessionNames
from lookback.query.search.reader import SessionRef
from lookback.settings import Settings

#: What a reader process runs in: it writes its indexes itself, or workers do.
Mode = Literal["embedded", "service"]


class Keeper(Protocol):
    """What the reader asks of whoever keeps its indexes fresh."""

    @property
    def mode(self) -> Mode: ...

    def refresh(self, names: SessionNames, ref: SessionRef | None) -> Outcome | None:
        """Bring the session file a decoded request names up to date before it is read
        (None: nothing was done)."""

    def nudge(self, session_file: str, project: str | None) -> str:
        """Ask for ``session_file`` to be indexed soon, without waiting: the status
        ``POST /v1/nudge`` answers."""

    def stats(self) -> dict[str, Any]:
        """Counters for ``/v1/health``'s ``server`` section."""

    def start_tailer(self) -> None:
        """Also find changed session files unasked (``lookback serve``)."""

    def close(self) -> None: ...


class EmbeddedKeeper:
    """Embedded mode: this process indexes the files its requests name (``engine``;
    None when ``freshness.enabled`` is false)."""

    mode: Mode = "embedded"

    def __init__(self, engine: FreshnessEngine | None) -> None:
        self.engine = engine
        if engine is not None:
            engine.start()

    def refresh(self, names: SessionNames, ref: SessionRef | None) -> Outcome | None:
        return refresh(self.engine, names, ref)

    def nudge(self, session_file: str, project: str | None) -> str:
        if self.engine is None:
            return "embedded"
        return self.engine.nudge(session_file, project=project)

    def stats(self) -> dict[str, Any]:
        # refused: files that named a project not granted
        return {} if self.engine is None else {"freshness": self.engine.stats()}

    def start_tailer(self) -> None:
        if self.engine is not None:
            self.engine.start_tailer()

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()


class ServiceKeeper:
    """Service mode: workers keep the indexes; the reader publishes nudges (Redis is
    imported only when one is)."""

    mode: Mode = "service"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.nudges = NudgeQueue(self._publish)

    def refresh(self, names: SessionNames, ref: SessionRef | None) -> Outcome | None:
        return None  # the reader never waits for ingestion or Redis

    def nudge(self, session_file: str, project: str | None) -> str:
        return self.nudges.submit(session_file, project)

    def _publish(self, session_file: str, project: str | None,
                 stop: threading.Event) -> None:
        from lookback.service import nudge_session

        nudge_session(self.settings, session_file, project=project,
                      give_up_after=GIVE_UP_SECONDS, stop=stop)

    def stats(self) -> dict[str, Any]:
        return {"nudges": self.nudges.stats()}

    def start_tailer(self) -> None:
        """Producers (``lookback watch``) tail the folders in service mode."""

    def close(self) -> None:
        self.nudges.close()
