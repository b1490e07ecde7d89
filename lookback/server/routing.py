"""Any reader answers for any project: a request about a project another worker host
owns is forwarded to that host's reader (service mode with several hosts; the whole
design, its guarantees and costs: docs/scaling.md).

Forwarding, not a redirect: the clients (the Pi extension's fetch, the hooks' http.client,
MCP's in-process calls) would not all follow a 307 with its body and token, and one URL
per team must keep working for each of them.

* **Where to.** Only to the address the owner's reader registered in Redis
  (``lookback.workers.routes``), never to one the request names.
* **Who may read.** The reader that forwards authorizes the request as usual (on the
  session file's header it read, or the project named), then sends it on with the
  caller's own ``Authorization`` header; the owner checks that token again against
  what it actually reads, so a team's readers share one ``server.tokens``. A request
  that named a session file is sent naming its project and session instead (pinned:
  the owner need not read this machine's files).
* **Bounded.** A forwarded request carries ``lookback-forwarded`` and is never
  forwarded again (no loops, at most one extra hop); it waits at most
  ``server.forward_timeout_seconds``.
* **Fail open.** Redis unreachable: the local answer, and no lookups for a few seconds.
  Owner dead, no reader registered, or it fails (a timeout, a refused connection, a
  5xx): the local answer, marked — a copy here answers ``stale`` (never ``ok``), none
  answers ``elsewhere`` — with a warning naming the owner.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lookback.settings import Settings

if TYPE_CHECKING:
    from lookback.workers.routes import Route

log = logging.getLogger("lookback.server")

#: The header a forwarded request carries (the forwarding host's id): never forwarded again.
FORWARDED_HEADER = "lookback-forwarded"
#: How long one owner lookup may wait for Redis before the local answer is given.
LOOKUP_TIMEOUT_SECONDS = 0.5
#: After Redis failed to answer, lookups pause this long (each request answers at once).
REDIS_RETRY_SECONDS = 5.0


class Router:
    """Owner lookups and forwarding for one reader (service mode)."""

    def __init__(self, settings: Settings) -> None:
        from lookback.workers.config import ServiceConfig, redis_client
        from lookback.workers.sink import transient_errors

        self.config = ServiceConfig.from_settings(settings)
        self.client = redis_client(self.config, timeout=LOOKUP_TIMEOUT_SECONDS)
        self.me = f"{self.config.host}:{self.config.home}"
        self.timeout = settings.server.forward_timeout_seconds
        self.transient_errors = transient_errors()  # Registration catches them too
        self._down_until = 0.0
        self._connections = threading.local()  # per thread: owner URL -> kept-alive connection
        self.registration: Registration | None = None

    def where(self, project: str) -> Route | None:
        """``workers.routes.Route`` when another host owns ``project``; None when this
        host does, nobody does, or Redis cannot say now (fail open)."""
        from lookback.workers.routes import route

        if time.monotonic() < self._down_until:
            return None
        try:
            return route(self.config, self.client, project)
        except self.transient_errors:
            self._down_until = time.monotonic() + REDIS_RETRY_SECONDS
            log.warning(json.dumps({"event": "routing-paused", "reason": "redis unreachable"}))
            return None

    def forward(self, url: str, method: str, path: str, body: bytes,
                authorization: str | None, timeout: float) -> tuple[int, bytes] | None:
        """The owner's reader's answer (status, body), or None when it gave none in
        time or failed (5xx): the caller answers locally, marked."""
        headers = {"content-type": "application/json", FORWARDED_HEADER: self.me}
        if authorization:
            headers["authorization"] = authorization
        for attempt in (1, 2):  # a kept-alive connection the owner closed: once more, anew
            connection = self._connection(url, timeout)
            if connection is None:
                return None
            try:
                connection.timeout = timeout
                if connection.sock is not None:
                    connection.sock.settimeout(timeout)
                connection.request(method, path, body, headers)
                response = connection.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as error:
                self._drop(url)
                retry = attempt == 1 and isinstance(error, (http.client.RemoteDisconnected,
                                                            BrokenPipeError,
                                                            ConnectionResetError))
                if not retry:
                    log.warning(json.dumps({"event": "forward-failed",
                                            "error": type(error).__name__}))
                    return None
                continue
            if response.will_close:
                self._drop(url)
            if response.status >= 500:
                return None
            return response.status, data
        return None

    def _connection(self, url: str, timeout: float) -> http.client.HTTPConnection | None:
        kept: dict[str, http.client.HTTPConnection] = getattr(self._connections, "by_url", None) \
            or {}
        self._connections.by_url = kept
        found = kept.get(url)
        if found is None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                return None
            kind = http.client.HTTPSConnection if parts.scheme == "https" \
                else http.client.HTTPConnection
            found = kept[url] = kind(parts.hostname, parts.port, timeout=timeout)
        return found

    def _drop(self, url: str) -> None:
        kept = getattr(self._connections, "by_url", {})
        connection = kept.pop(url, None)
        if connection is not None:
            connection.close()

    def advertise(self, url: str) -> None:
        """Register ``url`` as this host's reader, renewed until ``close``."""
        self.registration = Registration(self, url)
        self.registration.start()

    def close(self) -> None:
        if self.registration is not None:
            self.registration.stop()
        self.client.close()


class Registration(threading.Thread):
    """Keeps this reader's address in Redis (``workers.routes.register_reader``),
    renewed every third of ``workers.lease_seconds``; dropped when the reader stops."""

    def __init__(self, router: Router, url: str) -> None:
        super().__init__(name="lookback-reader-registration", daemon=True)
        self.router = router
        self.url = url
        self.stopping = threading.Event()

    def renew(self) -> bool:
        from lookback.workers.routes import register_reader

        try:
            register_reader(self.router.config, self.router.client, self.url)
            return True
        except self.router.transient_errors:  # a Redis blip: the next round tries again
            return False

    def run(self) -> None:
        self.renew()
        while not self.stopping.wait(self.router.config.lease_seconds / 3):
            self.renew()

    def stop(self) -> None:
        from lookback.workers.routes import forget_reader

        self.stopping.set()
        try:
            forget_reader(self.router.config, self.router.client, self.url)
        except self.router.transient_errors:
            pass


def public_url(settings: Settings, host: str, port: int) -> str | None:
    """The URL other hosts reach this reader at: ``server.public_url``, else the TCP
    address it listens on when that is a concrete one (not 0.0.0.0 or ::)."""
    if settings.server.public_url:
        return settings.server.public_url.rstrip("/")
    if host in ("", "0.0.0.0", "::"):
        return None
    from lookback import hook_client

    return hook_client.http_url(host, port)
