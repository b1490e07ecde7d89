"""``lookback watch [DIR ...]``: tail Pi, Claude Code and Codex session folders, publish entries.

In service mode (a Redis URL is configured) events go onto the Redis streams for the
workers; otherwise they are written straight into the indexes, and the writer locks
are released after every round so ``lookback index`` or a rebuild can run meanwhile.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from lookback.application.modes import mode_of
from lookback.commands.common import add_command, load
from lookback.errors import UserError
from lookback.freshness import default_roots
from lookback.index.sink import EmbeddedSink
from lookback.ingest.watch import Watcher, WatchRound

if TYPE_CHECKING:
    from lookback.workers.sink import RedisSink


SUMMARY = "tail Pi, Claude Code and Codex session folders, index new entries"
DESCRIPTION = """Watch session folders (default: Pi's sessions folder, and Claude Code's
~/.claude/projects and Codex's ~/.codex/sessions when they exist) for new files, appended
lines and rewrites. With
LOOKBACK_REDIS_URL set the events go to Redis for `lookback worker`; a restarted watcher resumes
where Redis says it stopped."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "watch", run, SUMMARY, DESCRIPTION)
    parser.add_argument("paths", nargs="*", type=Path, help="folders or files to watch")
    parser.add_argument("--poll", type=float, metavar="SECONDS",
                        help="how often recently changed files are checked (default: the "
                             "watch.poll_ms setting, 50 ms)")
    parser.add_argument("--rescan", type=float, metavar="SECONDS",
                        help="how often all files are checked and folders walked (default: "
                             "the watch.rescan_seconds setting, 2)")
    parser.add_argument("--once", action="store_true", help="one round, then exit")
    parser.add_argument("--verbose", "-v", action="store_true",
                        help="print a line (counts only) for every round that sent events")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    poll = settings.watch.poll_ms / 1000 if args.poll is None else args.poll
    rescan = settings.watch.rescan_seconds if args.rescan is None else args.rescan
    if poll <= 0 or rescan <= 0:
        raise UserError("--poll and --rescan must be positive")
    roots = args.paths or default_roots(settings)
    missing = [str(root) for root in roots if not Path(root).expanduser().exists()]
    if missing and args.paths:
        raise UserError(f"no such folder: {', '.join(missing)}")
    roots = [Path(root).expanduser() for root in roots]
    mode = mode_of(settings)
    if mode == "service":
        from lookback.service import queue_sink

        # With tokens a session never moves to another project by watching (a token's
        # holder may rewrite its own file to name another's): `lookback index` moves it.
        sink: EmbeddedSink | RedisSink = queue_sink(settings,
                                                    keep_held=bool(settings.server.tokens))
        on_idle = None
    else:
        embedded = EmbeddedSink(settings.home, namespace=settings.namespace,
                                keep_held=bool(settings.server.tokens))
        sink, on_idle = embedded, embedded.idle  # never hold a writer lock while idle
    target = "Redis" if mode == "service" else "the local indexes"
    print(f"watching {len(roots)} folder(s), publishing to {target}; Ctrl-C stops",
          file=sys.stderr, flush=True)
    watcher = Watcher(roots, sink, poll_seconds=poll, rescan_seconds=rescan,
                      hot_seconds=settings.watch.hot_seconds, on_idle=on_idle,
                      max_line_bytes=settings.max_line_bytes, excluded=settings.excluded)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with sink:
        if args.once:
            _say(watcher.poll(), verbose=True)
            return 0
        said: set[str] = set()
        try:
            watcher.run(stop, on_round=lambda r: _say(r, args.verbose, said))
        except KeyboardInterrupt:
            pass
    print(f"stopped: {watcher.totals.events:,} events from {watcher.totals.files_changed:,} "
          "file changes", file=sys.stderr)
    return 0


def _say(result: WatchRound, verbose: bool, said: set[str] | None = None) -> None:
    """Print the round's errors (each once while it lasts) and, verbose, its counts."""
    for error in result.errors:
        if said is None or error not in said:
            print(f"lookback: error: {error}", file=sys.stderr, flush=True)
    if said is not None and result.files_changed:
        said.intersection_update(result.errors)
        said.update(result.errors)
    if verbose and result.events:
        print(f"{result.events:,} events from {result.files_changed} changed files",
              file=sys.stderr, flush=True)
