"""Helpers shared by the subcommands: their parsers, settings from flags, progress output."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lookback.query.contract.answers import encode_answer
from lookback.settings import Settings, load_settings


def add_command(subparsers: argparse._SubParsersAction, name: str,
                handler: Callable[[argparse.Namespace], int], summary: str,
                description: str | None = None) -> argparse.ArgumentParser:
    """The subcommand ``name``, run by ``handler(args)``: ``summary`` is its line in
    ``lookback --help``, ``description`` the paragraph of ``lookback NAME --help`` (argparse
    re-wraps it, so its line breaks are free)."""
    parser = subparsers.add_parser(name, help=summary, description=description)
    parser.set_defaults(handler=handler)
    return parser


def load(args: argparse.Namespace, **overrides: Any) -> Settings:
    """Settings with the global ``--home``/``--config`` flags applied."""
    import os

    environ = dict(os.environ)
    if getattr(args, "config", None):
        environ["LOOKBACK_CONFIG"] = args.config
    if getattr(args, "home", None):
        overrides["home"] = str(Path(args.home).expanduser())
        environ["LOOKBACK_HOME"] = overrides["home"]
    return load_settings(overrides, environ)


def print_answer(answer: Any, *, pretty: bool = False) -> None:
    """Print an answer of the wire contract as its JSON (indented with ``pretty``): the
    same bytes ``lookback serve`` sends, encoded once."""
    import msgspec

    encoded = encode_answer(answer)
    print((msgspec.json.format(encoded, indent=2) if pretty else encoded).decode("utf-8"))


def progress_printer(total: int) -> Callable[[Path, Any], None]:
    """A per-file callback: a bar on a terminal, a plain line every 10% otherwise."""
    interactive = sys.stderr.isatty()
    state = {"done": 0, "last_decile": -1}

    def on_file(path: Path, report: Any) -> None:
        state["done"] += 1
        done = state["done"]
        if interactive:
            width = 30
            filled = width * done // max(total, 1)
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} files, "
                             f"{report.read.entries:,} entries")
            if done == total:
                sys.stderr.write("\n")
            sys.stderr.flush()
            return
        decile = 10 * done // max(total, 1)
        if decile != state["last_decile"] and total > 1:
            state["last_decile"] = decile
            print(f"{done}/{total} files, {report.read.entries:,} entries", file=sys.stderr)

    return on_file
