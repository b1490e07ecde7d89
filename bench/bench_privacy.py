"""Cost of privacy classification: a typical 2 KB excerpt and a 1 MB text.

    python bench/bench_privacy.py [--runs 500]

Excerpts are 2,000-character slices of the fixtures' real session text (the shape
evidence excerpts have); the 1 MB cases are the same text joined, and an adversarial
text dense with every trigger keyword (the worst case for the windowed detectors), with
and without the credential-name, header and command triggers.
The target is well under 1 ms per 2 KB excerpt and a bounded cost per megabyte.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lookback.query.privacy.policy import classify  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pi-sessions"


def fixture_text() -> str:
    parts = []
    for path in sorted(FIXTURES.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            message = json.loads(line).get("message") or {}
            content = message.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            parts += [b["text"] for b in blocks if b.get("type") == "text" and b.get("text")]
    return "\n".join(parts)


def timed_ms(text: str) -> float:
    start = time.perf_counter()
    classify(text)
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    args = parser.parse_args()
    text = fixture_text()
    classify("warm up: compile the detectors")
    excerpts = [text[i : i + 2000] for i in range(0, len(text) - 2000, 2000)][: args.runs]
    times = sorted(timed_ms(excerpt) for excerpt in excerpts)
    p95 = times[int(len(times) * 0.95)]
    print(f"2 KB excerpt x{len(times)}: p50 {statistics.median(times):.3f} ms, p95 {p95:.3f} ms")
    print(f"1 MB session text: {timed_ms(text[:1_000_000]):.1f} ms")
    dense = ("key = token pass secret aws -us _authToken xox //a/ " * 20_000)[:1_000_000]
    print(f"1 MB trigger-dense text: {timed_ms(dense):.1f} ms")
    # The assignment, header and command triggers too: every one opens a window.
    commands = ("key = token pass secret aws -us _authToken xox //a/ api_key = x-api-key: "
                "bearer authorization: --token mysql -p curl -u machine docker login ya29. "
                "hf_ " * 8_000)[:1_000_000]
    print(f"1 MB text dense with every trigger: {timed_ms(commands):.1f} ms")


if __name__ == "__main__":
    main()
