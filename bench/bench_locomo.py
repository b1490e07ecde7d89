"""Recall on LoCoMo's questions, scored on the LoCoMo paper's own retrieval protocol.

    python bench/bench_locomo.py PATH/TO/locomo10.json [--semantic --embedder NAME]
        [--per-question FILE] [--json FILE]

LoCoMo (Maharana et al., ACL 2024; ``snap-research/LoCoMo``, ``data/locomo10.json``)
holds 10 long conversations between two people, 272 dated sessions, 5,882 turns and
1,986 questions, each with the ids of its evidence turns. The data is CC BY-NC 4.0:
it is never part of this repository, nor is anything derived from it; the benchmark
takes the file's path and caches what it builds under ``bench/results/`` (ignored by
git).

Conversion. Each conversation becomes Pi v3 session files of one project; each turn
is a ``message`` entry whose timestamp is its session's real date (plus one second per
position, to keep the order). Both speakers are people, neither is an assistant, so
every turn is role ``user`` (no speaker gains the ranking's user authority over the
other); its text is ``Speaker: what they said``, with a shared photo's caption as
``[shared a photo of ...]``, as LoCoMo's own retrieval formats a turn.

Two paths, each asked every question of a conversation:

* **search** — one session file per LoCoMo session (project ``/locomo/<id>/sessions``)
  and ``lookback.api.search`` with scope ``project`` and 20 results, as
  ``lookback search --scope project`` asks;
* **retrieval** — all sessions of the conversation in one session file (project
  ``/locomo/<id>/one-file``), ended by a compaction that keeps the last
  ``TAIL`` turns in context, and ``lookback.api.retrieve`` with the question as the
  new message, 12 results and the default token budget (what a Pi session would get
  back after compaction). Evidence in the kept tail is in the model's context and
  cannot be returned; it counts as missed.

When. LoCoMo asks its questions after the conversation, so each is asked at the
time of the conversation's last turn (``message_time``, the end of its last session):
a relative date in a question ("last year", "two weeks ago") resolves against it, and
a date names a time the entries' timestamps are compared with (docs/specification.md,
the ranking table's "time in the question").

Scores (per question, the share of its evidence turns among the first k entries
returned; 1.0 for a question without evidence; the mean over questions — the
paper's ``task_eval/evaluation.py``): turn R@5, R@10, NDCG@10 (binary relevance) and
session R@5 (the share of the evidence sessions among the sessions of the first 5),
per category, for the tuning split (conv-26, -30, -41, -42, -43), the held-out split
(the other five) and all ten. A plain Okapi BM25 (k1 1.2, b 0.75, lower-cased
``\\w+`` tokens, no stemming, no stopwords) over the same turn texts is the
reference. ``--per-question`` writes each tuning question's result (never a
held-out one: tune on the tuning split only). ``--semantic`` builds vectors with the
project's own ``index --embed`` path (``build_embeddings``) and asks retrieval with
``semantic: true``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import re
import shutil
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lookback.api import retrieve, search  # noqa: E402
from lookback.query.search.reader import IndexReader  # noqa: E402
from lookback.settings import load_settings  # noqa: E402

TUNING = ("conv-26", "conv-30", "conv-41", "conv-42", "conv-43")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop",
              5: "adversarial"}
SEARCH_RESULTS = 20
RETRIEVAL_RESULTS = 12
TAIL = 4  # turns the final compaction keeps in context
#: Bump when the conversion below changes (the cache key includes it).
CONVERSION_VERSION = 1
RESULTS = ROOT / "bench" / "results"
PUBLISHED = "LoCoMo paper, DRAGON: turn R@5 0.567, R@10 0.662; MemPalace MiniLM: R@10 0.480"


# -- conversion -------------------------------------------------------------------

@dataclass
class Turn:
    dia_id: str
    session: int
    text: str
    timestamp: dt.datetime


@dataclass
class Conversation:
    sample_id: str
    sessions: dict[int, list[Turn]]
    questions: list[dict]
    # (session file stem or session id, entry id) -> dia_id, filled by ``write``
    ids: dict[tuple[str, str], str] = field(default_factory=dict)

    @property
    def turns(self) -> list[Turn]:
        return [turn for number in sorted(self.sessions) for turn in self.sessions[number]]


def session_date(text: str) -> dt.datetime:
    """LoCoMo's ``1:56 pm on 8 May, 2023`` as a UTC datetime."""
    return dt.datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y").replace(
        tzinfo=dt.UTC)


def turn_text(turn: dict) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shared {turn['blip_caption']}]"
    return text


def conversations(data: list[dict]) -> list[Conversation]:
    found = []
    for sample in data:
        talk = sample["conversation"]
        sessions: dict[int, list[Turn]] = {}
        for key, value in talk.items():
            match = re.fullmatch(r"session_(\d+)", key)
            if not match or not value:
                continue
            number = int(match.group(1))
            start = session_date(talk[f"{key}_date_time"])
            sessions[number] = [
                Turn(turn["dia_id"], number, turn_text(turn),
                     start + dt.timedelta(seconds=position))
                for position, turn in enumerate(value)]
        found.append(Conversation(sample["sample_id"], sessions, sample["qa"]))
    return found


def _iso(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _entry(entry_id: str, parent: str | None, turn: Turn) -> dict:
    return {"type": "message", "id": entry_id, "parentId": parent,
            "timestamp": _iso(turn.timestamp),
            "message": {"role": "user", "content": [{"type": "text", "text": turn.text}],
                        "timestamp": int(turn.timestamp.timestamp() * 1000)}}


def _header(session_id: str, cwd: str, moment: dt.datetime) -> dict:
    return {"type": "session", "version": 3, "id": session_id, "timestamp": _iso(moment),
            "cwd": cwd}


def _session_id(*parts: object) -> str:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _write_lines(path: Path, lines: list[dict]) -> None:
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


def _chain(conversation: Conversation, session_id: str, shape: str,
           turns: list[Turn]) -> tuple[list[dict], str | None]:
    """A session of ``turns``, each entry the child of the one before (their dialogue ids
    recorded in ``conversation.ids``): its lines, header first, and the last entry's id."""
    lines, parent = [_header(session_id, f"/locomo/{conversation.sample_id}/{shape}",
                             turns[0].timestamp)], None
    for position, turn in enumerate(turns):
        entry_id = f"{position + 1:08x}"
        lines.append(_entry(entry_id, parent, turn))
        conversation.ids[(session_id, entry_id)] = turn.dia_id
        parent = entry_id
    return lines, parent


def write(conversation: Conversation, corpus: Path) -> tuple[Path, Path]:
    """Write both shapes; return (a file of the search project, the retrieval file)."""
    folder = corpus / conversation.sample_id
    folder.mkdir(parents=True, exist_ok=True)
    first = None
    for number in sorted(conversation.sessions):
        turns = conversation.sessions[number]
        lines, _ = _chain(conversation, _session_id(conversation.sample_id, "sessions", number),
                          "sessions", turns)
        path = folder / f"session-{number:03d}.jsonl"
        _write_lines(path, lines)
        first = first or path
    turns = conversation.turns
    lines, parent = _chain(conversation, _session_id(conversation.sample_id, "one-file"),
                           "one-file", turns)
    kept = f"{len(turns) - TAIL + 1:08x}"
    lines.append({"type": "compaction", "id": "c0000000", "parentId": parent,
                  "timestamp": _iso(turns[-1].timestamp + dt.timedelta(seconds=1)),
                  "summary": "Earlier conversation, summarized.",
                  "firstKeptEntryId": kept, "tokensBefore": 100000})
    one_file = corpus / f"{conversation.sample_id}-one-file.jsonl"
    _write_lines(one_file, lines)
    assert first is not None
    return first, one_file


def cache_key(data_path: Path, embedder: str | None) -> str:
    """The data file, this conversion and every source file the index is built by."""
    digest = hashlib.sha256(data_path.read_bytes())
    digest.update(f"conversion {CONVERSION_VERSION} embedder {embedder}".encode())
    for package in ("ingest", "index"):
        for source in sorted((ROOT / package).rglob("*")):
            if source.is_file() and source.suffix in (".py", ".txt"):
                digest.update(source.relative_to(ROOT).as_posix().encode())
                digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def vector_key(data_path: Path, embedder: str) -> str:
    """The data, the conversion and the embedder's stamp (model, dimensions, chunking
    version): what the index itself checks before it uses a stored vector, so the cache
    outlives index and code changes exactly as stored vectors do (a vector is used only
    where its entry's text hash still matches; a stale one is embedded again)."""
    from lookback.embedders.registry import get_embedder
    from lookback.index.embeddings import Stamp

    stamp = Stamp.of(get_embedder(embedder))
    digest = hashlib.sha256(data_path.read_bytes())
    digest.update(f"conversion {CONVERSION_VERSION} {stamp}".encode())
    return digest.hexdigest()[:16]


def copy_vectors(home: Path, cwd: str, cached: Path, *, into_index: bool) -> None:
    """Copy a project's stored vectors from the cache file ``cached`` into its index, or
    from the index into the cache (embedding LoCoMo with MiniLM + e5 takes CPU-minutes)."""
    from lookback.index.embeddings import EMBEDDINGS_SEQ_META
    from lookback.index.layout import project_dir
    from lookback.index.store import open_writer, read_meta, write_meta

    if into_index and not cached.exists():
        return
    cached.parent.mkdir(parents=True, exist_ok=True)
    connection = open_writer(project_dir(home, cwd).index_path())
    try:
        connection.execute("ATTACH DATABASE ? AS cache", (str(cached),))
        with connection:
            connection.execute("CREATE TABLE IF NOT EXISTS cache.embeddings AS "
                               "SELECT * FROM main.embeddings WHERE 0")
            if into_index:
                connection.execute("INSERT OR REPLACE INTO main.embeddings "
                                   "SELECT * FROM cache.embeddings")
                seq = int(read_meta(connection, EMBEDDINGS_SEQ_META) or 0) + 1
                write_meta(connection, EMBEDDINGS_SEQ_META, seq)
            else:
                connection.execute("DELETE FROM cache.embeddings")
                connection.execute("INSERT INTO cache.embeddings SELECT * FROM main.embeddings")
        connection.execute("DETACH DATABASE cache")
    finally:
        connection.close()


def build(talks: list[Conversation], data_path: Path, embedder: str | None
          ) -> tuple[Path, dict[str, tuple[Path, Path]]]:
    """The indexed corpus, from the cache when its key matches; return (home, files)."""
    from lookback.index.sink import EmbeddedSink
    from lookback.ingest.pipeline import ingest_files
    from lookback.ingest.scan import session_files

    work = RESULTS / f"locomo-{cache_key(data_path, embedder)}"
    corpus, home = work / "corpus", work / "home"
    done = (work / "done").exists()
    if not done:
        shutil.rmtree(work, ignore_errors=True)
    # The conversion is deterministic: writing it again gives the same files and ids.
    files = {talk.sample_id: write(talk, corpus) for talk in talks}
    if done:
        return home, files
    started = time.perf_counter()
    with EmbeddedSink(home) as sink:
        report = ingest_files(session_files([corpus]), sink)
    print(f"indexed {report.read.entries:,} entries in {time.perf_counter() - started:.1f} s",
          file=sys.stderr)
    if embedder:
        from lookback.embedders.registry import get_embedder
        from lookback.index.embeddings import build_embeddings

        model = get_embedder(embedder)
        vectors = RESULTS / f"locomo-vectors-{vector_key(data_path, embedder)}"
        # Only retrieval is asked with `semantic: true` (search has no vectors).
        for talk in talks:
            cwd = f"/locomo/{talk.sample_id}/one-file"
            cached = vectors / f"{talk.sample_id}.sqlite"
            copy_vectors(home, cwd, cached, into_index=True)
            built = build_embeddings(home, cwd, model)
            print(f"embedded {built.entries:,} entries of {talk.sample_id}/one-file in "
                  f"{built.seconds:.1f} s", file=sys.stderr)
            if built.entries:
                copy_vectors(home, cwd, cached, into_index=False)
    (work / "done").write_text(json.dumps({"entries": report.read.entries}))
    return home, files


# -- scoring ----------------------------------------------------------------------

def _session_of(dia_id: str) -> str:
    return dia_id.split(":")[0]


def score_question(evidence: list[str], returned: list[str]) -> dict[str, float]:
    """Turn R@5/R@10, NDCG@10 and session R@5 of one question (the paper's protocol)."""
    if not evidence:
        return {"r5": 1.0, "r10": 1.0, "ndcg10": 1.0, "s5": 1.0}
    wanted = set(evidence)

    def recall(k: int) -> float:
        return sum(1 for e in evidence if e in returned[:k]) / len(evidence)

    gains = sum(1 / math.log2(rank + 2) for rank, got in enumerate(returned[:10])
                if got in wanted)
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(len(wanted), 10)))
    sessions = {_session_of(e) for e in evidence}
    top_sessions = {_session_of(got) for got in returned[:5]}
    return {"r5": recall(5), "r10": recall(10), "ndcg10": gains / ideal,
            "s5": len(sessions & top_sessions) / len(sessions)}


class Bm25:
    """Plain Okapi BM25 over one conversation's turns (the reference)."""

    def __init__(self, turns: list[Turn], k1: float = 1.2, b: float = 0.75) -> None:
        self.ids = [turn.dia_id for turn in turns]
        self.docs = [Counter(_tokens(turn.text)) for turn in turns]
        self.lengths = [sum(doc.values()) for doc in self.docs]
        self.average = sum(self.lengths) / len(self.lengths)
        frequency = Counter(token for doc in self.docs for token in doc)
        total = len(self.docs)
        self.idf = {token: math.log(1 + (total - n + 0.5) / (n + 0.5))
                    for token, n in frequency.items()}
        self.k1, self.b = k1, b

    def rank(self, question: str, k: int) -> list[str]:
        terms = set(_tokens(question))
        scores = []
        for position, doc in enumerate(self.docs):
            value = 0.0
            norm = self.k1 * (1 - self.b + self.b * self.lengths[position] / self.average)
            for term in terms:
                tf = doc.get(term)
                if tf:
                    value += self.idf[term] * tf * (self.k1 + 1) / (tf + norm)
            if value:
                scores.append((-value, position))
        scores.sort()
        return [self.ids[position] for _, position in scores[:k]]


def _tokens(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def run_paths(talk: Conversation, home: Path, files: tuple[Path, Path], semantic: bool,
              embedder: str | None) -> dict[str, list[dict]]:
    overrides: dict = {"home": str(home)}
    if embedder:
        overrides["retrieval"] = {"embedder": embedder}
    settings = load_settings(overrides, environ={})
    reader = IndexReader(home)
    search_file, one_file = files
    bm25 = Bm25(talk.turns)
    results: dict[str, list[dict]] = {"search": [], "retrieval": [], "bm25": []}
    timings: dict[str, list[float]] = defaultdict(list)
    fallbacks = 0
    asked_at = _iso(talk.turns[-1].timestamp)  # "now": the end of the last session
    for question in talk.questions:
        text = question["question"]
        started = time.perf_counter()
        found = search({"text": text, "scope": "project", "max_results": SEARCH_RESULTS,
                        "session_file": str(search_file), "message_time": asked_at},
                       settings=settings, reader=reader)
        timings["search"].append(time.perf_counter() - started)
        searched = [talk.ids.get((r["session_id"], r["entry_id"]), "?")
                    for r in found.get("results", [])]
        request = {"session_file": str(one_file), "message": text,
                   "max_results": RETRIEVAL_RESULTS, "message_time": asked_at}
        if semantic:
            request["semantic"] = True
        started = time.perf_counter()
        answer = retrieve(request, settings=settings, reader=reader)
        timings["retrieval"].append(time.perf_counter() - started)
        retrieved = [talk.ids.get((e["session_id"], e["entry_id"]), "?")
                     for e in answer.get("evidence", [])]
        spent = sum(e["tokens"] for e in answer.get("evidence", []))
        if semantic and answer["status"] == "ok":
            used = answer.get("diagnostics", {}).get("semantic", {}).get("used")
            fallbacks += used is False
        for path, returned, status, tokens in (
                ("search", searched, found["status"], None),
                ("retrieval", retrieved, answer["status"], spent),
                ("bm25", bm25.rank(text, 20), "ok", None)):
            results[path].append({"sample_id": talk.sample_id, "question": text,
                                  "tokens": tokens,
                                  "category": question["category"],
                                  "evidence": question["evidence"], "returned": returned,
                                  "status": status,
                                  **score_question(question["evidence"], returned)})
    reader.close()
    if fallbacks:
        print(f"{talk.sample_id}: {fallbacks} semantic calls fell back to lexical results",
              file=sys.stderr)
    return results


def summarize(rows: list[dict]) -> dict:
    def means(selected: list[dict]) -> dict[str, float]:
        return {metric: statistics.fmean(r[metric] for r in selected) if selected else 0.0
                for metric in ("r5", "r10", "ndcg10", "s5")} | {"questions": len(selected)}

    summary = means(rows)
    summary["no_query"] = sum(1 for r in rows if r["status"] == "no-query")
    spent = sorted(r["tokens"] for r in rows if r.get("tokens") is not None)
    if spent:  # evidence tokens per message (retrieval): median, p90, share with none
        summary["tokens"] = {"median": statistics.median(spent),
                             "p90": spent[int(0.9 * (len(spent) - 1))],
                             "empty": round(sum(1 for t in spent if not t) / len(spent), 3)}
    summary["categories"] = {CATEGORIES[c]: means([r for r in rows if r["category"] == c])
                             for c in sorted(CATEGORIES)}
    return summary


def report(all_results: dict[str, list[dict]]) -> dict:
    splits = {"tuning": lambda r: r["sample_id"] in TUNING,
              "held-out": lambda r: r["sample_id"] not in TUNING,
              "all": lambda r: True}
    figures: dict = {}
    for split, keep in splits.items():
        figures[split] = {path: summarize([r for r in rows if keep(r)])
                          for path, rows in all_results.items()}
    for split, paths in figures.items():
        print(f"\n{split} ({paths['search']['questions']} questions)")
        print(f"  {'path':<10} {'R@5':>6} {'R@10':>6} {'NDCG@10':>8} {'sess R@5':>9} "
              f"{'no-query':>9}   R@5 by category")
        for path, summary in paths.items():
            by_category = " ".join(f"{name[:5]} {values['r5']:.3f}"
                                   for name, values in summary["categories"].items())
            print(f"  {path:<10} {summary['r5']:>6.3f} {summary['r10']:>6.3f} "
                  f"{summary['ndcg10']:>8.3f} {summary['s5']:>9.3f} "
                  f"{summary['no_query']:>9}   {by_category}")
            if "tokens" in summary:
                spent = summary["tokens"]
                print(f"  {'':<10} evidence tokens per question: median {spent['median']:,.0f}, "
                      f"p90 {spent['p90']:,}, none for {spent['empty']:.1%}")
    print(f"\npublished: {PUBLISHED}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="LoCoMo's data/locomo10.json")
    parser.add_argument("--semantic", action="store_true",
                        help="build vectors and ask retrieval with semantic: true")
    parser.add_argument("--embedder", default=None,
                        help="embedder for --semantic (default: retrieval.embedder's default)")
    parser.add_argument("--only", nargs="*", help="these conversations only (sample ids)")
    parser.add_argument("--per-question", type=Path,
                        help="write each tuning question's result here (JSON lines)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    embedder = None
    if args.semantic or args.embedder:
        embedder = args.embedder or load_settings(environ={}).retrieval.embedder
    if embedder:
        from lookback.query.semantic import hybrid

        # Recall, not latency, is measured: a busy machine must not turn answers into
        # lexical fallbacks (the fallbacks are counted below all the same).
        hybrid.DEFAULT_TIMEOUT_MS = 60_000.0
    talks = conversations(json.loads(args.data.read_text()))
    home, files = build(talks, args.data, embedder)
    if args.only:
        talks = [talk for talk in talks if talk.sample_id in args.only]
    started = time.perf_counter()
    all_results: dict[str, list[dict]] = {"search": [], "retrieval": [], "bm25": []}
    for talk in talks:
        for path, rows in run_paths(talk, home, files[talk.sample_id], bool(embedder),
                                    embedder).items():
            all_results[path].extend(rows)
    print(f"asked {sum(len(t.questions) for t in talks):,} questions on 2 paths in "
          f"{time.perf_counter() - started:.1f} s", file=sys.stderr)
    figures = report(all_results)
    if args.per_question:
        with args.per_question.open("w") as out:
            for path, rows in all_results.items():
                for row in rows:
                    if row["sample_id"] in TUNING:
                        out.write(json.dumps({"path": path, **row}, ensure_ascii=False) + "\n")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
