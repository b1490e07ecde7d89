"""``lookback install claude-code|codex``: add the Lookback hook to the agent's settings.

Claude Code: writes (or merges into) ``<project>/.claude/settings.json`` — ``--user`` for
``~/.claude/settings.json`` — one ``UserPromptSubmit`` command hook. Codex: the same hook in
``$CODEX_HOME/hooks.json`` (default ``~/.codex``) and its trust entry in
``$CODEX_HOME/config.toml`` (``lookback.codex_config``), without which ``codex exec`` skips it
silently. The command runs ``lookback/claude_hook.py`` (``codex_hook.py``) with this Python
under ``-S -I`` (no ``site``, no environment: the cheapest start) and the reader's address,
provider, timeout and evidence budget from the settings baked in as flags. Other hooks in the
file are kept; a previous Lookback hook is replaced in place, so re-running is harmless.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from lookback import claude_hook, codex_config, codex_hook
from lookback.commands.common import add_command, load
from lookback.commands.hook import codex_budget, hook_budget
from lookback.errors import UserError
from lookback.settings import Settings

#: Marks the hook entry this command owns, so a re-run replaces it.
MARK = "claude_hook.py"
CODEX_MARK = "codex_hook.py"


SUMMARY = "install an agent integration: `lookback install claude-code|codex`"
DESCRIPTION = """Add the Lookback UserPromptSubmit hook to Claude Code's settings (project
.claude/settings.json by default) or to Codex's ($CODEX_HOME/hooks.json, trusted in its
config.toml). Start `lookback serve` for it to answer; without a reader the hook adds nothing."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_command(subparsers, "install", run, SUMMARY, DESCRIPTION)
    parser.add_argument("agent", choices=["claude-code", "codex"])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--project", type=Path, default=None,
                       help="Claude Code: project folder whose .claude/settings.json gets "
                            "the hook (default: the current folder)")
    where.add_argument("--user", action="store_true",
                       help="Claude Code: write ~/.claude/settings.json (every project) "
                            "instead (Codex's hooks are always the user's)")
    parser.add_argument("--print", action="store_true",
                        help="print the settings snippet instead of writing a file")


def hook_command(settings: Settings, python: str = sys.executable) -> str:
    """The shell command Claude Code runs for each prompt."""
    section = settings.claude_code
    return _command(python, claude_hook.__file__, settings, section.provider,
                    section.hook_timeout_ms, hook_budget(settings))


def codex_hook_command(settings: Settings, python: str = sys.executable) -> str:
    """The shell command Codex runs for each prompt."""
    section = settings.codex
    return _command(python, codex_hook.__file__, settings, section.provider,
                    section.hook_timeout_ms, codex_budget(settings),
                    "--thread-tokens", str(section.max_thread_tokens))


def _command(python: str, script: str, settings: Settings, provider: str, timeout_ms: float,
             budget: int, *extra: str) -> str:
    parts = [python, "-S", "-I", str(Path(script).resolve()),
             "--url", f"http://{settings.server.host}:{settings.server.port}",
             "--provider", provider, "--timeout-ms", f"{timeout_ms:g}",
             "--max-tokens", str(budget), *extra]
    return " ".join(shlex.quote(part) for part in parts)


def hook_entry(settings: Settings) -> dict[str, Any]:
    """One UserPromptSubmit matcher group; Claude Code's own timeout (seconds) sits just
    above ours, so ours always decides."""
    seconds = int(settings.claude_code.hook_timeout_ms // 1000) + 2
    return {"hooks": [{"type": "command", "command": hook_command(settings),
                       "timeout": seconds}]}


def codex_hook_entry(settings: Settings) -> dict[str, Any]:
    """Codex's UserPromptSubmit group (its timeout in seconds, likewise above ours)."""
    seconds = int(settings.codex.hook_timeout_ms // 1000) + 2
    return {"hooks": [{"type": "command", "command": codex_hook_command(settings),
                       "timeout": seconds}]}


def merged(existing: dict[str, Any], entry: dict[str, Any], source: Path,
           mark: str = MARK) -> dict[str, Any]:
    """``existing`` settings (read from ``source``) with ``entry`` as the only Lookback
    UserPromptSubmit hook: in the place of the previous one (Codex's trust keys name
    positions), else last. UserError when their ``hooks`` are not shaped as the agents
    read them: guessing would split a string into letters or drop a table's values."""
    hooks = existing.get("hooks") or {}
    present = hooks.get("UserPromptSubmit") or [] if isinstance(hooks, dict) else None
    if not isinstance(present, list):
        raise UserError(f"{source}: `hooks` must be an object and its `UserPromptSubmit` a "
                        "list; fix or move it first")
    hooks = dict(hooks)
    groups: list[Any] = []
    placed = False
    for group in present:
        if mark not in json.dumps(group):
            groups.append(group)
        elif not placed:
            groups.append(entry)
            placed = True
    hooks["UserPromptSubmit"] = groups if placed else [*groups, entry]
    return {**existing, "hooks": hooks}


def install_codex(settings: Settings, home: Path) -> tuple[Path, Path]:
    """Write the hook into ``home/hooks.json`` and trust it in ``home/config.toml``;
    (hooks file, config file). Both are checked before either is written."""
    hooks_file, config_file = home / "hooks.json", home / "config.toml"
    document = merged(codex_config.read_json(hooks_file), codex_hook_entry(settings),
                      hooks_file, CODEX_MARK)
    codex_config.read_toml(config_file)  # a broken file is the user's to fix, not ours
    groups = document["hooks"]["UserPromptSubmit"]
    position = next(i for i, g in enumerate(groups) if CODEX_MARK in json.dumps(g))
    handler = groups[position]["hooks"][0]
    key = codex_config.hook_key(hooks_file, "UserPromptSubmit", position, 0)
    text = config_file.read_text(encoding="utf-8") if config_file.exists() else ""
    trusted = codex_config.with_trust(text, key,
                                      codex_config.hook_hash("UserPromptSubmit", handler))
    codex_config.write_atomically(hooks_file, json.dumps(document, indent=2) + "\n")
    codex_config.write_atomically(config_file, trusted)
    return hooks_file, config_file


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    if args.agent == "codex":
        return _run_codex(args, settings)
    entry = hook_entry(settings)
    if args.print:
        print(json.dumps({"hooks": {"UserPromptSubmit": [entry]}}, indent=2))
        return 0
    base = (Path.home() if args.user else (args.project or Path.cwd())).expanduser()
    if not base.is_dir():  # a mistyped --project: never create it, nor install there
        raise UserError(f"{base}: no such project folder")
    target = base.resolve() / ".claude" / "settings.json"
    document = merged(codex_config.read_json(target), entry, target)
    codex_config.write_atomically(target, json.dumps(document, indent=2) + "\n")
    print(f"installed the Lookback UserPromptSubmit hook in {target}; "
          "start `lookback serve` for it to answer")
    return 0


def _run_codex(args: argparse.Namespace, settings: Settings) -> int:
    if args.project is not None or args.user:
        raise UserError("Codex reads hooks from $CODEX_HOME/hooks.json only: drop "
                        "--project/--user")
    if args.print:
        print(json.dumps({"hooks": {"UserPromptSubmit": [codex_hook_entry(settings)]}},
                         indent=2))
        return 0
    hooks_file, config_file = install_codex(settings, codex_config.codex_home())
    print(f"installed the Lookback UserPromptSubmit hook in {hooks_file} and trusted it in "
          f"{config_file}; start `lookback serve` for it to answer")
    return 0
