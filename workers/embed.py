"""Background embedding: the work behind the ``embed_project`` actor, and its nudge.

When semantic retrieval is enabled (``retrieval.semantic = true``, or
``workers.embed = true`` to build vectors for callers that opt in per request),
every apply that added entries nudges ``embed_project`` on the background queue.
The actor embeds, in batches, the project's entries that lack a vector for the
configured embedder (model, dimensions, chunking version), see
:func:`index.embeddings.build_embeddings`. It works in time slices of
``EMBED_SLICE_SECONDS`` and then hands over (re-nudges itself), so a rebuild
queued behind it waits at most one slice, and it holds the project's writer lock
only for each batch's short insert, so appends never wait on a model.

A model change needs nothing special: the new stamp makes every stored vector
stale, the next nudge re-embeds them all in the background, and until then
readers fall back to lexical results with a warning.

The ``embed:K`` flag (``SET NX PX``, like ``nudge:K``) keeps at most one embed
message per project in flight; the actor clears it before it reads the index.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lookback.embedders.port import EmbeddingError
from lookback.embedders.registry import get_embedder
from lookback.index.embeddings import EmbedReport, build_embeddings
from lookback.settings import DEFAULTS, Settings
from lookback.workers.apply import project_info
from lookback.workers.config import ServiceConfig
from lookback.workers.nudge import send
from lookback.workers.owner import my_queues
from lookback.workers.port import RedisPort

logger = logging.getLogger("lookback.workers")

EMBED_ACTOR = "embed_project"
#: Seconds of embedding per message before handing over to whatever is queued.
EMBED_SLICE_SECONDS = 20.0
#: A lost embed message is re-sent by the next apply after this long.
EMBED_FLAG_TTL_MS = 60_000


@dataclass(frozen=True)
class EmbedSettings:
    """Whether workers build vectors, and with which embedder."""

    enabled: bool
    embedder: str = DEFAULTS.retrieval.embedder

    @classmethod
    def from_settings(cls, settings: Settings) -> EmbedSettings:
        enabled = settings.retrieval.semantic or settings.workers.embed
        return cls(enabled, settings.retrieval.embedder)


def embed_key(config: ServiceConfig, project: str) -> str:
    return f"{config.prefix}embed:{project}"


def nudge_embed(config: ServiceConfig, client: RedisPort, project: str, *,
                force: bool = False) -> bool:
    """Ask the background worker to embed ``project``; False when one is already asked."""
    fresh = client.set(embed_key(config, project), "1", nx=True, px=EMBED_FLAG_TTL_MS)
    if not fresh and not force:
        return False
    send(config, EMBED_ACTOR, my_queues(config)[1], project)  # where the index is
    return True


def run_embed(config: ServiceConfig, client: RedisPort, project: str, embedder_name: str, *,
              slice_seconds: float = EMBED_SLICE_SECONDS) -> EmbedReport | None:
    """Embed one slice of ``project``'s pending entries; re-nudge when some are left.

    Returns None (and logs why) when the embedder cannot be loaded: retrying would
    not help, and readers already fall back to lexical results.
    """
    info = project_info(config, client, project)
    client.delete(embed_key(config, project))  # before reading: later applies nudge again
    try:
        embedder = get_embedder(embedder_name)
    except EmbeddingError as error:
        logger.warning("embed project=%s skipped: %s", project, type(error).__name__)
        return None
    report = build_embeddings(config.home, info["cwd"], embedder,
                              namespace=info.get("namespace", ""), time_limit=slice_seconds,
                              lock_timeout=config.lock_timeout)
    logger.info("embed project=%s entries=%d chunks=%d batches=%d pending=%d seconds=%.3f",
                project, report.entries, report.chunks, report.batches, report.pending,
                report.seconds)
    if report.more:
        nudge_embed(config, client, project, force=True)
    return report
