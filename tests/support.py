"""Helpers the tests share: the real Pi fixtures, fresh folders and small tmpfs mounts, reading
a session file, indexing into a test home, what got indexed."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lookback.index.layout import project_dir
from lookback.index.sink import EmbeddedSink
from lookback.index.store import open_reader
from lookback.ingest.events import Event
from lookback.ingest.pipeline import IngestReport, ingest_files
from lookback.ingest.reader import FileState, ReadStats, read_session
from lookback.ingest.scan import session_files

FIXTURES = Path(__file__).parent / "fixtures" / "pi-sessions"


def fixture_path(name: str) -> Path:
    return FIXTURES / name


def fixture_message_texts() -> list[str]:
    """The non-empty texts of every message in two real Pi fixtures (the compacted session and
    the large one), in file order."""
    texts = []
    for name in ("before-compaction.jsonl", "large-session.jsonl"):
        for line in fixture_path(name).read_text().splitlines():
            entry = json.loads(line)
            if entry.get("type") != "message":
                continue
            content = entry["message"].get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.append("\n".join(block.get("text", "") for block in content
                                       if isinstance(block, dict)
                                       and isinstance(block.get("text"), str)))
    return [text for text in texts if text.strip()]


def as_another_user(command: Sequence[str]) -> list[str]:
    """``command`` run as uid and gid 65534 with no groups (``setpriv``, as root): a second
    Unix user, whom file modes bind."""
    return ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *command]


def write_pi_session(path: Path, entries: Iterable[tuple[str, str]], *, session_id: str,
                     cwd: str, compacted_after: str | None = None,
                     first_kept: str | None = None) -> Path:
    """A Pi session at ``path`` of one message per (entry id, text), assistant and user in
    turn, each a second after the last; with ``compacted_after``, a compaction follows that
    entry, keeping from ``first_kept`` on. (``tests.test_retrieve.write_session`` numbers
    its own ids and starts with the user.)"""
    lines: list[dict[str, Any]] = [{"type": "session", "version": 3, "id": session_id,
                                    "cwd": cwd, "timestamp": "2026-01-01T00:00:00Z"}]
    parent = None
    for number, (entry_id, text) in enumerate(entries):
        lines.append({"type": "message", "id": entry_id, "parentId": parent,
                      "timestamp": f"2026-01-01T00:00:{number:02d}Z",
                      "message": {"role": "user" if number % 2 else "assistant",
                                  "content": [{"type": "text", "text": text}],
                                  "timestamp": 1767225600000 + number}})
        parent = entry_id
        if entry_id == compacted_after:  # what came before is out of the context
            lines.append({"type": "compaction", "id": "compacted", "parentId": parent,
                          "timestamp": "2026-01-01T00:01:00Z", "summary": "earlier work",
                          "firstKeptEntryId": first_kept, "tokensBefore": 5000})
            parent = "compacted"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def new_folder(path: Path) -> Path:
    """``path``, created empty (a test's Lookback home, its project folder)."""
    path.mkdir()
    return path


@contextmanager
def tmpfs(point: Path, size: str) -> Iterator[Path]:
    """A real tmpfs of ``size`` (``"16m"``) mounted at the new folder ``point`` for the
    ``with`` block; the test is skipped where mounting is not allowed."""
    import pytest  # the benchmarks import this module without the test extra

    point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs here: {done.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


def read_all(path: Path, state: FileState | None = None
             ) -> tuple[list[Event], FileState | None, ReadStats]:
    """Every event of one read of ``path`` from ``state``, the state after it, its stats."""
    stats = ReadStats()
    batches = list(read_session(str(path), state, stats=stats))
    events = [event for batch in batches for event in batch.events]
    return events, (batches[-1].state if batches else state), stats


def entries(events: list[Event]) -> dict[str, dict]:
    """The entries among ``events``, by id."""
    return {e.payload["entry"]["id"]: e.payload["entry"] for e in events if e.kind == "entry"}


def index_paths(home: Path, *paths: Path) -> IngestReport:
    """Index files or folders into ``home`` the way ``lookback index`` does."""
    with EmbeddedSink(home) as sink:
        return ingest_files(session_files(paths), sink)


def entry_ids(home: Path, cwd: str) -> set[str]:
    """The ids of every entry in the index of project ``cwd`` under ``home``."""
    connection = open_reader(project_dir(home, cwd).index_path())
    try:
        return {row[0] for row in connection.execute("SELECT entry_id FROM entries")}
    finally:
        connection.close()


def persist_hook_context(rollout: Path, context: str, message_id: str) -> None:
    """Append to a Codex rollout what Codex writes for a hook's ``additionalContext``: a
    developer message marked as hook context."""
    line = {"timestamp": "2026-12-01T19:00:00.000Z", "type": "response_item", "payload": {
        "type": "message", "id": message_id, "role": "developer",
        "content": [{"type": "input_text", "text": context}],
        "internal_chat_message_metadata_passthrough": {
            "content_item_kinds": ["hooks.additional_context"]}}}
    with rollout.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(line, separators=(",", ":")) + "\n")
