"""Read a session file (Pi, Claude Code: ``ingest.claude_code``, or Codex:
``ingest.codex``) incrementally and turn its new lines into events.

Pi appends one JSON object per line. A re-run reads only the lines added since the
remembered ``FileState``: complete lines, and a last line without its newline when it
already is a whole JSON object (a writer that died mid-turn left it so; Pi itself keeps
such a record). Its state then ends inside the line (the byte before ``offset`` is no
newline): when the line is finished by whitespace and a newline, nothing is read twice;
when more text lands on it, the record read was not the line's, and the session is
re-read as after a rewrite (below), so no wrong entry stays.

On a re-run, a file that shrank or whose already-read prefix changed (Pi rewrites
v1/v2 files in place when it opens them; an editor may change one word and keep the
size) is a rewrite, and the whole session is re-read behind a ``reset`` event instead
of being duplicated.

The rewrite check: the header and the last read line are compared by hash on every
read; the whole read prefix is compared by its CRC-32 (``FileState.prefix_crc``, kept
incrementally as lines are read) whenever the file's size or ctime differs from
the read that made the state (``FileState.seen``), so an untouched file costs no
re-read and any change of content is caught (a change within the same ctime tick
as that read, with the same size, waits until the file changes again).

Lines are read with a size limit, so a 50 MB line costs a skip, not 50 MB of memory.

A line that cannot be read whole — over the limit, or not JSON even after
``ingest.jsonio``'s repairs (bytes that are not UTF-8, nesting past the parsers'
limits) — would cut its branch: every entry after it hangs on its id. When its id and
parent can still be read from its start (Pi writes ``{"type", "id", "parentId", …``
first), it is kept as a text-less ``unreadable`` entry, a link in the chain, so the
entries before it stay reachable from the leaf (``ReadStats.placeholders``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

from lookback.errors import UserError
from lookback.ingest import claude_code, codex, jsonio
from lookback.ingest.entries import normalize_entry
from lookback.ingest.events import Event
from lookback.ingest.markers import strip_private
from lookback.ingest.storable import escape_surrogates
from lookback.settings import DEFAULTS

#: Lines longer than this are skipped (and counted); Pi never writes one in practice.
DEFAULT_MAX_LINE_BYTES = DEFAULTS.max_line_bytes

#: Events handed to the sink per batch; the file state advances with each batch.
DEFAULT_BATCH_EVENTS = 2000

#: ``FileState.format`` of a Pi session file.
PI = "pi"

#: Lines read at most to find a Claude Code file's session id and cwd (they start
#: with a few bookkeeping lines before the first tree entry).
IDENTITY_LINES = 200


class NotASession(UserError, ValueError):
    """The file is neither a Pi session (header line) nor a Claude Code or Codex session."""

    code = "not-a-session"


class HeaderPending(NotASession):
    """The file has no complete first line yet: Pi is still writing its header (or a
    Claude Code file holds only bookkeeping lines so far).

    Not an error: the file is read again once the line is complete.
    """


#: Header versions are clamped to this (SQLite stores 64-bit integers; Pi is at 3).
MAX_VERSION = 1_000


@dataclass(frozen=True)
class FileState:
    """What has been read of one session file; stored by the sink with the events."""

    path: str
    session_id: str
    cwd: str
    version: int
    size: int = 0
    offset: int = 0
    header_len: int = 0
    header_hash: str = ""
    last_line_start: int = 0
    last_line_hash: str = ""
    positions: int = 1  # parsed objects so far, header included (v1 ids count them)
    last_entry_id: str | None = None  # v1 entries chain to the previous one
    format: str = PI  # PI, claude_code.FORMAT or codex.FORMAT: how lines become events
    prefix_crc: int | None = None  # CRC-32 of bytes [0, offset); None: an older state
    seen: str = ""  # "size:ctime_ns" of the file when this state was read

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> FileState:
        return cls(**json.loads(text))


@dataclass
class ReadStats:
    lines: int = 0
    entries: int = 0
    malformed: int = 0
    oversized: int = 0
    repaired: int = 0  # values fixed (surrogates escaped) or dropped (unstorable numbers)
    set_aside: int = 0  # lines whose event the index could not store (counted by the sink)
    extra_headers: int = 0
    cursor_records: int = 0
    rewrites: int = 0
    bookkeeping: int = 0  # lines outside the conversation (request copies, costs, events …)
    unknown_types: int = 0  # entry types this version does not know: never evidence
    sidechain: int = 0  # sub-agent lines found inside a main session file: skipped
    placeholders: int = 0  # unreadable lines kept as text-less links (their id and parent)
    warnings: list[str] = field(default_factory=list)

    def add(self, other: ReadStats) -> None:
        for name in ("lines", "entries", "malformed", "oversized", "repaired", "set_aside",
                     "extra_headers", "cursor_records", "rewrites", "bookkeeping",
                     "unknown_types", "sidechain", "placeholders"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.warnings.extend(other.warnings)


@dataclass
class Batch:
    """Events from consecutive complete lines, and the file state after them."""

    events: list[Event]
    state: FileState


def read_session(path: str, state: FileState | None = None, *,
                 stats: ReadStats | None = None,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
                 batch_events: int = DEFAULT_BATCH_EVENTS) -> Iterator[Batch]:
    """Yield batches of events for what ``path`` holds beyond ``state``.

    Raises NotASession when the file does not start with a session header (its
    subclass HeaderPending while that line is still being written), and OSError when
    it cannot be read.
    """
    stats = stats if stats is not None else ReadStats()
    path = os.path.abspath(path)
    with open_session_file(path) as handle:
        info = os.fstat(handle.fileno())
        size, seen = info.st_size, _seen(info)
        pending: list[Event] = []
        if state is not None and (not _prefix_unchanged(handle, state, size, seen)
                                  or _last_line_extended(handle.fileno(), state, size)):
            stats.rewrites += 1
            pending.append(Event("reset", state.session_id, state.cwd, {"reason": "rewritten"}))
            state = None
        if state is not None and size == state.offset:
            if state.prefix_crc is not None and seen != state.seen:  # touched, same bytes
                yield Batch([], replace(state, seen=seen))  # so the next run is cheap again
            return
        if state is None:
            state, header = _read_header(handle, path, max_line_bytes, stats)
            pending.append(Event("session", state.session_id, state.cwd, header))
            if state.format == codex.FORMAT:
                state = _codex_history(path, handle, state, pending, stats, max_line_bytes)
        else:
            handle.seek(state.offset)
        yield from _read_body(handle, state, pending, stats, max_line_bytes, batch_events,
                              seen)


def is_rewritten(path: str, state: FileState) -> bool:
    """True when ``path`` no longer starts with what ``state`` read: it shrank, or its
    header, last read line or any byte it read changed (a rewrite, not an append)."""
    return checked_state(path, state) is None


def checked_state(path: str, state: FileState) -> FileState | None:
    """``state`` as checked against ``path`` now (``seen`` updated, so reading on from
    it right away costs no second check), or None when the file was rewritten."""
    with open_session_file(path) as handle:
        info = os.fstat(handle.fileno())
        seen = _seen(info)
        if not _prefix_unchanged(handle, state, info.st_size, seen) \
                or _last_line_extended(handle.fileno(), state, info.st_size):
            return None
    return state if state.prefix_crc is None else replace(state, seen=seen)


def session_identity(path: str,
                     max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> tuple[str, str]:
    """(session id, cwd) of a Pi, Claude Code or Codex session file, from its first lines.

    Raises NotASession for any other file (HeaderPending while its first line is
    still being written), OSError when it cannot be read.
    """
    with open_session_file(path) as handle:
        state, _ = _read_header(handle, os.path.abspath(path), max_line_bytes, ReadStats())
    return state.session_id, state.cwd


def open_session_file(path: str) -> BinaryIO:
    """``path`` opened for binary reading, only when it is a regular file.

    The one guard every read of a session goes through: a FIFO would block a plain
    ``open`` until some writer came and ``/dev/zero`` never ends, so both (and links
    to them) are NotASession. ``O_NONBLOCK`` changes only how a FIFO opens; reads of a
    regular file are unaffected.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotASession(f"{path}: not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _read_body(handle: BinaryIO, state: FileState, pending: list[Event], stats: ReadStats,
               max_line_bytes: int, batch_events: int, seen: str) -> Iterator[Batch]:
    cursor = _Cursor(state, handle.fileno(), seen)
    for start, end, line in _complete_lines(handle, state.offset, max_line_bytes, stats,
                                            unterminated=True):
        if line is not None and not line.endswith(b"\n") and parse_object(line) is None:
            break  # an unfinished last line: read once it is a record or has its newline
        stats.lines += 1
        cursor.offset = end
        if line is None:  # oversized: Pi wrote an entry there, so it takes a position
            obj = _placeholder(os.pread(cursor.fd, PLACEHOLDER_HEAD_BYTES, start), state)
            if obj is None:
                cursor.positions += 1
                continue
            stats.placeholders += 1
        else:
            cursor.last_line_start, cursor.last_line = start, line
            obj = parse_object(line, stats)
        if obj is None:
            if line is not None and line.strip():
                stats.malformed += 1
                obj = _placeholder(line, state)
                stats.placeholders += obj is not None
            if obj is None:
                continue
        event = _event_for(obj, cursor, stats)
        if event is not None:
            pending.append(event)
        if len(pending) >= batch_events:
            yield Batch(pending, cursor.state())
            pending = []
    if pending or cursor.offset != state.offset:
        yield Batch(pending, cursor.state())


#: Bytes of an unreadable line's start searched for its id and parent.
PLACEHOLDER_HEAD_BYTES = 4096
_ID_AND_PARENT = re.compile(
    rb'\A\s*\{\s*"type"\s*:\s*"[^"\\]*"\s*,\s*"id"\s*:\s*"([^"\\]+)"\s*,'
    rb'\s*"parentId"\s*:\s*(?:null|"([^"\\]*)")')


def _placeholder(line: bytes, state: FileState) -> dict[str, Any] | None:
    """A text-less stand-in for a Pi entry line that cannot be read whole, when its id
    and parent can be (None otherwise, and for formats whose entries carry no ids)."""
    if state.format != PI or state.version <= 1:
        return None
    found = _ID_AND_PARENT.match(line)
    if found is None:
        return None
    entry_id, parent = (None if part is None else escape_surrogates(
        part.decode("utf-8", "replace")) for part in found.groups())
    return {"type": "unreadable", "id": entry_id, "parentId": parent}


class _Cursor:
    """The mutable reading position; frozen into a FileState at batch ends."""

    def __init__(self, state: FileState, fd: int, seen: str) -> None:
        self.base = state
        self.fd = fd
        self.seen = seen
        self.offset = state.offset
        self.positions = state.positions
        self.last_entry_id = state.last_entry_id
        self.last_line_start = state.last_line_start
        self.last_line: bytes | None = None
        # an older state has no CRC yet: start one from what its cheap checks passed
        self.crc = state.prefix_crc if state.prefix_crc is not None \
            else _crc(fd, 0, state.offset)
        self.crc_offset = state.offset

    def state(self) -> FileState:
        self.crc = _crc(self.fd, self.crc_offset, self.offset, self.crc)
        self.crc_offset = self.offset
        last_line_start, last_line_hash = (self.base.last_line_start, self.base.last_line_hash) \
            if self.last_line is None else (self.last_line_start, _digest(self.last_line))
        return replace(self.base, offset=self.offset, size=max(self.base.size, self.offset),
                       positions=self.positions, last_entry_id=self.last_entry_id,
                       prefix_crc=self.crc, seen=self.seen, last_line_start=last_line_start,
                       last_line_hash=last_line_hash)


def _event_for(obj: dict[str, Any], cursor: _Cursor, stats: ReadStats) -> Event | None:
    state = cursor.base
    position = cursor.positions
    cursor.positions += 1
    if state.format == claude_code.FORMAT:
        return _claude_event(obj, state, position, stats)
    if state.format == codex.FORMAT:
        event = _codex_event(obj, state, position, cursor.last_entry_id, stats)
        if event is not None:
            cursor.last_entry_id = event.payload["entry"]["id"]
        return event
    entry_type = obj.get("type")
    if entry_type == "session":
        stats.extra_headers += 1  # Pi reads only line 1 as the header
        return None
    if entry_type == "leaf" and "id" not in obj:
        stats.cursor_records += 1
        target = obj.get("targetId")
        if not isinstance(target, str):
            return None
        return Event("leaf", state.session_id, state.cwd, {"target_id": target})
    if state.version <= 1:
        entry_id, parent_id = f"v1:{position}", cursor.last_entry_id
        obj = _v1_links(obj)
    else:
        given_id, given_parent = obj.get("id"), obj.get("parentId")
        if not isinstance(given_id, str) or not given_id:
            stats.malformed += 1
            return None
        entry_id = given_id
        parent_id = given_parent if isinstance(given_parent, str) and given_parent else None
    stats.entries += 1
    entry, dropped = normalize_entry(obj, entry_id=entry_id, parent_id=parent_id, seq=position)
    stats.repaired += dropped
    cursor.last_entry_id = entry_id
    return _entry_event(state, entry)


def _entry_event(state: FileState, entry: dict[str, Any]) -> Event:
    """The event of a normalized entry, its ``<private>`` spans taken out
    (``ingest.markers``): an entry left without text is no evidence."""
    text = entry.get("text")
    if text:
        kept = strip_private(text)
        if kept is not text:
            entry["text"] = kept
            entry["eligible"] = bool(entry.get("eligible")) and bool(kept.strip())
    return Event("entry", state.session_id, state.cwd, {"entry": entry})


def _claude_event(obj: dict[str, Any], state: FileState, position: int,
                  stats: ReadStats) -> Event | None:
    if not claude_code.is_tree_entry(obj):
        if claude_code.is_bookkeeping(obj):
            stats.bookkeeping += 1
        else:
            stats.unknown_types += 1
        return None
    if obj.get("isSidechain") and state.session_id == obj.get("sessionId"):
        stats.sidechain += 1  # a sub-agent's step inside the main file: kept apart
        return None
    if claude_code.kind_of(obj) not in claude_code.TREE_TYPES:
        stats.unknown_types += 1  # kept as a text-less link so the chain is not cut
    stats.entries += 1
    entry = claude_code.normalize_entry(obj, seq=position)
    return _entry_event(state, entry)


def _codex_event(obj: dict[str, Any], state: FileState, position: int,
                 previous: str | None, stats: ReadStats) -> Event | None:
    """One Codex line: an entry chained to the previous one (a rollout is linear)."""
    if not codex.is_entry(obj):
        if codex.is_bookkeeping(obj):
            stats.bookkeeping += 1
        elif codex.kind_of(obj) == "session_meta":
            stats.extra_headers += 1
        else:
            stats.unknown_types += 1
        return None
    stats.entries += 1
    entry = codex.normalize_entry(obj, seq=position, parent_id=previous)
    return _entry_event(state, entry)


#: Forks of forks followed at most this deep for a fork's inherited history.
MAX_FORK_DEPTH = 16


def _codex_history(path: str, handle: BinaryIO, state: FileState, pending: list[Event],
                   stats: ReadStats, max_line_bytes: int) -> FileState:
    """A fork's inherited history as its own entries: the first ``history_base`` bytes of
    the parent's rollout (found in the same ``sessions`` folder; a parent that is itself
    a fork brings its own history first). A parent that cannot be found or read, or that
    belongs to another project (its ``cwd`` is not the fork's: its text is that project's,
    never this one's), leaves the fork's own lines only, with a warning."""
    obj = parse_object(_prefix(handle, state.header_len))
    identity = codex.identity_of(obj) if obj is not None else None
    chain: list[tuple[Path, int]] = []
    root = codex.sessions_root_of(Path(path))
    while identity is not None and identity.history_base and len(chain) < MAX_FORK_DEPTH:
        parent = codex.find_rollout(root, identity.history_base[0])
        if parent is None:
            stats.warnings.append(f"fork of {identity.history_base[0]}: its rollout is not "
                                  f"under {root}; only the fork's own lines are read")
            break
        try:
            with open_session_file(str(parent)) as parent_handle:
                first = parent_handle.readline(max_line_bytes + 1)
        except (OSError, NotASession):
            break
        obj = parse_object(first)
        base, identity = identity.history_base[1], \
            codex.identity_of(obj) if obj is not None else None
        if identity is None or identity.cwd != state.cwd:
            stats.warnings.append(f"fork of {parent.name}: that rollout belongs to another "
                                  "project; only the fork's own lines are read")
            break
        chain.append((parent, base))
    cursor = _Cursor(state, handle.fileno(), state.seen)
    for parent, length in reversed(chain):
        try:
            with open_session_file(str(parent)) as parent_handle:
                data = parent_handle.read(length)
        except OSError as error:
            stats.warnings.append(f"fork history {parent}: {error.strerror}")
            continue
        for line in data.splitlines()[1:]:  # the parent's session_meta is not history
            line_obj = parse_object(line, stats) if len(line) <= max_line_bytes else None
            if line_obj is not None and codex.kind_of(line_obj) != "session_meta":
                event = _event_for(line_obj, cursor, stats)
                if event is not None:
                    pending.append(event)
    return replace(state, positions=cursor.positions, last_entry_id=cursor.last_entry_id)


def _v1_links(obj: dict[str, Any]) -> dict[str, Any]:
    """Map a v1 compaction's ``firstKeptEntryIndex`` to the id that entry gets."""
    index = obj.get("firstKeptEntryIndex")
    if obj.get("type") == "compaction" and isinstance(index, int):
        return {**obj, "firstKeptEntryId": f"v1:{index}"}
    return obj


def _read_header(handle: BinaryIO, path: str, max_line_bytes: int,
                 stats: ReadStats) -> tuple[FileState, dict[str, Any]]:
    complete = False
    for start, end, line in _complete_lines(handle, 0, max_line_bytes, stats):
        complete = True
        if line is None:
            break
        obj = parse_object(line, stats)
        if obj is None:
            if line.strip():
                stats.malformed += 1
            continue
        if not is_header(obj):
            identity = codex.identity_of(obj)
            if identity is not None:
                return _codex_header(handle, path, identity, start, end, line)
            return _claude_header(handle, path, max_line_bytes, end)
        state = FileState(
            path=escape_surrogates(path), session_id=obj["id"], cwd=_str(obj.get("cwd")),
            version=header_version(obj),
            size=end, offset=end, header_len=end, header_hash=_digest(_prefix(handle, end)),
            last_line_start=start, last_line_hash=_digest(line),
            prefix_crc=_crc(handle.fileno(), 0, end),
        )
        header = {"file": state.path, "cwd": state.cwd, "version": state.version,
                  "started_at": _str(obj.get("timestamp")) or None,
                  "parent_session": _str(obj.get("parentSession")) or None}
        return state, header
    if not complete:
        raise HeaderPending(f"{path}: the session header is not complete yet")
    raise NotASession(f"{path}: not a session file (no Pi session header, no Claude Code "
                      "entry, no Codex session_meta)")


def _claude_header(handle: BinaryIO, path: str, max_line_bytes: int,
                   first_end: int) -> tuple[FileState, dict[str, Any]]:
    """A Claude Code file: identity from its first lines; its body is read from the start
    (there is no header line), and the first line stands in for one in rewrite checks."""
    identity, started = None, False
    for index, (_, _, line) in enumerate(_complete_lines(handle, 0, max_line_bytes,
                                                         ReadStats())):
        obj = parse_object(line) if line is not None else None
        identity = claude_code.identity_of(obj) if obj is not None else None
        started = started or (obj is not None and claude_code.is_bookkeeping(obj))
        if identity is not None or index + 1 >= IDENTITY_LINES:
            break
    if identity is None and started:  # a new session: only its queue lines so far
        raise HeaderPending(f"{path}: no Claude Code conversation entry yet")
    if identity is None:
        raise NotASession(f"{path}: not a session file (no Pi session header, no Claude "
                          "Code entry with a sessionId and cwd, no Codex session_meta)")
    state = FileState(path=escape_surrogates(path), session_id=identity.session_id,
                      cwd=identity.cwd, version=1, size=0, offset=0, header_len=first_end,
                      header_hash=_digest(_prefix(handle, first_end)),
                      last_line_start=0, last_line_hash=_digest(b""), positions=0,
                      format=claude_code.FORMAT, prefix_crc=0)
    header = {"file": state.path, "cwd": identity.cwd, "version": 1, "format": claude_code.FORMAT,
              "started_at": identity.started_at, "parent_session": identity.parent_session}
    return state, header


def _codex_header(handle: BinaryIO, path: str, identity: codex.Identity, start: int,
                  end: int, line: bytes) -> tuple[FileState, dict[str, Any]]:
    """A Codex rollout: its ``session_meta`` line is the header."""
    state = FileState(path=escape_surrogates(path), session_id=identity.session_id,
                      cwd=identity.cwd, version=1, size=end, offset=end, header_len=end,
                      header_hash=_digest(_prefix(handle, end)), last_line_start=start,
                      last_line_hash=_digest(line), format=codex.FORMAT,
                      prefix_crc=_crc(handle.fileno(), 0, end))
    header = {"file": state.path, "cwd": identity.cwd, "version": 1, "format": codex.FORMAT,
              "started_at": identity.started_at, "parent_session": identity.parent_session}
    return state, header


def is_header(obj: dict[str, Any]) -> bool:
    return obj.get("type") == "session" and isinstance(obj.get("id"), str) and bool(obj["id"])


def header_version(obj: dict[str, Any]) -> int:
    """The header's format version: 1 when absent or not an integer, clamped to 0..1000."""
    version = obj.get("version")
    if not isinstance(version, int):
        return 1
    return max(0, min(int(version), MAX_VERSION))


def _prefix(handle: BinaryIO, length: int) -> bytes:
    position = handle.tell()
    handle.seek(0)
    data = handle.read(length)
    handle.seek(position)
    return data


def _prefix_unchanged(handle: BinaryIO, state: FileState, size: int, seen: str) -> bool:
    """The cheap checks first (size, header, last line); then, when the file changed
    since ``state`` was read, every byte of the read prefix by its CRC."""
    if size < state.offset:
        return False
    if _digest(_prefix(handle, state.header_len)) != state.header_hash:
        return False
    handle.seek(state.last_line_start)
    last = handle.read(state.offset - state.last_line_start)
    if _digest(last) != state.last_line_hash:
        return False
    if state.prefix_crc is None or seen == state.seen:
        return True
    return _crc(handle.fileno(), 0, state.offset) == state.prefix_crc


def _last_line_extended(fd: int, state: FileState, size: int) -> bool:
    """The last line ``state`` read had no newline yet, and what follows it on that line
    now is more than whitespace: as a whole, that line is not the record read from it."""
    if state.offset <= state.header_len or size <= state.offset \
            or os.pread(fd, 1, state.offset - 1) == b"\n":
        return False
    position = state.offset
    while position < size:
        chunk = os.pread(fd, 1 << 16, position)
        if not chunk:
            return False
        rest = chunk.split(b"\n", 1)[0]
        if rest.strip():
            return True
        if len(rest) < len(chunk):  # the newline came after whitespace only
            return False
        position += len(chunk)
    return False


def _seen(info: os.stat_result) -> str:
    """What tells a changed file from an untouched one: its size and ctime (which every
    write moves and no program can set back)."""
    return f"{info.st_size}:{info.st_ctime_ns}"


def _crc(fd: int, start: int, end: int, crc: int = 0) -> int:
    """CRC-32 of the file's bytes [start, end), continuing ``crc`` (reads with ``pread``:
    the buffered handle's position stays where it is)."""
    while start < end:
        chunk = os.pread(fd, min(end - start, 1 << 20), start)
        if not chunk:
            break  # the file shrank meanwhile: the next read sees a rewrite
        crc = zlib.crc32(chunk, crc)
        start += len(chunk)
    return crc


def _complete_lines(handle: BinaryIO, offset: int, max_line_bytes: int,
                    stats: ReadStats, *, unterminated: bool = False
                    ) -> Iterator[tuple[int, int, bytes | None]]:
    """Yield (start, end, line bytes) for every complete line from ``offset``.

    An unterminated last line is left for a later run (``unterminated``: yielded too,
    without its newline, for the caller to judge). A line over the limit is skipped in
    chunks, counted, and yielded with ``None`` in place of its bytes.
    """
    handle.seek(offset)
    position = offset
    while True:
        line = handle.readline(max_line_bytes + 1)
        if not line:
            return
        if line.endswith(b"\n"):
            yield position, position + len(line), line
            position += len(line)
            continue
        if len(line) <= max_line_bytes:
            if unterminated:
                yield position, position + len(line), line
            return  # unterminated last line: wait until Pi finishes writing it
        rest, complete = _skip_to_newline(handle)
        if not complete:
            return
        length = len(line) + rest
        stats.oversized += 1
        stats.warnings.append(f"skipped a line of {length:,} bytes at offset {position:,}")
        yield position, position + length, None
        position += length


def _skip_to_newline(handle: BinaryIO) -> tuple[int, bool]:
    skipped = 0
    while True:
        chunk = handle.readline(1 << 20)
        skipped += len(chunk)
        if not chunk:
            return skipped, False
        if chunk.endswith(b"\n"):
            return skipped, True


def parse_object(line: bytes, stats: ReadStats | None = None) -> dict[str, Any] | None:
    """The JSON object on ``line`` (surrogates escaped, counted), or None."""
    try:
        obj, repaired = jsonio.loads_repaired(line)
    except jsonio.PARSE_ERRORS:
        return None
    if stats is not None:
        stats.repaired += repaired
    return obj if isinstance(obj, dict) else None


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
