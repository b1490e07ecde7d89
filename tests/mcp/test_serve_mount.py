"""`lookback serve --mcp`: the MCP endpoint inside the reader's own process and port, behind
its transport's guard, with the same tokens and grants as /v1/* (and as `lookback mcp
--http`)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import pytest

from lookback.server import ReaderApp

from .conftest import SESSION_ID, TOKEN_A, TOKEN_B, Projects, reader_with_mcp
from .test_http import ACCEPT, INITIALIZE, REFUSED, calls


@pytest.fixture
def served(projects: Projects) -> Iterator[str]:
    with reader_with_mcp(projects) as url:
        yield url


def test_the_reader_serves_mcp_beside_v1_with_the_same_grants(served, projects):
    url = f"{served}/mcp"
    own, other, status = calls(
        url, TOKEN_A,
        ("history_search", {"query": "AppMessage[]", "project": str(projects.cwd_a),
                            "scope": "project"}),
        ("history_search", {"query": "AppMessage[]", "session_file": str(projects.file_b)}),
        ("lookback_status", {}))
    assert not own[0] and f"(session {SESSION_ID})" in own[1] and "Quoted content JSON" in own[1]
    assert other[0] and other[1].endswith(REFUSED) and "0193f7a2-0000" not in other[1]
    assert not status[0] and str(projects.cwd_a) in status[1]
    assert str(projects.cwd_b) not in status[1]
    # The /v1 endpoints answer on the same port, unchanged.
    health = httpx2.get(f"{served}/v1/health", headers={"authorization": f"Bearer {TOKEN_B}"})
    assert health.status_code == 200
    assert [p["cwd"] for p in health.json()["projects"]] == [str(projects.cwd_b)]


def test_the_transports_guard_and_tokens_come_first(served):
    url = f"{served}/mcp"
    assert httpx2.post(url, json=INITIALIZE, headers=ACCEPT).status_code == 401
    answer = httpx2.post(url, json=INITIALIZE, headers={
        **ACCEPT, "authorization": f"Bearer {TOKEN_A}", "origin": "http://evil.example"})
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden-origin"
    answer = httpx2.post(url, content=b"{}", headers={
        "accept": ACCEPT["accept"], "authorization": f"Bearer {TOKEN_A}",
        "content-type": "text/plain"})
    assert answer.status_code == 415


def test_a_get_is_answered_at_once_not_held(served):
    """Issue 29 (5): the endpoint has no SSE stream; a GET is refused with 405 at once
    rather than held until the request's time limit."""
    answer = httpx2.get(f"{served}/mcp", headers={
        "accept": "text/event-stream", "authorization": f"Bearer {TOKEN_A}"}, timeout=60)
    assert answer.status_code == 405
    assert answer.json()["error"]["code"] == "method-not-allowed"


def test_the_mounted_tools_ask_the_reader_in_process_not_over_http(projects, monkeypatch):
    """Issue 32: a tool call crosses the HTTP stack once (to /mcp): the tools ask the
    ``ReaderApp`` directly, never through its HTTP face (``handle``, which every /v1
    request reaches), and still answer with the grants of the call's token."""
    asked: list[str] = []
    handle = ReaderApp.handle

    def counted(self, method, target, *args, **kwargs):
        asked.append(target)
        return handle(self, method, target, *args, **kwargs)

    monkeypatch.setattr(ReaderApp, "handle", counted)
    with reader_with_mcp(projects) as served:
        own, other, status, read = calls(
            f"{served}/mcp", TOKEN_A,
            ("history_search", {"query": "AppMessage[]", "project": str(projects.cwd_a)}),
            ("history_search", {"query": "AppMessage[]", "session_file": str(projects.file_b)}),
            ("lookback_status", {}),
            ("history_read", {"entry_id": "a1000002", "session_id": SESSION_ID,
                              "project": str(projects.cwd_a)}))
        assert asked == []
        httpx2.get(f"{served}/v1/health", headers={"authorization": f"Bearer {TOKEN_A}"})
    assert asked == ["/v1/health"]  # the spy sees every request the HTTP face answers
    assert not own[0] and f"(session {SESSION_ID})" in own[1]
    assert other[0] and other[1].endswith(REFUSED)
    assert not status[0] and str(projects.cwd_b) not in status[1]
    assert not read[0] and "Source entry: a1000002" in read[1], read
