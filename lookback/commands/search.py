"""``lookback search TEXT``: explicit history search with a chosen scope."""

from __future__ import annotations

import argparse

from lookback.api import RequestError, SearchAnswer, search_answer
from lookback.commands.common import (
    add_command,
    add_json,
    add_session_flags,
    flag_error,
    load,
    print_answer,
    session_names,
    status_error,
)
from lookback.query.contract import DEFAULT_SEARCH_RESULTS, MAX_SEARCH_RESULTS

SUMMARY = "search a session's history (branch, session or project scope)"
DESCRIPTION = """Search earlier entries with the same extraction and ranking as automatic
retrieval; the scope is explicit (default: the current branch of the session named by
--session-file or --session-id, else every session of the project). Without --session-file or
--project: the project of the current folder (or of its nearest parent folder that is
indexed). `lookback show ENTRY` reads a result whole."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "search", run, SUMMARY, DESCRIPTION)
    parser.add_argument("text", help="what to look for")
    add_session_flags(parser)
    parser.add_argument("--scope", choices=("branch", "session", "project"),
                        help="the session's current branch (default when a session is named), "
                             "the whole session, or every session of the project (default "
                             "otherwise)")
    parser.add_argument("--leaf-id", metavar="ID",
                        help="the branch's leaf (default: the session's last entry)")
    add_limit(parser, DEFAULT_SEARCH_RESULTS, MAX_SEARCH_RESULTS, "results")
    add_json(parser, "POST /v1/search's answer")


def add_limit(parser: argparse.ArgumentParser, default: int, most: int, what: str) -> None:
    """``--limit N`` (1 to ``most``), and ``--max-results``, its old name, kept hidden."""

    def bounded(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not 1 <= value <= most:
            raise argparse.ArgumentTypeError(f"must be between 1 and {most}")
        return value

    parser.add_argument("--limit", type=bounded, default=default, metavar="N",
                        help=f"at most N {what} (1-{most}, default {default})")
    parser.add_argument("--max-results", type=bounded, dest="limit", default=argparse.SUPPRESS,
                        help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    names = session_names(args, settings)
    # No session named: "the most recently active" is a guess, and its branch alone would
    # say "0 results" for what the project's other sessions hold.
    named = args.session_file or args.session_id or args.leaf_id
    scope = args.scope or ("branch" if named else "project")
    request = {"text": args.text, "scope": scope, "max_results": args.limit,
               "leaf_id": args.leaf_id, "provider": args.provider, **names}
    try:
        response = search_answer(request, settings=settings)
    except RequestError as error:
        raise flag_error(error) from None
    problem = status_error(response.status, names, response.warnings or None)
    if problem is not None:
        raise problem
    if args.json:
        print_answer(response, pretty=True)
    else:
        show = _show_flags(args)
        if response.scope == "project" and args.session_file:
            show += " --session-id SESSION (the result's)"
        _table(response, show)
    return 0


def _show_flags(args: argparse.Namespace) -> str:
    """The flags that make ``lookback show`` read the session or project searched."""
    import shlex

    if args.session_file:
        return f" --session-file {shlex.quote(args.session_file)}"
    return "".join(f" {flag} {shlex.quote(value)}" for flag, value in
                   (("--project", args.project), ("--session-id", args.session_id)) if value)


def _table(response: SearchAnswer, show_flags: str) -> None:
    if response.status == "no-query":
        print("no results: the text has no words to search for (only common words)")
        return
    print(f"{len(response.results)} results ({response.scope} scope)")
    for result in response.results:
        snippet = " ".join(result.excerpt.split())[:90]
        print(f"{result.score:>7.2f}  {result.tier:<10} {result.role or '-':<10} "
              f"{result.entry_id:<10} {result.session_id[:8]}  {snippet}")
    if response.excluded:
        print(f"{len(response.excluded)} withheld by the privacy policy")
    if response.results:
        print(f"read one whole: lookback show ENTRY{show_flags}")
