"""A damaged index is found, reported per project, and repaired by one command
(issue 10, item 5).

Three kinds of damage an adversarial run used: the header zeroed, the file cut in
half, the file replaced by something else. Before, ``lookback status`` crashed and
hid every other project, ``lookback index`` printed an ``apsw`` traceback and
indexed nothing, ``lookback reindex`` said only ``cannot open index: NotADBError``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from lookback.api import retrieve
from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from lookback.query.search.reader import IndexReader
from lookback.settings import load_settings
from tests.support import fixture_path

DAMAGED_CWD = "/workspace/demo"  # pi-session-v3.jsonl
OTHER_CWD = "/fixture"  # branching.jsonl


def zero_header(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.write(b"\0" * 100)


def cut_in_half(path: Path) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(path.stat().st_size // 2)


def replace_file(path: Path) -> None:
    path.write_text("this is not an index\n" * 500)


DAMAGE = {"zeroed header": zero_header, "cut in half": cut_in_half, "replaced": replace_file}


def lookback(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lookback.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(home.parent),
                               "LOOKBACK_CONFIG": str(home.parent / "none.toml")})


@pytest.fixture
def sessions(tmp_path: Path) -> Path:
    folder = tmp_path / "sessions"
    folder.mkdir()
    for name in ("pi-session-v3.jsonl", "branching.jsonl"):
        shutil.copyfile(fixture_path(name), folder / name)
    (tmp_path / "none.toml").write_text("")
    return folder


def entries(home: Path, cwd: str) -> list[tuple]:
    connection = open_reader(project_dir(home, cwd).index_path())
    try:
        return connection.execute(
            "SELECT session_id, entry_id, text FROM entries ORDER BY rowid").fetchall()
    finally:
        connection.close()


def damage(home: Path, how: str) -> Path:
    path = project_dir(home, DAMAGED_CWD).index_path()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    DAMAGE[how](path)
    return path


@pytest.fixture
def indexed(home: Path, sessions: Path) -> dict[str, list]:
    assert lookback(home, "index", str(sessions)).returncode == 0
    return {cwd: entries(home, cwd) for cwd in (DAMAGED_CWD, OTHER_CWD)}


@pytest.mark.parametrize("how", list(DAMAGE))
def test_status_reports_the_damaged_project_and_keeps_going(home, indexed, how):
    damage(home, how)
    result = lookback(home, "status", "--json")
    assert result.returncode == 0, result.stderr
    projects = {p.get("cwd") or p["project"]: p for p in json.loads(result.stdout)["projects"]}
    damaged = projects[project_dir(home, DAMAGED_CWD).name]
    assert damaged["state"] == "damaged" and damaged["problem"]
    assert damaged["repair"] == f"lookback reindex --repair --project {damaged['project']}"
    assert projects[OTHER_CWD]["entries"] == len(indexed[OTHER_CWD])
    text = lookback(home, "status")
    assert text.returncode == 0 and "repair it with `lookback reindex --repair" in text.stdout
    assert "None" not in text.stdout  # what a damaged index cannot say is left out


@pytest.mark.parametrize("how", list(DAMAGE))
def test_index_names_the_damaged_project_and_indexes_the_others(home, indexed, sessions, how):
    damage(home, how)
    for name in ("pi-session-v3.jsonl", "branching.jsonl"):  # new lines in both projects
        lines = (sessions / name).read_text().splitlines()
        extra = json.loads(lines[-1])
        extra.update(id="appended1", parentId=extra["id"], type="message",
                     message={"role": "user", "content": "appended after the damage"})
        with open(sessions / name, "a") as handle:
            handle.write(json.dumps(extra) + "\n")
    result = lookback(home, "index", str(sessions))
    assert result.returncode == 1
    name = project_dir(home, DAMAGED_CWD).name
    assert f"project {name}: the index is damaged" in result.stderr
    assert f"lookback reindex --repair --project {name}" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(entries(home, OTHER_CWD)) == len(indexed[OTHER_CWD]) + 1


@pytest.mark.parametrize("how", list(DAMAGE))
def test_retrieval_fails_open_on_a_damaged_index(home, indexed, sessions, how):
    damage(home, how)
    settings = load_settings({"home": str(home)}, environ={})
    response = retrieve({"session_file": str(sessions / "pi-session-v3.jsonl"),
                         "message": "OracleProvider LastExportUtc"},
                        settings=settings, reader=IndexReader(home))
    assert response["evidence"] == [] and response["status"] in ("disabled", "not-indexed")


@pytest.mark.parametrize("how", list(DAMAGE))
def test_reindex_says_how_to_repair_and_rebuilds_the_others(home, indexed, how):
    damage(home, how)
    result = lookback(home, "reindex")
    name = project_dir(home, DAMAGED_CWD).name
    assert result.returncode == 1
    assert f"repair it with `lookback reindex --repair --project {name}`" in result.stderr
    assert f"rebuilt {project_dir(home, OTHER_CWD).name}" in result.stdout


@pytest.mark.parametrize("how", list(DAMAGE))
def test_repair_rebuilds_from_the_session_files(home, indexed, sessions, how):
    path = damage(home, how)
    name = project_dir(home, DAMAGED_CWD).name
    result = lookback(home, "reindex", "--repair", str(sessions))
    assert result.returncode == 0, result.stderr
    assert f"repaired {name} from 1 session files" in result.stdout
    assert f"{project_dir(home, OTHER_CWD).name}: the index is sound" in result.stdout
    assert entries(home, DAMAGED_CWD) == indexed[DAMAGED_CWD]
    assert list(path.parent.glob("*.damaged"))  # the damaged file is kept, not deleted
    status = json.loads(lookback(home, "status", "--json").stdout)
    assert all(p.get("state") != "damaged" for p in status["projects"])
    again = lookback(home, "index", str(sessions))  # the repaired index resumes as usual
    assert again.returncode == 0 and "indexed 0 new entries" in again.stdout


@pytest.mark.parametrize("how", ["zeroed header", "cut in half"])
def test_repair_without_a_path_reads_the_files_paths_sqlite_recorded(home, indexed, how):
    """The session folder is not one `lookback index` reads by default: paths.sqlite's
    record of the indexed files (and their projects) is enough to repair."""
    damage(home, how)
    name = project_dir(home, DAMAGED_CWD).name
    result = lookback(home, "reindex", "--repair")
    assert result.returncode == 0, result.stderr
    assert f"repaired {name} from 1 session files" in result.stdout
    assert entries(home, DAMAGED_CWD) == indexed[DAMAGED_CWD]


def test_repair_rebuilds_from_the_event_log_when_it_reads(home, indexed):
    path = project_dir(home, DAMAGED_CWD).index_path()
    connection = apsw.Connection(str(path))
    pages = [row[0] for row in connection.execute(
        "SELECT pageno FROM dbstat WHERE name LIKE 'entries_fts%' OR name = 'entries'")]
    page_size = connection.execute("PRAGMA page_size").fetchone()[0]
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    with open(path, "r+b") as handle:  # the entries and full-text pages, not the log
        for page in pages:
            handle.seek((page - 1) * page_size + 8)
            handle.write(b"\x5a" * 64)
    result = lookback(home, "reindex", "--repair", "--project", DAMAGED_CWD)
    assert result.returncode == 0, result.stderr
    assert "from its event log" in result.stdout  # no session folder was needed
    assert entries(home, DAMAGED_CWD) == indexed[DAMAGED_CWD]


def test_repair_without_a_readable_log_or_session_files_says_what_to_do(home, indexed,
                                                                        tmp_path):
    damage(home, "zeroed header")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = lookback(home, "reindex", "--repair", "--project", DAMAGED_CWD, str(empty))
    assert result.returncode == 1
    assert "cannot repair: its event log is unreadable and no session file" in result.stderr
    assert "Traceback" not in result.stderr
