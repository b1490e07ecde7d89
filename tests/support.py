"""Helpers the tests share: the real Pi fixtures, indexing into a test home, what got indexed."""

from __future__ import annotations

from pathlib import Path

from lookback.index.layout import project_dir
from lookback.index.sink import EmbeddedSink
from lookback.index.store import open_reader
from lookback.ingest.pipeline import IngestReport, ingest_files
from lookback.ingest.scan import session_files

FIXTURES = Path(__file__).parent / "fixtures" / "pi-sessions"


def fixture_path(name: str) -> Path:
    return FIXTURES / name


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
