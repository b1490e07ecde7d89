"""Claude Code session files: their identity, and one line turned into an event.

Claude Code writes one JSONL file per session under ``~/.claude/projects/<slug>/``
(see docs/claude-code-session-format.md). Unlike Pi there is no header line: the
file starts with bookkeeping lines, and every *tree entry* (a line with ``uuid``)
repeats ``sessionId`` and ``cwd``. So the identity is read from the first lines
that carry them, and the incremental line reading of ``ingest.reader`` is shared
with Pi; only the per-line mapping below differs.

Mapping to the normalized record (``ingest.entries``):

- ``user`` / ``assistant`` entries become ``message`` records: text blocks, tool
  calls (``name`` + JSON input) and tool results are searchable text; thinking
  never is. Claude Code writes one assistant entry per content block, so a
  thinking-only entry has no text and is never evidence.
- The compaction summary (``isCompactSummary``), meta records and slash-command
  records are kept without text, never evidence: they are Claude Code's words (the
  model's summary, command echoes), not the conversation's.
- ``compact_boundary`` becomes a ``compaction`` record whose parent is the
  boundary's ``logicalParentUuid``, so the branch continues across compactions,
  and whose ``first_kept_id`` is the head of the preserved segment: the messages
  Claude Code still sends after the summary sit right before the boundary.
- Attachments (system reminders, ``prompt_snapshot`` system prompts, our own hook
  context) are kept as text-less links of the chain, never evidence.
- Lines without ``uuid`` (``api-request-blob`` holds copies of sent prompts,
  ``queue-operation``, ``last-prompt``, costs …) are bookkeeping: counted, skipped.
- Unknown types are counted and never evidence; with a ``uuid`` they stay as
  text-less links so the chain is not cut.
- Sidechain entries (sub-agents) never join the main session: a sub-agent's own
  file is its own session (``<sessionId>-agent-<agentId>``), and a sidechain line
  inside a main file is skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lookback.ingest.entries import cap_text
from lookback.ingest.storable import iso_millis

#: ``FileState.format`` of a Claude Code session file.
FORMAT = "claude-code"

#: Entry types Claude Code writes into the conversation tree.
TREE_TYPES = frozenset({"user", "assistant", "attachment", "system"})

#: Types of the lines seen outside the tree (no ``uuid``): skipped as bookkeeping; other
#: uuid-less lines are skipped too, and counted as unknown types.
BOOKKEEPING_TYPES = frozenset({
    "queue-operation", "last-prompt", "api-request", "api-request-shape",
    "api-request-blob", "cost-state", "mode", "tools-used", "atis-latch", "summary",
    "file-history-snapshot", "custom-title", "tag",
})

#: User texts Claude Code itself writes for slash commands: kept without text.
_COMMAND_PREFIXES = ("<command-name>", "<command-message>", "<local-command-stdout>",
                     "<local-command-stderr>", "<local-command-caveat>")


@dataclass(frozen=True)
class Identity:
    """Who a Claude Code file belongs to: the session id, the project (cwd), and for a
    sub-agent transcript the parent session."""

    session_id: str
    cwd: str
    parent_session: str | None = None
    started_at: str | None = None


def identity_of(obj: dict[str, Any]) -> Identity | None:
    """The file's identity if ``obj`` is its first tree entry with a ``sessionId`` and a
    ``cwd`` (None: keep looking; bookkeeping lines carry no ``cwd``).

    The session id is ``sessionId``, the project the ``cwd``; a sidechain entry with an
    ``agentId`` starts a sub-agent transcript, which gets its own session id beside its
    parent's.
    """
    session_id, cwd = obj.get("sessionId"), obj.get("cwd")
    if not (is_tree_entry(obj) and isinstance(session_id, str) and session_id
            and isinstance(cwd, str)):
        return None
    stamp = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
    agent = obj.get("agentId")
    if obj.get("isSidechain") and isinstance(agent, str) and agent:
        return Identity(f"{session_id}-agent-{agent}", cwd, parent_session=session_id,
                        started_at=stamp)
    return Identity(session_id, cwd, started_at=stamp)


def is_bookkeeping(obj: dict[str, Any]) -> bool:
    """A line of Claude Code's own outside the tree (it carries the ``sessionId``)."""
    return kind_of(obj) in BOOKKEEPING_TYPES and isinstance(obj.get("sessionId"), str)


def kind_of(obj: dict[str, Any]) -> str | None:
    """The line's ``type`` when it is a string (a bad line may hold a list there)."""
    kind = obj.get("type")
    return kind if isinstance(kind, str) else None


def is_tree_entry(obj: dict[str, Any]) -> bool:
    return isinstance(obj.get("uuid"), str) and bool(obj["uuid"])


def normalize_entry(obj: dict[str, Any], *, seq: int) -> dict[str, Any]:
    """The normalized record (``ingest.entries`` shape) of one Claude Code tree entry."""
    entry_type = kind_of(obj)
    parent = obj.get("parentUuid")
    record: dict[str, Any] = {
        "id": obj["uuid"],
        "parent_id": parent if isinstance(parent, str) and parent else None,
        "seq": seq,
        "type": "other",
        "role": None,
        "timestamp": obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None,
        "ts_ms": iso_millis(obj.get("timestamp")),
        "text": "",
        "eligible": False,
    }
    message = obj.get("message")
    if entry_type in ("user", "assistant") and isinstance(message, dict):
        _message_record(record, entry_type, message, obj)
    elif entry_type == "system" and obj.get("subtype") == "compact_boundary":
        _boundary_record(record, obj)
    elif entry_type in TREE_TYPES:
        record["type"] = entry_type  # attachments, other system lines: links only
    return record


def _message_record(record: dict[str, Any], entry_type: str, message: dict[str, Any],
                    obj: dict[str, Any]) -> None:
    content = message.get("content")
    results = isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content)
    text = cap_text(content_text(content))
    record["type"] = "message"
    record["role"] = "toolResult" if results else entry_type
    if _never_evidence(obj, text):
        return  # not even searchable: rowid-scoped searches trust the branch's types
    record["text"] = text
    record["eligible"] = bool(text.strip())


def _never_evidence(obj: dict[str, Any], text: str) -> bool:
    if obj.get("isCompactSummary") or obj.get("isMeta") or obj.get("isVisibleInTranscriptOnly"):
        return True
    return obj.get("type") == "user" and text.lstrip().startswith(_COMMAND_PREFIXES)


def _boundary_record(record: dict[str, Any], obj: dict[str, Any]) -> None:
    logical = obj.get("logicalParentUuid")
    if isinstance(logical, str) and logical and record["parent_id"] is None:
        record["parent_id"] = logical
    record["type"] = "compaction"
    record["first_kept_id"] = preserved_head(obj.get("compactMetadata"))


def preserved_head(metadata: Any) -> str | None:
    """The first preserved message before a boundary (None: nothing preserved).

    The preserved messages end at the boundary's logical parent, so the head is all
    the tree rule needs (the entries from it up to the boundary stay in context).
    """
    if not isinstance(metadata, dict):
        return None
    segment = metadata.get("preservedSegment")
    if isinstance(segment, dict) and isinstance(segment.get("headUuid"), str):
        head: str = segment["headUuid"]
        return head
    preserved = metadata.get("preservedMessages")
    if isinstance(preserved, dict):
        ids = preserved.get("allUuids") or preserved.get("uuids")
        if isinstance(ids, list) and ids and isinstance(ids[0], str):
            return ids[0]
    return None


def content_text(content: Any) -> str:
    """Text, tool calls and tool results of an Anthropic message content; never thinking."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [_block_text(block) for block in content if isinstance(block, dict)]
    return "\n".join(part for part in parts if part)


def _block_text(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return _str(block.get("text"))
    if kind == "tool_use":
        arguments = json.dumps(block.get("input"), ensure_ascii=False, sort_keys=True)
        return f"{_str(block.get('name'))} {arguments}".strip()
    if kind == "tool_result":
        return content_text(block.get("content"))
    return ""  # thinking, redacted thinking, images, documents: never evidence


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""



