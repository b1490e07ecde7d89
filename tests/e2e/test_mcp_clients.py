"""`lookback mcp` answering the real MCP clients, offline: Claude Code (registered with its own
`claude mcp add`) and Pi 1.x (its `mcp.json`, with `"exposure": "direct"` so the model sees
the tools; Pi's default, codemode, reaches them only from scripts).

Each test indexes the compacted e2e session (its early turn about `AppMessage[]` is out of
the model's context), lets the fake model call `history_search` through the client, and checks
that the tool result the client hands back to the model quotes that turn in an evidence
envelope. A Codex test is one more function of the same shape (its `codex mcp add` and a fake
Responses API).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import index_paths

from .claude_harness import CALL_TOOL, ClaudeRunner, FakeAnthropic, install_claude, text_of
from .harness import (
    EVIDENCE_HEADER,
    FakeModelServer,
    PiRunner,
    install_pi1,
    message_text,
    prepare_session,
    tool_call_reply,
    write_agent_dir,
)
from .npm_install import installed_or_fail

LOOKBACK = str(Path(sys.executable).with_name("lookback"))
#: The early turn of the fixture, as the evidence envelope quotes it.
EARLY_QUOTED = ('Quoted content JSON: "get messages(): Message[]; '
                'not AppMessage with our extension?"')
SEARCH = "mcp__lookback__history_search"


@pytest.fixture
def indexed(tmp_path: Path) -> tuple[Path, Path]:
    """(Lookback's data directory, the project folder) with the compacted session indexed."""
    project = tmp_path / "project"
    project.mkdir()
    sessions = tmp_path / "indexed-sessions"
    sessions.mkdir()
    data = tmp_path / "lookback-data"
    report = index_paths(data, prepare_session(sessions, project))
    assert report.read.entries == 7
    return data, project


def server_env(data: Path) -> dict[str, str]:
    """What `lookback mcp` runs with: this test's data, no background tailing."""
    return {"LOOKBACK_HOME": str(data), "LOOKBACK_FRESHNESS__TAIL": "false",
            "LOOKBACK_SESSIONS_DIR": str(data / "no-sessions")}


def test_claude_code_calls_history_search_and_receives_the_quoted_turn(indexed, tmp_path):
    data, project = indexed
    command = installed_or_fail(install_claude, "Claude Code")
    with FakeAnthropic() as model:
        runner = ClaudeRunner(command, model, tmp_path / "home")
        runner.home.mkdir()
        env = runner.environment(None)
        added = subprocess.run(
            [*command, "mcp", "add", "--scope", "user", "lookback",
             *(f"--env={k}={v}" for k, v in server_env(data).items()),
             "--", LOOKBACK, "mcp", "--provider", "anthropic"],
            cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert added.returncode == 0, added.stderr
        arguments = {"query": "AppMessage[]", "scope": "project", "project": str(project)}
        run = runner.run(project, f"{CALL_TOOL} {SEARCH} {json.dumps(arguments)}",
                         "--allowedTools", SEARCH)
    assert run.returncode == 0, run.stderr
    results = [block for request in run.requests for message in request["messages"]
               if message.get("role") == "user" and isinstance(message.get("content"), list)
               for block in message["content"]
               if isinstance(block, dict) and block.get("type") == "tool_result"]
    assert results, f"Claude Code sent no tool result; stdout: {run.stdout[-500:]}"
    text = text_of(results[-1].get("content"))
    assert not results[-1].get("is_error"), text
    assert EVIDENCE_HEADER in text and EARLY_QUOTED in text


def test_pi_1x_calls_history_search_and_receives_the_quoted_turn(indexed, tmp_path):
    data, project = indexed
    pi, node_env = installed_or_fail(install_pi1, "Pi 1.x")
    with FakeModelServer() as model:
        agent_dir = write_agent_dir(tmp_path / "agent", model.port)
        env = {**os.environ, **node_env, "PI_CODING_AGENT_DIR": str(agent_dir),
               "PI_OFFLINE": "1"}
        added = subprocess.run(
            [str(pi), "mcp", "add", "lookback", "--exposure", "direct",
             *(part for k, v in server_env(data).items() for part in ("--env", f"{k}={v}")),
             "--", LOOKBACK, "mcp", "--provider", "fakellm"],
            cwd=project, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert added.returncode == 0, added.stderr
        registered = json.loads((agent_dir / "mcp.json").read_text())["mcpServers"]["lookback"]
        assert registered["exposure"] == "direct"  # Pi's default, codemode, hides the tools
        arguments = {"query": "AppMessage[]", "scope": "project", "project": str(project)}
        model.script.append(tool_call_reply(SEARCH, arguments))
        # --no-extensions (the runner's isolation) also drops the built-in MCP support.
        runner = PiRunner(pi=pi, model=model, agent_dir=agent_dir, extension=None, timeout=180,
                          flags=("-e", "builtin:mcp"))
        session = prepare_session(tmp_path, project)
        run = runner.run(session, "What did we say about AppMessage?",
                         env={**node_env, "PATH": node_env.get("PATH", os.environ["PATH"])})
    assert run.returncode == 0, run.stderr[-2000:]
    declared = [tool["function"]["name"] for tool in run.requests[0].get("tools") or []]
    assert SEARCH in declared
    results = [m for request in run.requests for m in request["messages"]
               if m.get("role") == "tool"]
    assert results, f"Pi sent no tool result; stderr: {run.stderr[-1000:]}"
    text = message_text(results[-1])
    assert EVIDENCE_HEADER in text and EARLY_QUOTED in text
