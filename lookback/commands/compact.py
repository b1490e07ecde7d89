"""``lookback compact``: drop superseded events and free pages (``index.compact``)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from lookback.commands.common import add_command, add_json, load
from lookback.errors import LookbackError
from lookback.index.compact import CompactReport, compact
from lookback.index.layout import find_project, list_projects

SUMMARY = "give each project's index back the space it no longer needs"
DESCRIPTION = """Delete the events no replay needs (entries of a session before its file was
rewritten and read again, entries replaced by a later version), merge the full-text index,
VACUUM the file and delete the generation an earlier reindex left beside it. Answers do not
change; a reindex afterwards gives the same entries. With --keep-log only the file is
compacted. Costs: docs/data-controls.md."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "compact", run, SUMMARY, DESCRIPTION)
    parser.add_argument("--project", help="only this project (folder name or cwd)")
    parser.add_argument("--keep-log", action="store_true",
                        help="leave the event log as it is; compact the file only")
    add_json(parser, "the figures")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    projects = ([find_project(settings.home, args.project, settings.namespace)]
                if args.project else list_projects(settings.home))
    reports: list[CompactReport] = []
    failed = 0
    for project in projects:
        try:
            reports.append(compact(settings.home, project, log=not args.keep_log))
        except LookbackError as error:  # one project's problem never stops the others
            failed += 1
            where = "" if project.name in str(error) else f"{project.name}: "
            print(f"lookback: error: {where}{error}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps({"projects": [asdict(report) for report in reports]}, indent=2))
        return 1 if failed else 0
    if not projects:
        print("no projects indexed yet: `lookback index` reads the agents' session folders once "
              "they exist; `lookback index PATH ...` reads the session files or folders named")
    for report in reports:
        print(f"{report.project}: {report.events_dropped:,} of {report.events_before:,} events "
              f"dropped, {report.bytes_before:,} -> {report.bytes_after:,} bytes in "
              f"{report.seconds:.2f}s")
    return 1 if failed else 0
