"""``lookback forget``: take entries out of a project's index for good.

What is forgotten (a ``Selection``): entries of one session by id, a whole session, or
every entry whose text matches a pattern (literal, case-insensitive, or a regular
expression). ``forget`` then, under the project's rebuild lock and writer lock:

1. keeps the forget events in the project folder (``index.tombstones.keep``), so a
   repair from the session files honours them;
2. in one transaction, appends them to the event log (their projection records the
   tombstones and blanks the entries: ``index.writer``) and scrubs the text out of every
   logged entry event they forget, earlier versions of an entry included;
3. compacts the file (``compact``: FTS5 ``optimize``, ``VACUUM``, WAL truncated), so no
   free page, old FTS5 segment or WAL frame keeps a copy, and removes the older
   generations a ``reindex`` left beside the live one.

A forgotten entry stays in the tree as a text-less link (its id, parent, type, role and
time), so the branch through it is whole. Its text, its FTS5 terms and its vectors are
gone. The texts of entries forgotten by id or by pattern are also remembered by hash
(``forgotten_texts``, texts of ``MIN_HASHED_CHARS`` or more): an identical copy, in a
fork or a re-read file, is stored without its text too. Nothing here logs or keeps a
forgotten text or the pattern: counts only.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import apsw
import regex

from lookback.errors import UserError
from lookback.index import tombstones
from lookback.index.compact import (
    compact_file,
    folder_bytes,
    project_identity,
    remove_older_generations,
)
from lookback.index.embeddings import EMBEDDINGS_SEQ_META
from lookback.index.layout import ProjectDir
from lookback.index.project import ProjectWriter
from lookback.index.rebuild import exclusive
from lookback.index.repair import DAMAGED
from lookback.index.store import all_rows, driver_errors, read_meta, write_meta
from lookback.index.writer import text_hash
from lookback.ingest import jsonio
from lookback.ingest.events import Event

#: Texts shorter than this (whitespace folded) are not remembered by hash: "ok" or "yes"
#: forgotten in one place must not blank every "ok" of the project.
MIN_HASHED_CHARS = 24
#: How long one regular expression may take on one text before forget gives up on it.
REGEX_TIMEOUT_SECONDS = 2.0


class ForgetError(UserError, ValueError):
    """A selection that names nothing, or a pattern that cannot be used."""

    code = "bad-forget"


@dataclass(frozen=True)
class Selection:
    """What to forget. ``session_id`` with ``entry_ids``: those entries; with
    ``whole_session``: all of it; ``matches`` (a text predicate, ``pattern_matcher``):
    every entry whose text it accepts, in ``session_id`` when given; ``before_ms``: every
    entry written before that time (epoch ms; entries without a time stay), likewise."""

    session_id: str | None = None
    entry_ids: tuple[str, ...] = ()
    whole_session: bool = False
    matches: Callable[[str], bool] | None = None
    before_ms: int | None = None

    def check(self) -> None:
        kinds = sum((bool(self.entry_ids), self.whole_session, self.matches is not None,
                     self.before_ms is not None))
        if kinds != 1:
            raise ForgetError("name exactly one of: entry ids, a whole session, a pattern, "
                              "a time")
        if (self.entry_ids or self.whole_session) and not self.session_id:
            raise ForgetError("entries and whole sessions are forgotten in one named session")


def pattern_matcher(pattern: str, *, is_regex: bool = False) -> Callable[[str], bool]:
    """A predicate on texts: ``pattern`` as literal text (case-insensitive), or as a
    regular expression (the ``regex`` module's syntax; ``(?i)`` for case)."""
    if not pattern:
        raise ForgetError("the pattern is empty")
    if not is_regex:
        needle = pattern.casefold()
        return lambda text: needle in text.casefold()
    try:
        compiled = regex.compile(pattern)
    except regex.error as error:
        raise ForgetError(f"the regular expression does not compile: {error}") from None

    def matches(text: str) -> bool:
        try:
            return compiled.search(text, timeout=REGEX_TIMEOUT_SECONDS) is not None
        except TimeoutError:
            raise ForgetError(f"the regular expression took over {REGEX_TIMEOUT_SECONDS:g} s "
                              "on one entry; make it simpler") from None

    return matches


@dataclass
class ForgetReport:
    """Counts only: what was (or, with ``dry_run``, would be) forgotten in one project."""

    project: str
    dry_run: bool
    entries: int = 0  # entries of the index whose text goes (copies included)
    sessions: int = 0  # sessions they belong to
    events_scrubbed: int = 0  # logged entry events whose text goes
    generations_removed: int = 0  # older index files a reindex had left
    damaged_copies: list[str] = field(default_factory=list)  # *.damaged files, kept
    bytes_before: int = 0
    bytes_after: int = 0
    seconds: float = 0.0


@dataclass
class _Plan:
    keys: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    whole: set[str] = field(default_factory=set)
    hashes: set[str] = field(default_factory=set)
    rows: set[int] = field(default_factory=set)
    row_sessions: set[str] = field(default_factory=set)
    scrub: list[tuple[int, str]] = field(default_factory=list)  # (seq, scrubbed payload)

    def events(self, cwd: str) -> list[Event]:
        found = [Event("forget", session_id, cwd, {"session": True})
                 for session_id in sorted(self.whole)]
        hashes = sorted(self.hashes)
        for session_id in sorted(self.keys):
            found.append(Event("forget", session_id, cwd,
                               {"entry_ids": sorted(self.keys[session_id]),
                                "text_hashes": hashes}))
            hashes = []  # once is enough: the hashes hold project-wide
        return found


def forget(home: Path, project: ProjectDir, selection: Selection, *,
           dry_run: bool = False, lock_timeout: float = 60.0) -> ForgetReport:
    """Forget ``selection`` in ``project`` (see the module notes); with ``dry_run``, only
    count. Raises ForgetError when an entry or session it names is not in the index."""
    selection.check()
    started = time.monotonic()
    report = ForgetReport(project.name, dry_run)
    with driver_errors(f"project {project.name}"):
        cwd, namespace = project_identity(project)
        guard = exclusive(project, wait=lock_timeout)  # no reindex copies the log meanwhile
        try:
            with ProjectWriter(home, cwd, namespace=namespace,
                               lock_timeout=lock_timeout) as writer:
                if writer.project.path != project.path:
                    raise ForgetError(f"project {project.name}: its index names another folder")
                connection = writer.connection
                report.bytes_before = folder_bytes(project)
                plan = _plan(connection, selection)
                report.entries, report.sessions = len(plan.rows), len(plan.row_sessions)
                report.events_scrubbed = len(plan.scrub)
                report.damaged_copies = sorted(p.name for p in project.path.glob(f"*{DAMAGED}"))
                events = plan.events(cwd)
                if dry_run or not events:
                    report.bytes_after = report.bytes_before
                    report.seconds = time.monotonic() - started
                    return report
                tombstones.keep(project.path, events)

                def scrub(connection: apsw.Connection) -> None:
                    connection.executemany("UPDATE events SET payload = ? WHERE seq = ?",
                                           [(payload, seq) for seq, payload in plan.scrub])
                    forgotten = int(read_meta(connection, "forgotten_entries") or 0)
                    write_meta(connection, "forgotten_entries", forgotten + len(plan.rows))
                    vectors = int(read_meta(connection, EMBEDDINGS_SEQ_META) or 0)
                    write_meta(connection, EMBEDDINGS_SEQ_META, vectors + 1)  # caches reload

                writer.write(events, extra=scrub)
                compact_file(connection)
            report.generations_removed = remove_older_generations(project)
        finally:
            os.close(guard)
    report.bytes_after = folder_bytes(project)
    report.seconds = time.monotonic() - started
    return report


def _plan(connection: apsw.Connection, selection: Selection) -> _Plan:
    plan = _Plan()
    session = selection.session_id
    if selection.whole_session:
        assert session is not None
        if connection.execute("SELECT 1 FROM sessions WHERE session_id = ?",
                              (session,)).fetchone() is None:
            raise ForgetError(f"no session {session} in this project")
        plan.whole.add(session)
    for session_id, entry_id, text in _entry_rows(connection, selection):
        if selection.entry_ids or (selection.matches is not None and selection.matches(text)):
            plan.keys[session_id].add(entry_id)
            _remember(plan, text)
    if selection.entry_ids:
        assert session is not None
        missing = set(selection.entry_ids) - plan.keys.get(session, set())
        known = {row[0] for row in connection.execute(
            "SELECT entry_id FROM entries WHERE session_id = ? AND entry_id IN"
            " (SELECT value FROM json_each(?))", (session, jsonio.dumps(sorted(missing))))}
        if missing - known:
            raise ForgetError(f"no entry {sorted(missing - known)[0]} in session {session}")
        plan.keys[session].update(missing)  # text-less already: tombstoned all the same
    if selection.before_ms is not None:  # by key: old turns are not looked for elsewhere
        where = "AND session_id = ?" if session else ""
        for sql in ("SELECT session_id, entry_id FROM entries WHERE ts_ms < ? AND text != ''"
                    f" {where}",
                    "SELECT session_id, json_extract(payload, '$.entry.id') FROM events WHERE"
                    " kind = 'entry' AND json_extract(payload, '$.entry.text') != '' AND"
                    f" json_extract(payload, '$.entry.ts_ms') < ? {where}"):
            for session_id, entry_id in connection.execute(
                    sql, (selection.before_ms, *([session] if session else []))):
                if isinstance(entry_id, str):
                    plan.keys[session_id].add(entry_id)
    if selection.matches is not None:  # the log's older versions of entries too
        for _, session_id, entry_id, text in _entry_events(connection, selection.session_id):
            if selection.matches(text):
                plan.keys[session_id].add(entry_id)
                _remember(plan, text)
    # a pattern already matched every logged copy; entries by id may have copies elsewhere
    _scrubbed_events(connection, plan, by_hash=bool(selection.entry_ids))
    _blanked_rows(connection, plan)
    return plan


def _remember(plan: _Plan, text: str) -> None:
    if len(" ".join(text.split())) >= MIN_HASHED_CHARS:
        plan.hashes.add(text_hash(text))


def _entry_rows(connection: apsw.Connection,
                selection: Selection) -> Iterator[tuple[str, str, str]]:
    """(session, entry, text) of the indexed entries with text the selection may name."""
    if selection.entry_ids:
        yield from all_rows(connection.execute(
            "SELECT session_id, entry_id, text FROM entries WHERE session_id = ? AND entry_id"
            " IN (SELECT value FROM json_each(?)) AND text != ''",
            (selection.session_id, jsonio.dumps(list(selection.entry_ids)))))
    elif selection.matches is not None:
        where, values = ("AND session_id = ?", (selection.session_id,)) \
            if selection.session_id else ("", ())
        yield from connection.execute(
            f"SELECT session_id, entry_id, text FROM entries WHERE text != '' {where}", values)


def _entry_events(connection: apsw.Connection,
                  session_id: str | None) -> Iterator[tuple[int, str, str, str]]:
    where, values = ("AND session_id = ?", (session_id,)) if session_id else ("", ())
    for seq, session, entry_id, text in connection.execute(
            "SELECT seq, session_id, json_extract(payload, '$.entry.id'),"
            f" json_extract(payload, '$.entry.text') FROM events WHERE kind = 'entry' {where}",
            values):
        if isinstance(text, str) and text and isinstance(entry_id, str):
            yield seq, session, entry_id, text


def _scrubbed_events(connection: apsw.Connection, plan: _Plan, *, by_hash: bool) -> None:
    """Every logged entry event with text that the plan forgets (``by_hash``: texts that
    hash like a forgotten one too, in any session), with its scrubbed payload."""
    everywhere = by_hash and bool(plan.hashes)
    sessions = set(plan.keys) | plan.whole
    only = next(iter(sessions)) if len(sessions) == 1 and not everywhere else None
    for seq, session_id, entry_id, text in _entry_events(connection, only):  # one pass
        if session_id in plan.whole or entry_id in plan.keys.get(session_id, ()) \
                or (everywhere and text_hash(text) in plan.hashes):
            payload = jsonio.loads(_payload(connection, seq))
            payload["entry"] = {**payload["entry"], "text": "", "eligible": False}
            plan.scrub.append((seq, jsonio.dumps(payload)))


def _payload(connection: apsw.Connection, seq: int) -> str:
    row = connection.execute("SELECT payload FROM events WHERE seq = ?", (seq,)).fetchone()
    return "{}" if row is None else row[0]


def _blanked_rows(connection: apsw.Connection, plan: _Plan) -> None:
    """The entries rows (with text) the plan's tombstones will blank, copies included."""
    found: list[tuple[int, str]] = []
    for session_id in sorted(plan.whole):
        found += all_rows(connection.execute(
            "SELECT rowid, session_id FROM entries WHERE session_id = ? AND text != ''",
            (session_id,)))
    for session_id, ids in sorted(plan.keys.items()):
        found += all_rows(connection.execute(
            "SELECT rowid, session_id FROM entries WHERE session_id = ? AND entry_id IN"
            " (SELECT value FROM json_each(?)) AND text != ''",
            (session_id, jsonio.dumps(sorted(ids)))))
    if plan.hashes:
        found += all_rows(connection.execute(
            "SELECT rowid, session_id FROM entries WHERE text_hash IN"
            " (SELECT value FROM json_each(?)) AND text != ''",
            (jsonio.dumps(sorted(plan.hashes)),)))
    plan.rows = {rowid for rowid, _ in found}
    plan.row_sessions = {session_id for _, session_id in found}


