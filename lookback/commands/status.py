"""``lookback status``: what each project's index holds."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from lookback import hook_client, local_reader
from lookback.application.modes import mode_of
from lookback.commands.common import add_command, load, named_project
from lookback.index.layout import list_projects
from lookback.index.status import project_status
from lookback.ingest.entries import MAX_TEXT_CHARS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "status", run, "show each project's index")
    parser.add_argument("--project", help="only this project (folder name or cwd)")
    parser.add_argument("--json", action="store_true", help="print JSON")


def collect(args: argparse.Namespace) -> dict[str, Any]:
    settings = load(args)
    projects = ([named_project(settings, args.project)]
                if args.project else list_projects(settings.home))
    report: dict[str, Any] = {"home": str(settings.home),
                              "mode": mode_of(settings),
                              "projects": [project_status(p) for p in projects]}
    if report["mode"] == "service":
        from lookback.service import service_status  # Redis only in service mode

        service_status(settings, report)
    reader = reader_freshness(str(settings.home))
    if reader is not None:
        report["reader"] = reader
    return report


#: ``status`` stays fast: one request to the reader, answered within this or not at all.
READER_TIMEOUT_SECONDS = 0.5
#: Freshness jobs queued at once beyond which the reader is said to be behind.
BACKLOG = 50


def reader_freshness(home: str) -> dict[str, Any] | None:
    """This home's running reader's freshness counters and file budget (``/v1/health``'s
    ``server``), asked on its Unix socket after the identity check every client makes;
    None when no reader of ours answers in time (nothing to say, not an error)."""
    deadline = time.monotonic() + READER_TIMEOUT_SECONDS
    try:
        health = hook_client.get_json("", "/v1/health", deadline=deadline, home=home,
                                      token=os.environ.get("LOOKBACK_TOKEN"))
    except (local_reader.NoReader, local_reader.NotOurReader, hook_client.HookSkipped,
            OSError, ValueError):
        return None
    server = health.get("server") if isinstance(health, dict) else None
    if not isinstance(server, dict):
        return None
    reader: dict[str, Any] = {"freshness": server.get("freshness"), "files": server.get("files")}
    problem = freshness_problem(server.get("freshness"))
    if problem:
        reader["problem"], reader["fix"] = problem
    return reader


def freshness_problem(counters: object) -> tuple[str, str] | None:
    """What is wrong with the reader's freshness, from its counters, and what to do
    (None: it keeps up)."""
    if not isinstance(counters, dict):
        return None
    out_of_files, failed = counters.get("out_of_files") or 0, counters.get("failed") or 0
    pending = counters.get("pending") or 0
    if out_of_files:
        return (f"freshness cannot keep up: {out_of_files} indexing jobs failed for lack of "
                "open files; new entries wait for a later run",
                "raise the open-files limit (`ulimit -n 4096`) in the shell that starts the "
                "reader, then restart it (`lookback serve --stop`, `lookback serve --ensure`); "
                "see docs/troubleshooting.md")
    if failed:
        return (f"freshness is failing: {failed} indexing jobs failed; new entries wait for "
                "a later run", "the reader's log says why; see docs/troubleshooting.md")
    if pending > BACKLOG:
        return (f"freshness is behind: {pending} session files wait to be indexed",
                "wait, or run `lookback index`; see docs/troubleshooting.md")
    return None


def run(args: argparse.Namespace) -> int:
    report = collect(args)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"data directory: {report['home']} ({report['mode']} mode)")
    redis_info = report.get("redis")
    if redis_info:
        state = redis_info.get("error") or "reachable"
        print(f"redis: {redis_info['url']} (prefix {redis_info['prefix']}): {state}")
    for queue, figures in (report.get("queues") or {}).items():
        print(f"queue {queue}: " + ", ".join(f"{k.replace('_', ' ')} {v}"
                                              for k, v in figures.items()))
    for host_id, host in (report.get("hosts") or {}).items():
        state = "live" if host["live"] else "DEAD (lease expired)"
        print(f"worker host {host_id}{' (this host)' if host['this_host'] else ''}: {state}, "
              f"{host['projects']} projects, lag {host['lag_events']} events / "
              f"{host['lag_seconds']:.1f} s, own queue {host['depth']} queued, "
              + (f"reader {host['reader']}" if host.get("reader") else "no reader registered"))
    reader = report.get("reader") or {}
    if reader.get("problem"):
        print(f"reader: {reader['problem']}\n  fix: {reader['fix']}")
    for problem in report.get("service_problems") or []:
        print(f"problem: {problem['problem']}\n  fix: {problem['fix']}")
    if not report["projects"]:
        print("no projects indexed yet: `lookback index` reads the agents' session folders once "
              "they exist; `lookback index PATH ...` reads the session files or folders named")
    for project in report["projects"]:
        cwd = project.get("cwd")
        print(f"\n{project['project']}" + (f"  ({cwd})" if cwd else ""))
        if project.get("state"):
            print(f"  {'state':<18} {project['state']}")
        for key in ("sessions", "entries", "events_applied", "last_indexed_at",
                    "index_bytes", "schema_version", "generation"):
            value = project.get(key)
            if value is None:  # a damaged index cannot say
                continue
            if key == "last_indexed_at" and value:
                import datetime

                value = datetime.datetime.fromtimestamp(float(value)).isoformat(timespec="seconds")
            print(f"  {key.replace('_', ' '):<18} {value}")
        if project.get("sessions_without_source"):
            print(f"  {'kept, file gone':<18} {project['sessions_without_source']} sessions "
                  "(their session files were deleted; the index keeps what it read)")
        if project.get("entries_cut"):
            print(f"  {'entries cut':<18} {project['entries_cut']} (text longer than "
                  f"{MAX_TEXT_CHARS:,} characters: the rest is not searchable)")
        if project.get("state") == "read-only" and project.get("problem"):
            print(f"  {'problem':<18} {project['problem']}")
        if project.get("state") == "damaged":
            print(f"  {'problem':<18} {project['problem']}")
            print(f"  repair it with `{project['repair']}`")
        if project.get("needs_reindex"):
            print("  written by an older version: run `lookback reindex` to rebuild it")
        for key, value in project.items():
            if key.startswith("service_"):
                print(f"  {key[8:].replace('_', ' '):<18} {value}")
    return 0
