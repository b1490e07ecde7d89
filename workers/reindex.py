"""Background rebuilds: after an upgrade, rebuild stale indexes from their event logs.

``index.rebuild.rebuild`` builds the next generation file beside the live one and
swaps ``CURRENT`` atomically; readers answer from the old file until then. Here we
only find the projects that need it, run it on the background queue, and keep its
progress in Redis (``reindex:K``) for ``lookback status``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from lookback.index.layout import PROJECTS_DIR, find_project
from lookback.index.rebuild import RebuildBusy, rebuild
from lookback.workers.config import ServiceConfig
from lookback.workers.port import RedisPort

logger = logging.getLogger("lookback.workers")

#: Progress is written to Redis at most this often.
PROGRESS_SECONDS = 0.5


def mark_queued(config: ServiceConfig, client: RedisPort, project: str) -> None:
    client.hset(config.reindex_key(project),
                mapping={"state": "queued", "done": 0, "total": 0, "updated_at": time.time()})


def run_rebuild(config: ServiceConfig, client: RedisPort, name: str) -> dict[str, Any]:
    """Rebuild the project folder ``name`` under ``config.home``, recording progress."""
    project = find_project(config.home, name)
    if project.path.parent != Path(config.home) / PROJECTS_DIR:
        raise ValueError("project outside the data directory")
    key = config.reindex_key(name)
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_SECONDS or done >= total:
            last[0] = now
            client.hset(key, mapping={"state": "running", "done": done, "total": total,
                                      "updated_at": time.time()})

    client.hset(key, mapping={"state": "running", "done": 0, "total": 0,
                              "started_at": time.time(), "updated_at": time.time()})
    try:
        report = rebuild(project, progress=progress, lock_timeout=config.lock_timeout * 4)
    except RebuildBusy:  # another rebuild replays the same log: nothing to add, no retry
        client.hset(key, mapping={"state": "skipped: another rebuild is running",
                                  "updated_at": time.time()})
        logger.info("project %s: rebuild skipped, another one is running", name)
        return {"project": name, "skipped": True}
    except BaseException as error:
        client.hset(key, mapping={"state": f"failed: {error.__class__.__name__}",
                                  "updated_at": time.time()})
        raise
    client.hset(key, mapping={"state": "done", "generation": report.generation,
                              "done": report.events, "total": report.events,
                              "seconds": round(report.seconds, 3), "updated_at": time.time()})
    logger.info("project %s: rebuilt generation %d from %d events in %.2fs", name,
                report.generation, report.events, report.seconds)
    return {"project": name, "generation": report.generation, "events": report.events}
