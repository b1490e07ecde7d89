"""Service mode with several worker hosts: a tool asked on a host that does not hold the
project gets the owner host's answer (forwarded once, with the caller's token), rendered
exactly as a local one; the owner's refusal stays a refusal."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from lookback.mcp import HistoryTools, ToolRefused
from lookback.server import ReaderApp, make_server
from tests.server.conftest import settings_for
from workers.owner import Owner
from workers.routes import Route

from .conftest import SESSION_ID, TOKEN_A, TOKEN_B, Projects

REFUSED = "refused: this client is not granted that project or session, or it is not indexed"


class OwnerHost:
    """The part of ``server.routing.Router`` the reader asks: where a project lives (the
    owner's reader, for every project) and the owner's answer over HTTP."""

    timeout = 10.0

    def __init__(self, url: str) -> None:
        self.url = url
        self.forwarded = 0

    def where(self, project: str) -> Route:
        return Route(owner=Owner(host="owner", home="/elsewhere"), live=True, reader=self.url)

    def forward(self, url: str, method: str, path: str, body: bytes,
                authorization: str | None, timeout: float) -> tuple[int, bytes] | None:
        self.forwarded += 1
        where = urlsplit(url)
        connection = http.client.HTTPConnection(where.hostname, where.port, timeout=timeout)
        try:
            connection.request(method, path, body, {"content-type": "application/json",
                                                    "authorization": authorization or ""})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def close(self) -> None:
        pass


def tokens(projects: Projects) -> dict[str, list[str]]:
    return {TOKEN_A: [str(projects.cwd_a)], TOKEN_B: [str(projects.cwd_b)]}


@pytest.fixture
def owner_url(projects: Projects) -> Iterator[str]:
    settings = settings_for(projects.home, server__tokens=tokens(projects),
                            freshness__tail=False)
    server = make_server(settings, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        server.app.close()
        thread.join(timeout=5)


def test_a_tool_on_a_host_without_the_project_answers_with_the_owners(projects, owner_url,
                                                                      tmp_path: Path):
    owner = ReaderApp(settings_for(projects.home, server__tokens=tokens(projects),
                                   freshness__tail=False))
    empty = tmp_path / "empty-home"
    empty.mkdir()
    # Here token B is granted project A too; the owner, which decides, does not grant it.
    wider = {**tokens(projects), TOKEN_B: [str(projects.cwd_a), str(projects.cwd_b)]}
    here = ReaderApp(settings_for(empty, server__tokens=wider, freshness__tail=False))
    route = here.router = OwnerHost(owner_url)
    try:
        asked = {"query": "AppMessage[]", "project": str(projects.cwd_a), "scope": "project"}
        local = HistoryTools(owner).search(f"Bearer {TOKEN_A}", **asked)
        assert f"(session {SESSION_ID})" in local
        assert HistoryTools(here).search(f"Bearer {TOKEN_A}", **asked) == local
        read = {"entry_id": "a1000002", "session_id": SESSION_ID,
                "project": str(projects.cwd_a)}
        assert HistoryTools(here).read(f"Bearer {TOKEN_A}", **read) \
            == HistoryTools(owner).read(f"Bearer {TOKEN_A}", **read)
        assert route.forwarded == 2
        with pytest.raises(ToolRefused, match=REFUSED):
            HistoryTools(here).search(f"Bearer {TOKEN_B}", **asked)
        assert route.forwarded == 3  # the owner's 403, passed on as the same refusal
        # A token not granted the project here is refused before anything is forwarded.
        with pytest.raises(ToolRefused, match=REFUSED):
            HistoryTools(here).search(f"Bearer {TOKEN_A}", query="AppMessage[]",
                                      project=str(projects.cwd_b))
        assert route.forwarded == 3
    finally:
        here.router = None
        here.close()
        owner.close()
