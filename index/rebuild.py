"""Rebuild a project's projections from its event log into a new file, then swap.

Phase 1 copies and replays the log as of a read snapshot, without the writer lock,
so appends go on meanwhile. Phase 2 takes the lock, catches up with the events
appended since, and points ``CURRENT`` at the new generation. Readers that opened
the old file keep answering from it until they reopen.

One rebuild per project at a time: the whole rebuild holds the project's
``rebuild.lock``, and a second one refuses at once (``RebuildBusy``) instead of
racing the first: the loser's clean-up used to delete the winner's live file. A
generation is only ever removed by the swap that replaced it (or as the leftover
of a rebuild that never swapped), never while ``CURRENT`` names it.

Semantic vectors are carried over in phase 1 (``index.embeddings.copy_embeddings``):
they are keyed by entry key and text hash, so the replayed entries keep them. Vectors
stored after that copy are not carried; those entries are re-embedded in the
background, and until then semantic calls fall back to lexical results.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import apsw

from lookback.index.embeddings import copy_embeddings
from lookback.index.layout import ProjectDir, list_projects
from lookback.index.project import WriterBusy, acquire_lock
from lookback.index.schema import SCHEMA_VERSION, TOKENIZER_VERSION
from lookback.index.store import (
    IndexUnavailable,
    all_rows,
    driver_errors,
    needs_rebuild,
    one_row,
    open_reader,
    open_writer,
    read_meta,
    write_meta,
)
from lookback.index.writer import replay

BATCH_EVENTS = 5000
_VERSION_KEYS = {"schema_version", "tokenizer_version", "created_at"}


@dataclass
class RebuildReport:
    project: str
    generation: int
    events: int
    seconds: float


Progress = Callable[[int, int], None]


class RebuildBusy(WriterBusy):
    """Another rebuild of the project is running; this one was not started."""


@driver_errors()
def rebuild(project: ProjectDir, *, progress: Progress | None = None,
            lock_timeout: float = 60.0, wait: float = 0.0) -> RebuildReport:
    """Rebuild ``project``'s index from its events and swap it in atomically.

    Raises RebuildBusy when another rebuild of the project holds its rebuild lock
    for longer than ``wait`` seconds.
    """
    guard = exclusive(project, wait)
    try:
        return rebuild_locked(project, progress=progress, lock_timeout=lock_timeout)
    finally:
        os.close(guard)


def stale_projects(home: Path) -> list[ProjectDir]:
    """Projects whose index was written by an older schema or tokenizer."""
    stale = []
    for project in list_projects(home):
        path = project.index_path()
        if path is None:  # a folder without a generation yet: nothing to rebuild
            continue
        try:
            connection = open_reader(path)
        except IndexUnavailable:
            continue
        try:
            if needs_rebuild(connection):
                stale.append(project)
        finally:
            connection.close()
    return stale


def exclusive(project: ProjectDir, wait: float = 0.0) -> int:
    """Take the project's rebuild lock (a descriptor to close), or raise RebuildBusy."""
    project.make()
    try:
        return acquire_lock(project.rebuild_lock_path, wait)
    except WriterBusy:
        raise RebuildBusy(f"{project.name}: another reindex of this project is running; "
                          "this one was not started (see `lookback status`)") from None


def rebuild_locked(project: ProjectDir, *, progress: Progress | None = None,
                   lock_timeout: float = 60.0) -> RebuildReport:
    """``rebuild`` for a caller that holds the project's rebuild lock (``exclusive``)."""
    started = time.monotonic()
    old_generation = project.current_generation()
    if old_generation is None:
        raise FileNotFoundError(f"no index for project {project.name}")
    new_generation = old_generation + 1
    new_path = project.generation_path(new_generation)
    _remove_generation(project, new_generation)  # leftovers of an interrupted rebuild
    source = open_reader(project.generation_path(old_generation))
    target = open_writer(new_path)
    try:
        copied = _copy_events(source, target, done=0, progress=progress)
        copy_embeddings(source, target)
        lock = acquire_lock(project.lock_path, lock_timeout)
        try:
            if project.current_generation() != old_generation:
                raise RuntimeError("another rebuild swapped the index meanwhile")
            source.close()
            source = open_reader(project.generation_path(old_generation))
            copied += _copy_events(source, target, done=copied, progress=progress)
            _copy_state(source, target)
            target.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            target.close()
            project.set_current(new_generation)
        finally:
            os.close(lock)
    except BaseException:
        target.close()
        _remove_generation(project, new_generation)
        raise
    finally:
        source.close()
    _remove_old_generations(project, keep=(old_generation, new_generation))
    return RebuildReport(project.name, new_generation, copied, time.monotonic() - started)


def _copy_events(source: apsw.Connection, target: apsw.Connection, *, done: int,
                 progress: Progress | None) -> int:
    """Copy and replay events with seq > the target's last, in batches.

    Returns how many this call copied; ``done`` (copied before) only feeds progress.
    """
    total = one_row(source.execute("SELECT count(*) FROM events"))[0]
    last = int(read_meta(target, "applied_seq") or 0)
    copied = 0
    while True:
        rows = all_rows(source.execute(
            "SELECT seq, kind, session_id, payload, source_id, created_at FROM events "
            "WHERE seq > ? ORDER BY seq LIMIT ?", (last, BATCH_EVENTS)))
        if not rows:
            return copied
        with target:
            target.executemany(
                "INSERT INTO events(seq, kind, session_id, payload, source_id, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)", rows,
            )
            replay(target, ((kind, session, payload) for _, kind, session, payload, _, _ in rows))
            last = rows[-1][0]
            write_meta(target, "applied_seq", last)
        copied += len(rows)
        if progress is not None:
            progress(done + copied, total)


def _copy_state(source: apsw.Connection, target: apsw.Connection) -> None:
    """Carry over what is not a projection: file offsets and cursors kept in meta."""
    with target:
        target.execute("DELETE FROM files")
        target.executemany(
            "INSERT INTO files(path, session_id, state, updated_at) VALUES (?, ?, ?, ?)",
            source.execute("SELECT path, session_id, state, updated_at FROM files").fetchall(),
        )
        for key, value in all_rows(source.execute("SELECT key, value FROM meta")):
            if key not in _VERSION_KEYS and key != "applied_seq":
                write_meta(target, key, value)
        write_meta(target, "schema_version", SCHEMA_VERSION)
        write_meta(target, "tokenizer_version", TOKENIZER_VERSION)
        write_meta(target, "rebuilt_at", json.dumps(time.time()))


def _remove_generation(project: ProjectDir, generation: int) -> None:
    if generation == project.current_generation():
        return  # the live file is only ever replaced, never removed
    base = project.generation_path(generation)
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(f"{base}{suffix}")
        except FileNotFoundError:
            pass


def _remove_old_generations(project: ProjectDir, keep: tuple[int, ...]) -> None:
    """Delete generations older than the previous one (open readers keep their inode)."""
    for path in project.path.glob("index-*.sqlite"):
        number = path.stem.split("-", 1)[1]
        if number.isdigit() and int(number) < min(keep):
            _remove_generation(project, int(number))
