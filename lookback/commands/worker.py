"""``lookback worker``: run the dramatiq workers that keep the indexes current."""

from __future__ import annotations

import argparse
import os
import sys

from lookback.application.modes import mode_of
from lookback.commands.common import add_command, load
from lookback.errors import UserError

SUMMARY = "service mode: apply queued session events to the indexes"
DESCRIPTION = """Start dramatiq worker processes: one group for fresh appends (queue
lookback-index) and one for background rebuilds (queue lookback-background). Needs
LOOKBACK_REDIS_URL."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "worker", run, SUMMARY, DESCRIPTION)
    parser.add_argument("--processes", type=int, help="index worker processes "
                        "(default: workers.processes, 1)")
    parser.add_argument("--threads", type=int, help="threads per index worker process "
                        "(default: workers.threads, 2)")
    parser.add_argument("--no-background", action="store_true",
                        help="do not start the background (rebuild) worker")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    if mode_of(settings) != "service":
        raise UserError("`lookback worker` needs a Redis: set LOOKBACK_REDIS_URL "
                        "(e.g. redis://localhost:6379/0)")
    processes = args.processes or settings.workers.processes
    threads = args.threads or settings.workers.threads
    if processes < 1 or threads < 1:
        raise UserError("--processes and --threads must be at least 1")
    from lookback.workers.config import ServiceConfig, redis_client
    from lookback.workers.owner import INSTANCE_ENV, acquire_lease, my_queues, new_instance_token
    from lookback.workers.processes import groups, supervise

    environ = dict(os.environ)
    environ["LOOKBACK_HOME"] = str(settings.home)
    environ["LOOKBACK_REDIS_URL"] = settings.redis_url or ""
    if getattr(args, "config", None):
        environ["LOOKBACK_CONFIG"] = args.config
    print(f"starting {processes} index worker process(es) x {threads} threads"
          f"{'' if args.no_background else ' and 1 background worker'}", file=sys.stderr,
          flush=True)
    config = ServiceConfig.from_settings(settings)
    token = environ[INSTANCE_ENV] = new_instance_token()
    client = redis_client(config)
    try:
        holder = acquire_lease(config, client, token)
    finally:
        client.close()
    if holder is not None:  # two live workers under one name would split projects
        raise UserError(
            f"another live worker runs as host {config.host!r} with data directory "
            f"{config.home} ({holder}): two workers under one name would split its projects "
            "across two disks. Give this one its own name (workers.host, e.g. "
            "LOOKBACK_WORKERS__HOST=$(hostname)), or stop the other one first")
    own = my_queues(config)
    return supervise(groups(processes, threads, background=not args.no_background, own=own),
                     environ)
