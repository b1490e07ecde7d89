"""Issue 10, item 8: ``max_line_bytes`` honoured by every reader of session files, and
a header line still being written is "not yet", not "not a session file" (rc 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lookback.freshness import engine_for
from lookback.ingest.reader import NotASession, is_rewritten, read_session, session_identity
from lookback.settings import load_settings
from tests.support import entry_ids, fixture_path

V3 = fixture_path("pi-session-v3.jsonl")
CWD = "/workspace/demo"


def lookback(home: Path, *args: str, **environ: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home.parent),
           "LOOKBACK_CONFIG": str(home.parent / "none.toml"), **environ}
    (home.parent / "none.toml").write_text("")
    return subprocess.run([sys.executable, "-m", "lookback.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120, env=env)


def with_long_line(tmp_path: Path, size: int = 300_000) -> Path:
    lines = V3.read_text().splitlines()
    long = json.dumps({"type": "message", "id": "long-1", "parentId": "00000004",
                       "message": {"role": "user", "content": "x" * size}})
    path = tmp_path / "sessions" / "long.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([*lines[:5], long, *lines[5:]]) + "\n")
    return path


def skipped(home: Path, entry_id: str) -> bool:
    """The long line's text was not indexed: the entry is only a link in its branch (its
    id and parent, read from the line's start)."""
    from lookback.index.layout import project_dir
    from lookback.index.store import open_reader

    connection = open_reader(project_dir(home, CWD).index_path())
    try:
        row = connection.execute("SELECT type, text FROM entries WHERE entry_id = ?",
                                 (entry_id,)).fetchone()
    finally:
        connection.close()
    return tuple(row) == ("unreadable", "")


def test_lookback_index_honours_max_line_bytes(home, tmp_path):
    path = with_long_line(tmp_path)
    result = lookback(home, "index", "--json", str(path), LOOKBACK_MAX_LINE_BYTES="100000")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["oversized_lines_skipped"] == 1
    assert skipped(home, "long-1") and "0000000a" in entry_ids(home, CWD)


def test_the_readers_freshness_engine_honours_max_line_bytes(home, tmp_path):
    path = with_long_line(tmp_path)
    settings = load_settings({"home": str(home)}, environ={"LOOKBACK_MAX_LINE_BYTES": "100000"})
    engine = engine_for(settings).start()
    try:
        outcome = engine.ensure(str(path), wait_ms=30_000)
    finally:
        engine.close()
    assert outcome.state == "indexed"
    assert skipped(home, "long-1") and "0000000a" in entry_ids(home, CWD)


def test_a_header_line_still_being_written_is_not_an_error(home, tmp_path):
    header = V3.read_text().splitlines()[0]
    path = tmp_path / "starting.jsonl"
    path.write_text(header[:40])  # Pi has written part of its first line
    result = lookback(home, "index", str(path))
    assert result.returncode == 0, result.stderr
    assert "not a" not in result.stderr and "still being started" in result.stdout
    path.write_text(V3.read_text())  # the line is complete now: read as usual
    assert lookback(home, "index", str(path)).returncode == 0
    assert "0000000a" in entry_ids(home, CWD)


def test_an_empty_new_file_is_not_an_error_either(home, tmp_path):
    path = tmp_path / "new.jsonl"
    path.write_text("")
    result = lookback(home, "index", str(path))
    assert result.returncode == 0, result.stderr


def test_every_session_read_refuses_what_is_not_a_regular_file(tmp_path):
    """One guard in ingest: a FIFO would block ``open`` and /dev/zero never ends."""
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    (tmp_path / "to-zero.jsonl").symlink_to("/dev/zero")
    state = next(read_session(str(V3))).state
    for path in (str(fifo), "/dev/zero", str(tmp_path / "to-zero.jsonl")):
        with pytest.raises(NotASession, match="not a regular file"):
            session_identity(path)
        with pytest.raises(NotASession, match="not a regular file"):
            list(read_session(path))
        with pytest.raises(NotASession, match="not a regular file"):
            is_rewritten(path, state)
