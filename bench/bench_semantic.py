"""Query latency with ``semantic: true`` vs lexical, and embedding throughput.

    python bench/bench_semantic.py [--sizes 5000 100000] [--runs 200] [--embedder hashing]

For each size, one session of that many entries is generated from the fixtures'
real text (``bench.corpus.write_corpus``, compacted so 10% stays in context),
indexed, and embedded with ``index.embeddings.build_embeddings`` -- the same
function the ``embed_project`` worker runs -- whose entries/s is the workers'
embedding throughput. Then ``lookback.api.retrieve`` answers real user messages
of the fixtures, lexical and hybrid alternately, after one warm-up call each
(the reader caches the session's vector matrix, as a long-lived server does).

Target (issue 6): the hashing default adds no more than 1 ms at p50 at 5,000
messages.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import real_messages, write_corpus  # noqa: E402
from lookback.api import retrieve  # noqa: E402
from lookback.embedders.registry import get_embedder  # noqa: E402
from lookback.index.embeddings import build_embeddings  # noqa: E402
from lookback.query.search.reader import IndexReader  # noqa: E402
from lookback.settings import load_settings  # noqa: E402
from tests.support import index_paths  # noqa: E402

CWD = "/bench/project"
TARGET_ADDED_MS = 1.0


def questions(limit: int = 40) -> list[str]:
    """Real user messages of the fixtures with some words in them."""
    found = []
    for entry in real_messages():
        message = entry["message"]
        if message.get("role") != "user":
            continue
        content = message["content"]
        text = content if isinstance(content, str) else " ".join(
            part.get("text", "") for part in content if part.get("type") == "text")
        if 20 <= len(text) <= 400:
            found.append(text)
    return found[:limit]


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run_size(size: int, runs: int, embedder_name: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        home, corpus = Path(folder) / "home", Path(folder) / "corpus"
        write_corpus(corpus, 1, size, cwd=CWD, compact_keep=0.1)
        started = time.monotonic()
        index_paths(home, corpus)
        indexed = time.monotonic() - started
        report = build_embeddings(home, CWD, get_embedder(embedder_name))
        settings = load_settings({"home": str(home), "retrieval": {"embedder": embedder_name}},
                                 environ={})
        reader = IndexReader(home)
        session = (corpus / "session-00000.jsonl").as_posix()
        asked = questions()
        times: dict[bool, list[float]] = {False: [], True: []}
        added: list[float] = []
        added_new: list[float] = []  # the message's first time: the model embeds it
        for semantic in (False, True):  # warm-up: branch, scope and vector caches
            retrieve({"session_file": session, "message": asked[0], "semantic": semantic},
                     settings=settings, reader=reader)
        for run in range(runs):
            message = asked[run % len(asked)]
            for semantic in (False, True):
                begin = time.perf_counter()
                response = retrieve({"session_file": session, "message": message,
                                     "semantic": semantic}, settings=settings, reader=reader)
                times[semantic].append((time.perf_counter() - begin) * 1000)
                step = response["diagnostics"].get("semantic")  # absent for no-query
                if semantic and step is not None:
                    assert step["used"], response["diagnostics"]["warnings"]
                    added.append(step["ms"])
                    if not step.get("query_cached"):
                        added_new.append(step["ms"])
        reader.close()
    return {
        "size": size, "index_s": indexed, "embed_s": report.seconds,
        "embed_entries": report.entries, "embed_chunks": report.chunks,
        "lexical": times[False], "hybrid": times[True], "semantic_step": added,
        "semantic_step_new": added_new,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[5000, 100_000])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--embedder", default="hashing")
    args = parser.parse_args()
    print(f"embedder {args.embedder}; {args.runs} queries per mode and size")
    print(f"{'messages':>9} {'lexical p50/p95 ms':>19} {'hybrid p50/p95 ms':>18} "
          f"{'added p50 ms':>12} {'semantic step p50':>17} {'embed entries/s':>15}")
    for size in args.sizes:
        result = run_size(size, args.runs, args.embedder)
        lexical, hybrid = result["lexical"], result["hybrid"]
        added = statistics.median(hybrid) - statistics.median(lexical)
        rate = result["embed_entries"] / max(result["embed_s"], 1e-9)
        print(f"{size:>9,} {percentile(lexical, .5):>9.2f}/{percentile(lexical, .95):<9.2f} "
              f"{percentile(hybrid, .5):>8.2f}/{percentile(hybrid, .95):<9.2f} "
              f"{added:>12.2f} {statistics.median(result['semantic_step']):>17.2f} "
              f"{rate:>15,.0f}", flush=True)
        if result["semantic_step_new"]:  # each question's first time, then memoized
            new = result["semantic_step_new"]
            print(f"          semantic step p50 for a message's first time: "
                  f"{statistics.median(new):.2f} ms ({len(new)} of {len(result['semantic_step'])})")
        if size == 5000 and args.embedder == "hashing":
            verdict = "met" if added <= TARGET_ADDED_MS else "NOT met"
            print(f"          target: hashing adds <= {TARGET_ADDED_MS} ms at p50 at 5,000: "
                  f"{verdict}")


if __name__ == "__main__":
    main()
