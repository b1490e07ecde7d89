"""Turn one raw Pi entry into the normalized record the index stores.

The record keeps what retrieval needs (tree links, type, role, times, searchable
text) and nothing private: thinking blocks, images and the data of ``custom``
entries never leave this module.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

#: Entry types automatic retrieval may return; everything else is context, not evidence.
ELIGIBLE_TYPES = frozenset({"message", "custom_message"})

#: One entry's searchable text is cut here; the evidence excerpt is at most 6,000 chars.
MAX_TEXT_CHARS = 1_000_000

#: Bump when the text extraction below changes (old indexes are then re-read).
EXTRACTION_VERSION = 1


def normalize_entry(raw: dict[str, Any], *, entry_id: str, parent_id: str | None,
                    seq: int) -> dict[str, Any]:
    """The normalized record of ``raw`` (already given its id and parent)."""
    entry_type = str(raw.get("type") or "unknown")
    message = raw.get("message") if entry_type == "message" else None
    role = _role(entry_type, message)
    text = _cap(entry_text(raw))
    record: dict[str, Any] = {
        "id": entry_id,
        "parent_id": parent_id,
        "seq": seq,
        "type": entry_type,
        "role": role,
        "timestamp": raw.get("timestamp") if isinstance(raw.get("timestamp"), str) else None,
        "ts_ms": _timestamp_ms(raw, message),
        "text": text,
        "eligible": entry_type in ELIGIBLE_TYPES and bool(text.strip()),
    }
    if entry_type == "compaction":
        record["first_kept_id"] = raw.get("firstKeptEntryId")
    return record


def entry_text(raw: dict[str, Any]) -> str:
    """The searchable text of one entry ('' for entries that carry none)."""
    entry_type = raw.get("type")
    if entry_type == "message":
        message = raw.get("message")
        return message_text(message) if isinstance(message, dict) else ""
    if entry_type == "custom_message":
        return content_text(raw.get("content"))
    if entry_type in ("compaction", "branch_summary"):
        summary = raw.get("summary")
        return summary if isinstance(summary, str) else ""
    return ""  # custom (private data), label, model changes, unknown types


def message_text(message: dict[str, Any]) -> str:
    """Text of a Pi AgentMessage: what the model saw, minus thinking and images."""
    role = message.get("role")
    if role == "bashExecution":
        parts = [_str(message.get("command")), _str(message.get("output"))]
        return "\n".join(part for part in parts if part)
    parts = [content_text(message.get("content"), with_tool_calls=True)]
    if role == "assistant" and message.get("errorMessage"):
        parts.append(_str(message.get("errorMessage")))
    return "\n".join(part for part in parts if part)


def content_text(content: Any, *, with_tool_calls: bool = False) -> str:
    """Join the text of a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts: list[str] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(_str(block.get("text")))
        elif kind == "toolCall" and with_tool_calls:
            parts.append(_tool_call_text(block))
        # thinking, redacted thinking and images are never evidence
    return "\n".join(part for part in parts if part)


def _tool_call_text(block: dict[str, Any]) -> str:
    arguments = block.get("arguments")
    if isinstance(arguments, str):
        rendered = arguments
    else:
        rendered = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
    return f"{_str(block.get('name'))} {rendered}".strip()


def _role(entry_type: str, message: Any) -> str | None:
    if entry_type == "custom_message":
        return "custom"
    if isinstance(message, dict) and isinstance(message.get("role"), str):
        return "custom" if message["role"] == "hookMessage" else message["role"]
    return None


def _timestamp_ms(raw: dict[str, Any], message: Any) -> int | None:
    if isinstance(message, dict):
        value = message.get("timestamp")
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    stamp = raw.get("timestamp")
    if isinstance(stamp, str):
        try:
            return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return None
    return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _cap(text: str) -> str:
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS]
