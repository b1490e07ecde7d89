"""The MCP SDK side of ``lookback mcp``: the ``MCPServer`` with the three tools of
``lookback.mcp.HistoryTools``, and its stdio and streamable HTTP transports.

Imported only when ``lookback mcp`` runs (the SDK is the optional ``mcp`` extra). No
``from __future__ import annotations`` here: the SDK reads the tools' signatures
(``Annotated`` types with their JSON-schema descriptions) at registration.
"""

import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal
from urllib.parse import parse_qs

import orjson
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from pydantic import Field

from lookback.mcp import (
    DEFAULT_LIMIT,
    DEFAULT_NEIGHBOURS,
    INSTRUCTIONS,
    MAX_LIMIT,
    MAX_NEIGHBOURS,
    READ_DESCRIPTION,
    SEARCH_DESCRIPTION,
    SERVER_NAME,
    STATUS_DESCRIPTION,
    GuardedApp,
    HistoryTools,
    ToolRefused,
)
from lookback.server.app import ReaderApp
from lookback.server.auth import check_binding
from lookback.server.errors import ApiError
from lookback.settings import Settings

log = logging.getLogger("lookback.mcp")


def build_server(tools: HistoryTools,
                 authorization_of: Callable[[Any], str | None]) -> Any:
    """An ``MCPServer`` with the three tools; ``authorization_of(context)`` gives the
    ``Authorization`` header of the call (from the HTTP request, or the stdio token)."""
    server = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS, version=_version(),
                       log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False,
                                idempotent_hint=True, open_world_hint=False)

    def answer(call: Callable[[], str]) -> str:
        started = time.perf_counter()
        try:
            text = call()
        except ToolRefused as refused:
            log.info(json.dumps({"event": "mcp-tool", "outcome": "refused"}))
            raise ToolError(str(refused)) from None
        log.info(json.dumps({"event": "mcp-tool", "outcome": "ok", "chars": len(text),
                             "ms": round((time.perf_counter() - started) * 1000, 2)}))
        return text

    session_file_field = Field(description=(
        "absolute path of the session file (names its project and session)"))
    project_field = Field(description=(
        "the project: its folder's absolute path (the session's working directory) or "
        "Lookback's project name; default: the folder this server was started in"))
    query_field = Field(description="what to look for: identifiers, phrases, words",
                        min_length=1, max_length=20_000)
    entry_id_field = Field(description="the entry's id (Source entry of a result)",
                           min_length=1, max_length=200)

    @server.tool(name="history_search", description=SEARCH_DESCRIPTION, annotations=read_only,
                 structured_output=False)
    def history_search(
        query: Annotated[str, query_field],
        ctx: Context,
        scope: Annotated[Literal["branch", "session", "project"], Field(
            description="branch: the session's current branch; session: every branch; "
                        "project: every session of the project")] = "branch",
        session_file: Annotated[str | None, session_file_field] = None,
        project: Annotated[str | None, project_field] = None,
        session_id: Annotated[str | None, Field(description=(
            "the session's id, with project"))] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_LIMIT,
                                    description="most results")] = DEFAULT_LIMIT,
    ) -> str:
        return answer(lambda: tools.search(
            authorization_of(ctx), query=query, scope=scope, session_file=session_file,
            project=project, session_id=session_id, limit=limit,
            provider=_provider_of(ctx)))

    @server.tool(name="history_read", description=READ_DESCRIPTION, annotations=read_only,
                 structured_output=False)
    def history_read(
        entry_id: Annotated[str, entry_id_field],
        ctx: Context,
        session_id: Annotated[str | None, Field(description=(
            "the entry's session id (from the result's envelope)"))] = None,
        session_file: Annotated[str | None, session_file_field] = None,
        project: Annotated[str | None, project_field] = None,
        before: Annotated[int, Field(ge=0, le=MAX_NEIGHBOURS, description=(
            "entries before it on its branch"))] = DEFAULT_NEIGHBOURS,
        after: Annotated[int, Field(ge=0, le=MAX_NEIGHBOURS, description=(
            "entries after it"))] = DEFAULT_NEIGHBOURS,
    ) -> str:
        return answer(lambda: tools.read(
            authorization_of(ctx), entry_id=entry_id, session_id=session_id,
            session_file=session_file, project=project, before=before, after=after,
            provider=_provider_of(ctx)))

    @server.tool(name="lookback_status", description=STATUS_DESCRIPTION,
                 annotations=read_only, structured_output=False)
    def lookback_status(ctx: Context) -> str:
        return answer(lambda: tools.status(authorization_of(ctx)))

    return server


def _request_of(ctx: Any) -> Any:
    try:
        return ctx.request_context.request
    except (AttributeError, ValueError):
        return None


def _provider_of(ctx: Any) -> str | None:
    """The provider an HTTP client's URL names (``/mcp?provider=anthropic``), else None
    (the server's own)."""
    request = _request_of(ctx)
    query = getattr(getattr(request, "url", None), "query", "") or ""
    values = parse_qs(query).get("provider") or []
    return values[0] if values and values[0] else None


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("pi-lookback")
    except Exception:
        return "0"


# ---------------------------------------------------------------------------------------------
# Transports


def stdio_authorization() -> str | None:
    token = os.environ.get("LOOKBACK_TOKEN", "").strip()
    return f"Bearer {token}" if token else None


def run_stdio(settings: Settings, *, provider: str | None, project: str | None) -> None:
    """Serve the tools on stdin/stdout until the client closes them."""
    app = ReaderApp(settings)
    try:
        tools = HistoryTools(app, provider=provider, default_project=project)
        authorization = stdio_authorization()
        build_server(tools, lambda ctx: authorization).run("stdio")
    finally:
        app.close()


def http_app(settings: Settings, *, provider: str | None = None,
             reader_app: ReaderApp | None = None) -> tuple[Any, ReaderApp]:
    """(the guarded ASGI app serving ``/mcp``, the ReaderApp answering it)."""
    guarded, app, _ = _http_parts(settings, provider, reader_app)
    return guarded, app


def _http_parts(settings: Settings, provider: str | None,
                reader_app: ReaderApp | None) -> tuple[Any, ReaderApp, MCPServer]:
    app = reader_app or ReaderApp(settings)
    tools = HistoryTools(app, provider=provider)

    def authorization_of(ctx: Any) -> str | None:
        request = _request_of(ctx)
        headers = getattr(request, "headers", None)
        return headers.get("authorization") if headers is not None else None

    server = build_server(tools, authorization_of)
    inner = server.streamable_http_app(
        streamable_http_path="/mcp", stateless_http=True, json_response=True,
        max_request_body_size=settings.server.max_request_bytes,
        # The reader's guard (wrapped around this app) checks Host and Origin instead.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return GuardedApp(inner, app), app, server


def run_http(settings: Settings, *, host: str, port: int, provider: str | None,
             on_listening: Callable[[str, int], None] | None = None) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until interrupted."""
    app_asgi, app = http_app(settings, provider=provider)
    check_binding(host, app.grants)
    config = uvicorn.Config(app_asgi, host=host, port=port, log_level="warning",
                            access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    if on_listening is not None:
        original = server.startup

        async def startup(sockets: Any = None) -> None:
            await original(sockets=sockets)
            bound = server.servers[0].sockets[0].getsockname() if server.servers else (host, port)
            on_listening(bound[0], bound[1])

        server.startup = startup  # type: ignore[method-assign]
    # uvicorn stops on SIGTERM, then raises the signal again under the handler it found:
    # this one, so the process ends with status 0 after closing the app (as `lookback serve`).
    signal.signal(signal.SIGTERM, _exit_quietly)
    try:
        server.run()
    finally:
        app.close()


def _exit_quietly(signum: int, frame: Any) -> None:
    raise SystemExit(0)


class MountedMCP:
    """The MCP endpoint inside ``lookback serve``: the same guarded ASGI app, answered on
    an event loop of its own thread, for requests the reader's HTTP transport hands over
    (``ReaderHTTPServer.mount``). The transport has already applied the guard and read
    the body; the token and the grants are checked as for ``lookback mcp --http``.

    The endpoint is stateless and answers JSON, so every request is one body in, one
    body out.
    """

    def __init__(self, reader_app: ReaderApp, provider: str | None = None) -> None:
        import asyncio

        self.app, _, self.server = _http_parts(reader_app.settings, provider, reader_app)
        self.timeout = reader_app.timeout
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lookback-mcp", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout=30):
            raise RuntimeError("the MCP endpoint's event loop did not start")

    def _run(self) -> None:
        import asyncio

        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        import asyncio

        self._stop = asyncio.Event()
        async with self.server.session_manager.run():  # what the app's lifespan would run
            self._ready.set()
            await self._stop.wait()

    def __call__(self, method: str, target: str, headers: dict[str, str], body: bytes,
                 deadline: float | None) -> tuple[int, bytes, dict[str, Any]]:
        import asyncio

        timeout = self.timeout if deadline is None else max(0.1, deadline - time.monotonic())
        future = asyncio.run_coroutine_threadsafe(self._call(method, target, headers, body),
                                                  self.loop)
        try:
            status, data = future.result(timeout=timeout)
        except TimeoutError:
            future.cancel()
            return 503, orjson_error(503, "timeout", "the request ran over the server's "
                                     "time limit"), {"error": "timeout"}
        return status, data, {"mcp": True}

    async def _call(self, method: str, target: str, headers: dict[str, str],
                    body: bytes) -> tuple[int, bytes]:
        path, _, query = target.partition("?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
                 "query_string": query.encode("latin-1"), "root_path": "",
                 "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                             for k, v in headers.items()],
                 "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0)}
        sent = False
        status, chunks = 500, []

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            await self._stop.wait()  # no more body: wait as a disconnect would
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        return status, b"".join(chunks)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=5)


def orjson_error(status: int, code: str, message: str) -> bytes:
    return orjson.dumps(ApiError(status, code, message).payload())


def mount_in(server: Any, provider: str | None = None) -> MountedMCP:
    """Serve ``/mcp`` from a ``lookback serve`` server (``ReaderHTTPServer``)."""
    mounted = MountedMCP(server.app, provider)
    server.mount("/mcp", mounted)
    return mounted


__all__ = ["MountedMCP", "build_server", "http_app", "mount_in", "run_http", "run_stdio"]
