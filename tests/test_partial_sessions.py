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


# -- failure 4: a valid last line without its newline -------------------------------------

def indexed(home: Path) -> dict[str, str]:
    from lookback.index.layout import project_dir
    from lookback.index.store import open_reader

    connection = open_reader(project_dir(home, CWD).index_path())
    try:
        return dict(connection.execute("SELECT entry_id, text FROM entries"))
    finally:
        connection.close()


def grow(path: Path, text: str) -> None:
    with path.open("ab") as handle:
        handle.write(text.encode())


def unterminated_session(tmp_path: Path) -> Path:
    """The fixture, its last entry (a user turn) written without its newline."""
    lines = [header("unterminated"),
             entry("e0000001", None, "How should ZephyrGadget cache its handles?"),
             entry("e0000002", "e0000001", "Keep them in an LRU keyed by path.", "assistant"),
             entry("e0000003", "e0000002", "the last words before the crash")]
    return write(tmp_path / "s" / "cut.jsonl", lines, end="")


def test_a_valid_last_line_without_its_newline_is_indexed(home, tmp_path):
    path = unterminated_session(tmp_path)
    index_paths(home, path)
    assert indexed(home)["e0000003"] == "the last words before the crash"


def test_its_newline_arriving_later_indexes_nothing_twice(home, tmp_path):
    path = unterminated_session(tmp_path)
    first = index_paths(home, path)
    grow(path, "  \n")  # the writer finishes the line (whitespace is still the same object)
    again = index_paths(home, path)
    assert again.read.entries == 0 and again.read.rewrites == 0 and again.read.malformed == 0
    grow(path, entry("e0000004", "e0000003", "and after the restart") + "\n")
    more = index_paths(home, path)
    assert more.read.entries == 1 and more.read.rewrites == 0
    assert set(indexed(home)) == {"e0000001", "e0000002", "e0000003", "e0000004"}
    assert first.read.entries == 3


@pytest.mark.parametrize("extension", ['{"type":"message"}\n', "garbage\n", "garbage"])
def test_a_line_extended_after_it_was_indexed_leaves_no_wrong_entry(home, tmp_path,
                                                                   extension):
    path = unterminated_session(tmp_path)
    index_paths(home, path)
    assert "e0000003" in indexed(home)
    grow(path, extension)  # more on the same line: as a whole it is no entry at all
    index_paths(home, path)
    assert_no_wrong_entry(home)
    grow(path, "\n" if not extension.endswith("\n") else "")
    grow(path, entry("e0000004", "e0000002", "a later turn") + "\n")
    index_paths(home, path)
    assert_no_wrong_entry(home)
    assert indexed(home)["e0000004"] == "a later turn"


def assert_no_wrong_entry(home: Path) -> None:
    """The record once read from the unfinished line is gone: its id is at most a
    text-less link (the line, finished, starts with it), never its text."""
    entries = indexed(home)
    assert "the last words before the crash" not in entries.values()
    assert entries.get("e0000003", "") == ""
    assert entries["e0000002"] == "Keep them in an LRU keyed by path."


def test_the_readers_freshness_engine_indexes_it_too(home, tmp_path):
    from lookback.freshness import engine_for

    path = unterminated_session(tmp_path)
    engine = engine_for(load_settings({"home": str(home)}, environ={})).start()
    try:
        assert engine.ensure(str(path), wait_ms=30_000).state == "indexed"
        assert "e0000003" in indexed(home)
        grow(path, "garbage\n")
        assert engine.ensure(str(path), wait_ms=30_000).state == "indexed"
        assert_no_wrong_entry(home)
    finally:
        engine.close()
