"""Crash tests: SIGKILL a worker in the middle of its batches; kill and restart Redis
while producers write. Afterwards each index must equal what the session files hold:
nothing lost, nothing applied twice.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import redis

from lookback.index.status import applied_events
from lookback.ingest.pipeline import ingest_files
from lookback.workers.sink import RedisSink
from tests.service.conftest import cleanup, make_service
from tests.service.helpers import (
    append,
    expected_entries,
    indexed_entries,
    logged_entry_ids,
    session_lines,
    wait_for,
)
from tests.service.test_workers import start_watcher, stop

#: Kills and restarts workers and Redis: tens of seconds each.
pytestmark = pytest.mark.slow

CWD = "/work/crash-project"



def expected_all(paths: list[Path]) -> list[tuple[str, str, int, str]]:
    return sorted((entry for path in paths for entry in expected_entries(path)),
                  key=lambda e: (e[0], e[2]))


def assert_exact(home: Path, cwd: str, paths: list[Path]) -> None:
    expected = expected_all(paths)
    assert indexed_entries(home, cwd) == expected
    logged = logged_entry_ids(home, cwd)
    assert len(logged) == len(set(logged)) == len(expected), "an entry was logged twice"


def test_sigkill_worker_mid_batch_then_restart(service, workers, tmp_path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    paths = []
    for n in range(12):  # ~12,000 events queued before any worker runs
        path = folder / f"s{n}.jsonl"
        append(path, session_lines(f"crash-{n}", CWD))
        paths.append(path)
    with RedisSink(service.config) as sink:
        total = ingest_files(paths, sink).events
    service.environ["LOOKBACK_WORKERS__BATCH_EVENTS"] = "300"  # many small transactions
    first = service.worker(threads=2).start()
    workers.append(first)
    wait_for(lambda: applied_events(service.home, CWD) > 1000, 60, "the worker to get going",
             every=0.005)
    first.kill()  # SIGKILL master and workers: an open transaction dies with them
    at_kill = applied_events(service.home, CWD)
    assert 0 < at_kill < total, "the kill must land in the middle of the work"

    workers.append(service.worker(threads=2).start())
    wait_for(lambda: applied_events(service.home, CWD) >= total, 90, "the restarted worker")
    time.sleep(0.5)  # any late duplicate nudges of the killed worker come back now
    assert_exact(service.home, CWD, paths)
    log_key = service.config.log_key(sink.project(CWD))
    wait_for(lambda: service.client.xlen(log_key) == 0, 30, "the log trimmed after the commit")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class OwnRedis:
    """A private redis-server with an append-only file, so killing it is our business."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.folder.mkdir(exist_ok=True)
        self.process = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port),
             "--bind", "127.0.0.1", "--appendonly", "yes", "--appendfsync", "always",
             "--save", "", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        wait_for(lambda: _pings(client), 10, "redis-server to start")
        client.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _pings(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


def test_redis_killed_and_restarted_while_producers_write(tmp_path) -> None:
    """The outage is made observable, not hoped for: the writers append the second half
    of their sessions only once Redis is dead, and Redis comes back only after the
    watcher has said it cannot reach it (so the watcher certainly had to retry)."""
    own = OwnRedis(tmp_path / "redis")
    own.start()
    service = make_service(tmp_path, own.url)
    worker = service.worker(threads=2)
    watcher = None
    outage = threading.Event()
    try:
        worker.start()
        folder = tmp_path / "sessions"
        paths = [folder / f"p{n}" / f"s{n}.jsonl" for n in range(2)]
        for path in paths:
            path.parent.mkdir(parents=True)
        watcher = start_watcher(service, folder)

        def write(path: Path, session: str) -> None:
            lines = session_lines(session, CWD)
            for start in range(0, len(lines), 20):
                if start >= len(lines) // 2:
                    outage.wait(120)  # the rest is written while Redis is down
                append(path, lines[start:start + 20])
                time.sleep(0.02)

        writers = [threading.Thread(target=write, args=(path, f"redis-{n}"))
                   for n, path in enumerate(paths)]
        for thread in writers:
            thread.start()
        wait_for(lambda: applied_events(service.home, CWD) > 300, 60, "events flowing")
        own.kill()  # mid-stream: producers and workers lose Redis
        outage.set()
        log = tmp_path / "watch.log"
        wait_for(lambda: "cannot reach Redis" in log.read_text(), 60,
                 "the watcher to notice the outage")
        own.start()  # same port, same append-only file
        for thread in writers:
            thread.join()
        wait_for(lambda: indexed_entries(service.home, CWD) == expected_all(paths), 90,
                 "every entry after the Redis restart")
        assert_exact(service.home, CWD, paths)
    finally:
        outage.set()
        if watcher is not None:
            stop(watcher)
        worker.stop()
        cleanup(service)
        own.kill()
