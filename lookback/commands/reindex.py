"""``lookback reindex``: rebuild projections from the event log, swap atomically."""

from __future__ import annotations

import argparse
import sys

from lookback.commands.common import load
from lookback.index.layout import find_project, list_projects
from lookback.index.rebuild import rebuild


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "reindex", help="rebuild project indexes from their event logs",
        description="Rebuild every projection (entries, full-text index) from the "
                    "project's event log into a new file and swap it in atomically; "
                    "readers keep answering from the old file until the swap.")
    parser.add_argument("--project", help="only this project (folder name or cwd)")
    parser.add_argument("--all", action="store_true", help="every project (the default)")
    parser.add_argument("--queue", action="store_true",
                        help="service mode: enqueue background rebuilds for the workers")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    projects = ([find_project(settings.home, args.project, settings.namespace)]
                if args.project else list_projects(settings.home))
    if args.queue:
        from lookback.service import enqueue_rebuilds

        count = enqueue_rebuilds(settings, projects)
        print(f"enqueued {count} rebuilds")
        return 0
    if not projects:
        print("no projects to rebuild")
    for project in projects:
        report = rebuild(project, progress=_progress(project.name))
        print(f"rebuilt {report.project}: {report.events:,} events replayed into "
              f"generation {report.generation} in {report.seconds:.2f}s")
    return 0


def _progress(name: str):
    interactive = sys.stderr.isatty()

    def show(done: int, total: int) -> None:
        if interactive:
            sys.stderr.write(f"\r{name}: {done:,}/{total:,} events")
            if done >= total:
                sys.stderr.write("\n")
            sys.stderr.flush()

    return show
