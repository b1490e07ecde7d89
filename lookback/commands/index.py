"""``lookback index [PATH ...]``: read Pi, Claude Code and Codex session files into the indexes."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lookback.application.modes import mode_of
from lookback.commands.common import add_command, load
from lookback.errors import UserError
from lookback.freshness import default_roots
from lookback.index.sink import EmbeddedSink
from lookback.ingest.pipeline import IngestReport, ingest_files, peek_header
from lookback.ingest.scan import named_files, session_files
from lookback.progress import Progress
from lookback.settings import Settings

if TYPE_CHECKING:
    from lookback.workers.sink import RedisSink


SUMMARY = "index Pi, Claude Code and Codex session files (default: their folders)"
DESCRIPTION = """Read new lines of Pi, Claude Code and Codex session files into one index per
project. Re-running reads only what was appended; rewritten files replace their session. A
folder or file that cannot be read is skipped and named, the rest is indexed, and the command
exits 1 at the end. On a terminal a progress bar shows bytes read, rate and time left."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "index", run, SUMMARY, DESCRIPTION)
    parser.add_argument("paths", nargs="*", type=Path,
                        help="session files or folders (default: Pi's, Claude Code's and "
                             "Codex's sessions folders, as the settings name them)")
    parser.add_argument("--queue", action="store_true",
                        help="service mode: publish the events to Redis for the workers")
    parser.add_argument("--embed", action="store_true",
                        help="embedded mode: also build the semantic vectors of the indexed "
                             "projects now (embedder: retrieval.embedder, default hashing)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    paths = args.paths or [root for root in default_roots(settings) if root.is_dir()]
    if not paths:  # nothing asked for and nothing there: not an error
        print(f"no Pi, Claude Code or Codex sessions yet: {default_roots(settings)[0]} does "
              "not exist (Pi creates it on its first session; Claude Code's ~/.claude/projects "
              "and Codex's ~/.codex/sessions neither; "
              "or name session files or folders: lookback index PATH ...)")
        return 0
    skipped: list[str] = []  # dangling links and the like, found in the folders
    unreadable: list[str] = []  # folders (and named paths) that cannot be read: go on
    files = list(session_files(paths, skipped=skipped, unreadable=unreadable))
    if not files and not skipped and not unreadable:
        raise UserError(f"no session files (*.jsonl) under {', '.join(map(str, paths))}", 1)
    if args.embed and args.queue:
        raise UserError("--embed builds vectors inline (embedded mode); in service mode the "
                        "workers build them when retrieval.semantic is true", 2)
    if mode_of(settings) == "service" and not args.queue:
        _refuse_owned_elsewhere(settings, files)
    started = time.monotonic()
    if args.queue:
        from lookback.service import queue_sink  # imports Redis only in service mode

        sink: EmbeddedSink | RedisSink = queue_sink(settings)
    else:
        # bulk: new indexes are written without fsyncs and the run syncs once at its
        # end (many small projects: ~4 fsyncs each dominated the run)
        sink = EmbeddedSink(settings.home, namespace=settings.namespace, bulk=True)
    sizes = [_size(path) for path in files]
    with sink, Progress(sum(sizes), what="indexing", quiet=args.quiet) as progress:
        report = ingest_files(files, sink, strict=named_files(args.paths),
                              max_line_bytes=settings.max_line_bytes,
                              excluded=settings.excluded, **_follow(sizes, progress))
    report.not_sessions.extend(skipped)
    _note_sink(report, sink)
    _summary(report, time.monotonic() - started, args.json, unreadable)
    if args.embed:
        _embed(settings, sorted(report.projects), args.quiet)
    # A project that could not be written fails the run, and so does a path that could
    # not be read (after the rest was indexed) and a named file that is not a session
    # when nothing at all was indexed; a stray file of a folder is skipped and counted
    # (not_sessions).
    if unreadable or len(report.failed_files) > report.pending_headers or (
            isinstance(sink, EmbeddedSink) and sink.failures):
        return 1
    return 1 if report.errors and not report.sessions else 0


def _refuse_owned_elsewhere(settings: Settings, files: list[Path]) -> None:
    """In service mode this data directory is one worker host's: projects another host
    owns are refused before anything is written (their copy here would go stale)."""
    from lookback.service import owned_elsewhere

    cwds = []
    for path in files:
        try:
            cwds.append(peek_header(path, settings.max_line_bytes)[1])
        except (OSError, ValueError, UserError):  # not a session, unreadable: reported later
            continue
    elsewhere = owned_elsewhere(settings, cwds)
    if elsewhere:
        listed = "; ".join(f"{cwd} (owned by {owner})" for cwd, owner in
                           list(elsewhere.items())[:5])
        more = f" and {len(elsewhere) - 5} more" if len(elsewhere) > 5 else ""
        raise UserError(
            f"{len(elsewhere)} of these projects belong to another worker host: {listed}"
            f"{more}. Indexing them into {settings.home} would make a second copy that "
            "goes stale. Publish them to their owners instead (`lookback index --queue "
            "PATH`), or move a project here first (`lookback owner PROJECT --take`)", 1)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _follow(sizes: list[int], progress: Progress) -> dict[str, Callable[..., None]]:
    """``ingest_files``' callbacks that move ``progress`` by bytes: batch by batch inside a
    file (one large session is followed as it is read), to its end once it is done.
    ``sizes``: each file's size, in the order ``ingest_files`` reads them, as the bar's
    total counted it (a file is not looked at twice)."""
    state = {"before": 0, "files": 0}
    total = len(sizes)

    def on_batch(path: Path, offset: int) -> None:
        progress.reach(state["before"] + offset)

    def on_file(path: Path, report: IngestReport) -> None:
        state["before"] += sizes[state["files"]]
        state["files"] += 1
        progress.reach(state["before"], f"{state['files']:,}/{total:,} files, "
                                        f"{report.read.entries:,} entries")

    return {"on_batch": on_batch, "on_file": on_file}


def _note_sink(report: IngestReport, sink: EmbeddedSink | RedisSink) -> None:
    """Add what the embedded sink set aside: events it could not store, projects it could
    not write (the Redis sink stores nothing itself: the workers count theirs)."""
    if not isinstance(sink, EmbeddedSink):
        return
    report.read.set_aside += sink.set_aside
    for message in sink.failures.values():
        if message not in report.errors:
            report.errors.append(message)


def _summary(report: IngestReport, seconds: float, as_json: bool,
             unreadable: list[str]) -> None:
    read = report.read
    errors = [*unreadable, *report.errors]
    summary = {
        "files": report.files, "projects": len(report.projects),
        "sessions": len(report.sessions), "entries_added": read.entries,
        "events": report.events, "malformed_lines_skipped": read.malformed,
        "oversized_lines_skipped": read.oversized, "values_repaired": read.repaired,
        "events_set_aside": read.set_aside, "rewritten_files": read.rewrites,
        "not_sessions": len(report.not_sessions),
        "headers_being_written": report.pending_headers,
        "unreadable_skipped": len(unreadable) + len(report.unreadable),
        "excluded_skipped": report.excluded,
        "errors": errors,
        "seconds": round(seconds, 3),
    }
    if as_json:
        import json

        print(json.dumps(summary, indent=2))
    else:
        print(f"indexed {summary['entries_added']:,} new entries from {report.files} files: "
              f"{summary['projects']} projects, {summary['sessions']} sessions, "
              f"{read.malformed} malformed and {read.oversized} oversized lines skipped, "
              f"{read.rewrites} rewritten files, in {seconds:.2f}s")
        if read.repaired or read.set_aside:
            print(f"repaired {read.repaired} values that could not be stored as written "
                  f"(lone surrogates escaped, impossible numbers dropped); "
                  f"{read.set_aside} lines set aside")
        if report.excluded:
            print(f"{report.excluded} files of projects in excluded_projects not read")
        if report.pending_headers:
            print(f"{report.pending_headers} files are still being started (header line "
                  "incomplete); they are read on the next run")
        if report.not_sessions:
            print(f"skipped {len(report.not_sessions)} files that are not Pi, Claude Code or "
                  "Codex sessions")
        if summary["unreadable_skipped"]:
            print(f"skipped {summary['unreadable_skipped']} folders or files that could not "
                  "be read (named below)")
    for warning in read.warnings[:20]:
        print(f"lookback: warning: {warning}", file=sys.stderr)
    for error in errors:
        print(f"lookback: error: {error}", file=sys.stderr)


def _embed(settings: Settings, cwds: list[str], quiet: bool) -> None:
    """Build the missing semantic vectors of each project, with a progress bar."""
    from lookback.embedders.port import EmbeddingError
    from lookback.embedders.registry import get_embedder
    from lookback.index.embeddings import build_embeddings

    name = settings.retrieval.embedder
    try:
        embedder = get_embedder(name)
    except EmbeddingError as error:
        raise UserError(f"cannot embed: {error}", 1) from None
    for cwd in cwds:
        with Progress(None, what="embedding", unit="entries", quiet=quiet) as progress:
            report = build_embeddings(settings.home, cwd, embedder,
                                      namespace=settings.namespace, progress=progress.count)
        print(f"embedded {report.entries:,} entries ({report.chunks:,} chunks) of {cwd} "
              f"with {embedder.name} in {report.seconds:.2f}s")
