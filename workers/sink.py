"""The producers' sink in service mode: events go onto the project's Redis stream.

Each batch's events (XADD) and the file's new read state (HSET) are written in one
MULTI/EXEC, so a restarted watcher resumes exactly after the last batch Redis has:
it neither re-sends nor skips. When Redis cannot be reached the sink retries with
backoff and says so on stderr (one line per attempt, never event text); it never
drops a batch. After a lost EXEC reply it checks whether the batch landed before
sending it again.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from lookback.errors import ForeignProject
from lookback.index.layout import MOVE_REFUSED, project_key, refuse_foreign
from lookback.ingest.events import Event
from lookback.ingest.reader import Batch, FileState
from lookback.workers.config import ServiceConfig, redis_client
from lookback.workers.event_stream import add_events
from lookback.workers.nudge import nudge
from lookback.workers.port import RedisPort

T = TypeVar("T")


def transient_errors() -> tuple[type[BaseException], ...]:
    """Errors after which trying again later may work: Redis unreachable or loading."""
    import dramatiq.errors
    import redis.exceptions

    broker_error = getattr(dramatiq.errors, "BrokerConnectionError", None) \
        or dramatiq.errors.ConnectionError
    return (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, broker_error,
            ConnectionError)


class Backoff:
    """Retry a call until it works, sleeping 0.2 s, 0.4 s, … up to ``max_delay``.

    ``give_up_after`` (seconds) bounds the whole retrying: when the next sleep would
    end past it, the last error is raised (None: retry for as long as it takes, what a
    watcher that must never drop a batch wants). ``stop`` ends the retrying early (it
    is set on shutdown), raising the last error too.
    """

    def __init__(self, *, first: float = 0.2, max_delay: float = 30.0,
                 say: Callable[[str], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 give_up_after: float | None = None,
                 stop: threading.Event | None = None) -> None:
        self.first = first
        self.max_delay = max_delay
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.sleep = stop.wait if stop is not None else sleep
        self.give_up_after = give_up_after
        self.stop = stop

    def run(self, call: Callable[[int], T], what: str) -> T:
        """``call(attempt)`` until it returns; transient errors are retried until
        ``give_up_after`` (forever without one) or ``stop``."""
        errors = transient_errors()
        attempt, started, slept = 0, time.monotonic(), 0.0
        while True:
            try:
                return call(attempt)
            except errors as error:
                delay = min(self.first * 2 ** attempt, self.max_delay)
                attempt += 1
                spent = max(time.monotonic() - started, slept)  # ``sleep`` may be a fake
                if (self.give_up_after is not None and spent + delay > self.give_up_after) \
                        or (self.stop is not None and self.stop.is_set()):
                    raise
                self.say(f"lookback: cannot reach Redis while {what} "
                         f"({error.__class__.__name__}); retrying in {delay:.1f}s "
                         f"(attempt {attempt}, nothing is dropped)")
                self.sleep(delay)
                slept += delay


class RedisSink:
    """``ingest.pipeline.Sink`` that appends to the per-project Redis streams."""

    def __init__(self, config: ServiceConfig, client: RedisPort | None = None, *,
                 backoff: Backoff | None = None, only_project: str | None = None,
                 keep_held: bool = False) -> None:
        self.config = config
        self.client = client if client is not None else redis_client(config)
        self.backoff = backoff or Backoff()
        #: A sink publishing for one authorized project refuses every other one.
        self.only_project = only_project
        #: set (``lookback watch`` with ``server.tokens``): a file never moves to another
        #: project than the one holding it
        self.keep_held = keep_held
        self.refused = 0
        self.batches = 0
        self.events = 0

    def project(self, cwd: str) -> str:
        return project_key(cwd, self.config.namespace)

    def _check(self, *projects: str | None) -> None:
        """ForeignProject (counted) when this sink may not touch one of ``projects``."""
        try:
            refuse_foreign(self.only_project, *projects)
        except ForeignProject:
            self.refused += 1
            raise

    def claim(self, path: str, cwd: str) -> None:
        """Make ``cwd``'s project the only one holding ``path``: when the file's header
        named another project before, that project is told to forget the session (a
        ``reset`` event with reason ``moved``) and its file state goes, in one EXEC."""
        project = self.project(cwd)
        self._check(project)
        paths_key = self.config.paths_key
        previous = _text(self.backoff.run(lambda _: self.client.hget(paths_key, path),
                                          "reading which project holds a file"))
        if previous == project:
            return
        self._check(previous)  # moving it out of another project writes into that one
        if self.keep_held and previous is not None:
            self.refused += 1
            raise ForeignProject(MOVE_REFUSED)
        old_state = None
        if previous is not None:
            raw = self.backoff.run(
                lambda _: self.client.hget(self.config.files_key(previous), path),
                "reading a file state")
            old_state = None if raw is None else FileState.from_json(raw)

        def commit(_: int) -> None:
            with self.client.pipeline(transaction=True) as pipe:
                if old_state is not None and previous is not None:  # one implies the other
                    add_events(pipe, self.config.log_key(previous), [Event(
                        "reset", old_state.session_id, old_state.cwd,
                        {"reason": "moved", "file": path})], grant=self.only_project)
                    pipe.hdel(self.config.files_key(previous), path)
                pipe.hset(paths_key, path, project)
                pipe.execute()

        self.backoff.run(commit, "moving a session to its new project")
        if old_state is not None and previous is not None:
            self.backoff.run(lambda _: nudge(self.config, self.client, previous),
                             "nudging the workers")

    def file_state(self, path: str, cwd: str) -> FileState | None:
        key = self.config.files_key(self.project(cwd))
        raw = self.backoff.run(lambda _: self.client.hget(key, path), "reading a file state")
        return None if raw is None else FileState.from_json(raw)

    def write(self, batch: Batch) -> None:
        state = batch.state
        project = self.project(state.cwd)
        self._check(project)
        state_json = state.to_json()

        def commit(attempt: int) -> None:
            files_key = self.config.files_key(project)
            if attempt and _text(self.client.hget(files_key, state.path)) == state_json:
                return  # the previous attempt's EXEC landed; its reply was lost
            with self.client.pipeline(transaction=True) as pipe:
                add_events(pipe, self.config.log_key(project), batch.events,
                           grant=self.only_project)
                pipe.hset(files_key, state.path, state_json)
                pipe.hset(self.config.projects_key, project,
                          json.dumps({"cwd": state.cwd, "namespace": self.config.namespace}))
                pipe.execute()

        self.backoff.run(commit, "publishing events")
        self.batches += 1
        self.events += len(batch.events)
        if batch.events:
            self.backoff.run(lambda _: nudge(self.config, self.client, project),
                             "nudging the workers")

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> RedisSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
