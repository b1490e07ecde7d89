"""``lookback install claude-code``: add the Lookback hook to a Claude Code settings file.

Writes (or merges into) ``<project>/.claude/settings.json`` — ``--user`` for
``~/.claude/settings.json`` — one ``UserPromptSubmit`` command hook. The command runs
``lookback/claude_hook.py`` with this Python under ``-S -I`` (no ``site``, no
environment: the cheapest start) and the reader's address, provider, timeout and evidence
budget from the settings baked in as flags. Other hooks in the file are kept; a
previous Lookback hook is replaced, so re-running is harmless.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from lookback import claude_hook
from lookback.commands.common import load
from lookback.commands.hook import hook_budget
from lookback.errors import UserError
from lookback.settings import Settings

#: Marks the hook entry this command owns, so a re-run replaces it.
MARK = "claude_hook.py"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "install", help="install an agent integration: `lookback install claude-code`",
        description="Add the Lookback UserPromptSubmit hook to Claude Code's settings "
                    "(project .claude/settings.json by default). Start `lookback serve` "
                    "for it to answer; without a reader the hook adds nothing.")
    parser.add_argument("agent", choices=["claude-code"])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--project", type=Path, default=None,
                       help="project folder whose .claude/settings.json gets the hook "
                            "(default: the current folder)")
    where.add_argument("--user", action="store_true",
                       help="write ~/.claude/settings.json (every project) instead")
    parser.add_argument("--print", action="store_true",
                        help="print the settings snippet instead of writing a file")
    parser.set_defaults(handler=run)


def hook_command(settings: Settings, python: str = sys.executable) -> str:
    """The shell command Claude Code runs for each prompt."""
    section = settings.claude_code
    script = Path(claude_hook.__file__).resolve()
    parts = [python, "-S", "-I", str(script),
             "--url", f"http://{settings.server.host}:{settings.server.port}",
             "--provider", section.provider, "--timeout-ms", f"{section.hook_timeout_ms:g}",
             "--max-tokens", str(hook_budget(settings))]
    return " ".join(shlex.quote(part) for part in parts)


def hook_entry(settings: Settings) -> dict[str, Any]:
    """One UserPromptSubmit matcher group; Claude Code's own timeout (seconds) sits just
    above ours, so ours always decides."""
    seconds = int(settings.claude_code.hook_timeout_ms // 1000) + 2
    return {"hooks": [{"type": "command", "command": hook_command(settings),
                       "timeout": seconds}]}


def merged(existing: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """``existing`` settings with ``entry`` as the only Lookback UserPromptSubmit hook."""
    hooks = dict(existing.get("hooks") or {})
    groups = [group for group in hooks.get("UserPromptSubmit") or []
              if MARK not in json.dumps(group)]
    hooks["UserPromptSubmit"] = [*groups, entry]
    return {**existing, "hooks": hooks}


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    entry = hook_entry(settings)
    if args.print:
        print(json.dumps({"hooks": {"UserPromptSubmit": [entry]}}, indent=2))
        return 0
    base = Path.home() if args.user else (args.project or Path.cwd())
    target = base.expanduser().resolve() / ".claude" / "settings.json"
    existing = _read(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.lookback-{os.getpid()}")
    temporary.write_text(json.dumps(merged(existing, entry), indent=2) + "\n", encoding="utf-8")
    temporary.replace(target)  # a reader never sees half a file
    print(f"installed the Lookback UserPromptSubmit hook in {target}; "
          "start `lookback serve` for it to answer")
    return 0


def _read(target: Path) -> dict[str, Any]:
    if not target.exists():
        return {}
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise UserError(f"{target}: not readable JSON ({error}); fix or move it first") from None
    if not isinstance(data, dict):
        raise UserError(f"{target}: not a JSON object; fix or move it first")
    return data
