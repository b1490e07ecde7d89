"""Service mode: a session whose header ``cwd`` changes moves through Redis and the
workers to its new project, and is not left in both (issue 10, item 8)."""

from __future__ import annotations

from tests.service.helpers import indexed_entries, wait_for
from tests.test_moves import GOOD_IDS, write


def ids(service, cwd: str) -> set[str]:
    return {entry_id for _, entry_id, _, _ in indexed_entries(service.home, cwd)}


def test_a_changed_cwd_moves_the_session_through_the_workers(service, workers, tmp_path):
    from lookback.service import nudge_session

    session = tmp_path / "moving.jsonl"
    write(session, "/work/before")
    workers.append(service.worker().start())
    assert nudge_session(service.settings, str(session)) > 0
    wait_for(lambda: ids(service, "/work/before") == GOOD_IDS, 60, "the first project")
    write(session, "/work/after")
    assert nudge_session(service.settings, str(session)) > 0
    wait_for(lambda: ids(service, "/work/after") == GOOD_IDS, 60, "the new project")
    wait_for(lambda: ids(service, "/work/before") == set(), 60, "the old project to forget it")
