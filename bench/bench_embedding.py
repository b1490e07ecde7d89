"""Query-embedding latency, load time and embedding rate of the embedders.

    python bench/bench_embedding.py [--runs 2000] [--models minilm-onnx minilm] [--entries 320]

Target (issue; docs/specification.md step 10): the hashing embedder embeds one typical
200-character user message in well under 0.5 ms. The messages are real Pi
user messages from tests/fixtures/embedding_paraphrases.json, cut or
repeated to 200 characters.

``--models`` measures other embedders too, when installed:

- the load time in this process, and in a fresh process the load plus a first query
  (what a one-shot ``lookback retrieve`` pays);
- a query of 200 characters;
- the embedding rate on **real stored chunks**: the fixture sessions
  (tests/fixtures/pi-sessions/*.jsonl) are indexed, each eligible entry is split as
  ``lookback index --embed`` splits it (``index.chunking.entry_chunks``, the
  embedder's ``max_chunks``), and a seeded sample of ``--entries`` entries is embedded
  in calls of 64 entries, as ``index.embeddings.build_embeddings`` does. Reported:
  chunks/s, word pieces/s (after the embedder's truncation), entries/s, wall clock
  and CPU time (CPU time counts every thread but no time spent waiting for a core, so
  on a busy shared machine it says what the model costs better than the wall clock).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lookback.embedders.port import EmbeddingPort, EmbeddingUnavailable  # noqa: E402
from lookback.embedders.registry import get_embedder  # noqa: E402
from lookback.index.chunking import DEFAULT_OVERLAP, entry_chunks  # noqa: E402
from lookback.index.embeddings import BATCH_ENTRIES, EMBEDDABLE  # noqa: E402
from lookback.index.store import open_reader  # noqa: E402
from tests.support import index_paths  # noqa: E402

FIXTURE = ROOT / "tests/fixtures/embedding_paraphrases.json"
SESSIONS = ROOT / "tests/fixtures/pi-sessions"
MESSAGE_CHARS = 200
HASHING_TARGET_MS = 0.5

FIRST_CALL = """
import sys, time
started = time.perf_counter()
from lookback.embedders.registry import get_embedder
get_embedder(sys.argv[1]).embed([sys.argv[2]])
print(round((time.perf_counter() - started) * 1000, 1))
"""


def real_messages(length: int) -> list[str]:
    """Real user messages of the fixtures, each repeated or cut to ``length`` characters."""
    cases = json.loads(FIXTURE.read_text())["cases"]
    texts = [case["original"]["text"] for case in cases]
    texts += [case["unrelated"]["text"] for case in cases]
    return [(text + " ") * (length // len(text) + 1) for text in texts]


def fixture_entry_texts() -> list[str]:
    """The text of every embeddable entry of the fixture sessions, as indexed."""
    with tempfile.TemporaryDirectory() as home:
        index_paths(Path(home), *sorted(SESSIONS.glob("*.jsonl")))
        texts: list[str] = []
        for path in sorted(Path(home).glob("projects/*/index-*.sqlite")):
            connection = open_reader(path)
            texts += [row[0] for row in connection.execute(
                f"SELECT e.text FROM entries e WHERE {EMBEDDABLE} ORDER BY e.rowid")]
            connection.close()
    return texts


def latencies_ms(embedder: EmbeddingPort, batches: list[list[str]], runs: int) -> list[float]:
    """Wall time of ``runs`` embed calls cycling through ``batches``, after a warm-up."""
    for batch in batches:
        embedder.embed(batch)
    timings = []
    for run in range(runs):
        batch = batches[run % len(batches)]
        started = time.perf_counter()
        embedder.embed(batch)
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def report(label: str, timings: list[float]) -> dict:
    ordered = sorted(timings)
    row = {
        "case": label,
        "runs": len(ordered),
        "p50_ms": round(statistics.median(ordered), 4),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 4),
    }
    print(json.dumps(row))
    return row


def word_pieces(embedder: EmbeddingPort, texts: list[str]) -> int | None:
    """Word pieces the model reads for ``texts`` (its own tokenizer, after truncation),
    if it is one word-piece encoder (not hashing, not the ensemble of two)."""
    from lookback.embedders.minilm import MiniLMEmbedder
    from lookback.embedders.onnx_encoder import OnnxEmbedder

    if not isinstance(embedder, OnnxEmbedder | MiniLMEmbedder):
        return None
    return sum(len(ids) for ids in embedder.word_pieces(texts))


def embedding_rate(name: str, embedder: EmbeddingPort, entry_texts: list[str],
                   entries: int) -> None:
    """Embed a seeded sample of real entries' chunks, 64 entries per call."""
    size, most = embedder.chunk_chars, embedder.max_chunks
    overlap = min(DEFAULT_OVERLAP, size // 4)
    sample = random.Random(0).sample(entry_texts, min(entries, len(entry_texts)))
    calls = [[chunk for text in sample[start:start + BATCH_ENTRIES]
              for chunk in entry_chunks(text, size, overlap, most)]
             for start in range(0, len(sample), BATCH_ENTRIES)]
    chunks = [chunk for call in calls for chunk in call]
    embedder.embed(chunks[:8])  # warm-up
    wall, cpu = time.perf_counter(), time.process_time()
    for call in calls:
        embedder.embed(call)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    pieces = word_pieces(embedder, chunks)
    row = {"case": f"{name} real chunks", "entries": len(sample), "chunks": len(chunks),
           "mean_chars": round(sum(map(len, chunks)) / len(chunks)),
           "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
           "chunks_per_s": round(len(chunks) / wall, 1),
           "entries_per_s": round(len(sample) / wall, 1),
           "chunks_per_cpu_s": round(len(chunks) / cpu, 1),
           "load_average": round(os.getloadavg()[0], 2)}
    if pieces is not None:
        row.update(word_pieces=pieces, mean_pieces=round(pieces / len(chunks), 1),
                   pieces_per_s=round(pieces / wall))
    print(json.dumps(row))


def first_call_ms(name: str) -> float:
    """Import, load and one query in a fresh Python process (what a CLI call pays)."""
    result = subprocess.run([sys.executable, "-c", FIRST_CALL, name, "x" * MESSAGE_CHARS],
                            capture_output=True, text=True, check=True, cwd=ROOT, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    return float(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--models", nargs="*", default=[], metavar="NAME",
                        help="also measure these embedders (e.g. minilm-onnx minilm): load, "
                             "first call in a fresh process, a query, and the rate on real "
                             "chunks")
    parser.add_argument("--entries", type=int, default=320,
                        help="real fixture entries to embed for the rate (default 320)")
    args = parser.parse_args()
    print(json.dumps({"load_average": [round(value, 2) for value in os.getloadavg()]}))

    queries = [[text[:MESSAGE_CHARS]] for text in real_messages(MESSAGE_CHARS)]
    hashing = report(
        "hashing query 200 chars", latencies_ms(get_embedder("hashing"), queries, args.runs)
    )
    verdict = "meets" if hashing["p50_ms"] < HASHING_TARGET_MS else "MISSES"
    print(f"hashing p50 {hashing['p50_ms']} ms {verdict} the {HASHING_TARGET_MS} ms target")

    entry_texts = fixture_entry_texts() if args.models else []
    for name in args.models:
        try:
            started = time.perf_counter()
            model = get_embedder(name)
            print(json.dumps({"case": f"{name} load", "ms": round(
                (time.perf_counter() - started) * 1000, 1)}))
        except EmbeddingUnavailable as error:
            print(f"{name} skipped: {error}")
            continue
        print(json.dumps({"case": f"{name} fresh process: import, load, first query",
                          "ms": first_call_ms(name)}))
        report(f"{name} query 200 chars", latencies_ms(model, queries, max(args.runs // 20, 5)))
        embedding_rate(name, model, entry_texts, args.entries)


if __name__ == "__main__":
    main()
