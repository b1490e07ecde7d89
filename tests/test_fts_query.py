"""FTS5 query building (docs/specification.md steps 3–4), run against a real APSW FTS5 table.

The table uses the index's own tokenizer (``index.schema.FTS_TOKENIZE``), so what
these tests find is what the index finds.
"""

from __future__ import annotations

import random

import apsw
import pytest

from lookback.index.schema import FTS_TOKENIZE
from lookback.query.text.fts_query import build_fts_query, build_phrase_query, quote_fts_string
from lookback.query.text.matching import find_literal
from lookback.query.text.terms import MAX_TERMS, QueryTerms, Term, extract_terms


@pytest.fixture
def fts():
    connection = apsw.Connection(":memory:")
    connection.execute(f"CREATE VIRTUAL TABLE docs USING fts5(text, tokenize=\"{FTS_TOKENIZE}\")")
    yield connection
    connection.close()


def add(connection: apsw.Connection, text: str) -> int:
    connection.execute("INSERT INTO docs(text) VALUES (?)", (text,))
    return connection.last_insert_rowid()


def search(connection: apsw.Connection, query: str) -> list[int]:
    sql = "SELECT rowid FROM docs WHERE docs MATCH ? ORDER BY bm25(docs), rowid"
    return [row[0] for row in connection.execute(sql, (query,))]


def test_every_term_is_a_quoted_string_joined_by_or():
    terms = extract_terms("perché `parse_config` fallisce con ENOENT in src/main.ts?")
    assert build_fts_query(terms) == '"parse_config" OR "src main ts" OR "ENOENT" OR "fallisce"'


def test_no_terms_no_query():
    assert build_fts_query(extract_terms("ok grazie, vai pure")) is None
    assert build_fts_query(QueryTerms((Term("^", "phrase"), Term("🔥", "keyword")))) is None


def test_quotes_inside_a_term_cannot_end_the_string():
    assert quote_fts_string('say "hi"') == '"say ""hi"""'
    query = build_fts_query(QueryTerms((Term('name" OR secret*', "phrase"),)))
    assert query == '"name OR secret"'


def test_duplicate_strings_are_sent_once():
    terms = QueryTerms((Term("Timeout", "identifier"), Term("timeout", "keyword")))
    assert build_fts_query(terms) == '"Timeout"'


def test_query_count_is_capped():
    terms = QueryTerms(tuple(Term(f"word{n}", "keyword") for n in range(100)))
    assert build_fts_query(terms).count(" OR ") == MAX_TERMS - 1


def test_phrase_query_for_literals():
    assert build_phrase_query("parse_config") == '"parse_config"'
    assert build_phrase_query("src/utils/config.ts") == '"src utils config ts"'
    assert build_phrase_query("--dry-run") == '"dry run"'
    assert build_phrase_query("^()") is None


def test_phrase_query_prefilters_and_find_literal_confirms(fts):
    exact = add(fts, "moved parse_config into src/utils/config.ts")
    glued = add(fts, "only parse_config_v2 here")
    other_case = add(fts, "PARSE_CONFIG is a constant")
    candidates = search(fts, build_phrase_query("parse_config"))
    assert sorted(candidates) == [exact, other_case]  # _ is a token char: v2 is not found
    texts = {rowid: fts.execute("SELECT text FROM docs WHERE rowid=?", (rowid,)).get
             for rowid in candidates}
    confirmed = [rowid for rowid in candidates if find_literal(texts[rowid], "parse_config")]
    assert confirmed == [exact]
    assert glued not in candidates


def test_keywords_match_whole_tokens_with_accents_folded(fts):
    accented = add(fts, "La configurazione è PERCHÉ lenta")
    longer = add(fts, "configurazioni multiple")
    # An English question: "configurazione" is one token, as written (Porter's forms).
    assert search(fts, build_fts_query(extract_terms("why perche configurazione?"))) == [
        accented]
    assert longer not in search(fts, '"configurazione"')
    # An Italian one: its keywords' Snowball stems find their other forms too.
    assert sorted(search(fts, build_fts_query(extract_terms("perche la configurazione?")))
                  ) == [accented, longer]


def test_a_path_is_found_as_a_phrase(fts):
    wanted = add(fts, "Error: ENOENT, open '/Users/badlogic/pi-mono/packages/src/package.json'")
    add(fts, "package of json files in src")
    query = build_fts_query(extract_terms("why src/package.json?"))
    assert search(fts, query) == [wanted]


HOSTILE = [
    'name" OR secret*',
    "NEAR(",
    "NEAR(a b, 2)",
    "^",
    "^start",
    "a AND b NOT c OR d",
    "col:value",
    "text:secret",
    "(unbalanced",
    "))",
    "prefix*",
    "*",
    '"',
    '"""',
    "{a b}: c",
    "a + b",
    "- minus",
    "`backtick",
    "\x00\x01\x02\x1b[31m\x7f",
    "🔥🚀👍",
    "配置文件 错误",
    "a" * 20_000,
    "\ud800",
]


def _random_text(seed: int, size: int) -> str:
    rng = random.Random(seed)
    pieces = [
        "OR", "AND", "NOT", "NEAR(", ")", "(", "*", "^", '"', "'", "`", ":", "+", "-", "{", "}",
        "\x00", "\x1f", "🔥", "é", "配", "_", "/", "\\", ".", " ", "\n", "x", "Y", "7",
    ]
    return "".join(rng.choice(pieces) for _ in range(size))


@pytest.mark.parametrize("message", HOSTILE + [_random_text(seed, 20_000) for seed in range(3)])
def test_every_built_query_runs_and_finds_a_document_with_each_term(fts, message):
    add(fts, "unrelated text about nothing")
    terms = extract_terms(message)
    query = build_fts_query(terms)
    if query is None:
        return
    search(fts, query)  # the OR query itself never raises
    for term in terms:
        phrase = build_phrase_query(term.text)
        if phrase is None:
            continue
        rowid = add(fts, f"before {term.text} after")
        assert rowid in search(fts, phrase), term
        assert rowid in search(fts, query), term


@pytest.mark.parametrize(
    "message",
    [
        "sooo, why are we using appendMessage and not queueMessage for this?",
        "move @packages/coding-agent/src/utils/config.ts to src/",
        "Error: ENOENT: no such file or directory, open '/Users/badlogic/x/package.json'",
        'run --dry-run -n with "connection refused", «timeout del server» e SQLITE_BUSY',
        "nelle schermate di login premere input non funziona, HTTP 404, TS2345, E0502",
    ],
)
def test_real_messages_find_their_own_text(fts, message):
    own = add(fts, message)
    add(fts, "unrelated text about nothing")
    assert search(fts, build_fts_query(extract_terms(message))) == [own]
