"""Service mode reads Claude Code sessions like Pi's: producer → Redis Stream → apply."""

from __future__ import annotations

from lookback.ingest.pipeline import ingest_files
from lookback.ingest.scan import session_files
from lookback.workers.apply import drain
from lookback.workers.sink import RedisSink
from tests.service.helpers import expected_entries, indexed_entries
from tests.test_claude_code import CWD, PROJECT_DIR


def test_claude_code_sessions_through_redis_equal_the_files(service) -> None:
    files = list(session_files([PROJECT_DIR]))
    with RedisSink(service.config) as sink:
        report = ingest_files(files, sink, strict=True)
    assert report.errors == [] and len(report.sessions) == 3
    drain(service.config, service.client, sink.project(CWD))
    expected = sorted(row for path in files for row in expected_entries(path))
    assert sorted(indexed_entries(service.home, CWD)) == expected
    with RedisSink(service.config) as sink:  # a re-run publishes nothing new
        assert ingest_files(files, sink, strict=True).events == 0
