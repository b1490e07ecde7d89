"""Indexing throughput and peak memory of the embedded writer.

    python bench/bench_index.py [--entries 100000]

Builds corpora from the fixtures' real text (see bench/corpus.py) and indexes each
in a fresh child process, so peak RSS is that run's alone. Two shapes with the same
number of entries (few long sessions, many short ones) show that memory does not
grow with the number of sessions.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import write_corpus  # noqa: E402


def child(corpus: str, home: str) -> None:
    from lookback.index.sink import EmbeddedSink
    from lookback.ingest.pipeline import ingest_files
    from lookback.ingest.scan import session_files

    started, cpu_started = time.perf_counter(), time.process_time()
    with EmbeddedSink(Path(home)) as sink:
        report = ingest_files(session_files([Path(corpus)]), sink)
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"entries": report.read.entries, "sessions": len(report.sessions),
                      "seconds": seconds, "cpu_seconds": cpu_seconds,
                      "peak_rss_mib": peak_kib / 1024}))


def measure(entries: int, sessions: int, work: Path) -> dict:
    corpus = work / f"corpus-{sessions}"
    write_corpus(corpus, sessions, entries // sessions)
    home = work / f"home-{sessions}"
    out = subprocess.run([sys.executable, __file__, "--child", str(corpus), str(home)],
                         check=True, capture_output=True, text=True).stdout
    result = json.loads(out)
    result["entries_per_second"] = result["entries"] / result["seconds"]
    result["entries_per_cpu_second"] = result["entries"] / result["cpu_seconds"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory() as tmp:
        for sessions in (20, 1000):
            result = measure(args.entries, sessions, Path(tmp))
            print(f"{result['entries']:>8,} entries in {result['sessions']:>5,} sessions: "
                  f"{result['entries_per_second']:>8,.0f} entries/s "
                  f"({result['entries_per_cpu_second']:,.0f} per CPU-second), "
                  f"{result['seconds']:.1f} s, peak RSS {result['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
