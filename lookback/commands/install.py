"""``lookback install pi|claude-code|codex``: wire Lookback into an agent, with absolute
commands, so nothing depends on the PATH the agent runs with; ``lookback uninstall`` (its
own module) removes what this writes, and ``--print`` shows each change without making it.

- **pi**: copies the extension this Lookback ships (``lookback.pi_package``) into
  ``<home>/pi-extension`` with ``lookback.json``, this install's command (the extension starts
  the reader with it), and lists that folder in ``packages`` of Pi's ``settings.json``
  (``$PI_CODING_AGENT_DIR``, default ``~/.pi/agent``) — in place of any earlier Lookback
  entry, so Pi never loads two.
- **claude-code**: one ``UserPromptSubmit`` command hook (and, with ``action.enabled``, one
  ``PreToolUse`` hook: ``lookback.action_hook``) in the project's personal
  ``.claude/settings.local.json`` (``--shared``: ``.claude/settings.json``, committed with the
  project; ``--user``: the user's ``settings.json``).
- **codex**: the same hooks in ``$CODEX_HOME/hooks.json`` (default ``~/.codex``) and its trust
  entry in ``$CODEX_HOME/config.toml`` (``lookback.codex_config``), without which ``codex
  exec`` skips it silently.

A hook runs ``lookback/claude_hook.py`` (``codex_hook.py``) with this Python under ``-S -I``
(no ``site``, no environment: the cheapest start) and the data home (whose reader it asks, on
the user's Unix socket; or ``--url`` of a TCP reader), provider, timeout and evidence budget
from the settings baked in as flags. Other hooks and keys in the files are
kept, in the file's own JSON layout; a previous Lookback hook is replaced in place, so
re-running is harmless.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookback import action_hook, claude_hook, codex_config, codex_hook, pi_package
from lookback.background import tcp_url
from lookback.commands.common import add_command, load
from lookback.commands.hook import codex_budget, hook_budget
from lookback.errors import UserError
from lookback.index.layout import make_home
from lookback.settings import Settings

#: Marks the hook entry this command owns, so a re-run replaces it.
MARK = "claude_hook.py"
CODEX_MARK = "codex_hook.py"
ACTION_MARK = "action_hook.py"
ACTION_EVENT = "PreToolUse"
#: The Claude Code tools whose calls touch a file, a command or a pattern.
ACTION_MATCHER = "Read|Edit|MultiEdit|Write|NotebookEdit|Bash|Grep|Glob"
AGENTS = ("pi", "claude-code", "codex")


SUMMARY = "wire Lookback into an agent: `lookback install pi|claude-code|codex`"
DESCRIPTION = """Wire Lookback into an agent with absolute commands (this install's Python), so
nothing depends on the agent's PATH. pi: copy the Pi extension shipped with Lookback into
<home>/pi-extension, record this install's command beside it and add it to the packages of
Pi's settings.json. claude-code: a UserPromptSubmit hook (and a PreToolUse hook for evidence at
the point of action, unless action.enabled is false) in the project's personal
.claude/settings.local.json (--shared: .claude/settings.json, committed with the project;
--user: ~/.claude/settings.json). codex: the hook in $CODEX_HOME/hooks.json, trusted in its
config.toml. Nothing to start afterwards: the extension and the hooks start the reader on first
use. --print shows every change without making it; `lookback uninstall AGENT` removes what this
wrote."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "install", run, SUMMARY, DESCRIPTION)
    add_arguments(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The agent and where its settings are: shared by ``install`` and ``uninstall``."""
    parser.add_argument("agent", choices=AGENTS)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--project", type=Path, default=None,
                       help="Claude Code: the project folder (default: the current folder)")
    where.add_argument("--user", action="store_true",
                       help="Claude Code: the user's settings.json (every project) instead")
    parser.add_argument("--shared", action="store_true",
                        help="Claude Code: the project's shared .claude/settings.json "
                             "instead of the personal .claude/settings.local.json")
    parser.add_argument("--print", action="store_true",
                        help="print every change (files and diffs) instead of making it")


# ---------------------------------------------------------------------------------------------
# The hook commands


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


def action_hook_command(settings: Settings, agent: str, python: str = sys.executable) -> str:
    """The shell command Claude Code (Codex) runs before each tool call."""
    section = settings.claude_code if agent == "claude-code" else settings.codex
    return _command(python, action_hook.__file__, settings, section.provider,
                    section.hook_timeout_ms, settings.action.max_tokens, "--agent", agent)


def _command(python: str, script: str, settings: Settings, provider: str, timeout_ms: float,
             budget: int, *extra: str) -> str:
    url = tcp_url(settings)  # none: the reader on the user's Unix socket for --home
    parts = [python, "-S", "-I", str(Path(script).resolve()), "--home", str(settings.home),
             *(["--url", url] if url else []), "--provider", provider,
             "--timeout-ms", f"{timeout_ms:g}", "--max-tokens", str(budget), *extra]
    return " ".join(shlex.quote(part) for part in parts)


def hook_entry(settings: Settings) -> dict[str, Any]:
    """One UserPromptSubmit matcher group; Claude Code's own timeout (seconds) sits just
    above ours, so ours always decides."""
    seconds = int(settings.claude_code.hook_timeout_ms // 1000) + 2
    return {"hooks": [{"type": "command", "command": hook_command(settings),
                       "timeout": seconds}]}


def action_hook_entry(settings: Settings, agent: str) -> dict[str, Any]:
    """The PreToolUse group: before the tools that read, edit, run or search (Claude Code's
    by ``ACTION_MATCHER``; Codex's every tool: its names differ by version), likewise
    timed."""
    section = settings.claude_code if agent == "claude-code" else settings.codex
    seconds = int(section.hook_timeout_ms // 1000) + 2
    handler = {"type": "command", "command": action_hook_command(settings, agent),
               "timeout": seconds}
    matcher = {"matcher": ACTION_MATCHER} if agent == "claude-code" else {}
    return {**matcher, "hooks": [handler]}


def codex_hook_entry(settings: Settings) -> dict[str, Any]:
    """Codex's UserPromptSubmit group (its timeout in seconds, likewise above ours)."""
    seconds = int(settings.codex.hook_timeout_ms // 1000) + 2
    return {"hooks": [{"type": "command", "command": codex_hook_command(settings),
                       "timeout": seconds}]}


def merged(existing: dict[str, Any], entry: dict[str, Any], source: Path,
           mark: str = MARK, event: str = "UserPromptSubmit") -> dict[str, Any]:
    """``existing`` settings (read from ``source``) with ``entry`` as the only Lookback
    ``event`` hook: in the place of the previous one (Codex's trust keys name
    positions), else last. UserError when their ``hooks`` are not shaped as the agents
    read them: guessing would split a string into letters or drop a table's values."""
    hooks, present = _hook_list(existing, source, event)
    groups: list[Any] = []
    placed = False
    for group in present:
        if mark not in json.dumps(group):
            groups.append(group)
        elif not placed:
            groups.append(entry)
            placed = True
    hooks[event] = groups if placed else [*groups, entry]
    return {**existing, "hooks": hooks}


def without_hook(existing: dict[str, Any], source: Path, mark: str = MARK,
                 event: str = "UserPromptSubmit") -> tuple[dict[str, Any], list[int]]:
    """``existing`` without Lookback's ``event`` groups, and their positions; the
    list and ``hooks`` go too when nothing else is in them (install created them)."""
    hooks, present = _hook_list(existing, source, event)
    removed = [i for i, group in enumerate(present) if mark in json.dumps(group)]
    if not removed:
        return existing, []
    kept = [group for i, group in enumerate(present) if i not in removed]
    document = dict(existing)
    if kept:
        hooks[event] = kept
    else:
        hooks.pop(event, None)
    if hooks:
        document["hooks"] = hooks
    else:
        document.pop("hooks", None)
    return document, removed


def _hook_list(existing: dict[str, Any], source: Path,
               event: str = "UserPromptSubmit") -> tuple[dict[str, Any], list[Any]]:
    hooks = existing.get("hooks") or {}
    present = hooks.get(event) or [] if isinstance(hooks, dict) else None
    if not isinstance(present, list):
        raise UserError(f"{source}: `hooks` must be an object and its `{event}` a "
                        "list; fix or move it first")
    return dict(hooks), present


# ---------------------------------------------------------------------------------------------
# Changes: planned, printed or made


@dataclass(frozen=True)
class Change:
    """One file written (``text``) or removed (``text`` None); ``before`` is its text now."""

    path: Path
    text: str | None
    before: str | None
    diff: bool = True  # --print shows a diff (settings) or only the file and its size (copies)


def change(path: Path, text: str | None) -> Change | None:
    """The change that makes ``path`` hold ``text`` (None: absent), or None when it does."""
    before = path.read_text(encoding="utf-8") if path.exists() else None
    return None if before == text else Change(path, text, before)


def json_change(path: Path, document: dict[str, Any], before: dict[str, Any]) -> Change | None:
    """The change that writes ``document`` to the JSON file ``path`` in the file's own layout
    (its indent and final newline, as the agents write them); the file goes when install
    created it and nothing else is left in it."""
    if document == before:
        return None
    text = path.read_text(encoding="utf-8") if path.exists() else None
    if not document and text is not None:
        return Change(path, None, text)
    return change(path, codex_config.json_like(document, text))


def describe(changes: list[Change]) -> str:
    """What ``--print`` shows: each file written or removed, settings as a unified diff."""
    lines = []
    for item in changes:
        if item.text is None:
            lines.append(f"remove {item.path}")
        elif not item.diff:
            lines.append(f"write {item.path} ({len(item.text.encode())} bytes)")
        else:
            lines.append(f"{'change' if item.before is not None else 'create'} {item.path}:")
            lines.extend(line.rstrip("\n") for line in difflib.unified_diff(
                (item.before or "").splitlines(keepends=True),
                item.text.splitlines(keepends=True),
                fromfile=str(item.path) if item.before is not None else "/dev/null",
                tofile=str(item.path)))
    return "\n".join(lines) if lines else "nothing to change"


def apply(changes: list[Change]) -> None:
    """Make the changes in order (atomic per file; links and modes kept)."""
    for item in changes:
        if item.text is None:
            os.unlink(os.path.realpath(item.path))
        else:
            codex_config.write_atomically(item.path, item.text)


def finish(args: argparse.Namespace, changes: list[Change], done: str) -> int:
    if args.print:
        print(describe(changes))
        return 0
    apply(changes)
    print(done if changes else "already so: nothing changed")
    return 0


# ---------------------------------------------------------------------------------------------
# Where each agent's settings are


def claude_settings_file(args: argparse.Namespace) -> Path:
    if args.user:
        if args.shared:
            raise UserError("--shared names a project's file; drop it with --user")
        configured = os.environ.get("CLAUDE_CONFIG_DIR")
        return (Path(configured) if configured else Path.home() / ".claude") / "settings.json"
    base = (args.project or Path.cwd()).expanduser()
    if not base.is_dir():  # a mistyped --project: never create it, nor install there
        raise UserError(f"{base}: no such project folder")
    name = "settings.json" if args.shared else "settings.local.json"
    return base.resolve() / ".claude" / name


def pi_settings_file() -> Path:
    return pi_package.agent_dir(dict(os.environ), Path.home()) / "settings.json"


def pi_extension_dir(settings: Settings) -> Path:
    return Path(settings.home) / pi_package.INSTALLED_DIR


def claude_flags_only(args: argparse.Namespace) -> None:
    if args.project is not None or args.user or args.shared:
        raise UserError(f"{args.agent}: --project, --user and --shared are Claude Code's; drop "
                        "them")


# ---------------------------------------------------------------------------------------------
# Install


def install_claude(settings: Settings, target: Path) -> list[Change]:
    before = codex_config.read_json(target)
    document = with_action(settings, merged(before, hook_entry(settings), target), target,
                           "claude-code")
    found = json_change(target, document, before)
    return [found] if found else []


def with_action(settings: Settings, document: dict[str, Any], source: Path,
                agent: str) -> dict[str, Any]:
    """``document`` with Lookback's PreToolUse hook when ``action.enabled``, else without."""
    if settings.action.enabled:
        return merged(document, action_hook_entry(settings, agent), source, ACTION_MARK,
                      ACTION_EVENT)
    return without_hook(document, source, ACTION_MARK, ACTION_EVENT)[0]


def install_codex_changes(settings: Settings, home: Path) -> list[Change]:
    """The hook in ``home/hooks.json`` and its trust in ``home/config.toml``; both are
    checked before either is written."""
    hooks_file, config_file = home / "hooks.json", home / "config.toml"
    before = codex_config.read_json(hooks_file)
    document = merged(before, codex_hook_entry(settings), hooks_file, CODEX_MARK)
    codex_config.read_toml(config_file)  # a broken file is the user's to fix, not ours
    text = config_file.read_text(encoding="utf-8") if config_file.exists() else ""
    trusted = _trusted(text, hooks_file, document, "UserPromptSubmit", CODEX_MARK)
    if settings.action.enabled:
        document = with_action(settings, document, hooks_file, "codex")
        trusted = _trusted(trusted, hooks_file, document, ACTION_EVENT, ACTION_MARK)
    else:
        groups = document.get("hooks", {}).get(ACTION_EVENT) or []
        document, removed = without_hook(document, hooks_file, ACTION_MARK, ACTION_EVENT)
        trusted = untrusted(trusted, hooks_file, ACTION_EVENT, groups, removed)
    return [c for c in (json_change(hooks_file, document, before), change(config_file, trusted))
            if c]


def untrusted(text: str, hooks_file: Path, event: str, groups: list[Any],
              removed: list[int]) -> str:
    """``config.toml``'s ``text`` without the trust of the ``event`` groups at ``removed``
    positions, and the trust entries of the groups after them moved up (Codex's keys name
    positions)."""
    kept = 0
    for position, group in enumerate(groups):
        handlers = group.get("hooks") if isinstance(group, dict) else None
        count = len(handlers) if isinstance(handlers, list) else 1
        for handler in range(count):
            key = codex_config.hook_key(hooks_file, event, position, handler)
            if position in removed:
                text = codex_config.without_trust(text, key)
            elif kept != position:
                text = codex_config.renamed_trust(text, key, codex_config.hook_key(
                    hooks_file, event, kept, handler))
        kept += position not in removed
    return text


def _trusted(text: str, hooks_file: Path, document: dict[str, Any], event: str,
             mark: str) -> str:
    """``config.toml``'s ``text`` trusting Lookback's ``event`` hook as ``document`` has it."""
    groups = document["hooks"][event]
    position = next(i for i, g in enumerate(groups) if mark in json.dumps(g))
    group = groups[position]
    key = codex_config.hook_key(hooks_file, event, position, 0)
    return codex_config.with_trust(text, key, codex_config.hook_hash(
        event, group["hooks"][0], group.get("matcher")))


def install_codex(settings: Settings, home: Path) -> tuple[Path, Path]:
    """Write the hook into ``home/hooks.json`` and trust it in ``home/config.toml``;
    (hooks file, config file)."""
    apply(install_codex_changes(settings, home))
    return home / "hooks.json", home / "config.toml"


def install_pi(settings: Settings, settings_file: Path) -> list[Change]:
    """The extension's copy (this install's command beside it), then Pi's ``packages``."""
    shipped = pi_package.shipped_dir()
    if shipped is None:
        raise UserError("this Lookback has no Pi extension beside it (package data "
                        "lookback/integrations/pi): reinstall Lookback")
    folder = pi_extension_dir(settings)
    wanted = {name: data.decode("utf-8") for name, data in
              pi_package.shipped_files(shipped).items()}
    # The data home too: the extension finds its reader's socket by it (src/local-reader.ts).
    # The action settings too: the extension answers tool calls unless they turn it off.
    wanted[pi_package.COMMAND_FILE] = json.dumps(
        {"command": pi_package.this_command(), "home": str(settings.home),
         "action": {"enabled": settings.action.enabled,
                    "max_tokens": settings.action.max_tokens}}, indent=2) + "\n"
    changes = [c for name, text in sorted(wanted.items())
               if (c := change(folder / name, text))]
    changes += [Change(folder / name, None, None) for name in copied_files(folder)
                if name not in wanted]
    changes = [Change(c.path, c.text, c.before, diff=c.path.name == pi_package.COMMAND_FILE)
               for c in changes]
    before = codex_config.read_json(settings_file)
    packages = before.get("packages", [])
    if not isinstance(packages, list):
        raise UserError(f"{settings_file}: `packages` must be a list; fix or move it first")
    ours = {e.position for e in pi_package.lookback_entries(settings_file, before)}
    ours |= {i for i, entry in enumerate(packages) if lists_folder(entry, settings_file, folder)}
    listed = [entry for i, entry in enumerate(packages) if i not in ours]
    listed.insert(min(ours) if ours else len(listed), str(folder))
    found = json_change(settings_file, {**before, "packages": listed}, before)
    return changes + ([found] if found else [])


def copied_files(folder: Path) -> list[str]:
    """The extension's files in an installed copy, the command file included."""
    if not folder.is_dir():
        return []
    names = list(pi_package.shipped_files(folder))
    return names + ([pi_package.COMMAND_FILE] if (folder / pi_package.COMMAND_FILE).exists()
                    else [])


def lists_folder(entry: Any, settings_file: Path, folder: Path) -> bool:
    """Whether a ``packages`` entry is the installed copy's folder (even once it is gone)."""
    source = entry.get("source") if isinstance(entry, dict) else entry
    path = pi_package.resolve_source(source, settings_file) if isinstance(source, str) else None
    return path is not None and os.path.abspath(path) == os.path.abspath(folder)


def _events(settings: Settings) -> str:
    return "UserPromptSubmit and PreToolUse hooks" if settings.action.enabled \
        else "UserPromptSubmit hook"


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    if args.agent == "claude-code":
        target = claude_settings_file(args)
        done = f"installed the Lookback {_events(settings)} in {target}; it starts " \
            "the reader on first use"
        shared = target.with_name("settings.json")
        if target.name == "settings.local.json" and MARK in json.dumps(
                codex_config.read_json(shared)):  # an earlier version's: Claude runs both
            done += f". {shared} holds one too (Claude Code runs both): `lookback uninstall " \
                "claude-code --shared` removes it"
        return finish(args, install_claude(settings, target), done)
    claude_flags_only(args)
    if args.agent == "codex":
        home = codex_config.codex_home()
        return finish(args, install_codex_changes(settings, home),
                      f"installed the Lookback {_events(settings)} in {home / 'hooks.json'} "
                      f"and trusted it in {home / 'config.toml'}; it starts the reader on first "
                      "use")
    settings_file = pi_settings_file()
    if not args.print:
        make_home(Path(settings.home))  # private, when the copy is the first thing in it
    return finish(args, install_pi(settings, settings_file),
                  f"installed the Lookback extension in {pi_extension_dir(settings)} and listed "
                  f"it in {settings_file}; it starts the reader with "
                  f"{shlex.join(pi_package.this_command())} on first use")
