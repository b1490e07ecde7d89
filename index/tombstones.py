"""Tombstones: what ``lookback forget`` forgot stays forgotten (docs/data-controls.md).

A ``forget`` event (``ingest.events``) is the fact; its projection here records a
tombstone per forgotten entry key (session id, entry id; ``''`` for a whole session)
and the ``text_hash`` of each forgotten text (``forgotten_texts``). The index writer
(``index.writer``) asks ``forgotten`` about every entry it applies: a forgotten one is
stored as a text-less link of the tree (id, parent, type, role, time: the branch
through it stays whole), and its event is logged without its text (``scrubbed``). So
no replay of the log (``lookback reindex``), no re-read of the session file (a rewrite,
``reindex --repair`` from the files) and no fork's copy brings the text back.

The forget events also live beside the index, in the project folder's
``forgotten.jsonl`` (``index.forget``): a repair that has to start from an empty
generation (``index.repair.fresh_generation``) applies them first.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import apsw

from lookback.ingest import jsonio
from lookback.ingest.events import Event, EventError

#: The tombstone's entry id that stands for every entry of the session.
WHOLE_SESSION = ""


def active(connection: apsw.Connection) -> bool:
    """True when the index holds any tombstone (else ``forgotten`` is never asked)."""
    return connection.execute(
        "SELECT EXISTS (SELECT 1 FROM tombstones) OR EXISTS (SELECT 1 FROM forgotten_texts)"
    ).fetchone() == (1,)


def forgotten(connection: apsw.Connection, session_id: str, entry_id: str,
              text_hash: str) -> bool:
    """True when the entry (session_id, entry_id) whose text hashes to ``text_hash`` was
    forgotten: its key, its whole session or its text."""
    return connection.execute(
        "SELECT 1 FROM tombstones WHERE session_id = ? AND entry_id IN (?, ?)"
        " UNION ALL SELECT 1 FROM forgotten_texts WHERE text_hash = ? LIMIT 1",
        (session_id, entry_id, WHOLE_SESSION, text_hash)).fetchone() is not None


def scrubbed(event: Event) -> Event:
    """``event`` (an entry) without its text: what the log keeps of a forgotten entry."""
    entry = {**event.payload["entry"], "text": "", "eligible": False}
    return Event(event.kind, event.session_id, event.cwd, {**event.payload, "entry": entry})


def record(connection: apsw.Connection, event: Event) -> list[int]:
    """Record the tombstones of a ``forget`` event; returns the rowids of the entries it
    forgets that still hold text (the writer blanks them)."""
    payload: dict[str, Any] = event.payload
    session_id = event.session_id
    keys = [WHOLE_SESSION] if payload.get("session") else list(payload.get("entry_ids") or [])
    hashes = list(payload.get("text_hashes") or [])
    connection.executemany("INSERT OR IGNORE INTO tombstones(session_id, entry_id) VALUES (?, ?)",
                           [(session_id, key) for key in keys])
    connection.executemany("INSERT OR IGNORE INTO forgotten_texts(text_hash) VALUES (?)",
                           [(text_hash,) for text_hash in hashes])
    rows: set[int] = set()
    if payload.get("session"):
        rows.update(_rowids(connection, "SELECT rowid FROM entries WHERE session_id = ?"
                                        " AND text != ''", (session_id,)))
    elif keys:
        rows.update(_rowids(connection, "SELECT rowid FROM entries WHERE session_id = ? AND"
                                        " entry_id IN (SELECT value FROM json_each(?))"
                                        " AND text != ''", (session_id, jsonio.dumps(keys))))
    if hashes:  # copies anywhere in the project: one pass over the entries
        rows.update(_rowids(connection, "SELECT rowid FROM entries WHERE text_hash IN"
                                        " (SELECT value FROM json_each(?)) AND text != ''",
                            (jsonio.dumps(hashes),)))
    return sorted(rows)


def _rowids(connection: apsw.Connection, sql: str, values: Iterable[Any]) -> list[int]:
    return [row[0] for row in connection.execute(sql, tuple(values))]


#: The project folder's copy of its forget events (one ``Event.to_json`` a line: ids and
#: hashes, never text), beside the generations: it outlives a damaged index.
FORGOTTEN_FILE = "forgotten.jsonl"


def keep(folder: Path, events: Iterable[Event]) -> None:
    """Append ``events`` (forget events) to ``folder``'s ``FORGOTTEN_FILE``, durably,
    before they are applied: a crash in between forgets more, never less."""
    lines = "".join(event.to_json() + "\n" for event in events)
    descriptor = os.open(folder / FORGOTTEN_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, lines.encode("utf-8"))
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def kept(folder: Path) -> list[Event]:
    """The forget events kept in ``folder`` (a line that does not decode is passed over)."""
    try:
        text = (folder / FORGOTTEN_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    found = []
    for line in text.splitlines():
        try:
            event = Event.from_json(line)
        except EventError:
            continue
        if event.kind == "forget":
            found.append(event)
    return found
