"""Dates in the question (query/text/dates.py): English and Italian, absolute and
relative, resolved against the message's time into ``[start, end)`` days."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lookback.api import RequestError, retrieve, search
from lookback.query.search.ranking import MAX_TIME_MATCH, MIN_NEAR_MS
from lookback.query.search.reader import IndexReader
from lookback.query.text import extract_terms
from lookback.query.text.dates import date_spans, time_spans
from lookback.settings import load_settings
from tests.support import index_paths

#: A Friday; every row of TABLE is resolved against it.
NOW = datetime(2023, 10, 20, 15, 30, tzinfo=UTC)

#: message, the words that name the time, first day, day after the last (tab-separated in
#: the fixture; ``#`` starts a comment line).
TABLE = [tuple(line.split("\t")) for line in (Path(__file__).parent / "fixtures" / "dates.tsv")
         .read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]

#: Words that look like a time but are not one here.
NOT_A_TIME = [
    "you may go ahead", "May I ask about the parser?", "we march on", "summer camp plans",
    "the real estate agent", "Spring Boot config", "the tests fall over", "port 2023",
    "ES2023 target", "the year column", "the last entry", "05/07/2023", "src/2023-05-07/x.py",
    "a 2023-13-45 typo", "on February 30",
]


@pytest.mark.parametrize(("message", "words", "first", "after"), TABLE,
                         ids=[row[0] for row in TABLE])
def test_a_time_in_the_message_resolves_to_its_days(message, words, first, after):
    [span] = time_spans(message, NOW)
    assert message[span.position:span.position + span.length] == words
    assert span.start.date().isoformat() == first
    assert span.end.date().isoformat() == after or (
        span.end.time() != datetime.min.time()  # a third of a period ends mid-day
        and span.end.date().isoformat() == after)
    assert span.start < span.end and span.start_ms < span.end_ms


@pytest.mark.parametrize("message", NOT_A_TIME)
def test_words_that_only_look_like_a_time_are_left_alone(message):
    assert time_spans(message, NOW) == ()
    assert date_spans(message) == []


def test_a_name_without_a_year_is_its_latest_occurrence_begun_by_now():
    [may] = time_spans("in May", datetime(2024, 3, 1, tzinfo=UTC))
    assert may.start.date().isoformat() == "2023-05-01"
    [may] = time_spans("in May", datetime(2024, 5, 2, tzinfo=UTC))
    assert may.start.date().isoformat() == "2024-05-01"
    [summer] = time_spans("last summer", datetime(2024, 7, 1, tzinfo=UTC))
    assert summer.start.date().isoformat() == "2023-06-01"  # this one has not ended
    [weekend] = time_spans("last weekend", datetime(2023, 10, 22, 9, tzinfo=UTC))  # Sunday
    assert weekend.start.date().isoformat() == "2023-10-14"


def test_several_times_in_one_message_each_resolve():
    spans = time_spans("not in May 2023 but two weeks ago, or ieri", NOW)
    assert [s.start.date().isoformat() for s in spans] == ["2023-05-01", "2023-10-03",
                                                           "2023-10-19"]


def test_the_same_message_and_time_always_give_the_same_intervals():
    message = "towards the end of summer 2023, la settimana scorsa"
    assert time_spans(message, NOW) == time_spans(message, NOW)
    # A naive time is read as UTC; another zone is converted.
    naive = datetime(2023, 10, 20, 15, 30)
    assert time_spans("yesterday", naive) == time_spans("yesterday", NOW)


def test_date_words_are_not_topic_keywords():
    terms = extract_terms("What did Melanie paint towards the end of summer 2023?")
    assert [t.text for t in terms] == ["Melanie", "paint"]
    assert [t.text for t in extract_terms("cosa abbiamo deciso ieri sul parser?")] == [
        "deciso", "parser"]
    assert [t.text for t in extract_terms("which spot did Joanna visit in May?")] == [
        "spot", "Joanna", "visit"]
    assert not extract_terms("what did we do yesterday?").has_topic
    # Written as a literal, a date stays searchable as written.
    assert [t.text for t in extract_terms("`last year` totals")] == ["last year", "totals"]


# ------------------------------------------------------------ the ranking signal


def dated_session(path: Path, entries: list[tuple[str, str]]) -> Path:
    """A linear Pi v3 session of user messages: (ISO timestamp, text) each."""
    lines = [{"type": "session", "version": 3, "id": "dated", "cwd": "/made/up/dated",
              "timestamp": entries[0][0]}]
    for number, (stamp, text) in enumerate(entries):
        moment = datetime.fromisoformat(stamp)
        lines.append({"type": "message", "id": f"m{number}",
                      "parentId": f"m{number - 1}" if number else None, "timestamp": stamp,
                      "message": {"role": "user", "content": [{"type": "text", "text": text}],
                                  "timestamp": int(moment.timestamp() * 1000)}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.fixture
def dated(home, tmp_path):
    session = dated_session(tmp_path / "dated.jsonl", [
        ("2023-03-10T10:00:00+00:00", "we went camping near the lake"),
        ("2023-05-12T10:00:00+00:00", "we went camping in the mountains"),
        ("2023-05-20T10:00:00+00:00", "the CampingPlanner tool is ready"),
        ("2023-10-19T10:00:00+00:00", "camping gear is on sale"),
        ("2023-10-20T09:00:00+00:00", "nothing about it, just the weather"),
        ("2023-10-20T10:00:00+00:00", "filler"),
        # A session is more than its camping talk: in six rows of which four say
        # "camping", the word would be too common to carry a message (issue 28's floor).
        *((f"2023-10-20T11:{minute:02d}:00+00:00", f"notes on the quarterly budget {minute}")
          for minute in range(30)),
    ])
    index_paths(home, session)
    settings = load_settings({"home": str(home)}, environ={})
    reader = IndexReader(home)

    def ask(message: str, **fields) -> list[dict]:
        request = {"session_file": str(session), "message": message, "context_ids": ["m5"],
                   "message_time": "2023-10-20T15:30:00Z", **fields}
        return retrieve(request, settings=settings, reader=reader)["evidence"]

    def find(text: str, **fields) -> list[dict]:
        request = {"session_file": str(session), "text": text, "scope": "session",
                   "message_time": "2023-10-20T15:30:00Z", **fields}
        return search(request, settings=settings, reader=reader)["results"]

    yield ask, find
    reader.close()


def test_an_entry_dated_in_the_asked_time_ranks_first_among_comparable_ones(dated):
    ask, find = dated
    plain = [e["entry_id"] for e in ask("where did we go camping?")]
    assert plain[:3] == ["m3", "m1", "m0"]  # recency decides among equal matches
    in_may = ask("where did we go camping in May 2023?")
    assert [e["entry_id"] for e in in_may][:3] == ["m1", "m3", "m0"]
    assert "dated in `in May 2023` +8" in in_may[0]["reasons"]
    assert not any(r.startswith("dated") for e in in_may[1:] for r in e["reasons"])
    # Relative, in Italian, against the message's time (2023-10-20): "ieri" is m3's day.
    assert [e["entry_id"] for e in ask("dove siamo andati in camping ieri?")][:1] == ["m3"]
    # History search uses the same signal, with the same reasons.
    found = find("camping in May 2023")
    assert found[0]["entry_id"] == "m1" and "dated in `in May 2023` +8" in found[0]["reasons"]


def test_the_time_signal_is_never_an_eligibility_rule_nor_crosses_a_tier(dated):
    ask, _ = dated
    # m4 is dated yesterday-ish but matches no term: it never comes back.
    ids = [e["entry_id"] for e in ask("camping yesterday")]
    assert "m4" not in ids and "m5" not in ids
    # An exact identifier outranks every `other` row, whatever their dates.
    ranked = ask("`CampingPlanner` or camping in March 2023")
    assert ranked[0]["entry_id"] == "m2" and ranked[0]["tier"] == "identifier"
    assert ranked[1]["entry_id"] == "m0" and ranked[1]["tier"] == "other"


def test_near_the_asked_time_earns_less_the_further_away(dated):
    ask, _ = dated
    ranked = {e["entry_id"]: e for e in ask("camping in early May 2023")}
    [span] = time_spans("camping in early May 2023", NOW)  # May 1 to a third of May
    after = datetime(2023, 5, 12, 10, tzinfo=UTC).timestamp() * 1000 - span.end_ms + 1
    window = max(MIN_NEAR_MS, span.end_ms - span.start_ms)
    points = round(MAX_TIME_MATCH * (1 - after / window), 2)
    assert 0 < points < MAX_TIME_MATCH
    assert [r for r in ranked["m1"]["reasons"] if r.startswith("dated")] == [
        f"dated near `early May 2023` +{points:g}"]
    assert not any(r.startswith(("dated", "recency")) for r in ranked["m3"]["reasons"])
    assert ranked["m1"]["score"] > ranked["m3"]["score"]


def test_message_time_comes_from_the_request_or_the_latest_user_message(dated):
    ask, _ = dated
    # Without message_time, the latest real user message's own timestamp is "now".
    messages = [{"role": "user", "content": [{"type": "text", "text": "camping yesterday"}],
                 "timestamp": int(datetime(2023, 5, 13, 9, tzinfo=UTC).timestamp() * 1000)}]
    ranked = ask(None, messages=messages, message_time=None)
    assert ranked[0]["entry_id"] == "m1"  # 2023-05-12 is "yesterday" of 2023-05-13
    assert ask("camping yesterday", message_time=1684054800000)[0]["entry_id"] == "m1"
    with pytest.raises(RequestError):
        ask("camping", message_time="last Tuesday")
    with pytest.raises(RequestError):
        ask("camping", message_time=True)
