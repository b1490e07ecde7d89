"""End to end through real processes: ``lookback watch`` → Redis → dramatiq workers → index.

The watcher and the workers run as separate processes against the machine's Redis;
the tests only write session files and look at the indexes (FTS5 over the live file).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.service import helpers


def start_watcher(service, folder: Path, log_name: str = "watch.log") -> subprocess.Popen:
    log = open(service.tmp / log_name, "ab")
    return subprocess.Popen([sys.executable, "-m", "lookback.cli", "watch", str(folder)],
                            env=service.environ, cwd=helpers.REPO, stdout=log, stderr=log)


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    process.wait(timeout=20)


def complete(service, path: Path, cwd: str) -> bool:
    return helpers.indexed_entries(service.home, cwd) == helpers.expected_entries(path)


def test_appended_lines_become_searchable(service, workers, tmp_path) -> None:
    cwd = "/work/pi-mono"
    folder = tmp_path / "sessions" / "--work-pi-mono--"
    folder.mkdir(parents=True)
    lines = helpers.session_lines("watch-1", cwd)
    path = folder / "2025-11-20_watch-1.jsonl"
    helpers.append(path, lines[:100])
    workers.append(service.worker().start())
    watcher = start_watcher(service, tmp_path / "sessions")
    try:
        helpers.wait_for(lambda: complete(service, path, cwd), 30, "the first 100 lines")
        # "normalizedText" first appears in the real session's entries 282 and 284.
        assert helpers.fts_hits(service.home, cwd, "normalizedText") == []
        helpers.append(path, lines[100:400])
        helpers.wait_for(lambda: complete(service, path, cwd), 30, "the appended lines")
        assert sorted(helpers.fts_hits(service.home, cwd, "normalizedText")) == ["v1:282", "v1:284"]
    finally:
        stop(watcher)
    # A restarted watcher resumes from Redis: it re-sends nothing and skips nothing.
    helpers.append(path, lines[400:450])
    watcher = start_watcher(service, tmp_path / "sessions")
    try:
        helpers.wait_for(lambda: complete(service, path, cwd), 30, "lines written while stopped")
    finally:
        stop(watcher)
    logged = helpers.logged_entry_ids(service.home, cwd)
    assert len(logged) == len(set(logged)) == len(helpers.expected_entries(path))


def test_three_projects_written_concurrently(service, workers, tmp_path) -> None:
    folder = tmp_path / "sessions"
    projects = {f"/work/project-{n}": folder / f"p{n}" / f"s{n}.jsonl" for n in range(3)}
    for path in projects.values():
        path.parent.mkdir(parents=True)
    workers.append(service.worker(processes=2, threads=2).start())
    watcher = start_watcher(service, folder)

    def writer(cwd: str, path: Path) -> None:
        lines = helpers.session_lines(f"session-{Path(cwd).name}", cwd)
        for start in range(0, len(lines), 37):  # uneven bursts, like a real agent
            helpers.append(path, lines[start:start + 37])
            time.sleep(0.01)

    threads = [threading.Thread(target=writer, args=item) for item in projects.items()]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for cwd, path in projects.items():
            helpers.wait_for(lambda c=cwd, p=path: complete(service, p, c), 60, f"{cwd} complete")
    finally:
        stop(watcher)
    for cwd, path in projects.items():
        expected = helpers.expected_entries(path)
        logged = helpers.logged_entry_ids(service.home, cwd)
        # complete and without duplicates, in the log and in the projection
        assert len(logged) == len(set(logged)) == len(expected) > 900
        # in order: the log holds the entries in the order of the file
        assert logged == [(session, entry) for session, entry, _, _ in expected]
        assert {session for session, _ in logged} == {f"session-{Path(cwd).name}"}


def test_a_nudge_indexes_one_session_through_the_workers(service, workers, tmp_path) -> None:
    """What ``POST /v1/nudge`` does in service mode: no watcher needed."""
    from lookback.service import nudge_session

    cwd = "/work/nudged"
    path = tmp_path / "nudged.jsonl"
    lines = helpers.session_lines("nudge-1", cwd)
    helpers.append(path, lines[:50])
    workers.append(service.worker().start())
    assert nudge_session(service.settings, str(path)) > 0
    helpers.wait_for(lambda: complete(service, path, cwd), 30, "the nudged session")
    helpers.append(path, lines[50:80])
    assert nudge_session(service.settings, str(path)) == 30
    helpers.wait_for(lambda: complete(service, path, cwd), 30, "the appended lines")
    assert nudge_session(service.settings, str(path)) == 0  # nothing new, nothing sent
