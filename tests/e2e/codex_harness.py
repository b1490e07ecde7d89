"""Drive the real Codex CLI offline: a pinned install, a fake Responses API, a private CODEX_HOME.

- `install_codex` puts the pinned `@openai/codex` into a cache folder with npm (reused when
  present). npm pulls the platform package holding the static binary
  (`vendor/<target>/bin/codex`); the tests run that binary directly, as the npm wrapper does.
- `FakeResponses` speaks the streaming Responses API (`POST /v1/responses`, SSE events
  `response.created` … `response.completed`) and records every request (headers and body):
  `body["input"]` is exactly what Codex sent to the model. What it answers is decided by the
  request (see `plan_reply`): a compaction request gets a summary, a tool output a short
  report, a prompt with `TOOL: <command>` a shell call, `CALL_TOOL <name> <json>` a call of that
  tool, anything else an echo of the prompt. The usage it reports (the body's length / 4) is
  what `model_auto_compact_token_limit` is compared with, so a low limit forces Codex's own
  compaction.
- `CodexRunner.run` runs `codex exec …` in a project folder with `CODEX_HOME` (and `HOME`)
  pointing at private folders, so rollouts land in `<codex home>/sessions/YYYY/MM/DD/`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from . import agent_harness as agent
from .npm_install import NpmInstallError, install_into_cache

CODEX_PACKAGE = "@openai/codex"
CODEX_VERSION = "0.171.0"
#: What Codex's compaction prompt says ("You are performing a CONTEXT CHECKPOINT COMPACTION").
COMPACTION_PROMPT = "CONTEXT CHECKPOINT COMPACTION"
SUMMARY_TEXT = "FAKE-SUMMARY: the user and the assistant worked on the project."
TOOL, CALL_TOOL = "TOOL:", "CALL_TOOL"
API_KEY_VARIABLE = "FAKE_API_KEY"


# ---------------------------------------------------------------------------------------------
# Installing Codex


def codex_cache_dir() -> Path:
    """Where the pinned CLI is installed: `$LOOKBACK_TEST_CODEX_CACHE` or
    ~/.cache/lookback-e2e/codex-<version>."""
    return agent.cli_cache_dir("LOOKBACK_TEST_CODEX_CACHE", f"codex-{CODEX_VERSION}")


def codex_binary(cache: Path) -> Path | None:
    found = sorted((cache / "node_modules" / "@openai").glob("**/vendor/*/bin/codex"))
    return found[0] if found else None


def install_codex(cache: Path | None = None, timeout: float = 900) -> Path:
    """Install the pinned Codex into `cache` unless it is there; return its binary."""
    cache = cache or codex_cache_dir()
    npm = shutil.which("npm")
    if codex_binary(cache) is None:
        if npm is None:
            raise NpmInstallError("npm is not on PATH; the Codex e2e tests need it")
        install_into_cache(npm, f"{CODEX_PACKAGE}@{CODEX_VERSION}", cache,
                           lambda folder: codex_binary(folder) is not None, timeout)
    binary = codex_binary(cache)
    assert binary is not None
    return binary


# ---------------------------------------------------------------------------------------------
# The fake Responses API


def item_text(item: dict) -> str:
    """All text of one input item (message parts, a tool output: a string, or parts for an
    MCP tool's result)."""
    parts: list[str] = []
    for value in (item.get("content"), item.get("output")):
        if isinstance(value, str):
            parts.append(value)
        for part in value if isinstance(value, list) else []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
    return "\n".join(parts)


def last_user_text(items: list[dict]) -> str:
    for item in reversed(items):
        if item.get("type", "message") == "message" and item.get("role") == "user":
            return item_text(item)
    return ""


def plan_reply(request: Recorded, number: int) -> list[dict]:
    """The output items answering one request."""
    items = request.body.get("input") or []
    last = items[-1] if items else {}
    prompt = last_user_text(items)
    if last.get("type") in ("function_call_output", "custom_tool_call_output"):
        return [_message(number, f"Tool finished. Output was: {item_text(last).strip()[:200]}")]
    if request.kind == "compaction" or COMPACTION_PROMPT in prompt:
        return [_message(number, SUMMARY_TEXT)]
    if CALL_TOOL in prompt:
        name, _, arguments = prompt.split(CALL_TOOL, 1)[1].strip().split("\n")[0].partition(" ")
        return [_call(number, name, json.loads(arguments or "{}"))]
    command = re.search(r"TOOL:\s*(.+)", prompt)
    if command:
        return [_call(number, "exec_command", {"cmd": command.group(1).strip()})]
    line = prompt.strip().splitlines()[-1] if prompt.strip() else ""
    return [_message(number, f"Noted (reply {number}): {line[:160]}")]


def _message(number: int, text: str) -> dict:
    return {"type": "message", "role": "assistant", "id": f"msg_fake{number:04d}",
            "content": [{"type": "output_text", "text": text}]}


def _call(number: int, name: str, arguments: dict) -> dict:
    """A function call; an MCP tool (``mcp__<server>__<tool>``) is called in its namespace,
    the way Codex declares those tools (a ``namespace`` tool ``mcp__<server>``)."""
    call = {"type": "function_call", "id": f"fc_fake{number:04d}",
            "call_id": f"call_{number:04d}", "name": name, "arguments": json.dumps(arguments)}
    if name.startswith("mcp__") and name.count("__") >= 2:
        namespace, _, tool = name.rpartition("__")
        call.update(name=tool, namespace=namespace)
    return call


def _events(response_id: str, items: list[dict], input_tokens: int) -> Iterator[dict]:
    yield {"type": "response.created", "response": {"id": response_id}}
    for item in items:
        yield {"type": "response.output_item.added", "item": {**item, "content": []}
               if item["type"] == "message" else item}
        if item["type"] == "message":
            yield {"type": "response.output_text.delta", "item_id": item["id"],
                   "delta": item["content"][0]["text"]}
        yield {"type": "response.output_item.done", "item": item}
    yield {"type": "response.completed", "response": {"id": response_id, "usage": {
        "input_tokens": input_tokens, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 20, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + 20}}}


class Recorded(NamedTuple):
    headers: dict[str, str]
    body: dict

    @property
    def metadata(self) -> dict:
        try:
            return json.loads(self.headers.get("x-codex-turn-metadata") or "{}")
        except ValueError:
            return {}

    @property
    def kind(self) -> str | None:
        return self.metadata.get("request_kind")


class FakeResponses(agent.FakeModelAPI):
    """A streaming Responses API on 127.0.0.1 for the `with` block; records the requests."""

    base_path = "/v1"
    protocol_version = "HTTP/1.1"

    def answer(self, path: str, headers: Mapping[str, str], raw: bytes) -> agent.Answer:
        if not path.split("?")[0].endswith("/responses"):
            return agent.NOT_FOUND
        recorded = Recorded(dict(headers), json.loads(raw or b"{}"))
        number = self.record(recorded)
        items = plan_reply(recorded, number)
        return 200, "text/event-stream", agent.sse(
            (event["type"], event)
            for event in _events(f"resp_fake{number:04d}", items, max(1, len(raw) // 4)))

    def answer_get(self, path: str) -> agent.Answer:
        if path.rstrip("/").endswith("/models"):
            return 200, "application/json", b'{"object": "list", "data": []}'
        return agent.NOT_FOUND


# ---------------------------------------------------------------------------------------------
# Running Codex


class CodexRun(agent.AgentRun):
    __slots__ = ()

    def turns(self) -> list[Recorded]:
        """The sampling requests of this run (compaction requests left out)."""
        return [r for r in self.requests if r.kind != "compaction"]


def config_toml(model_url: str) -> str:
    """A CODEX_HOME config.toml pointing at the fake model (no network, no updates)."""
    return f"""model_provider = "fake"
model = "fake-model"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.fake]
name = "Fake Responses"
base_url = "{model_url}"
wire_api = "responses"
env_key = "{API_KEY_VARIABLE}"
request_max_retries = 0
stream_max_retries = 0
supports_websockets = false
"""


@dataclass
class CodexRunner:
    """Runs the real `codex exec` against the fake model with a private CODEX_HOME."""

    binary: Path
    model: FakeResponses
    root: Path  # holds codex-home/, home/, tmp/
    timeout: float = 180

    @property
    def codex_home(self) -> Path:
        return self.root / "codex-home"

    def setup(self) -> None:
        for name in ("codex-home", "home", "tmp"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        (self.codex_home / "config.toml").write_text(config_toml(self.model.url))

    def environment(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """Nothing of the machine's Codex or Lookback set-up leaks in."""
        return agent.clean_environment(("CODEX_", "OPENAI_"), {
            "CODEX_HOME": str(self.codex_home), "HOME": str(self.root / "home"),
            "TMPDIR": str(self.root / "tmp"), API_KEY_VARIABLE: "dummy-not-a-secret"}, env)

    def run(self, project: Path, *args: str, env: dict[str, str] | None = None) -> CodexRun:
        """One `codex exec ARGS…` in `project` (stdin closed); what the model received."""
        return CodexRun(*agent.run_cli([str(self.binary), "exec", *args], project, self.model,
                                   self.environment(env), self.timeout,
                                   stdin=subprocess.DEVNULL))

    def rollouts(self) -> list[Path]:
        return sorted((self.codex_home / "sessions").glob("**/rollout-*.jsonl"))


def thread_id_of(run: CodexRun) -> str:
    """The thread id `codex exec --json` printed (its `thread.started` event)."""
    for line in run.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("thread_id"), str):
            return event["thread_id"]
    raise AssertionError(f"no thread id in codex output: {run.stdout[-500:]} {run.stderr[-500:]}")


def make_project(folder: Path) -> Path:
    """A small git project (Codex expects a repository) with an AGENTS.md."""
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "config.py").write_text(
        'def parseConfigLegacy(path):\n    """Read the old INI config."""\n'
        "    return open(path).read()\n")
    (folder / "AGENTS.md").write_text("# Project notes for agents\nRun tests with `make test`.\n")
    git = ["git", "-c", "user.email=e2e@example.invalid", "-c", "user.name=e2e"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=folder, check=True)
    subprocess.run([*git, "add", "-A"], cwd=folder, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=folder, check=True)
    return folder
