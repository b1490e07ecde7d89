"""Service mode for the CLI: the Redis sink, status figures, background rebuilds.

Thin: what Redis holds and how dramatiq lays out its keys is known only to
``lookback.workers`` (``workers/status.py`` for the figures).

Imported only when a Redis URL is configured (or ``--queue`` is given), so embedded
mode never needs Redis or dramatiq.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from lookback.errors import ForeignProject, UserError
from lookback.index.layout import ProjectDir
from lookback.settings import Settings
from lookback.workers.config import ServiceConfig, ServiceNotConfigured, redis_client
from lookback.workers.nudge import request_rebuild
from lookback.workers.reindex import mark_queued
from lookback.workers.sink import Backoff, RedisSink
from lookback.workers.status import add_service_status


def queue_sink(settings: Settings, *, only_project: str | None = None,
               backoff: Backoff | None = None, keep_held: bool = False) -> RedisSink:
    """The sink ``lookback index --queue`` and ``lookback watch`` publish through
    (``only_project``: it refuses to publish into any other project; ``backoff``: how
    long it retries an unreachable Redis, by default until it answers; ``keep_held``: a
    file is never moved out of the project holding it)."""
    return RedisSink(_config(settings), only_project=only_project, backoff=backoff,
                     keep_held=keep_held)


def nudge_session(settings: Settings, session_file: str, *, project: str | None = None,
                  give_up_after: float | None = None,
                  stop: threading.Event | None = None) -> int:
    """Publish what ``session_file`` gained since it was last read; returns events sent.

    The Pi extension calls this (through ``POST /v1/nudge``) at turn ends and after
    compaction, so a session is indexed promptly even without ``lookback watch``.
    The workers are nudged by the sink as usual. ``project``: the project the request
    was authorized for; a file whose header names another is refused (ForeignProject).
    ``give_up_after`` (seconds) and ``stop`` bound the retrying when Redis cannot be
    reached, quietly (the reader's nudges give up after a few seconds: the next nudge,
    or ``lookback watch``, publishes what this one did not, from the file state Redis
    holds); without them it retries until Redis answers, saying so on stderr.
    """
    from pathlib import Path

    from lookback.ingest.pipeline import ingest_files

    bounded = give_up_after is not None or stop is not None
    backoff = Backoff(give_up_after=give_up_after, stop=stop,
                      say=(lambda line: None) if bounded else None)
    with queue_sink(settings, only_project=project, backoff=backoff) as sink:
        # Redis unreachable raises here (ingest_files would count it against the file).
        sink.backoff.run(lambda _: sink.client.time(), "reaching Redis")
        report = ingest_files([Path(session_file)], sink, strict=True,
                              max_line_bytes=settings.max_line_bytes,
                              excluded=settings.excluded)
    if sink.refused:
        raise ForeignProject("the session file names a project this request was not "
                             "authorized for")
    if report.errors:
        raise UserError(report.errors[0])
    return report.events


def owned_elsewhere(settings: Settings, cwds: Iterable[str]) -> dict[str, str]:
    """The projects among ``cwds`` owned by another worker host than this data
    directory's: cwd -> the owner (``host:home``). Writing them here would make a
    second, stale copy beside the owner's (docs/scaling.md)."""
    from lookback.index.layout import project_key
    from lookback.workers.owner import is_mine, owner_of

    config = _config(settings)
    client = redis_client(config)
    found = {}
    try:
        for cwd in sorted(set(cwds)):
            owner = owner_of(config, client, project_key(cwd, settings.namespace))
            if owner is not None and not is_mine(config, owner):
                found[cwd] = owner.id
    finally:
        client.close()
    return found


def owner_elsewhere(settings: Settings, cwd: str) -> str | None:
    """The worker host (``host:home``) that owns ``cwd``'s project when it is another
    than this data directory's; None when none does or Redis cannot say (fail open)."""
    from lookback.workers.sink import transient_errors

    try:
        return owned_elsewhere(settings, [cwd]).get(cwd)
    except transient_errors():  # Redis down: the plain answer, at once
        return None


def enqueue_rebuilds(settings: Settings, projects: Iterable[ProjectDir]) -> int:
    """Queue a background rebuild of each project; returns how many were queued."""
    config = _config(settings)
    client = redis_client(config)
    count = 0
    try:
        for project in projects:
            mark_queued(config, client, project.name)
            request_rebuild(config, project.name)
            count += 1
    finally:
        client.close()
    return count


def service_status(settings: Settings, report: dict[str, Any]) -> None:
    """Add ``service_*`` keys to each project of ``report`` and per-queue figures."""
    add_service_status(_config(settings), report)


def _config(settings: Settings) -> ServiceConfig:
    try:
        return ServiceConfig.from_settings(settings)
    except ServiceNotConfigured as error:
        raise UserError(str(error)) from None


__all__ = ["enqueue_rebuilds", "nudge_session", "queue_sink", "service_status"]
