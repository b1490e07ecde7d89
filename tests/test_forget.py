"""``lookback forget`` (issue 29, data controls): what is forgotten leaves every path that
returns text and every file of the project, and no reindex, repair or re-read of the session
file brings it back (docs/data-controls.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lookback import api
from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from tests.data_controls import (
    damage_projections,
    every_answer,
    folder_bytes,
    holding,
    lookback,
    pi_session,
)
from tests.server.conftest import settings_for
from tests.support import index_paths

SECRET = "ZORBLAX_LATCH_7731"
KEPT = "QUUXBALANCER_88"
TEXTS = [f"the {SECRET} goes in the vault, do not share it",
         f"noted: {SECRET} stays in the vault",
         f"we also chose {KEPT} for routing",
         f"{KEPT} is configured for the routing layer",
         "some filler about the weather", "more filler about lunch"]
PATHS = ["api", "cli", "codex-hook", "hook", "http", "mcp"]
#: Words of the forgotten turns (the answers echo the query's own terms, never these).
FORGOTTEN = "in the vault"


@pytest.fixture
def project(tmp_path: Path, home: Path) -> dict:
    cwd = tmp_path / "work"
    cwd.mkdir()
    (home / "none.toml").write_text("")
    session = pi_session(tmp_path / "sessions" / "main.jsonl", TEXTS, cwd=str(cwd),
                         session_id="forget-main", kept_from=4)
    # a fork: a copy of the first turn in another session (forks copy entries)
    fork = pi_session(tmp_path / "sessions" / "fork.jsonl", TEXTS[:2], cwd=str(cwd),
                      session_id="forget-fork")
    index_paths(home, session, fork)
    return {"cwd": cwd, "session": session, "fork": fork,
            "folder": project_dir(home, str(cwd)).path}


def texts(home: Path, cwd: Path) -> dict[tuple[str, str], str]:
    connection = open_reader(project_dir(home, str(cwd)).index_path())
    try:
        return {(s, e): t for s, e, t in connection.execute(
            "SELECT session_id, entry_id, text FROM entries")}
    finally:
        connection.close()


def test_a_pattern_is_forgotten_everywhere_and_stays_forgotten(home, project, tmp_path):
    session, folder = project["session"], project["folder"]
    assert holding(every_answer(home, session, SECRET, ["m0", "m1"]), FORGOTTEN) == PATHS
    assert SECRET.lower().encode() in folder_bytes(folder)

    dry = lookback(home, "forget", "--text", SECRET.lower(), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    [counts] = json.loads(dry.stdout)["projects"]
    assert (counts["entries"], counts["sessions"], counts["events_scrubbed"]) == (4, 2, 4)
    assert SECRET.lower().encode() in folder_bytes(folder)  # a dry run changes nothing

    done = lookback(home, "forget", "--text", "-", stdin=SECRET.lower() + "\n")
    assert done.returncode == 0, done.stderr
    assert "forgot 4 entries in 2 sessions" in done.stdout
    assert SECRET.lower() not in (done.stdout + done.stderr).lower()  # counts only

    def gone() -> None:
        answers = every_answer(home, session, SECRET, ["m0", "m1"])
        assert holding(answers, FORGOTTEN) == [], answers["api"]
        assert SECRET.lower().encode() not in folder_bytes(folder)
        # the rest of the branch is whole: the turns after the forgotten ones still come back
        assert holding(every_answer(home, session, KEPT, ["m2"]), "for routing") == PATHS

    gone()
    kept = texts(home, project["cwd"])
    assert kept[("forget-main", "m0")] == "" and kept[("forget-fork", "m1")] == ""
    assert kept[("forget-main", "m2")] == TEXTS[2]

    assert lookback(home, "reindex").returncode == 0  # a replay of the log
    gone()
    # a rewrite of the session file: read again from its start behind a reset
    session.write_text(session.read_text().replace("more filler", "More filler"))
    index_paths(home, session)
    gone()
    # a repair from the log (the index damaged, its log still readable)
    damage_projections(project_dir(home, str(project["cwd"])).index_path())
    repaired = lookback(home, "reindex", "--repair")
    assert "from its event log" in repaired.stdout, repaired.stderr
    gone()
    # a repair from the session files (the log unreadable too): the tombstones are kept
    # beside the index
    live = project_dir(home, str(project["cwd"])).index_path()
    live.write_text("not an index\n" * 200)
    repaired = lookback(home, "reindex", "--repair", str(session.parent))
    assert "from 2 session files" in repaired.stdout, repaired.stderr
    for damaged in folder.glob("*.damaged"):
        damaged.unlink()  # the copy of the damaged file a repair keeps aside (it says so)
    gone()
    # a new fork of the forgotten turn, indexed after the forget: its copy is not stored
    late = pi_session(tmp_path / "sessions" / "late.jsonl", TEXTS[:1], cwd=str(project["cwd"]),
                      session_id="forget-late")
    index_paths(home, late)
    assert texts(home, project["cwd"])[("forget-late", "m0")] == ""
    gone()


def vectors(home: Path, cwd: Path) -> set[tuple[str, str]]:
    connection = open_reader(project_dir(home, str(cwd)).index_path())
    try:
        return set(connection.execute("SELECT session_id, entry_id FROM embeddings"))
    finally:
        connection.close()


def test_an_entry_and_a_whole_session(home, project):
    session = project["session"]
    assert lookback(home, "index", "--embed", str(session)).returncode == 0
    assert ("forget-main", "m2") in vectors(home, project["cwd"])
    semantic = {"session_file": str(session), "message": "which balancer for routing?",
                "semantic": True}
    assert "for routing" in json.dumps(api.retrieve(semantic, settings=settings_for(home)))
    done = lookback(home, "forget", "--session-file", str(session), "--entry", "m2")
    assert done.returncode == 0, done.stderr
    after = texts(home, project["cwd"])
    assert after[("forget-main", "m2")] == "" and after[("forget-main", "m3")] == TEXTS[3]
    assert ("forget-main", "m2") not in vectors(home, project["cwd"])  # its vectors went
    assert ("forget-main", "m3") in vectors(home, project["cwd"])
    assert "for routing" not in json.dumps(api.retrieve(semantic, settings=settings_for(home)))
    assert holding(every_answer(home, session, KEPT, ["m2"]), "for routing") == []
    assert holding(every_answer(home, session, KEPT, ["m3"]), "routing layer") == PATHS

    name = project["folder"].name
    done = lookback(home, "forget", "--project", name, "--session-id", "forget-fork",
                    "--whole-session", "--json")
    assert json.loads(done.stdout)["projects"][0]["entries"] == 2
    after = texts(home, project["cwd"])
    assert after[("forget-fork", "m0")] == after[("forget-fork", "m1")] == ""
    assert after[("forget-main", "m0")] == TEXTS[0]  # by session, not by text: main keeps it
    # the fork's file read again (rewritten): the session stays forgotten
    fork = project["fork"]
    fork.write_text(fork.read_text().replace("the vault", "The vault"))
    index_paths(home, fork)
    assert texts(home, project["cwd"])[("forget-fork", "m0")] == ""


def test_bad_selections_are_refused_by_name(home, project):
    missing = lookback(home, "forget", "--session-file", str(project["session"]),
                       "--entry", "nope")
    assert missing.returncode == 2 and "no entry nope" in missing.stderr
    unnamed = lookback(home, "forget", "--whole-session")
    assert unnamed.returncode == 2 and "name the session" in unnamed.stderr
    bad = lookback(home, "forget", "--regex", "([")
    assert bad.returncode == 2 and "regular expression" in bad.stderr
    regex = lookback(home, "forget", "--regex", r"ZORBLAX_\w+_7731", "--dry-run", "--json")
    assert json.loads(regex.stdout)["projects"][0]["entries"] == 4
    gone = project["session"].with_name("gone.jsonl")
    shutil.copyfile(project["session"], gone)
    gone.unlink()
    absent = lookback(home, "forget", "--session-file", str(gone), "--entry", "m0")
    assert absent.returncode == 2 and "--project and --session-id" in absent.stderr


def test_a_cap_by_age_forgets_what_was_written_before_a_time(home, project):
    dry = lookback(home, "forget", "--before", "2026-01-01T00:00:02Z", "--dry-run", "--json")
    [counts] = json.loads(dry.stdout)["projects"]
    assert (counts["entries"], counts["sessions"]) == (4, 2), dry.stderr
    assert lookback(home, "forget", "--before", "2026-01-01T00:00:02Z").returncode == 0
    after = texts(home, project["cwd"])
    assert [key for key, text in sorted(after.items()) if not text] == [
        ("forget-fork", "m0"), ("forget-fork", "m1"), ("forget-main", "m0"),
        ("forget-main", "m1")]
    assert holding(every_answer(home, project["session"], SECRET, ["m0"]), FORGOTTEN) == []
    assert holding(every_answer(home, project["session"], KEPT, ["m2"]), "for routing") == PATHS
    bad = lookback(home, "forget", "--before", "last spring")
    assert bad.returncode == 2 and "--before last spring: not an ISO 8601" in bad.stderr


def test_a_damaged_project_does_not_stop_the_others(home, project, tmp_path):
    other = pi_session(tmp_path / "other" / "o.jsonl", TEXTS, cwd=str(tmp_path / "elsewhere"),
                       session_id="other", kept_from=4)
    index_paths(home, other)
    damaged = project_dir(home, str(tmp_path / "elsewhere"))
    damaged.index_path().write_text("not an index\n" * 200)
    done = lookback(home, "forget", "--text", SECRET)
    assert done.returncode == 1
    assert f"project {damaged.name}: the index is damaged; repair it with `lookback reindex " \
           f"--repair --project {damaged.name}`" in done.stderr
    assert "forgot 4 entries in 2 sessions" in done.stdout
    assert texts(home, project["cwd"])[("forget-main", "m0")] == ""
