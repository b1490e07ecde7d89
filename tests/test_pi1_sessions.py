"""Pi 1.x session additions (Pi's docs/session-format.md): system messages, usage entries,
context edits, retain-none compactions, several roots and codemode's nested tool calls.

tests/fixtures/pi1/SOURCES.md says how the fixture was made and what each entry is.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lookback.api import retrieve
from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from lookback.index.tree import branch, context_entries, leaf_of
from lookback.query.search.reader import IndexReader
from lookback.settings import load_settings
from tests.support import index_paths

FIXTURE = Path(__file__).parent / "fixtures" / "pi1" / "pi1-additions.jsonl"
SESSION = "pi1-additions"


@pytest.fixture
def db(home):
    index_paths(home, FIXTURE)
    return open_reader(project_dir(home, "/workspace/pi1").index_path())


@pytest.fixture
def ask(home):
    index_paths(home, FIXTURE)
    settings = load_settings({"home": str(home)}, environ={})
    reader = IndexReader(home)

    def call(message: str, leaf_id: str | None = None) -> list[str]:
        request = {"session_file": str(FIXTURE), "message": message}
        if leaf_id is not None:
            request["leaf_id"] = leaf_id
        answer = retrieve(request, settings=settings, reader=reader)
        return [item["entry_id"] for item in answer.get("evidence", [])]

    return call


def matches(db, term: str) -> set[str]:
    rows = db.execute("SELECT e.entry_id FROM entries_fts JOIN entries AS e "
                      "ON e.rowid = entries_fts.rowid WHERE entries_fts MATCH ?", (term,))
    return {row[0] for row in rows}


def ids(path) -> list[str]:
    return [entry.entry_id for entry in path]


def test_system_messages_and_usage_entries_are_never_evidence(db):
    rows = dict(db.execute("SELECT entry_id, eligible FROM entries WHERE entry_id IN "
                           "('s0000001', 'g0000001')").fetchall())
    assert rows == {"s0000001": 0, "g0000001": 0}
    assert matches(db, "zebraprompt") == set() and matches(db, "zebratool") == set()


def test_codemode_nested_tool_calls_are_searchable_like_any_tool_call(db, ask):
    assert matches(db, "quotaBucketSize") == {"t0000001"}
    assert "t0000001" in ask("what was quotaBucketSize renamed to?", leaf_id="u0000004")


def test_a_retain_none_compaction_keeps_nothing_before_it(db):
    path = branch(db, SESSION, "u0000004")
    assert ids(context_entries(path)) == ["k0000001", "u0000004"]


def test_a_context_edit_takes_its_target_out_of_context(db, ask):
    path = branch(db, SESSION, "u0000003")
    context = ids(context_entries(path))
    assert "u0000002" not in context and "a0000003" in context
    assert ask("is the pelicanMode flag still off?", leaf_id="u0000003") == ["u0000002"]


def test_every_root_has_its_own_branch(db, ask):
    assert leaf_of(db, SESSION) == "r0000002"
    assert ids(branch(db, SESSION, "r0000002")) == ["r0000001", "r0000002"]
    assert ids(branch(db, SESSION, "u0000004"))[0] == "s0000001"
    # The session's leaf is on the second tree: the first tree is no branch evidence for it.
    assert ask("what was quotaBucketSize renamed to?") == []


RECORDED = Path(__file__).parent / "fixtures" / "pi1" / "recorded-1.6.0-compacted.jsonl"


def test_a_session_recorded_with_pi_1_6_answers_from_before_its_compaction(home):
    index_paths(home, RECORDED)
    db = open_reader(project_dir(home, "/workspace/pi1-recorded").index_path())
    [session] = [row[0] for row in db.execute("SELECT session_id FROM sessions")]
    assert db.execute("SELECT eligible, text FROM entries WHERE entry_id = 'd29db8c5'")\
        .fetchone() == (0, "")
    assert matches(db, "harness") == set()  # the prompt's sections are not searchable
    leaf = leaf_of(db, session)
    assert ids(context_entries(branch(db, session, leaf))) == [
        "9390162f", "23977f13", "0267ae6b", "f4717be8", "62b42d50"]
    answer = retrieve({"session_file": str(RECORDED), "leaf_id": "f4717be8",
                       "message": "Which value did we give `ledgerBurstQuota` back then?"},
                      settings=load_settings({"home": str(home)}, environ={}),
                      reader=IndexReader(home))
    assert [item["entry_id"] for item in answer["evidence"]][:1] == ["541fa82e"]
