"""Sessions caught mid-write lose nothing and hide nothing (issue 29, failures 1, 3, 4):
a session just started (header only) does not hide its project's history; one entry
that cannot be decoded does not cut its branch; a valid last line without its newline
is indexed, once, and a line still being written is never indexed wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookback import api
from lookback.index.layout import project_key
from lookback.settings import load_settings
from tests.support import fixture_path, index_paths

CWD = "/workspace/demo"  # the fixture's


@pytest.fixture
def settings(home: Path):
    return load_settings({"home": str(home)}, environ={})


def write(path: Path, lines: list[str], end: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path


def fixture_lines() -> list[str]:
    return fixture_path("pi-session-v3.jsonl").read_text().splitlines()


def header(session_id: str, cwd: str = CWD) -> str:
    return json.dumps({"type": "session", "version": 3, "id": session_id,
                       "timestamp": "2026-08-25T10:00:00.000Z", "cwd": cwd})


# -- failure 1: a session just started hides the project --------------------------------

@pytest.mark.parametrize("scope", ["project", "branch", "session"])
def test_a_header_only_session_does_not_hide_the_projects_history(home, tmp_path, settings,
                                                                  scope):
    index_paths(home, write(tmp_path / "s" / "old.jsonl", fixture_lines()))
    index_paths(home, write(tmp_path / "s" / "new.jsonl", [header("just-started")]))
    for project in (CWD, project_key(CWD)):
        answer = api.search_answer({"project": project, "text": "OracleProvider",
                                    "scope": scope}, settings=settings)
        assert answer.status == "ok", (project, answer.status)
        assert {r.entry_id for r in answer.results} >= {"00000002"}


def test_a_header_only_session_named_by_its_file_searches_its_project(home, tmp_path,
                                                                      settings):
    index_paths(home, write(tmp_path / "s" / "old.jsonl", fixture_lines()))
    new = write(tmp_path / "s" / "new.jsonl", [header("just-started")])
    index_paths(home, new)
    answer = api.search_answer({"session_file": str(new), "text": "OracleProvider",
                                "scope": "project"}, settings=settings)
    assert answer.status == "ok" and {r.entry_id for r in answer.results} >= {"00000002"}


# -- failure 3: one bad byte hides a branch -----------------------------------------------

def entry(entry_id: str, parent: str | None, text: str, role: str = "user") -> str:
    return json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                       "timestamp": "2026-08-25T10:00:01.000Z",
                       "message": {"role": role, "content": [{"type": "text", "text": text}],
                                   "timestamp": 1787652001000}})


def deep_arguments(levels: int) -> str:
    """An assistant entry whose tool call's arguments nest ``levels`` deep."""
    line = json.dumps({"type": "message", "id": "bad00003", "parentId": "e0000002",
                       "timestamp": "2026-08-25T10:00:03.000Z",
                       "message": {"role": "assistant", "content": [
                           {"type": "text", "text": "calling the deep tool now"},
                           {"type": "toolCall", "id": "c1", "name": "deep_tool",
                            "arguments": {"x": 0}}]}})
    return line.replace('{"x": 0}', '{"a":' * levels + "1" + "}" * levels)


BAD_ENTRIES = {
    # one byte that is not UTF-8 (0xff), written raw into the entry's text
    "invalid UTF-8": entry("bad00003", "e0000002", "the reply was cut HERE",
                           role="assistant").replace("HERE", "\udcff here"),
    "nested 1,025 deep": deep_arguments(1025),
    "nested 100,000 deep": deep_arguments(100_000),
    # no JSON parser takes it: a raw control byte inside a string
    "not JSON at all": entry("bad00003", "e0000002", "x").replace('"x"', '"x\x01\x02 \\q"'),
}


@pytest.mark.parametrize("name", list(BAD_ENTRIES))
def test_one_unreadable_entry_keeps_its_branch_whole(home, tmp_path, settings, name):
    lines = [header("chain"),
             entry("e0000001", None, "How should ZephyrGadget cache its handles?"),
             entry("e0000002", "e0000001", "Keep them in an LRU keyed by path.", "assistant"),
             BAD_ENTRIES[name],
             entry("e0000004", "bad00003", "And what about eviction?"),
             entry("e0000005", "e0000004", "Evict the least recently used.", "assistant")]
    path = tmp_path / "s" / "chain.jsonl"
    path.parent.mkdir()
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8", "surrogateescape"))
    report = index_paths(home, path)
    assert report.errors == []
    answer = api.search_answer({"session_file": str(path), "text": "ZephyrGadget",
                                "scope": "branch"}, settings=settings)
    assert answer.status == "ok"
    assert [r.entry_id for r in answer.results] == ["e0000001"]  # reachable from the leaf
    source = api.source_answer({"session_file": str(path), "entry_id": "bad00003",
                                "before": 2, "after": 2}, settings=settings)
    assert source.status == "ok"
    assert [e.entry_id for e in source.before] == ["e0000001", "e0000002"]
    assert [e.entry_id for e in source.after] == ["e0000004", "e0000005"]
    if name == "invalid UTF-8":  # the readable text kept, the byte replaced
        assert "the reply was cut \ufffd here" in source.entry.excerpt
    if name.startswith("nested"):
        assert "calling the deep tool now" in source.entry.excerpt


def test_a_line_over_the_limit_keeps_its_branch_whole(home, tmp_path, settings):
    from lookback.index.sink import EmbeddedSink
    from lookback.ingest.pipeline import ingest_files

    long_text = "a very long tool output " * 100
    lines = [header("long"),
             entry("e0000001", None, "How should ZephyrGadget cache its handles?"),
             entry("bad00002", "e0000001", long_text, "assistant"),
             entry("e0000003", "bad00002", "And what about eviction?")]
    path = write(tmp_path / "s" / "long.jsonl", lines)
    with EmbeddedSink(home) as sink:
        report = ingest_files([path], sink, max_line_bytes=1000)
    assert report.read.oversized == 1 and report.read.placeholders == 1
    answer = api.search_answer({"session_file": str(path), "text": "ZephyrGadget",
                                "scope": "branch"}, settings=settings)
    assert [r.entry_id for r in answer.results] == ["e0000001"]
