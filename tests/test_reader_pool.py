"""The reader's connection pool on real indexes of many projects (the team-host case):
open files stay bounded, every answer stays right, one busy project is read by
several connections at once, and running out of files is never "not indexed"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lookback.api import retrieve
from lookback.query.search.reader import IndexReader
from lookback.settings import load_settings
from tests.support import fixture_path, index_paths

BEFORE = fixture_path("before-compaction.jsonl")
QUESTION = "why does unsubscribe clear the event listeners?"
PROJECTS = 24


def copies(folder: Path, count: int) -> list[Path]:
    """``count`` copies of the real fixture session, each in its own project (cwd)."""
    lines = BEFORE.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    paths = []
    for n in range(count):
        header.update(id=f"pool-{n}", cwd=f"/work/team/project-{n}")
        path = folder / f"s{n}.jsonl"
        path.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def many(tmp_path_factory) -> tuple[Path, list[Path]]:
    root = tmp_path_factory.mktemp("many")
    (root / "sessions").mkdir()
    paths = copies(root / "sessions", PROJECTS)
    index_paths(root / "home", *paths)
    return root / "home", paths


def ask(home: Path, reader: IndexReader, path: Path) -> dict:
    settings = load_settings({"home": str(home)}, environ={})
    return retrieve({"session_file": str(path), "message": QUESTION}, settings=settings,
                    reader=reader)


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_many_projects_stay_within_the_pool_and_answer_right(many) -> None:
    home, paths = many
    reader = IndexReader(home, max_open_files=12)  # room for 4 single-connection projects
    before = open_files()
    for _ in range(2):
        for path in paths:
            response = ask(home, reader, path)
            assert response["status"] == "ok"
            assert "v1:195" in [e["entry_id"] for e in response["evidence"]][:3]
            assert reader.pool_stats().open_files <= 12
            assert open_files() - before <= 12
    stats = reader.pool_stats()
    assert stats.opened > 2 * 4  # connections were closed and reopened, least recent first
    reader.close()
    assert open_files() <= before


def test_one_busy_project_is_read_by_several_connections_at_once(many) -> None:
    home, paths = many
    reader = IndexReader(home, connections_per_project=3)
    inside = threading.Barrier(3, timeout=30)

    def hold() -> None:
        with reader.session(session_file=str(paths[0])) as view:
            view.connection.execute("SELECT count(*) FROM entries").fetchone()
            inside.wait()  # all three read transactions are open at the same time

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for thread in threads:
        thread.start()
    hold()
    for thread in threads:
        thread.join(30)
    assert reader.pool_stats().connections == 3
    reader.close()


def test_a_project_never_gets_more_than_its_connections(many) -> None:
    home, paths = many
    reader = IndexReader(home, connections_per_project=1)
    reader.pool.wait_seconds = 0.2
    with reader.session(session_file=str(paths[0])):
        response = ask(home, reader, paths[1])  # another project is not held up
        assert response["status"] == "ok"
        blocked = ask(home, reader, paths[0])  # the only connection is busy: waits, then says so
        assert blocked["status"] == "disabled"
        assert any("busy" in warning for warning in blocked["diagnostics"]["warnings"])
    assert ask(home, reader, paths[0])["status"] == "ok"
    reader.close()


CHILD = r"""
import json, os, resource, sys
from pathlib import Path
from lookback.api import retrieve
from lookback.query.search.reader import IndexReader
from lookback.settings import load_settings

home, question, *paths = sys.argv[1:]
settings = load_settings({"home": home}, environ={})
reader = IndexReader(Path(home), max_open_files=10_000)  # the pool alone would not bound it
used = len(os.listdir("/proc/self/fd"))
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (used + 30, hard))
statuses = [retrieve({"session_file": p, "message": question}, settings=settings,
                     reader=reader)["status"] for p in paths]
closed_for_room = reader.pool_stats().closed
reader.close()
hog = []
try:
    while True:  # take every descriptor left: nothing idle to close, no open can succeed
        hog.append(open(os.devnull))
except OSError:
    pass
starved = retrieve({"session_file": paths[0], "message": question}, settings=settings,
                   reader=IndexReader(Path(home)))
print(json.dumps({"statuses": statuses, "closed": closed_for_room, "starved": starved["status"],
                  "warnings": starved["diagnostics"]["warnings"]}))
"""


def test_out_of_files_closes_idle_connections_then_says_disabled(many) -> None:
    """Under a real open-files limit: idle connections are closed and the open retried;
    with nothing left to close the answer is ``disabled`` with the reason."""
    home, paths = many
    result = subprocess.run([sys.executable, "-c", CHILD, str(home), QUESTION,
                             *map(str, paths)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["statuses"] == ["ok"] * len(paths)
    assert found["closed"] > 0  # the limit was hit, and idle connections made room
    assert found["starved"] == "disabled"
    assert any("open files" in warning or "CantOpen" in warning
               for warning in found["warnings"])


def test_a_read_connection_keeps_fts5s_own_lookup_compiled(tmp_path: Path):
    # SQLite built with STAT4 recompiled FTS5's segment-page lookup at nearly every use
    # (a tenth of a retrieval's work) until read connections planned without bound
    # values (index.store, SQLITE_DBCONFIG_ENABLE_QPSG). Three sessions of the real
    # fixture in one project: an index of two segments, where it showed.
    import uuid

    import apsw

    from lookback.index.store import open_reader

    lines = fixture_path("large-session.jsonl").read_text().splitlines()
    for number in range(3):
        header = {**json.loads(lines[0]), "id": str(uuid.UUID(int=number + 1))}
        (tmp_path / f"session-{number}.jsonl").write_text(
            "\n".join([json.dumps(header), *lines[1:]]) + "\n")
    home = tmp_path / "home"
    index_paths(home, tmp_path)
    connection = open_reader(next((home / "projects").glob("*/index-*.sqlite")))
    recompiled: list[int] = []

    def traced(event: dict) -> None:
        if "_idx" in event.get("sql", "") and "stmt_status" in event:
            recompiled.append(event["stmt_status"]["SQLITE_STMTSTATUS_REPREPARE"])

    connection.trace_v2(apsw.SQLITE_TRACE_PROFILE, traced)
    try:
        for word in ("session", "error", "file", "test", "compaction", "session OR file"):
            connection.execute("SELECT count(*) FROM entries_fts WHERE entries_fts MATCH ?",
                               (word,)).fetchall()
    finally:
        connection.close()
    assert len(recompiled) >= 6
    assert recompiled[-1] == recompiled[0], recompiled
