"""The per-project event stream in Redis: one Stream per project, outside dramatiq.

Stream ids (``<ms>-<n>``) order the log. The worker keeps its cursor (the last id it
applied) in the project's index, committed with the rows, and trims the stream up to
it afterwards, so the stream holds only what is not applied yet (plus, after a crash
between commit and trim, a few applied entries the next drain skips and trims).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lookback.ingest.events import Event
from lookback.workers.port import Encodable, RedisPipeline, RedisPort, entries

EVENT_FIELD = b"e"
#: The project the request that published the event was authorized for (absent: a
#: producer trusted with every project, ``lookback index``/``watch``): the worker
#: applies the event only when it is the stream's own project.
GRANT_FIELD = b"g"
START = "0-0"


@dataclass
class StreamItem:
    """One stream entry: its id, the raw event JSON (decoded by the worker) and the
    grant it was published under (None: none)."""

    stream_id: str
    raw: bytes
    grant: str | None = None


def add_events(pipe: RedisPipeline, key: str, events: Iterable[Event],
               grant: str | None = None) -> None:
    """Queue one XADD per event on ``pipe`` (the caller's MULTI/EXEC); ``grant``: the
    project the publishing request was authorized for, carried to the worker."""
    for event in events:
        fields: dict[Encodable, Encodable] = {EVENT_FIELD: event.to_json().encode()}
        if grant is not None:
            fields[GRANT_FIELD] = grant.encode()
        pipe.xadd(key, fields)


def read_after(client: RedisPort, key: str, cursor: str, *, max_events: int,
               max_bytes: int, chunk: int = 200) -> list[StreamItem]:
    """Entries after ``cursor``, at most ``max_events`` of them and about ``max_bytes``.

    Reads in chunks so a run of huge events stops early instead of loading a
    thousand of them at once; at least one entry is returned when any is pending.
    """
    items: list[StreamItem] = []
    size = 0
    start = cursor
    while len(items) < max_events and size < max_bytes:
        rows = entries(client, key, min=f"({start}", max="+",
                       count=min(chunk, max_events - len(items)))
        if not rows:
            break
        for stream_id, fields in rows:
            raw = _bytes(fields.get(EVENT_FIELD, b""))
            grant = fields.get(GRANT_FIELD)
            items.append(StreamItem(stream_id, raw, None if grant is None
                                 else _bytes(grant).decode("utf-8", "replace")))
            size += len(raw)
            if size >= max_bytes:
                break
        start = items[-1].stream_id
    return items


def trim_through(client: RedisPort, key: str, cursor: str, mark: str | None = None) -> int:
    """Remove every entry up to and including ``cursor``; returns how many went.
    ``mark``: a key recording ``cursor`` in the same MULTI/EXEC (what ``trimmed_past``
    reads: XTRIM does not move Redis 7.0's ``max-deleted-entry-id``)."""
    if cursor == START:
        return 0
    with client.pipeline(transaction=True) as pipe:
        if mark is not None:
            pipe.set(mark, cursor)
        pipe.xtrim(key, minid=next_id(cursor), approximate=False)
        return int(pipe.execute()[-1])


def trimmed_past(client: RedisPort, mark: str, cursor: str) -> str | None:
    """The last id trimmed from a stream (recorded at ``mark`` by ``trim_through``)
    when it lies after ``cursor``: events an index at ``cursor`` never got (another
    host applied and trimmed them); else None."""
    raw = client.get(mark)
    if raw is None:
        return None
    trimmed = _bytes(raw).decode()
    return trimmed if _order(trimmed) > _order(cursor) else None


def _order(stream_id: str) -> tuple[int, int]:
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def next_id(stream_id: str) -> str:
    """The smallest stream id after ``stream_id``."""
    ms, _, seq = stream_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def id_millis(stream_id: str) -> int:
    return int(stream_id.partition("-")[0])


def _bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value
