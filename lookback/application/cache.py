"""The answer cache: encoded retrieve answers, keyed by the request and the index watermark.

Pi asks before every model turn, often with the very same inputs, so retrieve answers
are kept in a bounded LRU keyed by the decoded, pinned request
(``query.contract.request.encode_request``: keys a reader ignores do not split it) and
the project's index watermark (live generation file, applied event seq, embeddings seq;
see ``IndexReader.watermark``). Any commit that can change an answer, or a reindex swap,
changes the watermark, so stale answers are never served; they simply age out.

Time is the other input an answer depends on: a request without a message time
(``message_time``, or the latest user message's ``timestamp``) resolves "yesterday",
"ieri" or "last week" against the time of the call. Such a request is answered at one
``now`` the server takes (``ReaderApp``'s clock) and pinned into the request the
engine sees, and its key adds the intervals the message's times resolve to at that
``now`` (``time_key``): after midnight "yesterday" is another day, so another key.
A message that names no time, or names only absolute dates, keys as before.
"""

from __future__ import annotations

from typing import Any

from lookback.index.memo import Memo
from lookback.query.search import times_of


class AnswerCache(Memo[Any]):
    """A bounded, thread-safe LRU of encoded retrieve answers (0: keep none)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)

    @property
    def size(self) -> int:
        """How many answers it may keep."""
        return self.max_size


def watermark(reader: Any, ref: Any) -> tuple[str, int, int] | None:
    """(live index file, applied seq, embeddings seq), or None (do not cache) when the
    project has no readable index."""
    found: tuple[str, int, int] | None = reader.watermark(ref.project)
    return found


def time_key(message: str | None, now_ms: int) -> tuple[tuple[int, int], ...]:
    """The intervals (epoch ms) the times ``message`` names resolve to at ``now_ms``: the
    part of an answer's key that the clock decides (empty: the message names no time)."""
    # the engine's own resolution (memoized): the call that answers reuses it
    return tuple((span.start_ms, span.end_ms) for span in times_of(message, now_ms))
