"""`lookback mcp` answering the real MCP clients, offline: Claude Code (registered with its own
`claude mcp add`, on stdio and over HTTP to `lookback serve --mcp` with a token) and Pi 1.x
(its `mcp.json`, with `"exposure": "direct"` so the model sees the tools; Pi's default,
codemode, reaches them only from scripts), and Codex (`codex mcp add`, its config.toml's
`[mcp_servers]`, against a fake Responses API).

Each test indexes the compacted e2e session (its early turn about `AppMessage[]` is out of
the model's context), lets the fake model call `history_search` through the client, and checks
that the tool result the client hands back to the model quotes that turn in an evidence
envelope.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mcp.conftest import TOKEN_A, TOKEN_B, make_projects, reader_with_mcp
from tests.support import index_paths

from .claude_harness import CALL_TOOL, ClaudeRunner, FakeAnthropic, install_claude, text_of
from .codex_harness import CodexRunner, FakeResponses, install_codex, item_text
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
        # No project named: Claude Code starts the server in the project's folder, which
        # is the default project of a stdio server.
        arguments = {"query": "AppMessage[]", "scope": "project"}
        run = runner.run(project, f"{CALL_TOOL} {SEARCH} {json.dumps(arguments)}",
                         "--allowedTools", SEARCH)
    assert run.returncode == 0, run.stderr
    results = tool_results(run.requests)
    assert results, f"Claude Code sent no tool result; stdout: {run.stdout[-500:]}"
    text = text_of(results[-1].get("content"))
    assert not results[-1].get("is_error"), text
    assert EVIDENCE_HEADER in text and EARLY_QUOTED in text


def tool_results(requests: list[dict]) -> list[dict]:
    """The tool_result blocks Claude Code sent back to the model, in order."""
    return [block for request in requests for message in request["messages"]
            if message.get("role") == "user" and isinstance(message.get("content"), list)
            for block in message["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"]


def test_claude_code_over_http_reads_only_its_tokens_project(tmp_path):
    """`lookback serve --mcp` with two tokens; Claude Code holds token B. Its search of
    project A is refused and carries nothing of A; its search of B quotes B's session."""
    (tmp_path / "data").mkdir()
    projects = make_projects(tmp_path, tmp_path / "data")
    command = installed_or_fail(install_claude, "Claude Code")
    with reader_with_mcp(projects) as reader:
        with FakeAnthropic() as model:
            runner = ClaudeRunner(command, model, tmp_path / "home")
            runner.home.mkdir()
            url = f"{reader}/mcp?provider=anthropic"
            added = subprocess.run(
                [*command, "mcp", "add", "--scope", "user", "--transport", "http", "lookback",
                 url, "--header", f"Authorization: Bearer {TOKEN_B}"],
                cwd=projects.cwd_b, env=runner.environment(None), capture_output=True,
                text=True, timeout=120, check=False)
            assert added.returncode == 0, added.stderr
            found = {}
            for name, project in (("a", projects.cwd_a), ("b", projects.cwd_b)):
                arguments = {"query": "AppMessage[]", "scope": "project", "project": str(project)}
                run = runner.run(projects.cwd_b, f"{CALL_TOOL} {SEARCH} {json.dumps(arguments)}",
                                 "--allowedTools", SEARCH)
                assert run.returncode == 0, run.stderr
                results = tool_results(run.requests)
                assert results, f"Claude Code sent no tool result; stdout: {run.stdout[-500:]}"
                found[name] = (results[-1].get("is_error"), text_of(results[-1].get("content")))
    refused, text_a = found["a"]
    assert refused and "refused" in text_a
    assert EVIDENCE_HEADER not in text_a and "AppMessage" not in text_a
    assert "0193f7a2-5c1e" not in text_a  # project A's session id
    shown, text_b = found["b"]
    assert not shown and EARLY_QUOTED in text_b and "0193f7a2-0000" in text_b


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
        arguments = {"query": "AppMessage[]", "scope": "project"}  # Pi runs it in the cwd too
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


def test_pi_1x_over_http_with_a_bearer_token(tmp_path):
    """Pi 1.x registered with `pi mcp add --url … --bearer-token-env-var` against
    `lookback serve --mcp`: token A's Pi gets project A's quoted turn."""
    (tmp_path / "data").mkdir()
    projects = make_projects(tmp_path, tmp_path / "data")
    pi, node_env = installed_or_fail(install_pi1, "Pi 1.x")
    with reader_with_mcp(projects) as reader:
        with FakeModelServer() as model:
            agent_dir = write_agent_dir(tmp_path / "agent", model.port)
            env = {**os.environ, **node_env, "PI_CODING_AGENT_DIR": str(agent_dir),
                   "PI_OFFLINE": "1"}
            url = f"{reader}/mcp?provider=fakellm"
            run_command = [str(pi), "mcp", "add", "lookback", "--exposure", "direct", "--url",
                           url, "--bearer-token-env-var", "LOOKBACK_MCP_TOKEN"]
            added = subprocess.run(run_command, cwd=projects.cwd_a, env=env,
                                   capture_output=True, text=True, timeout=120, check=False)
            assert added.returncode == 0, added.stderr
            arguments = {"query": "AppMessage[]", "scope": "project",
                         "project": str(projects.cwd_a)}
            model.script.append(tool_call_reply(SEARCH, arguments))
            runner = PiRunner(pi=pi, model=model, agent_dir=agent_dir, extension=None,
                              timeout=180, flags=("-e", "builtin:mcp"))
            session = prepare_session(tmp_path, projects.cwd_a)
            run = runner.run(session, "What did we say about AppMessage?",
                             env={**node_env, "LOOKBACK_MCP_TOKEN": TOKEN_A})
    assert run.returncode == 0, run.stderr[-2000:]
    results = [m for request in run.requests for m in request["messages"]
               if m.get("role") == "tool"]
    assert results, f"Pi sent no tool result; stderr: {run.stderr[-1000:]}"
    text = message_text(results[-1])
    assert EVIDENCE_HEADER in text and EARLY_QUOTED in text


def test_codex_calls_history_search_and_receives_the_quoted_turn(indexed, tmp_path):
    data, project = indexed
    binary = installed_or_fail(install_codex, "Codex")
    with FakeResponses() as model:
        runner = CodexRunner(binary, model, tmp_path / "codex")
        runner.setup()
        added = subprocess.run(
            [str(binary), "mcp", "add", "lookback",
             *(part for k, v in server_env(data).items() for part in ("--env", f"{k}={v}")),
             "--", LOOKBACK, "mcp", "--provider", "openai"],
            cwd=project, env=runner.environment(), capture_output=True, text=True,
            timeout=120, check=False)
        assert added.returncode == 0, added.stderr
        config = runner.codex_home / "config.toml"
        assert "[mcp_servers.lookback]" in config.read_text()
        # Codex gives an optional server 1 s to start before it leaves its tools out of the
        # turn; `lookback mcp` (the SDK's imports) takes longer: required, as docs/mcp.md says
        config.write_text(config.read_text().replace(
            "[mcp_servers.lookback]\n",
            "[mcp_servers.lookback]\nrequired = true\nstartup_timeout_sec = 60\n"))
        arguments = {"query": "AppMessage[]", "scope": "project", "project": str(project)}
        run = runner.run(project, "--skip-git-repo-check",
                         f"{CALL_TOOL} {SEARCH} {json.dumps(arguments)}")
    assert run.returncode == 0, run.stderr[-2000:]
    declared = {f"{t['name']}__{inner['name']}" for t in run.requests[0].body.get("tools") or []
                if t.get("type") == "namespace" for inner in t.get("tools") or []}
    assert SEARCH in declared, declared  # Codex declares them as the namespace mcp__lookback
    outputs = [item for request in run.requests for item in request.body.get("input") or []
               if item.get("type") == "function_call_output"]
    assert outputs, f"Codex sent no tool output; stderr: {run.stderr[-1000:]}"
    text = item_text(outputs[-1])
    assert EVIDENCE_HEADER in text and EARLY_QUOTED in text
