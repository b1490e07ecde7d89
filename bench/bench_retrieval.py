"""Retrieval latency: the in-process reader against one raw FTS5 query.

    python bench/bench_retrieval.py [--sizes 5000 100000] [--runs 100]

For each size, builds a project index from the fixtures' real text (sessions of
5,000 messages ending in a compaction that keeps the last 10% in context), then
times ``lookback.api.retrieve`` for queries with an exact identifier plus FTS5
keywords: ``warm`` repeats one message (Pi asks again before every model call of a
tool loop), ``fresh`` uses a different message each run. The baseline is one raw
``bm25`` query with the same FTS5 expression over the same index.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lookback.index.layout import project_dir  # noqa: E402
from lookback.index.sink import EmbeddedSink  # noqa: E402
from lookback.index.store import open_reader  # noqa: E402
from lookback.ingest.pipeline import ingest_files  # noqa: E402
from lookback.ingest.scan import session_files  # noqa: E402
from lookback.query.search.reader import IndexReader  # noqa: E402
from lookback.query.text.fts_query import build_fts_query  # noqa: E402
from lookback.query.text.terms import extract_terms  # noqa: E402

from bench.corpus import write_corpus  # noqa: E402
from lookback.api import retrieve  # noqa: E402
from lookback.settings import load_settings  # noqa: E402

SESSION_MESSAGES = 5000
WARM = "where did we change `AgentSession` and the thinking level handling?"
FRESH = [
    "what happened to `getApiKey` in the oauth flow?", "why did `tui-renderer.ts` break?",
    "the `setTheme` error handling and invalid themes", "`SessionManager` compaction entries",
    "how does `queueMessage` differ from appendMessage?", "the markdown codeblock colors",
    "`ThinkingLevel` selector and footer", "what about `AgentSession` subscribe listeners?",
    "the `interactive-mode.ts` selector refactor", "`ProcessTerminal` and the editor",
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def build(size: int, work: Path) -> tuple[Path, Path]:
    corpus = work / f"corpus-{size}"
    sessions = max(1, size // SESSION_MESSAGES)
    write_corpus(corpus, sessions, min(size, SESSION_MESSAGES), compact_keep=0.1)
    home = work / f"home-{size}"
    with EmbeddedSink(home) as sink:
        ingest_files(session_files([corpus]), sink)
    return home, sorted(corpus.glob("*.jsonl"))[-1]


def time_calls(call, runs: int) -> list[float]:
    call(0)  # warm caches and connections
    timings = []
    for run in range(runs):
        started = time.perf_counter()
        call(run)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def measure(size: int, runs: int, work: Path) -> None:
    home, session = build(size, work)
    settings = load_settings({"home": str(home)}, environ={})
    reader = IndexReader(home)

    def ask(message: str) -> dict:
        return retrieve({"session_file": str(session), "message": message},
                        settings=settings, reader=reader)

    assert ask(WARM)["evidence"], "the benchmark query must find evidence"
    warm = time_calls(lambda run: ask(WARM), runs)
    fresh = time_calls(lambda run: ask(FRESH[run % len(FRESH)] + f" v{run}"), runs)
    raw_db = open_reader(project_dir(home, "/bench/project").index_path())
    fts = build_fts_query(extract_terms(WARM))
    raw = time_calls(lambda run: raw_db.execute(
        "SELECT rowid, bm25(entries_fts) FROM entries_fts WHERE entries_fts MATCH ? "
        "ORDER BY bm25(entries_fts) LIMIT 48", (fts,)).fetchall(), runs)
    raw_p50 = statistics.median(raw)
    for name, timings in (("warm", warm), ("fresh", fresh), ("raw FTS5", raw)):
        print(f"{size:>9,} messages  {name:<9} p50 {statistics.median(timings):7.3f} ms  "
              f"p95 {percentile(timings, 0.95):7.3f} ms  max {max(timings):7.3f} ms  "
              f"ratio to raw p50 {statistics.median(timings) / raw_p50:5.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 100_000])
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            measure(size, args.runs, Path(tmp))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of the benchmark process (indexing included): {peak:.0f} MiB")


if __name__ == "__main__":
    main()
