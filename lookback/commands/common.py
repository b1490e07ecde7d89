"""Helpers shared by the subcommands: their parsers, settings from flags, the session a
search or show names, errors in flags' words."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lookback.errors import LookbackError, NotFound, Unavailable, UserError
from lookback.query.contract.answers import encode_answer
from lookback.query.contract.request import RequestError
from lookback.settings import Settings, load_settings

if TYPE_CHECKING:
    from lookback.index.layout import ProjectDir


def add_command(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str,
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
    return load_settings(*sources(args, **overrides))


def sources(args: argparse.Namespace, **overrides: Any) -> tuple[dict[str, Any],
                                                                  dict[str, str]]:
    """(flag overrides, environment) of the settings, the global ``--home``/``--config``
    flags applied."""
    environ = dict(os.environ)
    if getattr(args, "config", None):
        environ["LOOKBACK_CONFIG"] = args.config
    if getattr(args, "home", None):
        overrides["home"] = str(Path(args.home).expanduser())
        environ["LOOKBACK_HOME"] = overrides["home"]
    return overrides, environ


def add_json(parser: argparse.ArgumentParser, what: str = "the result") -> None:
    """``--json``: the one switch from text for people to JSON for programs."""
    parser.add_argument("--json", action="store_true", help=f"print {what} as JSON")


def add_session_flags(parser: argparse.ArgumentParser) -> None:
    """How ``search`` and ``show`` name a session; neither given: the current folder's
    project (or its nearest parent folder's)."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--session-file", metavar="FILE", help="a Pi, Claude Code or Codex "
                       "session file (names its project and session)")
    which.add_argument("--project", metavar="PROJECT", help="an indexed project: its folder "
                       "name or cwd (default: the current folder's, or its nearest parent's)")
    parser.add_argument("--session-id", metavar="ID", help="a session of that project "
                        "(default: its most recently active session)")
    parser.add_argument("--provider", metavar="NAME", help="the model provider the text is "
                        "for (the privacy policy decides what it may see; default: an unnamed "
                        "remote provider)")


def session_names(args: argparse.Namespace, settings: Settings) -> dict[str, str | None]:
    """The ``session_file``/``project``/``session_id`` of a request from the flags, checked
    here so that a wrong one is an error naming its flag (never a silent ``not-indexed``)."""
    from lookback.index.layout import project_dir

    if args.session_file:
        path = Path(args.session_file).expanduser()
        if not path.exists():
            raise UserError(f"--session-file {args.session_file}: no such file")
        if not path.is_file():
            raise UserError(f"--session-file {args.session_file}: not a file")
        return {"session_file": str(path.absolute()), "session_id": args.session_id}
    if args.project:
        return {"project": project_name(args.project, settings), "session_id": args.session_id}
    here = Path.cwd()
    for folder in (here, *here.parents):
        if project_dir(settings.home, str(folder), settings.namespace).index_path():
            return {"project": str(folder), "session_id": args.session_id}
    raise NotFound(f"no project is indexed for this folder ({here}) or a parent: name one "
                   "with --project or --session-file (`lookback status` lists them)")


def project_name(text: str, settings: Settings | None = None) -> str:
    """``--project``'s value as the index names projects: a folder name or a cwd, with a
    relative folder (``.``, ``../app``) made absolute; checked when ``settings`` are given."""
    name = os.path.abspath(text) if text in (".", "..") or (
        "/" in text and not text.startswith("/")) else text
    if settings is not None:
        named_project(settings, name, text)
    return name


def named_project(settings: Settings, name: str, given: str | None = None) -> ProjectDir:
    """The indexed project ``--project NAME`` names (its folder name or cwd), or an error
    naming the flag (and ``given``, what the user typed)."""
    from lookback.index.layout import ProjectNotFound, find_project

    given, name = given or name, project_name(name)
    try:
        return find_project(settings.home, name, settings.namespace)
    except ProjectNotFound as error:
        problem = "invalid project name" if "invalid" in str(error) else \
            "no such project is indexed"
        raise NotFound(f"--project {given}: {problem} (`lookback status` lists "
                       "them)") from None


#: The request fields of the API (``query.contract.request``) as the CLI's flags say them.
FLAGS = {"session_file": "--session-file", "project": "--project",
         "session_id": "--session-id", "leaf_id": "--leaf-id", "max_results": "--limit",
         "scope": "--scope", "provider": "--provider", "before": "--before",
         "after": "--after", "text": "TEXT", "entry_id": "ENTRY"}
_FIELD = re.compile(r"\b(" + "|".join(FLAGS) + r")\b")


def flag_error(error: RequestError) -> RequestError:
    """``error`` (worded for the API's fields) worded for the command line's flags."""
    return RequestError(_FIELD.sub(lambda match: FLAGS[match[1]], str(error)), error.code)


def status_error(status: str, names: dict[str, str | None],
                 warnings: Any = None) -> LookbackError | None:
    """The error an answer's status means on the command line (None: ``ok`` and the like)."""
    if status == "not-indexed":
        if names.get("session_file"):
            return NotFound(f"--session-file {names['session_file']}: this session is not "
                            f"indexed yet (lookback index {names['session_file']})")
        session = names.get("session_id")
        return NotFound(f"--session-id {session}: no such session in project "
                        f"{names.get('project')}" if session else
                        f"project {names.get('project')} has no session indexed")
    if status == "disabled":
        return Unavailable("; ".join(warnings or []) or "the index is unavailable")
    return None


def json_text(value: Any) -> str:
    """``value`` as the indented JSON every ``--json`` prints."""
    import json

    return json.dumps(value, indent=2, ensure_ascii=False)


def print_answer(answer: Any, *, pretty: bool = False) -> None:
    """Print an answer of the wire contract as its JSON (indented with ``pretty``): the
    same bytes ``lookback serve`` sends, encoded once."""
    import msgspec

    encoded = encode_answer(answer)
    print((msgspec.json.format(encoded, indent=2) if pretty else encoded).decode("utf-8"))
