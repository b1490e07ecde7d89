"""What storage costs and what compacting and forgetting give back (docs/data-controls.md).

    python bench/bench_storage.py [--entries 100000] [--sessions 100] [--rewritten 0.1]

Indexes a generated corpus of real fixture text (bench/corpus.py) into one project, then
measures, each on the same index in turn: the bytes per part of the file (``dbstat``);
``compact --keep-log`` (FTS5 optimize + VACUUM); a share of the session files rewritten
and read again (each behind a reset, so the log holds their entries twice) followed by
``compact`` (superseded events dropped, then the file); ``forget`` of one entry and of a
pattern that matches many. Times are wall-clock seconds on an otherwise idle index.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import real_messages, write_corpus  # noqa: E402

CWD = "/bench/project"


def parts(home: Path) -> dict[str, int]:
    """Bytes of the live index by part: the event log, entries, full-text index, other."""
    from lookback.index.layout import project_dir
    from lookback.index.store import open_reader

    connection = open_reader(project_dir(home, CWD).index_path())
    try:
        rows = connection.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")
        found = {"events": 0, "entries": 0, "fts": 0, "other": 0}
        for name, size in rows:
            key = ("fts" if name.startswith("entries_fts") else
                   "events" if name.startswith("events") or name == "sqlite_autoindex_events_1"
                   else "entries" if name.startswith("entries") else "other")
            found[key] += size
    finally:
        connection.close()
    return found


def mib(count: int) -> str:
    return f"{count / 2**20:,.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rewritten", type=float, default=0.1)
    args = parser.parse_args()
    from lookback.index.compact import compact, folder_bytes
    from lookback.index.forget import Selection, forget, pattern_matcher
    from lookback.index.layout import project_dir
    from lookback.index.sink import EmbeddedSink
    from lookback.ingest.pipeline import ingest_files
    from lookback.ingest.scan import session_files

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpus, home = work / "corpus", work / "home"
        write_corpus(corpus, args.sessions, args.entries // args.sessions, cwd=CWD)
        started = time.perf_counter()
        with EmbeddedSink(home, bulk=True) as sink:
            report = ingest_files(session_files([corpus]), sink)
        project = project_dir(home, CWD)
        print(f"indexed {report.read.entries:,} entries in {args.sessions} sessions in "
              f"{time.perf_counter() - started:.1f} s: {mib(folder_bytes(project))}; "
              + ", ".join(f"{k} {mib(v)}" for k, v in parts(home).items()))

        done = compact(home, project, log=False)
        print(f"compact --keep-log: {mib(done.bytes_before)} -> {mib(done.bytes_after)} in "
              f"{done.seconds:.1f} s")

        files = sorted(corpus.glob("*.jsonl"))[: int(args.sessions * args.rewritten)]
        for path in files:  # one byte of the first entry changed: read again from the start
            lines = path.read_text().split("\n")
            lines[1] = lines[1].replace('"id":', '"id" :', 1)
            path.write_text("\n".join(lines))
        with EmbeddedSink(home) as sink:
            again = ingest_files(files, sink)
        grown = folder_bytes(project)
        print(f"{len(files)} sessions rewritten and read again ({again.read.entries:,} "
              f"entries): {mib(grown)}; events {mib(parts(home)['events'])}")
        done = compact(home, project)
        print(f"compact: {done.events_dropped:,} of {done.events_before:,} events dropped, "
              f"{mib(done.bytes_before)} -> {mib(done.bytes_after)} in {done.seconds:.1f} s")

        entry = Selection(session_id=_first_session(home), entry_ids=("00000001",))
        done_forget = forget(home, project, entry)
        print(f"forget one entry: {done_forget.entries} entries, "
              f"{done_forget.events_scrubbed} events scrubbed, {done_forget.seconds:.1f} s")
        text = _common_text()
        pattern = Selection(matches=pattern_matcher(text))
        dry = forget(home, project, pattern, dry_run=True)
        done_forget = forget(home, project, pattern)
        print(f"forget a pattern: {done_forget.entries:,} entries in {done_forget.sessions} "
              f"sessions, {done_forget.events_scrubbed:,} events scrubbed: dry run "
              f"{dry.seconds:.1f} s, forget {done_forget.seconds:.1f} s, "
              f"{mib(done_forget.bytes_before)} -> {mib(done_forget.bytes_after)}")
        print(json.dumps(parts(home)))


def _first_session(home: Path) -> str:
    from lookback.index.layout import project_dir
    from lookback.index.store import open_reader

    connection = open_reader(project_dir(home, CWD).index_path())
    try:
        return connection.execute("SELECT min(session_id) FROM sessions").fetchone()[0]
    finally:
        connection.close()


def _common_text() -> str:
    """Words of one real user message, which the corpus repeats in every cycle."""
    for message in real_messages():
        content = message["message"].get("content")
        blocks = [content] if isinstance(content, str) else \
            [b.get("text") for b in content or [] if isinstance(b, dict)]
        for text in blocks:
            if message["message"].get("role") == "user" and isinstance(text, str) \
                    and len(text) > 40:
                return text[:40]
    raise SystemExit("no user message in the fixtures")


if __name__ == "__main__":
    main()
