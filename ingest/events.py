"""Events: the facts ingest hands to a sink, and the unit the index log stores.

An event is small and self-contained: replaying the same events in the same order
always yields the same index, so events can travel through Redis, be re-delivered,
and rebuild an index without the original session files.

Kinds
-----
``session``  a session header was read: ``{file, cwd, version, started_at, parent_session}``
``entry``    an entry was appended: ``{entry: <normalized entry, see ingest.entries>}``
``reset``    the session file was rewritten or truncated: forget the session's entries
             (the ``entry`` events that follow re-add them); with ``{reason: "moved",
             file}`` its header now names another project: forget the session and file
``leaf``     an id-less cursor record moved the session's leaf: ``{target_id}``
``forget``   the user forgot entries of the session (``lookback forget``, ``index.forget``):
             ``{entry_ids}`` (those entries) or ``{session: true}`` (all of it), and
             ``text_hashes`` (their texts, wherever they come again); never any text
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from lookback.errors import LookbackError
from lookback.ingest import jsonio

EVENT_KINDS = ("session", "entry", "reset", "leaf", "forget")


@dataclass(frozen=True)
class Event:
    kind: str
    session_id: str
    cwd: str
    payload: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return jsonio.dumps({"kind": self.kind, "session_id": self.session_id, "cwd": self.cwd,
                             "payload": self.payload})

    @classmethod
    def from_json(cls, text: str | bytes) -> Event:
        try:
            data = jsonio.loads(text)
            event = cls(kind=data["kind"], session_id=data["session_id"], cwd=data["cwd"],
                        payload=data.get("payload") or {})
        except (ValueError, KeyError, TypeError, RecursionError) as error:
            raise EventError(f"undecodable event: {error.__class__.__name__}") from None
        event.check()
        return event

    def check(self) -> None:
        """Raise EventError when the event could never be applied: every value the
        index's projections read has the type they read it as, and every number fits
        SQLite's integers, so an error while applying is a bug, never bad input."""
        if self.kind not in EVENT_KINDS:
            raise EventError(f"unknown event kind {self.kind!r}")
        if not isinstance(self.session_id, str) or not self.session_id:
            raise EventError("event without a session id")
        if not isinstance(self.payload, dict):
            raise EventError("event payload is not an object")
        if self.kind == "entry":
            entry = self.payload.get("entry")
            if not isinstance(entry, dict) or not entry.get("id") or "seq" not in entry:
                raise EventError("entry event without an entry id and position")
            if not isinstance(entry["id"], str):
                raise EventError("entry id is not text")
            _check_fields(entry, _ENTRY_FIELDS, "entry")
            kept = entry.get("kept_ids")
            if kept is not None and not (isinstance(kept, list)
                                         and all(isinstance(i, str) for i in kept)):
                raise EventError("entry event: kept_ids is not a list of ids")
        elif self.kind == "session":
            _check_fields(self.payload, _SESSION_FIELDS, "session")
        elif self.kind == "leaf" and not isinstance(self.payload.get("target_id"), str):
            raise EventError("leaf event without a target id")
        elif self.kind == "reset":
            _check_fields(self.payload, _RESET_FIELDS, "reset")
        elif self.kind == "forget":
            _check_forget(self.payload)


class EventError(LookbackError, ValueError):
    """An event that cannot be decoded or applied, whatever the retry."""

    code = "bad-event"


_INT64 = (-(2**63), 2**63 - 1)
_SCALAR = (str, int, float)
#: What the projections (index.writer) read from each kind, and the types they expect.
_ENTRY_FIELDS: dict[str, tuple[type, ...]] = {
    "seq": (int,), "parent_id": (str,), "type": (str,), "role": (str,), "timestamp": (str,),
    "ts_ms": (int, float), "text": (str,), "first_kept_id": (str,),
}
_SESSION_FIELDS: dict[str, tuple[type, ...]] = {
    "file": _SCALAR, "cwd": _SCALAR, "version": _SCALAR, "started_at": _SCALAR,
    "parent_session": _SCALAR,
}
_RESET_FIELDS: dict[str, tuple[type, ...]] = {"reason": (str,), "file": (str,)}


def _check_forget(payload: dict[str, Any]) -> None:
    for name in ("entry_ids", "text_hashes"):
        values = payload.get(name, [])
        if not (isinstance(values, list) and all(isinstance(v, str) and v for v in values)):
            raise EventError(f"forget event: {name} is not a list of ids")
    if payload.get("session") not in (None, True, False):
        raise EventError("forget event: session is not a boolean")
    if not payload.get("session") and not payload.get("entry_ids") \
            and not payload.get("text_hashes"):
        raise EventError("forget event names nothing to forget")


def _check_fields(values: dict[str, Any], fields: dict[str, tuple[type, ...]],
                  kind: str) -> None:
    for name, types in fields.items():
        value = values.get(name)
        if value is None and name != "seq":
            continue
        if isinstance(value, bool) or not isinstance(value, types):
            raise EventError(f"{kind} event: {name} is a {type(value).__name__}")
        if isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
            raise EventError(f"{kind} event: {name} is out of range")
        if isinstance(value, float) and not math.isfinite(value):
            raise EventError(f"{kind} event: {name} is not a finite number")
