"""The sweeper: nudge every project whose stream still holds events to apply, or
whose owner's lease is gone (so a live host takes it over: workers.owner).

Nudges can be lost (a worker killed before acking, a producer killed between its
EXEC and its nudge); the stream cannot. Every ``sweep_seconds`` one sweeper in the
cluster (a Redis ``SET NX PX`` lock picks it) looks at each registered project's
stream and nudges those with pending events; a project whose oldest pending event
is older than two sweeps is nudged even if its nudge flag says one is in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from lookback.index.rebuild import stale_projects
from lookback.workers.config import ServiceConfig
from lookback.workers.event_stream import id_millis
from lookback.workers.nudge import nudge, request_rebuild
from lookback.workers.owner import Owner, alive, me
from lookback.workers.port import RedisPort, entries, text
from lookback.workers.reindex import mark_queued

logger = logging.getLogger("lookback.workers")


def sweep(config: ServiceConfig, client: RedisPort) -> int:
    """Nudge the projects with pending events; returns how many were nudged."""
    now_ms = _redis_millis(client)
    nudged = 0
    projects = [text(raw) for raw in client.hkeys(config.projects_key)]
    with client.pipeline(transaction=False) as pipe:  # one round trip for the hints
        for project in projects:
            pipe.get(config.applied_key(project))  # the owner's cursor
            pipe.get(config.owner_key(project))
        hints = pipe.execute()
    live: dict[str, bool] = {}  # per host: its lease held (a few hosts, many projects)
    for number, project in enumerate(projects):
        applied, raw_owner = hints[2 * number], hints[2 * number + 1]
        first = entries(client, config.log_key(project),
                        min="-" if applied is None else f"({text(applied)}", count=1)
        owner = None if raw_owner is None else Owner.from_json(raw_owner)
        if owner is not None and owner.id not in live:
            live[owner.id] = alive(config, client, owner)
        orphaned = owner is not None and not owner.paused and not live[owner.id]
        if not first and not orphaned:
            continue
        overdue = orphaned or now_ms - id_millis(first[0][0]) > 2000 * config.sweep_seconds
        if nudge(config, client, project, force=overdue):
            nudged += 1
    if nudged:
        logger.info("sweeper nudged %d projects", nudged)
    return nudged


def enqueue_stale_rebuilds(config: ServiceConfig, client: RedisPort) -> int:
    """Queue a background rebuild for every index older than this code."""
    projects = stale_projects(config.home)
    for project in projects:
        mark_queued(config, client, project.name)
        request_rebuild(config, project.name)
    return len(projects)


class SweeperThread(threading.Thread):
    """Runs ``sweep`` every ``config.sweep_seconds`` inside a worker process."""

    def __init__(self, config: ServiceConfig, client: RedisPort) -> None:
        super().__init__(name="lookback-sweeper", daemon=True)
        self.config = config
        self.client = client
        self.stopping = threading.Event()

    def run(self) -> None:
        # Per host: each host checks the indexes in its own home (workers.owner).
        claim = f"reindex-on-start:{me(self.config).id}"
        if self.config.reindex_on_start and self._claim(claim, 60_000):
            self._guard(lambda: enqueue_stale_rebuilds(self.config, self.client))
        while not self.stopping.wait(self._jitter()):
            if self._claim("sweeper", int(self.config.sweep_seconds * 900)):
                self._guard(lambda: sweep(self.config, self.client))

    def stop(self) -> None:
        self.stopping.set()

    def _claim(self, name: str, ttl_ms: int) -> bool:
        try:
            return bool(self.client.set(self.config.prefix + name, "1", nx=True, px=ttl_ms))
        except Exception as error:  # Redis blip: try again next round
            logger.warning("sweeper cannot reach Redis (%s)", error.__class__.__name__)
            return False

    def _guard(self, job: Any) -> None:
        try:
            job()
        except Exception as error:
            logger.warning("sweeper round failed (%s)", error.__class__.__name__)

    def _jitter(self) -> float:
        return self.config.sweep_seconds * (0.9 + 0.2 * (time.monotonic() % 1))


def _redis_millis(client: RedisPort) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000
