"""The MCP SDK side of ``lookback mcp``: the ``MCPServer`` with the three tools of
``lookback.mcp.HistoryTools``, and its stdio and streamable HTTP transports.

Imported only when ``lookback mcp`` runs (the SDK is the optional ``mcp`` extra). No
``from __future__ import annotations`` here: the SDK reads the tools' signatures
(``Annotated`` types with their JSON-schema descriptions) at registration.
"""

import json
import logging
import os
import re
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

from lookback.application.auth import check_binding
from lookback.application.errors import ApiError
from lookback.budget import connection_limit
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
from lookback.server.transport import LISTEN_BACKLOG
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
    import anyio

    app = ReaderApp(settings)
    try:
        tools = HistoryTools(app, provider=provider, default_project=project)
        authorization = stdio_authorization()
        anyio.run(_serve_stdio, build_server(tools, lambda ctx: authorization))
    finally:
        app.close()


async def _serve_stdio(server: Any) -> None:
    """``MCPServer.run("stdio")``, with an answer to every frame the SDK cannot read.

    The SDK's stdin reader hands such a frame on as an exception, which its session drops:
    the client waited for its own timeout. Here each gets a JSON-RPC error (``malformed``),
    with the request's id when it can be read."""
    import anyio
    from mcp.server.stdio import stdio_server
    from mcp.shared.message import SessionMessage

    async with stdio_server() as (read_stream, write_stream):
        frames_in, frames = anyio.create_memory_object_stream[Any](0)

        async def sort_frames() -> None:
            async with frames_in:
                async for frame in read_stream:
                    if not isinstance(frame, Exception):
                        await frames_in.send(frame)
                    elif (error := malformed(frame)) is not None:
                        log.info(json.dumps({"event": "mcp-frame", "outcome": "malformed",
                                             "code": error.error.code}))
                        await write_stream.send(SessionMessage(error))

        lowlevel = server._lowlevel_server
        async with anyio.create_task_group() as group:
            group.start_soon(sort_frames)
            await lowlevel.run(frames, write_stream, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()


#: A request id in a frame that is not JSON (a cut-off line).
_FRAME_ID = re.compile(r'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')


def malformed(error: Exception) -> Any:
    """The JSON-RPC error answering a frame the SDK could not read (its exception), or
    None for a notification (no id: JSON-RPC answers none). Not JSON: parse error
    (-32700); text with a lone surrogate escape (``\\ud800``, which JavaScript's
    ``JSON.stringify`` writes and no UTF-8 can carry): invalid params (-32602); any other
    shape: invalid request (-32600)."""
    import mcp_types as types

    details = error.errors() if hasattr(error, "errors") else []
    raw = details[0].get("input") if details else None
    message: Any = raw if isinstance(raw, dict) else None
    if isinstance(raw, str):
        try:
            message = json.loads(raw)
        except ValueError:
            message = None
    if isinstance(message, dict):
        request_id = message.get("id")
        if "id" not in message or not isinstance(request_id, (int, str)) \
                or isinstance(request_id, bool):
            return None if "id" not in message else _error(types, None, types.INVALID_REQUEST,
                                                           "Invalid request")
        if _has_lone_surrogate(message):
            return _error(types, request_id, types.INVALID_PARAMS, "Invalid params: text "
                          "holds a lone surrogate escape (\\ud800-\\udfff), not Unicode")
        return _error(types, request_id, types.INVALID_REQUEST, "Invalid request")
    found = _FRAME_ID.search(raw) if isinstance(raw, str) else None
    request_id = None if found is None else json.loads(found.group(1))
    return _error(types, request_id, types.PARSE_ERROR, "Parse error")


def _error(types: Any, request_id: int | str | None, code: int, message: str) -> Any:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id,
                              error=types.ErrorData(code=code, message=message))


def _has_lone_surrogate(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


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


#: Seconds between two log lines about connections closed or refused for room.
OVERLOAD_LOG_INTERVAL = 10.0


class ConnectionBound:
    """``lookback serve``'s bound on connections (``budget.connection_limit``: at most
    ``server.max_connections`` and a quarter of the open-file limit), for uvicorn's
    connections: admitting one beyond the limit closes the oldest connection with no
    request in progress, else refuses the new one; a connection that sends no request
    within ``server.idle_timeout_seconds`` is closed. So held or silent connections can
    neither keep a tool call out nor use up the process's descriptors. What was closed or
    refused is logged once per ``OVERLOAD_LOG_INTERVAL`` with its count."""

    def __init__(self, limit: int, idle_timeout: float) -> None:
        self.limit = limit
        self.idle_timeout = idle_timeout
        self.open: dict[Any, None] = {}  # oldest first
        self.evicted = self.refused = self.accept_errors = 0
        self._logged_at = 0.0
        self._unlogged = 0

    def admit(self, protocol: Any) -> bool:
        if len(self.open) >= self.limit:
            idle = next((other for other in self.open if not _busy(other)), None)
            if idle is None:
                self.refused += 1
                self.overloaded()
                return False
            self.open.pop(idle)
            idle.transport.close()
            self.evicted += 1
            self.overloaded()
        self.open[protocol] = None
        return True

    def closed(self, protocol: Any) -> None:
        self.open.pop(protocol, None)

    def overloaded(self) -> None:
        """Count one closed or refused connection (or failed accept); log the count at
        most once per interval."""
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at >= OVERLOAD_LOG_INTERVAL:
            log.warning(json.dumps({
                "event": "mcp-overload", "since_last": self._unlogged, "limit": self.limit,
                "open": len(self.open), "evicted": self.evicted, "refused": self.refused,
                "accept_errors": self.accept_errors}))
            self._logged_at, self._unlogged = now, 0

    def exception_handler(self, loop: Any, context: dict[str, Any]) -> None:
        """The event loop's: a failed ``accept`` (out of descriptors) is counted into the
        overload line instead of logged each time; anything else as asyncio would."""
        if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            self.accept_errors += 1
            self.overloaded()
            return
        loop.default_exception_handler(context)


def _busy(protocol: Any) -> bool:
    """Whether a connection has a request in progress (not between requests)."""
    cycle = getattr(protocol, "cycle", None)
    return cycle is not None and not cycle.response_complete


def bounded_protocol(bound: ConnectionBound) -> type:
    """uvicorn's h11 protocol, its connections counted in ``bound``."""
    import asyncio

    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(H11Protocol):
        _first_request: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if not bound.admit(self):
                transport.close()
                return
            self._first_request = self.loop.call_later(bound.idle_timeout, self._silent)

        def _silent(self) -> None:
            if self.cycle is None:  # no request began: a silent connection
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            if self._first_request is not None:
                self._first_request.cancel()
                self._first_request = None
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            bound.closed(self)
            if self._first_request is not None:
                self._first_request.cancel()
            super().connection_lost(exc)

    return BoundedH11Protocol


def run_http(settings: Settings, *, host: str, port: int, provider: str | None,
             on_listening: Callable[[str, int], None] | None = None) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until interrupted, its
    connections bounded as ``lookback serve``'s are (``ConnectionBound``)."""
    import asyncio

    app_asgi, app = http_app(settings, provider=provider)
    check_binding(host, app.grants)
    bound = ConnectionBound(connection_limit(settings.server.max_connections),
                            settings.server.idle_timeout_seconds)
    config = uvicorn.Config(app_asgi, host=host, port=port, log_level="warning",
                            access_log=False, lifespan="on", http=bounded_protocol(bound),
                            timeout_keep_alive=max(1, int(settings.server.idle_timeout_seconds)),
                            backlog=LISTEN_BACKLOG)
    server = uvicorn.Server(config)
    original = server.startup

    async def startup(sockets: Any = None) -> None:
        asyncio.get_running_loop().set_exception_handler(bound.exception_handler)
        await original(sockets=sockets)
        if on_listening is not None:
            bound_to = server.servers[0].sockets[0].getsockname() if server.servers \
                else (host, port)
            on_listening(bound_to[0], bound_to[1])

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
