"""The answer cache: encoded retrieve answers, keyed by the request and the index watermark.

Pi asks before every model turn, often with the very same inputs, so retrieve answers
are kept in a bounded LRU keyed by the decoded, pinned request
(``query.search.request.encode_request``: keys a reader ignores do not split it) and
the project's index watermark (live generation file, applied event seq, embeddings seq;
see ``IndexReader.watermark``). Any commit that can change an answer, or a reindex swap,
changes the watermark, so stale answers are never served; they simply age out.
"""

from __future__ import annotations

from typing import Any

from lookback.index.memo import Memo


class AnswerCache(Memo[Any]):
    """A bounded, thread-safe LRU of encoded retrieve answers (0: keep none)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)

    @property
    def size(self) -> int:
        """How many answers it may keep."""
        return self.max_size


def watermark(reader: Any, ref: Any) -> tuple | None:
    """(live index file, applied seq, embeddings seq), or None (do not cache) when the
    project has no readable index."""
    return reader.watermark(ref.project)
