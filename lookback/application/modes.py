"""The mode, read once: embedded (no Redis: the reader writes its own indexes) or service
(``redis_url`` set: workers write them). Every other module asks ``mode_of`` or is
handed the ``Keeper`` ``open_keeper`` chose."""

from __future__ import annotations

from lookback.application.keeping import EmbeddedKeeper, Keeper, Mode, ServiceKeeper
from lookback.freshness import engine_for
from lookback.settings import Settings


def mode_of(settings: Settings) -> Mode:
    """The mode ``settings`` run in: the one place it is read."""
    return "service" if settings.service_mode else "embedded"


def open_keeper(settings: Settings) -> Keeper:
    """The keeper of a reader process in ``settings``' mode, started (its tailer is
    started apart, by ``lookback serve``)."""
    if mode_of(settings) == "service":
        return ServiceKeeper(settings)
    return EmbeddedKeeper(engine_for(settings))


__all__ = ["Keeper", "Mode", "mode_of", "open_keeper"]
