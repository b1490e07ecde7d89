"""Service-mode figures for ``lookback status``: the Redis side of every project.

What a project's log, cursor and set-aside events look like in Redis, and how
dramatiq keeps its queues (``<namespace>:<queue>.msgs``, ``.DQ.msgs`` for delayed
retries, ``.XQ`` for dead letters: dramatiq's Redis broker layout, read here so
nothing outside ``workers`` has to know it).
"""

from __future__ import annotations

import json
from typing import Any

import apsw
import redis

from lookback.index.layout import ProjectNotFound, find_project
from lookback.index.store import IndexUnavailable, open_reader, read_meta
from lookback.workers.apply import CURSOR_META
from lookback.workers.config import BACKGROUND_QUEUE, INDEX_QUEUE, ServiceConfig, redis_client
from lookback.workers.log import START, id_millis
from lookback.workers.owner import is_mine, owner_of
from lookback.workers.port import RedisPort, entries, text


def add_service_status(config: ServiceConfig, report: dict[str, Any]) -> None:
    """Add ``service_*`` keys to each project of ``report`` and per-queue figures.

    An unreachable Redis is reported (``report["redis"]["error"]``), not raised.
    """
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
            name = text(raw)
            if name not in known:  # registered by a producer, not indexed here yet
                registered = client.hget(config.projects_key, name)
                if registered is None:  # HKEYS listed it; entries are never removed
                    continue
                info = json.loads(registered)
                report["projects"].append({"project": name, "cwd": info.get("cwd"),
                                           "namespace": info.get("namespace", ""),
                                           "state": "not indexed yet"})
        for project in report["projects"]:
            project.update(project_figures(config, client, project, now_ms))
        report["queues"] = {queue: queue_figures(config, client, queue)
                            for queue in (INDEX_QUEUE, BACKGROUND_QUEUE)}
    finally:
        client.close()


def project_figures(config: ServiceConfig, client: RedisPort, project: dict[str, Any],
                    now_ms: int) -> dict[str, Any]:
    name = project["project"]
    stream = config.log_key(name)
    cursor = index_cursor(config, name)
    length = int(client.xlen(stream))
    applied_left = entries(client, stream, min="-", max=cursor, count=length or 1) \
        if cursor != START and length else []
    first = entries(client, stream, min=f"({cursor}", max="+", count=1)
    lag_seconds = (now_ms - id_millis(first[0][0])) / 1000 if first else 0.0
    figures: dict[str, Any] = {
        "service_log_length": length,
        "service_cursor": cursor,
        "service_lag_events": length - len(applied_left),
        "service_lag_seconds": round(max(lag_seconds, 0.0), 3),
        "service_set_aside": int(client.hlen(config.poison_key(name))),
    }
    owner = owner_of(config, client, name)
    if owner is not None:  # which host applies it (workers.owner)
        here = " (this host)" if is_mine(config, owner) else ""
        figures["service_owner"] = owner.id + here + (" — paused for a move" if owner.paused
                                                      else "")
    reindex = client.hgetall(config.reindex_key(name))
    if reindex:
        info = {text(k): text(v) for k, v in reindex.items()}
        done, total = int(float(info.get("done", 0))), int(float(info.get("total", 0)))
        progress = f"{info.get('state')} {done:,}/{total:,} events"
        figures["service_reindex"] = progress
    return figures


def queue_figures(config: ServiceConfig, client: RedisPort, queue: str) -> dict[str, int]:
    """Depth (queued or in progress), delayed (retries waiting) and dead letters."""
    base = f"{config.dramatiq_namespace}:{queue}"
    return {"depth": int(client.hlen(f"{base}.msgs")),
            "delayed": int(client.hlen(f"{base}.DQ.msgs")),
            "dead_letters": int(client.zcard(f"{base}.XQ"))}


def index_cursor(config: ServiceConfig, name: str) -> str:
    """The last stream id applied to this host's index of ``name`` (START: none)."""
    try:
        path = find_project(config.home, name).index_path()
        if path is None:  # find_project saw one: gone since (a rebuild's switch)
            return START
        connection = open_reader(path)
    except (ProjectNotFound, IndexUnavailable):
        return START
    try:
        return read_meta(connection, CURSOR_META) or START
    except apsw.Error:  # a damaged index: its own status line says so
        return START
    finally:
        connection.close()


def _millis(client: RedisPort) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def _redact(url: str) -> str:
    """The URL without a password."""
    if "@" not in url:
        return url
    scheme, _, rest = url.partition("://")
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
