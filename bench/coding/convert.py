"""Convert a real Claude Code session log into a Pi v3 session ending in a compaction.

    python bench/coding/convert.py SOURCE.jsonl OUT.jsonl --cwd /real/project --tail 12
    python bench/coding/convert.py page-001.html page-002.html OUT.jsonl --cwd ... --first 435

The evaluation sessions of ``bench/bench_coding.py`` (bench/coding/SOURCES.md) are public
Claude Code transcripts; the question is what Lookback returns to a Pi user whose long
session was compacted, so each becomes the Pi session that user would have: one entry
per Claude Code line with text (a user prompt, an assistant's text and tool calls, a
tool's result), in order, each the child of the one before, then a compaction that keeps
only the last ``--tail`` entries in context. Progress lines, file-history snapshots,
system notices, thinking blocks and subagents' sidechains are left out. Texts are cut
to ``--max-chars`` (the head and the tail of a long tool output, marked), so the files
stay small enough to commit; entry ids are ``e`` and the entry's number in hex.

The source may also be the HTML pages that simonw/claude-code-transcripts renders from
such a log (some repositories publish those, not the log): one entry per rendered
block — a prompt, an assistant's text, a tool call (Bash, Edit, Write, a task list, or
any other tool with its JSON input), a tool reply — thinking left out. The pages do not
say which call a reply answers; replies are paired with the open calls in order, so
after parallel calls a reply may carry its sibling's tool name. ``--first N`` keeps the
first N entries (a prefix of a longer session).
"""

from __future__ import annotations

import argparse
import json
from html.parser import HTMLParser
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


_VOID = {"br", "img", "input", "hr", "meta", "link", "wbr"}
_BREAKS = {"p", "pre", "li", "div", "tr", "h1", "h2", "h3", "h4", "h5", "h6"}


class _TranscriptPage(HTMLParser):
    """The messages of one claude-code-transcripts page: role, time and, for each block
    directly inside the message's content, its class, attributes and text (with the
    class of each inner element whose text it holds)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []
        self.messages: list[dict] = []
        self.block: dict | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _VOID:
            if tag == "br" and self.block is not None:
                self.block["parts"].append((set(), "\n"))
            return
        found = {name: value or "" for name, value in attrs}
        classes = found.get("class", "")
        self.stack.append((tag, classes))
        if tag == "div" and classes.split()[:1] == ["message"] and len(classes.split()) == 2:
            self.messages.append({"role": classes.split()[1], "time": "", "blocks": []})
        elif tag == "time" and self.messages and not self.messages[-1]["time"]:
            self.messages[-1]["time"] = found.get("datetime", "")
        elif len(self.stack) >= 2 and self.stack[-2][1] == "message-content" and self.messages:
            self.block = {"class": classes, "attrs": found, "parts": [], "depth": len(self.stack)}
            self.messages[-1]["blocks"].append(self.block)
        elif self.block is not None and tag in _BREAKS:
            self.block["parts"].append((set(), "\n"))

    def handle_endtag(self, tag: str) -> None:
        if tag in _VOID:
            return
        while self.stack:
            opened, _ = self.stack.pop()
            if self.block is not None and len(self.stack) < self.block["depth"]:
                self.block = None
            if opened == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.block is not None:
            inside = {name for _, classes in self.stack[self.block["depth"]:]
                      for name in classes.split()}
            if not inside & {"expand-btn", "edit-label"}:  # "Show more", the edit's "−"/"+"
                self.block["parts"].append((inside, data))


def _texts(block: dict, *classes: str) -> str:
    """The block's text inside elements of the given classes (all of it without any)."""
    chosen = [text for inside, text in block["parts"]
              if not classes or inside.intersection(classes)]
    return "".join(chosen).strip()


def _tool_call(block: dict) -> tuple[str, dict]:
    kind = block["class"].split()
    if "bash-tool" in kind:
        return "Bash", {"command": _texts(block, "bash-command"),
                        "description": _texts(block, "tool-description")}
    if "edit-tool" in kind:
        return "Edit", {"file_path": _texts(block, "file-tool-fullpath"),
                        "old_string": _texts(block, "edit-old"),
                        "new_string": _texts(block, "edit-new")}
    if "write-tool" in kind:
        return "Write", {"file_path": _texts(block, "file-tool-fullpath"),
                         "content": _texts(block, "file-content")}
    if "todo-list" in kind:
        items = [text.strip() for inside, text in block["parts"]
                 if "todo-content" in inside and text.strip()]
        return "TodoWrite", {"todos": items}
    name = _texts(block, "tool-header").lstrip("\u2699 ").strip() or "tool"
    raw = _texts(block, "json")
    try:
        arguments = json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        arguments = {"input": raw}
    return name, arguments if isinstance(arguments, dict) else {"input": arguments}


def _answered_call(open_calls: list[tuple[str, str, str]], text: str) -> tuple[str, str]:
    """Take the open call a reply most likely answers: the first whose tool writes replies
    of that shape (a numbered file, an edit of that file, a search), else the first open
    call of a tool without a recognisable reply (after parallel calls, replies arrive in
    the order the tools finish)."""
    def fits(name: str, path: str) -> bool:
        if text.startswith("Todos have been modified"):
            return name == "TodoWrite"
        if text.startswith("Web search results for query"):
            return name == "WebSearch"
        if text.startswith(("The file ", "File created successfully")):
            return name in ("Edit", "Write", "MultiEdit") and (not path or path in text)
        if text.lstrip()[:8].split("\u2192")[0].strip().isdigit():
            return name == "Read"
        if text.startswith("Exit code"):
            return name == "Bash"
        return name not in ("TodoWrite", "WebSearch", "Edit", "Write", "MultiEdit", "Read")

    for place, (call_id, name, path) in enumerate(open_calls):
        if fits(name, path):
            del open_calls[place]
            return call_id, name
    if open_calls:
        call_id, name, _ = open_calls.pop(0)
        return call_id, name
    return "", "tool"


def html_messages(pages: list[Path], limit: int) -> list[tuple[str, dict]]:
    """(timestamp, Pi message) for each rendered block worth an entry, in order."""
    found: list[tuple[str, dict]] = []
    open_calls: list[tuple[str, str, str]] = []
    for page in pages:
        parser = _TranscriptPage()
        parser.feed(page.read_text(encoding="utf-8"))
        for message in parser.messages:
            stamp, millis = message["time"], _millis(message["time"])
            for block in message["blocks"]:
                kind = block["class"].split()
                if "thinking" in kind:
                    continue
                if message["role"] == "user":
                    text = _texts(block)
                    if text:
                        found.append((stamp, {"role": "user", "content": [
                            {"type": "text", "text": clip(text, limit)}], "timestamp": millis}))
                elif "tool-result" in kind:
                    call_id, name = _answered_call(open_calls, _texts(block))
                    found.append((stamp, {"role": "toolResult", "toolCallId": call_id,
                                          "toolName": name, "content": [
                                              {"type": "text", "text": clip(_texts(block), limit)}],
                                          "isError": "tool-error" in kind, "timestamp": millis}))
                elif "assistant-text" in kind:
                    text = _texts(block)
                    if text:
                        found.append((stamp, {"role": "assistant", "content": [
                            {"type": "text", "text": clip(text, limit)}], "timestamp": millis}))
                else:
                    name, arguments = _tool_call(block)
                    call_id = block["attrs"].get("data-tool-id") or f"call{len(found)}"
                    open_calls.append((call_id, name, str(arguments.get("file_path", ""))))
                    if len(json.dumps(arguments)) > limit:
                        arguments = {"input": clip(json.dumps(arguments, ensure_ascii=False),
                                                   limit)}
                    found.append((stamp, {"role": "assistant", "content": [
                        {"type": "toolCall", "id": call_id, "name": name,
                         "arguments": arguments}], "timestamp": millis}))
    return found


def _millis(stamp: str) -> int:
    from datetime import datetime
    try:
        return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


def convert(sources: list[Path], out: Path, cwd: str, session_id: str, tail: int, limit: int,
            first: int | None = None) -> int:
    if all(source.suffix == ".html" for source in sources):
        found = html_messages(sources, limit)
    else:
        (source,) = sources
        lines = [json.loads(raw) for raw in source.read_text(encoding="utf-8").splitlines()
                 if raw.strip()]
        found = messages(lines, limit)
    found = found[:first] if first else found
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
    parser.add_argument("source", type=Path, nargs="+",
                        help="a Claude Code .jsonl log, or claude-code-transcripts pages")
    parser.add_argument("out", type=Path)
    parser.add_argument("--cwd", required=True)
    parser.add_argument("--session-id", required=True)
    parser.add_argument("--tail", type=int, default=12)
    parser.add_argument("--max-chars", type=int, default=2000)
    parser.add_argument("--first", type=int, help="keep only the first N entries")
    args = parser.parse_args()
    count = convert(args.source, args.out, args.cwd, args.session_id, args.tail, args.max_chars,
                    args.first)
    print(f"{count} entries, the last {args.tail} kept in context")


if __name__ == "__main__":
    main()
