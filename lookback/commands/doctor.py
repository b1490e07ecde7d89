"""``lookback doctor``: is everything wired? (the checks: ``lookback.doctor``)."""

from __future__ import annotations

import argparse
import json

from lookback.commands.common import add_command, load

SUMMARY = "check the reader, session folders, hooks, packages, MCP, indexes"
DESCRIPTION = """Check that Lookback is wired: the reader answers, each agent's sessions are
indexed and fresh, the Pi package and the Claude Code hook are installed, MCP is registered, no
index is damaged. Exit 1 when something is wrong; each problem names the command that fixes it."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "doctor", run, SUMMARY, DESCRIPTION)
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    from lookback.doctor import render, report, run_checks, situation_for

    findings = run_checks(situation_for(load(args)))
    summary = report(findings)
    print(json.dumps(summary, indent=2) if args.json else render(findings))
    return 0 if summary["ok"] else 1
