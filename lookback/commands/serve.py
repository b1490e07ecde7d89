"""``lookback serve``: run the reader as an HTTP JSON service (see ``lookback.server``)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys

from lookback.commands.common import add_command, load
from lookback.errors import UserError
from lookback.settings import Settings

SUMMARY = "serve retrieval over HTTP for agents (the Pi extension)"
DESCRIPTION = """HTTP JSON API: POST /v1/retrieve, /v1/search, /v1/source, /v1/plan, /v1/nudge;
GET /v1/health, /v1/manifest. Listens on your private Unix socket (`lookback serve --address`
says where); TCP (--host/--port) needs server.tokens."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "serve", run, SUMMARY, DESCRIPTION)
    parser.add_argument("--host", help="serve TCP on this address instead of the Unix socket "
                        "(needs server.tokens; default: server.host, none)")
    parser.add_argument("--port", type=int, help="serve TCP on this port (needs server.tokens; "
                        "default: server.port, 8765, with --host or server.host)")
    parser.add_argument("--quiet", action="store_true", help="no per-request log lines")
    parser.add_argument("--mcp", action="store_true",
                        help="also serve the MCP tools at /mcp (streamable HTTP, the same "
                             "tokens and guards; needs the MCP SDK, the mcp extra: docs/mcp.md)")
    parser.add_argument("--mcp-provider", help="with --mcp: the provider MCP clients' results "
                        "are for (default: an unnamed remote provider; a client may name one "
                        "in its URL: /mcp?provider=anthropic)")
    parser.add_argument("--page", action="store_true",
                        help="also serve the read-only web page on 127.0.0.1 and print its "
                             "one-time login URL (docs/page.md)")
    parser.add_argument("--page-only", action="store_true",
                        help="serve only the page, beside a reader that already runs (one "
                             "the Pi extension or a hook started): read-only, no socket")
    parser.add_argument("--page-port", type=int, default=0,
                        help="with --page or --page-only: its port (default: a free one)")
    background = parser.add_mutually_exclusive_group()
    background.add_argument("--ensure", action="store_true",
                            help="return at once; start the reader in the background (detached, "
                                 "logged to <home>/logs/serve.log) unless one answers or is "
                                 "starting: what the Pi extension and the hooks run")
    background.add_argument("--stop", action="store_true",
                            help="stop the reader --ensure started")
    background.add_argument("--address", action="store_true",
                            help="print, as JSON, where this data home's reader listens "
                                 "(address, socket) and the identity its /v1/health names")
    background.add_argument("--page-url", action="store_true",
                            help="print a new login URL of the page a `lookback serve "
                                 "--page` of this data home serves")
    parser.add_argument("--started-by", default="user",
                        help="with --ensure: who asks (recorded for lookback doctor)")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    if args.page_url:
        return _page_url(settings)
    if args.page_only:
        return _page_only(settings, args)
    if args.ensure or args.stop or args.address:
        if args.host or args.port is not None:
            raise UserError("--ensure, --stop and --address are about the reader on your "
                            "Unix socket: leave out --host and --port")
        return _background(settings, args)
    from lookback.server import ReaderHTTPServer, make_server, serve_forever
    from lookback.server.transport import ReaderListens

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(message)s")
    if args.mcp:
        from lookback.mcp import require_sdk

        require_sdk()  # before binding: a missing extra is a clear error, not a half start
    try:
        server = make_server(settings, args.host, args.port)
    except ReaderListens as error:
        if not args.page:
            raise
        port = f" --page-port {args.page_port}" if args.page_port else ""
        raise UserError(f"{error}; to serve the page beside it: `lookback serve --page-only"
                        f"{port}`", 1) from None
    if args.mcp:
        from lookback.mcp_server import mount_in

        mount_in(server, args.mcp_provider)
    where: dict[str, object] = {"address": server.address}
    if not server.unix:
        where.update(host=server.server_address[0], port=server.server_address[1])
    beside: tuple[ReaderHTTPServer, ...] = ()
    if args.page:
        from lookback.server.page import PageHTTPServer

        try:
            page = PageHTTPServer(server.app, args.page_port)
        except OSError as error:
            server.server_close()
            server.app.close()
            raise UserError(f"cannot serve the page on port {args.page_port}: "
                            f"{error.strerror or error}", 1) from None
        beside = (page,)
        where["page"] = page.site.url_base  # the address only: the token is not logged
        print(f"Lookback page: {page.url}", flush=True)
    logging.getLogger("lookback.server").warning(json.dumps(
        {"event": "listening", **where, "tokens": server.app.grants.required,
         "mcp": "/mcp" in server.mounts}))
    serve_forever(server, beside)
    return 0


def _page_only(settings: Settings, args: argparse.Namespace) -> int:
    """The page alone, for a data home whose reader already runs: this process only reads
    (``freshness.enabled`` off: the running reader keeps the indexes fresh)."""
    import msgspec

    from lookback.server import ReaderApp, warm_up
    from lookback.server.page import PageHTTPServer

    logging.basicConfig(stream=sys.stderr, level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(message)s")
    reading = msgspec.structs.replace(settings, freshness=msgspec.structs.replace(
        settings.freshness, enabled=False))
    app = ReaderApp(reading)
    try:
        page = PageHTTPServer(app, args.page_port)
    except OSError as error:
        app.close()
        raise UserError(f"cannot serve the page on port {args.page_port}: "
                        f"{error.strerror or error}", 1) from None
    signal.signal(signal.SIGTERM, _exit)  # before the URL: whoever reads it may stop us
    try:
        print(f"Lookback page: {page.url}", flush=True)
        logging.getLogger("lookback.server").warning(json.dumps(
            {"event": "listening", "page": page.site.url_base}))
        warm_up()
        page.serve_forever()
    finally:
        page.server_close()
        app.close()
    return 0


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)  # SIGTERM: unwind through the ``finally`` that closes the page


def _page_url(settings: Settings) -> int:
    from lookback.server.page import page_url

    url = page_url(settings.home)
    if url is None:
        raise UserError("no page is served for this data home: start `lookback serve "
                        "--page` (docs/page.md)", 1)
    print(url)
    return 0


def _background(settings: Settings, args: argparse.Namespace) -> int:
    from lookback import background

    if args.address:
        print(json.dumps(background.where(settings)))
        return 0
    if args.ensure:
        state = background.ensure(settings, args.started_by)
        print(json.dumps({"reader": state.state, **background.where(settings, state.address),
                          "log": str(background.log_path(settings)),
                          **({"reason": state.reason} if state.reason else {})}))
        return 1 if state.state in ("foreign", "not-answering") else 0
    stopped = background.stop(settings)
    if stopped is None:
        print("no background reader runs", file=sys.stderr)
        return 1
    print(json.dumps({"stopped": stopped.pid, "started_by": stopped.started_by}))
    return 0
