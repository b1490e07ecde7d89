"""Reads are bounded and only local programs are answered: one deadline per request
(head, body and work), a realistic listen backlog, and no answers to what a web page
could send (a foreign ``Host``, an ``Origin``, a non-JSON POST)."""

from __future__ import annotations

import json
import select
import socket
import time
from pathlib import Path

import pytest

from lookback.server import make_server

from .client import connect
from .conftest import retrieve_body, settings_for
from .test_http import exchange, request


def closed_while_trickling(address: int | str, first: bytes, trickle: bytes, every: float = 0.5,
                           within: float = 20.0) -> float:
    """Send ``first``, then one byte of ``trickle`` every ``every`` seconds until the
    server closes the connection; returns how long that took (fails after ``within``)."""
    started = time.monotonic()
    with connect(address, timeout=5) as sock:
        sock.sendall(first)
        for byte in trickle:
            try:
                sock.send(bytes([byte]))
            except OSError:
                return time.monotonic() - started
            readable, _, _ = select.select([sock], [], [], every)
            if readable:
                try:
                    if not sock.recv(65536):
                        return time.monotonic() - started
                except OSError:
                    return time.monotonic() - started
            assert time.monotonic() - started < within, "the connection is still open"
    raise AssertionError("ran out of bytes to trickle with the connection still open")


def test_a_slow_head_cannot_hold_a_connection(serve):
    client = serve(server__request_timeout_seconds=2)
    took = closed_while_trickling(client.address, b"GET /v1/health HTTP/1.1\r\n",
                                  b"x-slow: " + b"a" * 1000)
    assert took < 15


def test_a_slow_body_cannot_hold_a_connection(serve, session_file):
    client = serve(server__request_timeout_seconds=2)
    body = json.dumps(retrieve_body(session_file)).encode()
    head = request("POST", "/v1/retrieve", body)[:-len(body)]
    took = closed_while_trickling(client.address, head, body)
    assert took < 15


def test_the_deadline_counts_from_the_first_byte_not_per_read(serve):
    # Each byte arrives well within the old per-read timeout (2 s): only a deadline for
    # the whole request ends this.
    client = serve(server__request_timeout_seconds=2)
    took = closed_while_trickling(client.address, b"G", b"ET /v1/health HTTP/1.1\r\n" * 50,
                                  every=1.0)
    assert took < 15


def somaxconn() -> int:
    try:
        return int(Path("/proc/sys/net/core/somaxconn").read_text())
    except (OSError, ValueError):
        return 128


def test_a_burst_of_connections_waits_in_the_backlog(home, session_file):
    # The server listens but is not accepting yet: connections queue in the kernel's
    # backlog. With the default of 5, the rest are dropped and never complete here.
    server = make_server(settings_for(home))
    sockets = []
    burst = min(200, somaxconn() - 8)  # the kernel caps every backlog at somaxconn
    try:
        for _ in range(burst):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            sockets.append(sock)
            # A Unix socket's connect completes at once, or fails (EAGAIN) on a full backlog.
            assert sock.connect_ex(server.server_address) == 0, f"dropped after {len(sockets)}"
        pending, limit = set(sockets), time.monotonic() + 10
        while pending and time.monotonic() < limit:
            _, writable, _ = select.select([], list(pending), [], 0.5)
            for sock in writable:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                pending.discard(sock)
        assert not pending, f"{len(pending)} of {burst} connections never completed"
    finally:
        for sock in sockets:
            sock.close()
        server.server_close()
        server.app.close()


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8765", "192.168.1.20",
                                  "lookback.attacker.test."])
def test_a_foreign_host_is_refused(serve, session_file, host):
    client = serve()
    body = json.dumps(retrieve_body(session_file)).encode()
    for data in (request("GET", "/v1/health", b"", f"host: {host}"),
                 request("POST", "/v1/retrieve", body, f"host: {host}")):
        data = data.replace(b"host: 127.0.0.1\r\n", b"", 1)
        answers = exchange(client.address, data)
        assert [status for status, _ in answers] == [403]
        assert json.loads(answers[0][1])["error"]["code"] == "forbidden-host"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.1:8765", "localhost:8765",
                                  "[::1]:8765", "LOCALHOST"])
def test_loopback_hosts_are_answered(serve, host):
    client = serve()
    data = request("GET", "/v1/health", b"", f"host: {host}", "connection: close")
    data = data.replace(b"host: 127.0.0.1\r\n", b"", 1)
    assert [status for status, _ in exchange(client.address, data)] == [200]


def test_configured_hosts_and_token_readers_accept_other_names(serve):
    named = serve(server__allowed_hosts=["reader.internal"])
    data = request("GET", "/v1/health", b"", "host: reader.internal:8765",
                   "connection: close").replace(b"host: 127.0.0.1\r\n", b"", 1)
    assert [status for status, _ in exchange(named.address, data)] == [200]
    guarded = serve(server__tokens={"admin-token-0003": "*"})
    data = request("GET", "/v1/health", b"", "host: lookback:8765", "connection: close",
                   "authorization: Bearer admin-token-0003")
    data = data.replace(b"host: 127.0.0.1\r\n", b"", 1)
    assert [status for status, _ in exchange(guarded.address, data)] == [200]


def test_a_browser_origin_is_refused(serve, session_file):
    client = serve()
    for origin in ("https://evil.example", "http://localhost:3000", "null"):
        answer = client.post("/v1/retrieve", retrieve_body(session_file),
                             headers={"origin": origin})
        assert answer.status == 403 and answer.body["error"]["code"] == "forbidden-origin"
        answer = client.get("/v1/health", headers={"origin": origin})
        assert answer.status == 403


def test_a_refused_client_can_still_send_its_body(serve, session_file):
    """The refusal answers before the body is read; the reader then drains what the
    client still sends instead of resetting the connection under it."""
    client = serve()
    body = json.dumps(retrieve_body(session_file)).encode()
    head, _, body = request("POST", "/v1/retrieve", body, "origin: https://evil.example") \
        .partition(b"\r\n\r\n")
    with connect(client.address, timeout=10) as sock:
        sock.sendall(head + b"\r\n\r\n")
        answer = b""
        while b"forbidden-origin" not in answer:
            chunk = sock.recv(65536)
            assert chunk, "closed before answering"
            answer += chunk
        sock.sendall(body)  # a reset connection would raise here
        while sock.recv(65536):
            pass
    assert answer.startswith(b"HTTP/1.1 403 ")


@pytest.mark.parametrize("content_type", ["text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_post_bodies_must_be_json(serve, session_file, content_type):
    client = serve()
    body = json.dumps(retrieve_body(session_file)).encode()
    data = request("POST", "/v1/retrieve", body, "connection: close")
    data = data.replace(b"content-type: application/json\r\n", b"" if content_type is None
                        else f"content-type: {content_type}\r\n".encode())
    answers = exchange(client.address, data)
    assert [status for status, _ in answers] == [415]
    assert json.loads(answers[0][1])["error"]["code"] == "unsupported-media-type"
    ok = client.post("/v1/retrieve", retrieve_body(session_file),
                     headers={"content-type": "application/json; charset=utf-8"})
    assert ok.status == 200
