"""HTTP/1.1 on the wire: h11 parses, a thread per connection runs it.

The reader listens on this user's Unix socket (``lookback.local_reader``: a 0700
directory, a socket named after the data home) and answers only connections whose peer
runs as the same uid; or, on a team host with ``server.tokens``, on TCP.

h11 owns the request grammar (request line and header syntax, Content-Length and
chunked bodies, ``Expect: 100-continue``, pipelined requests); this module reads the
socket, bounds what a client may send (head size, header count, body size), hands the
request to ``ReaderApp.handle`` and writes each answer with one ``sendall``. One JSON
log line per answered request, with counts and timings only.

Connections are bounded (``Connections``): at most ``server.max_connections`` (and a
quarter of the open-file limit) are open; a new one beyond that closes the connection
that has waited longest for a request's first byte, so a flood of connections that
send nothing cannot keep a real request out, nor exhaust the process's descriptors.
A connection waits ``server.idle_timeout_seconds`` for a request's first byte.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import socketserver
import stat
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import h11

from lookback import hook_client, local_reader
from lookback.application.auth import Grants, check_binding
from lookback.application.errors import ApiError
from lookback.budget import connection_limit
from lookback.errors import UserError, out_of_files
from lookback.server.app import ReaderApp, encode
from lookback.server.guard import Guard
from lookback.server.routing import FORWARDED_HEADER, public_url
from lookback.settings import Settings

log = logging.getLogger("lookback.server")

#: Bounds on a request head: its size in bytes, and the number of header lines.
MAX_HEAD_BYTES = 65536
MAX_HEADERS = 100
#: Bytes asked of the socket per read.
RECV_BYTES = 65536
#: After refusing a request, read and drop at most this much of what the client still
#: sends, for at most LINGER_SECONDS, before closing (see ``_refuse``).
LINGER_BYTES = 1 << 20
LINGER_SECONDS = 2.0
LISTEN_BACKLOG = 1024


class Connections:
    """The open connections, bounded: admitting one beyond ``limit`` closes the one that
    has waited longest for a request's first byte (shut down, so its thread's ``recv``
    returns at once); when none is waiting, the new one is refused."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._open = 0
        self._idle: dict[socket.socket, None] = {}  # longest-waiting first
        self._evicted: set[socket.socket] = set()  # shut down, not closed yet
        self.evicted = 0
        self.refused = 0

    def admit(self, connection: socket.socket) -> bool:
        """Count ``connection`` in; False (refused) when no room can be made."""
        with self._lock:
            if self._open - len(self._evicted) >= self.limit and not self._evict_one():
                self.refused += 1
                return False
            self._open += 1
            return True

    def make_room(self) -> bool:
        """Close the longest-idle connection (the process ran out of descriptors)."""
        with self._lock:
            return self._evict_one()

    def _evict_one(self) -> bool:
        if not self._idle:
            return False
        oldest = next(iter(self._idle))
        del self._idle[oldest]
        self._evicted.add(oldest)
        self.evicted += 1
        try:
            oldest.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the client left already
        return True

    def waiting(self, connection: socket.socket) -> None:
        """``connection`` waits for a request's first byte: it may be closed for room."""
        with self._lock:
            if connection not in self._evicted:
                self._idle[connection] = None

    def working(self, connection: socket.socket) -> bool:
        """``connection`` has bytes of a request; False when it was closed meanwhile."""
        with self._lock:
            self._idle.pop(connection, None)
            return connection not in self._evicted

    def closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._idle.pop(connection, None)
            self._evicted.discard(connection)
            self._open -= 1

    def close_idle(self) -> None:
        """Close every waiting connection (the server is stopping)."""
        with self._lock:
            while self._evict_one():
                pass


class ReaderHTTPServer(socketserver.ThreadingTCPServer):
    """The reader's listener: a ``(host, port)`` address is TCP, a ``str`` the path of a
    Unix socket (its directory checked and made private, a stale socket replaced, every
    peer of another uid refused)."""

    daemon_threads = True
    allow_reuse_address = True
    #: Listen backlog: a burst of connections (agents, a test run) waits in the kernel's
    #: queue instead of being dropped and retried a second later (the default is 5).
    request_queue_size = LISTEN_BACKLOG
    #: Whether requests no mount takes reach the reader's API (the page's listener: no).
    api = True

    def __init__(self, address: tuple[str, int] | str, app: ReaderApp) -> None:
        if isinstance(address, str):
            self.address_family = socket.AF_UNIX
        elif ":" in address[0]:
            self.address_family = socket.AF_INET6
        #: Connections refused because their peer runs as another uid (Unix socket).
        self.refused_peers = 0
        self._socket_inode: int | None = None
        self.app = app
        self.max_request_bytes = app.settings.server.max_request_bytes
        self.idle_timeout = app.settings.server.idle_timeout_seconds
        self.guard = Guard(app.settings.server.allowed_hosts, check_host=not app.grants.required)
        #: Other apps served at a path (``lookback serve --mcp`` mounts /mcp): each takes
        #: (method, target, headers, body, deadline), returns (status, body bytes, log
        #: fields), and is reached only past the guard, as every endpoint.
        self.mounts: dict[str, Mount] = {}
        self.connections = Connections(connection_limit(app.settings.server.max_connections))
        super().__init__(address, _Handler)  # type: ignore[arg-type]  # AF_UNIX: a path

    @property
    def unix(self) -> bool:
        return self.address_family == socket.AF_UNIX

    def server_bind(self) -> None:
        if not self.unix:
            super().server_bind()
            return
        path = str(self.server_address)
        local_reader.check_dir(os.path.dirname(path), create=True)
        _clear_stale_socket(path)
        self.socket.bind(path)
        os.chmod(path, 0o600)  # the directory already keeps others out; this too
        self._socket_inode = os.lstat(path).st_ino
        try:  # so that clients whose environment gives another directory find it too
            local_reader.record_socket(self.app.settings.home, path)
        except OSError as error:
            log.warning(json.dumps({"event": "socket-not-recorded",
                                    "error": error.strerror or type(error).__name__}))

    def verify_request(self, request: Any, client_address: Any) -> bool:
        """A Unix socket's peer must run as this reader's uid: anyone else learns nothing,
        not even an HTTP status."""
        if not self.unix:
            return True
        try:
            peer = local_reader.peer_uid(request)
        except OSError:
            peer = None
        if peer == os.getuid():
            return True
        self.refused_peers += 1
        log.warning(json.dumps({"event": "refused-peer", "uid": peer}))
        return False

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as error:
            if out_of_files(error):
                # Out of descriptors: free one for the next accept; without an idle
                # connection to close, pause instead of spinning on the listener.
                if not self.connections.make_room():
                    time.sleep(0.05)
            raise

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.connections.admit(request):
            self.shutdown_request(request, counted=False)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any, counted: bool = True) -> None:
        if counted:
            self.connections.closed(request)
        super().shutdown_request(request)

    def server_close(self) -> None:
        self.connections.close_idle()  # their threads end now, not at the idle timeout
        super().server_close()
        if self._socket_inode is not None:
            path = str(self.server_address)
            try:  # only our own socket: a newer reader may have replaced it
                if os.lstat(path).st_ino == self._socket_inode:
                    os.unlink(path)
                    local_reader.forget_socket(self.app.settings.home, path)
            except OSError:
                pass
            self._socket_inode = None

    @property
    def address(self) -> str:
        """Where clients reach it: ``unix:/path`` or ``http://host:port``."""
        if self.unix:
            return local_reader.UNIX_PREFIX + str(self.server_address)
        return hook_client.http_url(str(self.server_address[0]), self.server_address[1])

    def mount(self, path: str, handler: Mount) -> None:
        self.mounts[path] = handler


#: A mount answers (status, body, log fields), or with a fourth item, its own headers
#: (``lookback.server.page``: HTML, cookies, a content security policy).
Mount = Callable[[str, str, dict[str, str], bytes, float | None], tuple[Any, ...]]


class _Request:
    """One parsed request: what the app needs and what the log line reports."""

    __slots__ = ("method", "target", "headers", "keep_alive", "body", "started")

    def __init__(self, event: h11.Request, started: float) -> None:
        self.method = event.method.decode("ascii", "replace")
        self.target = event.target.decode("latin-1")
        self.headers = {name.decode("latin-1"): value.decode("latin-1")
                        for name, value in event.headers}
        tokens = {t.strip() for t in self.headers.get("connection", "").lower().split(",")}
        self.keep_alive = self.method in ("GET", "POST", "HEAD") and (
            "close" not in tokens if event.http_version == b"1.1" else "keep-alive" in tokens)
        self.body = b""
        self.started = started


class _Handler(socketserver.BaseRequestHandler):
    """One connection: read a request with h11, answer it, repeat while it keeps alive.

    h11 parses every request (a fresh state machine per request, fed the bytes the
    client sent beyond the previous one). Answers are written here: their head is a
    fixed set of headers Lookback chooses, and building it directly costs a third of
    what h11's writer does per answer — the service's overhead budget is 1 ms.
    """

    server: ReaderHTTPServer

    def setup(self) -> None:
        if not self.server.unix:
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = self.server.app.timeout
        self.connection = _connection()
        #: When the request being read must be answered by (monotonic seconds): set at
        #: its first byte, it bounds head, body and the engine call together, so a
        #: client sending a byte every few seconds cannot hold a connection.
        self.deadline: float | None = None

    def handle(self) -> None:
        try:
            while self._serve_one():
                self._next_cycle()
        except (TimeoutError, OSError):
            pass  # an idle connection timed out, or the client left

    def _serve_one(self) -> bool:
        """Answer one request; False when the connection should close."""
        self.deadline = None if not self.connection.trailing_data[0] else \
            time.monotonic() + self.timeout  # a pipelined request has already begun
        try:
            request = self._read_request()
        except h11.RemoteProtocolError:
            return self._refuse(None, ApiError(400, "invalid-request", "malformed request"))
        except ApiError as error:
            return self._refuse(None, error)
        if request is None:
            return False
        refusal = self.server.guard.refusal(request.method, request.headers)
        if refusal is not None:
            return self._refuse(request, refusal)
        try:
            request.body = self._read_body(request)
        except ApiError as error:
            return self._refuse(request, error)
        except h11.RemoteProtocolError:
            return self._refuse(request, ApiError(400, "invalid-request", "malformed body"))
        # HEAD is GET without the body.
        method = "GET" if request.method == "HEAD" else request.method
        mounted = self.server.mounts.get(urlsplit(request.target).path) \
            if self.server.mounts else None
        if mounted is not None:
            status, payload, fields, *head = mounted(method, request.target, request.headers,
                                                     request.body, self.deadline)
            self._answer(request, status, payload, fields, close=not request.keep_alive,
                         headers=head[0] if head else None)
            return request.keep_alive
        if not self.server.api:  # a listener for its mounts only (the page's)
            return self._refuse(request, ApiError(404, "not-found", "no such page"))
        status, payload, fields = self.server.app.handle(
            method, request.target, request.headers.get("authorization"), request.body,
            deadline=self.deadline, forwarded=FORWARDED_HEADER in request.headers)
        self._answer(request, status, payload, fields, close=not request.keep_alive)
        return request.keep_alive

    def _read_request(self) -> _Request | None:
        """The next request's head, or None when the client closed between requests."""
        event = self._next_event()
        if isinstance(event, h11.ConnectionClosed):
            return None
        request = _Request(event, time.perf_counter())
        if len(event.headers) > MAX_HEADERS:
            raise ApiError(400, "invalid-request", "too many headers")
        return request

    def _read_body(self, request: _Request) -> bytes:
        """The whole body, refused with 413 before it is read when it is over the limit."""
        limit = self.server.max_request_bytes
        length = request.headers.get("content-length")
        if length is not None and int(length) > limit:
            raise _too_large(limit)
        if self.connection.they_are_waiting_for_100_continue:
            self.request.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        chunks, size = [], 0
        while not isinstance(event := self._next_event(), h11.EndOfMessage):
            size += len(event.data)
            if size > limit:  # a chunked body has no length up front
                raise _too_large(limit)
            chunks.append(event.data)
        return b"".join(chunks)

    def _next_cycle(self) -> None:
        """A fresh h11 state machine for the next request on this connection, holding the
        bytes the client already sent beyond the last one."""
        data, closed = self.connection.trailing_data
        self.connection = _connection()
        self._receive(data)
        if closed:
            self.connection.receive_data(b"")

    def _next_event(self) -> Any:
        while (event := self.connection.next_event()) is h11.NEED_DATA:
            data = self._recv()
            if not data:
                self.connection.receive_data(b"")  # the client closed its side
            self._receive(data)
        return event

    def _recv(self) -> bytes:
        """The next bytes from the client, within the request's deadline (before a
        request starts: within the idle timeout, and the connection may be closed to
        make room for another)."""
        if self.deadline is None:
            connections = self.server.connections
            self.request.settimeout(self.server.idle_timeout)
            connections.waiting(self.request)
            try:
                data: bytes = self.request.recv(RECV_BYTES)
            finally:
                kept = connections.working(self.request)
            if not kept:
                return b""  # closed for room: as if the client had left
            self.deadline = time.monotonic() + self.timeout
            return data
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request ran over its deadline")
        self.request.settimeout(remaining)
        received: bytes = self.request.recv(RECV_BYTES)
        return received

    def _receive(self, data: bytes) -> None:
        if self.connection.their_state is h11.IDLE and not self.connection.trailing_data[0]:
            # RFC 9112 2.2: empty lines before a request line are ignored (some clients
            # send a CRLF after a POST body); h11 would call them malformed.
            data = data.lstrip(b"\r\n")
        if data:
            self.connection.receive_data(data)

    def _refuse(self, request: _Request | None, error: ApiError) -> bool:
        """Answer an error about the request itself, then close the connection.

        The body the client is still sending is drained first (a lingering close, as web
        servers do): closing with unread bytes resets the connection, and the client
        then gets a broken pipe instead of the answer."""
        self._answer(request, error.status, error.payload(), {"error": error.code}, close=True)
        self._linger()
        return False

    def _linger(self) -> None:
        try:
            self.request.shutdown(socket.SHUT_WR)
            ends = time.monotonic() + LINGER_SECONDS
            drained = 0
            while drained < LINGER_BYTES and (left := ends - time.monotonic()) > 0:
                self.request.settimeout(left)
                data = self.request.recv(RECV_BYTES)
                if not data:
                    return
                drained += len(data)
        except OSError:
            pass  # the client left or went quiet: nothing more to wait for

    def _answer(self, request: _Request | None, status: int, payload: Any,
                fields: dict[str, Any], *, close: bool,
                headers: dict[str, str] | None = None) -> None:
        """Write one answer; ``headers`` (a mount's own, content-type included) replace
        the JSON content type and the bearer challenge."""
        data = payload if isinstance(payload, bytes) else encode(payload)
        if log.isEnabledFor(logging.INFO):  # before the answer: a client that has it sees it
            log.info(json.dumps(self._log_line(request, status, len(data), fields)))
        head = f"HTTP/1.1 {status} {_reason(status)}\r\nserver: lookback\r\n"
        if headers is None:
            head += f"content-type: application/json\r\ncontent-length: {len(data)}\r\n"
            if status == 401:
                head += "www-authenticate: Bearer\r\n"
        else:
            head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
            head += f"content-length: {len(data)}\r\n"
        if close:
            head += "connection: close\r\n"
        if request is not None and request.method == "HEAD":
            data = b""
        self.request.settimeout(self.timeout)  # writing the answer gets a budget of its own
        self.request.sendall(head.encode("ascii") + b"\r\n" + data)


    def _log_line(self, request: _Request | None, status: int, bytes_out: int,
                  fields: dict[str, Any]) -> dict[str, Any]:
        """Counts and timings of one answer; the endpoint only when it is a known one."""
        if request is None:
            return {"event": "request", "method": "-", "endpoint": "(unknown)",
                    "status": status, "ms": 0.0, "bytes_in": 0, "bytes_out": bytes_out,
                    **fields}
        path = urlsplit(request.target).path
        known = any(p == path for _, p in self.server.app.routes) or path in self.server.mounts
        return {"event": "request", "method": request.method[:10],
                "endpoint": path if known else "(unknown)", "status": status,
                "ms": round((time.perf_counter() - request.started) * 1000, 3),
                "bytes_in": len(request.body), "bytes_out": bytes_out, **fields}


def _connection() -> h11.Connection:
    return h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "too-large", f"the request body is over {limit} bytes")


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Status"


def make_server(settings: Settings, host: str | None = None, port: int | None = None,
                *, app: ReaderApp | None = None,
                socket_path: str | None = None) -> ReaderHTTPServer:
    """A ready (not yet serving) HTTP server; refuses unsafe bindings.

    Without a host or port (neither given nor ``server.host`` set) it listens on this
    user's Unix socket for ``settings.home`` (``socket_path``: another one, in a private
    directory too); TCP needs ``server.tokens``."""
    host = host or settings.server.host
    address: tuple[str, int] | str
    if host or port is not None:
        host = host or DEFAULT_TCP_HOST
        port = settings.server.port if port is None else int(port)
        check_binding(host, app.grants if app else Grants(settings.server.tokens,
                                                          settings.namespace))
        address, where = (host, port), f"{host}:{port}"
    else:
        address = where = socket_path or local_reader.socket_path(settings.home)
    app = app or ReaderApp(settings)
    try:
        return ReaderHTTPServer(address, app)
    except local_reader.NotOurReader as error:
        app.close()
        raise UserError(f"cannot listen on {where}: {error}", 1) from None
    except OSError as error:
        app.close()
        raise UserError(f"cannot listen on {where}: {error.strerror or error}", 1) from None
    except BaseException:
        app.close()
        raise


#: The TCP address ``--port`` alone binds to.
DEFAULT_TCP_HOST = "127.0.0.1"


def _clear_stale_socket(path: str) -> None:
    """Remove the socket a reader that died left at ``path``; refuse when a reader still
    answers there or the path is something else."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise UserError(f"{path} exists and is not a socket: remove it", 1)
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        os.unlink(path)  # nothing listens: a dead reader's
        return
    finally:
        probe.close()
    raise ReaderListens(f"a reader already listens at {path} (`lookback serve --stop` stops "
                        "one started in the background)", 1)


class ReaderListens(UserError):
    """Another reader answers on this data home's socket."""


def _stop_serving(signum: int, frame: Any) -> None:
    raise SystemExit(0)  # unwinds serve_forever through its ``finally``


def warm_up() -> None:
    """Load what the first request would otherwise pay for (the secret detectors'
    patterns, the term extractor's word lists): ~0.1 s once, at start, not on the
    agent's first model call."""
    from lookback.query.privacy.policy import classify
    from lookback.query.text.terms import extract_terms

    classify("warm up: api_key=none")
    extract_terms("warm up `Lookback` paths/and --flags")


def serve_forever(server: ReaderHTTPServer,
                  beside: tuple[ReaderHTTPServer, ...] = ()) -> None:
    """Serve until interrupted (SIGINT) or asked to stop (SIGTERM: exit status 0), then
    close the app (flushing the manifest). ``beside``: listeners of the same app (the
    page's), each on a thread of its own, closed before the app is."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop_serving)
    warm_up()
    from lookback.query.semantic import warm_up as warm_embedder

    warm_embedder(server.app.settings.retrieval.embedder)  # a model loads in 0.2-1 s
    server.app.keeper.start_tailer()  # embedded: entries Pi appends get indexed unasked
    if server.app.router is not None and not server.unix:
        # Other hosts' readers forward requests about this host's projects here.
        url = public_url(server.app.settings, str(server.server_address[0]),
                         int(server.server_address[1]))
        if url is None:
            log.warning(json.dumps({"event": "not-advertised", "reason": "set "
                                    "server.public_url: other hosts cannot forward here"}))
        else:
            server.app.router.advertise(url)
    for other in beside:
        threading.Thread(target=other.serve_forever, name="lookback-listener",
                         daemon=True).start()
    try:
        server.serve_forever()
    finally:
        for other in beside:
            other.shutdown()
            other.server_close()
        server.server_close()
        server.app.close()
