"""Text: what a user message is about and where a stored text matches it.

Normalizing and folding, stopwords, term extraction, a tool call's subjects, FTS5 query
building and match verification (docs/specification.md steps 2-4 and 7-8). Knows no index.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lookback.query import lazy_exports

# What a type checker sees (``X as X``: re-exported); at run time each name loads on
# first use (``_EXPORTS``). tests/test_layers.py keeps the two the same.
if TYPE_CHECKING:
    from lookback.query.text.dates import TimeSpan as TimeSpan
    from lookback.query.text.dates import time_spans as time_spans
    from lookback.query.text.forms import italian_stem as italian_stem
    from lookback.query.text.forms import message_language as message_language
    from lookback.query.text.fts_query import FtsQuery as FtsQuery
    from lookback.query.text.fts_query import build_fts_query as build_fts_query
    from lookback.query.text.fts_query import build_phrase_query as build_phrase_query
    from lookback.query.text.fts_query import compile_query as compile_query
    from lookback.query.text.fts_query import folded_phrase as folded_phrase
    from lookback.query.text.fts_query import folded_tokens as folded_tokens
    from lookback.query.text.fts_query import form_prefix as form_prefix
    from lookback.query.text.fts_query import phrase_tokens as phrase_tokens
    from lookback.query.text.fts_query import stemmed_phrase as stemmed_phrase
    from lookback.query.text.fts_query import stemmed_tokens as stemmed_tokens
    from lookback.query.text.matching import Match as Match
    from lookback.query.text.matching import PhraseFinder as PhraseFinder
    from lookback.query.text.matching import TermMatcher as TermMatcher
    from lookback.query.text.matching import find_literal as find_literal
    from lookback.query.text.normalize import FoldedText as FoldedText
    from lookback.query.text.normalize import fold as fold
    from lookback.query.text.stopwords import is_stopword as is_stopword
    from lookback.query.text.terms import ERROR as ERROR
    from lookback.query.text.terms import ERROR_KINDS as ERROR_KINDS
    from lookback.query.text.terms import FILE_KINDS as FILE_KINDS
    from lookback.query.text.terms import FLAG as FLAG
    from lookback.query.text.terms import IDENTIFIER as IDENTIFIER
    from lookback.query.text.terms import KEYWORD as KEYWORD
    from lookback.query.text.terms import LITERAL_KINDS as LITERAL_KINDS
    from lookback.query.text.terms import PATH as PATH
    from lookback.query.text.terms import PHRASE as PHRASE
    from lookback.query.text.terms import SYMBOL_KINDS as SYMBOL_KINDS
    from lookback.query.text.terms import TECHNOLOGY as TECHNOLOGY
    from lookback.query.text.terms import QueryTerms as QueryTerms
    from lookback.query.text.terms import Term as Term
    from lookback.query.text.terms import extract_terms as extract_terms
    from lookback.query.text.terms import names as names
    from lookback.query.text.tool_calls import ToolQuery as ToolQuery
    from lookback.query.text.tool_calls import tool_query as tool_query

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "extract_terms": "terms",
    "names": "terms",
    "QueryTerms": "terms",
    "Term": "terms",
    "IDENTIFIER": "terms",
    "PATH": "terms",
    "ERROR": "terms",
    "FLAG": "terms",
    "PHRASE": "terms",
    "TECHNOLOGY": "terms",
    "KEYWORD": "terms",
    "LITERAL_KINDS": "terms",
    "FILE_KINDS": "terms",
    "SYMBOL_KINDS": "terms",
    "ERROR_KINDS": "terms",
    "build_fts_query": "fts_query",
    "build_phrase_query": "fts_query",
    "compile_query": "fts_query",
    "FtsQuery": "fts_query",
    "folded_tokens": "fts_query",
    "folded_phrase": "fts_query",
    "stemmed_tokens": "fts_query",
    "stemmed_phrase": "fts_query",
    "form_prefix": "fts_query",
    "phrase_tokens": "fts_query",
    "message_language": "forms",
    "italian_stem": "forms",
    "TermMatcher": "matching",
    "Match": "matching",
    "PhraseFinder": "matching",
    "find_literal": "matching",
    "FoldedText": "normalize",
    "fold": "normalize",
    "TimeSpan": "dates",
    "time_spans": "dates",
    "is_stopword": "stopwords",
    "tool_query": "tool_calls",
    "ToolQuery": "tool_calls",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
