"""Ranking inside a tier by how informative a match is (issue 19, items 1 and 4)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from unittest import mock

import pytest

from lookback.api import retrieve, search
from lookback.index.layout import project_dir
from lookback.index.store import open_reader
from lookback.query.search import term_stats
from lookback.query.search.reader import IndexReader
from lookback.query.search.term_stats import rarity
from lookback.settings import load_settings
from tests.support import index_paths

CWD = "/made/up/ranking"


def write_session(path: Path, turns: list[tuple[str, str]]) -> Path:
    """A linear v3 session of ``(role, text)`` turns, one second apart."""
    lines = [{"type": "session", "version": 3, "id": "ranking-session", "cwd": CWD,
              "timestamp": "2026-01-01T00:00:00Z"}]
    for number, (role, text) in enumerate(turns):
        content = [{"type": "text", "text": text}]
        message = {"role": role, "content": content, "timestamp": 1767225600000 + number * 1000}
        lines.append({"type": "message", "id": f"m{number:03d}",
                      "parentId": f"m{number - 1:03d}" if number else None,
                      "timestamp": f"2026-01-01T00:{number // 60:02d}:{number % 60:02d}Z",
                      "message": message})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def conversation(home, tmp_path):
    """One old assistant turn about the camping trip among 40 newer user turns that
    merely address Caroline (the common word of the question)."""
    turns = [("assistant", "Melanie: the camping trip by the lake was the best weekend")]
    topics = ["painting", "the kids", "pottery class", "a new job", "the beach", "music",
              "adoption", "a charity race", "the garden", "books"]
    for number in range(40):
        turns.append(("user", f"Caroline: hey, tell me more about {topics[number % 10]} "
                              f"{number}"))
    turns.append(("user", "filler at the end"))
    session = write_session(tmp_path / "s.jsonl", turns)
    index_paths(home, session)
    return session


def test_a_rare_word_outweighs_a_common_one_and_every_non_topic_part(home, conversation):
    settings = load_settings({"home": str(home)}, environ={})
    answer = retrieve({"session_file": str(conversation), "message":
                       "What did Caroline say about the camping trip?",
                       "context_ids": ["m041"]}, settings=settings, reader=IndexReader(home))
    first = answer["evidence"][0]
    # older, an assistant's, and lacking the question's most common word: still first
    assert first["entry_id"] == "m000"
    assert any(reason.startswith("topic `camping` +") for reason in first["reasons"])
    # rows that match only the common word carry too little of the message to come back,
    # unless next to the match (the turn after it may be the answer)
    assert [e["entry_id"] for e in answer["evidence"]] == ["m000", "m001"]
    found = search({"session_file": str(conversation), "text":
                    "What did Caroline say about the camping trip?"},
                   settings=settings, reader=IndexReader(home))
    common = next(r for r in found["results"] if r["entry_id"] != "m000")
    weight = {r.split(" +")[0]: float(r.split(" +")[1]) for r in common["reasons"] if "+" in r}
    assert weight["topic `Caroline`"] < 5  # in 40 of 42 rows: it tells little


def test_rarity_comes_from_the_index_counts(home, conversation):
    connection = open_reader(project_dir(home, CWD).index_path())
    once, few, most = rarity(connection, ['"camping"', '"painting"', '"caroline"'])
    assert once == 1.0  # in one row: the most informative a match can be
    assert 0 < most < few < once
    assert rarity(connection, ['"nowhere"']) == [1.0]  # no row: as rare as one


def test_the_vocabulary_counts_are_fts5s_own_counts_of_each_token(home, conversation):
    """rarity counts a message's new tokens in one read of FTS5's vocabulary: the
    numbers are the per-token ``count(*) ... MATCH`` the weights are defined by, for
    stemmed words, word forms, case, accents and tokens no row holds."""
    connection = open_reader(project_dir(home, CWD).index_path())
    tokens = ["camping", "Camping", "camped", "Caroline", "kids", "kid", "classes",
              "weekend", "lake", "résumé", "nowhere", "the", "tell", "39"]
    phrases = [f'"{token}"' for token in tokens]
    expected = [connection.execute("SELECT count(*) FROM entries_fts WHERE entries_fts "
                                   "MATCH ?", (phrase,)).fetchone()[0] for phrase in phrases]
    assert sum(count > 1 for count in expected) > 5
    term_stats._COUNTS.clear()
    weights = rarity(connection, phrases)  # counted here through the vocabulary
    assert term_stats._VOCABS.get(connection) is True
    stamp = term_stats._stamp(connection)
    assert [term_stats._COUNTS.get((*stamp, token.casefold()))[0] for token in tokens] == \
        expected
    term_stats._COUNTS.clear()
    with mock.patch.object(term_stats, "_vocab", lambda connection: False):
        assert rarity(connection, phrases) == weights  # each counted by count(*)


@pytest.mark.parametrize("path", ["retrieve", "search"])
def test_asking_for_more_results_never_changes_the_first_ones(home, conversation, path):
    settings = load_settings({"home": str(home)}, environ={})
    reader = IndexReader(home)
    message = "Caroline painting kids pottery beach music"

    def ids(limit: int) -> list[str]:
        if path == "retrieve":
            answer = retrieve({"session_file": str(conversation), "message": message,
                               "context_ids": ["m041"], "max_results": limit},
                              settings=settings, reader=reader)
            return [e["entry_id"] for e in answer["evidence"]]
        answer = search({"session_file": str(conversation), "text": message,
                         "scope": "project", "max_results": limit},
                        settings=settings, reader=reader)
        return [r["entry_id"] for r in answer["results"]]

    widest = ids(100)
    # search: every Caroline row; retrieval: the rows above the confidence floor (not the
    # rows matching only the common word) -- either way more than the default 12
    assert len(widest) >= (40 if path == "search" else 13)
    for limit in (1, 3, 5, 12, 20, 40):
        assert ids(limit) == widest[:limit]



def dated_session(path: Path, session_id: str, start_ms: int, texts: list[str]) -> Path:
    """A linear v3 session of user turns, one second apart from ``start_ms``."""
    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    lines = [{"type": "session", "version": 3, "id": session_id, "cwd": CWD,
              "timestamp": iso(start_ms)}]
    for number, text in enumerate(texts):
        moment = start_ms + number * 1000
        lines.append({"type": "message", "id": f"m{number:03d}",
                      "parentId": f"m{number - 1:03d}" if number else None,
                      "timestamp": iso(moment),
                      "message": {"role": "user", "content": [{"type": "text", "text": text}],
                                  "timestamp": moment}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_across_sessions_recency_follows_the_entries_time_not_their_place_in_a_session(
        home, tmp_path):
    """Project search: the match late in last year's long session is older than the one
    at the start of this week's; positions in different sessions do not compare."""
    year = 365 * 86_400_000
    old = dated_session(tmp_path / "old.jsonl", "old-session", 1735689600000 - year,
                        [f"filler {number}" for number in range(50)]
                        + ["the glacier hike notes, first draft"])
    new = dated_session(tmp_path / "new.jsonl", "new-session", 1735689600000,
                        ["the glacier hike notes, second draft", "filler"])
    asking = dated_session(tmp_path / "asking.jsonl", "asking-session", 1735689600000 + 86_400_000,
                           ["nothing about it"])
    index_paths(home, old, new, asking)
    answer = search({"session_file": str(asking), "text": "glacier hike notes",
                     "scope": "project"},
                    settings=load_settings({"home": str(home)}, environ={}),
                    reader=IndexReader(home))
    results = answer["results"]
    assert [(r["session_id"], r["entry_id"]) for r in results] == [
        ("new-session", "m000"), ("old-session", "m050")]
    recency = [dict(_parts(r["reasons"])).get("recency", 0.0) for r in results]
    assert recency == [8.0, 0.0]


def _parts(reasons: list[str]) -> list[tuple[str, float]]:
    """A result's reasons (``label +points``) as (label, points)."""
    found = []
    for reason in reasons:
        label, _, points = reason.rpartition(" ")
        found.append((label, float(points)))
    return found


# --------------------------------------------------------------------- word forms (item 3)


def forms_session(tmp_path: Path) -> Path:
    return write_session(tmp_path / "forms.jsonl", [
        ("user", "please set a reminder for the dentist appointment"),
        ("assistant", "She wrote about writing the parse_config helper"),
        ("user", "filler"), ("user", "more filler")])


def ask(home: Path, session: Path, message: str, live: str = "m003") -> dict:
    """The answer to ``message`` in ``session`` indexed into ``home``, entry ``live`` (and none
    before it) in the model's context."""
    return retrieve({"session_file": str(session), "message": message, "context_ids": [live]},
                    settings=load_settings({"home": str(home)}, environ={}),
                    reader=IndexReader(home))


def indexed_session(home: Path, path: Path, turns: list[tuple[str, str]]) -> Path:
    """``turns`` written as the session ``path`` and indexed into ``home``."""
    session = write_session(path, turns)
    index_paths(home, session)
    return session


def ask_ids(home: Path, session: Path, message: str) -> list[str]:
    return [e["entry_id"] for e in ask(home, session, message)["evidence"]]


def test_a_keyword_matches_its_word_forms(home, tmp_path):
    session = forms_session(tmp_path)
    index_paths(home, session)
    assert ask_ids(home, session, "did I ask you to remind me of the dentist?")[:1] == ["m000"]
    assert ask_ids(home, session, "what did she write?") == ["m001"]


def test_identifiers_stay_exact_and_case_sensitive(home, tmp_path):
    session = forms_session(tmp_path)
    index_paths(home, session)
    settings = load_settings({"home": str(home)}, environ={})
    answer = retrieve({"session_file": str(session), "message": "`parse_config`",
                       "context_ids": ["m003"]}, settings=settings, reader=IndexReader(home))
    assert [(e["entry_id"], e["tier"]) for e in answer["evidence"]] == [("m001", "identifier")]
    answer = retrieve({"session_file": str(session), "message": "`Parse_Config`",
                       "context_ids": ["m003"]}, settings=settings, reader=IndexReader(home))
    assert all(e["tier"] != "identifier" for e in answer["evidence"])


def test_an_index_of_the_old_tokenizer_works_and_is_rebuilt_with_word_forms(home, tmp_path):
    from lookback.index.project import ProjectWriter
    from lookback.index.rebuild import rebuild
    from lookback.index.schema import TOKENIZER_VERSION, WORD_TOKENIZE
    from lookback.index.status import project_status
    from lookback.index.store import write_meta

    session = forms_session(tmp_path)
    index_paths(home, session)
    with ProjectWriter(home, CWD) as writer:  # the file as the previous version wrote it
        db = writer.connection
        db.execute("DROP TABLE entries_fts")
        db.execute(f"CREATE VIRTUAL TABLE entries_fts USING fts5(text, content='entries', "
                   f"content_rowid='rowid', tokenize=\"{WORD_TOKENIZE}\")")
        db.execute("INSERT INTO entries_fts(entries_fts) VALUES ('rebuild')")
        write_meta(db, "tokenizer_version", TOKENIZER_VERSION - 1)
    project = project_dir(home, CWD)
    assert project_status(project)["needs_reindex"] is True
    assert ask_ids(home, session, "the dentist reminder")[:1] == ["m000"]  # exact: still found
    assert ask_ids(home, session, "what did she write?") == []  # no forms before the rebuild
    rebuild(project)
    assert project_status(project)["needs_reindex"] is False
    assert ask_ids(home, session, "what did she write?") == ["m001"]


# --------------------------------------------------------------------- neighbours


def test_the_answer_next_to_a_matching_question_ranks_high_but_needs_its_own_match(home,
                                                                                  tmp_path):
    turns = [("user", "Melanie: which dentist did you pick in the end, Caroline?"),
             ("user", "Caroline: Dr Rossi downtown, he is great"),
             ("user", "no shared word in this turn at all")]
    turns += [("user", f"Caroline: just chatting about the weather {n}") for n in range(30)]
    turns.append(("user", "filler at the end"))
    session = indexed_session(home, tmp_path / "n.jsonl", turns)
    answer = ask(home, session, "Which dentist did Caroline pick?", "m033")
    ids = [e["entry_id"] for e in answer["evidence"]]
    assert ids[:2] == ["m000", "m001"]  # without its neighbour, m001 is one of 31 Carolines
    assert any(r.startswith("next to a match +") for r in answer["evidence"][1]["reasons"])
    assert "m002" not in ids  # next to both, but matches nothing itself


def test_the_excerpt_centres_on_a_form_match(home, tmp_path):
    long_text = "filler words here. " * 500 + "at the very end she reminded me about the dentist"
    session = write_session(tmp_path / "f.jsonl", [("user", long_text), ("user", "filler"),
                                                  ("user", "more filler")])
    index_paths(home, session)
    answer = ask(home, session, "any reminder?", "m002")
    assert "reminded" in answer["evidence"][0]["excerpt"]
