"""The ``lookback`` command: a thin shell that parses flags and calls the stages.

Each subcommand lives in its own module under ``lookback.commands`` with a
``register(subparsers)`` function; adding a command is adding a module to
``COMMANDS`` below. Exit codes: ``EXIT_CODES`` (shown by ``lookback --help``).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Sequence

from lookback import resources
from lookback.errors import LookbackError, UserError

COMMANDS = ("index", "status", "reindex", "retrieve", "search", "show", "serve", "watch",
            "worker", "context", "hook", "install", "uninstall", "owner", "mcp", "doctor",
            "config", "completion", "forget", "compact")

#: What ``lookback``'s exit status means, for every command (docs/usage.md says the same;
#: tests/test_docs.py keeps them equal).
EXIT_CODES = (
    (0, "done (nothing to do counts: no sessions yet)"),
    (1, "failed or partly done: an index unusable, a path unreadable, doctor's problems"),
    (2, "bad input: a flag, a path, settings, a project or session that does not exist"),
    (130, "interrupted (Ctrl-C)"),
)


def version() -> str:
    """The installed distribution's version (the package's own when run from a checkout)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("pi-lookback")
    except PackageNotFoundError:
        import lookback

        return lookback.__version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lookback",
        description="Index Pi, Claude Code and Codex sessions and give back what compaction\n"
                    "took away: quoted evidence from earlier turns of the current branch.",
        epilog="exit status:\n" + "\n".join(f"  {code:<4} {meaning}"
                                            for code, meaning in EXIT_CODES)
               + "\n\nOutput is text for people; --json gives JSON for programs."
               + f"\nDocumentation (docs/*.md): {resources.shipped('docs') or 'not installed'}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"lookback {version()}")
    parser.add_argument("--home", help="data directory (default: $LOOKBACK_HOME or the "
                        "platform data dir)")
    parser.add_argument("--config", help="settings file (default: $LOOKBACK_CONFIG, else "
                        "config.toml in the platform's config folder; `lookback config` "
                        "shows which)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"lookback.commands.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"lookback.commands.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments in (["hook", "claude-code"], ["hook", "codex"]):
        # Runs before every prompt of the agent: skip importing every other command.
        from lookback.commands import hook

        return hook.run(argparse.Namespace(home=None, config=None, agent=arguments[1]))
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except KeyboardInterrupt:
        print("lookback: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `lookback … | head`: the reader left, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as error:  # one clear line for anything a user can cause
        message, code = describe(error)
        if message is None:
            raise
        if getattr(args, "json", False):  # the program reading stdout learns it failed too
            from lookback.commands.common import json_text

            payload = error.payload() if isinstance(error, LookbackError) else \
                {"status": "error", "error": {"code": "failed", "message": message}}
            print(json_text(payload))
        print(f"lookback: error: {message}", file=sys.stderr)
        return code


def describe(error: BaseException) -> tuple[str | None, int]:
    """(message, exit code) for an error a user can cause; (None, 1) for a bug.

    Errors raised on purpose carry their exit code (lookback.errors); a driver error
    that escaped the index edge is translated by the index; the operating system's
    errors are described as such. Anything else is a bug and keeps its traceback.
    """
    if isinstance(error, LookbackError):
        return str(error), error.exit_code
    if isinstance(error, OSError):
        if error.errno == errno.ENOSPC:
            return "the disk is full; the index is unchanged since its last complete batch", 1
        where = f"{error.filename}: " if error.filename else ""
        return f"{where}{error.strerror or error}", 1
    import apsw

    from lookback.index.store import EVENT_ERRORS, translate

    if isinstance(error, apsw.Error) and not isinstance(error, EVENT_ERRORS):
        translated = translate(error)
        return str(translated), translated.exit_code
    return None, 1


__all__ = ["UserError", "build_parser", "describe", "main"]

if __name__ == "__main__":
    sys.exit(main())
