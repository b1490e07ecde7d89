"""Nudges: the dramatiq messages that say "project K has new events" and nothing more.

A nudge carries no events, so a duplicate, late or reordered nudge is harmless: the
actor applies whatever the project's stream holds after the index's cursor. The
``nudge:K`` flag (``SET NX PX``) keeps at most one nudge per project in flight; the
actor clears the flag *before* it reads the stream, so an event added after that
read always comes with a fresh nudge.
"""

from __future__ import annotations

import threading
from typing import Any

from lookback.workers.config import BACKGROUND_QUEUE, INDEX_QUEUE, ServiceConfig
from lookback.workers.owner import alive, my_queues, owner_of
from lookback.workers.port import RedisPort

APPLY_ACTOR = "apply_project"
REBUILD_ACTOR = "rebuild_project"

_brokers: dict[tuple[str, str], Any] = {}
_brokers_lock = threading.Lock()


def broker_for(config: ServiceConfig) -> Any:
    """The process's dramatiq Redis broker for ``config`` (made once, then reused)."""
    from dramatiq.brokers.redis import RedisBroker

    key = (config.redis_url, config.dramatiq_namespace)
    with _brokers_lock:
        broker = _brokers.get(key)
        if broker is None:
            broker = RedisBroker(url=config.redis_url, namespace=config.dramatiq_namespace,
                                 heartbeat_timeout=15_000)
            broker.declare_queue(INDEX_QUEUE)
            broker.declare_queue(BACKGROUND_QUEUE)
            for queue in my_queues(config):  # this host's own (workers.owner)
                broker.declare_queue(queue)
            _brokers[key] = broker
        return broker


def send(config: ServiceConfig, actor: str, queue: str, project: str,
         delay_ms: int | None = None) -> None:
    """Enqueue ``actor(project)`` on ``queue`` without importing the actor module."""
    import dramatiq

    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=queue, actor_name=actor, args=(project,), kwargs={}, options={})
    broker_for(config).enqueue(message, delay=delay_ms)


def nudge(config: ServiceConfig, client: RedisPort, project: str, *, force: bool = False) -> bool:
    """Ask a worker to apply ``project``'s new events; False when one is already asked
    (or the project is paused for a move).

    The nudge goes to the owner's own queue, or to the shared one when the project
    has no owner yet or its owner's lease is gone (the first live worker to apply
    it claims it: workers.owner)."""
    fresh = client.set(config.nudge_key(project), "1", nx=True, px=config.nudge_ttl_ms)
    if not fresh and not force:
        return False
    owner = owner_of(config, client, project)
    if owner is not None and owner.paused:
        return False
    live = owner is not None and alive(config, client, owner)
    send(config, APPLY_ACTOR, owner.queue if owner is not None and live else INDEX_QUEUE,
         project)
    return True


def request_rebuild(config: ServiceConfig, project: str) -> None:
    """Rebuild ``project`` on this host (the one holding its index folder)."""
    send(config, REBUILD_ACTOR, my_queues(config)[1], project)
