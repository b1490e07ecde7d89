"""Service mode for the CLI: the Redis sink, status figures, background rebuilds.

Imported only when a Redis URL is configured (or ``--queue`` is given), so embedded
mode never needs Redis or dramatiq.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from lookback.errors import UserError
from lookback.index.layout import ProjectDir, ProjectNotFound, find_project
from lookback.index.store import IndexUnavailable, open_reader, read_meta
from lookback.settings import Settings
from lookback.workers.apply import CURSOR_META
from lookback.workers.config import (
    BACKGROUND_QUEUE,
    INDEX_QUEUE,
    ServiceConfig,
    ServiceNotConfigured,
    redis_client,
)
from lookback.workers.log import START, id_millis
from lookback.workers.nudge import request_rebuild
from lookback.workers.reindex import mark_queued
from lookback.workers.sink import RedisSink


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
        report = ingest_files([Path(session_file)], sink, strict=True)
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
    import redis

    config = _config(settings)
    client = redis_client(config)
    report["redis"] = {"url": _redact(config.redis_url), "prefix": config.prefix}
    try:
        now_ms = _millis(client)
    except redis.RedisError as error:
        report["redis"]["error"] = f"unreachable ({error.__class__.__name__})"
        client.close()
        return
    try:
        known = {p["project"] for p in report["projects"]}
        for raw in sorted(client.hkeys(config.projects_key)):
            name = raw.decode()
            if name not in known:  # registered by a producer, not indexed here yet
                info = json.loads(client.hget(config.projects_key, name))
                report["projects"].append({"project": name, "cwd": info.get("cwd"),
                                           "namespace": info.get("namespace", ""),
                                           "state": "not indexed yet"})
        for project in report["projects"]:
            project.update(project_figures(config, client, project, now_ms))
        report["queues"] = {queue: queue_figures(config, client, queue)
                            for queue in (INDEX_QUEUE, BACKGROUND_QUEUE)}
    finally:
        client.close()


def _config(settings: Settings) -> ServiceConfig:
    try:
        return ServiceConfig.from_settings(settings)
    except ServiceNotConfigured as error:
        raise UserError(str(error)) from None


def project_figures(config: ServiceConfig, client: Any, project: dict[str, Any],
                    now_ms: int) -> dict[str, Any]:
    name = project["project"]
    stream = config.log_key(name)
    cursor = _index_cursor(config, name)
    length = int(client.xlen(stream))
    applied_left = client.xrange(stream, min="-", max=cursor, count=length or 1) \
        if cursor != START and length else []
    first = client.xrange(stream, min=f"({cursor}", max="+", count=1)
    lag_seconds = (now_ms - id_millis(first[0][0].decode())) / 1000 if first else 0.0
    figures: dict[str, Any] = {
        "service_log_length": length,
        "service_cursor": cursor,
        "service_lag_events": length - len(applied_left),
        "service_lag_seconds": round(max(lag_seconds, 0.0), 3),
        "service_set_aside": int(client.hlen(config.poison_key(name))),
    }
    reindex = client.hgetall(config.reindex_key(name))
    if reindex:
        info = {k.decode(): v.decode() for k, v in reindex.items()}
        done, total = int(float(info.get("done", 0))), int(float(info.get("total", 0)))
        progress = f"{info.get('state')} {done:,}/{total:,} events"
        figures["service_reindex"] = progress
    return figures


def queue_figures(config: ServiceConfig, client: Any, queue: str) -> dict[str, int]:
    """Depth (queued or in progress), delayed (retries waiting) and dead letters."""
    base = f"{config.dramatiq_namespace}:{queue}"
    return {"depth": int(client.hlen(f"{base}.msgs")),
            "delayed": int(client.hlen(f"{base}.DQ.msgs")),
            "dead_letters": int(client.zcard(f"{base}.XQ"))}


def _index_cursor(config: ServiceConfig, name: str) -> str:
    try:
        connection = open_reader(find_project(config.home, name).index_path())
    except (ProjectNotFound, IndexUnavailable):
        return START
    try:
        return read_meta(connection, CURSOR_META) or START
    finally:
        connection.close()


def _millis(client: Any) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _redact(url: str) -> str:
    """The URL without a password."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"


__all__ = ["enqueue_rebuilds", "queue_sink", "service_status"]
