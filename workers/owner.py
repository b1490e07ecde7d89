"""One owner per project across worker hosts.

Several worker hosts may share one Redis (docs/scaling.md). Each has its own disk,
so a project's events must all be applied on one of them, or each host would hold
part of the project and trim the stream behind the other. The owner is a claim in
Redis, ``<prefix>owner:<project>`` → ``{"host", "home", "queue", "since"}``, set
with ``SET NX`` by the first worker that applies the project; from then on:

* nudges go to the owner's own queue (``lookback-index.<id>``, which only that
  host's workers consume), so the other hosts never see them;
* a worker of another host that gets a nudge anyway (sent before the claim, or
  by an older producer) forwards it to the owner's queue and applies nothing;
* ``lookback status`` shows the owner.

Moving a project on purpose (``lookback owner``): ``--pause`` on any host (the
owner stops applying; events wait in the stream, nothing is trimmed), copy the
project folder to the new host's home, then ``--take`` there: it becomes the
owner and resumes from the cursor kept inside the copied index, so nothing is
lost or applied twice.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass

from lookback.workers.config import BACKGROUND_QUEUE, INDEX_QUEUE, ServiceConfig
from lookback.workers.port import RedisPort


@dataclass(frozen=True)
class Owner:
    """The host (and index home) that applies a project's events."""

    host: str
    home: str
    since: float = 0.0
    paused: bool = False  # a move in progress: nobody applies until ``take``

    @property
    def id(self) -> str:
        return f"{self.host}:{self.home}"

    @property
    def queue(self) -> str:
        """The index queue only this owner's workers consume."""
        return host_queue(INDEX_QUEUE, self.id)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, raw: bytes | str) -> Owner:
        data = json.loads(raw)
        return cls(str(data["host"]), str(data["home"]), float(data.get("since", 0.0)),
                   bool(data.get("paused", False)))


def host_queue(queue: str, owner_id: str) -> str:
    """``queue`` for one host: ``lookback-index.3f2a…`` (dramatiq-safe characters)."""
    return f"{queue}.{hashlib.sha256(owner_id.encode()).hexdigest()[:12]}"


def me(config: ServiceConfig) -> Owner:
    """This host as an owner: its name and index home."""
    return Owner(config.host, str(config.home), since=time.time())


def my_queues(config: ServiceConfig) -> tuple[str, str]:
    """The index and background queues only this host consumes."""
    owner_id = me(config).id
    return host_queue(INDEX_QUEUE, owner_id), host_queue(BACKGROUND_QUEUE, owner_id)


def owner_of(config: ServiceConfig, client: RedisPort, project: str) -> Owner | None:
    raw = client.get(config.owner_key(project))
    return None if raw is None else Owner.from_json(raw)


def claim(config: ServiceConfig, client: RedisPort, project: str) -> Owner:
    """The project's owner, claiming it for this host when it has none yet."""
    mine = me(config)
    if client.set(config.owner_key(project), mine.to_json(), nx=True):
        return mine
    found = owner_of(config, client, project)
    if found is None:  # released between the two calls: try once more
        return claim(config, client, project)
    return found


def is_mine(config: ServiceConfig, owner: Owner) -> bool:
    return owner.id == me(config).id


def pause(config: ServiceConfig, client: RedisPort, project: str) -> Owner | None:
    """Stop every host from applying ``project`` (the start of a move)."""
    found = owner_of(config, client, project)
    if found is None:
        return None
    paused = Owner(found.host, found.home, found.since, paused=True)
    client.set(config.owner_key(project), paused.to_json())
    return paused


def take(config: ServiceConfig, client: RedisPort, project: str) -> Owner:
    """Make this host the owner of ``project`` (the end of a move, or a first claim)."""
    mine = me(config)
    client.set(config.owner_key(project), mine.to_json())
    return mine
