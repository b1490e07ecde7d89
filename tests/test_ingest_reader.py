"""Reading Pi session files: every version, bad lines, appends and rewrites."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from lookback.ingest.reader import FileState, NotASession, ReadStats, read_session
from tests.support import fixture_path


def read_all(path: Path, state: FileState | None = None, **options):
    stats = ReadStats()
    events, last = [], state
    for batch in read_session(str(path), state, stats=stats, **options):
        events.extend(batch.events)
        last = batch.state
    return events, last, stats


def entries(events):
    return [e.payload["entry"] for e in events if e.kind == "entry"]


@pytest.mark.parametrize("name, expected", [
    ("before-compaction.jsonl",
     {"message": 990, "compaction": 2, "model_change": 5, "thinking_level_change": 5}),
    ("large-session.jsonl", {"message": 914, "thinking_level_change": 103, "model_change": 1}),
    ("pi-session-v3.jsonl", {"message": 7, "model_change": 1, "label": 1, "custom": 1}),
    ("branching.jsonl", {"message": 5, "model_change": 1, "compaction": 1, "future_entry": 1}),
])
def test_entry_counts_by_type(name, expected):
    events, _, stats = read_all(fixture_path(name))
    assert Counter(e["type"] for e in entries(events)) == expected
    assert stats.malformed == 0
    assert events[0].kind == "session"


def test_v1_entries_get_positional_ids_and_chain_to_the_previous_entry():
    events, state, _ = read_all(fixture_path("before-compaction.jsonl"))
    found = entries(events)
    assert state.version == 1
    assert [e["id"] for e in found[:3]] == ["v1:1", "v1:2", "v1:3"]
    assert found[0]["parent_id"] is None
    assert all(b["parent_id"] == a["id"] for a, b in zip(found, found[1:], strict=False))
    compactions = [e for e in found if e["type"] == "compaction"]
    # line 360 and 629 of the file; firstKeptEntryIndex 293 and 551 become ids
    assert [(c["id"], c["first_kept_id"]) for c in compactions] == [
        ("v1:359", "v1:293"), ("v1:628", "v1:551")]


def test_thinking_images_and_custom_data_are_never_text():
    events, _, _ = read_all(fixture_path("pi-session-v3.jsonl"))
    text = "\n".join(e["text"] for e in entries(events))
    assert "Private chain of thought" not in text
    raw = fixture_path("pi-session-v3.jsonl").read_text()
    custom = next(json.loads(line) for line in raw.splitlines() if '"type":"custom"' in line)
    for value in _strings(custom.get("data")):
        assert value not in text
    assert "OracleProvider" in text  # tool call arguments and results are evidence
    assert "dotnet test" in text


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_only_messages_and_custom_messages_are_eligible():
    events, _, _ = read_all(fixture_path("branching.jsonl"))
    eligible = {e["type"] for e in entries(events) if e["eligible"]}
    assert eligible == {"message"}
    compaction = next(e for e in entries(events) if e["type"] == "compaction")
    assert compaction["text"] == "sanitized" and not compaction["eligible"]


HEADER = {"type": "session", "version": 3, "id": "s-1", "timestamp": "2026-01-01T00:00:00Z",
          "cwd": "/work/p"}


def line(obj) -> str:
    return json.dumps(obj) + "\n"


def message(entry_id, parent, text, role="user"):
    return {"type": "message", "id": entry_id, "parentId": parent,
            "timestamp": "2026-01-01T00:00:01Z",
            "message": {"role": role, "content": [{"type": "text", "text": text}],
                        "timestamp": 1}}


def test_malformed_blank_and_unterminated_lines(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(line(HEADER) + "\n" + "{not json\n" + line(message("a", None, "first"))
                    + json.dumps(message("b", "a", "half written")))
    events, state, stats = read_all(path)
    # A valid record without its newline is read (a writer may have died there) ...
    assert [e["id"] for e in entries(events)] == ["a", "b"]
    assert stats.malformed == 1
    # ... once: Pi finishing the line adds nothing.
    with open(path, "a") as handle:
        handle.write("\n")
    more, state, _ = read_all(path, state)
    assert entries(more) == []
    again, _, _ = read_all(path, state)
    assert again == []
    # A line still being written is not read until it is a record.
    with open(path, "a") as handle:
        handle.write(json.dumps(message("c", "b", "half"))[:30])
    partial, state, stats = read_all(path, state)
    assert entries(partial) == [] and stats.malformed == 0
    with open(path, "a") as handle:
        handle.write(json.dumps(message("c", "b", "half"))[30:])
    done, _, _ = read_all(path, state)
    assert [e["id"] for e in entries(done)] == ["c"]


def test_second_header_and_leaf_cursor_records(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(line(HEADER) + line(message("a", None, "one"))
                    + line({**HEADER, "id": "other"}) + line(message("b", "a", "two"))
                    + line({"type": "leaf", "targetId": "a"}))
    events, _, stats = read_all(path)
    assert stats.extra_headers == 1 and stats.cursor_records == 1
    assert [e.kind for e in events] == ["session", "entry", "entry", "leaf"]
    assert all(e.session_id == "s-1" for e in events)


def test_not_a_session_file(tmp_path):
    path = tmp_path / "notes.jsonl"
    path.write_text(line({"type": "message", "id": "x"}))
    with pytest.raises(NotASession):
        read_all(path)


def test_an_oversized_line_is_skipped_without_reading_it_whole(tmp_path):
    path = tmp_path / "s.jsonl"
    huge = message("big", "a", "x" * 300_000)
    path.write_text(line(HEADER) + line(message("a", None, "small")) + line(huge)
                    + line(message("c", "a", "after")))
    events, _, stats = read_all(path, max_line_bytes=100_000)
    # Its text is skipped; its id and parent, read from its start, keep it as a link.
    assert [e["id"] for e in entries(events)] == ["a", "big", "c"]
    assert (entries(events)[1]["type"], entries(events)[1]["text"]) == ("unreadable", "")
    assert stats.oversized == 1 and "skipped a line of" in stats.warnings[0]


def test_appends_are_read_incrementally(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(line(HEADER) + line(message("a", None, "one")))
    _, state, _ = read_all(path)
    with open(path, "a") as handle:
        handle.write(line(message("b", "a", "two")))
    events, state, _ = read_all(path, state)
    assert [e.kind for e in events] == ["entry"]
    assert entries(events)[0]["id"] == "b"


def test_a_rewritten_file_resets_the_session(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(line(HEADER) + line(message("a", None, "one")) + line(message("b", "a", "x")))
    _, state, _ = read_all(path)
    # Pi migrates old files in place: same session, new content, maybe even longer.
    path.write_text(line(HEADER) + line(message("a", None, "one, migrated"))
                    + line(message("b", "a", "two, migrated")) + line(message("c", "b", "3")))
    events, _, stats = read_all(path, state)
    assert stats.rewrites == 1
    assert [e.kind for e in events] == ["reset", "session", "entry", "entry", "entry"]


@pytest.mark.parametrize("appended", [False, True])
def test_an_edit_in_place_of_the_same_size_is_a_rewrite(tmp_path, appended):
    """Neither the header nor the last line changes, nor the size (or it only grows):
    any changed byte of the part already read still makes the file a rewrite."""
    path = tmp_path / "s.jsonl"
    path.write_text(line(HEADER) + line(message("a", None, "please MERGE the branch"))
                    + line(message("b", "a", "done")))
    _, state, _ = read_all(path)
    path.write_text(path.read_text().replace("MERGE", "PATCH"))
    if appended:
        with open(path, "a") as handle:
            handle.write(line(message("c", "b", "and then")))
    events, state, stats = read_all(path, state)
    assert stats.rewrites == 1
    assert events[0].kind == "reset"
    assert [e["text"] for e in entries(events)][:2] == ["please PATCH the branch", "done"]
    events, _, stats = read_all(path, state)  # read again: nothing new, no rewrite
    assert events == [] and stats.rewrites == 0


def test_an_edit_in_place_is_reindexed(home, tmp_path):
    from lookback.index.layout import project_dir
    from lookback.index.store import open_reader
    from tests.support import index_paths

    path = tmp_path / "s.jsonl"
    original = fixture_path("pi-session-v3.jsonl").read_text()
    path.write_text(original)
    index_paths(home, path)
    edited = original.replace("Capture LastExportUtc", "Capture LastImportUtc", 1)
    assert len(edited) == len(original) and edited != original
    path.write_text(edited)
    assert index_paths(home, path).read.rewrites == 1
    db = open_reader(project_dir(home, "/workspace/demo").index_path())
    text = db.execute("SELECT text FROM entries WHERE entry_id = '00000002'").fetchone()[0]
    db.close()
    assert text == "Implement OracleProvider. Capture LastImportUtc before export."


def test_a_truncated_file_resets_the_session(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(line(HEADER) + line(message("a", None, "one")) + line(message("b", "a", "2")))
    _, state, _ = read_all(path)
    path.write_text(line(HEADER) + line(message("a", None, "one")))
    events, _, _ = read_all(path, state)
    assert events[0].kind == "reset"
    assert [e["id"] for e in entries(events)] == ["a"]
