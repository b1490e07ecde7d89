"""Search: the retrieval pipeline over one project's committed index.

Reading indexes (connections, memos), the steps' shared types (``types``), candidate
SQL, ranking, the steps themselves (``pipeline``), automatic retrieval, explicit history
search, and the wire contract's request and answer types.

The public API is ``_EXPORTS`` below (the rule is in ``lookback.query``'s docstring).
"""

from __future__ import annotations

from lookback.query import lazy_exports

#: Public name -> the module of this package that defines it.
_EXPORTS = {
    "Retriever": "retrieve",
    "HistorySearch": "history",
    "IndexReader": "reader",
    "NotIndexed": "reader",
    "RequestError": "request",
    "RetrievalRequest": "request",
    "parse_request": "request",
    "PlanRequest": "request",
    "parse_plan": "request",
    "check_depth": "request",
    "MAX_DEPTH": "request",
    "session_names": "request",
    "SessionNames": "request",
    "Named": "request",
    "SearchRequest": "request",
    "parse_search": "request",
    "SourceRequest": "request",
    "parse_source": "request",
    "pin": "request",
    "encode_request": "request",
    "optional_text": "request",
    "Row": "types",
    "Scope": "types",
    "Searched": "types",
    "Ranked": "types",
    "rows_by_rowid": "candidates",
    "Diagnostics": "answers",
    "RetrieveAnswer": "answers",
    "Evidence": "answers",
    "EvidenceMessage": "answers",
    "TextBlock": "answers",
    "Withheld": "answers",
    "FreshnessOutcome": "answers",
    "SearchAnswer": "answers",
    "SearchResult": "answers",
    "SourceAnswer": "answers",
    "SourceEntry": "answers",
    "PlanAnswer": "answers",
    "Decision": "answers",
    "Included": "answers",
    "PlanExcluded": "answers",
    "PlanTokens": "answers",
    "Answer": "answers",
    "encode_answer": "answers",
    "answer_dict": "answers",
    "row_parts": "ranking",
}
__all__ = sorted(_EXPORTS)
__getattr__ = lazy_exports(__name__, _EXPORTS)
