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

Liveness and fencing (failover without an operator):

* every worker host holds a **lease**, ``<prefix>lease:<host:home>`` = the token of
  its live instance, ``SET … PX lease_seconds``, renewed by its worker processes
  (``LeaseThread``, a third of the lease) with a check-and-renew Lua script: a second
  instance with the same name finds the lease held and applies nothing (``lookback
  worker`` refuses to start). A project's ownership lives as long as its owner's
  lease: one key renewed per host, not one per project.
* each change of owner INCRs ``<prefix>epoch:<project>`` and writes that **epoch**
  into the owner record, in one Lua script that first checks the old owner is
  unchanged and its lease gone (``claim``), so two hosts cannot both take it.
* a drain remembers the owner record it started under and checks it, with its own
  lease, inside each batch's SQLite transaction before the commit
  (``Applying.check``): a host that was paused (SIGSTOP) past its lease and resumes
  finds a newer epoch and commits nothing; its nudges go to the shared queue.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from lookback.workers.config import BACKGROUND_QUEUE, INDEX_QUEUE, ServiceConfig
from lookback.workers.port import RedisPort, text

logger = logging.getLogger("lookback.workers")

#: The environment variable carrying this worker instance's lease token
#: (``lookback worker`` sets it for the processes it starts).
INSTANCE_ENV = "LOOKBACK_WORKERS_INSTANCE"


class Fenced(RuntimeError):
    """This host's term as the project's owner ended (lease lost or a newer epoch)."""


@dataclass(frozen=True)
class Owner:
    """The host (and index home) that applies a project's events."""

    host: str
    home: str
    since: float = 0.0
    paused: bool = False  # a move in progress: nobody applies until ``take``
    epoch: int = 0  # fencing epoch: INCRed on every change of owner

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
                   bool(data.get("paused", False)), int(data.get("epoch", 0)))


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


# KEYS: owner, epoch, the current owner's lease; ARGV: the owner record read before
# ('' = none), the new owner (JSON), 'force' (take) or ''. Sets the new owner with the
# next epoch unless the record changed meanwhile or (without force) its owner is live.
_TAKE_OVER = """
local current = redis.call('GET', KEYS[1])
if ARGV[3] ~= 'force' then
  if (current or '') ~= ARGV[1] then return current end
  if current and redis.call('EXISTS', KEYS[3]) == 1 then return current end
end
local owner = cjson.decode(ARGV[2])
owner['epoch'] = redis.call('INCR', KEYS[2])
local record = cjson.encode(owner)
redis.call('SET', KEYS[1], record)
return record
"""


def claim(config: ServiceConfig, client: RedisPort, project: str) -> Owner:
    """The project's owner; this host becomes it when it has none, or when its owner's
    lease is gone (a dead host: its projects go to the first live host that asks)."""
    mine = me(config)
    raw = client.get(config.owner_key(project))
    found = None if raw is None else Owner.from_json(raw)
    if found is not None and (found.paused or found.id == mine.id or alive(config, client, found)):
        return found
    record = client.eval(_TAKE_OVER, 3, config.owner_key(project), config.epoch_key(project),
                         config.lease_key((found or mine).id), "" if raw is None else text(raw),
                         mine.to_json(), "")
    owner = Owner.from_json(record)
    if found is not None and owner.id == mine.id:
        logger.warning("project %s: took it over from %s, whose lease expired (epoch %d)",
                       project, found.id, owner.epoch)
    return owner


def alive(config: ServiceConfig, client: RedisPort, owner: Owner) -> bool:
    """True while the owner's host renews its lease."""
    return bool(client.exists(config.lease_key(owner.id)))


def new_instance_token() -> str:
    """A lease token naming this worker instance (machine, pid) for error messages."""
    return f"{socket.gethostname()} pid {os.getpid()} {uuid.uuid4().hex[:8]}"


def instance_token() -> str:
    """This process's lease token: its ``lookback worker``'s, or the machine's name
    (a dramatiq worker started by hand, or a drain run in process)."""
    return os.environ.get(INSTANCE_ENV) or socket.gethostname()


# KEYS: the lease; ARGV: token, ttl ms, this machine's name. Renews (or takes a free)
# lease; returns the other holder's token when another instance holds it (a holder
# named by this machine's name alone is a process of this machine and data directory:
# ``lookback owner --take``, a dramatiq worker started by hand).
_RENEW = """
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] and held ~= ARGV[3] then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""


def renew_lease(config: ServiceConfig, client: RedisPort, token: str | None = None
                ) -> str | None:
    """Renew this host's lease; None when it is ours, else the live holder's token.
    Also lists the host in ``<prefix>hosts`` (what ``lookback status`` reads)."""
    client.hset(config.hosts_key, me(config).id, me(config).queue)
    held = client.eval(_RENEW, 1, config.lease_key(me(config).id), token or instance_token(),
                       str(int(config.lease_seconds * 1000)), socket.gethostname())
    return None if held is None else text(held)


def acquire_lease(config: ServiceConfig, client: RedisPort, token: str, *,
                  sleep: Callable[[float], None] = time.sleep) -> str | None:
    """Take this host's lease for a starting worker, waiting out a dead instance's
    lease (at most ``lease_seconds``); returns the live holder when it stays held."""
    deadline = time.monotonic() + config.lease_seconds + 1.0
    while (holder := renew_lease(config, client, token)) is not None \
            and time.monotonic() < deadline:
        sleep(0.2)
    return holder


class LeaseThread(threading.Thread):
    """Renews this host's lease every third of ``lease_seconds`` inside a worker."""

    def __init__(self, config: ServiceConfig, client: RedisPort) -> None:
        super().__init__(name="lookback-lease", daemon=True)
        self.config = config
        self.client = client
        self.stopping = threading.Event()

    def renew(self) -> None:
        try:
            holder = renew_lease(self.config, self.client)
        except Exception as error:  # Redis blip: the next round tries again
            logger.warning("cannot renew the host lease (%s)", error.__class__.__name__)
            return
        if holder is not None:
            logger.error("host name %s is held by another live worker (%s): this one "
                         "applies nothing; give it its own workers.host", me(self.config).id,
                         holder)

    def run(self) -> None:
        while not self.stopping.wait(self.config.lease_seconds / 3):
            self.renew()

    def stop(self) -> None:
        self.stopping.set()


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
    paused = replace(found, paused=True)
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
        self.term: Owner | None = None  # the owner record this drain applies under

    def allowed(self) -> bool:
        """Renew this host's lease and the drain's record, read the owner: True while
        this host holds its lease and owns the project under the epoch it started with."""
        mine, raw = self.client.eval(
            _APPLYING, 3, self.config.lease_key(me(self.config).id),
            self.config.owner_key(self.project), self.key, instance_token(),
            str(int(self.config.lease_seconds * 1000)), self.token, repr(APPLYING_SECONDS),
            str(int(APPLYING_SECONDS) * 2), socket.gethostname())
        self.owner = None if raw is None else Owner.from_json(raw)
        if self.owner is None or self.owner.paused or not is_mine(self.config, self.owner) \
                or not mine:
            return False
        if self.term is None:
            self.term = self.owner
        return self.owner.epoch == self.term.epoch

    def check(self) -> None:
        """``allowed`` or raise ``Fenced`` (called inside a batch's transaction, before
        its commit, so a stale owner's batch rolls back)."""
        if not self.allowed():
            raise Fenced(f"project {self.project}: this host no longer owns it")

    def __enter__(self) -> Applying:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.hdel(self.key, self.token)


# KEYS: this host's lease, the owner, the applying hash; ARGV: lease token, lease ms,
# drain token, seconds the drain record lives, the hash's TTL, this machine's name (as
# in _RENEW). One round trip per check.
_APPLYING = """
local held = redis.call('GET', KEYS[1])
local mine = 0
if (not held) or held == ARGV[1] or held == ARGV[6] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  mine = 1
end
local now = redis.call('TIME')
redis.call('HSET', KEYS[3], ARGV[3], tostring(now[1] + now[2] / 1e6 + tonumber(ARGV[4])))
redis.call('EXPIRE', KEYS[3], ARGV[5])
return {mine, redis.call('GET', KEYS[2])}
"""


def _redis_seconds(client: RedisPort) -> float:
    """Redis's clock, so that every host agrees on when a record expires."""
    seconds, micros = client.time()
    return seconds + micros / 1e6


def take(config: ServiceConfig, client: RedisPort, project: str) -> Owner:
    """Make this host the owner of ``project`` (the end of a move, or a first claim),
    under a new epoch: a drain of the previous owner still in flight commits nothing.
    Renews this host's lease, so no other host takes it before its worker starts."""
    renew_lease(config, client)
    return Owner.from_json(client.eval(
        _TAKE_OVER, 3, config.owner_key(project), config.epoch_key(project),
        config.lease_key(me(config).id), "", me(config).to_json(), "force"))
