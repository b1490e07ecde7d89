"""Reindex is exclusive (issue 10, item 3).

Two ``lookback reindex`` at once used to leave a project unreadable: the loser's
clean-up deleted the winner's live generation (retrieve answered ``not-indexed``,
``status`` failed with ``CantOpenError``). Now a second rebuild of a project refuses
with a clear message while one runs, and only the swap that replaced a generation
ever removes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from lookback.index.layout import list_projects
from lookback.index.project import acquire_lock
from lookback.index.rebuild import RebuildBusy, rebuild
from lookback.index.store import open_reader
from tests.support import fixture_path, index_paths


def entry_count(project) -> int:
    connection = open_reader(project.index_path())
    try:
        return connection.execute("SELECT count(*) FROM entries").fetchone()[0]
    finally:
        connection.close()


def test_a_second_rebuild_refuses_and_the_live_generation_survives(home):
    index_paths(home, fixture_path("large-session.jsonl"))
    project = list_projects(home)[0]
    before = entry_count(project)
    in_phase_one, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def hold(done: int, total: int) -> None:  # the first rebuild pauses after its first batch
        in_phase_one.set()
        assert release.wait(30)

    def first() -> None:
        try:
            outcome["first"] = rebuild(project, progress=hold)
        except BaseException as error:  # noqa: BLE001 - reported below
            outcome["first"] = error

    thread = threading.Thread(target=first)
    thread.start()
    try:
        assert in_phase_one.wait(30)
        with pytest.raises(RebuildBusy, match="another reindex"):
            rebuild(project)
    finally:
        release.set()
        thread.join(60)
    assert not isinstance(outcome["first"], BaseException), outcome["first"]
    assert project.index_path().exists()
    assert entry_count(project) == before
    assert rebuild(project).generation == 3  # the lock is free again afterwards


def test_cli_reindex_says_another_one_runs_and_others_go_on(home, tmp_path):
    index_paths(home, fixture_path("large-session.jsonl"), fixture_path("branching.jsonl"))
    busy, free = list_projects(home)
    held = acquire_lock(busy.rebuild_lock_path, 1)  # what a running reindex holds
    try:
        result = subprocess.run(
            [sys.executable, "-m", "lookback.cli", "--home", str(home), "reindex"],
            capture_output=True, text=True, timeout=120)
    finally:
        os.close(held)
    assert result.returncode == 1
    assert f"{busy.name}: another reindex of this project is running" in result.stderr
    assert f"rebuilt {free.name}" in result.stdout
    assert busy.current_generation() == 1 and free.current_generation() == 2
    status = subprocess.run(
        [sys.executable, "-m", "lookback.cli", "--home", str(home), "status", "--json"],
        capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
