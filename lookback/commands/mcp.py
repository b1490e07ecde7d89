"""``lookback mcp``: the history tools for MCP clients (see ``lookback.mcp``)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from lookback.commands.common import add_command, load

#: Where ``lookback mcp --http`` listens by default: beside ``lookback serve``'s port.
DEFAULT_HTTP_PORT_OFFSET = 1


SUMMARY = "MCP server: history_search, history_read, lookback_status"
DESCRIPTION = """Serve Lookback's history tools to MCP clients (Claude Code, Pi, Codex), on
stdio (the client starts it) or streamable HTTP at /mcp behind the reader's tokens and guards.
Needs the MCP SDK (the mcp extra; lookback mcp names the command that installs it)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "mcp", run, SUMMARY, DESCRIPTION)
    parser.add_argument("--http", action="store_true",
                        help="serve streamable HTTP instead of stdio")
    parser.add_argument("--host", help="with --http: address (default: server.host, else "
                        "127.0.0.1); TCP needs server.tokens")
    parser.add_argument("--port", type=int,
                        help="with --http: port (default: server.port + 1, 8766)")
    parser.add_argument("--provider", help="the model provider this client's results are "
                        "for (the privacy policy decides what it may see; default: an "
                        "unnamed remote provider). HTTP clients may also name it in the "
                        "URL: /mcp?provider=anthropic")
    parser.add_argument("--project", help="stdio: the project a call without a session "
                        "means (default: the current folder)")
    parser.add_argument("--quiet", action="store_true", help="no per-call log lines")


def run(args: argparse.Namespace) -> int:
    from lookback.mcp import require_sdk

    require_sdk()
    from lookback import mcp_server as mcp

    settings = load(args)
    # stdout is the protocol on stdio: every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(message)s")
    if not args.http:
        mcp.run_stdio(settings, provider=args.provider, project=args.project or os.getcwd())
        return 0
    from lookback.hook_client import http_url
    from lookback.server.transport import DEFAULT_TCP_HOST

    host = args.host or settings.server.host or DEFAULT_TCP_HOST
    port = args.port if args.port is not None else settings.server.port + DEFAULT_HTTP_PORT_OFFSET

    def listening(bound_host: str, bound_port: int) -> None:
        logging.getLogger("lookback.mcp").warning(json.dumps(
            {"event": "listening", "url": f"{http_url(bound_host, bound_port)}/mcp"}))

    mcp.run_http(settings, host=host, port=port, provider=args.provider, on_listening=listening)
    return 0
