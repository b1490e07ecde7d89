"""``lookback owner PROJECT [--pause | --take]``: which worker host applies a project,
and moving a project between hosts on purpose (docs/scaling.md)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import TYPE_CHECKING

from lookback.application.modes import mode_of
from lookback.commands.common import add_command, add_json, json_text, load
from lookback.errors import UserError
from lookback.index.layout import PROJECTS_DIR, project_key

if TYPE_CHECKING:
    from lookback.workers.config import ServiceConfig
    from lookback.workers.port import RedisPort

_KEY = re.compile(r"^[A-Za-z0-9._-]{1,120}$")


SUMMARY = "service mode: show or move the worker host that owns a project"
DESCRIPTION = """Each project's events are applied on one worker host, its owner (claimed in
Redis by the first worker that applies it). To move a project: `lookback owner P --pause`
(events wait in Redis), copy the project's folder to the new host's data directory, then run
`lookback owner P --take` there."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "owner", run, SUMMARY, DESCRIPTION)
    parser.add_argument("project", help="the project's cwd or its folder name")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--pause", action="store_true",
                        help="stop every host from applying the project (start of a move); "
                             "returns once no host is applying it")
    action.add_argument("--take", action="store_true",
                        help="make this host (workers.host and this data directory) the owner "
                             "and resume applying")
    add_json(parser, "the owner")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    if mode_of(settings) != "service":
        raise UserError("`lookback owner` needs a Redis: set LOOKBACK_REDIS_URL")
    from lookback.workers.config import ServiceConfig, redis_client
    from lookback.workers.nudge import nudge
    from lookback.workers.owner import owner_of, pause, take

    config = ServiceConfig.from_settings(settings)
    name = _project(args.project, settings.namespace)
    client = redis_client(config)
    try:
        if args.pause:
            owner = pause(config, client, name, on_wait=_waiting)
            if owner is None:
                raise UserError(f"project {name} has no owner yet: nothing to pause", 1)
        elif args.take:
            _refuse_partial(config, client, name)
            owner = take(config, client, name)
            nudge(config, client, name, force=True)  # apply what waited meanwhile
        else:
            owner = owner_of(config, client, name)
    finally:
        client.close()
    if args.json:
        print(json_text({"project": name, "owner": None if owner is None else {
            "host": owner.host, "home": owner.home, "paused": owner.paused}}))
    elif owner is None:
        print(f"{name}: no owner yet (the first worker that applies it claims it)")
    else:
        state = " (paused: no host applies it until `lookback owner --take`)" \
            if owner.paused else ""
        print(f"{name}: owned by {owner.host}, index home {owner.home}{state}")
    return 0


def _refuse_partial(config: ServiceConfig, client: RedisPort, name: str) -> None:
    """A take whose index here lacks events already trimmed from Redis would serve a
    partial project as complete: refused, saying where the rest is."""
    from lookback.workers.event_stream import START, trimmed_past
    from lookback.workers.owner import owner_of
    from lookback.workers.status import index_cursor

    cursor = index_cursor(config, name)
    missing = trimmed_past(client, config.trimmed_key(name), cursor)
    if missing is None:
        return
    owner = owner_of(config, client, name)
    where = f"on {owner.id}" if owner is not None else "on its previous owner"
    raise UserError(
        f"refusing to take {name}: this host's index "
        f"{'is missing' if cursor == START else f'stops at event {cursor}'}, and the events "
        f"up to {missing} were applied {where} and trimmed from Redis, so this host would "
        f"answer with part of the project. Copy the project's folder from that host into "
        f"{config.home / PROJECTS_DIR} first (`lookback owner {name} --pause`, then copy; "
        "docs/scaling.md), then --take again", 1)


def _waiting(hosts: list[str]) -> None:
    print(f"waiting for the drain in flight on {', '.join(hosts)} to stop",
          file=sys.stderr, flush=True)


def _project(text: str, namespace: str) -> str:
    if text.startswith("/"):
        return project_key(text, namespace)
    if not _KEY.match(text) or text in (".", ".."):
        raise UserError(f"not a project cwd or folder name: {text!r}")
    return text
