"""Service-mode pipeline benchmark: bulk throughput and freshness.

    .venv/bin/python bench/bench_pipeline.py [--entries 40000] [--seconds 10]

Bulk: session events are published to Redis first (producer rate printed too), then
dramatiq workers (1, then 2 processes) apply them into 4 project indexes; the rate
is entries applied per second from the first applied batch to the last.
Freshness: ``lookback watch`` and a worker run while a writer appends lines at a
steady 200 entries/s; for each line, the time from its append to the moment it is in
the index (visible to a new reader) gives p50/p95.

Uses the Redis at $LOOKBACK_REDIS_URL (default redis://127.0.0.1:6379/0) under a
private key prefix that is deleted afterwards. Text comes from the real Pi session
tests/fixtures/pi-sessions/large-session.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import redis

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lookback.index.layout import project_dir  # noqa: E402
from lookback.index.status import applied_events  # noqa: E402
from lookback.index.store import open_reader  # noqa: E402
from lookback.ingest.pipeline import ingest_files  # noqa: E402
from lookback.settings import load_settings  # noqa: E402
from lookback.workers.config import ServiceConfig  # noqa: E402
from lookback.workers.owner import my_queues  # noqa: E402
from lookback.workers.sink import RedisSink  # noqa: E402

LARGE = REPO / "tests" / "fixtures" / "pi-sessions" / "large-session.jsonl"


def environment(home: Path, prefix: str) -> dict[str, str]:
    return {**os.environ, "LOOKBACK_HOME": str(home),
            "LOOKBACK_REDIS_URL": os.environ.get("LOOKBACK_REDIS_URL",
                                                 "redis://127.0.0.1:6379/0"),
            "LOOKBACK_WORKERS__KEY_PREFIX": prefix, "LOOKBACK_CONFIG": os.devnull,
            "dramatiq_worker_timeout": "100", "dramatiq_queue_prefetch": "2"}


def start_workers(environ: dict[str, str], processes: int) -> subprocess.Popen:
    """The index group as `lookback worker` starts it: the shared queue and this host's
    own (a project's nudges go there once this host owns it, workers.owner)."""
    own_index, _ = my_queues(ServiceConfig.from_settings(load_settings(environ=environ)))
    return subprocess.Popen(
        [sys.executable, "-m", "dramatiq", "lookback.workers.actors", "--queues", "lookback-index",
         own_index, "--processes", str(processes), "--threads", "2"],
        env=environ, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)


def stop(process: subprocess.Popen) -> None:
    os.killpg(process.pid, 15)
    process.wait(timeout=30)



def session_file(path: Path, session_id: str, cwd: str) -> None:
    lines = LARGE.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header.update(id=session_id, cwd=cwd)
    path.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))


def bulk(entries: int, processes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        prefix = f"lbbench-{uuid.uuid4().hex[:8]}:"
        environ = environment(tmp_path / "home", prefix)
        config = ServiceConfig.from_settings(load_settings(environ=environ))
        projects = [f"/bench/project-{n}" for n in range(4)]
        files = []
        per_file = sum(1 for _ in open(LARGE)) - 1
        for n in range(max(entries // per_file, 4)):
            path = tmp_path / "sessions" / f"s{n}.jsonl"
            path.parent.mkdir(exist_ok=True)
            session_file(path, f"bulk-{n}", projects[n % len(projects)])
            files.append(path)
        started = time.perf_counter()
        with RedisSink(config) as sink:
            total = ingest_files(files, sink).events
        publish_seconds = time.perf_counter() - started
        worker = start_workers(environ, processes)
        try:
            first = None
            while True:
                done = sum(applied_events(config.home, cwd) for cwd in projects)
                now = time.perf_counter()
                if done and first is None:
                    first = (now, done)
                if done >= total:
                    break
                time.sleep(0.01)
        finally:
            stop(worker)
            _cleanup(config)
        seconds = max(now - first[0], 1e-6)
        return {"events": total, "publish_per_s": total / publish_seconds,
                "apply_per_s": (total - first[1]) / seconds}


def freshness(seconds: float, rate: int = 200) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        prefix = f"lbbench-{uuid.uuid4().hex[:8]}:"
        environ = environment(tmp_path / "home", prefix)
        config = ServiceConfig.from_settings(load_settings(environ=environ))
        cwd = "/bench/fresh"
        lines = LARGE.read_text().splitlines(keepends=True)
        header = json.loads(lines[0])
        header.update(id="fresh-1", cwd=cwd)
        folder = tmp_path / "sessions"
        folder.mkdir()
        path = folder / "fresh.jsonl"
        path.write_text(json.dumps(header) + "\n")
        worker = start_workers(environ, 1)
        watcher = subprocess.Popen([sys.executable, "-m", "lookback.cli", "watch", str(folder)],
                                   env=environ, cwd=REPO, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        appended: list[float] = []
        visible: dict[int, float] = {}
        stop_polling = threading.Event()

        def poll() -> None:
            seen = 0
            while not stop_polling.is_set():
                index = project_dir(config.home, cwd).index_path()
                if index is not None:
                    connection = open_reader(index)
                    row = connection.execute("SELECT max(seq) FROM entries").fetchone()
                    connection.close()
                    now = time.perf_counter()
                    for seq in range(seen + 1, (row[0] or 0) + 1):
                        visible[seq] = now
                    seen = max(seen, row[0] or 0)
                time.sleep(0.002)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            time.sleep(3)  # let the watcher and the worker start
            body = [line for line in lines[1:] if line.strip()]
            count = int(seconds * rate)
            started = time.perf_counter()
            with open(path, "a") as handle:
                for n in range(count):
                    target = started + n / rate
                    delay = target - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    handle.write(body[n % len(body)])
                    handle.flush()
                    appended.append(time.perf_counter())
            deadline = time.perf_counter() + 30
            while len(visible) < count and time.perf_counter() < deadline:
                time.sleep(0.05)
        finally:
            stop_polling.set()
            poller.join()
            watcher.terminate()
            watcher.wait(timeout=30)
            stop(worker)
            _cleanup(config)
        # entry seq n (v1 ids count the header as 0) is the n-th appended line
        return [visible[n + 1] - appended[n] for n in range(len(appended)) if n + 1 in visible]


def _cleanup(config: ServiceConfig) -> None:
    client = redis.Redis.from_url(config.redis_url)
    keys = list(client.scan_iter(match=f"{config.prefix}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=40_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores; Redis {os.environ.get('LOOKBACK_REDIS_URL', 'local')}")
    for processes in (1, 2):
        result = bulk(args.entries, processes)
        print(f"bulk, {processes} worker process(es): {result['events']:,} events, "
              f"published {result['publish_per_s']:,.0f}/s, "
              f"applied {result['apply_per_s']:,.0f} entries/s (target >= 10,000)")
    delays = freshness(args.seconds)
    quantiles = statistics.quantiles(delays, n=20)
    print(f"freshness at 200 entries/s: {len(delays):,} entries, "
          f"p50 {statistics.median(delays) * 1000:.0f} ms, p95 {quantiles[-1] * 1000:.0f} ms, "
          f"max {max(delays) * 1000:.0f} ms (target p95 <= 250 ms)")


if __name__ == "__main__":
    main()
