"""The one bounded memo every long-lived part of Lookback keeps its derived values in.

A thin, thread-safe face over ``cachetools.LRUCache``: the least recently used
item goes first once the memo holds ``max_size`` items (or, with ``sizeof``, once
the items' total size passes ``max_size``). It lives in the lowest layer that
memoizes (``index``), so the reader, the server and the layout helpers all share
one utility instead of hand-written LRU lists.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from cachetools import LRUCache

V = TypeVar("V")


class Memo(Generic[V]):
    """A bounded LRU memo, safe to share between threads.

    ``sizeof`` measures an item (default: every item counts 1); an item larger than
    the whole memo is simply not kept.
    """

    def __init__(self, max_size: int, *, sizeof: Callable[[V], int] | None = None) -> None:
        self.max_size = max(0, int(max_size))
        self._items: LRUCache[Hashable, V] = LRUCache(max(1, self.max_size), getsizeof=sizeof)
        self._sizeof = sizeof
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
            return value

    def put(self, key: Hashable, value: V) -> None:
        if not self.max_size:
            return
        if self._sizeof is not None and self._sizeof(value) > self.max_size:
            return
        with self._lock:
            self._items[key] = value

    def pop(self, key: Hashable) -> V | None:
        with self._lock:
            return self._items.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
