"""Text: what a user message is about and where a stored text matches it.

Normalizing and folding, stopwords, term extraction, a tool call's subjects, FTS5 query
building and match verification (docs/specification.md steps 2-4 and 7-8). Knows no index.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from lookback.query import lazy_exports

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "extract_terms": "terms",
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
