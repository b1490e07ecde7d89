"""Apply events to an index: append them to the log and project them, atomically.

``append_events`` is the one way anything is written. In one ``BEGIN IMMEDIATE``
transaction it appends the events to the ``events`` log, applies each to the
projections (sessions, entries, FTS) and advances the ``applied_seq`` cursor, plus
whatever the caller's ``extra`` callback writes (a file's read offset, a Redis
stream cursor). A failure rolls all of it back, so a retry starts clean.

Each batch ends with a bounded FTS5 merge (``merge_segments``): every commit writes a
new FTS5 segment, and every term a query looks up is looked up in every segment, so
an index grown by small appends must not keep many. Merging changes no score.

Applying is idempotent: an entry is keyed by (session id, entry id) and a repeated
entry replaces the earlier one (Pi's "last write wins" for reused ids).

Forgotten entries (``index.tombstones``) are applied, and logged, without their text.

One event that cannot be stored never costs its batch: when a batch fails with a
``BAD_EVENT_ERRORS`` error, it is applied again with each event in its own savepoint,
the bad ones are set aside (counted in the ``set_aside_events`` meta key and handed
to ``on_set_aside``) and the rest commit. Errors of the index itself (disk full,
corruption, busy) still fail the whole batch.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import apsw

from lookback.index import tombstones
from lookback.index.schema import SCHEMA_VERSION
from lookback.index.store import one_row, read_meta, write_meta, write_transaction
from lookback.index.tokens import estimate_tokens  # one estimate for index and budgets
from lookback.ingest import jsonio
from lookback.ingest.events import Event, EventError


@functools.lru_cache(maxsize=2)
def text_hash(text: str) -> str:
    """Equal for texts that differ only in case and whitespace (for deduplication).

    The last two are kept: with tombstones (``index.tombstones``) an entry's text is hashed
    to check it, then again to store it; the second is a lookup."""
    normalized = " ".join(text.split()).casefold()
    return hashlib.blake2b(normalized.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()


#: Errors that say "this event cannot be stored" rather than "the index cannot be
#: written". Input is validated when an event is decoded or applied (``Event.check``),
#: so anything else raised while applying (KeyError, TypeError, ...) is a bug: it
#: fails the batch, loud, instead of setting its events aside as bad input. A string
#: SQLite cannot take as UTF-8 (a lone surrogate, which ingest escapes but an event
#: built elsewhere may carry) is bad input too: apsw raises UnicodeEncodeError binding it.
BAD_EVENT_ERRORS: tuple[type[BaseException], ...] = (
    EventError, apsw.ConstraintError, apsw.MismatchError, apsw.TooBigError,
    UnicodeEncodeError,
)

#: Called with each event set aside and the error it raised.
SetAside = Callable[[Event, BaseException], None]


def append_events(connection: apsw.Connection, events: Iterable[Event], *,
                  source_ids: Iterable[str | None] | None = None,
                  extra: Callable[[apsw.Connection], None] | None = None,
                  on_set_aside: SetAside | None = None) -> int:
    """Append ``events`` to the log and apply them in one transaction.

    ``source_ids`` (one per event, optional) are unique delivery ids: an event whose
    source id is already in the log is skipped, so re-delivery adds nothing.
    With ``on_set_aside``, events that cannot be stored are set aside instead of
    failing the batch (see the module notes). Returns the number of events applied.
    """
    events = list(events)
    ids: list[str | None] = list(source_ids) if source_ids is not None else [None] * len(events)
    try:
        return _append(connection, events, ids, extra, None)
    except BAD_EVENT_ERRORS:
        if on_set_aside is None:
            raise
    return _append(connection, events, ids, extra, on_set_aside)


def _append(connection: apsw.Connection, events: list[Event], ids: list[str | None],
            extra: Callable[[apsw.Connection], None] | None,
            on_set_aside: SetAside | None) -> int:
    applied = set_aside = 0
    indexed_chars = 0
    now = time.time()
    with write_transaction(connection):
        seq = int(read_meta(connection, "applied_seq") or 0)
        touched: Touched = {}
        forgetting = tombstones.active(connection)
        for event, source_id in zip(events, ids, strict=True):
            if source_id is not None and _seen(connection, source_id):
                continue
            if forgetting and _forgotten(connection, event):
                event = tombstones.scrubbed(event)  # the log keeps no forgotten text
            forgetting = forgetting or event.kind == "forget"
            if on_set_aside is None:
                seq = _append_one(connection, event, source_id, now, touched)
                applied += 1
                indexed_chars += _indexed_chars(event)
                continue
            if event.kind in ("session", "reset"):
                _flush_sessions(connection, touched, now)  # outside the savepoint
            connection.execute("SAVEPOINT one_event")
            try:
                seq = _append_one(connection, event, source_id, now, touched)
                applied += 1
                indexed_chars += _indexed_chars(event)
            except BAD_EVENT_ERRORS as error:
                connection.execute("ROLLBACK TO one_event")
                set_aside += 1
                on_set_aside(event, error)
            connection.execute("RELEASE one_event")
        _flush_sessions(connection, touched, now)
        write_meta(connection, "applied_seq", seq)
        count_set_aside(connection, set_aside)
        if extra is not None:
            extra(connection)
        merge_segments(connection, indexed_chars)
    return applied


#: A batch's merge budget in FTS5 leaf pages: a floor that lets a small append finish
#: a pending merge of small segments, plus one page per this many characters indexed.
#: Indexing writes about one leaf page per 16,000 characters and a binary merge moves
#: each page about log2(commits) times, so 16 pages per page written keeps merges up
#: with a bulk run's 2,000-event batches instead of falling behind.
MERGE_FLOOR_PAGES = 64
MERGE_CHARS_PER_PAGE = 1000


def merge_segments(connection: apsw.Connection, indexed_chars: int) -> None:
    """Merge FTS5 segments, ``index.store.MERGE_SEGMENTS`` at once, writing at most a
    budget of pages (inside the caller's transaction): the budget bounds what one small
    append costs, and what it leaves undone the next batch continues."""
    pages = MERGE_FLOOR_PAGES + indexed_chars // MERGE_CHARS_PER_PAGE
    connection.execute("INSERT INTO entries_fts(entries_fts, rank) VALUES ('merge', ?)",
                       (pages,))


def _forgotten(connection: apsw.Connection, event: Event) -> bool:
    """True for an entry event whose entry or text was forgotten (``index.tombstones``)."""
    if event.kind != "entry" or not isinstance(event.payload.get("entry"), dict):
        return False
    entry = event.payload["entry"]
    text = entry.get("text")
    if not text or not isinstance(text, str) or not isinstance(entry.get("id"), str):
        return False
    return tombstones.forgotten(connection, event.session_id, entry["id"], text_hash(text))


def _indexed_chars(event: Event) -> int:
    """Characters an applied event put into the FTS table."""
    if event.kind != "entry":
        return 0
    return len(event.payload["entry"].get("text") or "")


def _append_one(connection: apsw.Connection, event: Event, source_id: str | None,
                now: float, touched: Touched) -> int:
    """Log and apply one event; returns its sequence number."""
    event.check()  # before logging it: what the log holds, a replay can apply
    connection.execute(
        "INSERT INTO events(kind, session_id, payload, source_id, created_at) "
        "VALUES (?, ?, ?, ?, ?)",
        (event.kind, event.session_id, _payload_json(event), source_id, now),
    )
    seq = connection.last_insert_rowid()
    apply_event(connection, event, now, touched)
    return seq


def _payload_json(event: Event) -> str:
    try:
        return jsonio.dumps(event.payload)
    except (TypeError, ValueError, RecursionError) as error:  # not JSON: bad input
        raise EventError(f"{event.kind} event: payload is not storable JSON "
                         f"({error.__class__.__name__})") from None


def replay(connection: apsw.Connection, rows: Iterable[tuple[str, str, str]]) -> None:
    """Apply logged (kind, session_id, payload) rows to the projections only."""
    now = time.time()
    touched: Touched = {}
    refused = indexed_chars = 0
    forgetting = tombstones.active(connection)
    for kind, session_id, payload in rows:
        event = Event(kind, session_id, "", jsonio.loads(payload))
        if forgetting and _forgotten(connection, event):
            event = tombstones.scrubbed(event)
        forgetting = forgetting or kind == "forget"
        try:
            apply_event(connection, event, now, touched)
        except EventError:  # logged by an older version that checked less: set aside
            refused += 1
            continue
        indexed_chars += _indexed_chars(event)
    _flush_sessions(connection, touched, now)
    merge_segments(connection, indexed_chars)
    count_set_aside(connection, refused)


def count_set_aside(connection: apsw.Connection, count: int) -> None:
    """Add ``count`` events set aside to the index's ``set_aside_events`` total."""
    if count:
        total = int(read_meta(connection, "set_aside_events") or 0) + count
        write_meta(connection, "set_aside_events", total)


@dataclass
class SessionMark:
    """A session touched by a batch: its new leaf and the entries added to it."""

    leaf_id: str | None = None
    added: int = 0


#: The sessions a batch touched, by id; written once per batch (``_flush_sessions``).
Touched = dict[str, SessionMark]


def apply_event(connection: apsw.Connection, event: Event, now: float,
                touched: Touched) -> None:
    """Project one event (inside the caller's transaction).

    Session leaf and entry counts collect in ``touched``; the caller writes them
    with ``_flush_sessions`` before committing.
    """
    event.check()
    handler = _HANDLERS.get(event.kind)
    if handler is None:
        raise EventError(f"unknown event kind {event.kind!r}")
    if event.kind in ("session", "reset"):
        _flush_sessions(connection, touched, now)  # keep their order with entries
    handler(connection, event, now, touched)


def _apply_session(connection: apsw.Connection, event: Event, now: float,
                   touched: Touched) -> None:
    p = event.payload
    connection.execute(
        "INSERT INTO sessions(session_id, file, cwd, version, started_at, parent_session,"
        " updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(session_id) DO UPDATE SET file = excluded.file, cwd = excluded.cwd,"
        " version = excluded.version, started_at = excluded.started_at,"
        " parent_session = excluded.parent_session, updated_at = excluded.updated_at",
        (event.session_id, p.get("file"), p.get("cwd"), p.get("version"), p.get("started_at"),
         p.get("parent_session"), now),
    )


def _apply_entry(connection: apsw.Connection, event: Event, now: float,
                 touched: Touched) -> None:
    entry: dict[str, Any] = event.payload["entry"]
    text = entry.get("text") or ""
    values = (event.session_id, entry["id"], entry.get("parent_id"), int(entry["seq"]),
              entry.get("type") or "unknown", entry.get("role"), entry.get("timestamp"),
              entry.get("ts_ms"), text, text_hash(text), estimate_tokens(text),
              1 if entry.get("eligible") else 0, entry.get("first_kept_id"),
              _kept_ids(entry.get("kept_ids")))
    connection.execute(_INSERT_ENTRY + " ON CONFLICT(session_id, entry_id) DO NOTHING", values)
    added = connection.changes()
    if not added:  # a reused id: last write wins
        old_rowid, old_text = one_row(connection.execute(
            "SELECT rowid, text FROM entries WHERE session_id = ? AND entry_id = ?",
            (event.session_id, entry["id"])))
        _fts_delete(connection, old_rowid, old_text)
        connection.execute("DELETE FROM entries WHERE rowid = ?", (old_rowid,))
        connection.execute(_INSERT_ENTRY, values)
    rowid = connection.last_insert_rowid()
    if text:
        connection.execute("INSERT INTO entries_fts(rowid, text) VALUES (?, ?)", (rowid, text))
    mark = touched.setdefault(event.session_id, SessionMark())
    mark.leaf_id, mark.added = entry["id"], mark.added + added


_INSERT_ENTRY = (
    "INSERT INTO entries(session_id, entry_id, parent_id, seq, type, role, timestamp,"
    " ts_ms, text, text_hash, tokens, eligible, first_kept_id, kept_ids)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)


def _kept_ids(ids: list[str] | None) -> str | None:
    return None if ids is None else jsonio.dumps(ids)


def _apply_reset(connection: apsw.Connection, event: Event, now: float,
                 touched: Touched) -> None:
    connection.execute(
        "INSERT INTO entries_fts(entries_fts, rowid, text) "
        "SELECT 'delete', rowid, text FROM entries WHERE session_id = ? AND text != ''",
        (event.session_id,),
    )
    connection.execute("DELETE FROM entries WHERE session_id = ?", (event.session_id,))
    connection.execute(
        "UPDATE sessions SET entry_count = 0, leaf_id = NULL, epoch = epoch + 1, updated_at = ?"
        " WHERE session_id = ?",
        (now, event.session_id),
    )
    if event.payload.get("reason") == "moved":  # the file now belongs to another project
        connection.execute("DELETE FROM sessions WHERE session_id = ?", (event.session_id,))
        connection.execute("DELETE FROM files WHERE path = ?", (str(event.payload.get("file")),))


def _apply_forget(connection: apsw.Connection, event: Event, now: float,
                  touched: Touched) -> None:
    """Record the tombstones and blank what they forget: each entry keeps its place in the
    tree under a new rowid (readers memoize texts per rowid), its vectors go, and the
    sessions it touched get a new epoch (their cached branches are stale)."""
    sessions: set[str] = set()
    for rowid in tombstones.record(connection, event):
        row = one_row(connection.execute(
            "SELECT session_id, entry_id, parent_id, seq, type, role, timestamp, ts_ms, text,"
            " first_kept_id, kept_ids FROM entries WHERE rowid = ?", (rowid,)))
        session_id, entry_id, text = row[0], row[1], row[8]
        _fts_delete(connection, rowid, text)
        connection.execute("DELETE FROM entries WHERE rowid = ?", (rowid,))
        connection.execute(_INSERT_ENTRY, (*row[:8], "", text_hash(""), 0, 0, *row[9:]))
        connection.execute("DELETE FROM embeddings WHERE session_id = ? AND entry_id = ?",
                           (session_id, entry_id))
        sessions.add(session_id)
    connection.executemany("UPDATE sessions SET epoch = epoch + 1 WHERE session_id = ?",
                           [(session_id,) for session_id in sorted(sessions)])


def _apply_leaf(connection: apsw.Connection, event: Event, now: float,
                touched: Touched) -> None:
    touched.setdefault(event.session_id, SessionMark()).leaf_id = event.payload["target_id"]


def _flush_sessions(connection: apsw.Connection, touched: Touched, now: float) -> None:
    for session_id, mark in touched.items():
        leaf_id, added = mark.leaf_id, mark.added
        connection.execute(
            "INSERT INTO sessions(session_id, leaf_id, entry_count, updated_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT(session_id) DO UPDATE SET"
            " leaf_id = excluded.leaf_id, entry_count = entry_count + ?,"
            " updated_at = excluded.updated_at",
            (session_id, leaf_id, added, now, added),
        )
    touched.clear()


def _fts_delete(connection: apsw.Connection, rowid: int, text: str) -> None:
    if text:
        connection.execute(
            "INSERT INTO entries_fts(entries_fts, rowid, text) VALUES ('delete', ?, ?)",
            (rowid, text),
        )


def _seen(connection: apsw.Connection, source_id: str) -> bool:
    row = connection.execute("SELECT 1 FROM events WHERE source_id = ?", (source_id,)).fetchone()
    return row is not None


_HANDLERS: dict[str, Callable[[apsw.Connection, Event, float, Touched], None]] = {
    "session": _apply_session,
    "entry": _apply_entry,
    "reset": _apply_reset,
    "leaf": _apply_leaf,
    "forget": _apply_forget,
}

__all__ = ["BAD_EVENT_ERRORS", "SCHEMA_VERSION", "append_events", "apply_event",
           "estimate_tokens", "merge_segments", "replay"]
