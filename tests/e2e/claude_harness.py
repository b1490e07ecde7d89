"""Drive the real Claude Code CLI offline: a pinned install, a fake Messages API, a private HOME.

- `install_claude` puts the pinned `@anthropic-ai/claude-code` into a cache folder with npm
  (reused when present). Its native binary comes in the platform package and runs through the
  package's `cli-wrapper.cjs`, whether or not npm ran the postinstall step.
- `FakeAnthropic` speaks the streaming Messages API (`POST /v1/messages`, SSE events
  `message_start` … `message_stop`) and records every request body: `body["messages"]` (and
  `body["system"]`) is exactly what Claude Code sent to the model. What it answers is decided by
  markers in the latest user prompt (see `plan_reply`), so a test scripts a session by its
  prompts alone.
- `ClaudeRunner.run` runs `claude -p` with `HOME` pointing at a private folder, so sessions land
  in `<home>/.claude/projects/<slug>/<sessionId>.jsonl` and nothing of the machine leaks in.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import agent_harness as agent
from .npm_install import NpmInstallError, install_into_cache

CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
CLAUDE_VERSION = "2.1.328"
FAKE_REPLY = "Noted: answer from the fake model."
#: The compaction request's prompt ("Your task is to create a detailed summary …").
SUMMARY_REQUEST = "create a detailed summary"
#: Prompt markers: the fake model answers with a Bash call, an Agent call, thinking, or a
#: usage report high enough for `--autocompact 100000` to compact before the next prompt.
RUN_BASH, SPAWN_AGENT, THINK_FIRST, HIGH_USAGE = "RUN_BASH", "SPAWN_AGENT", "THINK_FIRST", \
    "HIGH_USAGE"
#: `CALL_TOOL <name> <json arguments>` in a prompt: the fake model calls that tool (an MCP
#: tool is `mcp__<server>__<tool>`) and, once its result comes back, answers in text.
CALL_TOOL = "CALL_TOOL"
THINKING_TEXT = "Private reasoning THOUGHT_SECRET_77, never to be indexed."
SUMMARY_TEXT = ("<analysis>Reviewed the turns.</analysis>\n<summary>1. The user and the "
                "assistant worked on the project. No identifiers are kept in this summary."
                "</summary>")


# ---------------------------------------------------------------------------------------------
# Installing Claude Code


def claude_cache_dir() -> Path:
    """Where the pinned CLI is installed: `$LOOKBACK_TEST_CLAUDE_CACHE` or
    ~/.cache/lookback-e2e/claude-code-<version>."""
    return agent.cli_cache_dir("LOOKBACK_TEST_CLAUDE_CACHE", f"claude-code-{CLAUDE_VERSION}")


def claude_wrapper(cache: Path) -> Path:
    return cache / "node_modules" / "@anthropic-ai" / "claude-code" / "cli-wrapper.cjs"


def install_claude(cache: Path | None = None, timeout: float = 900) -> list[str]:
    """Install the pinned Claude Code into `cache` unless it is there; return the command that
    runs it (`node <cli-wrapper.cjs>`)."""
    cache = cache or claude_cache_dir()
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise NpmInstallError("node/npm are not on PATH; the Claude Code e2e tests need them")
    if not claude_wrapper(cache).exists():
        install_into_cache(npm, f"{CLAUDE_PACKAGE}@{CLAUDE_VERSION}", cache,
                           lambda folder: claude_wrapper(folder).exists(), timeout)
    return [node, str(claude_wrapper(cache))]


# ---------------------------------------------------------------------------------------------
# The fake Messages API


def text_of(content: Any) -> str:
    """The text of an Anthropic message content (a string or blocks; tool results included)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            parts.append(text_of(block.get("content")))
    return "\n".join(parts)


def last_user(body: dict) -> dict:
    """The last user-role message of a request (Claude Code may append system messages)."""
    return next((m for m in reversed(body.get("messages") or []) if m.get("role") == "user"), {})


def plan_reply(body: dict, number: int) -> tuple[list[dict], str, int]:
    """(content blocks, stop reason, reported input tokens) for one request, from its markers."""
    last = last_user(body)
    content = last.get("content")
    if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                         for b in content):
        return [{"type": "text", "text": "Tool finished; reported back."}], "end_turn", 50
    text = text_of(content)
    if SUMMARY_REQUEST in text:
        return [{"type": "text", "text": SUMMARY_TEXT}], "end_turn", 50
    if RUN_BASH in text:
        command = text.split(RUN_BASH, 1)[1].strip().split("\n")[0] or "echo hi"
        return [_tool_use(number, "Bash", {"command": command,
                                           "description": "Run the command"})], "tool_use", 50
    if CALL_TOOL in text:
        name, _, arguments = text.split(CALL_TOOL, 1)[1].strip().split("\n")[0].partition(" ")
        return [_tool_use(number, name, json.loads(arguments or "{}"))], "tool_use", 50
    if SPAWN_AGENT in text:
        task = text.split(SPAWN_AGENT, 1)[1].strip().split("\n")[0] or "look around"
        return [_tool_use(number, "Agent", {"description": "Sub task",
                                            "prompt": f"Sub-agent task: {task}",
                                            "subagent_type": "general-purpose"})], "tool_use", 50
    reply: list[dict] = [{"type": "text", "text": FAKE_REPLY}]
    if THINK_FIRST in text:
        reply.insert(0, {"type": "thinking", "thinking": THINKING_TEXT, "signature": "sig-fake"})
    return reply, "end_turn", (190_000 if HIGH_USAGE in text else 50)


def _tool_use(number: int, name: str, arguments: dict) -> dict:
    return {"type": "tool_use", "id": f"toolu_fake{number:04d}", "name": name, "input": arguments}


def _events(blocks: list[dict], stop: str, input_tokens: int, model: str,
            number: int) -> Iterator[tuple[str, dict]]:
    yield "message_start", {"type": "message_start", "message": {
        "id": f"msg_fake{number:04d}", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}
    for index, block in enumerate(blocks):
        start, deltas = _block_stream(block)
        yield "content_block_start", {"type": "content_block_start", "index": index,
                                      "content_block": start}
        for delta in deltas:
            yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                          "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 12}}
    yield "message_stop", {"type": "message_stop"}


def _block_stream(block: dict) -> tuple[dict, list[dict]]:
    if block["type"] == "text":
        return {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}]
    if block["type"] == "thinking":
        return ({"type": "thinking", "thinking": "", "signature": ""},
                [{"type": "thinking_delta", "thinking": block["thinking"]},
                 {"type": "signature_delta", "signature": block["signature"]}])
    return ({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}},
            [{"type": "input_json_delta", "partial_json": json.dumps(block["input"])}])


class FakeAnthropic(agent.FakeModelAPI):
    """A streaming Messages API on 127.0.0.1 for the `with` block; records request bodies
    (token counting left out). Each run's replies are numbered from 1, as in the recorded
    fixtures."""

    numbers_per_run = True

    def answer(self, path: str, headers: Mapping[str, str], raw: bytes) -> agent.Answer:
        body = json.loads(raw or b"{}")
        if "count_tokens" in path:
            return 200, "application/json", json.dumps({"input_tokens": 100}).encode()
        number = self.record(body)
        blocks, stop, tokens = plan_reply(body, number)
        return 200, "text/event-stream", agent.sse(_events(blocks, stop, tokens,
                                                     body.get("model", "claude"), number))


# ---------------------------------------------------------------------------------------------
# Running Claude Code


ClaudeRun = agent.AgentRun


@dataclass
class ClaudeRunner:
    """Runs the real `claude -p` against the fake API with a private HOME."""

    command: list[str]
    model: FakeAnthropic
    home: Path
    timeout: float = 120

    def environment(self, env: dict[str, str] | None) -> dict[str, str]:
        """Nothing of the machine's Claude Code or Lookback set-up leaks in."""
        return agent.clean_environment(("ANTHROPIC_", "CLAUDE_"), {
            "HOME": str(self.home), "ANTHROPIC_BASE_URL": self.model.url,
            "ANTHROPIC_API_KEY": "sk-ant-fake-key", "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}, env)

    def run(self, cwd: Path, prompt: str, *flags: str,
            env: dict[str, str] | None = None) -> ClaudeRun:
        """One `claude -p PROMPT FLAGS…` in `cwd`; returns what the model received."""
        return agent.run_cli([*self.command, "-p", prompt, *flags], cwd, self.model,
                         self.environment(env), self.timeout)

    def projects(self) -> Path:
        return self.home / ".claude" / "projects"

    def session_files(self) -> list[Path]:
        """Main session files (sub-agent transcripts left out), oldest first."""
        found = [p for p in self.projects().glob("*/*.jsonl")]
        return sorted(found, key=lambda p: p.stat().st_mtime_ns)
