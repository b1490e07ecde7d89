"""Apply a project's Redis stream to its index: the work behind every nudge.

``drain`` takes the project's writer lock (``ProjectWriter``: one writer per project
by construction), reads the stream after the cursor stored in the index, and applies
it in bounded batches, checking inside each batch's transaction, just before its
commit, and before each trim that this host still owns the project under the epoch
it started with (a move pauses it, a dead host's lease expires: see workers.owner).
Each batch's rows and the new cursor commit in one ``BEGIN IMMEDIATE`` transaction, and every event
carries its stream id as source id, so a crash anywhere means the next drain repeats
at most an uncommitted batch, and nothing is applied twice. Applied entries are then
trimmed from the stream.

Poison events — undecodable, or failing ``max_failures`` times — are set aside in
the project's ``poison`` hash (shown by ``lookback status``) and skipped; the
project's other events go on. So is an event that names another project than the
stream's (its header's cwd, as read when it was published) or that was published under
a request's grant for another project (``workers.event_stream.GRANT_FIELD``): counted in
``refused``, never applied. Other errors (SQLite busy, Redis down, disk full)
propagate so dramatiq retries the nudge with backoff.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NotRequired, TypedDict

import apsw

from lookback.errors import ForeignProject, NotFound
from lookback.index.layout import project_key
from lookback.index.project import ProjectWriter
from lookback.index.store import read_meta, write_meta
from lookback.index.writer import BAD_EVENT_ERRORS
from lookback.ingest.events import Event, EventError
from lookback.workers.config import ServiceConfig
from lookback.workers.event_stream import START, StreamItem, read_after, trim_through, trimmed_past
from lookback.workers.nudge import APPLY_ACTOR, send
from lookback.workers.owner import Applying, Fenced, Owner, claim, is_mine
from lookback.workers.port import RedisPort

logger = logging.getLogger("lookback.workers")

#: The index's meta key holding the last applied stream id.
CURSOR_META = "redis_cursor"

#: Errors that say "this event cannot be applied" rather than "try again later".
APPLY_ERRORS: tuple[type[BaseException], ...] = BAD_EVENT_ERRORS


class UnknownProject(NotFound, LookupError):
    """A nudge for a project no producer has registered."""

    code = "unknown-project"


@dataclass
class DrainReport:
    project: str
    applied: int = 0
    batches: int = 0
    set_aside: int = 0
    refused: int = 0  # of set_aside: events for another project than the stream's
    cursor: str = START
    more: bool = False  # stopped at the time limit with events left
    skipped: str | None = None  # not applied here: owned by another host, or paused


class ProjectInfo(TypedDict):
    """A project's registration in Redis, as ``workers.sink`` publishes it."""

    cwd: str
    namespace: NotRequired[str]


def project_info(config: ServiceConfig, client: RedisPort, project: str) -> ProjectInfo:
    """The registered cwd and namespace of ``project`` (checked against its key)."""
    raw = client.hget(config.projects_key, project)
    if raw is None:
        raise UnknownProject(f"no project {project!r} registered in Redis")
    info: ProjectInfo = json.loads(raw)
    if project_key(info["cwd"], info.get("namespace", "")) != project:
        raise UnknownProject(f"project {project!r} is registered under a different key")
    return info


def drain(config: ServiceConfig, client: RedisPort, project: str, *,
          on_batch: Callable[[int], None] | None = None) -> DrainReport:
    """Apply everything after the project's cursor, batch by batch, for up to
    ``config.drain_seconds``; ``report.more`` says the caller should nudge again.

    The drain is recorded in Redis while it runs, and ownership is checked before
    every batch and every trim (``workers.owner.Applying``): a drain that finds the
    project paused or owned elsewhere stops there, and ``lookback owner --pause``
    waits for it."""
    info = project_info(config, client, project)
    owner = claim(config, client, project)  # one host applies a project (workers.owner)
    if owner.paused or not is_mine(config, owner):
        return _leave_alone(config, project, owner)
    with Applying(config, client, project) as applying:
        if not applying.allowed():  # paused or moved since the claim
            return _leave_alone(config, project, applying.owner)
        client.delete(config.nudge_key(project))  # before reading: later adds nudge again
        report = DrainReport(project)
        deadline = time.monotonic() + config.drain_seconds
        stream = config.log_key(project)
        with ProjectWriter(config.home, info["cwd"], namespace=info.get("namespace", ""),
                           lock_timeout=config.lock_timeout) as writer:
            report.cursor = read_meta(writer.connection, CURSOR_META) or START
            missing = trimmed_past(client, config.trimmed_key(project), report.cursor)
            if missing is not None:  # applying the rest would serve a partial index
                logger.error("project %s: events up to %s were trimmed from Redis after "
                             "this index's cursor %s (applied on another host); applying "
                             "nothing (docs/scaling.md)", project, missing, report.cursor)
                report.skipped = f"missing events up to {missing}"
                return report
            while True:
                items = read_after(client, stream, report.cursor,
                                   max_events=config.batch_events,
                                   max_bytes=config.batch_bytes)
                if not items:
                    break
                try:  # the owner is checked inside the batch's transaction (fencing)
                    report.cursor = _apply_items(config, client, project, writer, items,
                                                 report, applying.check,
                                                 namespace=info.get("namespace", ""))
                except Fenced:
                    return _stopped(config, project, applying.owner, report)
                report.batches += 1
                if not applying.allowed():  # the batch stays in the stream for the next owner
                    return _stopped(config, project, applying.owner, report)
                _applied(config, client, project, report.cursor)
                if on_batch is not None:
                    on_batch(report.batches)
                if time.monotonic() >= deadline:
                    report.more = True
                    break
            if not report.more and applying.allowed():
                _applied(config, client, project, report.cursor)  # after a crash before a trim
    _log(report)
    return report


def _applied(config: ServiceConfig, client: RedisPort, project: str, cursor: str) -> None:
    """Record the applied cursor in Redis (the sweeper's and status's hint), and trim
    the stream through it unless every event is kept for a new owner (keep_log)."""
    if cursor == START:
        return
    client.set(config.applied_key(project), cursor)
    if not config.keep_log:
        trim_through(client, config.log_key(project), cursor, config.trimmed_key(project))


def _stopped(config: ServiceConfig, project: str, owner: Owner | None,
             report: DrainReport) -> DrainReport:
    """A drain that found the project paused or moved between two batches."""
    report.skipped = _leave_alone(config, project, owner).skipped
    _log(report)
    return report


def _log(report: DrainReport) -> None:
    if report.applied or report.set_aside:
        logger.info("project %s: applied %d events in %d batches, %d set aside (%d refused)%s",
                    report.project, report.applied, report.batches, report.set_aside,
                    report.refused,
                    f" (stopped: {report.skipped})" if report.skipped else "")


def _leave_alone(config: ServiceConfig, project: str, owner: Owner | None) -> DrainReport:
    """Another host owns the project (forward the nudge to its queue), or it is
    paused for a move (its events wait in the stream)."""
    if owner is None:  # released meanwhile: the next nudge claims it again
        return DrainReport(project, skipped="no owner")
    if owner.paused:
        return DrainReport(project, skipped="paused")
    if is_mine(config, owner):  # another live instance holds this host's lease: not ours
        return DrainReport(project, skipped="this host's lease is held by another instance")
    send(config, APPLY_ACTOR, owner.queue, project)
    logger.info("project %s belongs to %s: nudge forwarded", project, owner.id)
    return DrainReport(project, skipped=f"owned by {owner.id}")


def _apply_items(config: ServiceConfig, client: RedisPort, project: str, writer: ProjectWriter,
                 items: list[StreamItem], report: DrainReport, fence: Callable[[], None], *,
                 namespace: str = "") -> str:
    """Apply one batch in one transaction; returns the cursor after it.

    When the batch fails with an apply error, it is applied again one event at a
    time to find the culprit; each event then commits with its own cursor, so a
    retry starts right at the event that failed.
    """
    decoded = [(item, _decode(item, project, namespace)) for item in items]
    for item, event in decoded:
        if not isinstance(event, Event):
            set_aside(config, client, project, item, event)
            report.set_aside += 1
            report.refused += isinstance(event, ForeignProject)
    good = [(item.stream_id, event) for item, event in decoded if isinstance(event, Event)]
    last = items[-1].stream_id
    try:
        report.applied += writer.write([event for _, event in good],
                                       source_ids=[stream_id for stream_id, _ in good],
                                       extra=_advance(last, fence))
        return last
    except APPLY_ERRORS:
        pass
    for item, event in decoded:
        if not isinstance(event, Event):
            writer.write([], extra=_advance(item.stream_id, fence))
            continue
        try:
            report.applied += writer.write([event], source_ids=[item.stream_id],
                                           extra=_advance(item.stream_id, fence))
        except APPLY_ERRORS as error:
            if not _give_up(config, client, project, item.stream_id, error):
                raise
            set_aside(config, client, project, item, error)
            writer.write([], extra=_advance(item.stream_id, fence))
            report.set_aside += 1
    return last


def _decode(item: StreamItem, project: str, namespace: str) -> Event | EventError | ForeignProject:
    """The stream item's event, or why it is not applied to ``project``: undecodable, or
    it names (or was published under a grant for) another project."""
    try:
        event = Event.from_json(item.raw)
    except EventError as error:
        return error
    if item.grant not in (None, project) or project_key(event.cwd, namespace) != project:
        return ForeignProject("the event names another project than its stream's")
    return event


def _advance(stream_id: str, fence: Callable[[], None]) -> Callable[[apsw.Connection], None]:
    def advance(connection: apsw.Connection) -> None:
        write_meta(connection, CURSOR_META, stream_id)
        fence()  # last, just before the commit: a stale owner's batch rolls back

    return advance


def _give_up(config: ServiceConfig, client: RedisPort, project: str, stream_id: str,
             error: BaseException) -> bool:
    """True when the event is poison: undecodable/invalid, or failed too often."""
    if isinstance(error, EventError):
        return True
    key = config.failures_key(project)
    failures = int(client.hincrby(key, stream_id, 1))
    client.expire(key, 7 * 86400)
    logger.warning("project %s: event %s failed (%s), attempt %d of %d", project, stream_id,
                   error.__class__.__name__, failures, config.max_failures)
    return failures >= config.max_failures


def set_aside(config: ServiceConfig, client: RedisPort, project: str, item: StreamItem,
              error: BaseException) -> None:
    """Keep a poison event (idempotently, by stream id) where ``lookback status`` sees it
    (a refused one without its text: it is another project's, kept in that one's log)."""
    record = {"reason": f"{error.__class__.__name__}: {str(error)[:200]}",
              "event": "" if isinstance(error, ForeignProject)
              else item.raw.decode("utf-8", "replace"), "at": time.time()}
    client.hset(config.poison_key(project), item.stream_id, json.dumps(record))
    client.hdel(config.failures_key(project), item.stream_id)
    logger.warning("project %s: set aside event %s (%s)", project, item.stream_id,
                   error.__class__.__name__)
