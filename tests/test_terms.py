"""Term extraction (docs/specification.md step 2).

What a user message is about, and when it is about nothing.

Messages marked "real" are user messages from the Pi session fixtures in
tests/fixtures/pi-sessions/ (copies of badlogic/pi-mono test fixtures, MIT):
before-compaction.jsonl and large-session.jsonl, line numbers as noted.
"""

from __future__ import annotations

import random

import pytest

from lookback.query.text.normalize import fold
from lookback.query.text.stopwords import is_stopword, is_technology
from lookback.query.text.terms import (
    ERROR,
    FLAG,
    IDENTIFIER,
    KEYWORD,
    MAX_TERMS,
    PATH,
    PHRASE,
    TECHNOLOGY,
    QueryTerms,
    Term,
    extract_terms,
)


def pairs(message: str) -> list[tuple[str, str]]:
    return [(term.text, term.kind) for term in extract_terms(message)]


def texts(message: str, kind: str) -> list[str]:
    return [term.text for term in extract_terms(message) if term.kind == kind]


# --------------------------------------------------------------------- folding and stopwords


def test_fold_ignores_case_accents_and_compatibility_forms():
    assert fold("PERCHÉ") == fold("perche") == "perche"
    assert fold("ｃｏｎｆｉｇ") == "config"  # full-width letters (NFKC)
    assert fold("ﬁle") == "file"  # ligature
    assert fold("Straße") == "strasse"
    assert fold("perche\u0301") == "perche"  # decomposed accent


def test_fold_never_turns_non_latin_text_into_ascii():
    assert fold("配置文件") == "配置文件"
    assert fold("Ошибка") == "ошибка"
    assert fold("ΛΌΓΟΣ") == fold("λόγος") == "λόγος".casefold()  # Greek keeps its accents


@pytest.mark.parametrize(
    "word",
    ["posso", "solo", "senza", "problema", "volta", "tutte", "without", "problem", "ok",
     "grazie", "thanks", "continua", "finish", "Perché", "PERCHE", "GRAZIE", "Ｏｋ", "the",
     "questo", "vai", "pure", "perfetto", "problemi"],
)
def test_grammar_workflow_and_acknowledgements_are_stopwords(word):
    assert is_stopword(word)


@pytest.mark.parametrize(
    "word", ["schermate", "premere", "input", "index", "test", "value", "page", "sessione",
             "compaction", "timeout", "click",
             # content words a prose stopword list drops (issue 19): they name the topic
             "room", "big", "opening", "working", "work", "year", "last", "long", "kind",
             "end", "new", "first", "time", "screen", "anno", "stanza", "schermo"],
)
def test_ui_and_programming_words_are_topic_words(word):
    assert not is_stopword(word)


def test_technologies_are_never_stopwords():
    # A technology is never a stopword, whatever a list says.
    assert is_technology("HTTP") and not is_stopword("http")
    assert is_technology("SQLite") and is_technology("node.js") and is_technology("Redis")
    assert not is_technology("schermate")


# --------------------------------------------------------------------- no topic → no-query


@pytest.mark.parametrize(
    "message",
    [
        "ok grazie, vai pure",
        "thanks, please continue",
        "perfetto, continua senza problemi",
        "Perfetto! Grazie mille, puoi finire tutte le modifiche?",
        "continue",  # real: large-session.jsonl line 235
        "alright, where were we?",  # real: before-compaction.jsonl
        "yes",
        # workflow and finishing requests that a bigger list once let through (issue 19)
        "Sì procedi basta che risolviamo il problema una volta per tutte",
        "posso aspettare?",
        "thanks, looks good — please finish the rest without problems",
        "",
        "   \n\t ",
    ],
)
def test_messages_without_a_topic_have_no_terms(message):
    terms = extract_terms(message)
    assert not terms.has_topic
    assert terms.terms == ()


def test_a_topic_word_among_acknowledgements_is_kept():
    assert pairs("ok grazie, ora sistema il timeout del login") == [
        ("timeout", KEYWORD),
        ("login", KEYWORD),
    ]


def test_content_words_of_a_question_stay_topics():
    assert [t.text for t in extract_terms("What is Jon working on opening?")] == [
        "Jon", "working", "opening"]
    # "last year" names a time: ranking's date signal, not two topics (query/text/dates.py)
    assert [t.text for t in extract_terms("What kind of room did they book last year?")] == [
        "kind", "room", "book"]
    assert [t.text for t in extract_terms("which year is in the last column?")] == [
        "year", "last", "column"]


def test_italian_ui_words_remain_searchable():
    terms = extract_terms("nelle schermate di login, premere invio non aggiorna l'input")
    assert [t.text for t in terms] == [
        "schermate", "login", "premere", "invio", "aggiorna", "input",
    ]
    assert terms.has_topic


# --------------------------------------------------------------------- literal kinds


def test_backticked_identifiers_stay_searchable_even_when_they_look_like_stopwords():
    assert pairs("`solo` e solo") == [("solo", IDENTIFIER)]
    assert pairs("usa `without` senza problemi") == [("without", IDENTIFIER)]


def test_backticked_content_is_classified_by_its_shape():
    assert pairs("`src/main.ts`, `--verbose`, `ENOENT` and `git rebase -i`") == [
        ("src/main.ts", PATH),
        ("ENOENT", ERROR),
        ("--verbose", FLAG),
        ("git rebase -i", PHRASE),
    ]


def test_code_fences_are_not_one_term_but_their_content_is_scanned():
    message = "```python\nresult = parse_config(path)\n```"
    assert pairs(message) == [("parse_config", IDENTIFIER), ("python", TECHNOLOGY),
                              ("result", KEYWORD), ("path", KEYWORD)]


def test_symbols_qualified_camel_pascal_and_snake():
    message = (
        "sooo, why are we using appendMessage and not queueMessage for this? "  # real
        "Also SessionManager, parse_config_v2, os.path.join, std::vector and foo()."
    )
    assert texts(message, IDENTIFIER) == [
        "appendMessage", "queueMessage", "SessionManager", "parse_config_v2",
        "os.path.join", "std::vector", "foo",
    ]


def test_qualified_exception_is_also_an_error():
    assert pairs("apsw.BusyError again") == [
        ("apsw.BusyError", IDENTIFIER),
        ("BusyError", ERROR),
    ]


def test_unix_windows_relative_and_bare_paths():
    message = (
        r"move @packages/coding-agent/src/utils/config.ts to src/ "  # real (@ is Pi's file ref)
        r"then open C:\Users\me\notes.txt, ./run.sh, ~/x, src/foo.py:42:3, "
        r"pyproject.toml, .gitignore and the Dockerfile"
    )
    assert texts(message, PATH) == [
        "packages/coding-agent/src/utils/config.ts", "src/", r"C:\Users\me\notes.txt",
        "./run.sh", "~/x", "src/foo.py", "pyproject.toml", ".gitignore", "Dockerfile",
    ]


def test_prose_with_slashes_is_not_a_path():
    assert texts("e.g. and/or, si/no, il 12/05/2024", PATH) == []


def test_quoted_path_with_spaces_is_a_path():
    # real: large-session.jsonl line 355
    message = (
        "'/var/folders/49/l4171l3n219_xwq30fmyzr8w0000gn/T/TemporaryItems/NSIRD_screen"
        "captureui_tby1cQ/Screenshot 2025-11-21 at 01.27.21.png'\n\nany idea why the colors "
        "differ in the vs code terminal and ghostty?"
    )
    assert extract_terms(message).files[0].text.endswith("Screenshot 2025-11-21 at 01.27.21.png")


def test_flags_long_and_short():
    assert pairs("run it with --dry-run -n and --max-results=5") == [
        ("--dry-run", FLAG),
        ("-n", FLAG),
        ("--max-results", FLAG),
    ]


def test_markdown_bullets_and_hyphenated_words_are_not_flags():
    assert texts("- read-only mode\n- e-mail", FLAG) == []


@pytest.mark.parametrize(
    "code",
    ["ENOENT", "EADDRINUSE", "SQLITE_BUSY", "ERR_MODULE_NOT_FOUND", "TS2345", "E0502",
     "ORA-00942", "HTTP 404", "SIGKILL", "TypeError", "ModuleNotFoundError"],
)
def test_error_codes(code):
    assert pairs(f"ancora {code} nel log") == [(code, ERROR), ("log", KEYWORD)]


def test_version_like_codes_and_constants_are_not_errors():
    terms = extract_terms("SHA256 of RFC3339 dates, MAX_RESULTS unchanged")
    assert terms.errors == ()
    assert ("MAX_RESULTS", IDENTIFIER) in pairs("MAX_RESULTS unchanged")


def test_quoted_phrases_straight_typographic_and_guillemets():
    message = "cerca \"connection refused\", “lost update”, «timeout del server» e 'so long'"
    assert texts(message, PHRASE) == [
        "connection refused", "lost update", "timeout del server", "so long",
    ]


def test_quoted_stopwords_stay_searchable():
    assert pairs('cerca "senza problemi"') == [("senza problemi", PHRASE)]


def test_apostrophes_are_not_quotes():
    assert pairs("l'errore dell'API non c'è") == [("errore", KEYWORD), ("API", KEYWORD)]


def test_technologies_are_their_own_kind():
    assert pairs("Python e SQLite con Redis via Docker e node.js") == [
        ("Python", TECHNOLOGY), ("SQLite", TECHNOLOGY), ("Redis", TECHNOLOGY),
        ("Docker", TECHNOLOGY), ("node.js", TECHNOLOGY),
    ]


def test_real_stack_trace_message():
    # real: before-compaction.jsonl line 606 (first lines)
    message = (
        "~/workspaces/pi-mono (refactor)\n➜  pi-mono git:(refactor) npx tsx "
        "packages/coding-agent/src/cli.ts -c\nnode:fs:443\n    return binding.readFileUtf8"
        "(path, stringToFlags(options.flag));\n                   ^\n\nError: ENOENT: no such "
        "file or directory, open '/Users/badlogic/workspaces/pi-mono/packages/coding-agent/"
        "src/package.json'\n"
    )
    terms = extract_terms(message)
    assert [t.text for t in terms.symbols] == ["readFileUtf8", "stringToFlags", "options.flag"]
    assert [t.text for t in terms.errors] == ["ENOENT"]
    assert [t.text for t in terms.files] == [
        "~/workspaces/pi-mono",
        "packages/coding-agent/src/cli.ts",
        "/Users/badlogic/workspaces/pi-mono/packages/coding-agent/src/package.json",
    ]
    assert ("-c", FLAG) in pairs(message)


# --------------------------------------------------------------------- QueryTerms


def test_terms_are_ordered_most_specific_first_and_deduplicated():
    terms = extract_terms("timeout in `parse_config`: TIMEOUT, Timeout, parse_config, ENOENT")
    assert [(t.text, t.kind) for t in terms] == [
        ("parse_config", IDENTIFIER),
        ("ENOENT", ERROR),
        ("timeout", KEYWORD),
    ]


def test_query_terms_helpers():
    terms = extract_terms('`getBranch` in src/main.ts fails with EPIPE, "lost data", sqlite, lock')
    assert terms.by_kind() == {
        IDENTIFIER: ["getBranch"],
        PATH: ["src/main.ts"],
        ERROR: ["EPIPE"],
        PHRASE: ["lost data"],
        TECHNOLOGY: ["sqlite"],
        KEYWORD: ["fails", "lock"],
    }
    assert [t.text for t in terms.literals] == ["getBranch", "src/main.ts", "EPIPE", "lost data"]
    assert terms.files == (Term("src/main.ts", PATH),)
    assert terms.symbols == (Term("getBranch", IDENTIFIER),)
    assert terms.errors == (Term("EPIPE", ERROR),)
    assert len(terms) == 7 and terms.has_topic
    assert not QueryTerms().has_topic


def test_terms_keep_the_users_spelling():
    # Folding decides stopwords only; the searched text is exactly what was typed.
    assert pairs("Perché la Sessione è LENTA?") == [("Sessione", KEYWORD), ("LENTA", KEYWORD)]


# --------------------------------------------------------------------- hostile input


HOSTILE = [
    'name" OR secret*',
    "NEAR(",
    "^",
    '"unbalanced quote and `backtick',
    "```",
    "``",
    '""',
    "\x00\x01\x02 control \x1b[31m chars \x7f",
    "🔥🔥 emoji 🚀 only 👍",
    "a" * 20_000,
    "`" * 5000,
    '"' * 5000,
    "-" * 5000,
    "/" * 5000,
    "a/" * 5000,
    "x." * 5000,
    "C:\\" * 3000,
    "\ud800 lone surrogate",
]


@pytest.mark.parametrize("message", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_never_raises_and_stays_bounded(message):
    terms = extract_terms(message)
    assert len(terms) <= MAX_TERMS
    for term in terms:
        assert term.text.strip() and len(term.text) <= 200
        assert not any(ord(char) < 32 for char in term.text)


def test_random_20kb_message_is_bounded():
    rng = random.Random(20)
    alphabet = "abcXYZ_-./\\:`\"'«»“” \n\t(){}^*0123456789èé配置🔥\x00\x07"
    message = "".join(rng.choice(alphabet) for _ in range(20_000))
    assert len(extract_terms(message)) <= MAX_TERMS


def test_term_count_is_capped_keeping_specific_kinds():
    message = " ".join(f"word{n}x" for n in range(100)) + " `the_identifier`"
    terms = extract_terms(message)
    assert len(terms) == MAX_TERMS
    assert terms.terms[0] == Term("the_identifier", IDENTIFIER)


def test_non_string_input_has_no_terms():
    assert not extract_terms(None).has_topic  # type: ignore[arg-type]


def test_skipping_passes_by_their_substrings_changes_no_result(monkeypatch):
    """The cheap ``in`` tests only skip passes that could not match (real messages)."""
    import json

    from lookback.query.text import terms as module
    from tests.support import fixture_path

    messages = ["see src\\utils\\a.py, C:\\x\\y.txt, HTTP 404, SIGKILL, E0502, `a`",
                'run --dry-run -n "quoted" «tipo» foo.bar() TypeError SQLITE_BUSY ENOENT']
    for name in ("before-compaction.jsonl", "large-session.jsonl"):
        for line in fixture_path(name).read_text().splitlines():
            entry = json.loads(line)
            content = entry.get("message", {}).get("content") if entry.get(
                "type") == "message" else None
            if isinstance(content, list):
                content = " ".join(b.get("text", "") for b in content if isinstance(b, dict)
                                   and isinstance(b.get("text"), str))
            if isinstance(content, str) and content:
                messages.append(content[:5000])
    fast = [module.extract_terms(message) for message in messages]
    monkeypatch.setattr(module, "_PASSES",
                        tuple((pattern, take, None) for pattern, take, _ in module._PASSES))
    assert [module.extract_terms(message) for message in messages] == fast
