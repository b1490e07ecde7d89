"""Shared helpers of the service-mode tests: session files, workers, index checks.

Session text comes from the real Pi session ``tests/fixtures/pi-sessions/large-session.jsonl``
(pi-mono, MIT; see that folder's SOURCES.md). A test session is its lines with the
header's ``id`` and ``cwd`` replaced, so several projects can be written at once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from lookback.ingest.pipeline import ingest_files
from lookback.ingest.reader import read_session
from lookback.settings import load_settings
from lookback.workers.config import INDEX_QUEUE, ServiceConfig
from lookback.workers.lifeline import die_with_parent
from lookback.workers.owner import my_queues
from lookback.workers.processes import groups
from lookback.workers.sink import RedisSink

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "pi-sessions"
LARGE = FIXTURES / "large-session.jsonl"
REPO = Path(__file__).resolve().parents[2]


def session_lines(session_id: str, cwd: str, source: Path = LARGE) -> list[str]:
    """The fixture's lines, newline-terminated, with a new session id and cwd."""
    lines = source.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header.update(id=session_id, cwd=cwd)
    return [json.dumps(header) + "\n"] + [line for line in lines[1:] if line.strip()]


def append(path: Path, lines: list[str]) -> None:
    with open(path, "a") as handle:
        handle.writelines(lines)
        handle.flush()


def expected_entries(path: Path) -> list[tuple[str, str, int, str]]:
    """(session id, entry id, seq, text) of every entry, read straight from the file."""
    found = []
    for batch in read_session(str(path)):
        for event in batch.events:
            if event.kind == "entry":
                entry = event.payload["entry"]
                found.append((event.session_id, entry["id"], entry["seq"], entry["text"]))
    return found


def indexed_entries(home: Path, cwd: str, namespace: str = "") -> list[tuple[str, str, int, str]]:
    path = project_dir(home, cwd, namespace).index_path()
    if path is None:
        return []
    connection = open_reader(path)
    try:
        return [tuple(row) for row in connection.execute(
            "SELECT session_id, entry_id, seq, text FROM entries ORDER BY session_id, seq")]
    finally:
        connection.close()


def logged_entry_ids(home: Path, cwd: str, namespace: str = "") -> list[tuple[str, str]]:
    """(session id, entry id) of every entry event in the index's log, in log order."""
    path = project_dir(home, cwd, namespace).index_path()
    if path is None:
        return []
    connection = open_reader(path)
    try:
        return [(session, json.loads(payload)["entry"]["id"]) for session, payload in
                connection.execute("SELECT session_id, payload FROM events "
                                   "WHERE kind = 'entry' ORDER BY seq")]
    finally:
        connection.close()


def fts_hits(home: Path, cwd: str, query: str, namespace: str = "") -> list[str]:
    """Entry ids whose text matches the FTS5 ``query`` in the project's live index."""
    path = project_dir(home, cwd, namespace).index_path()
    if path is None:
        return []
    connection = open_reader(path)
    try:
        return [row[0] for row in connection.execute(
            "SELECT e.entry_id FROM entries_fts JOIN entries e ON e.rowid = entries_fts.rowid "
            "WHERE entries_fts MATCH ?", (query,))]
    finally:
        connection.close()


def publish(config: ServiceConfig, folder: Path, cwds: list[str], start: int, stop: int,
            name: str) -> list[Path]:
    """Append fixture lines ``start:stop`` to one session per project (file and session id
    ``{name}-{n}``) and publish them through Redis."""
    paths = []
    for number, cwd in enumerate(cwds):
        path = folder / f"{name}-{number}.jsonl"
        append(path, session_lines(f"{name}-{number}", cwd)[start:stop])
        paths.append(path)
    with RedisSink(config) as sink:
        ingest_files(paths, sink)
    return paths


def complete_once(home: Path, path: Path, cwd: str) -> bool:
    """Every entry of the session file in the index under ``home``, each event logged once."""
    logged = logged_entry_ids(home, cwd)
    return indexed_entries(home, cwd) == expected_entries(path) and len(logged) == len(set(logged))


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class WorkerProcess:
    """One worker group as ``lookback worker`` starts it, in its own session (killable).

    The command line and environment come from ``lookback.workers.processes`` (the
    builder ``lookback worker`` uses), with the test's process and thread counts; only
    the log file and the working directory are the test's own.
    """

    def __init__(self, environ: dict[str, str], *, processes: int = 1, threads: int = 2,
                 queue: str = INDEX_QUEUE, log: Path | None = None) -> None:
        own = my_queues(ServiceConfig.from_settings(load_settings(environ=environ)))
        group = next(group for group in groups(processes, threads, own=own)
                     if group.queues[0] == queue)
        group = replace(group, processes=processes, threads=threads)
        self.environ = group.environ(environ)
        self.argv = group.argv()
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> WorkerProcess:
        output = open(self.log, "ab") if self.log else subprocess.DEVNULL
        self.process = subprocess.Popen(self.argv, env=self.environ, cwd=REPO,
                                        stdout=output, stderr=output, start_new_session=True,
                                        preexec_fn=die_with_parent())
        return self

    def children(self) -> list[int]:
        """Pids of the dramatiq worker processes (the master's children)."""
        assert self.process is not None
        out = subprocess.run(["pgrep", "-P", str(self.process.pid)], capture_output=True,
                             text=True).stdout
        return [int(pid) for pid in out.split()]

    def kill(self) -> None:
        """SIGKILL the whole group: master and workers, no clean-up anywhere."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)  # the master stops its workers
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
