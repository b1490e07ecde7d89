"""``lookback uninstall pi|claude-code|codex``: remove exactly what ``lookback install``
wrote — Pi's ``packages`` entry and the extension's copy; the Claude Code hook; the Codex hook
and its trust entry in ``config.toml`` — and nothing else. A settings file install created
and that holds nothing else goes too; other keys, hooks and comments stay as they are (the
round trips are tested byte for byte in tests/test_install.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lookback import codex_config
from lookback.commands.common import add_command, load
from lookback.commands.install import (
    ACTION_EVENT,
    ACTION_MARK,
    CODEX_MARK,
    Change,
    add_arguments,
    claude_flags_only,
    claude_settings_file,
    copied_files,
    finish,
    json_change,
    lists_folder,
    pi_extension_dir,
    pi_settings_file,
    untrusted,
    without_hook,
)
from lookback.settings import Settings

SUMMARY = "remove what `lookback install pi|claude-code|codex` wrote"
DESCRIPTION = """Remove what `lookback install AGENT` wrote, with the same flags: pi: the
extension's entry in Pi's settings.json and its copy in <home>/pi-extension; claude-code: the
hook in the project's .claude/settings.local.json (--shared: .claude/settings.json; --user: the
user's settings.json); codex: the hook in $CODEX_HOME/hooks.json and its trust entry in
config.toml. Other settings are left as they are. --print shows every change without making
it."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "uninstall", run, SUMMARY, DESCRIPTION)
    add_arguments(parser)


def uninstall_claude(target: Path) -> list[Change]:
    before = codex_config.read_json(target)
    document, _ = without_hook(before, target)
    document, _ = without_hook(document, target, ACTION_MARK, ACTION_EVENT)
    found = json_change(target, document, before)
    return [found] if found else []


def uninstall_codex(home: Path) -> list[Change]:
    """The hook out of ``hooks.json``; its trust entry out of ``config.toml``, and the trust
    entries of the groups after it moved up one place (Codex's keys name positions)."""
    hooks_file, config_file = home / "hooks.json", home / "config.toml"
    before = codex_config.read_json(hooks_file)
    document, removed = without_hook(before, hooks_file, CODEX_MARK)
    document, removed_action = without_hook(document, hooks_file, ACTION_MARK, ACTION_EVENT)
    changes = [c for c in [json_change(hooks_file, document, before)] if c]
    if not (removed or removed_action) or not config_file.exists():
        return changes
    text = config_file.read_text(encoding="utf-8")
    hooks = before["hooks"]
    text = untrusted(text, hooks_file, "UserPromptSubmit", hooks.get("UserPromptSubmit") or [],
                     removed)
    text = untrusted(text, hooks_file, ACTION_EVENT, hooks.get(ACTION_EVENT) or [],
                     removed_action)
    current = config_file.read_text(encoding="utf-8")
    if not text.strip():  # install created it for the trust entry alone: it goes too
        changes.append(Change(config_file, None, current))
    elif text != current:
        changes.append(Change(config_file, text, current))
    return changes


def uninstall_pi(settings: Settings, settings_file: Path) -> list[Change]:
    """Pi's entry for the installed copy, then the copy's files."""
    folder = pi_extension_dir(settings)
    before = codex_config.read_json(settings_file)
    packages = before.get("packages")
    changes: list[Change] = []
    if isinstance(packages, list):
        listed = [entry for entry in packages if not lists_folder(entry, settings_file, folder)]
        document = dict(before)
        if listed:
            document["packages"] = listed
        else:
            document.pop("packages")
        found = json_change(settings_file, document, before)
        changes += [found] if found else []
    changes += [Change(folder / name, None, None) for name in copied_files(folder)]
    return changes


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    if args.agent == "claude-code":
        target = claude_settings_file(args)
        return finish(args, uninstall_claude(target),
                      f"removed the Lookback hook from {target}")
    claude_flags_only(args)
    if args.agent == "codex":
        home = codex_config.codex_home()
        return finish(args, uninstall_codex(home),
                      f"removed the Lookback hook from {home / 'hooks.json'} and its trust "
                      f"entry from {home / 'config.toml'}")
    changes = uninstall_pi(settings, pi_settings_file())
    code = finish(args, changes, f"removed the Lookback extension from {pi_settings_file()} "
                  f"and {pi_extension_dir(settings)}")
    if not args.print:
        _prune(pi_extension_dir(settings))
    return code


def _prune(folder: Path) -> None:
    """The copy's folders, once empty (``src/``, then the copy itself)."""
    for path in (folder / "src", folder):
        try:
            path.rmdir()
        except OSError:  # absent, or something else is in it: left as it is
            pass

