"""Query-embedding latency of the embedders.

    python bench/bench_embedding.py [--runs 2000] [--models minilm-onnx minilm]

Target (issue; docs/specification.md step 10): the hashing embedder embeds one typical
200-character user message in well under 0.5 ms. The messages are real Pi
user messages from tests/fixtures/embedding_paraphrases.json, cut or
repeated to 200 characters. ``--models`` measures other embedders too, when
installed: load time, a query, and the embedding rate in chunks/s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lookback.index.chunking import DEFAULT_MAX_CHARS  # noqa: E402
from lookback.index.embedding import EmbeddingPort, EmbeddingUnavailable, get_embedder  # noqa: E402

FIXTURE = Path(__file__).resolve().parent.parent / "tests/fixtures/embedding_paraphrases.json"
MESSAGE_CHARS = 200
HASHING_TARGET_MS = 0.5


def real_messages(length: int) -> list[str]:
    """Real user messages of the fixtures, each repeated or cut to ``length`` characters."""
    cases = json.loads(FIXTURE.read_text())["cases"]
    texts = [case["original"]["text"] for case in cases]
    texts += [case["unrelated"]["text"] for case in cases]
    return [(text + " ") * (length // len(text) + 1) for text in texts]


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--models", nargs="*", default=[], metavar="NAME",
                        help="also measure these embedders (e.g. minilm-onnx minilm): a query, "
                             "and chunks/s over batches of 32 real 500-character chunks")
    args = parser.parse_args()

    queries = [[text[:MESSAGE_CHARS]] for text in real_messages(MESSAGE_CHARS)]
    hashing = report(
        "hashing query 200 chars", latencies_ms(get_embedder("hashing"), queries, args.runs)
    )
    verdict = "meets" if hashing["p50_ms"] < HASHING_TARGET_MS else "MISSES"
    print(f"hashing p50 {hashing['p50_ms']} ms {verdict} the {HASHING_TARGET_MS} ms target")

    chunks = [text[:DEFAULT_MAX_CHARS] for text in real_messages(DEFAULT_MAX_CHARS)]
    batch = [(chunks * 32)[:32]]
    for name in args.models:
        try:
            started = time.perf_counter()
            model = get_embedder(name)
            print(json.dumps({"case": f"{name} load", "ms": round(
                (time.perf_counter() - started) * 1000, 1)}))
        except EmbeddingUnavailable as error:
            print(f"{name} skipped: {error}")
            continue
        report(f"{name} query 200 chars", latencies_ms(model, queries, max(args.runs // 20, 5)))
        cpu_started = time.process_time()
        timings = report(f"{name} batch of 32 chunks", latencies_ms(model, batch, 5))
        cpu_per_chunk = (time.process_time() - cpu_started) / (32 * 6)  # warm-up + 5 runs
        # CPU time counts every thread but no time spent waiting for a core, so on a
        # busy shared machine it says what the model costs better than the wall clock.
        print(f"{name}: {32000 / timings['p50_ms']:.0f} chunks/s wall clock, "
              f"{1 / cpu_per_chunk:.0f} chunks per CPU-second (500 characters each)")


if __name__ == "__main__":
    main()
