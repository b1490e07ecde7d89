"""A tiny keep-alive JSON client for the reader-service tests."""

from __future__ import annotations

import http.client
import json
from typing import Any, NamedTuple


class Answer(NamedTuple):
    status: int
    body: Any
    headers: dict[str, str]


class Client:
    def __init__(self, port: int, app: Any = None) -> None:
        self.port = port
        self.app = app
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

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
            self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
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
