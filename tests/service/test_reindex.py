"""Background reindex: a worker rebuilds a 100,000-entry index while readers keep
answering from the old file, appends keep flowing, and ``lookback status`` shows it.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from lookback.index.layout import project_dir
from lookback.index.project import ProjectWriter
from lookback.index.store import open_reader, write_meta
from lookback.ingest.events import Event
from lookback.ingest.pipeline import ingest_files
from lookback.ingest.reader import read_session
from lookback.workers.sink import RedisSink
from tests.service.helpers import LARGE, REPO, append, fts_hits, session_lines, wait_for

CWD = "/work/big-project"
ENTRIES = 100_000


def fixture_entries() -> list[dict]:
    """The real session's normalized entries (text, roles, types), to repeat."""
    return [event.payload["entry"] for batch in read_session(str(LARGE))
            for event in batch.events if event.kind == "entry"]


def build_big_index(home: Path) -> None:
    """100,000 entries in 100 sessions, written by the same writer the workers use."""
    source = fixture_entries()
    with ProjectWriter(home, CWD) as writer:
        for session in range(ENTRIES // 1000):
            sid = f"big-{session:03d}"
            events = [Event("session", sid, CWD, {"file": f"/sessions/{sid}.jsonl", "cwd": CWD,
                                                  "version": 1})]
            for n in range(1000):
                entry = dict(source[n % len(source)], id=f"v1:{n + 1}", seq=n + 1,
                             parent_id=f"v1:{n}" if n else None)
                events.append(Event("entry", sid, CWD, {"entry": entry}))
            writer.write(events)
        # as if written by an older tokenizer: the index now needs a rebuild
        with writer.connection:
            write_meta(writer.connection, "tokenizer_version", 0)


def lookback(service, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lookback.cli", *args], env=service.environ,
                          cwd=REPO, capture_output=True, text=True, timeout=60)


def test_reader_answers_while_a_worker_reindexes(service, workers, tmp_path) -> None:
    build_big_index(service.home)
    project = project_dir(service.home, CWD)
    old_generation = project.current_generation()
    expected_hits = sorted(fts_hits(service.home, CWD, "normalizedText"))
    assert len(expected_hits) == 2 * (ENTRIES // 1000)

    workers.append(service.worker(queue="lookback-background", threads=1).start())
    workers.append(service.worker().start())
    latencies: list[float] = []
    answers: set[tuple[str, ...]] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            started = time.perf_counter()
            connection = open_reader(project.index_path())
            rows = connection.execute(
                "SELECT count(*) FROM entries_fts WHERE entries_fts MATCH 'normalizedText'"
            ).fetchone()
            connection.close()
            latencies.append(time.perf_counter() - started)
            answers.add(tuple(map(str, rows)))
            time.sleep(0.002)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        queued = lookback(service, "reindex", "--queue")
        assert queued.returncode == 0, queued.stderr
        assert "enqueued 1 rebuilds" in queued.stdout
        # appends go on during the rebuild, through the index queue
        session = tmp_path / "live.jsonl"
        append(session, session_lines("live-1", CWD)[:300])
        with RedisSink(service.config) as sink:
            ingest_files([session], sink)
        progress_seen = wait_for(lambda: _reindex_state(service), 60, "reindex progress")
        wait_for(lambda: project.current_generation() == old_generation + 1, 120,
                 "the swap to the rebuilt generation")
    finally:
        stop.set()
        thread.join()
    assert progress_seen["state"] in ("queued", "running", "done")
    assert len(latencies) > 50, "the reader kept answering during the rebuild"
    # every answer came from a complete index: the old file or the rebuilt one
    assert answers <= {(str(len(expected_hits)),), (str(len(expected_hits) + 2),)}
    # Readers never wait for the writer: p95 of open+query+close stays in milliseconds.
    assert statistics.quantiles(latencies, n=20)[-1] < 0.05, max(latencies)
    wait_for(lambda: len(fts_hits(service.home, CWD, "normalizedText"))
             == len(expected_hits) + 2, 30, "the live session in the rebuilt index")
    status = json.loads(lookback(service, "status", "--json").stdout)
    [row] = [p for p in status["projects"] if p.get("cwd") == CWD]
    assert row["tokenizer_version"] >= 1 and row["generation"] == old_generation + 1
    assert row["service_reindex"].startswith("done")
    assert row["service_lag_events"] == 0
    assert status["queues"]["lookback-background"]["dead_letters"] == 0


def _reindex_state(service) -> dict[str, str] | None:
    project = project_dir(service.home, CWD).name
    state = service.client.hgetall(service.config.reindex_key(project))
    return {k.decode(): v.decode() for k, v in state.items()} or None
