"""Retrieval latency on real text: new messages, repeated messages, one raw FTS5 query.

    python bench/bench_retrieval.py [--sizes 5000 100000] [--million] [--new 100]

For each size, builds a project index from the fixtures' real messages (sessions of
5,000 messages, each ending in a compaction that keeps the last 10% in context) and
asks ``lookback.api.retrieve`` about the fixtures' real user messages, in one process:

* **new** — a message the reader has never seen (every new user turn of Pi): after
  20 warm-up calls with other messages, each of the next ``--new`` messages is asked
  once;
* **repeated** — the same messages asked again (the tool-loop calls that follow a
  turn ask about the same message);
* **raw** — the yardstick, in the same run over the same index: one FTS5 ``bm25``
  query per message, with the same FTS5 expression the reader builds for it, the
  whole index, ``LIMIT 24`` (the reader's FTS limit), no scope, no verification.

Ratios compare percentiles (p50 to raw p50 / p95 to raw p95). Wall times suffer
when the machine is busy, so the CPU time of the calling thread is printed too,
with its own ratios: it is close to what a quiet machine shows. ``--million`` adds the
1,000,000-message index (a few GB of temporary disk; about ten minutes to build and
measure on the busy 2-core development machine).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import real_messages, write_corpus  # noqa: E402
from lookback.api import retrieve  # noqa: E402
from lookback.index.layout import project_dir  # noqa: E402
from lookback.index.sink import EmbeddedSink  # noqa: E402
from lookback.index.store import open_reader  # noqa: E402
from lookback.ingest.pipeline import ingest_files  # noqa: E402
from lookback.ingest.scan import session_files  # noqa: E402
from lookback.query.search.reader import IndexReader  # noqa: E402
from lookback.query.text.fts_query import build_fts_query  # noqa: E402
from lookback.query.text.terms import extract_terms  # noqa: E402
from lookback.settings import load_settings  # noqa: E402

SESSION_MESSAGES = 5000
WARM_UP = 20
RAW_LIMIT = 24
CWD = "/bench/project"


def user_messages() -> list[str]:
    """The fixtures' distinct real user messages that have something to search for."""
    found: list[str] = []
    for entry in real_messages():
        message = entry["message"]
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(block.get("text", "") for block in content
                                if isinstance(block, dict) and block.get("type") == "text")
        if isinstance(content, str) and content not in found and \
                build_fts_query(extract_terms(content)) is not None:
            found.append(content)
    return found


def build(size: int, work: Path) -> tuple[Path, Path]:
    corpus = work / f"corpus-{size}"
    sessions = max(1, size // SESSION_MESSAGES)
    write_corpus(corpus, sessions, min(size, SESSION_MESSAGES), cwd=CWD, compact_keep=0.1)
    home = work / f"home-{size}"
    with EmbeddedSink(home) as sink:
        ingest_files(session_files([corpus]), sink)
    return home, sorted(corpus.glob("*.jsonl"))[-1]


def timed(call: Callable[[str], object], messages: list[str]) -> tuple[list[float], list[float]]:
    """Wall and thread-CPU milliseconds of ``call(message)`` for each message."""
    wall, cpu = [], []
    for message in messages:
        started, started_cpu = time.perf_counter(), time.thread_time()
        call(message)
        cpu.append((time.thread_time() - started_cpu) * 1000)
        wall.append((time.perf_counter() - started) * 1000)
    return wall, cpu


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ratio(values: list[float], raw: list[float]) -> str:
    return (f"{statistics.median(values) / statistics.median(raw):.1f}x / "
            f"{percentile(values, 0.95) / percentile(raw, 0.95):.1f}x raw")


def measure(size: int, new_count: int, work: Path) -> None:
    home, session = build(size, work)
    settings = load_settings({"home": str(home)}, environ={})
    reader = IndexReader(home)
    messages = user_messages()
    warm_up, new = messages[:WARM_UP], messages[WARM_UP:WARM_UP + new_count]

    def ask(message: str) -> dict:
        return retrieve({"session_file": str(session), "message": message},
                        settings=settings, reader=reader)

    answers = [ask(message) for message in warm_up]
    assert any(answer["evidence"] for answer in answers), "the warm-up must find evidence"
    raw_db = open_reader(project_dir(home, CWD).index_path())
    expressions = {message: build_fts_query(extract_terms(message)) for message in messages}

    def raw(message: str) -> None:
        raw_db.execute("SELECT rowid, bm25(entries_fts) AS score FROM entries_fts "
                       "WHERE entries_fts MATCH ? ORDER BY score LIMIT ?",
                       (expressions[message], RAW_LIMIT)).fetchall()

    for message in warm_up:
        raw(message)
    figures = {"new": timed(ask, new), "repeated": timed(ask, new), "raw": timed(raw, new)}
    raw_wall, raw_cpu = figures["raw"]
    for name, (wall, cpu) in figures.items():
        print(f"{size:>9,} messages  {name:<8} wall p50 {statistics.median(wall):7.3f} "
              f"p95 {percentile(wall, 0.95):7.3f} ms ({_ratio(wall, raw_wall)})  "
              f"cpu p50 {statistics.median(cpu):7.3f} p95 {percentile(cpu, 0.95):7.3f} ms "
              f"({_ratio(cpu, raw_cpu)})")
    raw_db.close()
    reader.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 100_000])
    parser.add_argument("--million", action="store_true", help="also 1,000,000 messages")
    parser.add_argument("--new", type=int, default=100, help="new messages timed per size")
    args = parser.parse_args()
    sizes = [*args.sizes, *([1_000_000] if args.million else [])]
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            measure(size, args.new, Path(tmp))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"load average at end: {os.getloadavg()[0]:.1f}; "
          f"peak RSS of the benchmark process (indexing included): {peak:.0f} MiB")


if __name__ == "__main__":
    main()
