"""The HTTP layer itself, byte by byte: keep-alive, bounded heads, framing (h11 owns the
grammar: Content-Length and chunked bodies, Expect: 100-continue)."""

from __future__ import annotations

import json

from .client import connect
from .conftest import retrieve_body


def exchange(address: int | str, data: bytes) -> list[tuple[int, bytes]]:
    """Send raw bytes, read until the server closes; return (status, body) per answer."""
    with connect(address, timeout=10) as sock:
        sock.sendall(data)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    answers = []
    while raw:
        head, _, rest = raw.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(int(line.split(b":")[1]) for line in lines
                      if line.lower().startswith(b"content-length:"))
        answers.append((int(lines[0].split()[1]), rest[:length]))
        raw = rest[length:]
    return answers


def request(method: str, path: str, body: bytes = b"", *extra: str) -> bytes:
    head = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1", f"content-length: {len(body)}",
            *(["content-type: application/json"] if method == "POST" else []), *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def test_keep_alive_answers_several_requests_on_one_connection(serve, session_file):
    client = serve()
    body = json.dumps(retrieve_body(session_file)).encode()
    data = (request("GET", "/v1/health") + request("POST", "/v1/retrieve", body)
            + request("GET", "/v1/health", b"", "connection: close"))
    answers = exchange(client.address, data)
    assert [status for status, _ in answers] == [200, 200, 200]
    assert json.loads(answers[1][1])["status"] == "ok"


def test_malformed_heads_get_400_and_close(serve):
    client = serve()
    for data in (b"NONSENSE\r\n\r\n",
                 b"GET /v1/health HTTP/1.1\r\nno colon here\r\n\r\n",
                 b"GET /v1/health HTTP/1.1\r\n" + b"x-a: b\r\n" * 200 + b"\r\n",
                 b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n"):
        answers = exchange(client.address, data)
        assert [status for status, _ in answers] == [400]


def test_bad_framing_is_refused(serve):
    client = serve()
    negative = b"POST /v1/retrieve HTTP/1.1\r\ncontent-length: -4\r\n\r\n"
    assert [s for s, _ in exchange(client.address, negative)] == [400]


def test_http_1_0_closes_after_one_answer(serve):
    client = serve()
    answers = exchange(client.address, b"GET /v1/health HTTP/1.0\r\n\r\n"
                                    b"GET /v1/health HTTP/1.0\r\n\r\n")
    assert [status for status, _ in answers] == [200]


CHUNKED_HEAD = (b"POST /v1/retrieve HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                b"content-type: application/json\r\ntransfer-encoding: chunked\r\n")


def test_chunked_bodies_are_read(serve, session_file):
    client = serve()
    body = json.dumps(retrieve_body(session_file)).encode()
    half = len(body) // 2
    chunked = (CHUNKED_HEAD + b"connection: close\r\n\r\n"
               + b"%x\r\n%s\r\n" % (half, body[:half])
               + b"%x\r\n%s\r\n" % (len(body) - half, body[half:]) + b"0\r\n\r\n")
    [(status, answer)] = exchange(client.address, chunked)
    assert status == 200 and json.loads(answer)["status"] == "ok"


def test_a_chunked_body_over_the_limit_is_refused(serve, session_file):
    client = serve(server__max_request_bytes=2000)
    chunk = b"x" * 1500
    chunked = (CHUNKED_HEAD + b"\r\n"
               + (b"%x\r\n%s\r\n" % (len(chunk), chunk)) * 2 + b"0\r\n\r\n")
    assert [s for s, _ in exchange(client.address, chunked)] == [413]


def test_empty_lines_between_requests_are_ignored(serve):
    client = serve()
    data = (request("GET", "/v1/health") + b"\r\n\r\n"
            + request("GET", "/v1/health", b"", "connection: close"))
    assert [s for s, _ in exchange(client.address, data)] == [200, 200]


def test_expect_100_continue_gets_an_interim_answer(serve, session_file):
    client = serve()
    body = json.dumps(retrieve_body(session_file)).encode()
    head = request("POST", "/v1/retrieve", b"", "expect: 100-continue", "connection: close")
    head = head.replace(b"content-length: 0", b"content-length: %d" % len(body))
    with client.connect(timeout=10) as sock:
        sock.sendall(head)
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 ")
        sock.sendall(body)
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    assert raw.startswith(b"HTTP/1.1 200 ")


def test_head_answers_carry_no_body(serve):
    client = serve()
    with client.connect(timeout=10) as sock:
        sock.sendall(request("HEAD", "/v1/health", b"", "connection: close"))
        raw = b""
        while chunk := sock.recv(65536):
            raw += chunk
    head, _, rest = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:"))) > 0
    assert rest == b""
