"""``lookback forget``: take entries, a session, or every entry matching a pattern out of
the index for good (``index.forget``; docs/data-controls.md)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from dataclasses import asdict
from pathlib import Path

from lookback.commands.common import add_command, add_json, load
from lookback.errors import LookbackError, UserError
from lookback.index.forget import ForgetError, ForgetReport, Selection, forget, pattern_matcher
from lookback.index.layout import ProjectDir, find_project, list_projects, project_dir
from lookback.ingest.pipeline import peek_header
from lookback.ingest.reader import NotASession
from lookback.ingest.storable import iso_millis
from lookback.query.context.manifest import ManifestStore
from lookback.settings import Settings

SUMMARY = "forget entries, a session, or every entry matching a pattern"
DESCRIPTION = """Remove text from the index for good: from its entries, full-text index,
vectors and event log, with a tombstone so that no reindex, repair or re-read of the session
file brings it back. Name the session with --session-file, or --project and --session-id;
then one of --entry, --whole-session, --text, --regex or --before. A pattern or a time
without a session applies to the named project, or to every project. Try it with --dry-run
first: it prints the counts only. Nothing of the text or the pattern is logged."""

log = logging.getLogger("lookback.forget")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "forget", run, SUMMARY, DESCRIPTION)
    parser.add_argument("--session-file", help="the session file (names project and session)")
    parser.add_argument("--project", help="project folder name or cwd")
    parser.add_argument("--session-id", help="session id (with --project)")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--entry", action="append", metavar="ENTRY_ID",
                      help="forget this entry of the session (repeat for more)")
    what.add_argument("--whole-session", action="store_true", help="forget the whole session")
    what.add_argument("--text", help="forget every entry containing this text (case-insensitive; "
                      "'-' reads it from standard input, out of the shell's history)")
    what.add_argument("--regex", help="forget every entry matching this regular expression "
                      "('-' reads it from standard input)")
    what.add_argument("--before", metavar="TIME", help="forget every entry written before "
                      "this ISO 8601 date or time (local time unless it names a zone): a "
                      "cap by age"),
    parser.add_argument("--dry-run", action="store_true",
                        help="count what would be forgotten; change nothing")
    add_json(parser, "the counts")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    projects, session_id = _scope(args, settings)
    selection = _selection(args, session_id)
    reports: list[ForgetReport] = []
    failed = 0
    for project in projects:
        try:
            reports.append(forget(settings.home, project, selection, dry_run=args.dry_run))
        except ForgetError:
            raise  # the selection itself is wrong: the same for every project
        except LookbackError as error:  # one project's problem never stops the others
            failed += 1
            where = "" if project.name in str(error) else f"{project.name}: "
            print(f"lookback: error: {where}{error}", file=sys.stderr, flush=True)
    if selection.whole_session and not args.dry_run and session_id is not None:
        _forget_manifests(settings, projects[0], session_id)
    for report in reports:  # counts only: never the text, never the pattern
        log.info("forget project=%s dry_run=%s entries=%d sessions=%d events=%d",
                 report.project, report.dry_run, report.entries, report.sessions,
                 report.events_scrubbed)
    if args.json:
        print(json.dumps({"dry_run": args.dry_run,
                          "projects": [asdict(report) for report in reports]}, indent=2))
        return 1 if failed else 0
    shown = [report for report in reports if report.entries or report.events_scrubbed]
    for report in shown:
        print(_line(report))
    if not shown:
        print("nothing to forget: no entry matched")
    return 1 if failed else 0


def _scope(args: argparse.Namespace, settings: Settings) -> tuple[list[ProjectDir], str | None]:
    """The projects to search and the session named (None: all of their sessions)."""
    if args.session_file:
        if args.project or args.session_id:
            raise UserError("name the session with --session-file, or with --project and "
                            "--session-id, not both")
        path = Path(os.path.abspath(args.session_file))
        try:
            session_id, cwd = peek_header(path, settings.max_line_bytes)
        except (NotASession, OSError) as error:
            raise UserError(f"--session-file: {error}; a session whose file is gone is named "
                            "with --project and --session-id") from None
        project = project_dir(settings.home, cwd, settings.namespace)
        return [find_project(settings.home, project.name, settings.namespace)], session_id
    if args.session_id and not args.project:
        raise UserError("--session-id needs --project")
    if args.project:
        return [find_project(settings.home, args.project, settings.namespace)], args.session_id
    if args.entry or args.whole_session:
        raise UserError("name the session: --session-file, or --project and --session-id")
    return list_projects(settings.home), None


def _selection(args: argparse.Namespace, session_id: str | None) -> Selection:
    if args.entry:
        return Selection(session_id=session_id, entry_ids=tuple(args.entry))
    if args.whole_session:
        if session_id is None:
            raise UserError("--whole-session needs --session-file, or --session-id")
        return Selection(session_id=session_id, whole_session=True)
    if args.before is not None:
        before_ms = iso_millis(args.before)
        if before_ms is None:
            raise UserError(f"--before {args.before}: not an ISO 8601 date or time "
                            "(e.g. 2026-06-01 or 2026-06-01T12:00:00Z)")
        return Selection(session_id=session_id, before_ms=before_ms)
    is_regex = args.regex is not None
    pattern = args.regex if is_regex else args.text
    if pattern == "-":
        pattern = sys.stdin.read().rstrip("\n")
    return Selection(session_id=session_id, matches=pattern_matcher(pattern, is_regex=is_regex))


def _forget_manifests(settings: Settings, project: ProjectDir, session_id: str) -> None:
    """A forgotten session's context-manifest records (ids and counts, no text) go too."""
    store = ManifestStore(settings.home)
    try:
        store.forget_session(session_id, project.name)
    finally:
        store.close()


def _line(report: ForgetReport) -> str:
    counts = (f"{_count(report.entries, 'entry', 'entries')} in "
              f"{_count(report.sessions, 'session', 'sessions')}")
    if report.dry_run:
        return (f"{report.project}: would forget {counts} "
                f"({_count(report.events_scrubbed, 'logged event', 'logged events')})")
    line = (f"{report.project}: forgot {counts} "
            f"({_count(report.events_scrubbed, 'logged event', 'logged events')} scrubbed); "
            f"{report.bytes_before:,} -> {report.bytes_after:,} bytes in {report.seconds:.2f}s")
    if report.damaged_copies:
        line += (f"\n  {len(report.damaged_copies)} damaged copies kept by an earlier repair "
                 f"may still hold the text: delete {', '.join(report.damaged_copies)} in "
                 f"the project folder")
    return line


def _count(number: int, one: str, many: str) -> str:
    return f"{number:,} {one if number == 1 else many}"
