"""What `lookback serve` adds over the in-process call, at 5,000 indexed messages.

    python bench/bench_server.py [--messages 5000] [--runs 100] [--flood 1200]

Indexes a corpus of the fixtures' real text (bench/corpus.py), then times, warm:

- ``in-process``: ``lookback.api.retrieve`` with one shared ``IndexReader``;
- ``http, cache off``: the same request over a keep-alive HTTP connection to a live
  server with its answer cache disabled — the full request cost (parse, auth, engine,
  encode, manifest record);
- ``http, cached``: the same request answered from the cache (Pi asks again with the
  same inputs before every model turn).

- ``flood``: a server under ``ulimit -n 1024`` holding ``--flood`` (1,200) connections that
  send nothing, asked the same request on a new connection ``--flood-runs`` times (the
  connection bound closes the longest-idle ones to make room; issue 20 item 10).

The request names an explicit branch and a context of the last 20 entries, like the
Pi extension, so the earlier entries are eligible evidence. Reports p50/p95/max in ms
and the HTTP overhead (p50 of the HTTP path minus p50 in process).

Wall-clock figures need a quiet machine. CPU time does not: ``cpu_ms_per_request``
is the CPU the server process spends per request (every thread, Linux schedstat)
against the in-process call's, so ``cpu_overhead_ms`` is what serving over HTTP
costs in CPU even on a loaded machine (the client's own CPU is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import write_corpus  # noqa: E402
from lookback import local_reader  # noqa: E402
from tests.server.client import UnixHTTPConnection, connect  # noqa: E402

MESSAGE = "Does `AgentSession` still return `AppMessage[]` after the refactor of messages.ts?"


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": round(statistics.median(ordered), 3),
            "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
            "max": round(ordered[-1], 3)}


class Server:
    """A real `lookback serve` process (its own interpreter and GIL) and a keep-alive client."""

    def __init__(self, environ: dict[str, str], max_open_files: int | None = None) -> None:
        # On the user's Unix socket, as clients use it; each server in a runtime folder of
        # its own (two serve one home here).
        self.runtime = tempfile.mkdtemp(prefix="lb-run-")
        env = {**os.environ, **environ, "XDG_RUNTIME_DIR": self.runtime}
        self.socket = local_reader.socket_path(environ["LOOKBACK_HOME"], env)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lookback.cli", "serve", "--quiet"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=None if max_open_files is None else lambda: _limit_files(max_open_files))
        wait_until_listening(self.socket, self.process)
        self.connection = UnixHTTPConnection(self.socket)

    def retrieve(self, body: bytes) -> None:
        self.connection.request("POST", "/v1/retrieve", body=body,
                                headers={"content-type": "application/json"})
        response = self.connection.getresponse()
        assert response.status == 200, response.status
        response.read()

    def cpu_ns(self) -> int:
        """CPU time of every thread of the server process so far (nanoseconds)."""
        total = 0
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError):  # a thread that just ended
                continue
        return total

    def close(self) -> None:
        self.connection.close()
        self.process.terminate()
        self.process.wait(timeout=10)
        shutil.rmtree(self.runtime, ignore_errors=True)


def _limit_files(count: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE,
                       (count, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def flood(environ: dict[str, str], body: bytes, idle: int, runs: int) -> dict[str, float]:
    """Latency of a request on a new connection while ``idle`` connections that send
    nothing are open, the server under ``ulimit -n 1024``."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < idle + 64:  # this process holds the idle connections
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, idle + 64), hard))
    server = Server(environ, max_open_files=1024)
    held: list[socket.socket] = []
    samples = []
    try:
        server.retrieve(body)  # warm
        for _ in range(idle):
            held.append(connect(server.socket, timeout=60))
        for _ in range(runs):
            started = time.perf_counter()
            connection = UnixHTTPConnection(server.socket, timeout=60)
            connection.request("POST", "/v1/retrieve", body=body,
                               headers={"content-type": "application/json"})
            response = connection.getresponse()
            assert response.status == 200, response.status
            response.read()
            connection.close()
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        for connection in held:
            connection.close()
        server.close()
    return percentiles(samples)


def interleaved(calls: dict, runs: int, warmup: int = 10) -> dict[str, list[float]]:
    """Time each call once per round, round after round, so load drift on a shared
    machine hits every variant alike."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for round_number in range(warmup + runs):
        for name, call in calls.items():
            started = time.perf_counter()
            call()
            if round_number >= warmup:
                samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def cpu_per_call(calls: dict, cpu: dict, runs: int) -> dict[str, float]:
    """Milliseconds of CPU per call: ``cpu[name]()`` is a CPU clock in nanoseconds."""
    spent = {}
    for name, call in calls.items():
        started = cpu[name]()
        for _ in range(runs):
            call()
        spent[name] = round((cpu[name]() - started) / runs / 1e6, 3)
    return spent


def wait_until_listening(path: str, process: subprocess.Popen, timeout: float = 30) -> None:
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        if process.poll() is not None:
            raise RuntimeError(f"lookback serve exited: {process.stderr.read().decode()[-2000:]}")
        try:
            connect(path, timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("lookback serve did not start")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--server-env", nargs="*", default=[], metavar="NAME=VALUE",
                        help="extra settings for the server, e.g. LOOKBACK_SERVER__WORKERS=0")
    parser.add_argument("--flood", type=int, default=1200,
                        help="idle connections for the flood case (0: skip it)")
    parser.add_argument("--flood-runs", type=int, default=20)
    args = parser.parse_args()

    from lookback import api
    from lookback.index.sink import EmbeddedSink
    from lookback.ingest.pipeline import ingest_files
    from lookback.ingest.scan import session_files
    from lookback.query.search.reader import IndexReader
    from lookback.settings import load_settings

    with tempfile.TemporaryDirectory() as temp:
        corpus, home = Path(temp) / "corpus", Path(temp) / "home"
        per_session = 500
        write_corpus(corpus, max(1, args.messages // per_session), per_session)
        with EmbeddedSink(home) as sink:
            report = ingest_files(session_files([corpus]), sink)
        session_file = sorted(corpus.glob("*.jsonl"))[-1]
        ids = [json.loads(line)["id"] for line in session_file.read_text().splitlines()[1:]]
        request = {"session_file": str(session_file), "message": MESSAGE, "leaf_id": ids[-1],
                   "branch_ids": ids, "context_ids": ids[-20:]}
        environ = {"LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "none.toml")}
        (home / "none.toml").write_text("")

        settings = load_settings(environ=environ)
        reader = IndexReader(settings.home)
        evidence = len(api.retrieve(request, settings=settings, reader=reader)["evidence"])
        body = json.dumps(request).encode()
        extra = dict(item.split("=", 1) for item in args.server_env)
        uncached = Server({**environ, **extra, "LOOKBACK_SERVER__CACHE_ENTRIES": "0"})
        cached = Server({**environ, **extra})
        calls = {
            "in_process_ms": lambda: api.retrieve(request, settings=settings, reader=reader),
            "http_cache_off_ms": lambda: uncached.retrieve(body),
            "http_cached_ms": lambda: cached.retrieve(body),
        }
        try:
            samples = interleaved(calls, args.runs)
            cpu = cpu_per_call(calls, {"in_process_ms": time.thread_time_ns,
                                       "http_cache_off_ms": uncached.cpu_ns,
                                       "http_cached_ms": cached.cpu_ns}, args.runs)
        finally:
            uncached.close()
            cached.close()
        flooded = flood({**environ, **extra, "LOOKBACK_SERVER__CACHE_ENTRIES": "0"}, body,
                        args.flood, args.flood_runs) if args.flood else None

    results = {"messages": report.read.entries, "evidence": evidence, "runs": args.runs,
               "request_bytes": len(body)}
    results.update({name: percentiles(values) for name, values in samples.items()})
    results["overhead_p50_ms"] = round(results["http_cache_off_ms"]["p50"]
                                       - results["in_process_ms"]["p50"], 3)
    paired = [h - i for h, i in zip(samples["http_cache_off_ms"], samples["in_process_ms"],
                                    strict=True)]
    results["overhead_paired_p50_ms"] = round(statistics.median(paired), 3)
    results["cpu_ms_per_request"] = {"in_process": cpu["in_process_ms"],
                                     "server_cache_off": cpu["http_cache_off_ms"],
                                     "server_cached": cpu["http_cached_ms"]}
    results["cpu_overhead_ms"] = round(cpu["http_cache_off_ms"] - cpu["in_process_ms"], 3)
    if flooded is not None:
        results["flood"] = {"idle_connections": args.flood, "ulimit_n": 1024,
                            "new_connection_retrieve_ms": flooded}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
