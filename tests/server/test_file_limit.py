"""The reader under a low open-files limit (issue 29, item 9).

With ``ulimit -n 256`` and 400 projects, once the read pool had used the budget every
request waited the whole freshness contract (the writers could open no file); with 64,
requests answered 500 and appended entries were left unindexed without a word. The pool's
and the writers' budgets come from the process's real limit, the writers keep a reserve,
and ``/v1/health`` says when freshness cannot keep up. A real ``lookback serve`` under a
lowered limit; conditions are asserted, never timings.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from lookback import freshness
from lookback.budget import FILES_PER_WRITER, OWN_FILES, file_budget
from lookback.server import ReaderApp
from tests.support import index_paths

from .client import Client
from .conftest import FIXTURE, settings_for, write_session
from .processes import ServeProcess, wait_until

PROJECTS = 60


def entry_line(entry_id: str, parent: str, text: str) -> str:
    return json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                       "timestamp": "2025-12-08T23:04:00.000Z",
                       "message": {"role": "user", "content": [{"type": "text", "text": text}],
                                   "timestamp": 2}}) + "\n"


def last_id(session: Path) -> str:
    return json.loads(session.read_text().splitlines()[-1])["id"]


@pytest.fixture
def many_projects(home: Path, tmp_path: Path) -> list[Path]:
    sessions = [write_session(tmp_path / "sessions" / f"p{number}",
                              tmp_path / "work" / f"project-{number}", FIXTURE)
                for number in range(PROJECTS)]
    index_paths(home, tmp_path / "sessions")
    return sessions


def search(client: Client, session: Path, text: str) -> tuple[int, dict]:
    answer = client.post("/v1/search", {"session_file": str(session), "text": text,
                                        "scope": "session"})
    return answer.status, answer.body


def test_under_a_low_file_limit_every_request_is_answered_and_every_entry_indexed(
        home, many_projects):
    """Before: the writers failed with "Too many open files" and the entries stayed
    unindexed however often they were asked for."""
    limit = 64
    (home / "none.toml").write_text("")
    served = ServeProcess(home, {
        "LOOKBACK_HOME": str(home), "LOOKBACK_CONFIG": str(home / "none.toml"),
        "LOOKBACK_FRESHNESS__TAIL": "false", "LOOKBACK_SESSIONS_DIR": str(home / "none")},
        max_open_files=limit)
    try:
        # Every project read once: the read pool holds what its budget lets it keep.
        statuses = [search(served.client, session, "AppMessage")[0]
                    for session in many_projects]
        for round_number in range(2):  # then entries appended, each asked for at once
            for number, session in enumerate(many_projects):
                word = f"Fdword{round_number}x{number}"
                with session.open("a") as handle:
                    handle.write(entry_line(f"fd{round_number}-{number}", last_id(session),
                                            f"remember {word} for later"))
                status, _ = search(served.client, session, word)
                statuses.append(status)
        assert set(statuses) == {200}, sorted(set(statuses))

        def all_found() -> bool:
            return all(search(served.client, session, f"Fdword{r}x{number}")[1].get("results")
                       for r in range(2) for number, session in enumerate(many_projects))

        wait_until(all_found, "every appended entry indexed", seconds=120)
        health = served.client.get("/v1/health").body["server"]
        budget = health["files"]
        assert budget["limit"] == limit and budget["writers"] >= 1
        assert budget["read_pool"] + budget["writer_files"] + budget["connections"] \
            + budget["own"] <= limit
        assert health["freshness"]["out_of_files"] == 0 and "warning" not in health["freshness"]
        assert served.process.poll() is None
    finally:
        served.stop()
    log = served.log.read_text()
    assert "Traceback" not in log and "freshness-error" not in log


@pytest.mark.parametrize("limit", [64, 256, 1024, 100_000])
def test_the_budgets_come_from_the_real_limit_and_keep_the_writers_a_reserve(home, limit):
    settings = settings_for(home)
    budget = file_budget(settings, limit)
    assert budget.writers >= 1 and budget.read_pool >= 3
    assert budget.read_pool <= settings.reader.max_open_files
    if limit < 1000:  # the configured pool does not fit: the limit decides
        assert budget.read_pool + budget.writers * FILES_PER_WRITER + budget.connections \
            + OWN_FILES <= limit


def test_freshness_that_cannot_keep_up_says_so(home, session_file, monkeypatch):
    """A job that fails for lack of open files is counted, ``/v1/health`` warns, and the
    answer that waited for it says its newest entries may be missing."""
    def out_of_files(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    app = ReaderApp(settings_for(home, freshness__tail=False))
    try:
        monkeypatch.setattr(freshness, "ingest_file", out_of_files)
        with session_file.open("a") as handle:
            handle.write(entry_line("late", last_id(session_file), "remember Fdlate"))
        status, payload, _ = app.handle("POST", "/v1/retrieve", None, json.dumps(
            {"session_file": str(session_file), "message": "what was Fdlate?"}).encode())
        answer = payload if isinstance(payload, dict) else json.loads(payload)
        assert status == 200 and any("could not be indexed now" in warning
                                     for warning in answer["diagnostics"]["warnings"])
        _, health, _ = app.handle("GET", "/v1/health", None, b"")
        report = health["server"]["freshness"]
        assert report["out_of_files"] == 1 and "freshness cannot keep up" in report["warning"]
    finally:
        app.close()
