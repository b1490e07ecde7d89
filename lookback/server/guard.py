"""What a request must look like before the reader reads its body: it comes from a
program on this machine, not from a web page.

A page in a browser can reach a loopback service: by DNS rebinding (its own host name
resolving to 127.0.0.1, so the ``Host`` header names that host) or with a "simple"
cross-origin POST (no preflight: ``text/plain``, a form, or no content type; the
browser adds ``Origin``). So, for every request:

- ``Host`` must be a loopback name or address, or one of ``server.allowed_hosts``.
  With ``server.tokens`` the check is off: a page cannot present a bearer token, and a
  token-protected reader is meant to be reached by other host names;
- an ``Origin`` header (only browsers send one) is refused;
- a POST must say ``Content-Type: application/json``.
"""

from __future__ import annotations

from collections.abc import Iterable

from lookback.application.auth import is_loopback
from lookback.application.errors import ApiError

FOREIGN_HOST = ApiError(403, "forbidden-host", "the Host header names no address of this "
                        "reader (add it to server.allowed_hosts to allow it)")
BROWSER_ORIGIN = ApiError(403, "forbidden-origin", "requests from web pages are refused")
NOT_JSON = ApiError(415, "unsupported-media-type", "POST bodies must be application/json")


class Guard:
    """Refuses requests that a web page could have sent (see the module docstring)."""

    def __init__(self, allowed_hosts: Iterable[str], *, check_host: bool) -> None:
        self.allowed_hosts = frozenset(_host_name(host) for host in allowed_hosts)
        self.check_host = check_host

    def refusal(self, method: str, headers: dict[str, str]) -> ApiError | None:
        """Why this request is refused, or None. ``headers`` are lower-cased names."""
        host = headers.get("host")
        if self.check_host and host is not None and not self._local(host):
            return FOREIGN_HOST
        if "origin" in headers:
            return BROWSER_ORIGIN
        if method == "POST" and _media_type(headers.get("content-type", "")) \
                != "application/json":
            return NOT_JSON
        return None

    def _local(self, host: str) -> bool:
        name = _host_name(host)
        return is_loopback(name) or name in self.allowed_hosts


def _host_name(host: str) -> str:
    """``Host`` without its port: ``[::1]:8765`` -> ``::1``, ``Localhost.:80`` -> ``localhost``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _media_type(content_type: str) -> str:
    return content_type.partition(";")[0].strip().lower()
