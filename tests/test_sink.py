"""The embedded sink gathers small batches per project and commits them together."""

from __future__ import annotations

import shutil

from lookback.index.layout import project_dir
from lookback.index.sink import EmbeddedSink
from lookback.index.store import open_reader
from lookback.ingest.pipeline import ingest_files
from tests.support import fixture_path


def test_small_files_commit_together_and_states_land_with_their_events(home, tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    for name in ("pi-session-v3.jsonl", "branching.jsonl"):
        shutil.copyfile(fixture_path(name), folder / name)
    files = sorted(folder.iterdir())
    with EmbeddedSink(home, flush_events=1000) as sink:
        ingest_files(files, sink)
        # nothing committed yet: both files' events wait in the sink
        assert project_dir(home, "/workspace/demo").index_path() is not None
        db = open_reader(project_dir(home, "/workspace/demo").index_path())
        assert db.execute("SELECT count(*) FROM entries").fetchone()[0] == 0
        # but a second read of the same file in this run resumes from the pending state
        assert sink.file_state(str(folder / "pi-session-v3.jsonl"), "/workspace/demo")
    db = open_reader(project_dir(home, "/workspace/demo").index_path())
    assert db.execute("SELECT count(*) FROM entries").fetchone()[0] == 10
    assert db.execute("SELECT count(*) FROM files").fetchone()[0] == 1
    with EmbeddedSink(home) as sink:
        assert ingest_files(files, sink).events == 0
