"""``lookback context retrieved|manifest|included|excluded [all]``: show the Context Manifest.

The manifest (``query.context.manifest``) holds ids, scores, classifications and counts, never
text; ``retrieved`` re-reads each item's excerpt from the local index by entry id and
shows it only when the privacy gate (``PrivacyPolicy.gate``, as every other path that
returns text) admits the whole row for ``--provider`` (default: an unnamed remote
provider, the strictest reading).
Without ``--session-id``/``--session-file`` the most recently recorded session is shown.
By default the latest retrieval is shown; ``all`` shows every record kept.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

from lookback.api import new_reader, privacy_policy
from lookback.commands.common import add_command, load
from lookback.errors import UserError
from lookback.ingest.pipeline import peek_header
from lookback.query.context.manifest import ManifestStore
from lookback.query.privacy import PrivacyPolicy
from lookback.query.search import with_excerpts
from lookback.settings import Settings

VIEWS = ("retrieved", "manifest", "included", "excluded")
EXCERPT_CHARS = 240


SUMMARY = "show what retrieval put into (or kept out of) the model's context"
DESCRIPTION = """Render the Context Manifest that `lookback serve` records per retrieval."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = add_command(subparsers, "context", run, SUMMARY, DESCRIPTION)
    parser.add_argument("view", choices=VIEWS, help="what to show")
    parser.add_argument("scope", nargs="?", choices=("all",),
                        help="every record kept for the session, not only the latest")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--session-id", help="the session id (Pi, Claude Code or Codex)")
    which.add_argument("--session-file", type=Path,
                       help="the session file (Pi, Claude Code or Codex)")
    parser.add_argument("--provider", help="show excerpts this provider may see (privacy policy); "
                        "default: an unnamed remote provider")
    parser.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    settings = load(args)
    store = ManifestStore(settings.home, readonly=True,
                          keep=settings.manifest.keep_per_session)
    try:
        session_id = _session_id(args, store)
        records = store.entries(session_id) if session_id else []
    finally:
        store.close()
    chosen = records if args.scope == "all" else records[-1:]
    if args.view == "retrieved":
        policy = privacy_policy(settings)
        chosen = [_with_excerpts(settings, record, policy, args.provider) for record in chosen]
    if args.json:
        print(json.dumps({"session_id": session_id, "view": args.view,
                          "records": chosen}, indent=2, ensure_ascii=False))
        return 0
    if not chosen:
        print("no retrievals recorded" + (f" for session {session_id}" if session_id else "")
              + " (the manifest is written by `lookback serve`)")
        return 0
    print("\n".join(render(args.view, chosen, session_id or "")))
    return 0


def _session_id(args: argparse.Namespace, store: ManifestStore) -> str | None:
    if args.session_id:
        session_id: str = args.session_id
        return session_id
    if args.session_file:
        try:
            return peek_header(args.session_file)[0]
        except OSError as error:
            raise UserError(f"--session-file {args.session_file}: "
                            f"{error.strerror or error}") from None
    return store.latest_session()


def _with_excerpts(settings: Settings, record: dict[str, Any], policy: PrivacyPolicy,
                   provider: str | None) -> dict[str, Any]:
    """``record`` with each item's excerpt re-read from the index through the gate
    (``query.search.outline.with_excerpts``)."""
    reader = new_reader(settings)
    try:
        return with_excerpts(reader, policy, record, provider, EXCERPT_CHARS)
    finally:
        reader.close()


# ---------------------------------------------------------------------------------------------
# Rendering


def render(view: str, records: list[dict[str, Any]], session_id: str) -> list[str]:
    """Text lines for ``view`` over ``records`` (oldest first)."""
    if view == "excluded":
        rows = [e for record in records for e in record.get("excluded", [])]
        lines = [f"session {session_id}: {len(rows)} excluded source(s) in "
                 f"{len(records)} retrieval(s)"]
        return lines + _table(rows, ("entry_id", "classification", "stage", "reason"))
    lines = []
    for record in records:
        lines.append(_headline(record, session_id))
        items = record.get("items", [])
        if view == "included":
            items = [i for i in items if i.get("included", True)]
        columns: tuple[str, ...] = ("entry_id", "role", "tier", "classification", "score",
                                    "tokens", "group_id")
        if view == "manifest":
            ids = ", ".join(record.get("retrievedEventIds", [])) or "(none)"
            lines.append(f"  retrievedEventIds: {ids}")
            columns += ("reason",)
        lines += _table(items, columns)
        if view == "retrieved":
            for item in items:
                excerpt = item.get("excerpt")
                if excerpt:
                    shown = json.dumps(excerpt, ensure_ascii=False)
                elif item.get("withheld"):
                    why = item.get("withheld_reason") or ""
                    shown = f"(withheld: {item['withheld']}) {why}".rstrip()
                else:
                    shown = "(not in index)"
                lines.append(f"  {item.get('entry_id')}: {shown}")
            lines += _counts(record)
    return lines


def _headline(record: dict[str, Any], session_id: str) -> str:
    when = datetime.datetime.fromtimestamp(record.get("at", 0)).isoformat(timespec="seconds")
    excluded = len(record.get("excluded", []))
    return (f"{when}  session {session_id}  status={record.get('status')}  "
            f"items={len(record.get('items', []))}  excluded={excluded}  "
            f"tokens={record.get('tokens', 0)}  latency={record.get('latency_ms')} ms"
            + ("  (cached)" if record.get("cached") else ""))


def _counts(record: dict[str, Any]) -> list[str]:
    diagnostics = record.get("diagnostics", {})
    keys = ("candidates", "in_context_removed", "deduplicated", "alternate_branch_candidates",
            "tokens_used", "latency_ms")
    lines = ["  " + "  ".join(f"{k}={diagnostics[k]}" for k in keys if k in diagnostics)]
    planner = record.get("planner")
    if planner:
        lines.append(f"  planner: included={planner.get('included')} "
                     f"excluded={planner.get('excluded')} fallback={planner.get('fallback')}")
        for item in record.get("excluded", []):
            if item.get("stage") == "planner":
                lines.append(f"    excluded {item.get('entry_id')}: {item.get('reason')}")
    return lines


def _table(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> list[str]:
    if not rows:
        return ["  (none)"]
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True))
              for row in cells]
    return [line.rstrip() for line in lines]


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)
