"""Failover and fencing costs of service mode with several worker hosts.

    python bench/bench_failover.py [--entries 20000] [--lease 15] [--sweep 5]

On the machine's Redis (127.0.0.1:6379, or ``LOOKBACK_TEST_REDIS_URL``) under a
private key prefix, deleted afterwards:

1. The fence: ``Applying.allowed`` (lease renewal, drain record and owner read in one
   Lua script), which a drain runs inside each batch's transaction and after it —
   its latency, 2,000 calls.
2. Applying a project of ``--entries`` entries (bench/corpus.py's real text) in one
   process, with the stream trimmed after each batch and with ``workers.keep_log``
   (kept): events/s, and Redis's memory per kept event.
3. Failover: two real ``lookback worker`` processes (hosts a and b, separate data
   directories, ``--lease`` and ``--sweep`` seconds); host a owns the project and
   applies it; then a and all its worker processes get SIGKILL, and the clock runs
   until host b's index holds every entry (rebuilt from the kept stream).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import write_corpus  # noqa: E402
from bench.service_hosts import REDIS_URL, config_of, drop_keys, entries_in, environ  # noqa: E402
from lookback.ingest.pipeline import ingest_files  # noqa: E402
from lookback.workers.apply import drain  # noqa: E402
from lookback.workers.config import ServiceConfig  # noqa: E402
from lookback.workers.owner import Applying, take  # noqa: E402
from lookback.workers.sink import RedisSink  # noqa: E402

CWD = "/bench/failover"


def fence_latency(config: ServiceConfig, client: redis.Redis, project: str) -> list[float]:
    take(config, client, project)
    times = []
    with Applying(config, client, project) as applying:
        for _ in range(2000):
            started = time.perf_counter()
            assert applying.allowed()
            times.append((time.perf_counter() - started) * 1000)
    return times


def apply_rate(root: Path, sessions: Path, keep: bool, client: redis.Redis) -> dict[str, float]:
    prefix = f"lbbench-{uuid.uuid4().hex[:8]}:"
    env = environ(root, "bench", prefix, LOOKBACK_WORKERS__KEEP_LOG=str(keep).lower())
    config = config_of(env)
    memory_before = int(client.info("memory")["used_memory"])
    with RedisSink(config, client) as sink:
        ingest_files(sorted(sessions.glob("**/*.jsonl")), sink)
        project = sink.project(CWD)
    events = int(client.xlen(config.log_key(project)))
    memory = int(client.info("memory")["used_memory"]) - memory_before
    started = time.perf_counter()
    applied = 0
    while True:
        report = drain(config, client, project)
        applied += report.applied
        if not report.more:
            break
    seconds = time.perf_counter() - started
    kept = int(client.xlen(config.log_key(project)))
    return {"events": events, "applied": applied, "seconds": seconds,
            "events_per_s": applied / seconds, "kept": kept,
            "redis_bytes_per_event": memory / max(events, 1), "prefix": prefix}  # type: ignore[dict-item]


def failover(root: Path, sessions: Path, lease: float, sweep: float,
             client: redis.Redis, expected: int) -> dict[str, float]:
    prefix = f"lbbench-{uuid.uuid4().hex[:8]}:"
    extra = {"LOOKBACK_WORKERS__KEEP_LOG": "true", "LOOKBACK_WORKERS__LEASE_SECONDS": str(lease),
             "LOOKBACK_WORKERS__SWEEP_SECONDS": str(sweep)}
    (root / "a").mkdir()
    (root / "b").mkdir()
    env_a = environ(root / "a", "host-a", prefix, **extra)
    env_b = environ(root / "b", "host-b", prefix, **extra)
    config_a = config_of(env_a)
    project = RedisSink(config_a, client).project(CWD)
    take(config_a, client, project)
    argv = [sys.executable, "-m", "lookback", "worker", "--no-background"]
    log = (root / "workers.log").open("ab")
    host_a = subprocess.Popen(argv, env=env_a, stdout=log, stderr=log, start_new_session=True)
    host_b = subprocess.Popen(argv, env=env_b, stdout=log, stderr=log, start_new_session=True)
    try:
        with RedisSink(config_a, client) as sink:
            ingest_files(sorted(sessions.glob("**/*.jsonl")), sink)
        home_a, home_b = Path(env_a["LOOKBACK_HOME"]), Path(env_b["LOOKBACK_HOME"])
        while entries_in(home_a, CWD) < expected:
            time.sleep(0.1)
        groups = [host_a.pid]
        for record in (home_a / "workers").glob("*.json"):
            groups += json.loads(record.read_text())["groups"]
        killed = time.monotonic()
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while entries_in(home_b, CWD) < expected:
            time.sleep(0.05)
        return {"seconds": time.monotonic() - killed, "lease": lease, "sweep": sweep}
    finally:
        for process in (host_a, host_b):
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=60)
        drop_keys(client, prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--lease", type=float, default=15.0)
    parser.add_argument("--sweep", type=float, default=5.0)
    args = parser.parse_args()
    client = redis.Redis.from_url(REDIS_URL)
    print(f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        sessions = root / "sessions"
        per_session = 500
        write_corpus(sessions, max(args.entries // per_session, 1), per_session, cwd=CWD)
        expected = max(args.entries // per_session, 1) * per_session

        prefix = f"lbbench-{uuid.uuid4().hex[:8]}:"
        env = environ(root, "bench", prefix)
        try:
            times = sorted(fence_latency(config_of(env), client, "fence-bench"))
        finally:
            drop_keys(client, prefix)
        print(f"fence check (one Lua script): p50 {statistics.median(times):.3f} ms, "
              f"p95 {times[int(len(times) * 0.95)]:.3f} ms over {len(times)} calls")

        for keep in (False, True):
            (root / f"apply-{keep}").mkdir()
            result = apply_rate(root / f"apply-{keep}", sessions, keep, client)
            drop_keys(client, str(result.pop("prefix")))
            print(f"apply {'keep_log' if keep else 'trimmed '}: {result['applied']:,.0f} of "
                  f"{result['events']:,.0f} events in {result['seconds']:.2f} s = "
                  f"{result['events_per_s']:,.0f} events/s; {result['kept']:,.0f} left in the "
                  f"stream; Redis {result['redis_bytes_per_event']:,.0f} B per event")

        (root / "failover").mkdir()
        result = failover(root / "failover", sessions, args.lease, args.sweep, client, expected)
        print(f"failover: host b held all {expected:,} entries {result['seconds']:.1f} s after "
              f"host a's SIGKILL (lease {args.lease:g} s, sweep {args.sweep:g} s)")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
