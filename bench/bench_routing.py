"""Throughput of service mode with 1-3 worker hosts, and what routing costs a request.

    python bench/bench_routing.py [--hosts 1 2 3] [--projects 6] [--entries 12000]
                                  [--clients 4] [--seconds 15]

For each host count, on the machine's Redis (127.0.0.1:6379, or
``LOOKBACK_TEST_REDIS_URL``) under a private key prefix, deleted afterwards: that many
"hosts" (separate data directories, one ``lookback worker`` process each, one TCP
``lookback serve`` each with a shared token); the projects are placed round-robin
(``owner --take``'s function).

1. Applying: every session is published (bench/corpus.py's real text, compacted
   sessions) while the projects are paused; the clock runs from their release until
   every owner's index holds every entry: events/s.
2. Reading through one URL: ``--clients`` threads send ``/v1/retrieve`` (naming the
   session file, as the Pi extension does) about random projects to host 1's reader for
   ``--seconds``; requests about host 1's own projects are answered there, the others
   forwarded to their owner's reader. Requests/s, p50/p95 of each kind, answers not
   ``ok`` (must be 0).
3. The owner lookup every request in service mode makes (``workers.routes.route``):
   p50/p95 over 2,000 calls, for a project of this host (one GET) and of another (GET
   and one pipelined round trip).

All processes share this machine's cores: more hosts add coordination, not CPUs.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import service_hosts  # noqa: E402
from bench.corpus import write_corpus  # noqa: E402
from bench.service_hosts import REDIS_URL, config_of, drop_keys, entries_in  # noqa: E402
from lookback.ingest.pipeline import ingest_files  # noqa: E402
from lookback.ingest.reader import read_session  # noqa: E402
from lookback.workers.config import ServiceConfig  # noqa: E402
from lookback.workers.nudge import nudge  # noqa: E402
from lookback.workers.owner import pause, take  # noqa: E402
from lookback.workers.routes import route  # noqa: E402
from lookback.workers.sink import RedisSink  # noqa: E402

CWD = "/bench/routing"
TOKEN = "bench-routing-token-0123"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def environ(root: Path, host: str, prefix: str) -> dict[str, str]:
    """A host's environment with a TCP reader on a free port, the shared token, no cache."""
    return service_hosts.environ(
        root, host, prefix, LOOKBACK_SERVER__HOST="127.0.0.1",
        LOOKBACK_SERVER__PORT=str(free_port()),
        LOOKBACK_SERVER__TOKENS=json.dumps({TOKEN: "*"}), LOOKBACK_SERVER__CACHE_ENTRIES="0")


def questions(sessions: Path, count: int, seed: int = 7) -> list[tuple[str, dict]]:
    """``count`` (cwd, retrieve body) pairs: words of an early entry of a random session."""
    chooser = random.Random(seed)
    files = sorted(sessions.glob("**/*.jsonl"))
    found = []
    for _ in range(count):
        path = chooser.choice(files)
        texts, cwd = [], ""
        for batch in read_session(str(path)):
            for event in batch.events:
                cwd = event.cwd or cwd
                entry = event.payload.get("entry") if event.kind == "entry" else None
                if entry and len(entry.get("text", "").split()) > 6:
                    texts.append(entry["text"])
        words = texts[chooser.randrange(max(1, len(texts) // 2))].split()[:14]
        found.append((cwd, {"session_file": str(path), "message": " ".join(words)}))
    return found


def percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))] if ordered else 0.0


def ask(port: int, plan: list[tuple[str, dict]], local: set[str], seconds: float,
        results: dict[str, list[float]], wrong: list[int], seed: int) -> None:
    chooser = random.Random(seed)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"content-type": "application/json", "authorization": f"Bearer {TOKEN}"}
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        cwd, body = chooser.choice(plan)
        started = time.perf_counter()
        try:
            connection.request("POST", "/v1/retrieve", json.dumps(body), headers)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException):
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            wrong.append(1)
            continue
        took = (time.perf_counter() - started) * 1000
        if response.status != 200 or json.loads(data).get("status") != "ok":
            wrong.append(1)
        results["local" if cwd in local else "forwarded"].append(took)
    connection.close()


def forward_cost(envs: list[dict[str, str]], plan: list[tuple[str, dict]],
                 owner_of: dict[str, int], seconds: float) -> tuple[float, float]:
    """Median latency of questions about other hosts' projects, asked in turn through
    host 0's reader and straight to their owner's (one client, keep-alive)."""
    headers = {"content-type": "application/json", "authorization": f"Bearer {TOKEN}"}
    ports = [int(env["LOOKBACK_SERVER__PORT"]) for env in envs]
    connections = {port: http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                   for port in ports}
    times: dict[str, list[float]] = {"forwarded": [], "direct": []}
    remote = [(cwd, body) for cwd, body in plan if owner_of[cwd] != 0]
    ends = time.monotonic() + seconds
    number = 0
    while time.monotonic() < ends and remote:
        cwd, body = remote[number % len(remote)]
        number += 1
        for kind, port in (("forwarded", ports[0]), ("direct", ports[owner_of[cwd]])):
            started = time.perf_counter()
            connection = connections[port]
            try:
                connection.request("POST", "/v1/retrieve", json.dumps(body), headers)
                connection.getresponse().read()
            except (OSError, http.client.HTTPException):
                connection.close()
                continue
            times[kind].append((time.perf_counter() - started) * 1000)
    for connection in connections.values():
        connection.close()
    return statistics.median(times["forwarded"]), statistics.median(times["direct"])


def lookup_latency(config: ServiceConfig, client: redis.Redis, project: str) -> list[float]:
    times = []
    for _ in range(2000):
        started = time.perf_counter()
        route(config, client, project)
        times.append((time.perf_counter() - started) * 1000)
    return sorted(times)


def run_hosts(root: Path, sessions: Path, hosts: int, projects: int, expected: dict[str, int],
              args: argparse.Namespace, client: redis.Redis) -> None:
    prefix = f"lbbench-{uuid.uuid4().hex[:8]}:"
    envs = [environ(root / f"h{n}", f"h{n}", prefix) for n in range(hosts)]
    configs = [config_of(env) for env in envs]
    cwds = sorted(expected)
    owner_of = {cwd: number % hosts for number, cwd in enumerate(cwds)}
    for cwd, number in owner_of.items():
        take(configs[number], client, RedisSink(configs[0], client).project(cwd))
    log = (root / f"processes-{hosts}.log").open("ab")
    started: list[subprocess.Popen] = []
    try:
        for env in envs:
            Path(env["LOOKBACK_HOME"]).mkdir(parents=True, exist_ok=True)
            started.append(subprocess.Popen(
                [sys.executable, "-m", "lookback", "worker", "--no-background",
                 "--processes", "1"], env=env, stdout=log, stderr=log,
                start_new_session=True))
            started.append(subprocess.Popen(
                [sys.executable, "-m", "lookback", "serve", "--quiet"], env=env,
                stdout=log, stderr=log, start_new_session=True))
        for config in configs:
            reader_key = config.reader_key(f"{config.host}:{config.home}")
            lease_key = config.lease_key(f"{config.host}:{config.home}")
            while not (client.exists(reader_key) and client.exists(lease_key)):
                time.sleep(0.1)
        # 1. Applying: published while every project is paused, then released at once.
        keys = {cwd: RedisSink(configs[0], client).project(cwd) for cwd in cwds}
        for key in keys.values():
            pause(configs[0], client, key)
        with RedisSink(configs[0], client) as sink:
            events = ingest_files(sorted(sessions.glob("**/*.jsonl")), sink).events
        begun = time.perf_counter()
        for cwd, key in keys.items():
            take(configs[owner_of[cwd]], client, key)
            nudge(configs[owner_of[cwd]], client, key, force=True)
        homes = [Path(env["LOOKBACK_HOME"]) for env in envs]
        while any(entries_in(homes[owner_of[cwd]], cwd) < count
                  for cwd, count in expected.items()):
            time.sleep(0.05)
        seconds = time.perf_counter() - begun
        print(f"{hosts} host(s): {events:,} events applied in {seconds:.1f} s: "
              f"{events / seconds:,.0f} events/s")

        # 2. Reading through host 1's reader.
        plan = questions(sessions, 64)
        local = {cwd for cwd, number in owner_of.items() if number == 0}
        results: dict[str, list[float]] = {"local": [], "forwarded": []}
        wrong: list[int] = []
        threads = [threading.Thread(target=ask, args=(int(envs[0]["LOOKBACK_SERVER__PORT"]),
                                                       plan, local, args.seconds, results,
                                                       wrong, seed))
                   for seed in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        total = sum(len(times) for times in results.values())
        line = f"  reader of h0, {args.clients} clients: {total / args.seconds:,.0f} requests/s"
        for kind in ("local", "forwarded"):
            times = sorted(results[kind])
            if times:
                line += (f"; {kind} {len(times):,}: p50 {statistics.median(times):.1f} ms, "
                         f"p95 {percentile(times, 0.95):.1f} ms")
        print(line + f"; not ok: {len(wrong)}")

        if hosts > 1:  # one client, alternating: the same question forwarded and direct
            extra = forward_cost(envs, plan, owner_of, args.seconds)
            print(f"  one client, the same questions: through h0 (forwarded) p50 "
                  f"{extra[0]:.1f} ms, straight to the owner's reader p50 {extra[1]:.1f} ms: "
                  f"forwarding adds {extra[0] - extra[1]:.1f} ms")

        # 3. The owner lookup.
        own = RedisSink(configs[0], client).project(cwds[0])
        times = lookup_latency(configs[0], client, own)
        line = (f"  owner lookup, own project: p50 {statistics.median(times):.3f} ms, "
                f"p95 {percentile(times, 0.95):.3f} ms")
        if hosts > 1:
            other = RedisSink(configs[0], client).project(cwds[1])
            times = lookup_latency(configs[0], client, other)
            line += (f"; another host's: p50 {statistics.median(times):.3f} ms, "
                     f"p95 {percentile(times, 0.95):.3f} ms")
        print(line)
    finally:
        for process in started:
            if process.poll() is None:
                process.terminate()
        for process in started:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        drop_keys(client, prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--projects", type=int, default=6)
    parser.add_argument("--entries", type=int, default=12_000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=15.0)
    args = parser.parse_args()
    client = redis.Redis.from_url(REDIS_URL)
    print(f"load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        sessions = root / "sessions"
        per_session = 200
        count = max(args.entries // per_session, args.projects)
        write_corpus(sessions, count, per_session, cwd=CWD, projects=args.projects,
                     compact_keep=0.1)
        expected: dict[str, int] = {}
        for number in range(count):
            cwd = f"{CWD}-{number % args.projects}"
            expected[cwd] = expected.get(cwd, 0) + per_session
        for hosts in args.hosts:
            run_hosts(root / f"run-{hosts}", sessions, hosts, args.projects, expected, args,
                      client)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
