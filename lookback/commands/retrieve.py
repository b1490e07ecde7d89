"""``lookback retrieve``: the retrieval contract on stdin/stdout.

Reads one request JSON object on stdin, writes the response JSON on stdout. A bad
request prints an error object and exits 2; the reader never writes anything.
"""

from __future__ import annotations

import argparse
import json
import sys

from lookback.api import RequestError, retrieve_answer
from lookback.commands.common import add_command, load, print_answer
from lookback.query.contract.request import check_depth

MAX_STDIN_BYTES = 64 * 1024 * 1024


SUMMARY = "answer one retrieval request (JSON on stdin, JSON on stdout)"
DESCRIPTION = """Read a retrieval request (see docs/design.md, 'Retrieval contract') as JSON on
stdin and print the response as JSON: always JSON, since the request is (--json is accepted
and changes nothing). A bad request prints an error object and exits 2."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "retrieve", run, SUMMARY, DESCRIPTION)
    parser.add_argument("--json", action="store_true", help="the output is JSON anyway")
    parser.add_argument("--pretty", action="store_true",
                        help="indent the JSON (default: one line, as POST /v1/retrieve sends)")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    raw = sys.stdin.buffer.read(MAX_STDIN_BYTES + 1)
    try:
        if len(raw) > MAX_STDIN_BYTES:
            raise RequestError("the request is larger than 64 MiB")
        try:
            request = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise RequestError("the request is not valid JSON") from None
        except RecursionError:
            raise RequestError("the request is nested too deeply") from None
        check_depth(request)
        response = retrieve_answer(request, settings=settings)
    except RequestError as error:
        print(json.dumps(error.to_dict()))
        return 2
    print_answer(response, pretty=args.pretty)
    return 0
