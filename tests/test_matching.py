"""Match verification (docs/specification.md steps 7–8).

Which terms a stored entry's text really contains.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from lookback.query.text import matching
from lookback.query.text.fts_query import token_spans
from lookback.query.text.matching import Match, PhraseFinder, TermMatcher, find_literal
from lookback.query.text.normalize import FoldedText, fold
from lookback.query.text.terms import ERROR, IDENTIFIER, KEYWORD, PATH, PHRASE, Term, extract_terms
from tests.support import fixture_message_texts


def find_keyword(text: str, keyword: str) -> int | None:
    """Where ``keyword`` matches ``text`` folded (what ``TermMatcher`` does for a keyword)."""
    found = TermMatcher([Term(keyword, KEYWORD)]).match(text)
    return found[0].position if found else None


def matched_terms(text: str, terms) -> list[tuple[Term, int]]:
    return [(found.term, found.position) for found in TermMatcher(terms).match(text)]


# An assistant reply in the style of the fixtures (before-compaction.jsonl).
ENTRY = (
    "I moved `parse_config_v2` into src/utils/config.ts. The old parse_config() stays for "
    "the CLI. Error: ENOENT: no such file or directory, open 'package.json'. "
    "La configurazione è in Perché.md"
)


def test_literal_is_case_sensitive():
    assert find_literal(ENTRY, "ENOENT") == ENTRY.index("ENOENT")
    assert find_literal(ENTRY, "enoent") is None


def test_literal_is_not_found_glued_inside_a_longer_identifier():
    assert find_literal("parse_config_v2 only", "parse_config") is None
    assert find_literal("myparse_config", "parse_config") is None
    # the first free-standing occurrence wins
    assert find_literal(ENTRY, "parse_config") == ENTRY.index("parse_config()")


def test_literal_with_punctuation_at_its_ends():
    assert find_literal(ENTRY, "src/utils/config.ts") == ENTRY.index("src/utils/config.ts")
    assert find_literal("use --dry-run now", "--dry-run") == 4
    assert find_literal("foo.pyc", "foo.py") is None


def test_keyword_ignores_case_and_accents_on_word_boundaries():
    assert find_keyword(ENTRY, "CONFIGURAZIONE") == ENTRY.index("configurazione")
    assert find_keyword(ENTRY, "perche") == ENTRY.index("Perché")
    assert find_keyword("Il PERCHÉ della cosa", "perché") == 3


def test_keyword_prefix_inside_a_longer_word_does_not_count():
    assert find_keyword("the configuration file", "config") is None
    assert find_keyword("config_v2", "config") is None
    assert find_keyword("reconfig", "config") is None
    assert find_keyword("see Config.", "config") == 4


def test_keyword_position_maps_back_to_the_original_text():
    text = "Straße ﬁle über 配置 and then timeout"
    assert find_keyword(text, "timeout") == text.index("timeout")
    assert find_keyword(text, "file") == text.index("ﬁle")
    assert find_keyword(text, "配置") == text.index("配置")
    assert find_keyword(text, "strasse") == 0


def test_folded_text_maps_positions_after_expanding_characters():
    folded = FoldedText("ßx é")
    assert folded.folded == "ssx e"
    assert folded.original_position(folded.folded.index("x")) == 1
    assert folded.original_position(folded.folded.index("e")) == 3


def test_matcher_reports_literal_and_folded_matches_in_query_order():
    terms = extract_terms('`parse_config` fails with ENOENT in config.ts: "No such file"')
    matches = TermMatcher(terms).match(ENTRY)
    assert [(m.term.text, m.literal) for m in matches] == [
        ("parse_config", True),
        ("config.ts", True),  # inside src/utils/config.ts: "/" is not glue
        ("ENOENT", True),
        ("No such file", False),  # written "no such file": an FTS match, not exact
    ]


def test_a_literal_found_only_case_insensitively_is_not_exact():
    matcher = TermMatcher([Term("AgentSession", IDENTIFIER)])
    assert matcher.match("the agentsession class") == [
        Match(Term("AgentSession", IDENTIFIER), 4, False)
    ]
    assert matcher.match("the AgentSession class") == [
        Match(Term("AgentSession", IDENTIFIER), 4, True)
    ]


def test_phrase_words_must_be_adjacent():
    matcher = TermMatcher([Term("connection refused", PHRASE)])
    assert matcher.match("connect ECONNREFUSED: Connection\nrefused by peer")[0].position == 22
    assert matcher.match("connection was refused") == []


def test_unmatched_terms_are_absent():
    terms = [Term("SQLITE_BUSY", ERROR), Term("schermate", KEYWORD), Term("src/x.py", PATH)]
    assert matched_terms("nothing relevant here", terms) == []


def test_matched_terms_gives_term_and_position():
    terms = extract_terms("perché il timeout di redis?")
    text = "Il Timeout di Redis è 5s"
    assert [(t.text, pos) for t, pos in matched_terms(text, terms)] == [
        ("redis", text.index("Redis")),
        ("timeout", text.index("Timeout")),
    ]


def test_the_earliest_match_is_where_an_excerpt_centres():
    matcher = TermMatcher(extract_terms("ENOENT and parse_config"))
    assert min(found.position for found in matcher.match(ENTRY)) == ENTRY.index("parse_config()")
    assert matcher.match("unrelated") == []


def test_matcher_on_a_megabyte_text():
    filler = "Lorem ipsum è dolor configuration parse_config_v2 " * 20_000  # ~1 MB
    text = filler + "finally parse_config and Timeout"
    matcher = TermMatcher(extract_terms("`parse_config` timeout config"))
    found = {m.term.text: m.position for m in matcher.match(text)}
    assert found == {
        "parse_config": text.index("parse_config and"),
        "timeout": text.index("Timeout"),
    }


def test_hostile_texts_and_terms_do_not_raise():
    matcher = TermMatcher(extract_terms('name" OR secret* NEAR( ^ `x` 🔥'))
    for text in ["", "\x00\x01", "🔥" * 1000, '"' * 1000, "\ud800"]:
        matcher.match(text)
    assert find_keyword("abc", "") is None
    assert find_literal("abc", "") is None


def test_positions_map_back_through_one_to_many_and_one_to_one_folds():
    text = "Straße → ＣＯＮＦＩＧ résumé ﬁle ─ config ✓ done"
    folded = FoldedText(text)
    for word in ("config", "resume", "done", "strasse", "file"):
        position = folded.folded.find(word)
        assert position >= 0, word
        original = folded.original_position(position)
        assert fold(text[original:original + len(word) + 1]).startswith(word[:3]), word
    assert text[folded.original_position(folded.folded.find("done")):].startswith("done")


# -- PhraseFinder on texts that are not all ASCII -------------------------------------
# A phrase the lower-cased text does not hold is looked for only around the text's
# non-ASCII characters; the answer must be the whole text's tokens' (the finder with
# MAX_NEAR_SHARE below zero reads every text whole, as it did before).

def _whole_text_find(text: str, tokens: list[str]) -> int | None:
    with mock.patch.object(matching, "MAX_NEAR_SHARE", -1.0):
        return PhraseFinder(text).find(tokens)


def _sequences(text: str) -> list[list[str]]:
    """Token sequences of ``text`` (some cut at non-ASCII words), folded, plus absent ones."""
    words = [token for _, _, token in token_spans(text)]
    found = [["absentword"], ["resume"], ["naive", "cafe"]]
    for size in (1, 2, 3):
        step = max(1, len(words) // 40)
        found.extend(words[i:i + size] for i in range(0, max(0, len(words) - size + 1), step))
        found.extend(words[i:i + size] for i, word in enumerate(words)
                     if not word.isascii() and i + size <= len(words))
    return [sequence for sequence in found if sequence]


def test_a_phrase_near_non_ascii_text_is_found_where_the_whole_texts_tokens_have_it():
    texts = [
        "see the naïve café   \n\n\t   résumé here, naive cafe later",
        "x " * 400 + "Ångström unit " + "y " * 400 + "ångström",
        "no accents nearby " * 50 + "then re\u0301sume\u0301 at last",
        "a\u212a kelvin \u212avalue " + "filler " * 100 + "kvalue",
        "emoji 🎉party time 🎉 party",
        "中文 text with 漢字 and words " * 30,
        "Perché_Not and perche_not " + "z " * 300 + "perché_not",
        "long " + "-" * 2000 + " résumé " + "=" * 2000 + " writing",
    ]
    compared = 0
    for text in texts:
        for tokens in _sequences(text):
            assert PhraseFinder(text).find(tokens) == _whole_text_find(text, tokens), (
                text[:40], tokens)
            compared += 1
    assert compared > 200


def test_phrase_finding_near_non_ascii_agrees_with_the_whole_text_on_real_text():
    texts = [text for text in fixture_message_texts() if not text.isascii()]
    compared = 0
    for text in texts:
        for tokens in _sequences(text)[:60]:
            with mock.patch.object(matching, "NEAR_CHARS", 8):  # windows widened often
                assert PhraseFinder(text).find(tokens) == _whole_text_find(text, tokens), (
                    text[:40], tokens)
            compared += 1
    assert len(texts) > 20 and compared > 1000


_ALPHABET = "ab cé\u0301-_.\n\t€🎉漢\u212aKİ1"


@settings(max_examples=150, deadline=None)
@given(text=st.text(alphabet=_ALPHABET, max_size=120),
       picks=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=3))
def test_phrase_finding_near_non_ascii_agrees_with_the_whole_text(text, picks):
    words = [token for _, _, token in token_spans(text)] or ["ab"]
    start = picks[0] % len(words)
    tokens = words[start:start + len(picks)]
    with mock.patch.object(matching, "NEAR_CHARS", 2):  # windows widened often
        assert PhraseFinder(text).find(tokens) == _whole_text_find(text, tokens)
