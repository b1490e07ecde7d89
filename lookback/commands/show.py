"""``lookback show ENTRY``: one whole entry (and its neighbours), through the privacy gate.

It asks ``lookback.api.source_answer``, the call behind ``POST /v1/source``: the same
read and the same gate (``PrivacyPolicy.apply`` on each entry's whole indexed text),
never a second one.
"""

from __future__ import annotations

import argparse

from lookback.api import RequestError, SourceAnswer, new_reader, source_answer
from lookback.commands.common import (
    add_command,
    add_json,
    add_session_flags,
    flag_error,
    load,
    print_answer,
    session_names,
    status_error,
)
from lookback.errors import LookbackError, NotFound, UserError
from lookback.query.contract import MAX_NEIGHBOURS
from lookback.query.contract.answers import SourceEntry
from lookback.settings import Settings

SUMMARY = "read one whole entry of a session (and its neighbours)"
DESCRIPTION = """Print one entry's indexed text, as `lookback search` names it (ENTRY), through
the privacy gate every path that returns session text passes (the text is for --provider;
default: an unnamed remote provider, the strictest). The session is --session-file, or
--project and --session-id; neither: the current folder's project. A project without
--session-id: the session that holds ENTRY."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "show", run, SUMMARY, DESCRIPTION)
    parser.add_argument("entry", metavar="ENTRY", help="the entry's id (a search result's)")
    add_session_flags(parser)
    for side, where in (("before", "ahead of it on its branch"),
                        ("after", "following it")):
        parser.add_argument(f"--{side}", type=int, default=0, metavar="N",
                            help=f"also the N entries {where} (0-{MAX_NEIGHBOURS})")
    add_json(parser, "POST /v1/source's answer")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    names = session_names(args, settings)
    if not names.get("session_file") and not names.get("session_id"):
        names["session_id"] = _holder(settings, str(names["project"]), args.entry)
    request = {"entry_id": args.entry, "provider": args.provider, "before": args.before,
               "after": args.after, **names}
    try:
        answer = source_answer(request, settings=settings)
    except RequestError as error:
        raise flag_error(error) from None
    problem: LookbackError | None = status_error(answer.status, names, answer.warnings or None)
    if answer.status == "not-found":
        problem = NotFound(f"ENTRY {args.entry}: no such entry in the session")
    elif answer.status == "withheld":
        why = next((w for w in answer.excluded or [] if w.entry_id == args.entry), None)
        reason = why.reason if why else "privacy"
        problem = LookbackError(f"entry {args.entry} is withheld for provider "
                                f"{args.provider or '(unnamed, remote)'}: {reason}")
    if problem is not None:
        raise problem
    if args.json:
        print_answer(answer, pretty=True)
    else:
        _print(answer)
    return 0


def _holder(settings: Settings, project: str, entry_id: str) -> str:
    """The one session of ``project`` that holds ``entry_id`` (ids only: the text is read
    by ``source_answer``, through the gate)."""
    reader = new_reader(settings)
    try:
        sessions = reader.sessions_holding(project=project, entry_id=entry_id)
    finally:
        reader.close()
    if not sessions:
        raise NotFound(f"ENTRY {entry_id}: no such entry in project {project}")
    if len(sessions) > 1:
        raise UserError(f"ENTRY {entry_id} is in {len(sessions)} sessions of the project; "
                        f"name one with --session-id: {', '.join(sorted(sessions))}")
    return sessions[0]


def _print(answer: SourceAnswer) -> None:
    entries = [*(answer.before or []), answer.entry, *(answer.after or [])]
    for entry in entries:
        if isinstance(entry, SourceEntry):
            mark = "" if entry is answer.entry else "  (neighbour)"
            print(f"── {entry.entry_id}  {entry.role or entry.type}  {entry.timestamp or ''}  "
                  f"session {entry.session_id}  [{entry.classification}]{mark}")
            print(entry.excerpt.rstrip("\n"))
    withheld = [w for w in answer.excluded or [] if w.entry_id != (answer.entry and
                                                                  answer.entry.entry_id)]
    if withheld:
        print(f"({len(withheld)} neighbouring entries withheld by the privacy policy)")
