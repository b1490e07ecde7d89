"""``lookback serve``: the reader as a small HTTP JSON service for agents (the Pi extension).

Two layers, so the logic is testable and measurable without sockets:

- ``ReaderApp.handle(method, target, authorization, body)`` does everything a request
  needs — routing, auth, JSON parsing, the engine call, caching, the manifest — and
  returns ``(status, payload, log_fields)``.
- ``make_server`` wraps it in a threaded TCP server with a lean HTTP/1.1 handler
  (keep-alive, bounded request heads, size limit, one write per answer, no access log).

Endpoints (all JSON): ``POST /v1/retrieve``, ``/v1/search``, ``/v1/source``,
``/v1/plan``, ``/v1/nudge``; ``GET /v1/health``, ``/v1/manifest?session_id=...``.

Caching: Pi asks before every model turn, often with the very same inputs, so
retrieve answers are kept in a bounded LRU keyed by the whole request body and the
project's index watermark (live generation file + SQLite ``data_version``). Any
commit to the index or a reindex swap changes the watermark, so stale answers are
never served; they simply age out.

Security: without ``server.tokens`` the service only listens on loopback. With
tokens, every request needs ``Authorization: Bearer <token>``; a token grants a list
of projects (folder names or cwds) or ``"*"``. A request for a project the token
does not grant — or for one that cannot be resolved at all — gets the same 403, so it
learns nothing about what exists. Project names only reach the filesystem through
``index.layout.find_project``.

Freshness (embedded mode): ``lookback.freshness`` indexes the session file a request
names when it changed, before answering (bounded by ``freshness.wait_ms``), and tails
the session folders in the background; in service mode the workers do that.

Logs: one JSON line per request on logger ``lookback.server`` with counts and
timings only — never request terms, paths, session files or evidence text.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import queue
import socket
import socketserver
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from http import HTTPStatus
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from lookback import freshness
from lookback.errors import UserError
from lookback.index.layout import find_project, project_key
from lookback.query.context.manifest import ManifestStore, retrieval_record
from lookback.settings import Settings

log = logging.getLogger("lookback.server")

Reply = tuple[int, Any, dict[str, Any]]


class ApiError(Exception):
    """An error answer: HTTP status, stable code and a message that quotes no user text."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code

    def payload(self) -> dict[str, Any]:
        return {"status": "error", "error": {"code": self.code, "message": str(self)}}


FORBIDDEN = ApiError(403, "forbidden", "this token does not grant access to that project")


# ---------------------------------------------------------------------------------------------
# Tokens


class Grants:
    """Which bearer token may see which projects (``server.tokens``)."""

    def __init__(self, tokens: Any, namespace: str = "") -> None:
        if tokens in (None, {}):
            tokens = {}
        if not isinstance(tokens, dict):
            raise UserError("server.tokens must map each token to a list of projects or \"*\"")
        self._grants: dict[str, frozenset[str] | None] = {}
        for token, projects in tokens.items():
            if not isinstance(token, str) or len(token) < 8:
                raise UserError("server.tokens: every token must be a string of 8+ characters")
            self._grants[token] = _project_names(projects, namespace, token_index=len(self._grants))

    @property
    def required(self) -> bool:
        return bool(self._grants)

    def lookup(self, authorization: str | None) -> frozenset[str] | None:
        """The token's projects (None: all); raises 401 when the header names no token."""
        scheme, _, presented = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and presented.strip():
            presented = presented.strip()
            for token, projects in self._grants.items():
                if hmac.compare_digest(token.encode(), presented.encode()):
                    return projects
        raise ApiError(401, "unauthorized", "a valid Authorization: Bearer token is required")


def _project_names(projects: Any, namespace: str, token_index: int) -> frozenset[str] | None:
    if projects == "*" or (isinstance(projects, list) and "*" in projects):
        return None
    if not isinstance(projects, list) or not all(isinstance(p, str) for p in projects):
        raise UserError(f"server.tokens: token #{token_index + 1} must grant a list of "
                        "project names or cwds, or \"*\"")
    return frozenset(project_key(p, namespace) if p.startswith(("/", "\\")) else p
                     for p in projects)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(host: str, grants: Grants) -> None:
    """Refuse to listen beyond this machine unless tokens protect the service."""
    if not is_loopback(host) and not grants.required:
        raise UserError(
            f"refusing to listen on {host}: without tokens the reader only binds to loopback "
            "(127.0.0.1, ::1). Configure [server.tokens] in the settings file "
            "(token = [\"project\", ...] or \"*\") to serve other hosts.")


# ---------------------------------------------------------------------------------------------
# Cache and background manifest writes


class AnswerCache:
    """A bounded, thread-safe LRU of encoded retrieve answers."""

    def __init__(self, size: int) -> None:
        self.size = max(0, int(size))
        self._items: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple) -> Any:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: tuple, value: Any) -> None:
        if not self.size:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class ManifestWriter:
    """Writes manifest records on a background thread, off the request's critical path."""

    def __init__(self, store: ManifestStore) -> None:
        self.store = store
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=10_000)
        self._thread = threading.Thread(target=self._run, name="lookback-manifest", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            log.warning(json.dumps({"event": "manifest-dropped"}))

    def flush(self) -> None:
        """Wait until every submitted record is written."""
        self._queue.join()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                job()
            except Exception as error:  # a manifest problem never breaks serving
                log.error(json.dumps({"event": "manifest-error", "error": type(error).__name__}))
            finally:
                self._queue.task_done()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)
        self.store.close()


# ---------------------------------------------------------------------------------------------
# The application


class ReaderApp:
    """Everything a request needs, independent of HTTP plumbing.

    ``engine`` is the retrieval engine (default ``lookback.api``); ``reader`` one
    ``query.reader.IndexReader`` shared by every request of the process.
    """

    def __init__(self, settings: Settings, *, engine: ModuleType | Any = None,
                 reader: Any = None, manifests: ManifestStore | None = None) -> None:
        if engine is None:
            from lookback import api as engine
        if reader is None:
            from lookback.query.search.reader import IndexReader

            reader = IndexReader(settings.home, settings.namespace)
        self.settings = settings
        self.engine = engine
        self.reader = reader
        self.grants = Grants(settings.server.tokens, settings.namespace)
        self.cache = AnswerCache(settings.server.cache_entries)
        keep = settings.manifest.keep_per_session
        self.manifests = ManifestWriter(manifests or ManifestStore(settings.home, keep=keep))
        self.timeout = settings.server.request_timeout_seconds
        # Embedded mode: this process keeps the sessions it is asked about fresh itself.
        self.freshness = freshness.engine_for(settings)
        if self.freshness is not None:
            self.freshness.start()
        workers = settings.server.workers
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="lookback-call") \
            if workers > 0 else None
        self.routes: dict[tuple[str, str], Callable[..., Reply]] = {
            ("POST", "/v1/retrieve"): self.retrieve,
            ("POST", "/v1/search"): self.search,
            ("POST", "/v1/source"): self.source,
            ("POST", "/v1/plan"): self.plan,
            ("POST", "/v1/nudge"): self.nudge,
            ("GET", "/v1/health"): self.health,
            ("GET", "/v1/manifest"): self.manifest,
        }

    # -- dispatch -----------------------------------------------------------------------

    def handle(self, method: str, target: str, authorization: str | None,
               body: bytes) -> Reply:
        """Answer one request: ``(HTTP status, payload dict or encoded bytes, log fields)``."""
        parts = urlsplit(target)
        route = self.routes.get((method, parts.path))
        try:
            if route is None:
                if any(path == parts.path for _, path in self.routes):
                    raise ApiError(405, "method-not-allowed", f"{method} is not allowed here")
                raise ApiError(404, "not-found", "no such endpoint")
            grant = self.grants.lookup(authorization) if self.grants.required else None
            if method == "GET":
                return route(parse_qs(parts.query), grant)
            return route(_parse_json(body), grant)
        except ApiError as error:
            return error.status, error.payload(), {"error": error.code}
        except Exception as error:  # the engine's own bad-input errors, then bugs
            code = getattr(error, "code", None)
            if isinstance(code, str) and isinstance(error, ValueError):
                return 400, ApiError(400, code, str(error)).payload(), {"error": code}
            log.error(json.dumps({"event": "internal-error", "error": type(error).__name__}))
            return 500, ApiError(500, "internal", "internal error").payload(), {
                "error": "internal"}

    def call(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run an engine call with the per-request time limit (503 when it runs over)."""
        try:
            if self.pool is None:
                return function(*args, **kwargs)
            return self.pool.submit(function, *args, **kwargs).result(timeout=self.timeout)
        except FutureTimeout:
            raise ApiError(503, "timeout", "the request ran over the server's time limit") \
                from None
        except (LookupError, OSError) as error:
            raise _not_found(error) from None

    # -- projects and auth --------------------------------------------------------------

    def _ref(self, body: dict) -> Any:
        """The project and session a body names, or None when it names none that is indexed."""
        try:
            return self.reader.resolve(session_file=_text(body, "session_file"),
                                       project=_text(body, "project"),
                                       session_id=_text(body, "session_id"))
        except (LookupError, OSError, ValueError):
            return None

    def _authorize(self, body: dict, grant: frozenset[str] | None) -> Any:
        """The body's session reference, after checking the token grants its project."""
        ref = self._ref(body)
        if grant is None:
            return ref
        name = ref.project.name if ref is not None else self._project_name(body)
        if name is None or name not in grant:
            raise FORBIDDEN
        return ref

    def _project_name(self, body: dict) -> str | None:
        project = _text(body, "project")
        if not project:
            return None
        try:
            return find_project(self.settings.home, project, self.settings.namespace).name
        except LookupError:
            return None

    def _watermark(self, ref: Any) -> tuple | None:
        """(live index file, data_version): changes on every commit and every swap."""
        try:
            holder = self.reader.project_connection(ref.project)
            with holder.lock:
                connection, path = holder.current()
                version = connection.execute("PRAGMA data_version").fetchone()[0]
            return str(path), version
        except Exception:  # no index yet, or it is being swapped: do not cache
            return None

    # -- endpoints ----------------------------------------------------------------------

    def retrieve(self, body: dict, grant: frozenset[str] | None) -> Reply:
        started = time.perf_counter()
        ref = self._authorize(body, grant)
        fresh = freshness.refresh(self.freshness, body)
        if fresh is not None and fresh.state == "rewrite-pending":
            return 200, freshness.rewrite_pending_answer(fresh), {"outcome": "not-indexed"}
        watermark = self._watermark(ref) if ref is not None else None
        key = (_cache_key(body), watermark) if watermark and self.cache.size else None
        cached = self.cache.get(key) if key else None
        if cached is None:
            response = self.call(self.engine.retrieve, body, settings=self.settings,
                                 reader=self.reader)
            encoded = encode(freshness.annotate(response, fresh))
            if key and response.get("status") in ("ok", "no-query"):
                self.cache.put(key, (encoded, response))
        else:
            encoded, response = cached
        latency_ms = (time.perf_counter() - started) * 1000
        self._record_retrieval(ref, body, response, latency_ms, cached is not None)
        fields = _counts(response)
        fields["cache"] = "hit" if cached is not None else ("miss" if key else "off")
        return 200, encoded, fields

    def _record_retrieval(self, ref: Any, body: dict, response: dict, latency_ms: float,
                          cached: bool) -> None:
        session_id = ref.session_id if ref is not None else _text(body, "session_id")
        if not session_id:
            return
        project = ref.project.name if ref is not None else None
        record = retrieval_record(response, session_id=session_id, project=project,
                                  leaf_id=_text(body, "leaf_id"), latency_ms=latency_ms,
                                  cached=cached)
        self.manifests.submit(lambda: self.manifests.store.add(record))

    def search(self, body: dict, grant: frozenset[str] | None) -> Reply:
        self._authorize(body, grant)
        freshness.refresh(self.freshness, body)  # the live leaf is searchable too
        response = self.call(self.engine.search, body, settings=self.settings, reader=self.reader)
        return 200, response, {"results": len(response.get("results") or [])}

    def source(self, body: dict, grant: frozenset[str] | None) -> Reply:
        self._authorize(body, grant)
        freshness.refresh(self.freshness, body)
        response = self.call(self.engine.source, body, settings=self.settings, reader=self.reader)
        return 200, response, {}

    def plan(self, body: dict, grant: frozenset[str] | None) -> Reply:
        from lookback.query.context.planner import plan

        messages, evidence = body.get("messages"), body.get("evidence", [])
        if not isinstance(messages, list) or not isinstance(evidence, list):
            raise ApiError(400, "invalid-request", "messages and evidence must be lists")
        budget = body.get("max_retrieved_history_tokens",
                          self.settings.retrieval.max_retrieved_history_tokens)
        try:
            result = plan(messages, evidence, max_retrieved_history_tokens=budget,
                          input_target_tokens=body.get("input_target_tokens"),
                          hard_limit_tokens=body.get("hard_limit_tokens"))
        except ValueError as error:
            raise ApiError(400, "invalid-request", str(error)) from None
        self._record_plan(evidence, result, grant)
        return 200, result, {"included": len(result["included"]),
                             "excluded": len(result["excluded"]),
                             "fallback": result["fallback"] is not None}

    def _record_plan(self, evidence: list, result: dict, grant: frozenset[str] | None) -> None:
        sessions = {e.get("session_id") for e in evidence if isinstance(e, dict)}
        sessions = {s for s in sessions if isinstance(s, str) and s}
        store = self.manifests.store

        def write() -> None:
            for session_id in sessions:
                latest = store.entries(session_id)[-1:]
                project = latest[0].get("project") if latest else None
                if grant is not None and project not in grant:
                    continue  # a token may only annotate its own projects' manifests
                store.record_plan(session_id, project, result)

        if sessions:
            self.manifests.submit(write)

    def nudge(self, body: dict, grant: frozenset[str] | None) -> Reply:
        """Ask for ``session_file`` to be indexed now.

        Service mode hands it to ``lookback.service.nudge_session``. Embedded mode
        queues the file for this process's freshness engine (``lookback.freshness``)
        and answers at once: ``queued``, ``fresh`` (nothing new) or ``missing``;
        ``embedded`` when the engine is turned off (``freshness.enabled = false``).
        """
        session_file = _text(body, "session_file")
        if not session_file or not session_file.startswith("/"):
            raise ApiError(400, "invalid-request", "session_file must be an absolute path")
        if grant is not None:
            self._authorize(body, grant)
        if self.settings.service_mode:
            from lookback import service

            nudge_session = getattr(service, "nudge_session", None)
            if nudge_session is None:
                return 202, {"status": "unsupported"}, {}
            self.call(nudge_session, self.settings, session_file)
            return 202, {"status": "queued"}, {}
        if self.freshness is None:
            return 202, {"status": "embedded"}, {}
        return 202, {"status": self.freshness.nudge(session_file)}, {}

    def health(self, query: dict, grant: frozenset[str] | None) -> Reply:
        report = self.call(self.engine.health, self.settings)
        if grant is not None and isinstance(report.get("projects"), list):
            report = {**report, "projects": [p for p in report["projects"]
                                             if isinstance(p, dict) and p.get("project") in grant]}
        report = {**report, "server": {"cache_entries": len(self.cache._items),
                                       "cache_hits": self.cache.hits,
                                       "cache_misses": self.cache.misses}}
        return 200, report, {}

    def manifest(self, query: dict, grant: frozenset[str] | None) -> Reply:
        session_id = (query.get("session_id") or [""])[0]
        if not session_id:
            raise ApiError(400, "invalid-request", "session_id is required")
        self.manifests.flush()  # read your writes: include the records of finished requests
        entries = self.manifests.store.entries(session_id)
        if grant is not None:  # same (empty) answer for unknown and not-granted sessions
            entries = [e for e in entries if e.get("project") in grant]
        return 200, {"session_id": session_id, "entries": entries}, {"entries": len(entries)}

    def close(self) -> None:
        if self.freshness is not None:
            self.freshness.close()
        self.manifests.flush()
        self.manifests.close()
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


def encode(payload: Any) -> bytes:
    """JSON bytes (orjson: a tenth of the standard library's time on evidence answers)."""
    try:
        return orjson.dumps(payload)
    except TypeError:  # e.g. a non-string key or an int beyond 64 bits
        return json.dumps(payload).encode()


def _cache_key(body: dict) -> bytes:
    try:
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(body, sort_keys=True).encode()


def _parse_json(body: bytes) -> dict:
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        raise ApiError(400, "malformed-json", "the request body is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise ApiError(400, "invalid-request", "the request body must be a JSON object")
    return parsed


def _text(body: dict, key: str) -> str | None:
    value = body.get(key)
    return value if isinstance(value, str) and value else None


def _not_found(error: BaseException) -> ApiError:
    if isinstance(error, OSError):
        return ApiError(400, "unreadable-session-file", "session_file cannot be read")
    return ApiError(404, "not-found", "no such project, session or entry in the index")


def _counts(response: dict) -> dict[str, Any]:
    """Counts for the log line (numbers only, never text)."""
    diagnostics = response.get("diagnostics") if isinstance(response, dict) else None
    fields: dict[str, Any] = {"outcome": str(response.get("status"))[:20],
                              "evidence": len(response.get("evidence") or []),
                              "excluded": len(response.get("excluded") or [])}
    if isinstance(diagnostics, dict) and isinstance(diagnostics.get("candidates"), int):
        fields["candidates"] = diagnostics["candidates"]
    return fields


# ---------------------------------------------------------------------------------------------
# HTTP


#: Bounds on a request head: one line, and the number of header lines.
MAX_HEADER_LINE = 65536
MAX_HEADERS = 100


class ReaderHTTPServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], app: ReaderApp) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.app = app
        self.max_request_bytes = app.settings.server.max_request_bytes
        # ``timeout`` on a StreamRequestHandler is the socket timeout: idle keep-alive
        # connections and slow clients are dropped after it.
        handler = type("Handler", (_Handler,), {"timeout": app.timeout})
        super().__init__(address, handler)


class _Handler(socketserver.StreamRequestHandler):
    """A lean HTTP/1.1 handler: keep-alive, one ``sendall`` per answer, no access log.

    The standard library's ``BaseHTTPRequestHandler`` parses headers with the email
    package and writes a response in several syscalls; at a few hundred microseconds
    a request that was most of the service's overhead. This reads the request line,
    the headers (bounded in count and size) and a ``Content-Length`` body, hands them
    to ``ReaderApp.handle`` and writes the answer in one piece.
    """

    server: ReaderHTTPServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        try:
            while self._serve_one():
                pass
        except (TimeoutError, ConnectionError):
            pass  # an idle keep-alive connection timed out, or the client left

    def _serve_one(self) -> bool:
        """Answer one request; False when the connection should close."""
        started = time.perf_counter()
        head = self._read_head()
        if head is None:
            return False
        if isinstance(head, ApiError):
            self._send(head.status, head.payload(), close=True)
            return False
        method, target, headers, keep_alive = head
        if method not in ("GET", "POST"):
            keep_alive = False  # a client speaking other methods is not ours: answer, close
        length_text = headers.get("content-length", "0")
        length = int(length_text) if length_text.isdigit() else -1
        body_in = max(length, 0)
        if "chunked" in headers.get("transfer-encoding", "") or length < 0:
            status, payload, fields = 400, ApiError(
                400, "invalid-request", "bad Content-Length").payload(), {}
            keep_alive = False
        elif length > self.server.max_request_bytes:
            status, payload, fields = 413, ApiError(
                413, "too-large", f"the request body is over "
                f"{self.server.max_request_bytes} bytes").payload(), {}
            keep_alive = False  # the unread body must not be parsed as a request
        else:
            body = self.rfile.read(length) if length else b""
            if len(body) < length:
                return False  # the client went away mid-body
            status, payload, fields = self.server.app.handle(
                method, target, headers.get("authorization"), body)
        data = payload if isinstance(payload, bytes) else encode(payload)
        path = urlsplit(target).path
        known = any(p == path for _, p in self.server.app.routes)
        line = {"event": "request", "method": method[:10],
                "endpoint": path if known else "(unknown)", "status": status,
                "ms": round((time.perf_counter() - started) * 1000, 3),
                "bytes_in": body_in, "bytes_out": len(data), **fields}
        log.info(json.dumps(line))  # before the answer: a client that has it sees the line
        self._send(status, data, close=not keep_alive)
        return keep_alive

    def _read_head(self) -> tuple[str, str, dict[str, str], bool] | ApiError | None:
        """(method, target, lower-cased headers, keep-alive), an error, or None at EOF."""
        line = self.rfile.readline(MAX_HEADER_LINE + 1)
        while line in (b"\r\n", b"\n"):  # tolerated between keep-alive requests
            line = self.rfile.readline(MAX_HEADER_LINE + 1)
        if not line:
            return None
        parts = line.decode("latin-1").split()
        if len(line) > MAX_HEADER_LINE or len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return ApiError(400, "invalid-request", "malformed request line")
        method, target, version = parts
        headers: dict[str, str] = {}
        for _ in range(MAX_HEADERS + 1):
            raw = self.rfile.readline(MAX_HEADER_LINE + 1)
            if raw in (b"\r\n", b"\n", b""):
                break
            if len(raw) > MAX_HEADER_LINE or b":" not in raw:
                return ApiError(400, "invalid-request", "malformed header")
            name, _, value = raw.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        else:
            return ApiError(400, "invalid-request", "too many headers")
        connection = headers.get("connection", "").lower()
        keep_alive = version == "HTTP/1.1" and "close" not in connection \
            or version == "HTTP/1.0" and "keep-alive" in connection
        return method, target, headers, keep_alive

    def _send(self, status: int, payload: Any, *, close: bool) -> None:
        data = payload if isinstance(payload, bytes) else encode(payload)
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Status"
        head = [f"HTTP/1.1 {status} {reason}", "server: lookback",
                "content-type: application/json", f"content-length: {len(data)}"]
        if status == 401:
            head.append("www-authenticate: Bearer")
        if close:
            head.append("connection: close")
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)


def make_server(settings: Settings, host: str | None = None, port: int | None = None,
                *, app: ReaderApp | None = None) -> ReaderHTTPServer:
    """A ready (not yet serving) HTTP server; refuses unsafe bindings."""
    host = host or settings.server.host
    port = settings.server.port if port is None else int(port)
    check_binding(host, app.grants if app else Grants(settings.server.tokens,
                                                      settings.namespace))
    app = app or ReaderApp(settings)
    try:
        return ReaderHTTPServer((host, port), app)
    except OSError as error:
        app.close()
        raise UserError(f"cannot listen on {host}:{port}: {error.strerror or error}", 1) \
            from None


def warm_up() -> None:
    """Load what the first request would otherwise pay for (the secret detectors'
    patterns, the term extractor's word lists): ~0.1 s once, at start, not on the
    agent's first model call."""
    from lookback.query.privacy.policy import classify
    from lookback.query.text.terms import extract_terms

    classify("warm up: api_key=none")
    extract_terms("warm up `Lookback` paths/and --flags")


def serve_forever(server: ReaderHTTPServer) -> None:
    """Serve until interrupted, then close the app (flushing the manifest)."""
    warm_up()
    if server.app.freshness is not None:
        server.app.freshness.start_tailer()  # entries Pi appends get indexed unasked
    try:
        server.serve_forever()
    finally:
        server.server_close()
        server.app.close()
