"""``lookback completion bash|zsh|fish``: a shell completion script, generated from the parser.

The script is written from ``lookback.cli.build_parser`` when asked, so every command,
flag and choice it completes is the CLI's own (a flag added later completes without
touching this file). bash gets a ``complete -F`` function; zsh loads the same function
through its ``bashcompinit``; fish gets ``complete -c lookback`` lines. Paths fall back
to the shell's own file completion.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field

from lookback.commands.common import add_command

SHELLS = ("bash", "zsh", "fish")

SUMMARY = "print a shell completion script (bash, zsh, fish)"
DESCRIPTION = """Print the completion script for SHELL. Load it for this shell with
`source <(lookback completion bash)` (zsh: the same with zsh), or install it once: bash
`lookback completion bash > ~/.local/share/bash-completion/completions/lookback`, zsh into a
folder of your $fpath as `_lookback`, fish `lookback completion fish >
~/.config/fish/completions/lookback.fish`."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "completion", run, SUMMARY, DESCRIPTION)
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")


def run(args: argparse.Namespace) -> int:
    from lookback.cli import build_parser

    sys.stdout.write(script(args.shell, build_parser()))
    return 0


@dataclass
class Command:
    """What completes after ``lookback NAME``: its flags and the choices of each."""

    name: str
    summary: str = ""
    #: flag -> its choices ([] a free value, None no value)
    flags: dict[str, list[str] | None] = field(default_factory=dict)
    help: dict[str, str] = field(default_factory=dict)
    #: the choices of its positional arguments (empty: paths or free text)
    words: list[str] = field(default_factory=list)


def describe(parser: argparse.ArgumentParser) -> tuple[Command, list[Command]]:
    """The top level (global flags, command names) and each command."""
    top = _command("", parser)
    commands: list[Command] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, subparser in action.choices.items():
                command = _command(name, subparser)
                command.summary = summaries.get(name, "")
                commands.append(command)
    return top, commands


def _command(name: str, parser: argparse.ArgumentParser) -> Command:
    command = Command(name)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        choices = [str(choice) for choice in action.choices or ()]
        if not action.option_strings:
            command.words += choices
            continue
        takes_value = action.nargs != 0
        for flag in action.option_strings:
            command.flags[flag] = choices if takes_value else None
            command.help[flag] = " ".join((action.help or "").split())
    return command


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    top, commands = describe(parser)
    if shell == "fish":
        return _fish(top, commands)
    bash = _bash(top, commands)
    if shell == "zsh":
        return ("#compdef lookback\n# zsh completion for lookback (`lookback completion zsh`): "
                "bash's, through bashcompinit\nautoload -U +X bashcompinit && bashcompinit\n"
                + bash)
    return bash


def _words(items: list[str]) -> str:
    return shlex.quote(" ".join(items))


def _bash(top: Command, commands: list[Command]) -> str:
    valued = [flag for flag, choices in top.flags.items() if choices is not None]
    lines = [
        "# bash completion for lookback (`lookback completion bash`)",
        "_lookback() {",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local i command="" words=""',
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        case "${COMP_WORDS[i]}" in',
        f"            {'|'.join(valued) or '--'}) ((i++)) ;;",
        "            -*) ;;",
        '            *) command="${COMP_WORDS[i]}"; break ;;',
        "        esac",
        "    done",
        '    case "$command" in',
    ]
    for command in [top, *commands]:
        label = command.name or '""'  # the top level: no command yet
        lines.append(f"        {label})")
        for flag, choices in command.flags.items():
            if choices:
                lines.append(f'            [[ $prev == {flag} ]] && {{ COMPREPLY=($(compgen -W '
                             f'{_words(choices)} -- "$cur")); return; }}')
            elif choices is not None:  # a free value: the shell's own (file) completion
                lines.append(f"            [[ $prev == {flag} ]] && return")
        words = [c.name for c in commands] if command is top else command.words
        lines += [
            f'            if [[ $cur == -* ]]; then words={_words(list(command.flags))}; '
            f"else words={_words(words)}; fi",
            "            ;;",
        ]
    lines += [
        "    esac",
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        "complete -o default -F _lookback lookback",
        "",
    ]
    return "\n".join(lines)


def _fish(top: Command, commands: list[Command]) -> str:
    names = " ".join(command.name for command in commands)
    lines = ["# fish completion for lookback (`lookback completion fish`)",
             "complete -c lookback -f"]
    for command in commands:
        lines.append(f"complete -c lookback -n 'not __fish_seen_subcommand_from {names}' "
                     f"-a {command.name} -d {shlex.quote(command.summary)}")
    for command in [top, *commands]:
        condition = (f"not __fish_seen_subcommand_from {names}" if command is top
                     else f"__fish_seen_subcommand_from {command.name}")
        for flag, choices in command.flags.items():
            option = f"-l {flag[2:]}" if flag.startswith("--") else f"-s {flag[1:]}"
            value = ""
            if choices:
                value = f" -x -a {_words(choices)}"
            elif choices is not None:
                value = " -r -F"
            lines.append(f"complete -c lookback -n {shlex.quote(condition)} {option}{value} "
                         f"-d {shlex.quote(command.help.get(flag, ''))}")
        if command.words:
            lines.append(f"complete -c lookback -n {shlex.quote(condition)} "
                         f"-a {_words(command.words)}")
        elif command is not top:
            lines.append(f"complete -c lookback -n {shlex.quote(condition)} -F")
    return "\n".join(lines) + "\n"
