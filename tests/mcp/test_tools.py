"""The MCP tools through the SDK's own client, in process: their schemas, the evidence
they quote, the neighbours history_read adds, and the privacy gate on every text."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from mcp import Client

from lookback.mcp import HistoryTools
from lookback.mcp_server import build_server
from lookback.server import ReaderApp
from tests.server.conftest import settings_for
from tests.server.test_freshness import entry_line

from .conftest import EARLY_USER_TEXT, SESSION_ID, Projects

SECRET = "the deploy key is -----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7\n"


@pytest.fixture
def app(projects: Projects) -> Iterator[ReaderApp]:
    reader_app = ReaderApp(settings_for(projects.home, freshness__tail=False))
    yield reader_app
    reader_app.close()


def call(server: Any, name: str, arguments: dict) -> tuple[bool, str]:
    async def run() -> tuple[bool, str]:
        async with Client(server) as client:
            result = await client.call_tool(name, arguments)
            return bool(result.is_error), "".join(c.text for c in result.content)
    return asyncio.run(run())


def server_for(app: ReaderApp, projects: Projects, provider: str | None = None) -> Any:
    tools = HistoryTools(app, provider=provider, default_project=str(projects.cwd_a))
    return build_server(tools, lambda ctx: None)


def test_three_tools_with_schemas_and_descriptions(app, projects):
    async def listed() -> dict:
        async with Client(server_for(app, projects)) as client:
            return {t.name: t for t in (await client.list_tools()).tools}
    tools = asyncio.run(listed())
    assert set(tools) == {"history_search", "history_read", "lookback_status"}
    search = tools["history_search"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["scope"]["enum"] == ["branch", "session", "project"]
    assert search["properties"]["limit"]["maximum"] == 50
    assert tools["history_read"].input_schema["required"] == ["entry_id"]
    for tool in tools.values():
        assert len(tool.description) > 60 and tool.annotations.read_only_hint is True


def test_search_quotes_the_compacted_turn_in_an_evidence_envelope(app, projects):
    failed, text = call(server_for(app, projects), "history_search",
                        {"query": "AppMessage[]", "scope": "project"})
    assert not failed
    assert text.startswith("2 results (project scope).")
    assert f"Source entry: a1000001 (session {SESSION_ID})" in text
    assert f"Quoted content JSON: {json.dumps(EARLY_USER_TEXT)}" in text
    assert text.count("[DS4 HISTORICAL EVIDENCE") == text.count("[END DS4 HISTORICAL EVIDENCE]")


def test_search_by_session_file_and_branch_scope(app, projects):
    failed, text = call(server_for(app, projects), "history_search",
                        {"query": "AppMessage[]", "session_file": str(projects.file_b)})
    assert not failed and "(branch scope)" in text
    assert "0193f7a2-0000-7b3a-9d4e-2f6a8c0b1d3e" in text  # project B's session, not A's
    assert SESSION_ID not in text


def test_read_gives_the_entry_and_its_neighbours_in_order(app, projects):
    failed, text = call(server_for(app, projects), "history_read",
                        {"entry_id": "a1000002", "session_id": SESSION_ID, "before": 1,
                         "after": 2})
    assert not failed
    ids = [line.split()[2] for line in text.splitlines() if line.startswith("Source entry:")]
    assert ids == ["a1000001", "a1000002", "a1000003", "a1000004"]
    assert "Reason: read by id: the entry asked for" in text


def test_unknown_project_and_session_are_refused_or_not_indexed(app, projects):
    server = server_for(app, projects)
    failed, text = call(server, "history_search",
                        {"query": "AppMessage", "project": str(projects.home / "nowhere")})
    assert "Not indexed" in text or failed
    failed, text = call(server, "history_read", {"entry_id": "a1000002"})
    assert failed and "session_id" in text


def test_every_tool_text_passes_the_privacy_gate(app, projects):
    with open(projects.file_a, "a", encoding="utf-8") as handle:
        handle.write(entry_line("a1000008", "a1000007", SECRET))
    remote = server_for(app, projects)  # no provider: the remote default policy
    for name, arguments in [
        ("history_search", {"query": "deploy key", "scope": "project"}),
        ("history_read", {"entry_id": "a1000008", "session_id": SESSION_ID}),
        ("history_read", {"entry_id": "a1000007", "session_id": SESSION_ID, "after": 3}),
    ]:
        failed, text = call(remote, name, {**arguments, "session_file": str(projects.file_a)})
        assert not failed, text
        assert "MIIEowIBAAKCAQEA7" not in text and "withheld by the privacy policy" in text
    local = server_for(app, projects, provider="ollama")
    failed, text = call(local, "history_search",
                        {"query": "deploy key", "session_file": str(projects.file_a)})
    assert not failed and "MIIEowIBAAKCAQEA7" in text


def test_status_lists_projects_sessions_and_lag(app, projects):
    failed, text = call(server_for(app, projects), "lookback_status", {})
    assert not failed
    assert text.startswith("2 indexed projects (embedded mode).")
    assert f"cwd {projects.cwd_a}, 1 sessions, 7 entries" in text
    assert f"session {SESSION_ID}: 7 entries, up to date" in text


def test_neighbours_follow_the_entrys_own_branch_and_skip_summaries(tmp_path, home):
    """branching.jsonl: e1 → e2 → e3 → e4 → e5 (compaction) → e6, and e2 → e7 → e8 (the
    leaf). e4 is off the current branch: after it comes its own continuation, e6 (the
    compaction e5 is no evidence), never the other branch's e7."""
    from tests.support import fixture_path, index_paths

    index_paths(home, fixture_path("branching.jsonl"))
    app = ReaderApp(settings_for(home, freshness__tail=False))
    try:
        body = {"project": "/fixture", "session_id": "fixture-session", "entry_id": "e4",
                "before": 5, "after": 5, "provider": "ollama"}
        status, payload, _ = app.handle("POST", "/v1/source", None, json.dumps(body).encode())
        answer = payload if isinstance(payload, dict) else json.loads(payload)
        assert status == 200 and answer["entry"]["entry_id"] == "e4"
        assert [e["entry_id"] for e in answer["after"]] == ["e6"]
        assert [e["entry_id"] for e in answer["before"]] == ["e1", "e3"]
        assert "e7" not in json.dumps(answer)
        on_branch = {**body, "entry_id": "e1", "before": 0, "after": 5}
        status, payload, _ = app.handle("POST", "/v1/source", None,
                                        json.dumps(on_branch).encode())
        answer = payload if isinstance(payload, dict) else json.loads(payload)
        # e1 lies on the current branch (e1, e2, e7, e8): what follows it is that branch's
        # (e7; e8 has no text), nothing of the other one (e3, e4, e6).
        assert answer["status"] == "ok" and [e["entry_id"] for e in answer["after"]] == ["e7"]
    finally:
        app.close()


def test_without_the_sdk_lookback_mcp_names_the_command_that_installs_it(monkeypatch, capsys):
    """It named `pip install 'pi-lookback[mcp]'`, a package not on PyPI; the command it names
    now installs the SDK into this Python (tests/e2e/test_wheel_install.py runs it)."""
    from lookback import cli

    install = f"{sys.executable} -m pip install 'mcp>=2.3,<3'"
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # as if not installed
    assert cli.main(["mcp"]) == 2
    assert install in capsys.readouterr().err
    assert cli.main(["serve", "--mcp", "--port", "0"]) == 2
    assert install in capsys.readouterr().err


def test_the_sdk_command_fits_the_environment(monkeypatch):
    """pip where there is one; `pipx inject` in a pipx venv and uv's pip in a uv tool's venv,
    which have none (each run by hand against real pipx and uv installs: docs/mcp.md)."""
    import importlib.util

    from lookback.mcp import sdk_install_command

    assert sdk_install_command() == f"{sys.executable} -m pip install 'mcp>=2.3,<3'"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # no pip
    monkeypatch.setattr(sys, "prefix", "/home/u/.local/share/pipx/venvs/pi-lookback")
    assert sdk_install_command() == "pipx inject pi-lookback 'mcp>=2.3,<3'"
    monkeypatch.setattr(sys, "prefix", "/home/u/.local/share/uv/tools/pi-lookback")
    assert sdk_install_command() == f"uv pip install --python {sys.executable} 'mcp>=2.3,<3'"
