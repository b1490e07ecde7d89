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
from lookback.workers.event_stream import START, id_millis, trimmed_past
from lookback.workers.owner import Owner, alive, is_mine, owner_of
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
        report["hosts"] = host_figures(config, client, report["projects"])
        report["service_problems"] = problems(config, report)
    finally:
        client.close()


def project_figures(config: ServiceConfig, client: RedisPort, project: dict[str, Any],
                    now_ms: int) -> dict[str, Any]:
    name = project["project"]
    stream = config.log_key(name)
    owner = owner_of(config, client, name)
    if owner is None or is_mine(config, owner):
        cursor = index_cursor(config, name)
    else:  # another host's index: the cursor its owner recorded
        applied = client.get(config.applied_key(name))
        cursor = START if applied is None else text(applied)
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
    if owner is not None:  # which host applies it (workers.owner)
        here = " (this host)" if is_mine(config, owner) else ""
        live = alive(config, client, owner)
        figures["service_owner"] = owner.id + here + (
            " — paused for a move" if owner.paused
            else "" if live else " — lease expired: no live worker renews it")
        figures["service_owner_live"] = live
        missing = trimmed_past(client, config.trimmed_key(name), cursor) \
            if is_mine(config, owner) else None
        if missing is not None:
            figures["service_missing"] = f"events up to {missing} were applied elsewhere " \
                                         "and trimmed: this index lacks them"
    reindex = client.hgetall(config.reindex_key(name))
    if reindex:
        info = {text(k): text(v) for k, v in reindex.items()}
        done, total = int(float(info.get("done", 0))), int(float(info.get("total", 0)))
        progress = f"{info.get('state')} {done:,}/{total:,} events"
        figures["service_reindex"] = progress
    return figures


def host_figures(config: ServiceConfig, client: RedisPort,
                 projects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per worker host: live (lease held), projects owned, their lag, its own queue, and
    the address its reader registered (None: no live reader other hosts forward to)."""
    hosts: dict[str, dict[str, Any]] = {}
    for raw_id, raw_queue in sorted(client.hgetall(config.hosts_key).items()):
        host_id, queue = text(raw_id), text(raw_queue)
        reader = client.get(config.reader_key(host_id))
        hosts[host_id] = {"live": bool(client.exists(config.lease_key(host_id))),
                          "reader": None if reader is None else text(reader),
                          "this_host": host_id == Owner(config.host, str(config.home)).id,
                          "projects": 0, "lag_events": 0, "lag_seconds": 0.0,
                          "queue": queue, **queue_figures(config, client, queue)}
    for project in projects:
        owner = project.get("service_owner", "").split(" (this host)")[0].split(" — ")[0]
        if owner not in hosts:
            continue
        figures = hosts[owner]
        figures["projects"] += 1
        figures["lag_events"] += project.get("service_lag_events", 0)
        figures["lag_seconds"] = max(figures["lag_seconds"],
                                     project.get("service_lag_seconds", 0.0))
    return hosts


def problems(config: ServiceConfig, report: dict[str, Any]) -> list[dict[str, str]]:
    """Dead owners, orphaned queues, indexes missing trimmed events: each with its fix."""
    found = []
    wait = config.lease_seconds + config.sweep_seconds
    routing = any(host.get("reader") for host in report.get("hosts", {}).values())
    for host_id, host in report.get("hosts", {}).items():
        if host["live"] and routing and host["projects"] and not host.get("reader"):
            found.append({
                "problem": f"worker host {host_id} owns {host['projects']} projects but no "
                           "reader of it is registered: other hosts' readers answer them "
                           "`elsewhere` or `stale`, not forwarded",
                "fix": "run `lookback serve` on TCP on that host with server.public_url set "
                       "(compose.yaml: LOOKBACK_PUBLIC_URL): docs/scaling.md"})
        if host["live"]:
            continue
        if host["projects"]:
            found.append({
                "problem": f"worker host {host_id} is dead (its lease expired) and still owns "
                           f"{host['projects']} projects ({host['lag_events']} events waiting)",
                "fix": f"a live `lookback worker` takes them over within ~{wait:.0f} s; if none "
                       "runs, start one (any host; with workers.keep_log off, copy the dead "
                       "host's project folders to it first: docs/scaling.md)"})
        if host["depth"] or host["delayed"]:
            keys = " ".join(f"{config.dramatiq_namespace}:{host['queue']}{suffix}"
                            for suffix in ("", ".msgs", ".DQ", ".DQ.msgs"))
            found.append({
                "problem": f"queue {host['queue']} of dead host {host_id} holds "
                           f"{host['depth'] + host['delayed']} nudges no worker reads (nothing "
                           "is lost: the events are in the streams, the sweeper nudges the "
                           "projects' live owners)",
                "fix": f"start that host's worker again, or drop them: redis-cli DEL {keys}"})
    for project in report.get("projects", []):
        if project.get("service_missing"):
            found.append({
                "problem": f"project {project['project']}: {project['service_missing']}",
                "fix": "copy the project's folder from the host that applied it "
                       f"(`lookback owner {project['project']} --pause`, copy, `--take`: "
                       "docs/scaling.md); turn workers.keep_log on so a new owner never "
                       "lacks events"})
    return found


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
