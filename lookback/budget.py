"""How the reader process shares its open files: from its real limit, not a setting alone.

A reader holds descriptors for client connections, the read pool's index connections
(``query.search.pool``), the freshness writers (``lookback.freshness``: each index it
writes holds the index, its WAL and shared memory and the event log) and a few of its own
(standard streams, the listener, logs, the session file being read). With the pool
budgeted from ``reader.max_open_files`` alone, a limit lower than that (``ulimit -n 256``
with 400 projects, or 64) let the pool take every descriptor: the writers could open no
file, each request waited the whole freshness contract and appended entries stayed
unindexed. So the budgets come from ``RLIMIT_NOFILE``: connections get their bound
(``connection_limit``), the writers a reserve, the pool what is left (never
more than ``reader.max_open_files``).
"""

from __future__ import annotations

import resource
from dataclasses import asdict, dataclass
from typing import Any

#: Files one index writer holds open: the index, its WAL, its shared memory, the event log.
FILES_PER_WRITER = 4
#: Descriptors the process needs besides those budgeted: standard streams, the listener,
#: log files, the session file a writer reads, a folder being scanned, the manifest store.
OWN_FILES = 24
#: Project writers the freshness engine keeps open at most (fewer under a low limit).
MAX_WRITERS = 8


@dataclass(frozen=True)
class FileBudget:
    """Open files per use; ``limit`` is the process's soft limit (None: unlimited)."""

    limit: int | None
    connections: int
    read_pool: int
    writers: int

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "writer_files": self.writers * FILES_PER_WRITER,
                "own": OWN_FILES}


def connection_limit(configured: int, soft: int | None = None) -> int:
    """``server.max_connections``, and at most a quarter of the open-file limit ``soft``
    (default: this process's; each connection is a descriptor; the indexes, the listener
    and a margin need the rest)."""
    if soft is None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(1, min(configured, soft // 4))


def file_budget(settings: Any, limit: int | None = None) -> FileBudget:
    """The budget under ``limit`` (default: this process's ``RLIMIT_NOFILE`` soft limit)
    for ``settings``' ``server.max_connections`` and ``reader.max_open_files``: the
    writers get up to a quarter of what connections and the process's own files leave
    (at least one writer), the read pool the rest (at least the 3 files of one
    connection)."""
    if limit is None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = None if soft == resource.RLIM_INFINITY else soft
    connections = connection_limit(settings.server.max_connections, limit)
    if limit is None:
        return FileBudget(None, connections, settings.reader.max_open_files, MAX_WRITERS)
    spare = max(0, limit - connections - OWN_FILES)
    writers = max(1, min(MAX_WRITERS, spare // (4 * FILES_PER_WRITER)))
    read_pool = max(3, min(settings.reader.max_open_files, spare - writers * FILES_PER_WRITER))
    return FileBudget(limit, connections, read_pool, writers)
