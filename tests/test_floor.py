"""The confidence floor (issue 28): evidence only when its match carries enough of the
message; nothing for a match on generic words alone; identifiers stay decisive."""

from __future__ import annotations

import pytest

from lookback.api import retrieve
from lookback.query.search.reader import IndexReader
from lookback.query.text.terms import names
from lookback.settings import load_settings
from tests.support import fixture_path, index_paths
from tests.test_ranking import write_session


@pytest.fixture
def build_log(home, tmp_path):
    """A session where "fail" is everywhere (40 failing builds) and a few rare words
    and one identifier occur once each."""
    turns = [("assistant", "The migration of the invoices table failed: a lock timeout "
                           "in `applyMigration` while the backup ran")]
    for number in range(40):
        turns.append(("user", f"build {number} failed again, the test run did not pass"))
    turns.append(("user", "filler at the end"))
    session = write_session(tmp_path / "builds.jsonl", turns)
    index_paths(home, session)
    return session


def ask(home, session, message):
    settings = load_settings({"home": str(home)}, environ={})
    return retrieve({"session_file": str(session), "message": message,
                     "context_ids": ["m041"]}, settings=settings, reader=IndexReader(home))


def test_a_match_on_generic_words_alone_returns_nothing(home, build_log):
    # `parseConfig` occurs nowhere; every candidate matches only "fail"
    answer = ask(home, build_log, "why did `parseConfig` fail?")
    assert answer["status"] == "ok"
    assert answer["evidence"] == []
    assert ask(home, build_log, "why did the build fail again?")["evidence"] == []


def test_a_rare_word_that_carries_the_message_still_finds_its_entry(home, build_log):
    answer = ask(home, build_log, "why did the invoices migration fail?")
    assert [e["entry_id"] for e in answer["evidence"]][:1] == ["m000"]


def test_a_name_history_never_mentions_weighs_as_an_identifier(home, build_log):
    # "Cypress" is in no row: the backup row carries too little of the message ...
    assert ask(home, build_log, "was the Cypress backup flaky?")["evidence"] == []
    # ... while an unseen word that is no name (a paraphrase's) weighs as any word
    answer = ask(home, build_log, "was the nightly backup flaky?")
    assert [e["entry_id"] for e in answer["evidence"]][:1] == ["m000"]


def test_names_are_capitals_inside_a_sentence():
    assert names("how did we fix the CORS error? Answer briefly, Redis or Cypress") == {
        "CORS", "Redis", "Cypress"}  # "Answer" only starts a sentence


def test_an_identifier_match_stays_decisive(home, build_log):
    # one identifier among otherwise generic words: its row comes back
    answer = ask(home, build_log, "did `applyMigration` fail again in the build?")
    first = answer["evidence"][0]
    assert first["entry_id"] == "m000"
    assert first["tier"] == "identifier"


def test_the_readme_example_on_the_shipped_samples(home):
    """README's `why did `parseConfig` fail?` on tests/fixtures: a name that occurs
    nowhere, so nothing (it returned 12 items matched on "fail" before the floor);
    a question the session does answer gets its entries."""
    session = fixture_path("before-compaction.jsonl")
    index_paths(home, session)
    settings = load_settings({"home": str(home)}, environ={})
    reader = IndexReader(home)
    nothing = retrieve({"session_file": str(session), "message": "why did `parseConfig` fail?"},
                       settings=settings, reader=reader)
    assert nothing["status"] == "ok" and nothing["evidence"] == []
    found = retrieve({"session_file": str(session),
                      "message": "did we add `tokensAfter` to the compaction entry?"},
                     settings=settings, reader=reader)
    first = found["evidence"][0]
    assert first["tier"] == "identifier" and "tokensAfter" in first["excerpt"]
    assert len(found["evidence"]) < 12
