"""``lookback search TEXT``: explicit history search with a chosen scope."""

from __future__ import annotations

import argparse
import json
import os
import sys

from lookback.api import RequestError, SearchAnswer, search_answer
from lookback.commands.common import add_command, load, print_answer

SUMMARY = "search a session's history (branch, session or project scope)"
DESCRIPTION = """Search earlier entries with the same extraction and ranking as automatic
retrieval; the scope is explicit (default: the current branch of the session)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "search", run, SUMMARY, DESCRIPTION)
    parser.add_argument("text", help="what to look for")
    parser.add_argument("--session-file",
                        help="a Pi, Claude Code or Codex session file (names project and session)")
    parser.add_argument("--project", help="project folder name or cwd (with --session-id; "
                        "alone: its most recently active session)")
    parser.add_argument("--session-id", help="session id (with --project)")
    parser.add_argument("--scope", choices=("branch", "session", "project"), default="branch")
    parser.add_argument("--leaf-id", help="the branch's leaf (default: the session's last entry)")
    parser.add_argument("--max-results", type=int, default=20)
    parser.add_argument("--provider", help="the model provider the results are for (the "
                        "privacy policy decides what it may see; default: an unnamed remote one)")
    parser.add_argument("--json", action="store_true", help="print JSON (default off a terminal)")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    request = {"text": args.text, "scope": args.scope, "max_results": args.max_results,
               "leaf_id": args.leaf_id, "project": args.project, "session_id": args.session_id,
               "provider": args.provider,
               "session_file": os.path.abspath(args.session_file) if args.session_file else None}
    try:
        response = search_answer(request, settings=settings)
    except RequestError as error:
        print(json.dumps(error.to_dict()))
        return 2
    if args.json or not sys.stdout.isatty():
        print_answer(response, pretty=True)
        return 0
    _table(response)
    return 0


def _table(response: SearchAnswer) -> None:
    if response.status != "ok":
        print(f"status: {response.status}")
        return
    print(f"{len(response.results)} results ({response.scope} scope)")
    for result in response.results:
        snippet = " ".join(result.excerpt.split())[:100]
        print(f"{result.score:>7.2f}  {result.tier:<10} {result.role or '-':<10} "
              f"{result.entry_id:<10} {snippet}")
    if response.excluded:
        print(f"{len(response.excluded)} withheld by the privacy policy")
