"""A tiny keep-alive JSON client for the reader-service tests: over the reader's Unix socket
(an address that is a path) or TCP (a port on 127.0.0.1)."""

from __future__ import annotations

import http.client
import json
import socket
from typing import Any, NamedTuple


class Answer(NamedTuple):
    status: int
    body: Any
    headers: dict[str, str]


class UnixHTTPConnection(http.client.HTTPConnection):
    """``http.client`` over a Unix socket (``Host: localhost``, as curl and Node send)."""

    def __init__(self, path: str, timeout: float = 30) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = connect(self.path, self.timeout)


def connect(address: int | str, timeout: float | None = 30) -> socket.socket:
    """A raw connection to the reader at ``address`` (a socket path, or a TCP port)."""
    if isinstance(address, int):
        return socket.create_connection(("127.0.0.1", address), timeout=timeout)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(address)
    except BaseException:
        sock.close()
        raise
    return sock


def http_connection(address: int | str, timeout: float = 30) -> http.client.HTTPConnection:
    if isinstance(address, int):
        return http.client.HTTPConnection("127.0.0.1", address, timeout=timeout)
    return UnixHTTPConnection(address, timeout)


class Client:
    def __init__(self, address: int | str, app: Any = None) -> None:
        self.address = address
        self.app = app
        self.connection = http_connection(address)

    def connect(self, timeout: float | None = 30) -> socket.socket:
        """A new raw connection to the same reader."""
        return connect(self.address, timeout)

    def request(self, method: str, path: str, body: Any = None, *, token: str | None = None,
                raw: bytes | None = None, headers: dict[str, str] | None = None) -> Answer:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"content-type": "application/json", **(headers or {})}
        if token:
            sent["authorization"] = f"Bearer {token}"
        try:
            self.connection.request(method, path, body=data, headers=sent)
            response = self.connection.getresponse()
        except (ConnectionError, http.client.HTTPException):
            self.connection.close()
            self.connection = http_connection(self.address)
            raise
        payload = response.read()
        if response.getheader("connection", "").lower() == "close":
            self.connection.close()
        parsed = json.loads(payload) if payload else None
        return Answer(response.status, parsed, {k.lower(): v for k, v in response.getheaders()})

    def post(self, path: str, body: Any = None, **kwargs: Any) -> Answer:
        return self.request("POST", path, body, **kwargs)

    def get(self, path: str, **kwargs: Any) -> Answer:
        return self.request("GET", path, **kwargs)
