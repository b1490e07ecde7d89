"""The Context Manifest: what each retrieval put into (or kept out of) the model's context.

Every retrieval answered by ``lookback serve`` leaves one record of kind ``retrieval``:
per evidence item its source id, classification, score, tokens, group id and reason;
``retrievedEventIds`` (the canonical ``session_id:entry_id`` source ids); the excluded
sources with their reasons; diagnostics counts, token use and latency. When the
extension then asks the planner (``/v1/plan``), the planner's decisions are folded into
that same record, so ``included`` and ``excluded`` say what the model finally saw.

A record never holds message text, excerpts or query terms: records are built from a
whitelist of fields (``retrieval_record``), and diagnostics keep only numbers. Text is
re-read from the index by entry id when someone asks to see it (``lookback context
retrieved``).

``ManifestStore`` keeps records in one small SQLite file,
``$LOOKBACK_HOME/manifests/manifests.sqlite``, the latest ``keep`` per session.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any

import apsw

from lookback.index.layout import make_home
from lookback.index.store import all_rows
from lookback.query.contract.messages import JsonObject
from lookback.settings import DEFAULTS

MANIFEST_DIR = "manifests"
MANIFEST_FILE = "manifests.sqlite"
DEFAULT_KEEP = DEFAULTS.manifest.keep_per_session
PRUNE_EVERY = 16

_DDL = """
CREATE TABLE IF NOT EXISTS manifest (
    id         INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    project    TEXT,
    kind       TEXT NOT NULL,
    created_at REAL NOT NULL,
    record     TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS manifest_session ON manifest (session_id, id);
"""


def _number(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return int(value)
    return value if isinstance(value, int | float) else None


def _numbers_only(values: Any) -> dict[str, Any]:
    """Numeric leaves of a diagnostics mapping (nested mappings kept, lists counted)."""
    if not isinstance(values, dict):
        return {}
    kept: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            nested = _numbers_only(value)
            if nested:
                kept[str(key)] = nested
        elif isinstance(value, list | tuple):
            kept[f"{key}_count"] = len(value)
        elif _number(value) is not None:
            kept[str(key)] = _number(value)
    return kept


def source_id(item: JsonObject) -> str:
    """The canonical source id of an evidence item: ``session_id:entry_id``."""
    return f"{item.get('session_id')}:{item.get('entry_id')}"


_QUOTED = re.compile(r"\s*(`[^`]*`|\"[^\"]*\"|'[^']*')")


def _reason(item: JsonObject) -> str | None:
    """The ranking reasons with their quoted terms removed ("exact identifier +100")."""
    reasons = item.get("reasons", item.get("reason"))
    if reasons is None:
        return None
    if not isinstance(reasons, list | tuple):
        reasons = [reasons]
    return ", ".join(_QUOTED.sub("", str(r)) for r in reasons)


def _item(item: JsonObject) -> dict[str, Any]:
    return {
        "source": source_id(item),
        "entry_id": item.get("entry_id"),
        "session_id": item.get("session_id"),
        "role": item.get("role") if isinstance(item.get("role"), str) else None,
        "tier": item.get("tier") if isinstance(item.get("tier"), str) else None,
        "classification": item.get("classification"),
        "score": _number(item.get("score")),
        "tokens": _number(item.get("tokens")),
        "group_id": item.get("group_id"),
        "reason": _reason(item),
    }


def _excluded(item: JsonObject, stage: str) -> dict[str, Any]:
    return {
        "source": item.get("source") or source_id(item),
        "entry_id": item.get("entry_id"),
        "session_id": item.get("session_id"),
        "classification": item.get("classification"),
        "reason": _QUOTED.sub("", str(item.get("reason") or stage)),
        "stage": stage,
    }


def retrieval_record(response: JsonObject, *, session_id: str, project: str | None,
                     leaf_id: str | None, latency_ms: float, cached: bool = False
                     ) -> JsonObject:
    """The manifest record of one retrieval response (no text: whitelisted fields only)."""
    evidence = [e for e in response.get("evidence") or [] if isinstance(e, dict)]
    excluded = [e for e in response.get("excluded") or [] if isinstance(e, dict)]
    query = response.get("query")
    if not isinstance(query, dict):
        query = {}
    items = [_item(e) for e in evidence]
    return {
        "kind": "retrieval",
        "at": time.time(),
        "session_id": session_id,
        "project": project,
        "leaf_id": leaf_id,
        "status": str(response.get("status") or "unknown"),
        "items": items,
        "retrievedEventIds": [i["source"] for i in items],
        "excluded": [_excluded(e, "privacy") for e in excluded],
        "query_terms": {str(k): len(v) for k, v in query.items() if isinstance(v, list)},
        "diagnostics": _numbers_only(response.get("diagnostics")),
        "tokens": sum(i["tokens"] or 0 for i in items),
        "latency_ms": round(latency_ms, 3),
        "cached": cached,
    }


def apply_plan(record: JsonObject, plan_result: JsonObject) -> JsonObject:
    """``record`` with the planner's decisions folded in (a new dict; text-free)."""
    record = json.loads(json.dumps(record))
    excluded = {e.get("source"): e for e in plan_result.get("excluded") or []
                if isinstance(e, dict)}
    classifications = {i["source"]: i.get("classification") for i in record.get("items", [])}
    for item in record.get("items", []):
        item["included"] = item["source"] not in excluded
    for source, entry in excluded.items():
        record.setdefault("excluded", []).append(
            _excluded({**entry, "classification": classifications.get(source)}, "planner"))
    tokens = plan_result.get("tokens") if isinstance(plan_result.get("tokens"), dict) else {}
    fallback = plan_result.get("fallback")
    record["planner"] = {
        "included": len(plan_result.get("included") or []),
        "excluded": len(excluded),
        "tokens": _numbers_only(tokens),
        "fallback": fallback if isinstance(fallback, str) else None,
    }
    return record


def plan_record(plan_result: JsonObject, *, session_id: str, project: str | None) -> JsonObject:
    """A record for a planner call with no retrieval record to attach to."""
    base = {"kind": "plan", "at": time.time(), "session_id": session_id, "project": project,
            "status": "planned", "items": [], "retrievedEventIds": [], "excluded": [],
            "diagnostics": {}}
    return apply_plan(base, plan_result)


class ManifestStore:
    """Manifest records in ``<home>/manifests/manifests.sqlite``; latest ``keep`` per session.

    Safe to share between threads (one connection, one lock). Readers (``lookback
    context``) open the same file; WAL lets them read while the server writes.
    """

    def __init__(self, home: Path, *, keep: int = DEFAULT_KEEP, readonly: bool = False) -> None:
        self.path = Path(home) / MANIFEST_DIR / MANIFEST_FILE
        self.keep = max(1, int(keep))
        self._lock = threading.Lock()
        self._connection: apsw.Connection | None = None
        self._readonly = readonly
        self._since_prune: dict[tuple[str, str | None], int] = {}

    def _open(self) -> apsw.Connection | None:
        if self._connection is not None:
            return self._connection
        if self._readonly:
            if not self.path.exists():
                return None
            connection = apsw.Connection(str(self.path), flags=apsw.SQLITE_OPEN_READONLY)
        else:
            make_home(self.path.parent.parent)
            self.path.parent.mkdir(exist_ok=True)
            connection = apsw.Connection(str(self.path))
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
            connection.execute(_DDL)
        connection.set_busy_timeout(2000)
        self._connection = connection
        return connection

    def add(self, record: JsonObject) -> None:
        """Store ``record`` and drop the session's records beyond the latest ``keep``."""
        with self._lock:
            connection = self._open()
            assert connection is not None
            with connection:
                connection.execute(
                    "INSERT INTO manifest (session_id, project, kind, created_at, record) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (record["session_id"], record.get("project"), record["kind"],
                     record.get("at", time.time()), json.dumps(record)))
                # Keyed by (session, project): a token granted one project that names
                # another project's session id only ever prunes its own records.
                key = (record["session_id"], record.get("project"))
                count = self._since_prune.get(key, 0) + 1
                # Pruning every few inserts keeps at most keep + PRUNE_EVERY records.
                if count >= min(self.keep, PRUNE_EVERY):
                    connection.execute(
                        "DELETE FROM manifest WHERE session_id = ? AND project IS ? AND id NOT IN "
                        "(SELECT id FROM manifest WHERE session_id = ? AND project IS ? "
                        "ORDER BY id DESC LIMIT ?)", (*key, *key, self.keep))
                    count = 0
                self._since_prune[key] = count
                if len(self._since_prune) > 10_000:  # bounded; a reset only delays pruning
                    self._since_prune.clear()

    def record_plan(self, session_id: str, project: str | None,
                    plan_result: JsonObject) -> None:
        """Fold a planner answer into the session's latest retrieval record (or add one)."""
        with self._lock:
            connection = self._open()
            assert connection is not None
            with connection:
                row = connection.execute(
                    "SELECT id, record FROM manifest WHERE session_id = ? AND project IS ? "
                    "AND kind = 'retrieval' ORDER BY id DESC LIMIT 1",
                    (session_id, project)).fetchone()
                if row is not None:
                    updated = apply_plan(json.loads(row[1]), plan_result)
                    connection.execute("UPDATE manifest SET record = ? WHERE id = ?",
                                       (json.dumps(updated), row[0]))
                    return
        self.add(plan_record(plan_result, session_id=session_id, project=project))

    def entries(self, session_id: str, projects: Collection[str] | None = None
                ) -> list[JsonObject]:
        """The session's latest ``keep`` records, oldest first (the latest is last); with
        ``projects``, only records of those projects."""
        where, values = "session_id = ?", [session_id]
        if projects is not None:
            where += " AND project IN (SELECT value FROM json_each(?))"
            values.append(json.dumps(sorted(projects)))
        with self._lock:
            connection = self._open()
            if connection is None:
                return []
            try:
                rows = all_rows(connection.execute(
                    f"SELECT record FROM manifest WHERE {where} ORDER BY id DESC LIMIT ?",
                    (*values, self.keep)))[::-1]
            except apsw.SQLError:  # file created but table not yet there
                return []
        return [json.loads(row[0]) for row in rows]

    def forget_session(self, session_id: str, project: str) -> int:
        """Delete the session's records of ``project`` (``lookback forget`` of a whole
        session); returns how many went."""
        if not self.path.exists():
            return 0
        with self._lock:
            connection = self._open()
            assert connection is not None
            with connection:
                connection.execute("DELETE FROM manifest WHERE session_id = ? AND project IS ?",
                                   (session_id, project))
                deleted = connection.changes()
        return deleted

    def latest_session(self) -> str | None:
        """The session of the most recent record (None when there is none)."""
        with self._lock:
            connection = self._open()
            if connection is None:
                return None
            try:
                row = connection.execute(
                    "SELECT session_id FROM manifest ORDER BY id DESC LIMIT 1").fetchone()
            except apsw.SQLError:
                return None
        return None if row is None else row[0]

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
