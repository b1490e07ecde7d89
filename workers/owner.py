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

``--pause`` returns only when no host applies the project. Every drain records
itself in ``<prefix>applying:<project>`` (``Applying``: a hash of drain → expiry,
renewed before each batch and each trim) and reads the owner *after* renewing it;
``pause`` marks the owner paused and then waits until that hash holds no live
drain. So either a drain's renewal comes first (and the pause waits for the drain
to see the pause and stop) or the drain's read of the owner comes after the pause
(and it applies nothing). A host that died mid-drain stops holding up a pause
when its record expires (``APPLYING_SECONDS``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass

from lookback.workers.config import BACKGROUND_QUEUE, INDEX_QUEUE, ServiceConfig
from lookback.workers.port import RedisPort, text


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


def pause(config: ServiceConfig, client: RedisPort, project: str, *,
          on_wait: Callable[[list[str]], None] | None = None,
          sleep: Callable[[float], None] = time.sleep) -> Owner | None:
    """Stop every host from applying ``project`` (the start of a move); returns once
    no drain of it is in flight anywhere (``on_wait`` hears which ones it waits for)."""
    found = owner_of(config, client, project)
    if found is None:
        return None
    paused = Owner(found.host, found.home, found.since, paused=True)
    client.set(config.owner_key(project), paused.to_json())
    told: list[str] = []
    while drains := in_flight(config, client, project):
        if on_wait is not None and drains != told:
            on_wait(drains)
            told = drains
        sleep(0.05)
    return paused


#: How long a drain's record outlives its last renewal (a host that died mid-drain).
APPLYING_SECONDS = 120.0


def in_flight(config: ServiceConfig, client: RedisPort, project: str) -> list[str]:
    """The hosts with a live drain of ``project`` (expired records are dropped)."""
    key = config.applying_key(project)
    now = _redis_seconds(client)
    live = []
    for token, expiry in client.hgetall(key).items():
        if float(expiry) > now:
            live.append(text(token).rsplit("|", 2)[0])
        else:
            client.hdel(key, text(token))
    return sorted(live)


class Applying:
    """One drain of ``project`` by this host, recorded in Redis while it runs.

    ``allowed()`` before every batch and every trim: it renews the record, then
    reads the owner, and says whether this host may go on (owner, not paused).
    """

    def __init__(self, config: ServiceConfig, client: RedisPort, project: str) -> None:
        self.config = config
        self.client = client
        self.project = project
        self.key = config.applying_key(project)
        self.token = f"{me(config).id}|{os.getpid()}|{uuid.uuid4().hex[:8]}"
        self.owner: Owner | None = None

    def allowed(self) -> bool:
        expiry = _redis_seconds(self.client) + APPLYING_SECONDS
        self.client.hset(self.key, self.token, repr(expiry))
        self.client.expire(self.key, int(APPLYING_SECONDS) * 2)
        self.owner = owner_of(self.config, self.client, self.project)
        return (self.owner is not None and not self.owner.paused
                and is_mine(self.config, self.owner))

    def __enter__(self) -> Applying:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.hdel(self.key, self.token)


def _redis_seconds(client: RedisPort) -> float:
    """Redis's clock, so that every host agrees on when a record expires."""
    seconds, micros = client.time()
    return seconds + micros / 1e6


def take(config: ServiceConfig, client: RedisPort, project: str) -> Owner:
    """Make this host the owner of ``project`` (the end of a move, or a first claim)."""
    mine = me(config)
    client.set(config.owner_key(project), mine.to_json())
    return mine
