"""Helpers the tests share: the real Pi fixtures and indexing into a test home."""

from __future__ import annotations

from pathlib import Path

from lookback.index.sink import EmbeddedSink
from lookback.ingest.pipeline import IngestReport, ingest_files
from lookback.ingest.scan import session_files

FIXTURES = Path(__file__).parent / "fixtures" / "pi-sessions"


def fixture_path(name: str) -> Path:
    return FIXTURES / name


def index_paths(home: Path, *paths: Path) -> IngestReport:
    """Index files or folders into ``home`` the way ``lookback index`` does."""
    with EmbeddedSink(home) as sink:
        return ingest_files(session_files(paths), sink)
