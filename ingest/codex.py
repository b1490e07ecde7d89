"""Codex CLI session files ("rollouts"): their identity, and one line turned into an entry.

Codex writes one JSONL file per thread under ``$CODEX_HOME/sessions/YYYY/MM/DD/``
(``rollout-<time>-<thread id>.jsonl``; see docs/codex-session-format.md). Every line
is ``{timestamp, ordinal, type, payload}``; the first is ``session_meta`` (the thread
id, the cwd — the project —, and for a fork ``forked_from_id`` and ``history_base``).
The file is linear: there is no parent tree, so each entry's parent is the previous
entry, and resumed sessions append to the same file. The incremental line reading of
``ingest.reader`` is shared with Pi and Claude Code; only the mapping below differs.

Mapping to the normalized record (``ingest.entries``):

- ``response_item`` lines are what the model sees. A ``message`` is evidence only for
  the parts that are the conversation's words: a user message's ``user.text`` parts
  (``content_item_kinds`` in the passthrough metadata names each part's kind; AGENTS.md,
  environment, skills and permissions instructions and ``hooks.additional_context`` —
  Lookback's own injected evidence — never are), an assistant's ``output_text``.
  Developer messages never are; nor is the compaction summary (an assistant message
  with ``metadata.compaction_output``). Function and custom tool calls (name +
  arguments) and their outputs are searchable; reasoning never is. Every response item
  stays as an entry (text-less when never evidence), so the chain has no gaps.
- A ``compacted`` line becomes a ``compaction`` record whose ``kept_ids`` are the ids in
  its ``replacement_history``: the live context after it (the user messages keep their
  original ids there); whatever it dropped is retrievable.
- ``event_msg``, ``turn_context``, ``world_state`` and ``token_usage_record`` are
  bookkeeping (``event_msg`` repeats the response items): counted, skipped. Other types
  are counted as unknown and skipped.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lookback.ingest.entries import cap_text
from lookback.ingest.storable import iso_millis

#: ``FileState.format`` of a Codex rollout.
FORMAT = "codex"

#: Line types Codex writes beside the response items: skipped, counted.
BOOKKEEPING_TYPES = frozenset({"event_msg", "turn_context", "world_state",
                               "token_usage_record"})

#: The one kind of user content that is the user's own words.
USER_TEXT = "user.text"

#: What a user message of a Codex without ``content_item_kinds`` starts with when Codex,
#: not the user, wrote it (AGENTS.md, the environment, skills and permissions blocks).
_INJECTED_PREFIXES = ("# AGENTS.md instructions", "<environment_context>",
                      "<user_instructions>", "<skills_instructions>",
                      "<permissions instructions>", "<INSTRUCTIONS>")

#: Tool calls and their outputs: the payload types, and which field holds what.
_CALLS = {"function_call": "arguments", "custom_tool_call": "input"}
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})


@dataclass(frozen=True)
class Identity:
    """Who a rollout belongs to: the thread id, the project (cwd), and for a fork the
    parent thread and how many bytes of the parent's file are its history."""

    session_id: str
    cwd: str
    started_at: str | None = None
    parent_session: str | None = None
    history_base: tuple[str, int] | None = None


def identity_of(obj: dict[str, Any]) -> Identity | None:
    """The identity when ``obj`` (a file's first line) is a ``session_meta`` with an id and
    a cwd; None otherwise (then it is no Codex rollout)."""
    payload = obj.get("payload")
    if obj.get("type") != "session_meta" or not isinstance(payload, dict):
        return None
    thread, cwd = payload.get("id"), payload.get("cwd")
    if not (isinstance(thread, str) and thread and isinstance(cwd, str)):
        return None
    stamp = payload.get("timestamp")
    stamp = stamp if isinstance(stamp, str) else _str(obj.get("timestamp")) or None
    parent = payload.get("forked_from_id")
    base = payload.get("history_base")
    history = None
    if isinstance(base, dict) and isinstance(base.get("thread_id"), str) \
            and isinstance(base.get("end_byte_offset"), int) \
            and not isinstance(base["end_byte_offset"], bool) and base["end_byte_offset"] > 0:
        history = (base["thread_id"], base["end_byte_offset"])
        parent = parent if isinstance(parent, str) and parent else base["thread_id"]
    return Identity(thread, cwd, stamp, parent if isinstance(parent, str) and parent else None,
                    history)


def kind_of(obj: dict[str, Any]) -> str | None:
    kind = obj.get("type")
    return kind if isinstance(kind, str) else None


def is_bookkeeping(obj: dict[str, Any]) -> bool:
    return kind_of(obj) in BOOKKEEPING_TYPES


def is_entry(obj: dict[str, Any]) -> bool:
    """A line that becomes an entry: a response item or a compaction (payload an object)."""
    return kind_of(obj) in ("response_item", "compacted") and isinstance(obj.get("payload"), dict)


def normalize_entry(obj: dict[str, Any], *, seq: int, parent_id: str | None) -> dict[str, Any]:
    """The normalized record (``ingest.entries`` shape) of one ``is_entry`` line."""
    payload: dict[str, Any] = obj["payload"]
    stamp = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
    record: dict[str, Any] = {
        "id": entry_id(obj, seq), "parent_id": parent_id, "seq": seq, "type": "other",
        "role": None, "timestamp": stamp, "ts_ms": iso_millis(stamp), "text": "",
        "eligible": False,
    }
    if obj.get("type") == "compacted":
        record["type"] = "compaction"
        record["kept_ids"] = kept_ids(payload.get("replacement_history"))
        return record
    item_type = payload.get("type")
    item_type = item_type if isinstance(item_type, str) else None  # a list is unhashable
    if item_type == "message":
        role = payload.get("role")
        record["type"], record["role"] = "message", role if isinstance(role, str) else None
        text = _message_text(payload, obj.get("metadata"))
    elif item_type in _CALLS:
        record["type"], record["role"] = "message", "assistant"
        text = f"{_str(payload.get('name'))} {_text_of(payload.get(_CALLS[item_type]))}".strip()
    elif item_type in _OUTPUTS:
        record["type"], record["role"] = "message", "toolResult"
        text = _text_of(payload.get("output"))
    elif item_type == "local_shell_call":
        record["type"], record["role"] = "message", "assistant"
        action = payload.get("action")
        command = action.get("command") if isinstance(action, dict) else None
        text = f"local_shell {_text_of(command)}"
    else:  # reasoning (never evidence), web searches, unknown item types: links only
        record["type"] = item_type if item_type == "reasoning" else "other"
        return record
    record["text"] = cap_text(text)
    record["eligible"] = bool(record["text"].strip())
    return record


def entry_id(obj: dict[str, Any], seq: int) -> str:
    """The item's own id (the one ``replacement_history`` names it by), else one from its
    position (a compaction, an item Codex wrote without an id)."""
    payload = obj.get("payload")
    own = payload.get("id") if isinstance(payload, dict) and obj.get("type") == "response_item" \
        else None
    if isinstance(own, str) and own:
        return own
    return f"{kind_of(obj) or 'line'}:{seq}"


def kept_ids(history: Any) -> list[str]:
    """The ids of the items a compaction's ``replacement_history`` keeps."""
    if not isinstance(history, list):
        return []
    return [item["id"] for item in history
            if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]]


def _message_text(payload: dict[str, Any], metadata: Any) -> str:
    role = payload.get("role")
    content = payload.get("content")
    parts = content if isinstance(content, list) else []
    if role == "assistant":
        if isinstance(metadata, dict) and metadata.get("compaction_output"):
            return ""  # the compaction summary: Codex's words, in context anyway
        return _join(p.get("text") for p in parts
                     if isinstance(p, dict) and p.get("type") == "output_text")
    if role != "user":
        return ""  # developer and system messages: instructions, never evidence
    passthrough = payload.get("internal_chat_message_metadata_passthrough")
    kinds = passthrough.get("content_item_kinds") if isinstance(passthrough, dict) else None
    if isinstance(kinds, list):
        return _join(p.get("text") for p, kind in zip(parts, kinds, strict=False)
                     if isinstance(p, dict) and kind == USER_TEXT)
    texts = [p.get("text") for p in parts if isinstance(p, dict)]
    return _join(t for t in texts if isinstance(t, str)
                 and not t.lstrip().startswith(_INJECTED_PREFIXES))


def _text_of(value: Any) -> str:
    """A call's arguments or an output: text as is, content parts joined, else JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(p, dict) for p in value):
        return _join(p.get("text") for p in value)
    if isinstance(value, dict) and isinstance(value.get("content"), str | list):
        return _text_of(value["content"])
    if value is None:
        return ""
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError, RecursionError):
        return ""


def _join(texts: Any) -> str:
    return "\n".join(t for t in texts if isinstance(t, str) and t)


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def find_rollout(sessions_root: Path, thread_id: str) -> Path | None:
    """The rollout of ``thread_id`` under ``sessions_root`` (Codex names files
    ``rollout-<time>-<thread id>.jsonl``), or None."""
    if not thread_id or "/" in thread_id or not sessions_root.is_dir():
        return None
    # Compared as text, not put in the pattern: a ``?`` or ``[`` in the id would match
    # other sessions' rollouts, and the id must be whole, not the tail of another.
    suffix = f"-{thread_id}.jsonl"
    found = [Path(folder) / name
             for folder, _, names in os.walk(sessions_root)  # unreadable folders: passed over
             for name in names if name.startswith("rollout-") and name.endswith(suffix)]
    return min(found) if found else None


def sessions_root_of(rollout: Path) -> Path:
    """The ``sessions`` folder a rollout lies in (its nearest ancestor of that name), else
    the folder above its ``YYYY/MM/DD`` folders, else its own folder: never a folder
    three levels up whatever it is (``/`` for ``/a/b/rollout.jsonl``, whose walk went
    through the whole disk and /proc)."""
    for parent in rollout.parents:
        if parent.name == "sessions":
            return parent
    parents = rollout.parents
    if len(parents) > 4 and all(parents[i].name.isdigit() for i in range(3)):
        return parents[3]
    return rollout.parent
