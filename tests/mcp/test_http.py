"""``lookback mcp --http``, the real process: the reader's bearer tokens, Host/Origin guard
and project grants decide who reads what, and one token's client never receives another
project's evidence."""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import subprocess
import time
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from .conftest import (
    EARLY_USER_TEXT,
    LOOKBACK,
    SESSION_ID,
    TOKEN_A,
    TOKEN_B,
    call_each,
    environment,
    http_server,
    write_config,
)

REFUSED = "refused: this client is not granted that project or session, or it is not indexed"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "test", "version": "1"}}}
ACCEPT = {"accept": "application/json, text/event-stream"}


def calls(url: str, token: str | None, *requests: tuple[str, dict]) -> list[tuple[bool, str]]:
    async def run() -> list[tuple[bool, str]]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers) as http, \
                Client(streamable_http_client(url, http_client=http)) as client:
            return await call_each(client, requests)
    return asyncio.run(run())


def test_a_token_reads_its_own_project(mcp_http, shared_projects):
    projects = shared_projects
    (failed, text), = calls(mcp_http, TOKEN_A, ("history_search", {
        "query": "AppMessage[]", "project": str(projects.cwd_a), "scope": "project"}))
    assert not failed and EARLY_USER_TEXT.split(";")[0] in text
    assert f"(session {SESSION_ID})" in text


def test_an_ipv6_listening_url_is_one_a_client_can_use(projects):
    """The listening line named ``http://::1:PORT/mcp`` for an IPv6 host: no client could
    open it. It brackets the address, and a tool call through it answers."""
    write_config(projects.home, f'[server.tokens]\n"{TOKEN_A}" = ["{projects.cwd_a}"]\n')
    with http_server(environment(projects.home), "--host", "::1") as url:
        assert url.startswith("http://[::1]:") and url.endswith("/mcp")
        (failed, text), = calls(url, TOKEN_A, ("history_search", {
            "query": "AppMessage[]", "project": str(projects.cwd_a), "scope": "project"}))
    assert not failed and EARLY_USER_TEXT.split(";")[0] in text


def test_another_tokens_project_is_refused_and_nothing_of_it_arrives(mcp_http, shared_projects):
    projects = shared_projects
    answers = calls(mcp_http, TOKEN_B,
                    ("history_search", {"query": "AppMessage[]", "project": str(projects.cwd_a),
                                        "scope": "project"}),
                    ("history_search", {"query": "AppMessage[]",
                                        "session_file": str(projects.file_a)}),
                    ("history_read", {"entry_id": "a1000001", "session_id": SESSION_ID,
                                      "project": str(projects.cwd_a)}),
                    ("history_search", {"query": "AppMessage[]",
                                        "project": str(projects.home / "unknown")}),
                    ("lookback_status", {}))
    for failed, text in answers[:4]:
        assert failed and text.endswith(REFUSED)  # unknown and not granted read the same
        assert SESSION_ID not in text and "AppMessage" not in text
    failed, status = answers[4]
    assert not failed and status.startswith("1 indexed project") and str(projects.cwd_b) in status
    assert str(projects.cwd_a) not in status and SESSION_ID not in status


def test_no_token_or_a_wrong_one_gets_401_before_the_mcp_session(mcp_http):
    for headers in ({}, {"authorization": "Bearer not-a-token-at-all"}):
        answer = httpx2.post(mcp_http, json=INITIALIZE, headers={**ACCEPT, **headers})
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthorized"


def test_a_web_page_is_refused_by_the_origin_guard(mcp_http):
    answer = httpx2.post(mcp_http, json=INITIALIZE, headers={
        **ACCEPT, "authorization": f"Bearer {TOKEN_A}", "origin": "http://evil.example"})
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden-origin"
    answer = httpx2.post(mcp_http, json=INITIALIZE,
                         headers={**ACCEPT, "authorization": f"Bearer {TOKEN_A}"})
    assert answer.status_code == 200 and answer.json()["result"]["serverInfo"]["name"] == "lookback"


def test_without_tokens_it_does_not_listen(projects):
    """A TCP port, loopback included, is open to every account on the machine (issue 27):
    without tokens the MCP server runs on stdio only."""
    write_config(projects.home, "")
    done = subprocess.run([*LOOKBACK, "mcp", "--http", "--port", "0"],
                          env=environment(projects.home), capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2
    assert "without tokens" in done.stderr and "[server.tokens]" in done.stderr


def test_held_and_silent_connections_cannot_starve_a_tool_call(projects, tmp_path):
    """Issue 29 (5): 1,100 held ``GET /mcp`` used all 1,024 descriptors; tool calls went
    unanswered and the log filled with "Too many open files". Here the limit is 128 (a
    bound of 32 connections) and 300 connections are held: half a GET each, half silent."""
    write_config(projects.home, f'[server.tokens]\n"{TOKEN_A}" = ["{projects.cwd_a}"]\n')
    log_path = tmp_path / "stderr.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [*LOOKBACK, "mcp", "--http", "--port", "0"], env=environment(projects.home),
            stdout=subprocess.DEVNULL, stderr=log, cwd=Path(__file__).resolve().parents[2],
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128)))
    held: list[socket.socket] = []
    try:
        url = wait_for_listening(log_path, process)
        host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
        auth = {"authorization": f"Bearer {TOKEN_A}"}
        answer = httpx2.get(url, headers={**ACCEPT, **auth}, timeout=30)
        assert answer.status_code == 405 and answer.headers["allow"] == "POST"
        for number in range(300):
            connection = socket.create_connection((host, int(port)), timeout=30)
            if number % 2:
                connection.sendall(f"GET /mcp HTTP/1.1\r\nHost: {host}:{port}\r\n"
                                   f"Accept: text/event-stream\r\nAuthorization: Bearer "
                                   f"{TOKEN_A}\r\n\r\n".encode())
            held.append(connection)
        (failed, text), = calls(url, TOKEN_A, ("history_search", {
            "query": "AppMessage[]", "project": str(projects.cwd_a), "scope": "project"}))
        assert not failed and EARLY_USER_TEXT.split(";")[0] in text
    finally:
        for connection in held:
            connection.close()
        process.terminate()
        process.wait(timeout=30)
    lines = log_path.read_text().splitlines()
    assert not [line for line in lines if "Too many open files" in line]
    overload = [json.loads(line) for line in lines if '"mcp-overload"' in line]
    # one line per 10 s with its count, not one per connection (268 closed or refused)
    assert 1 <= len(overload) < 10 and overload[0]["limit"] == 32


def wait_for_listening(log_path: Path, process: subprocess.Popen) -> str:
    """The /mcp URL of the server logging to ``log_path``, once it listens."""
    while process.poll() is None:
        for line in log_path.read_text().splitlines():
            if '"listening"' in line:
                return json.loads(line)["url"]
        time.sleep(0.05)
    raise AssertionError(f"lookback mcp --http exited: {log_path.read_text()[-2000:]}")
