"""A session whose header ``cwd`` changes moves to the new project, and is not left in
both (issue 10, item 8)."""

from __future__ import annotations

import json
from pathlib import Path

from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from tests.support import fixture_path, index_paths

GOOD_IDS = {f"{n:08x}" for n in range(1, 11)}


def write(path: Path, cwd: str) -> None:
    lines = fixture_path("pi-session-v3.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    header["cwd"] = cwd
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")


def held(home: Path, cwd: str) -> tuple[set[str], int, int]:
    """(entry ids, session rows, file rows) of the project's index."""
    path = project_dir(home, cwd).index_path()
    if path is None:
        return set(), 0, 0
    connection = open_reader(path)
    try:
        ids = {row[0] for row in connection.execute("SELECT entry_id FROM entries")}
        sessions = connection.execute("SELECT count(*) FROM sessions").fetchone()[0]
        files = connection.execute("SELECT count(*) FROM files").fetchone()[0]
        return ids, sessions, files
    finally:
        connection.close()


def test_a_changed_cwd_moves_the_session_to_the_new_project(home, tmp_path):
    session = tmp_path / "sessions" / "moving.jsonl"
    session.parent.mkdir()
    write(session, "/work/before")
    index_paths(home, session.parent)
    assert held(home, "/work/before") == (GOOD_IDS, 1, 1)
    write(session, "/work/after")  # Pi rewrote the header with another cwd
    report = index_paths(home, session.parent)
    assert report.errors == []
    assert held(home, "/work/after") == (GOOD_IDS, 1, 1)
    assert held(home, "/work/before") == (set(), 0, 0)  # not in both
    write(session, "/work/before")  # and back again
    index_paths(home, session.parent)
    assert held(home, "/work/before") == (GOOD_IDS, 1, 1)
    assert held(home, "/work/after") == (set(), 0, 0)
    assert index_paths(home, session.parent).events == 0  # settled: a rerun adds nothing


def test_the_readers_freshness_engine_moves_it_too(home, tmp_path):
    from lookback.freshness import engine_for
    from lookback.settings import load_settings

    session = tmp_path / "moving.jsonl"
    write(session, "/work/before")
    engine = engine_for(load_settings({"home": str(home)}, environ={})).start()
    try:
        assert engine.ensure(str(session), wait_ms=30_000).state == "indexed"
        assert held(home, "/work/before") == (GOOD_IDS, 1, 1)
        write(session, "/work/after-and-longer")  # a new header: the file was rewritten
        assert engine.ensure(str(session), wait_ms=30_000).state == "indexed"
    finally:
        engine.close()
    assert held(home, "/work/after-and-longer") == (GOOD_IDS, 1, 1)
    assert held(home, "/work/before") == (set(), 0, 0)
