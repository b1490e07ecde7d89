"""One odd value never stops a file, a run or another project (issue 10, item 1).

Every bad line below was found by an adversarial run to stop ``lookback index`` for
every project, on every rerun. Each sits between the real lines of
``pi-session-v3.jsonl``; the run also indexes ``branching.jsonl`` (another project).
The values are repaired where that loses nothing (lone surrogates escaped to their
``\\uXXXX`` text) or dropped and counted (numbers SQLite cannot hold); never raised.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lookback.index.layout import project_dir
from lookback.index.project import ProjectWriter
from lookback.index.sink import EmbeddedSink
from lookback.index.store import open_reader, read_meta
from lookback.ingest.events import Event, EventError
from lookback.ingest.pipeline import ingest_files
from lookback.ingest.reader import read_session
from lookback.ingest.watch import Watcher
from tests.support import fixture_path, index_paths

V3_CWD = "/workspace/demo"
BRANCHING_CWD = "/fixture"


def entry_line(entry_id: str = "bad-1", **fields) -> str:
    """A v3 message line (as text, so invalid JSON values can be spliced in)."""
    line = {"type": "message", "id": entry_id, "parentId": "00000004",
            "timestamp": "2026-08-24T10:00:04.500Z",
            "message": {"role": "user", "content": "odd line marker"}}
    line.update(fields)
    return json.dumps(line)


def deep(levels: int) -> str:
    return '{"a":' * levels + "1" + "}" * levels


BAD_LINES = {
    "surrogate in text": entry_line().replace("odd line marker", "odd line marker \\ud83d"),
    "surrogate in id": entry_line("bad-1").replace("bad-1", "bad-\\ud83d"),
    "surrogate in parent id": entry_line().replace('"00000004"', '"0000\\udc00"'),
    "surrogate in a key": entry_line().replace('"role": "user"', '"r\\ud800": 1, "role": "user"'),
    "timestamp 1e400": entry_line().replace('"content"', '"timestamp": 1e400, "content"'),
    "timestamp NaN": entry_line().replace('"content"', '"timestamp": NaN, "content"'),
    "timestamp Infinity": entry_line().replace('"content"', '"timestamp": Infinity, "content"'),
    "timestamp -Infinity": entry_line().replace('"content"', '"timestamp": -Infinity, "content"'),
    "timestamp 1e29": entry_line().replace('"content"', '"timestamp": 1e29, "content"'),
    "huge integer timestamp": entry_line().replace('"content"',
                                                   f'"timestamp": {10**30}, "content"'),
    "entry timestamp year 99999": entry_line(timestamp="99999-01-01T00:00:00Z"),
    "list-valued firstKeptEntryId": json.dumps(
        {"type": "compaction", "id": "bad-1", "parentId": "00000004", "summary": "odd line marker",
         "firstKeptEntryId": ["00000002"], "tokensBefore": 10}),
    "object-valued type": entry_line().replace('"type": "message"', '"type": {"a": 1}'),
    "tool arguments 1,000 deep": json.dumps(
        {"type": "message", "id": "bad-1", "parentId": "00000004",
         "message": {"role": "assistant", "content": [
             {"type": "text", "text": "odd line marker"},
             {"type": "toolCall", "id": "c", "name": "deep_tool", "arguments": {"x": 0}}]}}
    ).replace('{"x": 0}', deep(1000)),
    "a line 100,000 deep": "[" * 100_000 + "]" * 100_000,
    "invalid UTF-8": entry_line().replace("marker", "marker \udcff"),  # the byte 0xff
}


def session_with(tmp_path: Path, bad: str, name: str = "odd.jsonl") -> Path:
    lines = fixture_path("pi-session-v3.jsonl").read_text().splitlines()
    path = tmp_path / "sessions" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "\n".join([*lines[:5], bad, *lines[5:]]) + "\n"
    path.write_bytes(data.encode("utf-8", "surrogateescape"))
    return path


def rows(home: Path, cwd: str) -> dict[str, tuple]:
    connection = open_reader(project_dir(home, cwd).index_path())
    try:
        return {row[0]: row[1:] for row in connection.execute(
            "SELECT entry_id, text, ts_ms, first_kept_id, type FROM entries")}
    finally:
        connection.close()


GOOD_V3_IDS = {f"{n:08x}" for n in range(1, 11)}


@pytest.mark.parametrize("name", list(BAD_LINES))
def test_a_bad_line_never_stops_its_file_the_run_or_another_project(home, tmp_path, name):
    odd = session_with(tmp_path, BAD_LINES[name])
    other = tmp_path / "sessions" / "branching.jsonl"
    shutil.copyfile(fixture_path("branching.jsonl"), other)
    report = index_paths(home, tmp_path / "sessions")
    assert report.errors == []
    stored = rows(home, V3_CWD)
    assert GOOD_V3_IDS <= set(stored)  # every good line beside the bad one
    assert len(rows(home, BRANCHING_CWD)) == 8  # and the other project
    assert read_meta(open_reader(project_dir(home, V3_CWD).index_path()),
                     "applied_seq") is not None
    again = index_paths(home, tmp_path / "sessions")  # a rerun adds nothing, fails nothing
    assert again.errors == [] and again.events == 0
    assert odd.exists()


def test_lone_surrogates_are_kept_as_their_escape_text(home, tmp_path):
    session_with(tmp_path, BAD_LINES["surrogate in text"])
    report = index_paths(home, tmp_path / "sessions")
    assert report.read.repaired == 1
    assert rows(home, V3_CWD)["bad-1"][0] == "odd line marker \\ud83d"
    session_with(tmp_path, BAD_LINES["surrogate in id"], name="id.jsonl")
    index_paths(home, tmp_path / "sessions")
    assert "bad-\\ud83d" in rows(home, V3_CWD)  # the six characters, not a surrogate


@pytest.mark.parametrize("name", ["timestamp 1e400", "timestamp NaN", "timestamp Infinity",
                                  "timestamp 1e29", "huge integer timestamp"])
def test_impossible_numbers_are_dropped_and_counted(home, tmp_path, name):
    session_with(tmp_path, BAD_LINES[name])
    report = index_paths(home, tmp_path / "sessions")
    assert report.read.repaired == 1
    text, ts_ms, _, _ = rows(home, V3_CWD)["bad-1"]
    assert text == "odd line marker"
    assert ts_ms == 1787565604500  # the entry's own ISO timestamp takes over


def test_a_list_valued_first_kept_id_is_dropped(home, tmp_path):
    session_with(tmp_path, BAD_LINES["list-valued firstKeptEntryId"])
    report = index_paths(home, tmp_path / "sessions")
    assert report.read.repaired == 1
    assert rows(home, V3_CWD)["bad-1"][2:] == (None, "compaction")


def test_deep_tool_arguments_are_searchable_to_a_depth(home, tmp_path):
    session_with(tmp_path, BAD_LINES["tool arguments 1,000 deep"])
    index_paths(home, tmp_path / "sessions")
    text = rows(home, V3_CWD)["bad-1"][0]
    assert text.startswith("odd line marker\ndeep_tool {\"a\": {\"a\": ")
    assert "{…}" in text and len(text) < 1000


def header(session_id: str = "s-1", cwd: str = "/work/odd") -> str:
    return (f'{{"type":"session","version":3,"id":"{session_id}",'
            f'"timestamp":"2026-08-24T10:00:00.000Z","cwd":"{cwd}"}}')


def write_session(path: Path, first: str) -> Path:
    body = fixture_path("pi-session-v3.jsonl").read_text().splitlines()[1:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([first, *body]) + "\n")
    return path


def test_surrogates_in_session_id_cwd_and_file_name(home, tmp_path):
    folder = tmp_path / "sessions"
    write_session(folder / "sid.jsonl", header(session_id="s-\\ud83d"))
    write_session(folder / "cwd.jsonl", header(cwd="/work/odd-\\ud83d"))
    odd_name = folder / "name-\udcff.jsonl"  # a non-UTF-8 file name, as Python sees it
    write_session(odd_name, header(session_id="s-name", cwd="/work/named"))
    report = index_paths(home, folder)
    assert report.errors == []
    assert report.sessions == {"s-\\ud83d", "s-1", "s-name"}
    assert GOOD_V3_IDS <= set(rows(home, "/work/odd-\\ud83d"))
    assert GOOD_V3_IDS <= set(rows(home, "/work/named"))
    assert index_paths(home, folder).events == 0  # the file name's state was found again


def test_a_100k_deep_first_line_is_not_a_session_and_the_run_goes_on(home, tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    shutil.copyfile(fixture_path("branching.jsonl"), folder / "branching.jsonl")
    report = index_paths(home, folder)
    assert len(report.not_sessions) == 1 and report.errors == []
    assert len(rows(home, BRANCHING_CWD)) == 8


def test_cli_index_with_every_bad_line_in_one_folder(home, tmp_path):
    for number, bad in enumerate(BAD_LINES.values()):
        lines = fixture_path("pi-session-v3.jsonl").read_text().splitlines()
        lines[0] = header(session_id=f"s-{number}", cwd=f"/work/p{number % 3}")
        path = tmp_path / "sessions" / f"s{number}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(("\n".join([*lines[:5], bad, *lines[5:]]) + "\n")
                         .encode("utf-8", "surrogateescape"))
    result = subprocess.run(
        [sys.executable, "-m", "lookback.cli", "--home", str(home), "index", "--json",
         str(tmp_path / "sessions")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["sessions"] == len(BAD_LINES) and summary["errors"] == []
    assert summary["values_repaired"] >= 10
    for project in range(3):
        assert GOOD_V3_IDS <= set(rows(home, f"/work/p{project}"))


def test_the_writer_sets_aside_an_event_it_cannot_store(home):
    good = [e for batch in read_session(str(fixture_path("pi-session-v3.jsonl")))
            for e in batch.events]
    entry = dict(good[3].payload["entry"], id="bad-1", first_kept_id=["not", "text"])
    bad = Event("entry", good[0].session_id, V3_CWD, {"entry": entry})
    huge = Event("entry", good[0].session_id, V3_CWD,
                 {"entry": dict(entry, id="bad-2", first_kept_id=None, ts_ms=10**30)})
    events = [*good[:4], bad, huge, *good[4:]]
    with ProjectWriter(home, V3_CWD) as writer:
        with pytest.raises(EventError):  # refused at decode; all or nothing without the callback
            writer.write(events)
        assert writer.connection.execute("SELECT count(*) FROM entries").fetchone()[0] == 0
        set_aside: list[str] = []
        applied = writer.write(events, on_set_aside=lambda e, error: set_aside.append(
            f"{e.payload['entry']['id']} {error.__class__.__name__}"))
        assert set_aside == ["bad-1 EventError", "bad-2 EventError"]
        assert applied == len(good)
        assert read_meta(writer.connection, "set_aside_events") == "2"
    assert set(rows(home, V3_CWD)) == GOOD_V3_IDS


@pytest.mark.parametrize("bug", [KeyError, TypeError, AttributeError])
def test_a_bug_in_a_projection_raises_instead_of_setting_events_aside(home, monkeypatch, bug):
    """Only bad input is set aside; an error of the code (here a projection that
    raises) stops the batch, loud, with nothing set aside and nothing committed."""
    from lookback.index import writer as writer_module

    def broken(connection, event, now, touched):
        raise bug("a projection bug")

    events = [e for batch in read_session(str(fixture_path("pi-session-v3.jsonl")))
              for e in batch.events]
    monkeypatch.setitem(writer_module._HANDLERS, "entry", broken)
    set_aside: list[Event] = []
    with ProjectWriter(home, V3_CWD) as writer:
        with pytest.raises(bug):
            writer.write(events, on_set_aside=lambda e, error: set_aside.append(e))
        assert set_aside == []
        assert read_meta(writer.connection, "set_aside_events") is None
        assert writer.connection.execute("SELECT count(*) FROM events").fetchone()[0] == 0


def test_the_embedded_sink_counts_what_the_writer_set_aside(home, tmp_path):
    class Corrupting(EmbeddedSink):
        def write(self, batch):  # an event no reader would produce: a value SQLite refuses
            for event in batch.events:
                if event.kind == "entry" and event.payload["entry"]["id"] == "00000005":
                    event.payload["entry"]["first_kept_id"] = {"a": 1}
            super().write(batch)

    with Corrupting(home) as sink:
        report = ingest_files([fixture_path("pi-session-v3.jsonl"),
                               fixture_path("branching.jsonl")], sink)
    assert report.errors == [] and sink.set_aside == 1 and sink.failures == {}
    assert set(rows(home, V3_CWD)) == GOOD_V3_IDS - {"00000005"}
    assert len(rows(home, BRANCHING_CWD)) == 8


def test_the_watcher_keeps_going_past_bad_lines(home, tmp_path):
    folder = tmp_path / "sessions"
    session_with(tmp_path, BAD_LINES["surrogate in text"])
    shutil.copyfile(fixture_path("branching.jsonl"), folder / "branching.jsonl")
    with EmbeddedSink(home) as sink:
        watcher = Watcher([folder], sink)
        result = watcher.poll()
        sink.flush()
        assert result.errors == [] and result.files_changed == 2
        with open(folder / "odd.jsonl", "a") as handle:
            handle.write(entry_line("bad-2", timestamp="x").replace(
                "odd line marker", "\\udfff again") + "\n")
        watcher._last_rescan = float("-inf")  # noqa: SLF001 - force the rescan now
        assert watcher.poll().errors == []
    assert {"bad-1", "bad-2"} <= set(rows(home, V3_CWD))


def test_the_readers_freshness_engine_indexes_good_lines_beside_bad_ones(home, tmp_path):
    """What ``lookback serve`` does for a retrieve or a nudge in embedded mode."""
    from lookback.freshness import engine_for
    from lookback.settings import load_settings

    lines = fixture_path("pi-session-v3.jsonl").read_text().splitlines()
    path = tmp_path / "live.jsonl"
    path.write_bytes(("\n".join([*lines[:5], *BAD_LINES.values(), *lines[5:]]) + "\n")
                     .encode("utf-8", "surrogateescape"))
    engine = engine_for(load_settings({"home": str(home)}, environ={})).start()
    try:
        assert engine.ensure(str(path), wait_ms=60_000).state == "indexed"
    finally:
        engine.close()
    assert GOOD_V3_IDS | {"bad-1", "bad-\\ud83d"} <= set(rows(home, V3_CWD))
