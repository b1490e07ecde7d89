"""One read edge: a driver error while the reader's pool has a connection out leaves as
the project's own error (``index.store.read_errors``), and retrieval, history search and
source still fail open with its reason."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from lookback import api
from lookback.errors import Unavailable
from lookback.index import store
from lookback.index.layout import project_dir
from lookback.index.store import IndexCorrupt, IndexUnavailable
from lookback.query.search.reader import IndexReader
from lookback.settings import load_settings
from tests.support import index_paths
from tests.test_retrieve import write_session

CWD = "/made/up"


@pytest.fixture
def session(home: Path, tmp_path: Path) -> Path:
    path = write_session(tmp_path / "s.jsonl", ["the QuuxWidget plan", "filler", "more"],
                         cwd=CWD)
    index_paths(home, path)
    return path


def corrupt(home: Path, everything: bool = False) -> None:
    """Overwrite the second half of the project's index, or with ``everything`` every page
    after the first (the header and the schema stay SQLite's), so that whatever a read
    touches is damaged however the tables are laid out."""
    path = project_dir(home, CWD).index_path()
    assert path is not None
    data = bytearray(path.read_bytes())
    start = int.from_bytes(data[16:18], "big") if everything else len(data) // 2
    data[start:] = b"\x5a" * (len(data) - start)
    path.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def read_everything(reader: IndexReader, session: Path) -> None:
    with reader.session(session_file=str(session)) as view:
        view.connection.execute("SELECT text FROM entries").fetchall()
        view.connection.execute("SELECT rowid FROM entries_fts WHERE entries_fts MATCH "
                                "'quuxwidget'").fetchall()


def test_a_corrupt_index_is_the_projects_error_with_the_repair_command(home, session):
    corrupt(home)
    reader = IndexReader(home)
    try:
        with pytest.raises(IndexCorrupt) as caught:
            read_everything(reader, session)
    finally:
        reader.close()
    error = caught.value
    assert isinstance(error, Unavailable) and error.http_status == 503
    assert isinstance(error.__cause__, apsw.CorruptError)  # the driver's, kept as the cause
    assert "lookback reindex --repair --project" in str(error)


def test_a_locked_index_is_the_projects_error_and_retrieval_fails_open(home, session,
                                                                        monkeypatch):
    """A writer holding the index exclusively (WAL readers are never locked out by a
    mere writer): the reader cannot read it, says so in the project's terms, and
    retrieval answers ``disabled``. Readers here do not wait for the lock."""
    monkeypatch.setattr(store, "BUSY_TIMEOUT_MS", 0)
    path = project_dir(home, CWD).index_path()
    writer = apsw.Connection(str(path))
    writer.execute("PRAGMA locking_mode=EXCLUSIVE")
    writer.execute("BEGIN EXCLUSIVE")
    writer.execute("UPDATE meta SET value = value WHERE key = 'applied_seq'")
    reader = IndexReader(home)
    settings = load_settings(environ={"LOOKBACK_HOME": str(home)})
    try:
        with pytest.raises(IndexUnavailable) as caught:
            read_everything(reader, session)
        answer = api.retrieve({"session_file": str(session), "message": "QuuxWidget?",
                               "context_ids": ["m2"]}, settings=settings, reader=reader)
    finally:
        reader.close()
        writer.execute("ROLLBACK")
        writer.close()
    assert isinstance(caught.value, Unavailable) and caught.value.http_status == 503
    assert isinstance(caught.value.__cause__, apsw.BusyError)
    assert answer["status"] == "disabled" and "BusyError" in answer["diagnostics"][
        "warnings"][0]


def test_retrieval_search_and_source_fail_open_on_a_corrupt_index(home, session):
    corrupt(home, everything=True)
    settings = load_settings(environ={"LOOKBACK_HOME": str(home)})
    reader = IndexReader(home)
    common = {"session_file": str(session)}
    try:
        retrieved = api.retrieve({**common, "message": "the QuuxWidget plan?",
                                  "context_ids": ["m2"]}, settings=settings, reader=reader)
        searched = api.search({**common, "text": "QuuxWidget"}, settings=settings,
                              reader=reader)
        source = api.source({**common, "entry_id": "m0"}, settings=settings, reader=reader)
    finally:
        reader.close()
    assert retrieved["status"] == "disabled" and retrieved["evidence"] == []
    [warning] = retrieved["diagnostics"]["warnings"]
    assert warning.startswith("index unavailable: ") and "CorruptError" in warning
    assert "lookback reindex --repair" in warning
    for answer in (searched, source):
        assert answer["status"] == "disabled"
        assert "lookback reindex --repair" in answer["warnings"][0]
