"""``lookback config``: the effective settings and where each value came from."""

from __future__ import annotations

import argparse
import json

from lookback.commands.common import add_command, add_json, json_text, sources
from lookback.settings import effective, load_with_origins, settings_file

SUMMARY = "show the effective settings and where each value came from"
DESCRIPTION = """Print every setting's value and its origin: default, the settings file,
a LOOKBACK_* variable or the command line (--home). The settings file is $LOOKBACK_CONFIG
(or --config), else config.toml in the platform's config folder (~/.config/lookback on
Linux)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "config", run, SUMMARY, DESCRIPTION)
    add_json(parser, "the file and each setting's value and origin")


def run(args: argparse.Namespace) -> int:
    overrides, environ = sources(args)
    path, note = settings_file(environ)
    settings, origins = load_with_origins(overrides, environ)
    rows = [(key, value, origins[key]) for key, value in effective(settings)]
    if args.json:
        print(json_text({"file": str(path), "file_exists": path.is_file(), "note": note,
                         "settings": {key: {"value": value, "origin": origin}
                                      for key, value, origin in rows}}))
        return 0
    print(f"settings file: {path}" + ("" if path.is_file() else " (none yet)"))
    width = max(len(key) for key, _, _ in rows)
    for key, value, origin in rows:
        print(f"{key:<{width}}  {json.dumps(value, ensure_ascii=False)}  ({origin})")
    return 0
