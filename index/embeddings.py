"""Semantic vectors in the project index: which entries lack one, storing a batch, building.

Vectors are an opt-in projection (``retrieval.semantic``). Each eligible entry is
split by :func:`index.chunking.weighted_chunks`; each chunk's vector, scaled to the
chunk's weight, is one row of the
``embeddings`` table (see :mod:`index.schema`), stamped with the entry's
``text_hash`` and the :class:`Stamp` (model name, dimensions, chunking version).
A row is *current* when its stamp and text hash match; anything else is stale and
simply never read, so a model change needs no migration: the builder re-embeds
the entries whose vectors are not current, in the background, while readers fall
back to lexical results (``query.semantic``).

Why the builder works in small batches: embedding is slow (MiniLM: milliseconds per
chunk), the project's writer lock is not. Each batch reads its entries from a read
snapshot, embeds them with no lock held, then takes the writer lock only for one
short ``BEGIN IMMEDIATE`` transaction that stores the vectors, so appends wait at
most one batch's insert.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypeVar

import apsw
import numpy as np

from lookback.embedders.port import EmbeddingPort
from lookback.index.chunking import (
    CHUNKING_VERSION,
    DEFAULT_OVERLAP,
    weighted_chunks,
)
from lookback.index.layout import project_dir
from lookback.index.project import ProjectWriter
from lookback.index.store import (
    all_rows,
    driver_errors,
    one_int,
    open_reader,
    read_meta,
    write_meta,
    write_transaction,
)

#: Entries embedded per batch (and per writer transaction).
BATCH_ENTRIES = 64

#: The meta key bumped by every stored batch, so readers know their cached matrix is old.
EMBEDDINGS_SEQ_META = "embeddings_seq"

#: Little-endian float32, whatever the machine.
VECTOR_DTYPE = np.dtype("<f4")

#: Eligible entries that can have a vector: the ones with non-blank text.
EMBEDDABLE = "e.eligible = 1 AND trim(e.text) != ''"

T = TypeVar("T")  # what a read under _with_reader returns


@dataclass(frozen=True)
class Stamp:
    """What a stored vector must have been made with to be compared with a query's."""

    model: str
    dimensions: int
    chunking_version: int = CHUNKING_VERSION

    @classmethod
    def of(cls, embedder: EmbeddingPort) -> Stamp:
        return cls(embedder.name, int(embedder.dimensions))

    def sql(self, alias: str = "v") -> tuple[str, list[object]]:
        """A WHERE fragment matching current rows of ``alias`` (joined to entries ``e``)."""
        return (f"{alias}.text_hash = e.text_hash AND {alias}.model = ? AND "
                f"{alias}.dimensions = ? AND {alias}.chunking_version = ?",
                [self.model, self.dimensions, self.chunking_version])


@dataclass(frozen=True)
class PendingEntry:
    """An eligible entry whose vectors are missing or stale."""

    rowid: int
    session_id: str
    entry_id: str
    text: str
    text_hash: str
    role: str | None = None


@dataclass(frozen=True)
class EntryVectors:
    """The vectors of one entry's chunks, ready to store."""

    entry: PendingEntry
    vectors: np.ndarray  # (chunks, dimensions) float32


@dataclass
class EmbedReport:
    """What one :func:`build_embeddings` call did."""

    entries: int = 0
    chunks: int = 0
    batches: int = 0
    pending: int = 0  # entries still lacking a current vector when it stopped
    seconds: float = 0.0

    @property
    def more(self) -> bool:
        return self.pending > 0


def has_table(connection: apsw.Connection) -> bool:
    """False for an index file written before the embeddings table existed."""
    return connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'embeddings'"
    ).fetchone() is not None


def encode(vector: np.ndarray) -> bytes:
    return np.ascontiguousarray(vector, dtype=VECTOR_DTYPE).tobytes()


def decode(blobs: Sequence[bytes], dimensions: int) -> np.ndarray:
    """Stack stored vectors into a ``(len(blobs), dimensions)`` float32 matrix."""
    if not blobs:
        return np.zeros((0, dimensions), dtype=np.float32)
    matrix = np.frombuffer(b"".join(blobs), dtype=VECTOR_DTYPE)
    return matrix.reshape(len(blobs), dimensions).astype(np.float32, copy=False)


def count_pending(connection: apsw.Connection, stamp: Stamp) -> int:
    """How many embeddable entries lack a current vector."""
    if not has_table(connection):
        return one_int(connection.execute(
            f"SELECT count(*) FROM entries e WHERE {EMBEDDABLE}"))
    current, params = stamp.sql()
    return one_int(connection.execute(
        f"SELECT count(*) FROM entries e WHERE {EMBEDDABLE} AND NOT EXISTS ("
        f"SELECT 1 FROM embeddings v WHERE v.session_id = e.session_id AND "
        f"v.entry_id = e.entry_id AND v.chunk = 0 AND {current})", params))


def pending_entries(connection: apsw.Connection, stamp: Stamp, *, after_rowid: int = 0,
                    limit: int = BATCH_ENTRIES) -> list[PendingEntry]:
    """The next ``limit`` embeddable entries (by rowid) lacking a current vector."""
    columns = "e.rowid, e.session_id, e.entry_id, e.text, e.text_hash, e.role"
    if not has_table(connection):
        sql = (f"SELECT {columns} FROM entries e WHERE {EMBEDDABLE} AND e.rowid > ? "
               f"ORDER BY e.rowid LIMIT ?")
        return [PendingEntry(*row) for row in connection.execute(sql, (after_rowid, limit))]
    current, params = stamp.sql()
    sql = (f"SELECT {columns} FROM entries e WHERE {EMBEDDABLE} AND e.rowid > ? AND NOT EXISTS ("
           f"SELECT 1 FROM embeddings v WHERE v.session_id = e.session_id AND "
           f"v.entry_id = e.entry_id AND v.chunk = 0 AND {current}) ORDER BY e.rowid LIMIT ?")
    return [PendingEntry(*row) for row in connection.execute(sql, [after_rowid, *params, limit])]


def embed_entries(embedder: EmbeddingPort, entries: Sequence[PendingEntry]) -> list[EntryVectors]:
    """Chunk and embed ``entries`` with one ``embed`` call (raises ``EmbeddingError``)."""
    size, most = embedder.chunk_chars, embedder.max_chunks  # a slow model: an entry's start
    overlap = min(DEFAULT_OVERLAP, size // 4)
    chunks = [weighted_chunks(entry.text, entry.role, size, overlap, most) for entry in entries]
    flat = [chunk for pieces in chunks for chunk, _ in pieces]
    matrix = embedder.embed(flat) if flat else np.zeros((0, embedder.dimensions), np.float32)
    # Each chunk's weight becomes its vector's length (index.chunking, rule 5).
    weights = np.asarray([weight for pieces in chunks for _, weight in pieces], np.float32)
    matrix = matrix * weights[:, None]
    found, start = [], 0
    for entry, pieces in zip(entries, chunks, strict=True):
        if pieces:
            found.append(EntryVectors(entry, matrix[start:start + len(pieces)]))
        start += len(pieces)
    return found


def store_vectors(connection: apsw.Connection, items: Sequence[EntryVectors],
                  stamp: Stamp) -> int:
    """Replace the stored vectors of each entry with ``items``, in one short transaction.

    An entry whose text changed since it was read (its ``text_hash`` moved) is skipped:
    its new text is pending again. Returns the number of chunk rows written.
    """
    written = 0
    with write_transaction(connection):
        for item in items:
            entry = item.entry
            row = connection.execute(
                "SELECT text_hash FROM entries WHERE session_id = ? AND entry_id = ?",
                (entry.session_id, entry.entry_id)).fetchone()
            if row is None or row[0] != entry.text_hash:
                continue
            connection.execute("DELETE FROM embeddings WHERE session_id = ? AND entry_id = ?",
                               (entry.session_id, entry.entry_id))
            connection.executemany(
                "INSERT INTO embeddings(session_id, entry_id, chunk, text_hash, model, "
                "dimensions, chunking_version, vector) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(entry.session_id, entry.entry_id, chunk, entry.text_hash, stamp.model,
                  stamp.dimensions, stamp.chunking_version, encode(vector))
                 for chunk, vector in enumerate(item.vectors)])
            written += len(item.vectors)
        seq = int(read_meta(connection, EMBEDDINGS_SEQ_META) or 0) + 1
        write_meta(connection, EMBEDDINGS_SEQ_META, seq)
    return written


Progress = Callable[[int, int], None]


@driver_errors()
def build_embeddings(home: Path, cwd: str, embedder: EmbeddingPort, *, namespace: str = "",
                     batch_entries: int = BATCH_ENTRIES, time_limit: float | None = None,
                     lock_timeout: float = 30.0, progress: Progress | None = None) -> EmbedReport:
    """Embed the project's entries that lack a current vector, batch by batch.

    Stops when none is left or after ``time_limit`` seconds (``report.more`` then
    says to call again). ``progress(done, total)`` is called after each batch.
    Raises ``EmbeddingError`` when the embedder fails, ``FileNotFoundError`` when
    the project has no index.
    """
    started = time.monotonic()
    stamp = Stamp.of(embedder)
    project = project_dir(home, cwd, namespace)
    report = EmbedReport()
    total = _with_reader(project.index_path(), lambda c: count_pending(c, stamp))
    cursor = 0
    while True:
        batch = _with_reader(project.index_path(), partial(
            pending_entries, stamp=stamp, after_rowid=cursor, limit=batch_entries))
        if not batch:
            break
        cursor = batch[-1].rowid
        items = embed_entries(embedder, batch)
        with ProjectWriter(home, cwd, namespace=namespace, lock_timeout=lock_timeout) as writer:
            report.chunks += store_vectors(writer.connection, items, stamp)
        report.entries += len(batch)
        report.batches += 1
        if progress is not None:
            progress(report.entries, max(total, report.entries))
        if time_limit is not None and time.monotonic() - started > time_limit:
            break
    report.pending = _with_reader(project.index_path(), lambda c: count_pending(c, stamp))
    report.seconds = time.monotonic() - started
    return report


def _with_reader(path: Path | None, read: Callable[[apsw.Connection], T]) -> T:
    if path is None or not path.exists():
        raise FileNotFoundError("the project has no index yet")
    connection = open_reader(path)
    try:
        with connection:  # apsw types __exit__ as maybe swallowing; it never does
            found = read(connection)
        return found
    finally:
        connection.close()


def copy_embeddings(source: apsw.Connection, target: apsw.Connection,
                    batch_rows: int = 2000) -> int:
    """Copy every stored vector from ``source`` into ``target`` (a rebuild's new file).

    Why copy rather than re-embed: vectors are keyed by entry key and text hash, and
    a rebuild replays the same entries, so they stay valid; any that no longer
    match are stale and ignored, and the builder re-embeds only those. Runs in
    batches of short transactions; returns the number of rows copied.
    """
    if not has_table(source):
        return 0
    copied, after = 0, ("", "", -1)
    columns = ("session_id, entry_id, chunk, text_hash, model, dimensions, chunking_version, "
               "vector")
    while True:
        rows = all_rows(source.execute(
            f"SELECT {columns} FROM embeddings WHERE (session_id, entry_id, chunk) > (?, ?, ?) "
            f"ORDER BY session_id, entry_id, chunk LIMIT ?", (*after, batch_rows)))
        if not rows:
            return copied
        with target:
            target.executemany(f"INSERT OR REPLACE INTO embeddings({columns}) "
                               f"VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        copied += len(rows)
        after = rows[-1][:3]
