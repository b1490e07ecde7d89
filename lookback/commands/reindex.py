"""``lookback reindex``: rebuild projections from the event log, swap atomically;
``--repair`` checks each index and rebuilds the damaged ones."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from lookback.commands.common import add_command, add_json, json_text, load, named_project
from lookback.errors import LookbackError, UserError
from lookback.freshness import default_roots
from lookback.index.layout import ProjectDir, list_projects, project_key
from lookback.index.paths import PathRegistry
from lookback.index.rebuild import exclusive, rebuild
from lookback.index.repair import check, fresh_generation, repair_from_log
from lookback.index.sink import EmbeddedSink
from lookback.index.store import IndexCorrupt, IndexUnavailable
from lookback.ingest.pipeline import ingest_files, peek_header
from lookback.ingest.reader import NotASession
from lookback.ingest.scan import session_files
from lookback.progress import Progress
from lookback.settings import Settings

SUMMARY = "rebuild project indexes from their event logs"
DESCRIPTION = """Rebuild every projection (entries, full-text index) from the project's event
log into a new file and swap it in atomically; readers keep answering from the old file until
the swap. One rebuild per project at a time: a second one refuses. With --repair, check each
index and rebuild the damaged ones: from the event log when it still reads, else from the
session files."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "reindex", run, SUMMARY, DESCRIPTION)
    parser.add_argument("--project", help="only this project (folder name or cwd)")
    parser.add_argument("--queue", action="store_true",
                        help="service mode: enqueue background rebuilds for the workers")
    parser.add_argument("--repair", action="store_true",
                        help="check every page of each index; rebuild only the damaged ones")
    parser.add_argument("paths", nargs="*", type=Path,
                        help="with --repair: session files or folders to rebuild a damaged "
                             "index from when its event log is unreadable (default: every "
                             "file indexed into it, as paths.sqlite records, and the "
                             "session folders lookback index reads)")
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    add_json(parser, "each project's outcome")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    projects = ([named_project(settings, args.project)]
                if args.project else list_projects(settings.home))
    if args.paths and not args.repair:
        raise UserError("session paths are only read with --repair")
    if args.queue:
        from lookback.service import enqueue_rebuilds

        count = enqueue_rebuilds(settings, projects)
        print(json_text({"enqueued": count}) if args.json else f"enqueued {count} rebuilds")
        return 0
    if not projects and not args.json:
        print("no projects to rebuild")
    outcomes = []
    for project in projects:
        try:
            if args.repair:
                outcome = _repair(project, settings, args.paths, args.json)
            else:
                outcome = _rebuild(project, args.quiet, args.json)
        except LookbackError as error:  # one project's problem never stops the others
            outcome = {"project": project.name, "outcome": "failed",
                       "error": _explain(project, error)}
            print(f"lookback: error: {outcome['error']}", file=sys.stderr, flush=True)
        outcomes.append(outcome)
    if args.json:
        print(json_text({"projects": outcomes}))
    return 1 if any(o["outcome"] == "failed" for o in outcomes) else 0


def _say(text: str, as_json: bool) -> None:
    """A line of the text output (``--json`` prints the outcomes at the end instead)."""
    if not as_json:
        print(text, flush=True)


def _rebuild(project: ProjectDir, quiet: bool, as_json: bool) -> dict[str, Any]:
    with Progress(None, what=project.name, unit="events", quiet=quiet) as progress:
        report = rebuild(project, progress=progress.count)
    _say(f"rebuilt {report.project}: {report.events:,} events replayed into "
         f"generation {report.generation} in {report.seconds:.2f}s", as_json)
    return {"project": report.project, "outcome": "rebuilt", "events": report.events,
            "generation": report.generation, "seconds": round(report.seconds, 3)}


def _explain(project: ProjectDir, error: LookbackError) -> str:
    problem = check(project) if isinstance(error, IndexUnavailable) else None
    if isinstance(error, IndexCorrupt) or problem is not None:
        return (f"{project.name}: {problem or 'the index is damaged'}; it cannot be rebuilt "
                f"from itself: repair it with `lookback reindex --repair --project "
                f"{project.name}`")
    if isinstance(error, IndexUnavailable) and project.name not in str(error):
        return f"{project.name}: {error}"
    return str(error)


def _repair(project: ProjectDir, settings: Settings, paths: list[Path],
            as_json: bool) -> dict[str, Any]:
    guard = exclusive(project)
    try:
        problem = check(project, thorough=True)
        if problem is None:
            _say(f"{project.name}: the index is sound; nothing to repair", as_json)
            return {"project": project.name, "outcome": "sound"}
        print(f"{project.name}: {problem}; repairing", file=sys.stderr, flush=True)
        try:
            report = repair_from_log(project)
        except IndexUnavailable as error:
            print(f"{project.name}: {error}; rebuilding from the session files",
                  file=sys.stderr, flush=True)
        else:
            _say(f"repaired {project.name} from its event log: {report.events:,} events "
                 f"replayed into generation {report.generation}", as_json)
            return {"project": project.name, "outcome": "repaired", "from": "event log",
                    "events": report.events, "generation": report.generation,
                    "problem": problem}
        outcome = _repair_from_sessions(project, settings, paths, as_json)
        return {**outcome, "problem": problem}
    finally:
        os.close(guard)


def _repair_from_sessions(project: ProjectDir, settings: Settings, paths: list[Path],
                          as_json: bool) -> dict[str, Any]:
    roots = paths or [root for root in default_roots(settings) if root.is_dir()]
    files = _project_files(project, settings, roots)
    if not paths:  # and every file indexed into it, wherever it lies (paths.sqlite)
        files += [path for path in _recorded_files(project, settings) if path not in files]
    if not files:
        where = ", ".join(map(str, roots)) or "no session folder"
        raise UserError(f"{project.name}: cannot repair: its event log is unreadable and no "
                        f"session file of this project is under {where}; name the folder: "
                        f"lookback reindex --repair --project {project.name} PATH", 1)
    generation = fresh_generation(project)
    with EmbeddedSink(settings.home, namespace=settings.namespace) as sink:
        report = ingest_files(files, sink, max_line_bytes=settings.max_line_bytes,
                              excluded=settings.excluded)
    for error in [*report.errors, *sink.failures.values()]:
        print(f"lookback: error: {error}", file=sys.stderr, flush=True)
    _say(f"repaired {project.name} from {len(files)} session files: "
         f"{report.read.entries:,} entries into generation {generation} (the damaged "
         "file is kept beside it, renamed *.damaged)", as_json)
    return {"project": project.name, "outcome": "repaired", "from": "session files",
            "files": len(files), "entries": report.read.entries, "generation": generation}


def _recorded_files(project: ProjectDir, settings: Settings) -> list[Path]:
    """The session files paths.sqlite records for this project that still name it."""
    registry = PathRegistry(settings.home, settings.namespace)
    try:
        recorded = registry.recorded()
    finally:
        registry.close()
    candidates = [Path(path) for path, cwd in recorded
                  if project_key(cwd, settings.namespace) == project.name]
    return _project_files(project, settings, [], candidates)


def _project_files(project: ProjectDir, settings: Settings, roots: list[Path],
                   candidates: list[Path] | None = None) -> list[Path]:
    """The session files under ``roots`` (or among ``candidates``) whose header names
    this project."""
    found = []
    for path in session_files(roots) if candidates is None else candidates:
        try:
            _, cwd = peek_header(path, settings.max_line_bytes)
        except (NotASession, OSError):
            continue
        if project_key(cwd, settings.namespace) == project.name:
            found.append(path)
    return found
