"""``lookback index``'s bulk mode (no fsyncs while creating indexes, no checkpoint on
close, one sync at the end) writes exactly what the ordinary writer writes, and the
result is an ordinary index: readable, appendable, and current-schema."""

from __future__ import annotations

from pathlib import Path

from lookback.index.layout import list_projects
from lookback.index.sink import EmbeddedSink
from lookback.index.store import needs_rebuild, open_reader, read_meta
from lookback.ingest.pipeline import ingest_files
from lookback.ingest.scan import session_files
from tests.support import FIXTURES


def index(home: Path, *, bulk: bool) -> None:
    with EmbeddedSink(home, bulk=bulk) as sink:
        ingest_files(session_files([FIXTURES]), sink)


def contents(home: Path) -> dict[str, list]:
    found = {}
    for project in list_projects(home):
        connection = open_reader(project.index_path())
        try:
            assert not needs_rebuild(connection)
            assert read_meta(connection, "cwd")
            found[project.name] = [tuple(row) for row in connection.execute(
                "SELECT session_id, entry_id, seq, text, eligible FROM entries "
                "ORDER BY session_id, seq")] + [tuple(row) for row in connection.execute(
                "SELECT rowid FROM entries_fts WHERE entries_fts MATCH 'session' "
                "ORDER BY rowid")]
        finally:
            connection.close()
    return found


def test_bulk_writes_what_the_ordinary_writer_writes(tmp_path) -> None:
    index(tmp_path / "bulk", bulk=True)
    index(tmp_path / "plain", bulk=False)
    bulk, plain = contents(tmp_path / "bulk"), contents(tmp_path / "plain")
    assert bulk == plain and len(bulk) >= 2


def test_a_bulk_index_takes_appends_afterwards(tmp_path, session_copy) -> None:
    path = session_copy("pi-session-v3.jsonl")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[: len(lines) // 2]))
    home = tmp_path / "home"
    with EmbeddedSink(home, bulk=True) as sink:
        ingest_files([path], sink)
    path.write_text("".join(lines))
    with EmbeddedSink(home, bulk=True) as sink:
        second = ingest_files([path], sink)
    with EmbeddedSink(tmp_path / "once") as sink:
        ingest_files([path], sink)
    assert second.read.entries > 0
    assert contents(home) == contents(tmp_path / "once")
