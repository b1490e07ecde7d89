"""Point-of-action evidence: a tool call's query and the informativeness rule, on a real Pi
session (tests/fixtures/pi-sessions/before-compaction.jsonl: a refactor of pi-mono, several
compactions, hundreds of read/edit/write/bash calls)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookback.api import retrieve
from lookback.query.contract.request import RequestError, parse_request
from lookback.query.search.action import (
    MAX_ACTION_RESULTS,
    MIN_CONTENT_WORDS,
    content_words,
    is_listing,
)
from lookback.query.text.terms import extract_terms
from lookback.query.text.tool_calls import tool_query
from lookback.settings import load_settings
from tests.support import fixture_path, index_paths

SESSION = fixture_path("before-compaction.jsonl")
CWD = "/Users/badlogic/workspaces/pi-mono"
LINES = [json.loads(line) for line in SESSION.read_text(encoding="utf-8").splitlines()]
LAST_COMPACTION = max(i for i, line in enumerate(LINES) if line.get("type") == "compaction")


def tool_calls() -> list[tuple[int, str, dict]]:
    """(line, tool name, arguments) of every tool call the session's model made."""
    return [(i, block["name"], block["arguments"]) for i, line in enumerate(LINES)
            for block in (line.get("message") or {}).get("content") or []
            if isinstance(block, dict) and block.get("type") == "toolCall"]


def tool_results() -> list[tuple[str, str]]:
    """(tool name, text) of every tool result."""
    found = []
    for line in LINES:
        message = line.get("message") or {}
        if message.get("role") == "toolResult":
            found.append((message.get("toolName"), "\n".join(
                block.get("text", "") for block in message.get("content") or []
                if isinstance(block, dict))))
    return found


def mentioned(path: str, before: bool) -> bool:
    """Whether a line before (or after) the last compaction names ``path``."""
    lines = LINES[:LAST_COMPACTION] if before else LINES[LAST_COMPACTION + 1:]
    return any(path in json.dumps(line) for line in lines)


@pytest.fixture(scope="module")
def settings(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    index_paths(home, SESSION)
    return load_settings({"home": str(home)}, environ={})


def ask(settings, name: str, arguments: dict) -> dict:
    return retrieve({"session_file": str(SESSION),
                     "tool": {"name": name, "input": arguments, "cwd": CWD}}, settings=settings)


# -- the query ------------------------------------------------------------------------------


def test_every_file_call_of_the_session_is_queried_by_its_project_path_and_name():
    calls = [(name, args) for _, name, args in tool_calls() if "path" in args]
    assert len(calls) > 100
    for name, args in calls:
        query = tool_query(name, args, CWD)
        assert query is not None, args
        relative = args["path"].removeprefix(CWD + "/")
        assert query.subjects[0] == relative
        base = relative.rsplit("/", 1)[-1]
        if "/" in relative and "." in base and base != "index.ts":
            assert query.subjects[1] == base
        # the message searches exactly the subjects, each as a literal term
        terms = extract_terms(query.message).terms
        assert {t.text for t in terms} == set(query.subjects)
        assert all(t.kind in ("path", "identifier", "phrase") for t in terms)


def test_a_command_is_queried_by_its_leading_words_and_what_it_names():
    commands = [args["command"] for _, name, args in tool_calls() if name == "bash"]
    assert len(commands) > 20
    for command in commands:
        query = tool_query("bash", {"command": command}, CWD)
        for subject in query.subjects if query else ():
            assert subject in command or subject in command.replace(CWD + "/", "")
            assert not subject.startswith("-")  # flags say nothing of their own
    npm = tool_query("Bash", {"command": "npm run check 2>&1 | tail -20"}, CWD)
    assert npm is not None and npm.subjects == ("npm run check",)
    assert tool_query("Bash", {"command": "ls -la"}, CWD) is None
    cat = tool_query("Bash", {"command": f"cat {CWD}/packages/ai/README.md"}, CWD)
    assert cat is not None and cat.subjects == ("packages/ai/README.md", "README.md")


def test_patches_searches_and_other_tools():
    patch = "*** Begin Patch\n*** Update File: src/config.py\n@@\n-a\n+b\n*** End Patch\n"
    query = tool_query("apply_patch", {"command": patch}, "/work/p")
    assert query is not None and query.subjects == ("src/config.py", "config.py")
    grep = tool_query("Grep", {"pattern": "parseConfigLegacy", "path": "/work/p/src"}, "/work/p")
    assert grep is not None and grep.subjects == ("parseConfigLegacy",)  # not the folder
    assert tool_query("TodoWrite", {"todos": [{"content": "x"}]}, "/work/p") is None
    assert tool_query("Read", "not an object", "/work/p") is None


def test_a_bad_tool_is_a_clear_error_and_a_good_one_replaces_the_message():
    base = {"session_file": str(SESSION)}
    for tool, field in (("Read", "tool must be an object"),
                        ({"name": 3, "input": {}}, "tool.name"),
                        ({"name": "Read", "input": "x"}, "tool.input"),
                        ({"name": "Read", "input": {}, "cwd": "rel"}, "tool.cwd")):
        with pytest.raises(RequestError, match=field):
            parse_request({**base, "tool": tool})
    parsed = parse_request({**base, "tool": {"name": "Read", "input": {"file_path": "/a/b.py"}}})
    assert parsed.message is None and parsed.tool is not None


# -- the informativeness rule ---------------------------------------------------------------


def test_listings_and_bare_reads_say_nothing_about_a_file():
    listings = [text for name, text in tool_results() if is_listing(text)]
    assert len(listings) >= 5  # find/ls/git status outputs of the session
    assert not any(is_listing(text) for name, text in tool_results() if name == "edit")
    for _, name, args in tool_calls():
        if name == "read":
            call = f"{name} {json.dumps(args, sort_keys=True)}"  # as the index stores it
            subjects = tool_query(name, args, CWD).subjects  # type: ignore[union-attr]
            assert content_words(call, subjects) < MIN_CONTENT_WORDS
    edits = [(args, tool_query(name, args, CWD)) for _, name, args in tool_calls()
             if name == "edit"]
    assert all(content_words(f"edit {json.dumps(a, sort_keys=True)}", q.subjects)
               >= MIN_CONTENT_WORDS for a, q in edits if q and len(a.get("newText", "")) > 40)


def test_a_file_with_compacted_history_gets_a_few_entries_about_it(settings):
    path = f"{CWD}/packages/coding-agent/src/core/agent-session.ts"
    assert mentioned("src/core/agent-session.ts", before=True)
    answer = ask(settings, "edit", {"path": path, "oldText": "a", "newText": "b"})
    assert answer["status"] == "ok"
    evidence = answer["evidence"]
    assert 1 <= len(evidence) <= MAX_ACTION_RESULTS
    for item in evidence:
        assert "agent-session.ts" in item["excerpt"]  # about the file, quoted
        assert any(reason.startswith("exact identifier") for reason in item["reasons"])
        text = item["message"]["content"][0]["text"]
        assert text.startswith("[DS4 HISTORICAL EVIDENCE")


def test_a_file_the_history_never_names_gets_nothing(settings):
    path = f"{CWD}/packages/coding-agent/src/core/never-written.ts"
    assert not mentioned("never-written.ts", before=True)
    assert ask(settings, "edit", {"path": path})["evidence"] == []


def test_a_file_named_only_in_the_live_context_gets_nothing(settings):
    relative = "packages/coding-agent/src/cli/args.ts"
    assert mentioned(relative, before=False) and not mentioned(relative, before=True)
    assert ask(settings, "write", {"path": f"{CWD}/{relative}", "content": "x"})["evidence"] \
        == []


def test_every_answer_about_the_sessions_files_is_informative(settings):
    """Over every file the session touched: whatever comes back names the file and is
    neither a listing nor a bare read of it."""
    paths = {args["path"] for _, name, args in tool_calls() if "path" in args}
    answered = 0
    for path in sorted(paths):
        query = tool_query("read", {"path": path}, CWD)
        assert query is not None
        evidence = ask(settings, "read", {"path": path})["evidence"]
        answered += bool(evidence)
        for item in evidence:
            assert any(subject in item["excerpt"] for subject in query.subjects)
            assert not is_listing(item["excerpt"])
    assert 0 < answered < len(paths)


def test_a_tool_the_history_cannot_be_about_asks_nothing(settings):
    answer = ask(settings, "todo", {"items": ["x"]})
    assert answer["status"] == "no-query" and answer["evidence"] == []


def test_the_message_beside_a_tool_call_is_not_searched(settings):
    asked = {"session_file": str(SESSION), "message": "agent-session.ts refactor",
             "tool": {"name": "read", "input": {"path": f"{CWD}/nothing-here.ts"}, "cwd": CWD}}
    assert retrieve(asked, settings=settings)["evidence"] == []


def test_fixture_is_what_these_tests_describe():
    assert LAST_COMPACTION > 0 and Path(SESSION).exists()
