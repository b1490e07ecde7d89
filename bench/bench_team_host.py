"""A team host: thousands of projects indexed, several agents asking one `lookback serve`.

    python bench/bench_team_host.py [--projects 2000] [--clients 4] [--seconds 30]
                                    [--pool 256] [--nofile 1024] [--cache]

1. Writes ``--projects`` projects of real fixture text (bench/corpus.py), each with
   ``--sessions`` sessions of ``--entries`` entries ending in a compaction that keeps
   the last fifth in context, in Pi's folder layout; indexes them with one
   ``lookback index`` run and reports entries/s (target ≥ 5,000 at 2,000 × 20).
2. Computes the reference answer of one question per project (a session picked at
   random; named by its file for half the projects, by project and session id for
   the rest) with ``lookback.api.retrieve`` in a quiet process.
3. Starts ``lookback serve`` under an open-files limit of ``--nofile`` (the common
   1,024) with a read pool of ``--pool`` open files, the answer cache off unless
   ``--cache`` (so every request runs the engine), and freshness off (a team host's
   indexes are kept by workers; ``--freshness`` turns it on), then runs ``--clients``
   client processes for ``--seconds``, each on one keep-alive connection asking about
   random projects. An answer is wrong when its status is not ``ok`` or its evidence
   ids differ from the reference.
4. Samples the server's open files and RSS from /proc all along.

Targets (issue 11): 0 wrong, open files ≤ pool + 64, RSS ≤ 150 MB, p95 ≤ 20 ms with 4
clients on 2 cores. The load average is printed: on a shared machine it skews
latency and throughput, never the correctness or resource figures.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import write_corpus  # noqa: E402

CWD = "/team/project"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


#: A team host's reader is on TCP, which needs a token (docs/reader-service.md).
TOKEN = "bench-team-token-0000"


def environ(home: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": os.devnull,
            "LOOKBACK_SERVER__TOKENS": json.dumps({TOKEN: "*"}), **extra}


# -- 1. corpus and indexing ----------------------------------------------------------------


def build(work: Path, projects: int, sessions: int, entries: int) -> dict:
    corpus = work / "corpus"
    written = write_corpus(corpus, projects * sessions, entries, cwd=CWD, projects=projects,
                           compact_keep=0.2, pi_folders=True)
    home = work / "home"
    started, cpu_before = time.perf_counter(), _children_cpu()
    out = subprocess.run([sys.executable, "-m", "lookback.cli", "index", str(corpus), "--json"],
                         env=environ(home), check=True, capture_output=True, text=True).stdout
    wall, cpu = time.perf_counter() - started, _children_cpu() - cpu_before
    summary = json.loads(out)
    entries = summary["entries_added"]
    return {"entries_written": written, "entries_indexed": entries,
            "projects": summary["projects"], "sessions": summary["sessions"],
            "index_seconds": summary["seconds"], "index_wall_seconds": round(wall, 2),
            "index_cpu_seconds": round(cpu, 2),
            "entries_per_second": round(entries / summary["seconds"]),
            # what a quiet machine gives the run: one core's worth of CPU per second
            "entries_per_cpu_second": round(entries / cpu)}


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# -- 2. questions and reference answers ------------------------------------------------------


def questions(work: Path, projects: int, sessions: int, seed: int = 7) -> list[dict]:
    """One request per project: a words-of-an-early-entry question about one session."""
    from lookback.ingest.reader import read_session

    chooser = random.Random(seed)
    corpus = work / "corpus"
    found = []
    for project in range(projects):
        number = project + projects * chooser.randrange(sessions)
        folder = corpus / ("--" + f"{CWD}-{project}".strip("/").replace("/", "-") + "--")
        path = folder / f"session-{number:05d}.jsonl"
        texts, session_id = [], None
        for batch in read_session(str(path)):
            for event in batch.events:
                session_id = event.session_id
                entry = event.payload.get("entry") if event.kind == "entry" else None
                if entry and entry.get("eligible") and len(entry.get("text", "").split()) > 6:
                    texts.append(entry["text"])
        words = texts[chooser.randrange(max(1, len(texts) // 2))].split()[:14]
        body: dict = {"message": " ".join(words)}
        if project % 2:
            body.update(project=f"{CWD}-{project}", session_id=session_id)
        else:
            body["session_file"] = str(path)
        found.append(body)
    return found


def references(home: Path, bodies: list[dict]) -> list[list[str] | None]:
    from lookback.api import retrieve
    from lookback.settings import load_settings

    settings = load_settings(environ=environ(home))
    answers = []
    for body in bodies:
        response = retrieve(dict(body), settings=settings)
        answers.append([item["entry_id"] for item in response["evidence"]]
                       if response["status"] == "ok" else None)
    return answers


# -- 3. the server and its clients -------------------------------------------------------------


def start_server(home: Path, port: int, args: argparse.Namespace) -> subprocess.Popen:
    extra = {"LOOKBACK_READER__MAX_OPEN_FILES": str(args.pool),
             "LOOKBACK_READER__CONNECTIONS_PER_PROJECT": str(args.per_project),
             "LOOKBACK_FRESHNESS__ENABLED": "true" if args.freshness else "false"}
    if not args.cache:
        extra["LOOKBACK_SERVER__CACHE_ENTRIES"] = "0"

    def limit() -> None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(args.nofile, hard), hard))

    process = subprocess.Popen(
        [sys.executable, "-m", "lookback.cli", "serve", "--quiet", "--port", str(port)],
        env=environ(home, **extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=limit)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process
        except OSError:
            if process.poll() is not None:
                raise SystemExit("lookback serve exited at start") from None
            time.sleep(0.1)
    raise SystemExit("lookback serve did not start")


def client(port: int, plan_file: str, seconds: float, seed: int) -> None:
    """One agent: random projects, one keep-alive connection; prints its samples."""
    plan = json.loads(Path(plan_file).read_text())
    bodies, answers = plan["bodies"], plan["answers"]
    chooser = random.Random(seed)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    latencies, wrong, errors, reasons = [], 0, 0, {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        pick = chooser.randrange(len(bodies))
        payload = json.dumps(bodies[pick]).encode()
        started = time.perf_counter()
        try:
            connection.request("POST", "/v1/retrieve", body=payload,
                               headers={"content-type": "application/json",
                                        "authorization": f"Bearer {TOKEN}"})
            response = connection.getresponse()
            body = json.loads(response.read())
        except (OSError, http.client.HTTPException, ValueError):
            errors += 1
            connection.close()
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            continue
        latencies.append((time.perf_counter() - started) * 1000)
        if response.status != 200:
            errors += 1
            continue
        ids = [item["entry_id"] for item in body.get("evidence", [])] \
            if body.get("status") == "ok" else None
        if ids != answers[pick]:
            wrong += 1
            reason = body.get("status", "?")
            reasons[reason] = reasons.get(reason, 0) + 1
    print(json.dumps({"latencies": latencies, "wrong": wrong, "errors": errors,
                      "reasons": reasons}))


class Monitor(threading.Thread):
    """Samples a process's open files and RSS from /proc every 0.2 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.max_files = 0
        self.max_rss_mb = 0.0
        self.cpu_seconds = 0.0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.2):
            try:
                files = len(os.listdir(f"/proc/{self.pid}/fd"))
                status = Path(f"/proc/{self.pid}/status").read_text()
            except OSError:
                return
            rss_kb = next(int(line.split()[1]) for line in status.splitlines()
                          if line.startswith("VmRSS:"))
            self.max_files = max(self.max_files, files)
            self.max_rss_mb = max(self.max_rss_mb, rss_kb / 1024)
            self.cpu_seconds = cpu_seconds(self.pid)


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


def serve_and_ask(work: Path, bodies: list[dict], answers: list, args: argparse.Namespace
                  ) -> dict:
    plan = work / "plan.json"
    plan.write_text(json.dumps({"bodies": bodies, "answers": answers}))
    port = free_port()
    server = start_server(work / "home", port, args)
    monitor = Monitor(server.pid)
    monitor.start()
    load_before = os.getloadavg()[0]
    cpu_at_start = cpu_seconds(server.pid)
    try:
        clients = [subprocess.Popen([sys.executable, __file__, "--client", str(port), str(plan),
                                     str(args.seconds), str(n)],
                                    stdout=subprocess.PIPE, text=True)
                   for n in range(args.clients)]
        results = [json.loads(c.communicate(timeout=args.seconds + 120)[0]) for c in clients]
    finally:
        load_after = os.getloadavg()[0]
        server_cpu = cpu_seconds(server.pid) - cpu_at_start
        monitor.stopping.set()
        server.terminate()
        server.wait(timeout=20)
    latencies = sorted(x for r in results for x in r["latencies"])
    reasons: dict[str, int] = {}
    for result in results:
        for reason, count in result["reasons"].items():
            reasons[reason] = reasons.get(reason, 0) + count
    return {
        "clients": args.clients, "seconds": args.seconds, "requests": len(latencies),
        "throughput_rps": round(len(latencies) / args.seconds, 1),
        "p50_ms": round(percentile(latencies, 0.5), 2),
        "p95_ms": round(percentile(latencies, 0.95), 2),
        "max_ms": round(latencies[-1], 2) if latencies else 0.0,
        "wrong": sum(r["wrong"] for r in results), "wrong_by_status": reasons,
        "errors": sum(r["errors"] for r in results),
        # load-independent: what one request costs the server in CPU
        "server_cpu_ms_per_request": round(1000 * server_cpu / max(1, len(latencies)), 2),
        "server_max_open_files": monitor.max_files, "server_max_rss_mb": round(
            monitor.max_rss_mb, 1),
        "pool_open_files": args.pool, "nofile_limit": args.nofile,
        "load_average": [round(load_before, 2), round(load_after, 2)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=2, help="sessions per project")
    parser.add_argument("--entries", type=int, default=10, help="entries per session")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--pool", type=int, default=256, help="reader.max_open_files")
    parser.add_argument("--nofile", type=int, default=1024, help="the server's open-files limit")
    parser.add_argument("--per-project", type=int, default=4,
                        help="reader.connections_per_project")
    parser.add_argument("--hot", type=int, default=0,
                        help="ask only about the first N projects (one busy repository: 1)")
    parser.add_argument("--reuse", action="store_true",
                        help="reuse --work's corpus and indexes (skip indexing)")
    parser.add_argument("--cache", action="store_true", help="keep the answer cache on")
    parser.add_argument("--freshness", action="store_true", help="keep freshness on")
    parser.add_argument("--work", type=Path, help="keep the corpus and indexes here")
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        port, plan, seconds, seed = args.client
        client(int(port), plan, float(seconds), int(seed))
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="lookback-team-"))
    work.mkdir(parents=True, exist_ok=True)
    report = {"load_average_at_start": round(os.getloadavg()[0], 2)}
    if not (args.reuse and (work / "home").is_dir()):
        report["index"] = build(work, args.projects, args.sessions, args.entries)
        print(json.dumps(report["index"]), file=sys.stderr)
    bodies = questions(work, args.projects, args.sessions)
    if args.hot:  # every session of the first projects, asked about by every client
        bodies = [dict(body) for body in bodies[:args.hot]]
    answers = references(work / "home", bodies)
    report["reference_answers_with_evidence"] = sum(1 for a in answers if a)
    report["serve"] = serve_and_ask(work, bodies, answers, args)
    serve = report["serve"]
    report["targets"] = {
        "entries_per_second >= 5000": report.get("index", {}).get("entries_per_second", 0)
        >= 5000,
        "wrong == 0": serve["wrong"] == 0 and serve["errors"] == 0,
        "open files <= pool + 64": serve["server_max_open_files"] <= args.pool + 64,
        "rss <= 150 MB": serve["server_max_rss_mb"] <= 150,
        "p95 <= 20 ms": serve["p95_ms"] <= 20,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
