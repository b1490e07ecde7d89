"""FTS5 MATCH expressions that no user text can break (docs/specification.md, steps 3-4).

FTS5 has a query language (``OR``, ``NOT``, ``NEAR(...)``, ``*``, ``^``, ``col:``,
parentheses); user text must never reach it as syntax. So every term becomes one
FTS5 *string*: its tokens, as the index tokenizer cuts them, joined by spaces and
wrapped in double quotes (any ``"`` inside is doubled, though tokens never hold
one). Inside a string FTS5 sees only tokens, and a string of several tokens is a
phrase: ``src/main.ts`` becomes ``"src main ts"``, which matches the path as written.

Tokens come from SQLite's own tokenizer (``index.schema.WORD_TOKENIZE``, called
through APSW's ``Connection.fts5_tokenizer``), never from a copy of its rules: a
decomposed (NFD) ``résumé`` is one token to the index, so it is one token here.
Terms that tokenize to nothing (``^``, ``(``, emoji) are dropped. The index table
adds Porter stemming to those words (``FTS_TOKENIZE``), and FTS5 stems a query's
strings the same way, so a quoted keyword matches its word forms; ``stemmed_tokens``
gives those stems, for finding a form match in a text.

Porter knows English only. A keyword with an Italian stem (``Term.stem``, see
``query.text.forms``) becomes an FTS5 *prefix* string instead, ``"scherm"*``: the
part its Snowball stem shares with its own Porter token, which FTS5 stems again and
matches against the start of every token the index holds (``form_prefix``; the star
is the only syntax, outside the quotes). So ``schermate`` finds ``schermata`` and
``schermate``, ``sessione`` finds ``sessioni`` and ``sessions``, without a reindex.

Each phrase of the ``OR`` expression is numbered (FTS5 numbers them left to right);
``FtsQuery.term_phrases`` says which phrase stands for which term, so a row's
matching phrases (``query.search.searches``) tell which terms it matches.
"""

from __future__ import annotations

import os.path
import shlex
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import cast

import apsw

from lookback.index.schema import FTS_TOKENIZE, WORD_TOKENIZE
from lookback.query.text.forms import MIN_STEM_CHARS
from lookback.query.text.terms import MAX_TERMS, QueryTerms, Term

#: A term is at most ``terms.MAX_TERM_CHARS`` (200) characters, so at most 100 tokens:
#: no term's phrase is ever cut, and a phrase hit is a hit of the whole term.
MAX_PHRASE_TOKENS = 128
#: Tokens longer than this cannot be in the index usefully; such terms are dropped.
MAX_TOKEN_CHARS = 100


class _Tokenizer:
    """One of SQLite's tokenizers (``WORD_TOKENIZE``, ``FTS_TOKENIZE``), on a private
    connection."""

    def __init__(self, spec: str) -> None:
        name, *args = shlex.split(spec)
        self._connection = apsw.Connection(":memory:")
        self._tokenize = self._connection.fts5_tokenizer(name, args)
        self._lock = threading.Lock()

    def spans(self, text: str, reason: int = apsw.FTS5_TOKENIZE_DOCUMENT
              ) -> list[tuple[int, int, str]]:
        """``(start, end, folded token)`` per token; offsets into ``text``'s UTF-8 bytes."""
        data = text.encode("utf-8", "replace")  # lone surrogates become "?", a separator
        with self._lock:
            found = self._tokenize(data, reason, None, include_colocated=False)
        # apsw types the result for every include_* choice; offsets on, colocated off,
        # each item is (start, end, token)
        return [(start, end, token)
                for start, end, token in cast("Iterable[tuple[int, int, str]]", found)]


_TOKENIZER = _Tokenizer(WORD_TOKENIZE)
_STEMMER = _Tokenizer(FTS_TOKENIZE)


def fts_tokens(text: str) -> list[str]:
    """The tokens the index tokenizer sees in ``text``, as written (before folding).

    >>> fts_tokens("src/main.ts")
    ['src', 'main', 'ts']
    """
    data = text.encode("utf-8", "replace")
    return [data[start:end].decode("utf-8", "replace")
            for start, end, _ in _TOKENIZER.spans(text, apsw.FTS5_TOKENIZE_QUERY)]


def folded_tokens(text: str) -> list[str]:
    """The tokens of ``text`` as the index stores them (case and diacritics folded).

    >>> folded_tokens("Perché_Not résumé")
    ['perche_not', 'resume']
    """
    return [token for _, _, token in _TOKENIZER.spans(text, apsw.FTS5_TOKENIZE_QUERY)]


def stemmed_tokens(text: str) -> list[str]:
    """The tokens of ``text`` as the index table stores them: folded, then stemmed.

    >>> stemmed_tokens("Reminders, writing résumés")
    ['remind', 'write', 'resum']
    """
    return [token for _, _, token in _STEMMER.spans(text, apsw.FTS5_TOKENIZE_QUERY)]


def stemmed_spans(text: str) -> list[tuple[int, int, str]]:
    """Every stemmed token of a stored text with its UTF-8 byte offsets."""
    return _STEMMER.spans(text)


@lru_cache(maxsize=4096)
def stemmed_phrase(text: str) -> tuple[str, ...]:
    """``stemmed_tokens``, memoized (terms recur across messages)."""
    return tuple(stemmed_tokens(text))


@lru_cache(maxsize=4096)
def folded_phrase(text: str) -> tuple[str, ...]:
    """``folded_tokens``, memoized (terms recur across messages): what a phrase finder needs."""
    return tuple(folded_tokens(text))


def token_spans(text: str) -> list[tuple[int, int, str]]:
    """Every token of a stored text with its UTF-8 byte offsets (see ``_Tokenizer``)."""
    return _TOKENIZER.spans(text)


def quote_fts_string(text: str) -> str:
    """``text`` as an FTS5 string literal: in double quotes, inner quotes doubled."""
    return '"' + text.replace('"', '""') + '"'


@lru_cache(maxsize=4096)
def _phrase(text: str) -> str | None:
    """A term's FTS5 string, memoized (terms recur across messages)."""
    tokens = fts_tokens(text)[:MAX_PHRASE_TOKENS]
    if not tokens or any(len(token) > MAX_TOKEN_CHARS for token in tokens):
        return None
    return quote_fts_string(" ".join(tokens))


def phrase_tokens(phrase: str) -> list[str]:
    """The tokens of a quoted query phrase (``_phrase``), as written; a prefix phrase's
    (``"scherm"*``, an Italian keyword's forms, ``form_prefix``) keeps its star."""
    if phrase.endswith("*"):
        return [phrase[1:-2].replace('""', '"') + "*"]  # one token
    return phrase[1:-1].replace('""', '"').split(" ")


@lru_cache(maxsize=4096)
def _prefix_of(text: str, stem: str) -> tuple[str, str] | None:
    own = stemmed_tokens(text)
    if len(own) != 1 or len(folded_tokens(text)) != 1:
        return None  # a keyword is one token; anything else matches as written
    written = os.path.commonprefix([stem, own[0]])
    if len(written) < MIN_STEM_CHARS:
        return None
    searched = _STEMMER.spans(written, apsw.FTS5_TOKENIZE_QUERY | apsw.FTS5_TOKENIZE_PREFIX)
    if len(searched) != 1 or not own[0].startswith(searched[0][2]):
        return None  # Porter would turn the prefix into one the word itself lacks
    return written, searched[0][2]


def form_prefix(term: Term) -> str | None:
    """The start of the index tokens an Italian keyword's forms match, if it has one.

    The term's Snowball stem, cut to what it shares with the word's own Porter token
    and then stemmed by Porter as FTS5 stems a prefix query, so every row FTS5 finds
    for the term's prefix string holds a token starting with it, the word's own
    token among them. None: the term has no stem, or no prefix that is safe.

    >>> from lookback.query.text.terms import Term
    >>> form_prefix(Term("schermate", "keyword", "scherm"))
    'scherm'
    """
    if term.stem is None:
        return None
    found = _prefix_of(term.text, term.stem)
    return None if found is None else found[1]


def _term_string(term: Term) -> str | None:
    if term.stem is not None:
        found = _prefix_of(term.text, term.stem)
        if found is not None:
            return quote_fts_string(found[0]) + "*"
    return _phrase(term.text)


@dataclass(frozen=True)
class FtsQuery:
    """An ``OR`` of quoted phrases, and which phrase each term of the query became."""

    expression: str
    phrases: tuple[str, ...]
    #: Per term (in ``QueryTerms`` order): its phrase's number, or None (no tokens).
    term_phrases: tuple[int | None, ...]

    def phrase_of(self, index: int) -> str | None:
        """The quoted phrase of the ``index``-th term, if it has one."""
        number = self.term_phrases[index]
        return None if number is None else self.phrases[number]


def compile_query(terms: QueryTerms, max_terms: int = MAX_TERMS) -> FtsQuery | None:
    """The query's phrases (equal phrases once, up to ``max_terms``); None if none is left."""
    phrases: list[str] = []
    numbers: dict[str, int] = {}
    term_phrases: list[int | None] = []
    for term in terms:
        string = _term_string(term)
        key = string.casefold() if string is not None else None
        if key is not None and key not in numbers and len(phrases) < max_terms:
            numbers[key] = len(phrases)
            phrases.append(string)  # type: ignore[arg-type]
        term_phrases.append(None if key is None else numbers.get(key))
    if not phrases:
        return None
    return FtsQuery(" OR ".join(phrases), tuple(phrases), tuple(term_phrases))


def build_fts_query(terms: QueryTerms, max_terms: int = MAX_TERMS) -> str | None:
    """An FTS5 ``OR`` of every term as a quoted string or phrase; ``None`` if none is left.

    >>> from lookback.query.text.terms import extract_terms
    >>> build_fts_query(extract_terms('why does `src/main.ts` say "name OR secret*"?'))
    '"src main ts" OR "name OR secret"'
    """
    query = compile_query(terms, max_terms)
    return None if query is None else query.expression


def build_phrase_query(literal: str) -> str | None:
    """The FTS5 phrase that pre-filters rows for a case-sensitive literal search.

    Every row containing ``literal`` as written matches this phrase (FTS5 ignores
    case and punctuation), so the caller runs it first and then confirms each row
    with ``query.text.matching.find_literal``. ``None`` if the literal has no token to
    search for.

    >>> build_phrase_query("parse_config")
    '"parse_config"'
    >>> build_phrase_query("HTTP 404")
    '"HTTP 404"'
    """
    return _phrase(literal)
