"""The one progress display of the long commands (``index``, ``index --embed``, ``reindex``).

A tqdm bar on stderr with the rate and the time left, only when stderr is a terminal
and ``--quiet`` was not given: a pipe or a log file gets no progress lines, only the
command's summary. A ticker thread redraws the bar every ``REDRAW_SECONDS``, so its
elapsed time and rate keep moving while one long step runs (a large batch, the final
sync) instead of the terminal looking stuck.
"""

from __future__ import annotations

import os
import sys
import threading
from types import TracebackType
from typing import Any, TextIO

#: How often the ticker redraws the bar (seconds).
REDRAW_SECONDS = 0.25


class Progress:
    """Progress towards ``total`` (bytes with ``unit="B"``, else items of ``unit``; None:
    told later, by ``reach``)."""

    def __init__(self, total: int | None, *, what: str, unit: str = "B", quiet: bool = False,
                 stream: TextIO | None = None) -> None:
        stream = stream or sys.stderr
        self.bar: Any = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if quiet or not stream.isatty():
            return
        from tqdm import tqdm

        try:  # a terminal that does not say its size (0 x 0: tqdm would draw nothing)
            size = os.get_terminal_size(stream.fileno())
            sized = size.columns > 0 and size.lines > 0
        except (OSError, ValueError):
            sized = False
        self.bar = tqdm(total=total, desc=what, unit=unit, unit_scale=True,
                        unit_divisor=1024 if unit == "B" else 1000, file=stream,
                        dynamic_ncols=sized, ncols=None if sized else 80,
                        nrows=None if sized else 24, mininterval=0.2, smoothing=0.1)
        self._ticker = threading.Thread(target=self._tick, name="lookback-progress",
                                        daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(REDRAW_SECONDS):
            self.bar.refresh()

    def reach(self, done: int, note: str | None = None, total: int | None = None) -> None:
        """Move the bar to ``done`` (never back), with ``note`` after the figures."""
        if self.bar is None:
            return
        if total is not None:
            self.bar.total = total
        if note is not None:
            self.bar.set_postfix_str(note, refresh=False)
        if done > self.bar.n:
            self.bar.update(done - self.bar.n)

    def count(self, done: int, total: int) -> None:
        """``reach`` for a callback that counts ``done`` of ``total``."""
        self.reach(done, total=total)

    def close(self) -> None:
        self._stop.set()
        if self._ticker is not None:  # a redraw under way ends before the bar goes
            self._ticker.join()
            self._ticker = None
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()
