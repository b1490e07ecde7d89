"""A data directory on a read-only mount (docs/scaling.md: a reader may run on a host
that mounts the indexes read-only). SQLite cannot make a WAL index's shared-memory
file there; retrieval must still answer, and `lookback status` say "read-only", not
"damaged". The mount is a real tmpfs remounted read-only (root ignores file modes,
so a chmod'ed folder would not test anything)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lookback.index.layout import project_dir
from lookback.index.project import ProjectWriter
from lookback.index.store import defer_checkpoint
from tests.support import fixture_path, tmpfs

SESSION = fixture_path("before-compaction.jsonl")
CWD = "/Users/badlogic/workspaces/pi-mono"  # its header's
QUESTION = "why does unsubscribe clear the event listeners?"


@pytest.fixture
def mount(tmp_path):
    """A small tmpfs at ``tmp_path/ro``, remounted read-only by ``freeze()``."""
    with tmpfs(tmp_path / "ro", "16m") as point:
        yield point


def freeze(point: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)
    with pytest.raises(OSError):
        (point / "probe").write_text("x")


def lookback(home: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lookback.cli", "--home", str(home), *args],
                          input=stdin, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(home.parent),
                               "LOOKBACK_CONFIG": "/dev/null",
                               "LOOKBACK_FRESHNESS__ENABLED": "false"})


def ask(home: Path) -> dict:
    """`lookback retrieve` in its own process (one here would keep the index open, and
    a mount with files open for writing cannot become read-only)."""
    done = lookback(home, "retrieve", stdin=json.dumps(
        {"session_file": str(SESSION), "message": QUESTION}))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("wal", [False, True], ids=["checkpointed", "wal-left-behind"])
def test_a_read_only_data_directory_still_answers(mount, tmp_path, wal):
    home = mount / "home"
    assert lookback(home, "index", str(SESSION)).returncode == 0
    expected = ask(home)
    entries = json.loads(lookback(home, "status", "--json").stdout)["projects"][0]["entries"]
    assert expected["status"] == "ok" and expected["evidence"]
    if wal:  # the last writer left its WAL (and shared memory) beside the index
        with ProjectWriter(home, CWD) as writer:
            writer.connection.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('probe', 1)")
            defer_checkpoint(writer.connection)
        wal_file = project_dir(home, CWD).index_path().with_name(
            project_dir(home, CWD).index_path().name + "-wal")
        assert wal_file.stat().st_size > 32  # pages only the WAL holds
    folder = project_dir(home, CWD).path
    if not wal:  # as a quiet writer leaves it: no WAL, and no shared memory file either
        for leftover in [*folder.glob("*-wal"), *folder.glob("*-shm")]:
            leftover.unlink()
    assert bool(list(folder.glob("*-shm"))) == wal
    freeze(mount)

    answer = ask(home)
    assert answer["status"] == "ok", answer["diagnostics"]
    assert [e["entry_id"] for e in answer["evidence"]] == \
        [e["entry_id"] for e in expected["evidence"]]

    status = lookback(home, "status", "--json")
    assert status.returncode == 0, status.stderr
    (project,) = json.loads(status.stdout)["projects"]
    assert project["state"] == "read-only" and project["entries"] == entries
    text = lookback(home, "status").stdout
    assert "read-only" in text and "damaged" not in text and "--repair" not in text


def test_indexing_into_a_read_only_data_directory_names_it(mount, tmp_path):
    """`lookback index` into a read-only data directory fails naming what cannot be
    written: not the session file as if it were read-only (a new data directory), not a
    Python class name (an index already there); the session file is untouched."""
    session = tmp_path / "session.jsonl"
    session.write_bytes(SESSION.read_bytes())
    assert lookback(mount / "home", "index", str(session)).returncode == 0
    freeze(mount)
    fresh = lookback(mount / "new-home", "index", str(session))
    assert fresh.returncode == 1
    assert f"{session}: cannot index it: {mount / 'new-home'}: Read-only file system" \
        in fresh.stderr, fresh.stderr
    with session.open("a") as handle:  # something new to write
        handle.write(SESSION.read_text().splitlines()[-1] + "\n")
    existing = lookback(mount / "home", "index", str(session))
    assert existing.returncode == 1
    lock = project_dir(mount / "home", CWD).path / "writer.lock"
    assert f"{lock}: Read-only file system" in existing.stderr, existing.stderr
    assert "OSError" not in fresh.stderr + existing.stderr
    assert session.read_bytes().startswith(SESSION.read_bytes())


def test_a_wal_without_its_shared_memory_file_is_read_only_not_damaged(mount):
    """Pages only in the WAL, and no -shm to read it with: retrieval fails open and
    status says read-only with the reason, never "damaged" or --repair."""
    home = mount / "home"
    assert lookback(home, "index", str(SESSION)).returncode == 0
    with ProjectWriter(home, CWD) as writer:
        writer.connection.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('probe', 1)")
        defer_checkpoint(writer.connection)
    folder = project_dir(home, CWD).path
    for leftover in folder.glob("*-shm"):
        leftover.unlink()
    assert any(wal.stat().st_size > 32 for wal in folder.glob("*-wal"))
    freeze(mount)
    answer = ask(home)
    assert answer["status"] == "disabled"
    status = lookback(home, "status", "--json")
    (project,) = json.loads(status.stdout)["projects"]
    assert project["state"] == "read-only" and "shared-memory" in project["problem"]
    text = lookback(home, "status").stdout
    assert "damaged" not in text and "--repair" not in text


def test_a_read_only_view_of_a_live_index_follows_its_writer(mount, tmp_path):
    """The same folder mounted twice on one host, read-write for the writer and
    read-only for the reader: the reader's pooled snapshot is reopened once the
    writer changed the index, so it never answers from a stale file."""
    from lookback.index.store import open_reader
    from lookback.query.search.pool import ConnectionPool

    view = tmp_path / "view"
    view.mkdir()
    subprocess.run(["mount", "--bind", str(mount), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        home = mount / "home"
        assert lookback(home, "index", str(SESSION)).returncode == 0
        folder = project_dir(home, CWD).path
        for leftover in folder.glob("*-shm"):
            leftover.unlink()
        seen = project_dir(view / "home", CWD)
        pool = ConnectionPool()

        def count() -> int:
            with pool.connection(seen.name, seen.index_path()) as connection:
                return connection.execute("SELECT count(*) FROM entries").fetchone()[0]

        before = count()
        with open(SESSION) as source, open(tmp_path / "more.jsonl", "w") as more:
            header = json.loads(source.readline())
            more.write(json.dumps({**header, "id": "second-session"}) + "\n")
            more.writelines(source.readlines()[:50])
        assert lookback(home, "index", str(tmp_path / "more.jsonl")).returncode == 0
        after = count()
        assert after > before
        connection = open_reader(seen.index_path())
        assert connection.execute("SELECT count(*) FROM entries").fetchone()[0] == after
        connection.close()
        pool.close()
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)
