"""Real coding sessions after a compaction: recall, confidence and tokens per message.

    python bench/bench_coding.py [--semantic --embedder minilm-onnx] [--per-question]
                                 [--session beszel-charm]

The sessions and questions of ``bench/coding/`` (SOURCES.md, questions.json): real
public Claude Code and Pi sessions, each a Pi session ending in a compaction, and
questions a developer asks later about an earlier moment. Each question is asked as
the new message at the session's leaf through ``lookback.api.retrieve`` (default
settings: 12 results, 16,000 tokens), lexical or with ``semantic: true``.

Printed per split (tuning, held-out, all; the split is fixed in questions.json by each
question's id): hit@5 (any answering entry among the first 5) and MRR for rare-word
(``rare``) and paraphrased (``para``) questions; for ``control`` questions (history does
not answer them) and ``tail`` ones (answered only by entries still in context) the share
that got no evidence; evidence tokens per message, median and p90, over every question.
With ``--semantic``, the vectors alone too: hit@5 and MRR of the entries the answer may
come from (on the branch, not in context) ranked by similarity alone, as the semantic
step scores them (``bench_semantic_recall.vector_ranking``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lookback.api import retrieve  # noqa: E402
from lookback.query.search.reader import IndexReader  # noqa: E402
from lookback.settings import load_settings  # noqa: E402
from tests.support import index_paths  # noqa: E402

DATA = ROOT / "bench" / "coding" / "questions.json"


def cwd_of(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        header = json.loads(line)
        if header.get("type") == "session":
            return header["cwd"]
    raise ValueError(f"{path}: no session header")


def ask_all(home: Path, data: dict, semantic: bool, embedder: str | None) -> list[dict]:
    overrides: dict = {"home": str(home)}
    if embedder:
        overrides["retrieval"] = {"embedder": embedder}
    settings = load_settings(overrides, environ={})
    reader = IndexReader(home)
    rows = []
    for question in data["questions"]:
        session = ROOT / data["sessions"][question["session"]]["file"]
        request = {"session_file": str(session), "message": question["question"]}
        if semantic:
            request["semantic"] = True
        answer = retrieve(request, settings=settings, reader=reader)
        ids = [item["entry_id"] for item in answer["evidence"]]
        rank = next((place for place, entry in enumerate(ids, start=1)
                     if entry in question["answers"]), None)
        rows.append({**question, "returned": ids, "rank": rank,
                     "tokens": sum(item["tokens"] for item in answer["evidence"]),
                     "warnings": answer["diagnostics"].get("warnings", [])})
    reader.close()
    return rows


def vectors_alone(home: Path, data: dict, embedder_name: str) -> dict[str, int | None]:
    """Each question's rank of its first answer among the allowed entries of its session
    by similarity alone (None: not found)."""
    from bench.bench_semantic_recall import vector_ranking
    from lookback.embedders.registry import get_embedder
    from lookback.index.layout import project_dir
    from lookback.index.store import open_reader
    from lookback.index.tree import branch, context_entries, leaf_of

    embedder = get_embedder(embedder_name)
    ranks: dict[str, int | None] = {}
    for name, session in data["sessions"].items():
        path = ROOT / session["file"]
        cwd = cwd_of(path)
        database = open_reader(project_dir(home, cwd).index_path())
        (session_id,) = database.execute("SELECT session_id FROM sessions").fetchone()
        entries = branch(database, session_id, leaf_of(database, session_id))
        allowed = ({e.entry_id for e in entries}
                   - {e.entry_id for e in context_entries(entries)})
        database.close()
        for question in data["questions"]:
            if question["session"] != name:
                continue
            ranked = vector_ranking(home, embedder, question["question"], allowed,
                                    cwd=cwd, session=session_id)
            ranks[question["id"]] = next((place for place, entry in enumerate(ranked, 1)
                                          if entry in question["answers"]), None)
    return ranks


def summarize(rows: list[dict]) -> dict:
    found: dict = {}
    for kind in ("rare", "para"):
        asked = [r for r in rows if r["kind"] == kind]
        if asked:
            found[kind] = {"questions": len(asked),
                           "hit5": sum(1 for r in asked if r["rank"] and r["rank"] <= 5),
                           "mrr": round(statistics.fmean(1 / r["rank"] if r["rank"] else 0.0
                                                         for r in asked), 3)}
    for kind in ("control", "tail"):
        asked = [r for r in rows if r["kind"] == kind]
        if asked:
            found[kind] = {"questions": len(asked),
                           "empty": sum(1 for r in asked if not r["returned"])}
    spent = sorted(r["tokens"] for r in rows)
    found["tokens"] = {"median": statistics.median(spent),
                       "p90": spent[int(0.9 * (len(spent) - 1))]}
    return found


def report(rows: list[dict]) -> dict:
    figures = {}
    for split in ("tuning", "held-out", "all"):
        chosen = [r for r in rows if split == "all" or r["split"] == split]
        summary = figures[split] = summarize(chosen)
        parts = [f"{kind} hit@5 {s['hit5']}/{s['questions']} = {s['hit5'] / s['questions']:.2f} "
                 f"(MRR {s['mrr']:.2f})" for kind, s in summary.items() if "hit5" in s]
        parts += [f"{kind} no evidence {s['empty']}/{s['questions']}"
                  for kind, s in summary.items() if "empty" in s]
        spent = summary["tokens"]
        parts.append(f"evidence tokens per message median {spent['median']:,.0f}, "
                     f"p90 {spent['p90']:,}")
        print(f"{split:<9} " + "; ".join(parts))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--semantic", action="store_true")
    parser.add_argument("--embedder", default=None, help="for --semantic (default: settings')")
    parser.add_argument("--per-question", action="store_true",
                        help="print each tuning question's rank and tokens (never held-out)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--session", action="append",
                        help="only this session's questions (repeatable; default: all)")
    args = parser.parse_args()
    data = json.loads(DATA.read_text(encoding="utf-8"))
    if args.session:
        unknown = set(args.session) - set(data["sessions"])
        if unknown:
            parser.error(f"no such session: {', '.join(sorted(unknown))}")
        data["sessions"] = {name: data["sessions"][name] for name in args.session}
        data["questions"] = [q for q in data["questions"] if q["session"] in args.session]
    embedder = None
    if args.semantic:
        embedder = args.embedder or load_settings(environ={}).retrieval.embedder
        from lookback.query.semantic import hybrid

        hybrid.DEFAULT_TIMEOUT_MS = 60_000.0  # recall, not latency, is measured here
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch)
        files = [ROOT / session["file"] for session in data["sessions"].values()]
        index_paths(home, *files)
        if embedder:
            from lookback.embedders.registry import get_embedder
            from lookback.index.embeddings import build_embeddings

            model = get_embedder(embedder)
            for cwd in sorted({cwd_of(path) for path in files}):
                build_embeddings(home, cwd, model)
        rows = ask_all(home, data, args.semantic, embedder)
        if embedder:
            ranks = vectors_alone(home, data, embedder)
            for split in ("tuning", "held-out", "all"):
                parts = []
                for kind in ("rare", "para"):
                    chosen = [q for q in data["questions"] if q["kind"] == kind
                              and (split == "all" or q["split"] == split)]
                    found = [ranks[q["id"]] for q in chosen]
                    hits = sum(1 for rank in found if rank and rank <= 5)
                    mrr = statistics.fmean(1 / rank if rank else 0.0 for rank in found)
                    parts.append(f"{kind} hit@5 {hits}/{len(chosen)} (MRR {mrr:.2f})")
                print(f"vectors alone, {split}: " + "; ".join(parts))
    print(f"{len(rows)} questions, {'semantic ' + str(embedder) if embedder else 'lexical'}")
    figures = report(rows)
    fallbacks = sum(1 for r in rows if any(w.startswith("semantic") for w in r["warnings"]))
    if fallbacks:
        print(f"{fallbacks} answers fell back to lexical results")
    if args.per_question:
        by_kind = defaultdict(list)
        for r in rows:
            if r["split"] == "tuning":
                by_kind[r["kind"]].append(r)
        for kind, chosen in by_kind.items():
            for r in chosen:
                print(json.dumps({"id": r["id"], "kind": kind, "rank": r["rank"],
                                  "tokens": r["tokens"], "returned": r["returned"][:5]}))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
