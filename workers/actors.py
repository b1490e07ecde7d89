"""The dramatiq actors, and the broker they run on (configured from the settings).

Run them with ``lookback worker`` (or ``dramatiq workers.actors -Q lookback-index``).
``apply_project`` answers nudges on the index queue; ``rebuild_project`` runs on the
background queue so a long rebuild never delays fresh appends, and so does
``embed_project`` (semantic vectors, low priority, in time slices; see
workers.embed). All take only a project key: everything else comes from Redis and
the index, so duplicate, late and reordered messages are harmless.
"""

from __future__ import annotations

import logging

import dramatiq
from dramatiq.middleware import Middleware

from lookback.settings import load_settings
from lookback.workers.apply import UnknownProject, drain
from lookback.workers.config import BACKGROUND_QUEUE, INDEX_QUEUE, ServiceConfig, redis_client
from lookback.workers.embed import EMBED_ACTOR, EmbedSettings, nudge_embed, run_embed
from lookback.workers.nudge import APPLY_ACTOR, REBUILD_ACTOR, broker_for, nudge
from lookback.workers.owner import LeaseThread
from lookback.workers.reindex import run_rebuild
from lookback.workers.sweeper import SweeperThread

logger = logging.getLogger("lookback.workers")

settings = load_settings()
config = ServiceConfig.from_settings(settings)
embedding = EmbedSettings.from_settings(settings)
client = redis_client(config)
broker = broker_for(config)


class SweeperMiddleware(Middleware):
    """Starts the sweeper and the host-lease threads when a worker process boots
    (the lease renewed once first), stops them on shutdown."""

    def __init__(self) -> None:
        self.threads: list[SweeperThread | LeaseThread] = []

    def after_worker_boot(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        lease = LeaseThread(config, redis_client(config))
        lease.renew()
        self.threads = [lease, SweeperThread(config, redis_client(config))]
        for thread in self.threads:
            thread.start()

    def before_worker_shutdown(self, broker: dramatiq.Broker, worker: dramatiq.Worker) -> None:
        for thread in self.threads:
            thread.stop()


broker.add_middleware(SweeperMiddleware())
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name=APPLY_ACTOR, queue_name=INDEX_QUEUE, max_retries=50,
                min_backoff=200, max_backoff=30_000, time_limit=10 * 60_000)
def apply_project(project: str) -> None:
    """Apply ``project``'s pending stream events to its index."""
    try:
        report = drain(config, client, project)
    except UnknownProject as error:
        logger.warning("ignoring a nudge: %s", error)
        return
    if report.more:
        nudge(config, client, project, force=True)  # hand over; other projects go first
    if embedding.enabled and report.applied:
        nudge_embed(config, client, project)


@dramatiq.actor(actor_name=REBUILD_ACTOR, queue_name=BACKGROUND_QUEUE, max_retries=5,
                min_backoff=5_000, max_backoff=300_000, time_limit=24 * 3600_000)
def rebuild_project(project: str) -> None:
    """Rebuild the project folder ``project`` from its event log and swap it in."""
    run_rebuild(config, client, project)


@dramatiq.actor(actor_name=EMBED_ACTOR, queue_name=BACKGROUND_QUEUE, priority=100,
                max_retries=5, min_backoff=5_000, max_backoff=300_000, time_limit=10 * 60_000)
def embed_project(project: str) -> None:
    """Embed a slice of ``project``'s entries that lack a current vector."""
    try:
        run_embed(config, client, project, embedding.embedder)
    except UnknownProject as error:
        logger.warning("ignoring an embed nudge: %s", error)
