"""The per-project index: projections of the event log, tree queries, rebuilds."""

from __future__ import annotations

import json
import os
import threading

import apsw
import pytest

from lookback.index.layout import list_projects, project_dir
from lookback.index.project import ProjectWriter
from lookback.index.rebuild import rebuild
from lookback.index.store import IndexFull, open_reader, read_meta
from lookback.index.tree import branch, context_entries, leaf_of
from tests.support import fixture_path, index_paths, tmpfs


def reader_for(home, cwd):
    return open_reader(project_dir(home, cwd).index_path())


def ids(path):
    return [entry.entry_id for entry in path]


def test_one_index_per_project_cwd(home):
    report = index_paths(home, fixture_path(""))
    assert report.read.entries == 2038
    assert sorted(p.name.rsplit("-", 1)[0] for p in list_projects(home)) == [
        "demo", "fixture", "pi-mono"]


def test_context_after_the_second_compaction_holds_452_entries(home):
    index_paths(home, fixture_path("before-compaction.jsonl"))
    db = reader_for(home, "/Users/badlogic/workspaces/pi-mono")
    session = db.execute("SELECT session_id FROM sessions").fetchone()[0]
    leaf = leaf_of(db, session)
    assert leaf == "v1:1002"
    path = branch(db, session, leaf)
    assert len(path) == 1002 and path[0].entry_id == "v1:1"
    context = context_entries(path)
    assert len(context) == 452
    assert context[0].entry_id == "v1:628"  # the compaction itself first
    assert ids(context[1:3]) == ["v1:551", "v1:552"]
    assert "v1:550" not in ids(context) and "v1:293" not in ids(context)


def test_v3_sibling_branch_is_not_on_the_leafs_branch(home):
    index_paths(home, fixture_path("pi-session-v3.jsonl"))
    db = reader_for(home, "/workspace/demo")
    path = ids(branch(db, "session-fixture", leaf_of(db, "session-fixture")))
    assert path[-1] == "0000000a"
    assert "00000002" in path
    assert not {"00000003", "00000004", "00000005", "00000006"} & set(path)


def test_leaf_on_a_sibling_without_compaction_keeps_the_whole_path(home):
    index_paths(home, fixture_path("branching.jsonl"))
    db = reader_for(home, "/fixture")
    path = branch(db, "fixture-session", "e8")
    assert ids(path) == ["e1", "e2", "e7", "e8"]
    assert ids(context_entries(path)) == ids(path)
    # on the other branch the compaction e5 keeps e3 onwards
    other = branch(db, "fixture-session", "e6")
    assert ids(context_entries(other)) == ["e5", "e3", "e4", "e6"]


def test_thinking_and_custom_data_are_not_in_the_index(home):
    index_paths(home, fixture_path("pi-session-v3.jsonl"))
    db = reader_for(home, "/workspace/demo")
    hits = db.execute("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH 'chain'")
    assert hits.fetchone()[0] == 0
    everything = " ".join(row[0] for row in db.execute("SELECT payload FROM events"))
    assert "Private chain of thought" not in everything
    assert db.execute("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH "
                      "'OracleProvider'").fetchone()[0] >= 2


def test_identifiers_with_underscores_are_single_tokens(home, session_copy, tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(
        json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/p",
                    "timestamp": "2026-01-01T00:00:00Z"}) + "\n" +
        json.dumps({"type": "message", "id": "a", "parentId": None, "timestamp": "x",
                    "message": {"role": "user", "content": "call parse_config_v2 now"}}) + "\n")
    index_paths(home, path)
    db = reader_for(home, "/p")
    match = "SELECT count(*) FROM entries_fts WHERE entries_fts MATCH ?"
    assert db.execute(match, ('"parse_config_v2"',)).fetchone()[0] == 1
    assert db.execute(match, ('"config"',)).fetchone()[0] == 0


def test_indexing_twice_adds_nothing(home):
    index_paths(home, fixture_path(""))
    db = reader_for(home, "/workspace/demo")
    before = db.execute("SELECT count(*) FROM events").fetchone()[0]
    db.close()
    again = index_paths(home, fixture_path(""))
    assert again.events == 0
    db = reader_for(home, "/workspace/demo")
    assert db.execute("SELECT count(*) FROM events").fetchone()[0] == before


def test_append_then_rewrite_replaces_the_session(home, session_copy):
    path = session_copy("pi-session-v3.jsonl")
    index_paths(home, path)
    lines = path.read_text().splitlines(keepends=True)
    extra = json.loads(lines[-1])
    extra.update(id="0000000b", parentId="0000000a")
    extra["message"] = {"role": "user", "content": "remember ZebraCrossing", "timestamp": 2}
    with open(path, "a") as handle:
        handle.write(json.dumps(extra) + "\n")
    assert index_paths(home, path).read.entries == 1
    db = reader_for(home, "/workspace/demo")
    assert leaf_of(db, "session-fixture") == "0000000b"
    assert db.execute("SELECT count(*) FROM entries").fetchone()[0] == 11
    db.close()
    path.write_text("".join(lines[:4]))  # Pi rewrote it shorter
    report = index_paths(home, path)
    assert report.read.rewrites == 1
    db = reader_for(home, "/workspace/demo")
    assert db.execute("SELECT count(*) FROM entries").fetchone()[0] == 3
    assert db.execute("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH "
                      "'ZebraCrossing'").fetchone()[0] == 0


def test_rebuild_reproduces_the_projections_and_keeps_old_readers_working(home):
    index_paths(home, fixture_path("before-compaction.jsonl"))
    project = project_dir(home, "/Users/badlogic/workspaces/pi-mono")
    old = open_reader(project.index_path())
    snapshot = old.execute("SELECT session_id, entry_id, parent_id, type, text, eligible "
                           "FROM entries ORDER BY session_id, entry_id").fetchall()
    report = rebuild(project)
    assert report.generation == 2 and report.events == 1003
    new = open_reader(project.index_path())
    assert new.execute("SELECT session_id, entry_id, parent_id, type, text, eligible "
                       "FROM entries ORDER BY session_id, entry_id").fetchall() == snapshot
    assert new.execute("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH "
                       "'compaction'").fetchone()[0] > 0
    # the reader that opened generation 1 still answers
    assert old.execute("SELECT count(*) FROM entries").fetchone()[0] == len(snapshot)
    # and indexing resumes in the new generation without re-reading the file
    assert index_paths(home, fixture_path("before-compaction.jsonl")).events == 0


def test_a_reader_reads_committed_state_while_the_writer_writes(home):
    index_paths(home, fixture_path("pi-session-v3.jsonl"))
    project = project_dir(home, "/workspace/demo")
    counts: list[int] = []
    stop = threading.Event()

    def read_loop():
        db = open_reader(project.index_path())
        while not stop.is_set():
            counts.append(db.execute("SELECT count(*) FROM entries").fetchone()[0])

    thread = threading.Thread(target=read_loop)
    thread.start()
    try:
        index_paths(home, fixture_path("large-session.jsonl"))  # another project
        index_paths(home, fixture_path("branching.jsonl"))
        with ProjectWriter(home, "/workspace/demo") as writer:
            from lookback.ingest.events import Event

            for n in range(200):
                entry = {"id": f"x{n}", "parent_id": None, "seq": 100 + n, "type": "message",
                         "role": "user", "text": f"note {n}", "eligible": True}
                writer.write([Event("entry", "session-fixture", "/workspace/demo",
                                    {"entry": entry})])
    finally:
        stop.set()
        thread.join()
    assert counts and counts == sorted(counts)  # never a partial or shrinking view
    assert counts[-1] <= 210


def test_a_full_disk_rolls_back_the_whole_batch(home, session_copy):
    path = session_copy("large-session.jsonl")
    index_paths(home, fixture_path("pi-session-v3.jsonl"))
    writer = ProjectWriter(home, "/workspace/demo")
    writer.connection.execute("PRAGMA max_page_count=40")  # a disk with no room left
    from lookback.ingest.reader import read_session

    batch = next(iter(read_session(str(path))))
    with pytest.raises(IndexFull) as raised:  # translated at the index edge
        writer.write(batch.events)
    assert isinstance(raised.value.__cause__, apsw.FullError)
    assert raised.value.exit_code == 1 and raised.value.http_status == 503
    count = writer.connection.execute("SELECT count(*) FROM entries").fetchone()[0]
    assert count == 10
    assert read_meta(writer.connection, "applied_seq") == "11"
    writer.close()


def test_only_one_writer_per_project(home):
    index_paths(home, fixture_path("branching.jsonl"))
    from lookback.index.project import WriterBusy

    with ProjectWriter(home, "/fixture"):
        with pytest.raises(WriterBusy):
            ProjectWriter(home, "/fixture", lock_timeout=0.2)


def test_orphans_and_parent_cycles_end_the_branch_walk(home, tmp_path):
    def entry(entry_id, parent):
        return json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                           "timestamp": "t", "message": {"role": "user", "content": entry_id}})

    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join([
        json.dumps({"type": "session", "version": 3, "id": "odd", "cwd": "/odd",
                    "timestamp": "2026-01-01T00:00:00Z"}),
        entry("a", None), entry("b", "a"),
        entry("orphan", "missing-parent"), entry("child", "orphan"),
        entry("x", "z"), entry("y", "x"), entry("z", "y"),  # a parent cycle
    ]) + "\n")
    index_paths(home, path)
    db = reader_for(home, "/odd")
    assert ids(branch(db, "odd", "b")) == ["a", "b"]
    assert ids(branch(db, "odd", "child")) == ["orphan", "child"]
    cycle = ids(branch(db, "odd", "z"))
    assert sorted(cycle) == ["x", "y", "z"] and cycle[-1] == "z"


def _long_session(path, repeats: int = 10):
    """The large fixture's body ``repeats`` times over under new entry ids (about
    10,000 entries): an index far bigger than the free space the test leaves."""
    lines = fixture_path("large-session.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header.update(id="full-disk", cwd="/w/full")
    out = [json.dumps(header)]
    for repeat in range(repeats):
        for line in lines[1:]:
            record = json.loads(line)
            for key in ("id", "parentId"):
                if record.get(key):
                    record[key] = f"r{repeat}-{record[key]}"
            out.append(json.dumps(record))
    path.write_text("\n".join(out) + "\n")


@pytest.fixture
def small_disk(tmp_path):
    """A real size-limited filesystem (tmpfs); needs the right to mount."""
    with tmpfs(tmp_path / "disk", "64m") as mount:
        yield mount


@pytest.mark.parametrize("share", [0.4, 0.6])
def test_indexing_resumes_by_itself_once_a_full_disk_has_room(small_disk, tmp_path, capsys,
                                                             share):
    """Full disk: the run fails and the index stays usable; space freed: the next
    plain `lookback index` finishes with every entry (no repair), although the last
    run's checkpoint left the main file shorter than its header while the WAL holds
    the pages."""
    from lookback.cli import main

    session = tmp_path / "long.jsonl"
    _long_session(session)
    scratch = tmp_path / "scratch"
    assert main(["--home", str(scratch), "index", str(session)]) == 0
    complete = reader_for(scratch, "/w/full").execute("SELECT count(*) FROM entries").fetchone()[0]
    size = sum(f.stat().st_size for f in (scratch / "projects").rglob("index-*.sqlite*"))

    home = small_disk / "home"
    filler = small_disk / "filler"
    free = os.statvfs(small_disk).f_bavail * os.statvfs(small_disk).f_frsize
    filler.write_bytes(b"\0" * (free - int(size * share)))
    capsys.readouterr()
    assert main(["--home", str(home), "index", str(session)]) == 1
    assert "the disk is full" in capsys.readouterr().err
    db = reader_for(home, "/w/full")
    assert db.execute("PRAGMA quick_check").fetchone()[0] == "ok"  # unchanged, not damaged
    db.close()

    filler.unlink()
    assert main(["--home", str(home), "index", str(session)]) == 0, capsys.readouterr().err
    db = reader_for(home, "/w/full")
    assert db.execute("SELECT count(*) FROM entries").fetchone()[0] == complete
    db.close()


def fts_segments(connection):
    return connection.execute("SELECT count(DISTINCT segid) FROM entries_fts_idx").fetchone()[0]


def test_small_appends_keep_few_fts_segments(home):
    """Every commit writes an FTS5 segment and a query looks each term up in every one:
    an index grown by small appends (a request's freshness, over weeks) keeps about
    log2(commits) of them at any time, not FTS5's default pile of three a level."""
    from lookback.ingest.events import Event

    index_paths(home, fixture_path("large-session.jsonl"))
    cwd = "/workspace/demo"
    commits = 1000
    most = 0
    with ProjectWriter(home, cwd) as writer:
        for n in range(commits):
            entries = [{"id": f"a{n}-{k}", "parent_id": None, "seq": 10_000 + 3 * n + k,
                        "type": "message", "role": "user", "eligible": True,
                        "text": f"append {n} word{n * 7 % 97} token{k} check_{n % 13}"}
                       for k in range(3)]
            writer.write([Event("entry", "session-fixture", cwd, {"entry": e})
                          for e in entries])
            most = max(most, fts_segments(writer.connection))
        assert most <= 10  # log2(1000); FTS5's own merging alone reaches 20 here
        hits = writer.connection.execute(
            "SELECT count(*) FROM entries_fts WHERE entries_fts MATCH 'append AND token1'")
        assert hits.fetchone()[0] == commits  # merging lost and doubled nothing
