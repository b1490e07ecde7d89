"""The answer cache: encoded retrieve answers, keyed by the request and the index watermark.

Pi asks before every model turn, often with the very same inputs, so retrieve answers
are kept in a bounded LRU keyed by the whole request body and the project's index
watermark (live generation file + SQLite ``data_version``). Any commit to the index or
a reindex swap changes the watermark, so stale answers are never served; they simply
age out.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

import orjson


class AnswerCache:
    """A bounded, thread-safe LRU of encoded retrieve answers."""

    def __init__(self, size: int) -> None:
        self.size = max(0, int(size))
        self._items: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple) -> Any:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: tuple, value: Any) -> None:
        if not self.size:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


def cache_key(body: dict) -> bytes:
    """The request body, canonical (sorted keys), as bytes."""
    try:
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(body, sort_keys=True).encode()


def watermark(reader: Any, ref: Any) -> tuple | None:
    """(live index file, data_version): changes on every commit and every swap."""
    try:
        holder = reader.project_connection(ref.project)
        with holder.lock:
            connection, path = holder.current()
            version = connection.execute("PRAGMA data_version").fetchone()[0]
        return str(path), version
    except Exception:  # no index yet, or it is being swapped: do not cache
        return None
