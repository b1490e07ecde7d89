"""Service mode for the CLI: the Redis sink, status figures, background rebuilds.

Thin: what Redis holds and how dramatiq lays out its keys is known only to
``lookback.workers`` (``workers/status.py`` for the figures).

Imported only when a Redis URL is configured (or ``--queue`` is given), so embedded
mode never needs Redis or dramatiq.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lookback.errors import UserError
from lookback.index.layout import ProjectDir
from lookback.settings import Settings
from lookback.workers.config import ServiceConfig, ServiceNotConfigured, redis_client
from lookback.workers.nudge import request_rebuild
from lookback.workers.reindex import mark_queued
from lookback.workers.sink import RedisSink
from lookback.workers.status import add_service_status


def queue_sink(settings: Settings) -> RedisSink:
    """The sink ``lookback index --queue`` and ``lookback watch`` publish through."""
    return RedisSink(_config(settings))


def nudge_session(settings: Settings, session_file: str) -> int:
    """Publish what ``session_file`` gained since it was last read; returns events sent.

    The Pi extension calls this (through ``POST /v1/nudge``) at turn ends and after
    compaction, so a session is indexed promptly even without ``lookback watch``.
    The workers are nudged by the sink as usual.
    """
    from pathlib import Path

    from lookback.ingest.pipeline import ingest_files

    with queue_sink(settings) as sink:
        report = ingest_files([Path(session_file)], sink, strict=True,
                              max_line_bytes=settings.max_line_bytes)
    if report.errors:
        raise UserError(report.errors[0])
    return report.events


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
