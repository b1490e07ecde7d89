"""The page: a small read-only web view of the history, served by ``lookback serve --page``.

A browser cannot reach the reader's Unix socket, and the reader's guard refuses every
request a browser sends (``Origin``). So the page has a listener of its own, as Jupyter
does, with nothing of the reader's API on it:

- loopback TCP only (``127.0.0.1``, a free port unless ``--page-port`` names one);
- a random one-time login token, written with the page's URL to ``<home>/page.json``
  (0600, in the 0700 data home: only its owner reads it; ``lookback serve --page-url``
  prints it). ``GET /login?token=…`` exchanges it for an ``HttpOnly; SameSite=Strict``
  session cookie and a fresh token replaces it, so a URL works once;
- every other request needs that cookie: without it, 401 and nothing else;
- ``Host`` must name this listener (``127.0.0.1:PORT`` or ``localhost:PORT``: no DNS
  rebinding); an ``Origin`` or ``Sec-Fetch-Site`` that is not this page's own is refused;
  API calls are ``POST`` with ``application/json`` (a cross-site form cannot send one);
  no CORS header is ever sent, and the HTML, CSS and script are the wheel's own files
  under a ``default-src 'self'`` content security policy.

The API (``/api/*``) reads through what the reader reads with: projects from
``lookback.api.health``, the search and one entry through the reader's own
``/v1/search`` and ``/v1/source`` (the same pipeline and privacy gate), a session's
tree and the manifest's records from ``query.search.outline`` (every excerpt through
the gate). The page never names a provider: it sees what an unnamed remote provider would,
the strictest reading. Nothing of a request's terms or of any text is logged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from lookback.application.errors import ApiError
from lookback.errors import LookbackError
from lookback.query.search import NotIndexed, list_sessions, session_tree, with_excerpts
from lookback.server.app import ReaderApp, encode
from lookback.server.transport import ReaderHTTPServer

log = logging.getLogger("lookback.server")

#: The page's files (package data: pyproject.toml) and their content types.
ASSETS = Path(__file__).resolve().parent / "static"
FILES = {"/": ("index.html", "text/html; charset=utf-8"),
         "/page.css": ("page.css", "text/css; charset=utf-8"),
         "/page.js": ("page.js", "text/javascript; charset=utf-8")}
COOKIE = "lookback_page"
#: Browser sessions kept at once (the oldest is signed out beyond it).
MAX_SESSIONS = 32
#: Where the page's URL and its current login token are kept, in the data home.
STATE_FILE = "page.json"
PAGE_HOST = "127.0.0.1"
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
    "cross-origin-resource-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}

Answer = tuple[int, bytes, dict[str, Any], dict[str, str]]


class PageGuard:
    """Refuses what did not come from this page in a browser on this machine (see the
    module docstring): same interface as ``lookback.server.guard.Guard``."""

    def __init__(self, port: int) -> None:
        self.hosts = frozenset({f"{PAGE_HOST}:{port}", f"localhost:{port}"})
        self.origins = frozenset(f"http://{host}" for host in self.hosts)

    def refusal(self, method: str, headers: dict[str, str]) -> ApiError | None:
        if headers.get("host", "").strip().lower() not in self.hosts:
            return ApiError(403, "forbidden-host", "this page answers only at its own address")
        origin = headers.get("origin")
        if origin is not None and origin.strip().lower() not in self.origins:
            return ApiError(403, "forbidden-origin", "requests from other pages are refused")
        if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return ApiError(403, "forbidden-origin", "requests from other pages are refused")
        if method not in ("GET", "HEAD", "POST"):
            return ApiError(405, "method-not-allowed", f"{method} is not allowed here")
        if method == "POST" and headers.get("content-type", "").partition(";")[0].strip() \
                .lower() != "application/json":
            return ApiError(415, "unsupported-media-type", "POST bodies must be application/json")
        return None


class PageSite:
    """The page's routes, its login and its browser sessions."""

    def __init__(self, app: ReaderApp, state_file: Path) -> None:
        self.app = app
        self.state_file = state_file
        self.url_base = ""
        self._lock = threading.Lock()
        self._token = ""
        self._local = threading.local()  # the deadline of the request this thread answers
        #: sha256 of each live session cookie (compared as digests: no timing of secrets)
        self._sessions: OrderedDict[str, None] = OrderedDict()
        from lookback.api import privacy_policy

        self.policy = privacy_policy(app.settings)
        self.routes: dict[str, Callable[[dict[str, Any]], Any]] = {
            "/api/projects": self.projects, "/api/sessions": self.sessions,
            "/api/tree": self.tree, "/api/search": self.search, "/api/entry": self.entry,
            "/api/requests": self.requests}

    # -- login --------------------------------------------------------------------

    def start(self, port: int) -> str:
        """Listen at ``port``: a new login token, the URL written for its owner alone."""
        self.url_base = f"http://{PAGE_HOST}:{port}"
        with self._lock:
            self._new_token()
        return self.login_url()

    def login_url(self) -> str:
        return f"{self.url_base}/login?token={self._token}"

    def _new_token(self) -> None:
        self._token = secrets.token_urlsafe(32)
        write_private(self.state_file, json.dumps({"url": self.login_url(),
                                                   "pid": os.getpid()}))

    def close(self) -> None:
        try:  # only our own record: a newer page may have replaced it
            if json.loads(self.state_file.read_text()).get("pid") == os.getpid():
                self.state_file.unlink()
        except (OSError, ValueError):
            pass

    def _login(self, query: str) -> Answer:
        presented = (parse_qs(query).get("token") or [""])[0].encode("utf-8", "replace")
        with self._lock:
            if not (self._token and hmac.compare_digest(presented, self._token.encode())):
                return _html(401, "<p>This login link is not valid (each link works once). "
                             "Run <code>lookback serve --page-url</code> for a new one.</p>",
                             {"error": "unauthorized"})
            cookie = secrets.token_urlsafe(32)
            self._sessions[_digest(cookie)] = None
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
            self._new_token()  # one-time: the link just used opens nothing again
        headers = {**SECURITY_HEADERS, "content-type": "text/plain; charset=utf-8",
                   "location": "/",
                   "set-cookie": f"{COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/"}
        return 303, b"", {"login": "ok"}, headers

    def _signed_in(self, headers: dict[str, str]) -> bool:
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE and value:
                with self._lock:
                    if _digest(value) in self._sessions:
                        return True
        return False

    # -- dispatch -----------------------------------------------------------------

    def __call__(self, method: str, target: str, headers: dict[str, str], body: bytes,
                 deadline: float | None) -> Answer:
        parts = urlsplit(target)
        if parts.path == "/login" and method == "GET":
            return self._login(parts.query)
        if not self._signed_in(headers):
            return _error(ApiError(401, "unauthorized", "sign in with the link "
                                   "`lookback serve --page-url` prints"))
        if parts.path in FILES:
            if method != "GET":
                return _error(ApiError(405, "method-not-allowed", "GET only"))
            name, content_type = FILES[parts.path]
            return 200, (ASSETS / name).read_bytes(), {}, {**SECURITY_HEADERS,
                                                          "content-type": content_type}
        route = self.routes.get(parts.path)
        if route is None:
            return _error(ApiError(404, "not-found", "no such page"))
        if method != "POST":
            return _error(ApiError(405, "method-not-allowed", "POST only"))
        try:
            request = json.loads(body or b"{}")
            if not isinstance(request, dict):
                raise ValueError
        except ValueError:
            return _error(ApiError(400, "malformed-json", "the body is not a JSON object"))
        self._local.deadline = deadline
        try:
            status, payload = route(request)
        except NotIndexed:
            return _error(ApiError(404, "not-found", "no such project or session"))
        except LookbackError as error:
            return error.http_status, encode(error.payload()), {"error": error.code}, \
                _json_headers()
        data = payload if isinstance(payload, bytes) else encode(payload)
        return status, data, {}, _json_headers()

    def _reader(self, endpoint: str, body: dict[str, Any]) -> tuple[int, Any]:
        """The reader's own endpoint, as its owner (the cookie said who), the gate's
        strictest reading: the page never names a provider."""
        deadline = getattr(self._local, "deadline", None)
        status, payload, _ = self.app.handle("POST", endpoint, None, encode(body),
                                             deadline=deadline, owner=True)
        return status, payload

    # -- the views' data ----------------------------------------------------------

    def projects(self, request: dict[str, Any]) -> tuple[int, Any]:
        from lookback import api

        report = self.app.call(api.health, self.app.settings)
        return 200, {"projects": report.get("projects", [])}

    def sessions(self, request: dict[str, Any]) -> tuple[int, Any]:
        project = _text(request, "project")
        return 200, {"project": project, "sessions": self.app.call(
            list_sessions, self.app.reader, project)}

    def tree(self, request: dict[str, Any]) -> tuple[int, Any]:
        return 200, self.app.call(session_tree, self.app.reader, self.policy,
                                  project=_text(request, "project"),
                                  session_id=_text(request, "session_id"))

    def search(self, request: dict[str, Any]) -> tuple[int, Any]:
        return self._reader("/v1/search", _only(request, "text", "project", "session_id",
                                                "scope", "max_results"))

    def entry(self, request: dict[str, Any]) -> tuple[int, Any]:
        return self._reader("/v1/source", _only(request, "project", "session_id",
                                                "entry_id", "before", "after"))

    def requests(self, request: dict[str, Any]) -> tuple[int, Any]:
        """Each answered request of the session (the manifest: ids, reasons, tokens,
        what the gate withheld; no text), its items re-read through the gate."""
        session_id = _text(request, "session_id")
        self.app.manifests.flush()  # the records of requests already answered
        records = self.app.manifests.store.entries(session_id)
        return 200, {"session_id": session_id, "records": [
            self.app.call(with_excerpts, self.app.reader, self.policy, record, None)
            for record in reversed(records)]}


class PageHTTPServer(ReaderHTTPServer):
    """The page's listener: loopback TCP, its own guard, its routes and nothing else."""

    api = False

    def __init__(self, app: ReaderApp, port: int = 0) -> None:
        super().__init__((PAGE_HOST, port), app)
        self.page_port = int(self.server_address[1])
        self.guard = PageGuard(self.page_port)  # type: ignore[assignment]
        self.site = PageSite(app, Path(app.settings.home) / STATE_FILE)
        for path in (*FILES, "/login", *self.site.routes):
            self.mount(path, self.site)
        self.url = self.site.start(self.page_port)

    def server_close(self) -> None:
        super().server_close()
        site: PageSite | None = getattr(self, "site", None)
        if site is not None:  # None: the port could not be bound, nothing was started
            site.close()


def page_url(home: Path) -> str | None:
    """The URL (with its current one-time token) of the page this data home serves."""
    try:
        state = json.loads((Path(home) / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    url = state.get("url") if isinstance(state, dict) else None
    return url if isinstance(url, str) else None


def write_private(path: Path, text: str) -> None:
    """``text`` into ``path``, readable by its owner only, replaced atomically."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.replace(temporary, path)


def _digest(cookie: str) -> str:
    return hashlib.sha256(cookie.encode("utf-8", "replace")).hexdigest()


def _text(request: dict[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ApiError(400, "invalid-request", f"{key} must be a non-empty string")
    return value


def _only(request: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: request[key] for key in keys if key in request}


def _json_headers() -> dict[str, str]:
    return {**SECURITY_HEADERS, "content-type": "application/json"}


def _error(error: ApiError) -> Answer:
    return error.status, encode(error.payload()), {"error": error.code}, _json_headers()


def _html(status: int, body: str, fields: dict[str, Any]) -> Answer:
    page = ("<!doctype html><meta charset=utf-8><title>Lookback</title>" + body).encode()
    return status, page, fields, {**SECURITY_HEADERS, "content-type": "text/html; charset=utf-8"}
