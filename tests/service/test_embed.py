"""Background embedding through real dramatiq workers and the machine's Redis.

With ``retrieval.semantic = true`` every apply nudges ``embed_project`` on the
background queue; a background worker embeds the new entries, and semantic
retrieval then runs without a warning.
"""

from __future__ import annotations

from lookback.api import retrieve
from lookback.ingest.pipeline import ingest_files
from lookback.query.search.reader import IndexReader
from lookback.workers.sink import RedisSink
from tests.service.conftest import REDIS_URL, cleanup, make_service
from tests.service.helpers import expected_entries, indexed_entries, session_lines, wait_for
from tests.service.test_log_and_apply import write_session

CWD = "/work/pi-mono"


def _pending(service) -> int | None:
    from lookback.embedders.registry import get_embedder
    from lookback.index.embeddings import Stamp, count_pending
    from lookback.index.layout import project_dir
    from lookback.index.store import open_reader

    path = project_dir(service.home, CWD).index_path()
    if path is None:
        return None
    database = open_reader(path)
    try:
        return count_pending(database, Stamp.of(get_embedder("hashing")))
    finally:
        database.close()


def test_workers_embed_applied_entries_in_the_background(tmp_path) -> None:
    service = make_service(tmp_path, REDIS_URL, LOOKBACK_RETRIEVAL__SEMANTIC="true")
    started = []
    try:
        path = write_session(tmp_path / "sessions", "a.jsonl", session_lines("embed-1", CWD)[:400])
        started.append(service.worker().start())
        started.append(service.worker(queue="lookback-background", threads=1).start())
        with RedisSink(service.config) as sink:
            ingest_files([path], sink)
        expected = expected_entries(path)
        wait_for(lambda: indexed_entries(service.home, CWD) == expected, 60, "the entries")
        wait_for(lambda: _pending(service) == 0, 60, "the background embeddings")
        response = retrieve({"project": CWD, "session_id": "embed-1", "semantic": True,
                             "message": "watch the custom theme files and reload them live"},
                            settings=service.settings, reader=IndexReader(service.home))
        assert response["status"] == "ok"
        assert response["diagnostics"]["warnings"] == []
        assert response["diagnostics"]["semantic"]["used"] is True
    finally:
        for worker in started:
            worker.stop()
        cleanup(service)
