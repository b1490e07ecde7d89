"""Sessions caught mid-write lose nothing and hide nothing (issue 29, failures 1, 3, 4):
a session just started (header only) does not hide its project's history; one entry
that cannot be decoded does not cut its branch; a valid last line without its newline
is indexed, once, and a line still being written is never indexed wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lookback import api
from lookback.index.layout import project_key
from lookback.settings import load_settings
from tests.support import fixture_path, index_paths

CWD = "/workspace/demo"  # the fixture's


@pytest.fixture
def settings(home: Path):
    return load_settings({"home": str(home)}, environ={})


def write(path: Path, lines: list[str], end: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + end, encoding="utf-8")
    return path


def fixture_lines() -> list[str]:
    return fixture_path("pi-session-v3.jsonl").read_text().splitlines()


def header(session_id: str, cwd: str = CWD) -> str:
    return json.dumps({"type": "session", "version": 3, "id": session_id,
                       "timestamp": "2026-08-25T10:00:00.000Z", "cwd": cwd})


# -- failure 1: a session just started hides the project --------------------------------

@pytest.mark.parametrize("scope", ["project", "branch", "session"])
def test_a_header_only_session_does_not_hide_the_projects_history(home, tmp_path, settings,
                                                                  scope):
    index_paths(home, write(tmp_path / "s" / "old.jsonl", fixture_lines()))
    index_paths(home, write(tmp_path / "s" / "new.jsonl", [header("just-started")]))
    for project in (CWD, project_key(CWD)):
        answer = api.search_answer({"project": project, "text": "OracleProvider",
                                    "scope": scope}, settings=settings)
        assert answer.status == "ok", (project, answer.status)
        assert {r.entry_id for r in answer.results} >= {"00000002"}


def test_a_header_only_session_named_by_its_file_searches_its_project(home, tmp_path,
                                                                      settings):
    index_paths(home, write(tmp_path / "s" / "old.jsonl", fixture_lines()))
    new = write(tmp_path / "s" / "new.jsonl", [header("just-started")])
    index_paths(home, new)
    answer = api.search_answer({"session_file": str(new), "text": "OracleProvider",
                                "scope": "project"}, settings=settings)
    assert answer.status == "ok" and {r.entry_id for r in answer.results} >= {"00000002"}
