"""Service-mode configuration: the Redis URL, key names, batch limits.

Every Redis key Lookback writes starts with one prefix (``workers.key_prefix``,
default ``lookback:``), so one Redis can serve several Lookback installations.
Inside an installation, projects are told apart by their project key, which hashes
the settings namespace together with the project's cwd: two hosts (or teams) with
the same project path but different namespaces get different streams and indexes.

Keys (``P`` = prefix, ``K`` = project key, see ``index.layout.project_key``)::

    P projects          hash  K -> {"cwd", "namespace"}  (every project ever seen)
    P log:K             stream of events (field ``e``: the event's JSON), the
                        ordered log the worker applies; trimmed once applied
    P files:K           hash  session file path -> FileState JSON (producer state)
    P paths             hash  session file path -> K holding it (a changed cwd moves it)
    P nudge:K           flag: a nudge message for K is in flight (de-duplicates)
    P poison:K          hash  stream id -> set-aside event and reason
    P failures:K        hash  stream id -> failed attempts so far
    P reindex:K         hash  progress of a background rebuild
    P owner:K           the host and index home that applies K, with its fencing
                        epoch (workers.owner)
    P epoch:K           counter: INCR on every change of K's owner (the fencing epoch)
    P lease:H           the live instance of worker host H (``host:home``), ``SET PX``
                        renewed by its workers; gone = its projects may be taken
    P applied:K         the last stream id K's owner applied (a hint for the sweeper
                        and status; the index holds the real cursor)
    P trimmed:K         the last stream id trimmed from log:K (set with the XTRIM): an
                        index whose cursor lies before it lacks events
    P applying:K        hash  drain -> expiry: the drains of K in flight (workers.owner)
    P hosts             hash  host id -> its own index queue (every worker host seen)
    P reader:H          the URL other hosts reach host H's reader at, ``SET PX``
                        renewed by that reader (workers.routes)
    P sweeper           flag: one sweeper round per interval in the whole cluster
                        (workers.sweeper claims it by name, with a TTL)
    P dramatiq:*        dramatiq's own queues
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from lookback.errors import SettingsError
from lookback.settings import DEFAULTS, Settings
from lookback.workers.port import RedisPort

#: The queue fresh appends go through; kept short so appends never wait.
INDEX_QUEUE = "lookback-index"
#: The queue for slow jobs (rebuilds now, embeddings later).
BACKGROUND_QUEUE = "lookback-background"

#: The ``workers`` section's defaults (lookback.settings declares them).
_DEFAULTS = DEFAULTS.workers
DEFAULT_PREFIX = _DEFAULTS.key_prefix


class ServiceNotConfigured(SettingsError, ValueError):
    """Service mode was asked for but no Redis URL is configured."""

    code = "service-not-configured"


@dataclass(frozen=True)
class ServiceConfig:
    """What the producers, the workers and ``lookback status`` share."""

    redis_url: str
    home: Path
    namespace: str = ""
    prefix: str = _DEFAULTS.key_prefix
    batch_events: int = _DEFAULTS.batch_events  # events applied per SQLite transaction
    batch_bytes: int = _DEFAULTS.batch_bytes  # ... or fewer, when they are large
    drain_seconds: float = _DEFAULTS.drain_seconds  # a nudge hands over after this long
    max_failures: int = _DEFAULTS.max_failures  # attempts before an event is set aside
    lock_timeout: float = _DEFAULTS.lock_timeout  # waiting for the project's writer lock
    nudge_ttl_ms: int = 10_000  # a lost nudge is re-sent after this long
    sweep_seconds: float = _DEFAULTS.sweep_seconds
    reindex_on_start: bool = _DEFAULTS.reindex_on_start
    #: this worker host's name in project ownership claims (workers.owner)
    host: str = "localhost"
    #: a host that has not renewed its lease for this long loses its projects
    lease_seconds: float = _DEFAULTS.lease_seconds
    #: keep every event in the stream (never trim): what a new owner rebuilds from
    keep_log: bool = _DEFAULTS.keep_log

    @classmethod
    def from_settings(cls, settings: Settings) -> ServiceConfig:
        if not settings.redis_url:
            raise ServiceNotConfigured(
                "service mode needs a Redis: set LOOKBACK_REDIS_URL (e.g. redis://localhost:6379/0)"
                " or redis_url in the settings file")
        workers = settings.workers
        prefix = workers.key_prefix or _DEFAULTS.key_prefix
        return cls(
            redis_url=settings.redis_url, home=settings.home, namespace=settings.namespace,
            prefix=prefix if prefix.endswith(":") else prefix + ":",
            batch_events=workers.batch_events, batch_bytes=workers.batch_bytes,
            drain_seconds=workers.drain_seconds, max_failures=workers.max_failures,
            lock_timeout=workers.lock_timeout, sweep_seconds=workers.sweep_seconds,
            reindex_on_start=workers.reindex_on_start,
            host=workers.host or socket.gethostname(),
            lease_seconds=workers.lease_seconds, keep_log=workers.keep_log,
        )

    # Key names ------------------------------------------------------------------

    @property
    def projects_key(self) -> str:
        return f"{self.prefix}projects"

    @property
    def paths_key(self) -> str:
        return f"{self.prefix}paths"

    @property
    def hosts_key(self) -> str:
        return f"{self.prefix}hosts"

    @property
    def dramatiq_namespace(self) -> str:
        return f"{self.prefix}dramatiq"

    def log_key(self, project: str) -> str:
        return f"{self.prefix}log:{project}"

    def files_key(self, project: str) -> str:
        return f"{self.prefix}files:{project}"

    def nudge_key(self, project: str) -> str:
        return f"{self.prefix}nudge:{project}"

    def poison_key(self, project: str) -> str:
        return f"{self.prefix}poison:{project}"

    def failures_key(self, project: str) -> str:
        return f"{self.prefix}failures:{project}"

    def reindex_key(self, project: str) -> str:
        return f"{self.prefix}reindex:{project}"

    def owner_key(self, project: str) -> str:
        return f"{self.prefix}owner:{project}"

    def applying_key(self, project: str) -> str:
        return f"{self.prefix}applying:{project}"

    def epoch_key(self, project: str) -> str:
        return f"{self.prefix}epoch:{project}"

    def applied_key(self, project: str) -> str:
        return f"{self.prefix}applied:{project}"

    def trimmed_key(self, project: str) -> str:
        return f"{self.prefix}trimmed:{project}"

    def lease_key(self, owner_id: str) -> str:
        return f"{self.prefix}lease:{owner_id}"

    def reader_key(self, owner_id: str) -> str:
        return f"{self.prefix}reader:{owner_id}"


def redis_client(config: ServiceConfig, *, timeout: float = 10.0) -> RedisPort:
    """A Redis client for ``config`` (imported here: embedded mode never needs redis);
    ``timeout``: how long a command may wait (a reader's lookups wait little)."""
    import redis

    return redis.Redis.from_url(config.redis_url, socket_timeout=timeout,
                                socket_connect_timeout=min(timeout, 5.0),
                                health_check_interval=30)
