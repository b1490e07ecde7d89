"""Convert a real Claude Code session log into a Pi v3 session ending in a compaction.

    python bench/coding/convert.py SOURCE.jsonl OUT.jsonl --cwd /real/project --tail 12

The evaluation sessions of ``bench/bench_coding.py`` (bench/coding/SOURCES.md) are public
Claude Code transcripts; the question is what Lookback returns to a Pi user whose long
session was compacted, so each becomes the Pi session that user would have: one entry
per Claude Code line with text (a user prompt, an assistant's text and tool calls, a
tool's result), in order, each the child of the one before, then a compaction that keeps
only the last ``--tail`` entries in context. Progress lines, file-history snapshots,
system notices, thinking blocks and subagents' sidechains are left out. Texts are cut
to ``--max-chars`` (the head and the tail of a long tool output, marked), so the files
stay small enough to commit; entry ids are ``e`` and the entry's number in hex.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CUT = "\n[... cut by the conversion ...]\n"


def clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = (limit - len(CUT)) // 2
    return text[:half] + CUT + text[-half:]


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(block.get("text", "") for block in content
                         if isinstance(block, dict) and block.get("type") == "text")
    return ""


def messages(lines: list[dict], limit: int) -> list[tuple[str, dict]]:
    """(timestamp, Pi message) for each line worth an entry, in order."""
    tool_names: dict[str, str] = {}
    found: list[tuple[str, dict]] = []
    for line in lines:
        kind = line.get("type")
        if kind not in ("user", "assistant") or line.get("isSidechain"):
            continue
        stamp = line.get("timestamp") or ""
        millis = _millis(stamp)
        content = line.get("message", {}).get("content")
        if kind == "assistant":
            blocks = []
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "text" and block.get("text", "").strip():
                    blocks.append({"type": "text", "text": clip(block["text"], limit)})
                elif block.get("type") == "tool_use":
                    tool_names[block["id"]] = block["name"]
                    arguments = json.loads(clip(json.dumps(block.get("input", {})), limit)) \
                        if len(json.dumps(block.get("input", {}))) <= limit else \
                        {"input": clip(json.dumps(block.get("input", {})), limit)}
                    blocks.append({"type": "toolCall", "id": block["id"], "name": block["name"],
                                   "arguments": arguments})
            if blocks:
                found.append((stamp, {"role": "assistant", "content": blocks,
                                      "timestamp": millis}))
            continue
        if isinstance(content, list) and any(b.get("type") == "tool_result" for b in content):
            for block in content:
                if block.get("type") != "tool_result":
                    continue
                text = _text_of(block.get("content"))
                found.append((stamp, {"role": "toolResult", "toolCallId": block["tool_use_id"],
                                      "toolName": tool_names.get(block["tool_use_id"], "tool"),
                                      "content": [{"type": "text", "text": clip(text, limit)}],
                                      "isError": bool(block.get("is_error")),
                                      "timestamp": millis}))
            continue
        text = _text_of(content)
        if text.strip():
            found.append((stamp, {"role": "user", "content": [{"type": "text",
                                                                  "text": clip(text, limit)}],
                                  "timestamp": millis}))
    return found


def _millis(stamp: str) -> int:
    from datetime import datetime
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


def convert(source: Path, out: Path, cwd: str, session_id: str, tail: int, limit: int) -> int:
    lines = [json.loads(raw) for raw in source.read_text(encoding="utf-8").splitlines()
             if raw.strip()]
    found = messages(lines, limit)
    entries = [{"type": "session", "version": 3, "id": session_id, "cwd": cwd,
                "timestamp": found[0][0]}]
    parent = None
    for number, (stamp, message) in enumerate(found, start=1):
        entry_id = f"e{number:04x}"
        entries.append({"type": "message", "id": entry_id, "parentId": parent,
                        "timestamp": stamp, "message": message})
        parent = entry_id
    kept = f"e{len(found) - tail + 1:04x}"
    entries.append({"type": "compaction", "id": "c0000000", "parentId": parent,
                    "timestamp": found[-1][0], "summary": "Earlier work, summarized.",
                    "firstKeptEntryId": kept, "tokensBefore": 150000})
    out.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries),
                   encoding="utf-8")
    return len(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--cwd", required=True)
    parser.add_argument("--session-id", required=True)
    parser.add_argument("--tail", type=int, default=12)
    parser.add_argument("--max-chars", type=int, default=2000)
    args = parser.parse_args()
    count = convert(args.source, args.out, args.cwd, args.session_id, args.tail, args.max_chars)
    print(f"{count} entries, the last {args.tail} kept in context")


if __name__ == "__main__":
    main()
