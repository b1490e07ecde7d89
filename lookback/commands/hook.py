"""``lookback hook claude-code|codex``: the agent's UserPromptSubmit hook through the CLI.

Reads the hook input on stdin, prints the evidence as ``additionalContext`` (see
``lookback.claude_hook`` and ``lookback.codex_hook``). Fail-open: whatever goes wrong —
settings included — it prints nothing and exits 0. ``lookback install …`` writes a leaner
command that runs the same code without the CLI's start-up.
"""

from __future__ import annotations

import argparse
import os
import sys

from lookback import claude_hook, codex_hook
from lookback.background import tcp_url
from lookback.commands.common import add_command, load
from lookback.settings import Settings

SUMMARY = "agent hooks: `lookback hook claude-code|codex` (UserPromptSubmit)"
DESCRIPTION = """Run as Claude Code's or Codex's UserPromptSubmit hook: read the hook input on
stdin, ask the reader (lookback serve), print the evidence as additionalContext. Never fails: on
any problem it prints nothing."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "hook", run, SUMMARY, DESCRIPTION)
    parser.add_argument("agent", choices=["claude-code", "codex"])


def hook_budget(settings: Settings) -> int:
    """The evidence budget the hook asks for: the settings', capped at what Claude Code
    takes whole (``claude_hook.MAX_CONTEXT_TOKENS``)."""
    return min(settings.retrieval.max_retrieved_history_tokens, claude_hook.MAX_CONTEXT_TOKENS)


def codex_budget(settings: Settings) -> int:
    """The evidence budget the Codex hook asks for per prompt: the settings', capped at
    Codex's additionalContext limit (``codex_hook.MAX_CONTEXT_TOKENS``)."""
    return min(settings.retrieval.max_retrieved_history_tokens, codex_hook.MAX_CONTEXT_TOKENS)


def run(args: argparse.Namespace) -> int:
    try:
        settings = load(args)
    except Exception:  # fail-open: a broken settings file adds nothing, blocks nothing
        return 0
    if os.environ.get("LOOKBACK_DISABLED"):
        return 0
    url, home = tcp_url(settings), str(settings.home)
    if getattr(args, "agent", "claude-code") == "codex":
        section = settings.codex
        output = codex_hook.run_hook(sys.stdin.buffer.read(claude_hook.MAX_INPUT_BYTES),
                                     url=url, provider=section.provider,
                                     timeout_ms=section.hook_timeout_ms,
                                     token=os.environ.get("LOOKBACK_TOKEN"),
                                     max_tokens=codex_budget(settings),
                                     thread_tokens=section.max_thread_tokens, home=home)
        if output:
            sys.stdout.write(output)
        return 0
    output = claude_hook.run_hook(sys.stdin.buffer.read(claude_hook.MAX_INPUT_BYTES),
                                  url=url,
                                  provider=settings.claude_code.provider,
                                  timeout_ms=settings.claude_code.hook_timeout_ms,
                                  token=os.environ.get("LOOKBACK_TOKEN"),
                                  max_tokens=hook_budget(settings), home=home)
    if output:
        sys.stdout.write(output)
    return 0
