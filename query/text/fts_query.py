"""FTS5 MATCH expressions that no user text can break (docs/specification.md, steps 3-4).

FTS5 has a query language (``OR``, ``NOT``, ``NEAR(...)``, ``*``, ``^``, ``col:``,
parentheses); user text must never reach it as syntax. So every term becomes one
FTS5 *string*: its tokens, as the index tokenizer would cut them, joined by spaces
and wrapped in double quotes (any ``"`` inside is doubled, though tokens never hold
one). Inside a string FTS5 sees only tokens, and a string of several tokens is a
phrase: ``src/main.ts`` becomes ``"src main ts"``, which matches the path as written.

Terms that tokenize to nothing (``^``, ``(``, emoji) are dropped. The token rule
mirrors the index tokenizer ``unicode61 remove_diacritics 2 tokenchars '_'``
(``index.schema.FTS_TOKENIZE``): letters, numbers and private-use characters, plus
``_``; FTS5 itself folds case and diacritics.
"""

from __future__ import annotations

import regex
from lookback.query.text.terms import MAX_TERMS, QueryTerms

#: A token as ``unicode61 tokenchars '_'`` cuts it (categories L*, N*, Co, plus ``_``).
_FTS_TOKEN = regex.compile(r"[\p{L}\p{N}\p{Co}_]+")
#: A phrase longer than this many tokens is cut: a prefix still finds the text.
MAX_PHRASE_TOKENS = 16
#: Tokens longer than this cannot be in the index usefully; such terms are dropped.
MAX_TOKEN_CHARS = 100


def fts_tokens(text: str) -> list[str]:
    """The tokens the index tokenizer would see in ``text`` (before case folding)."""
    return _FTS_TOKEN.findall(text)


def quote_fts_string(text: str) -> str:
    """``text`` as an FTS5 string literal: in double quotes, inner quotes doubled."""
    return '"' + text.replace('"', '""') + '"'


def _phrase(text: str) -> str | None:
    tokens = fts_tokens(text)[:MAX_PHRASE_TOKENS]
    if not tokens or any(len(token) > MAX_TOKEN_CHARS for token in tokens):
        return None
    return quote_fts_string(" ".join(tokens))


def build_fts_query(terms: QueryTerms, max_terms: int = MAX_TERMS) -> str | None:
    """An FTS5 ``OR`` of every term as a quoted string or phrase; ``None`` if none is left.

    >>> from query.terms import extract_terms
    >>> build_fts_query(extract_terms('why does `src/main.ts` say "name OR secret*"?'))
    '"src main ts" OR "name OR secret"'
    """
    strings: list[str] = []
    seen: set[str] = set()
    for term in terms:
        string = _phrase(term.text)
        if string is None or string.casefold() in seen:
            continue
        seen.add(string.casefold())
        strings.append(string)
        if len(strings) == max_terms:
            break
    return " OR ".join(strings) if strings else None


def build_phrase_query(literal: str) -> str | None:
    """The FTS5 phrase that pre-filters rows for a case-sensitive literal search.

    Every row containing ``literal`` as written matches this phrase (FTS5 ignores
    case and punctuation), so the caller runs it first and then confirms each row
    with ``instr`` or ``query.matching.find_literal``. ``None`` if the literal has no
    token to search for.

    >>> build_phrase_query("parse_config")
    '"parse_config"'
    >>> build_phrase_query("HTTP 404")
    '"HTTP 404"'
    """
    return _phrase(literal)
