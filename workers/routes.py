"""Where a project's reader is: any reader answers for any project (docs/scaling.md).

A worker host's reader (``lookback serve`` on TCP, service mode) registers the address
other hosts reach it at beside the host's lease: ``<prefix>reader:<host:home>`` = its
URL, ``SET … PX lease_seconds``, renewed every third of that (``ReaderRegistration``
in ``lookback.server.routing``). A reader asked about a project looks up its owner
(``route``): when another host owns it, it forwards the request to that host's
registered reader. The address comes only from Redis, never from the request.

Costs: one GET of the owner record per request; when another host owns the project,
one more (MGET of the owner's lease and its reader's address).
"""

from __future__ import annotations

from dataclasses import dataclass

from lookback.workers.config import ServiceConfig
from lookback.workers.owner import Owner, is_mine
from lookback.workers.port import RedisPort, text


@dataclass(frozen=True)
class Route:
    """Who owns a project another host holds, and where that host's reader listens."""

    owner: Owner
    live: bool  # the owner's lease is held: it applies the project's events now
    reader: str | None  # the owner's registered reader URL (None: no live reader)


def route(config: ServiceConfig, client: RedisPort, project: str) -> Route | None:
    """The project's route when a host other than this one owns it; None when this
    host owns it or nobody does (the local index is the answer)."""
    raw = client.get(config.owner_key(project))
    if raw is None:
        return None
    owner = Owner.from_json(raw)
    if is_mine(config, owner):
        return None
    lease, reader = client.mget(config.lease_key(owner.id), config.reader_key(owner.id))
    return Route(owner, lease is not None, None if reader is None else text(reader))


def register_reader(config: ServiceConfig, client: RedisPort, url: str) -> None:
    """Record (or renew) this host's reader address for ``lease_seconds``."""
    client.set(config.reader_key(f"{config.host}:{config.home}"), url,
               px=int(config.lease_seconds * 1000))


# KEYS: the reader key; ARGV: the URL this reader registered. Deletes it only while it
# still names this reader (a newer one of the same host may have replaced it).
_FORGET = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def forget_reader(config: ServiceConfig, client: RedisPort, url: str) -> None:
    """Drop this host's reader address (the reader stops)."""
    client.eval(_FORGET, 1, config.reader_key(f"{config.host}:{config.home}"), url)
