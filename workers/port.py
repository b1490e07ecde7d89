"""The small typed port the workers use in front of Redis.

Only the commands Lookback sends are listed, with the shapes it relies on, so a
reader of ``workers/`` sees at a glance what the service needs from Redis (hashes,
one stream per project, ``SET NX PX`` flags, ``TIME``, MULTI/EXEC pipelines) and a
type checker catches a call outside it. ``redis.Redis`` satisfies it as it is
(``redis_client`` in workers.config makes one, and mypy checks it against this port
there); tests pass the real client too. The signatures are redis-py's own, narrowed
only where Lookback's calls are narrower: what a command may return is redis-py's
union (``text`` and ``entries`` narrow it), what it accepts is at least redis-py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

#: What Redis returns for keys and values: bytes (the client does not decode), typed
#: as redis-py types it.
Raw = bytes | str
#: What the client accepts as a key or value (redis-py's ``EncodableT``).
Encodable = bytes | bytearray | memoryview | str | int | float
#: One entry of an XRANGE reply as redis-py types it: its parser, shared with XCLAIM,
#: may give ``(None, None)`` for a deleted entry, which XRANGE itself never returns.
StreamEntry = tuple[Raw | None, dict[Raw, Raw] | None]


class RedisPipeline(Protocol):
    """A MULTI/EXEC block: commands queue until ``execute``."""

    def xadd(self, name: str, fields: dict[Encodable, Encodable]) -> Any: ...
    def hset(self, name: str, key: str, value: str) -> Any: ...
    def hdel(self, name: str, *keys: str) -> Any: ...
    def set(self, name: str, value: str) -> Any: ...
    def xtrim(self, name: str, *, minid: str, approximate: bool) -> Any: ...
    def execute(self) -> list[Any]: ...
    def __enter__(self) -> RedisPipeline: ...
    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None, /) -> None: ...


@runtime_checkable
class RedisPort(Protocol):
    """The Redis commands of Lookback's service mode."""

    # flags and claims
    def set(self, name: str, value: str, *, nx: bool = False, px: int | None = None
            ) -> bool | Raw | None: ...
    def get(self, name: str) -> Raw | None: ...
    def delete(self, *names: str) -> int: ...
    def expire(self, name: str, time: int) -> bool: ...
    def time(self) -> tuple[int, int]: ...
    def exists(self, *names: str) -> int: ...
    #: Lua scripts: the check-and-set steps of leases and takeovers (workers.owner)
    def eval(self, script: str, numkeys: int, *keys_and_args: str) -> Any: ...

    # hashes: projects, file states, poison, failures, reindex progress
    def hget(self, name: str, key: str) -> Raw | None: ...
    def hset(self, name: str, key: str | None = None, value: str | None = None, *,
             mapping: Mapping[Encodable, Encodable] | None = None) -> int: ...
    def hdel(self, name: str, *keys: str) -> int: ...
    def hincrby(self, name: str, key: str, amount: int = 1) -> int: ...
    def hkeys(self, name: str) -> list[Raw]: ...
    def hlen(self, name: str) -> int: ...
    def hgetall(self, name: str) -> dict[Raw, Raw]: ...

    # the per-project event stream
    def xlen(self, name: str) -> int: ...
    def xrange(self, name: str, min: str = "-", max: str = "+", count: int | None = None
               ) -> list[StreamEntry] | None: ...
    def xtrim(self, name: str, maxlen: int | None = None, approximate: bool = True, *,
              minid: str | None = None, limit: int | None = None) -> int: ...

    # dramatiq's dead letters (read by `lookback status`)
    def zcard(self, name: str) -> int: ...

    def pipeline(self, transaction: bool = True) -> RedisPipeline: ...
    def scan_iter(self, match: str | None = None, count: int | None = None
                  ) -> Iterable[Raw]: ...
    def close(self) -> None: ...


def text(value: Raw) -> str:
    """A key or value Redis returned, as text."""
    return value.decode() if isinstance(value, bytes) else value


def entries(client: RedisPort, name: str, min: str = "-", max: str = "+",
            count: int | None = None) -> list[tuple[str, dict[Raw, Raw]]]:
    """XRANGE ``name``: each entry's id (as text) and fields, in stream order.

    XRANGE replies with a list of whole entries; the ``None`` redis-py's types allow
    (a deleted entry in an XCLAIM reply) cannot occur here, and is skipped if it did.
    """
    return [(text(stream_id), fields)
            for stream_id, fields in client.xrange(name, min=min, max=max, count=count) or ()
            if stream_id is not None and fields is not None]
