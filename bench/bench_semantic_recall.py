"""Recall of paraphrased questions: lexical, hybrid and vectors alone, per embedder.

    python bench/bench_semantic_recall.py [--set heldout|golden|tuning|questions-tuning|
                                                 questions-heldout ...]
                                          [--embedders hashing minilm-onnx] [--home DIR]

The real fixture ``before-compaction.jsonl`` is indexed, each embedder's vectors
are built with ``index.embeddings.build_embeddings`` (timed: the embedding rate in
chunks/s), then every question of the set is asked through ``lookback.api.retrieve``
at the session's leaf, lexical (``semantic: false``) and hybrid (``semantic: true``).
Reported per embedder: hit@5 and MRR (reciprocal rank of the answer in the
evidence, 0 when absent) for both modes, and for the vectors alone (the answer's
rank among all entries in the allowed scope, by best chunk similarity).

Every hybrid answer is also checked: no evidence entry may be in the live context
or off the branch. ``golden`` (12 questions) and ``tuning`` (28) are the tuning side:
ranking and chunking were chosen on them; ``heldout`` (the default, 20) was never
tuned on and is the one to report. ``questions-tuning`` and ``questions-heldout`` are
the two halves of ``semantic_questions.json``: questions asked about an earlier moment, each
with every entry that answers it (a hit is any of them in the first 5; MRR counts the
first). Several sets give one line each.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lookback.api import retrieve  # noqa: E402
from lookback.embedders.port import EmbeddingPort  # noqa: E402
from lookback.embedders.registry import get_embedder  # noqa: E402
from lookback.index.embeddings import Stamp, build_embeddings, decode  # noqa: E402
from lookback.index.layout import project_dir  # noqa: E402
from lookback.index.store import open_reader  # noqa: E402
from lookback.index.tree import branch, context_entries  # noqa: E402
from lookback.query.search.reader import IndexReader  # noqa: E402
from lookback.query.semantic import hybrid  # noqa: E402
from lookback.settings import load_settings  # noqa: E402
from tests.support import fixture_path, index_paths  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
SETS = {"heldout": FIXTURES / "semantic_heldout.json",
        "golden": FIXTURES / "semantic_golden.json",
        "tuning": FIXTURES / "semantic_tuning.json",
        "questions-tuning": FIXTURES / "semantic_questions.json",
        "questions-heldout": FIXTURES / "semantic_questions.json"}
SESSION_FILE = fixture_path("before-compaction.jsonl")
CWD = "/Users/badlogic/workspaces/pi-mono"
SESSION = "ffae836b-9420-4060-ac13-7745215f90ff"
LEAF = "v1:1002"


def load_cases(set_name: str) -> list[dict]:
    """The set's questions, each with ``answers`` (the entries that answer it)."""
    data = json.loads(SETS[set_name].read_text())
    cases = data[set_name.removeprefix("questions-")] if set_name.startswith("questions-") \
        else data["cases"]
    return [{**case, "answers": case.get("answers") or [case["answer"]]} for case in cases]


def first_rank(answers: list[str], ranked: list[str]) -> int | None:
    """1-based rank of the first of ``answers`` in ``ranked``, or None."""
    return next((rank for rank, entry_id in enumerate(ranked, start=1) if entry_id in answers),
                None)


def reciprocal_rank(answers: list[str], ranked: list[str]) -> float:
    rank = first_rank(answers, ranked)
    return 1.0 / rank if rank else 0.0


class Scope:
    """The entries retrieval may return at the leaf: on the branch, not in context."""

    def __init__(self, home: Path) -> None:
        database = open_reader(project_dir(home, CWD).index_path())
        entries = branch(database, SESSION, LEAF)
        in_context = {entry.entry_id for entry in context_entries(entries)}
        self.allowed = {entry.entry_id for entry in entries} - in_context
        self.in_context = in_context
        database.close()


def vector_ranking(home: Path, embedder: EmbeddingPort, question: str,
                   allowed: set[str], cwd: str = CWD, session: str = SESSION) -> list[str]:
    """Entry ids of the allowed scope of ``session`` as the hybrid step ranks them: by
    ``hybrid.entry_scores`` (the mean of the two best chunks) less the chunk-count
    penalty (``hybrid.CHUNK_PENALTY``)."""
    database = open_reader(project_dir(home, cwd).index_path())
    current, params = Stamp.of(embedder).sql()
    rows = database.execute(
        f"SELECT e.entry_id, v.vector FROM embeddings v JOIN entries e ON "
        f"e.session_id = v.session_id AND e.entry_id = v.entry_id "
        f"WHERE v.session_id = ? AND {current} ORDER BY e.rowid, v.chunk",
        [session, *params]).fetchall()
    database.close()
    rows = [row for row in rows if row[0] in allowed]
    matrix = decode([row[1] for row in rows], embedder.dimensions)
    similarity = matrix @ embedder.embed_queries([question])[0]
    entry_ids, starts, counts = np.unique([row[0] for row in rows], return_index=True,
                                          return_counts=True)
    order = np.argsort(starts)  # np.unique sorts by id; rows are grouped in rowid order
    entry_ids, starts, counts = entry_ids[order], starts[order], counts[order]
    scores = (hybrid.entry_scores(similarity, starts, counts)
              - hybrid.CHUNK_PENALTY * np.log(counts))
    score = dict(zip(entry_ids.tolist(), scores.tolist(), strict=True))
    return sorted(score, key=lambda entry_id: (-score[entry_id], entry_id))


def measure(home: Path, name: str, cases: list[dict], scope: Scope,
            verbose: bool = False) -> dict:
    embedder = get_embedder(name)
    settings = load_settings({"home": str(home), "retrieval": {"embedder": name}}, environ={})
    reader = IndexReader(home)
    scores = {mode: {"hit5": 0, "mrr": 0.0} for mode in ("lexical", "hybrid", "vectors")}
    leaks = 0
    for case in cases:
        ranked = {}
        for mode, semantic in (("lexical", False), ("hybrid", True)):
            response = retrieve({"session_file": str(SESSION_FILE), "message": case["question"],
                                 "semantic": semantic}, settings=settings, reader=reader)
            ids = [item["entry_id"] for item in response["evidence"]]
            leaks += sum(1 for entry_id in ids if entry_id not in scope.allowed)
            if semantic and response["diagnostics"]["warnings"]:
                print(f"  warning: {response['diagnostics']['warnings']}")
            ranked[mode] = ids
        ranked["vectors"] = vector_ranking(home, embedder, case["question"], scope.allowed)
        for mode, ids in ranked.items():
            scores[mode]["hit5"] += bool(set(case["answers"]) & set(ids[:5]))
            scores[mode]["mrr"] += reciprocal_rank(case["answers"], ids)
        if verbose:
            print("  " + json.dumps({"question": case["question"][:60], **{
                mode: first_rank(case["answers"], ids) for mode, ids in ranked.items()}}))
    total = len(cases)
    for mode in scores.values():
        mode["mrr"] = round(mode["mrr"] / total, 3)
    return {"cases": total, "leaks": leaks, **scores}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", choices=sorted(SETS), nargs="+", default=["heldout"])
    parser.add_argument("--embedders", nargs="+", default=["hashing", "minilm-onnx"])
    parser.add_argument("--home", type=Path, help="reuse this home (keeps built vectors)")
    parser.add_argument("--per-question", action="store_true",
                        help="also print each question's first answer rank per mode")
    parser.add_argument("--budget-ms", type=float, default=10_000.0,
                        help="semantic time budget: recall, not latency, is measured here, so a "
                             "busy machine must not turn answers into lexical fallbacks")
    args = parser.parse_args()
    hybrid.DEFAULT_TIMEOUT_MS = args.budget_ms
    with tempfile.TemporaryDirectory() as scratch:
        home = args.home or Path(scratch)
        if project_dir(home, CWD).index_path() is None:
            index_paths(home, SESSION_FILE)
        scope = Scope(home)
        for name in args.embedders:
            embedder = get_embedder(name)
            started = time.perf_counter()
            report = build_embeddings(home, CWD, embedder)
            seconds = time.perf_counter() - started
            built = {"embedder": name, "chunks": report.chunks, "embed_seconds": round(seconds, 1),
                     "chunks_per_s": round(report.chunks / seconds, 1) if report.chunks else None}
            for set_name in args.set:
                result = measure(home, name, load_cases(set_name), scope, args.per_question)
                print(json.dumps({**built, "set": set_name, **result}), flush=True)


if __name__ == "__main__":
    main()
