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


def test_with_tokens_watching_never_moves_a_session(home, tmp_path):
    """Issue 27 item 2: with ``server.tokens`` set, a token's holder may rewrite its own
    session file to name another project; ``lookback watch`` (as the reader's tailer)
    leaves it in the project holding it, says so, and ``lookback index FILE`` moves it."""
    import subprocess
    import sys

    session = tmp_path / "sessions" / "moving.jsonl"
    session.parent.mkdir()
    write(session, "/work/before")
    config = tmp_path / "config.toml"
    config.write_text('[server.tokens]\n"token-a-00000001" = ["/work/before"]\n')
    environ = {"LOOKBACK_CONFIG": str(config), "PATH": "/usr/bin:/bin",
               "HOME": str(tmp_path)}

    def lookback(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "lookback.cli", "--home", str(home),
                               *args], capture_output=True, text=True, timeout=120,
                              env=environ)

    assert lookback("watch", "--once", str(session.parent)).returncode == 0
    assert held(home, "/work/before") == (GOOD_IDS, 1, 1)
    write(session, "/work/after")  # rewritten in place to name another project
    watched = lookback("watch", "--once", str(session.parent))
    assert watched.returncode == 0
    assert "not moved to another project by watching" in watched.stderr
    assert held(home, "/work/after") == (set(), 0, 0)
    assert held(home, "/work/before") == (GOOD_IDS, 1, 1)  # nothing lost either
    assert lookback("index", str(session)).returncode == 0  # the owner moves it
    assert held(home, "/work/after") == (GOOD_IDS, 1, 1)
    assert held(home, "/work/before") == (set(), 0, 0)
