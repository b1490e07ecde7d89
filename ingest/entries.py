"""Turn one raw Pi entry into the normalized record the index stores.

The record keeps what retrieval needs (tree links, type, role, times, searchable
text) and nothing private: thinking blocks, images and the data of ``custom``
entries never leave this module.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from lookback.ingest.storable import millis

#: Entry types automatic retrieval may return; everything else is context, not evidence.
ELIGIBLE_TYPES = frozenset({"message", "custom_message"})

#: The field naming the entry the context rule needs, stored as ``first_kept_id``.
ENTRY_REFERENCES = {"compaction": "firstKeptEntryId", "context_edit": "targetId"}

#: One entry's searchable text is cut here (its end is neither searchable nor shown;
#: ``lookback status`` counts such entries); the evidence excerpt is at most 6,000 chars.
MAX_TEXT_CHARS = 1_000_000


def normalize_entry(raw: dict[str, Any], *, entry_id: str, parent_id: str | None,
                    seq: int) -> tuple[dict[str, Any], int]:
    """(the normalized record of ``raw``, how many of its values were dropped).

    ``raw`` already has its id and parent. Every value in the record can be stored:
    a value of the wrong type, or a number that is not finite or out of range, is
    left out (``None``) and counted, never raised.
    """
    raw_type = raw.get("type")
    entry_type = raw_type if isinstance(raw_type, str) and raw_type else "unknown"
    message = raw.get("message") if entry_type == "message" else None
    role = _role(entry_type, message)
    text = cap_text(entry_text(raw))
    ts_ms, dropped = _timestamp_ms(raw, message)
    record: dict[str, Any] = {
        "id": entry_id,
        "parent_id": parent_id,
        "seq": seq,
        "type": entry_type,
        "role": role,
        "timestamp": raw.get("timestamp") if isinstance(raw.get("timestamp"), str) else None,
        "ts_ms": ts_ms,
        "text": text,
        "eligible": entry_type in ELIGIBLE_TYPES and bool(text.strip()),
    }
    if entry_type in ENTRY_REFERENCES:
        # The entry the context rule needs: a compaction's first kept entry (its own id when
        # it keeps none), or the entry a Pi 1.x context_edit takes out of the model's context.
        refers_to = raw.get(ENTRY_REFERENCES[entry_type])
        record["first_kept_id"] = refers_to if isinstance(refers_to, str) else None
        dropped += int(refers_to is not None and not isinstance(refers_to, str))
    dropped += int(raw_type is not None and raw_type is not entry_type)
    return record, dropped


def entry_text(raw: dict[str, Any]) -> str:
    """The searchable text of one entry ('' for entries that carry none)."""
    entry_type = raw.get("type")
    if entry_type == "message":
        message = raw.get("message")
        # Pi 1.x's system messages are the prompt and tool declarations: never evidence.
        if not isinstance(message, dict) or message.get("role") == "system":
            return ""
        return message_text(message)
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
    if role == "toolResult":
        parts.extend(nested_call_texts(message.get("nestedCalls")))
    return "\n".join(part for part in parts if part)


def nested_call_texts(nested: Any) -> list[str]:
    """The calls a tool made to other tools (Pi 1.x ``nestedCalls``, codemode's scripts),
    searchable like the model's own tool calls."""
    calls = nested.get("calls") if isinstance(nested, dict) else None
    if not isinstance(calls, list):
        return []
    return [_tool_call_text(call) for call in calls if isinstance(call, dict)]


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
        try:
            rendered = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        except (RecursionError, ValueError, TypeError):  # nested past the encoder's limit
            rendered = _shallow_json(arguments, MAX_ARGUMENT_DEPTH)
    return f"{_str(block.get('name'))} {rendered}".strip()


#: Tool arguments nested deeper than this are searchable only down to this depth.
MAX_ARGUMENT_DEPTH = 64


def _shallow_json(value: Any, depth: int) -> str:
    """JSON of ``value`` as ``json.dumps`` writes it, containers below ``depth`` as ``…``."""
    if isinstance(value, dict):
        if depth <= 0:
            return "{…}"
        items = sorted(((str(k), v) for k, v in value.items()), key=lambda item: item[0])
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: "
                               f"{_shallow_json(v, depth - 1)}" for k, v in items) + "}"
    if isinstance(value, list):
        if depth <= 0:
            return "[…]"
        return "[" + ", ".join(_shallow_json(v, depth - 1) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _role(entry_type: str, message: Any) -> str | None:
    if entry_type == "custom_message":
        return "custom"
    if isinstance(message, dict) and isinstance(message.get("role"), str):
        return "custom" if message["role"] == "hookMessage" else message["role"]
    return None


def _timestamp_ms(raw: dict[str, Any], message: Any) -> tuple[int | None, int]:
    """(epoch milliseconds of the entry, 1 when a numeric timestamp had to be dropped)."""
    dropped = 0
    if isinstance(message, dict):
        value = message.get("timestamp")
        if isinstance(value, int | float) and not isinstance(value, bool):
            stamp_ms = millis(value)
            if stamp_ms is not None:
                return stamp_ms, 0
            dropped = 1  # NaN, infinite or beyond year 9999: fall back to the entry's
    stamp = raw.get("timestamp")
    if isinstance(stamp, str):
        try:
            parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000
        except (ValueError, OverflowError, OSError):
            return None, dropped
        return millis(parsed), dropped
    return None, dropped


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def cap_text(text: str) -> str:
    """``text`` cut at ``MAX_TEXT_CHARS`` (Pi's and Claude Code's entries alike)."""
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS]
