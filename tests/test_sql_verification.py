"""Query tokens come from SQLite's own tokenizer; verification runs in SQL on FTS5 hits.

Two proofs on real text: (1) for a word list in NFC and NFD, with accents, emoji, CJK
and mixed scripts, the tokens the query builder uses are exactly the terms FTS5
stores (read back through ``fts5vocab``), and either normalization finds the other;
(2) on the fixtures' real messages, the terms SQL verifies for each candidate (FTS5
phrase bits, literal bits) are the terms the Python matcher finds in the row's text.
"""

from __future__ import annotations

import json
import unicodedata

import apsw
import pytest

from lookback.index.schema import FTS_TOKENIZE
from lookback.query.search.pipeline import matches_of, merge_candidates
from lookback.query.search.searches import count_fts, fts_search, prepare
from lookback.query.search.term_stats import SELECTIVE_PHRASES, selective_expression
from lookback.query.search.types import Row, Scope, Searched
from lookback.query.text.fts_query import (
    build_phrase_query,
    folded_tokens,
    fts_tokens,
    stemmed_tokens,
)
from lookback.query.text.matching import PhraseFinder, TermMatcher, find_phrase
from lookback.query.text.terms import extract_terms
from tests.support import fixture_message_texts, fixture_path

WORDS = [
    "résumé", "naïve", "Perché", "Ångström", "façade", "Straße", "İstanbul", "Ørsted",
    "Crème_brûlée", "parse_config_v2", "src/main.ts", "日本語のテキスト", "配置文件", "设置",
    "Привет", "ΣΊΣΥΦΟΣ", "مرحبا", "שלום", "🔥fire🔥", "emoji👍ok", "x²", "ｃｏｎｆｉｇ",
    "mixedРусскийEnglish", "テスト_case", "Zürich-Köln", "dĳk", "ﬁle", "A\u200bB",
]

LATIN = {"résumé", "naïve", "Perché", "Ångström", "façade", "Ørsted", "Crème_brûlée",
         "Zürich-Köln"}


@pytest.fixture
def docs():
    connection = apsw.Connection(":memory:")
    connection.execute(f"CREATE VIRTUAL TABLE docs USING fts5(text, tokenize=\"{FTS_TOKENIZE}\");"
                       "CREATE VIRTUAL TABLE vocab USING fts5vocab(docs, 'instance');")
    yield connection
    connection.close()


def stored_terms(connection: apsw.Connection, rowid: int) -> list[str]:
    return [term for (term,) in connection.execute(
        "SELECT term FROM vocab WHERE doc = ? ORDER BY offset", (rowid,))]


@pytest.mark.parametrize("word", WORDS)
@pytest.mark.parametrize("form", ["NFC", "NFD"])
def test_query_tokens_are_the_tokens_fts5_stores(docs, word, form):
    written = unicodedata.normalize(form, word)
    docs.execute("INSERT INTO docs(text) VALUES (?)", (written,))
    rowid = docs.last_insert_rowid()
    # the table stores each folded word's Porter stem (index.schema.FTS_TOKENIZE)
    assert stemmed_tokens(written) == stored_terms(docs, rowid)
    assert stemmed_tokens(" ".join(folded_tokens(written))) == stored_terms(docs, rowid)
    other = unicodedata.normalize("NFD" if form == "NFC" else "NFC", word)
    if word in LATIN:  # unicode61 folds Latin accents only: Greek tonos stays distinct
        assert folded_tokens(other) == folded_tokens(written)
    phrase = build_phrase_query(other)
    if phrase is not None and folded_tokens(other) == folded_tokens(written):
        found = [r for (r,) in docs.execute("SELECT rowid FROM docs WHERE docs MATCH ?",
                                            (phrase,))]
        assert found == [rowid]


def test_a_decomposed_resume_is_one_token_and_is_found():
    nfd = unicodedata.normalize("NFD", "résumé")
    assert fts_tokens(nfd) == [nfd]  # the regex copy of unicode61 cut it in two
    assert build_phrase_query(nfd) == f'"{nfd}"'
    text = "the " + unicodedata.normalize("NFC", "Résumé") + " part"
    assert find_phrase(text, folded_tokens(nfd)) == 4
    assert PhraseFinder("a " + nfd).find(["resume"]) == 2


def _real_text_index(texts: list[str]) -> apsw.Connection:
    connection = apsw.Connection(":memory:")
    connection.execute(
        "CREATE TABLE entries (rowid INTEGER PRIMARY KEY, session_id, entry_id, seq, type, role,"
        " timestamp, ts_ms, text_hash, tokens, text, eligible);"
        f"CREATE VIRTUAL TABLE entries_fts USING fts5(text, content='entries',"
        f" content_rowid='rowid', tokenize=\"{FTS_TOKENIZE}\");")
    with connection:
        for number, text in enumerate(texts, start=1):
            connection.execute("INSERT INTO entries VALUES (?, 's', ?, ?, 'message', 'user',"
                               " NULL, NULL, NULL, 0, ?, 1)", (number, str(number), number, text))
            connection.execute("INSERT INTO entries_fts(rowid, text) VALUES (?, ?)",
                               (number, text))
    prepare(connection)
    return connection


def test_sql_verification_agrees_with_the_python_matcher_on_real_text():
    texts = fixture_message_texts()
    connection = _real_text_index(texts)
    questions = [text for text in texts if len(text) < 400][:60]
    compared = 0
    for question in questions:
        searched = Searched.of(extract_terms(question))
        if searched.query is None:
            continue
        found: list[Row] = fts_search(connection, searched.query, Scope(session_id="s"), 40)
        assert all(row.phrases == 0 for row in found)  # left for add_phrase_bits
        rows = merge_candidates(connection, searched, [], found)
        matcher = TermMatcher(searched.terms)
        for row in rows:
            text = texts[row.rowid - 1]
            in_sql = {(m.term, m.literal) for m in matches_of(row, searched)}
            in_python = {(m.term, m.literal) for m in matcher.match(text)}
            assert in_sql == in_python, (question[:60], row.rowid)
            compared += 1
    assert compared > 500


def _assert_sql_bits_match_python(rows, searched, texts: list[str], question: str) -> int:
    """Each row's phrase bits from SQL (``matches_of``) are the terms the Python matcher finds
    in its text (``texts[rowid - 1]``); how many rows were compared."""
    matcher = TermMatcher(searched.terms)
    for row in rows:
        in_sql = {(m.term, m.literal) for m in matches_of(row, searched)}
        in_python = {(m.term, m.literal) for m in matcher.match(texts[row.rowid - 1])}
        assert in_sql == in_python, (question[:60], row.rowid)
    return len(rows)


def test_italian_prefix_matches_agree_with_the_python_matcher_on_real_text():
    """Italian questions (tests/fixtures/semantic_questions.json, both halves: nothing
    is chosen here) on the fixtures' real messages: the rows FTS5 finds for their
    keywords' stem prefixes carry the terms the Python matcher finds, prefix forms too."""
    texts = fixture_message_texts()
    connection = _real_text_index(texts)
    asked = json.loads((fixture_path("..") / "semantic_questions.json").read_text())
    questions = [q["question"] for half in ("tuning", "heldout") for q in asked[half]
                 if q["lang"] == "it"]
    compared = prefixed = 0
    for question in questions:
        searched = Searched.of(extract_terms(question))
        if searched.query is None:
            continue
        prefixed += searched.query.expression.count("*")
        rows = merge_candidates(connection, searched, [], fts_search(
            connection, searched.query, Scope(session_id="s"), 40))
        compared += _assert_sql_bits_match_python(rows, searched, texts, question)
    assert prefixed > 20 and compared >= 250


def test_a_many_term_message_is_ranked_by_its_rarest_phrases_and_fully_verified():
    """Real messages of more than ``SELECTIVE_PHRASES`` phrases: the search runs on the
    rarest ones (fewest rows, message order on ties), and every row it returns still
    carries the bits of *all* the query's phrases, as the Python matcher finds them."""
    texts = fixture_message_texts()
    connection = _real_text_index(texts)
    scope = Scope(session_id="s")
    compared = questions = 0
    for question in (text for text in texts if 300 < len(text) < 3000):
        searched = Searched.of(extract_terms(question))
        query = searched.query
        if query is None or len(query.phrases) <= SELECTIVE_PHRASES:
            assert query is None or selective_expression(connection, query) is None
            continue
        expression = selective_expression(connection, query, cap=10_000)
        counts = [count_fts(connection, phrase, scope) for phrase in query.phrases]
        rarest = sorted(range(len(counts)), key=lambda n: (counts[n], n))[:SELECTIVE_PHRASES]
        assert expression == " OR ".join(query.phrases[n] for n in sorted(rarest))
        rows = fts_search(connection, query, scope, 24, selective_expression(connection, query))
        assert all(row.phrases == 0 for row in rows)  # left for add_phrase_bits
        merged = merge_candidates(connection, searched, [], rows)
        compared += _assert_sql_bits_match_python(merged, searched, texts, question)
        questions += 1
        if questions == 15:
            break
    assert questions >= 5 and compared > 100
